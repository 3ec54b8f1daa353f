"""The MPI backend (docs/mpi.md): libOpenMMGraphMPI through openmmgraph.mpi, in
real multi-process runs (``mpiexec -n 2`` and ``-n 3`` on small worker scripts).

- set-up: rank and size, initialize idempotent, world() before initialize is an error;
- the int64 sum: correct and bitwise the same on every rank, also when split
  into chunks (OMMGRAPH_MPI_ALLREDUCE_CHUNK, a test-only override of the
  INT_MAX chunk size: the same loop that handles counts above 2^31);
- the ordered double sum: the rank-order sum, bitwise the same on every rank;
- the communicate engine through the C interface: forward / reverse of float32
  and float64 tables with padded rows (padding untouched), ghosts in any
  order, duplicates and periodic images (ghosts of the own rank), a rank
  without ghosts; reverse sums bitwise equal to the documented order;
- the engine under torch.ops.openmmgraph.communicate: the two-round
  message-passing model of test_communicate.py split over the ranks gives the
  one-domain per-particle energies bitwise, gradients to 1e-12, and bitwise the
  gradients of the thread engine SimulatedDomains (the same summation order);
- errors are messages on every rank, never hangs: a bad handle, lists of
  different lengths / bad owners on one rank only, a wrong buffer or width on
  one rank; a worker that fails on one rank fails the job (mpiexec status),
  an exchange or a sum nobody joins ends at OMMGRAPH_MPI_TIMEOUT with MPI_Abort.

On a GPU machine (pytest -m gpu): CUDA tensors through the staging path
equal the host path bitwise (not run yet: written without device time).

Skipped when the library (openmm-graph built without MPI) or mpiexec is
missing.  Every mpiexec run has a timeout and is killed with its process
group if it passes it.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import textwrap
import time
from pathlib import Path

import pytest

mpi = pytest.importorskip("openmmgraph.mpi")

TESTS_DIR = str(Path(__file__).resolve().parent)


def _find_mpiexec():
    """$OPENMMGRAPH_TEST_MPIEXEC, else the mpiexec of this environment first (the one of the MPI the library was built against)."""
    if os.environ.get("OPENMMGRAPH_TEST_MPIEXEC"):
        return os.environ["OPENMMGRAPH_TEST_MPIEXEC"]
    for folder in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        candidate = os.path.join(folder, "mpiexec")
        if os.path.exists(candidate):
            return candidate
    return shutil.which("mpiexec")


@pytest.fixture(scope="module")
def mpiexec():
    if not mpi.available():
        try:
            mpi._library()
        except mpi.MPIUnavailableError as error:
            pytest.skip(f"the MPI backend is not available: {error}")
    path = _find_mpiexec()
    if not path:
        pytest.skip("no mpiexec (pip install mpich)")
    return path


def run_workers(mpiexec, tmp_path, n, body, timeout=90, env=None, name="worker.py", args=()):
    """Run ``body`` (Python source) on n ranks, with ``args`` as its sys.argv[1:]; returns (status, output, {rank: result dict}).  A worker
    reports with report(dict) (a JSON file per rank: the ranks' output lines may interleave).  Kills the whole process group after `timeout` seconds (a failure)."""
    script = tmp_path / name
    prelude = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {TESTS_DIR!r})
        import numpy as np
        from openmmgraph import mpi

        def communicateLibrary():
            # The libOpenMMGraphCommunicate that the MPI library uses, through ctypes: the one copy in this process
            # (import openmmgraph loads the installed one with the plugins, and the MPI library's dependency
            # resolves to it even when OPENMMGRAPH_MPI_LIBRARY names a library built elsewhere).
            import ctypes
            mpi._library()
            with open("/proc/self/maps") as maps:
                paths = {{line.split()[-1] for line in maps if line.rstrip().endswith("/libOpenMMGraphCommunicate.so")}}
            assert len(paths) == 1, paths
            return ctypes.CDLL(paths.pop())

        def report(result):
            rank, _ = mpi.world()
            with open({str(tmp_path)!r} + f"/result-{{rank}}.json", "w") as file:
                json.dump(dict(result, rank=rank), file)
        """
    )
    script.write_text(prelude + textwrap.dedent(body))
    environment = dict(os.environ)
    if os.geteuid() == 0:  # Open MPI's mpiexec refuses root unless told (containers, the GPU machine)
        environment.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    # Open MPI refuses more ranks than cores unless told (4.x: OMPI_MCA_..., 5.x: PRTE_MCA_...); MPICH ignores these.
    environment.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")
    environment.setdefault("PRTE_MCA_rmaps_default_mapping_policy", ":oversubscribe")
    environment.update(env or {})
    start = time.monotonic()
    process = subprocess.Popen(
        [mpiexec, "-n", str(n), sys.executable, str(script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=environment,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"mpiexec -n {n} {name} did not finish within {timeout} s (killed):\n{output[-4000:]}")
    elapsed = time.monotonic() - start
    results = {}
    for path in tmp_path.glob("result-*.json"):
        result = json.loads(path.read_text())
        results[result["rank"]] = result
    print(f"\nmpiexec -n {n} {name}: status {process.returncode}, {elapsed:.1f} s")
    return process.returncode, output, results


# --- set-up and reductions -------------------------------------------------------------------------------

BASICS = """
import hashlib, os
result = {}
try:
    mpi.world()
    result["world_before"] = ""
except mpi.MPIError as error:
    result["world_before"] = str(error)
mpi.initialize()
mpi.initialize()  # idempotent
rank, size = mpi.world()
result["size"] = size

def values_of(r):
    return np.random.default_rng(100 + r).integers(-2**40, 2**40, size=1000, dtype=np.int64)

expected = sum(values_of(r) for r in range(size))
sums = {}
for chunk in ["", "1", "7", "999", "1000"]:
    os.environ["OMMGRAPH_MPI_ALLREDUCE_CHUNK"] = chunk
    summed = mpi.allreduce_sum_int64(values_of(rank).copy())
    sums[chunk] = bool(np.array_equal(summed, expected))
    if chunk == "7":
        result["int64_hash"] = hashlib.sha256(summed.tobytes()).hexdigest()
os.environ.pop("OMMGRAPH_MPI_ALLREDUCE_CHUNK")
result["int64_correct"] = sums
empty = mpi.allreduce_sum_int64(np.zeros(0, dtype=np.int64))
result["int64_empty"] = empty.size
try:
    mpi.allreduce_sum_int64(np.zeros(3, dtype=np.int32))
except TypeError as error:
    result["int64_wrong_dtype"] = str(error)

value = 0.1 * (rank + 1) + 1e-17 * rank ** 3 + (1e8 if rank == 1 else 0.0)
total = mpi.allreduce_sum_double_ordered(value)
ordered = 0.1 * 1
for r in range(1, size):
    ordered = ordered + (0.1 * (r + 1) + 1e-17 * r ** 3 + (1e8 if r == 1 else 0.0))
result["double_total"] = total.hex()
result["double_expected"] = ordered.hex()

import ctypes
try:
    mpi._call(mpi._library().ommgraph_mpi_communicator_destroy, ctypes.c_int64(987654))
except mpi.MPIError as error:
    result["bad_handle"] = str(error)
report(result)
"""


@pytest.mark.parametrize("ranks", [2, 3])
def test_world_and_reductions(mpiexec, tmp_path, ranks):
    status, output, results = run_workers(mpiexec, tmp_path, ranks, BASICS)
    assert status == 0, output
    assert sorted(results) == list(range(ranks)), output
    for r in results.values():
        assert r["size"] == ranks
        assert "MPI is not initialized" in r["world_before"]
        assert all(r["int64_correct"].values()), r["int64_correct"]
        assert r["int64_empty"] == 0
        assert "expected a numpy.int64 array" in r["int64_wrong_dtype"]
        assert r["double_total"] == r["double_expected"]
        assert "handle 987654 was not made by ommgraph_mpi_communicator_create" in r["bad_handle"]
    # Bitwise the same on every rank.
    assert len({r["int64_hash"] for r in results.values()}) == 1
    assert len({r["double_total"] for r in results.values()}) == 1


# --- the engine through the C interface ------------------------------------------------------------------

EXCHANGE = """
import ctypes
from openmmgraph import mpi

class Buffer(ctypes.Structure):  # OMMGraphCommBuffer
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("deviceType", ctypes.c_int32),
                ("deviceIndex", ctypes.c_int32), ("reserved", ctypes.c_int32), ("numOwned", ctypes.c_int64),
                ("numGhost", ctypes.c_int64), ("numFeatures", ctypes.c_int64), ("rowStride", ctypes.c_int64),
                ("stream", ctypes.c_void_p)]

comm = communicateLibrary()
comm.ommgraph_communicate_forward.argtypes = [ctypes.c_int64, ctypes.POINTER(Buffer)]
comm.ommgraph_communicate_reverse.argtypes = [ctypes.c_int64, ctypes.POINTER(Buffer)]
comm.ommgraph_communicator_last_error.restype = ctypes.c_char_p

mpi.initialize()
rank, size = mpi.world()
FEATURES, STRIDE, PAD = 3, 5, -7.0

def owned_count(r):
    return 4 + r

def ghosts_of(r):
    # Ghosts of every rank (the own one: periodic images), duplicates, in shuffled order; the last rank has none.
    if r == size - 1:
        return []
    rng = np.random.default_rng(10 + r)
    ghosts = [(s, int(row)) for s in range(size) for row in rng.integers(0, owned_count(s), size=3 + s)]
    ghosts.append(ghosts[0])
    return [ghosts[i] for i in rng.permutation(len(ghosts))]

def owned_values(r, dtype):
    n = owned_count(r)
    return (1000.0 * r + 10.0 * np.arange(n)[:, None] + np.arange(FEATURES)[None, :] + 0.1).astype(dtype)

def ghost_values(r, dtype):
    g = len(ghosts_of(r))
    return ((r + 1) * 0.3 + 0.7 * np.arange(g)[:, None] + 0.11 * np.arange(FEATURES)[None, :]).astype(dtype)

def table(r, dtype, ghosts):
    n, g = owned_count(r), len(ghosts_of(r))
    t = np.full((n + g, STRIDE), PAD, dtype=dtype)
    t[:n, :FEATURES] = owned_values(r, dtype)
    t[n:, :FEATURES] = ghosts
    return t

def call(function, handle, t, n, dtype, features=FEATURES):
    b = Buffer(t.ctypes.data, 1 if dtype == np.float64 else 0, 1, 0, 0, n, t.shape[0] - n, features, STRIDE, None)
    status = function(handle, ctypes.byref(b))
    return status, (comm.ommgraph_communicator_last_error() or b"").decode()

mine = ghosts_of(rank)
n = owned_count(rank)
result = {"ghosts": len(mine)}
with mpi.Communicator([s for s, _ in mine], [row for _, row in mine], n) as engine:
    for dtype in (np.float64, np.float32):
        key = np.dtype(dtype).name
        # forward: ghosts := owners' rows; owned rows and the padding untouched.
        t = table(rank, dtype, np.nan)
        status, error = call(comm.ommgraph_communicate_forward, engine.handle, t, n, dtype)
        expected = table(rank, dtype, 0)
        for g, (s, row) in enumerate(mine):
            expected[n + g, :FEATURES] = owned_values(s, dtype)[row]
        result["forward_" + key] = [status, error, bool(np.array_equal(t, expected))]
        # reverse: owners += ghosts (source ranks ascending, their ghosts ascending), ghosts := 0.
        t = table(rank, dtype, ghost_values(rank, dtype))
        status, error = call(comm.ommgraph_communicate_reverse, engine.handle, t, n, dtype)
        expected = table(rank, dtype, 0)
        for s in range(size):
            contributions = ghost_values(s, dtype)
            for g, (owner, row) in enumerate(ghosts_of(s)):
                if owner == rank:
                    expected[row, :FEATURES] = expected[row, :FEATURES] + contributions[g]
        result["reverse_" + key] = [status, error, bool(np.array_equal(t, expected))]
    # A wrong split on the last rank only: every rank fails, with that rank's message.
    t = table(rank, np.float64, 0)
    wrongOwned = n - 1 if rank == size - 1 else n
    result["wrong_split"] = call(comm.ommgraph_communicate_forward, engine.handle, t, wrongOwned, np.float64)
    # Rows of different widths on different ranks.
    result["wrong_width"] = call(comm.ommgraph_communicate_forward, engine.handle, t, n, np.float64, FEATURES - (rank == 0))
    # And the engine still works.
    t = table(rank, np.float64, np.nan)
    result["after_errors"] = call(comm.ommgraph_communicate_forward, engine.handle, t, n, np.float64)
    handle = engine.handle
result["after_destroy"] = call(comm.ommgraph_communicate_forward, handle, table(rank, np.float64, 0), n, np.float64)

# Wrong lists on one rank only: every rank fails (no hang).
for case, lists in {
    "lengths": ([0, 0], [0]),
    "owner_rank": ([size + 2], [0]),
    "owner_row": ([0], [owned_count(0) + 5]),
    "fractional": ([0.9], [1.7]),  # never truncated to 0 and 1
    "huge_num_owned": ([], [], 2**64 + n),  # never wrapped to n by ctypes
}.items():
    try:
        if rank == 1:
            mpi.Communicator(lists[0], lists[1], lists[2] if len(lists) > 2 else n)
        else:
            mpi.Communicator([], [], n)
        result["create_" + case] = ""
    except (mpi.MPIError, ValueError) as error:
        result["create_" + case] = f"{type(error).__name__}: {error}"
report(result)
"""


@pytest.mark.parametrize("ranks", [2, 3])
def test_exchange_through_the_c_interface(mpiexec, tmp_path, ranks):
    status, output, results = run_workers(mpiexec, tmp_path, ranks, EXCHANGE)
    assert status == 0, output
    assert sorted(results) == list(range(ranks)), output
    last = ranks - 1
    for rank, r in results.items():
        for key in ("forward_float64", "reverse_float64", "forward_float32", "reverse_float32"):
            assert r[key] == [0, "", True], (rank, key, r[key])
        assert r["wrong_split"][0] != 0
        if rank == last:
            assert f"has {last + 4} owned and 0 ghost rows, the forward buffer {last + 3} and 1" in r["wrong_split"][1], r["wrong_split"]
        else:
            assert f"rank {last} failed: MPI rank {last} of {ranks} has" in r["wrong_split"][1], r["wrong_split"]
        assert r["wrong_width"][0] != 0 and "disagree on the row width (numFeatures from 2 to 3" in r["wrong_width"][1]
        assert r["after_errors"][0] == 0, r["after_errors"]
        assert r["after_destroy"][0] != 0 and "is not registered" in r["after_destroy"][1]
        if rank == 1:
            assert "ValueError: openmmgraph.mpi.Communicator: ghost_owner_rank has 2 entries but ghost_owner_row has 1" == r["create_lengths"]
            assert f"ghost 0 has owner rank {ranks + 2}, not in [0, {ranks})" in r["create_owner_rank"]
            assert "ghost 0 copies row 9 of rank 0, which owns 4 rows" in r["create_owner_row"]
            assert "ghost_owner_rank must be a 1-D list of integers, found shape [1] of float64" in r["create_fractional"]
            assert f"num_owned {2**64 + 5} is outside the int64 range" in r["create_huge_num_owned"], r["create_huge_num_owned"]
        else:
            assert "rank 1 failed" in r["create_lengths"] and "numGhost is -1" in r["create_lengths"]
            assert "rank 1 failed" in r["create_owner_rank"] and "not in [0," in r["create_owner_rank"]
            assert "rank 1 failed" in r["create_owner_row"] and "which owns 4 rows" in r["create_owner_row"]
            assert "rank 1 failed" in r["create_fractional"] and "numGhost is -1" in r["create_fractional"]
            assert "rank 1 failed" in r["create_huge_num_owned"] and "numGhost is -1" in r["create_huge_num_owned"]
    assert results[last]["ghosts"] == 0 and all(results[r]["ghosts"] > 0 for r in range(last))


# --- the model under torch.ops.openmmgraph.communicate ----------------------------------------------------

MODEL = """
import torch
import test_communicate as tc

mpi.initialize()
rank, size = mpi.world()
x, h0, parameters = tc.make_system()
owned, ghosts = tc.decompose(x, size)
ownerRank = {p: d for d, rows in enumerate(owned) for p in rows}
ownerRow = {p: i for rows in owned for i, p in enumerate(rows)}
mine, myGhosts = owned[rank], ghosts[rank]
n = len(mine)
with mpi.Communicator([ownerRank[p] for p in myGhosts], [ownerRow[p] for p in myGhosts], n) as engine:
    source, target = tc.local_edges(x, mine, myGhosts)
    local = mine + myGhosts
    xLocal, hLocal = x[local].clone(), h0[local].clone()
    xLocal[n:] = float("nan")  # only communicate may fill the ghost rows
    hLocal[n:] = float("nan")
    xLocal.requires_grad_(True)
    hLocal.requires_grad_(True)
    energies = tc.domain_energies(xLocal, hLocal, source, target, n, engine.handle, parameters)
    gx, gh = torch.autograd.grad(energies.sum(), [xLocal, hLocal])
    total = mpi.allreduce_sum_double_ordered(energies.sum().item())

# One domain, and the thread engine with the same decomposition.
E, T, GX, GH = tc.run_single_domain(x, h0, parameters)
threads, _ = tc.run_domains(x, h0, parameters, owned, ghosts)
_, gxThreads, ghThreads = threads[rank]
def relative(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()
report({
    "ghosts": len(myGhosts),
    "energies_bitwise": bool(torch.equal(energies.detach(), E[mine])),
    "ghost_gradients_zero": bool(torch.equal(gx[n:], torch.zeros_like(gx[n:])) and torch.equal(gh[n:], torch.zeros_like(gh[n:]))),
    "gx_rel": relative(gx[:n], GX[mine]), "gh_rel": relative(gh[:n], GH[mine]),
    "gradients_equal_thread_engine": bool(torch.equal(gx, gxThreads) and torch.equal(gh, ghThreads)),
    "total": total.hex(), "total_rel": abs(total - T.item()) / abs(T.item()),
})
"""


@pytest.mark.parametrize("ranks", [2, 3])
def test_model_split_over_ranks_matches_one_domain(mpiexec, tmp_path, ranks):
    pytest.importorskip("torch")
    pytest.importorskip("openmmgraph.communicate", exc_type=ImportError)
    status, output, results = run_workers(mpiexec, tmp_path, ranks, MODEL, timeout=120)
    assert status == 0, output
    assert sorted(results) == list(range(ranks)), output
    for rank, r in results.items():
        assert r["ghosts"] > 0
        assert r["energies_bitwise"], r
        assert r["ghost_gradients_zero"], r
        assert r["gradients_equal_thread_engine"], r
        assert r["gx_rel"] <= 1e-12 and r["gh_rel"] <= 1e-12, r
        assert r["total_rel"] <= 1e-12, r
        print(f"rank {rank}: ghosts {r['ghosts']}, gradients vs one domain {r['gx_rel']:.1e} / {r['gh_rel']:.1e}, "
              f"total energy rel. diff {r['total_rel']:.1e}")
    assert len({r["total"] for r in results.values()}) == 1  # the same total on every rank, bitwise


# --- failures end the job --------------------------------------------------------------------------------

FAILING = """
mpi.initialize()
rank, size = mpi.world()
if rank == 1:
    raise RuntimeError("deliberate failure on rank 1")
mpi.allreduce_sum_int64(np.zeros(4, dtype=np.int64))  # waits for rank 1, which never comes
"""

STALLED = """
import time
mpi.initialize()
rank, size = mpi.world()
import ctypes
comm = communicateLibrary()
class Buffer(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("deviceType", ctypes.c_int32),
                ("deviceIndex", ctypes.c_int32), ("reserved", ctypes.c_int32), ("numOwned", ctypes.c_int64),
                ("numGhost", ctypes.c_int64), ("numFeatures", ctypes.c_int64), ("rowStride", ctypes.c_int64),
                ("stream", ctypes.c_void_p)]
engine = mpi.Communicator([1 - rank], [0], 1)
t = np.zeros((2, 1))
if rank == 0:
    comm.ommgraph_communicate_forward(ctypes.c_int64(engine.handle), ctypes.byref(Buffer(t.ctypes.data, 1, 1, 0, 0, 1, 1, 1, 1, None)))
else:
    time.sleep(60)  # never joins the exchange
"""

STALLED_SUMS = """
import time
mpi.initialize()
rank, size = mpi.world()
kind = sys.argv[1]
if kind != "first":
    mpi.allreduce_sum_int64(np.ones(1, dtype=np.int64))  # the library's first collective call, on both ranks
if rank == 0:
    if kind == "double":
        mpi.allreduce_sum_double_ordered(1.0)
    else:
        mpi.allreduce_sum_int64(np.ones(5, dtype=np.int64))
else:
    time.sleep(60)  # never joins the sum
"""


def test_a_failing_rank_fails_the_job(mpiexec, tmp_path):
    status, output, _ = run_workers(mpiexec, tmp_path, 2, FAILING, timeout=60)
    assert status != 0, output
    assert "deliberate failure on rank 1" in output


def test_an_exchange_nobody_joins_ends_at_the_timeout(mpiexec, tmp_path):
    start = time.monotonic()
    status, output, _ = run_workers(mpiexec, tmp_path, 2, STALLED, timeout=60, env={"OMMGRAPH_MPI_TIMEOUT": "2"})
    assert status != 0, output
    assert "did not complete within OMMGRAPH_MPI_TIMEOUT=2 s" in output, output
    assert time.monotonic() - start < 45


@pytest.mark.parametrize("kind, call", [("int64", "MPI_Iallreduce"), ("double", "MPI_Iallgather"), ("first", "MPI_Comm_idup")])
def test_a_sum_nobody_joins_ends_at_the_timeout(mpiexec, tmp_path, kind, call):
    """The sums, and the library's first collective call (the duplicate of MPI_COMM_WORLD), are nonblocking MPI
    calls waited for like the exchanges, so OMMGRAPH_MPI_TIMEOUT covers them too (a rank that caught an error and
    went on, or never arrived)."""
    start = time.monotonic()
    status, output, _ = run_workers(mpiexec, tmp_path, 2, STALLED_SUMS, timeout=60, env={"OMMGRAPH_MPI_TIMEOUT": "2"},
                                    args=[kind])
    assert status != 0, output
    assert "did not complete within OMMGRAPH_MPI_TIMEOUT=2 s" in output, output
    assert call in output, output
    assert time.monotonic() - start < 45


def test_missing_library_is_a_clear_error(tmp_path):
    code = (
        "import os, sys; os.environ['OPENMMGRAPH_MPI_LIBRARY'] = sys.argv[1]\n"
        "from openmmgraph import mpi\n"
        "assert not mpi.available()\n"
        "try:\n    mpi.world()\nexcept mpi.MPIUnavailableError as error:\n    print(error)\n"
    )
    output = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "libOpenMMGraphMPI.so")], capture_output=True, text=True, timeout=60
    )
    assert output.returncode == 0, output.stderr
    assert "is not installed: openmm-graph was built without MPI" in output.stdout


# --- CUDA buffers (staging through pinned host memory): a GPU machine ------------------------------------

CUDA_STAGING = """
import ctypes
import torch
from openmmgraph import communicate

mpi.initialize()
rank, size = mpi.world()
torch.cuda.set_device(rank % torch.cuda.device_count())

def owned_count(r):
    return 4 + r

def ghosts_of(r):
    rng = np.random.default_rng(10 + r)
    ghosts = [(s, int(row)) for s in range(size) for row in rng.integers(0, owned_count(s), size=3 + s)]
    ghosts.append(ghosts[0])
    return [ghosts[i] for i in rng.permutation(len(ghosts))]

mine, n = ghosts_of(rank), owned_count(rank)
rows = n + len(mine)
checks = {}
with mpi.Communicator([s for s, _ in mine], [r for _, r in mine], n) as engine:
    for dtype in (torch.float64, torch.float32):
        generator = torch.Generator().manual_seed(rank)
        x = torch.randn(rows, 3, generator=generator, dtype=dtype)
        g = torch.randn(rows, 3, generator=generator, dtype=dtype)
        op, reverse = torch.ops.openmmgraph.communicate, torch.ops.openmmgraph.communicate_reverse
        checks[f"forward {dtype}"] = torch.equal(op(x, engine.handle, n), op(x.cuda(), engine.handle, n).cpu())
        checks[f"reverse {dtype}"] = torch.equal(reverse(g, engine.handle, n), reverse(g.cuda(), engine.handle, n).cpu())
        # The backward of a CUDA tensor runs on PyTorch's device thread.
        xc, xg = x.clone().requires_grad_(True), x.cuda().requires_grad_(True)
        (gc,) = torch.autograd.grad((op(xc, engine.handle, n) * g).sum(), [xc])
        (gg,) = torch.autograd.grad((op(xg, engine.handle, n) * g.cuda()).sum(), [xg])
        checks[f"backward {dtype}"] = torch.equal(gc, gg.cpu())
    # Padded rows through the C interface, on a non-default stream: the padding stays.
    library = communicate._library().dll
    library.ommgraph_communicate_forward.argtypes = [ctypes.c_int64, ctypes.POINTER(communicate.CommunicateBuffer)]
    t = torch.full((rows, 5), -7.0, dtype=torch.float64, device="cuda")
    t[:, :3] = torch.arange(rows * 3, dtype=torch.float64, device="cuda").reshape(rows, 3) + 100 * rank
    expected = torch.ops.openmmgraph.communicate(t[:, :3].cpu().contiguous(), engine.handle, n)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        buffer = communicate.CommunicateBuffer(t.data_ptr(), 1, 2, t.device.index, 0, n, rows - n, 3, 5, stream.cuda_stream)
        status = library.ommgraph_communicate_forward(engine.handle, ctypes.byref(buffer))
    stream.synchronize()
    checks["padded"] = status == 0 and torch.equal(t[:, :3].cpu(), expected) and bool((t[:, 3:] == -7.0).all())
report({"checks": {k: bool(v) for k, v in checks.items()}})
"""


@pytest.mark.gpu
def test_cuda_buffers_are_staged(mpiexec, tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("openmmgraph.communicate", exc_type=ImportError)
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    status, output, results = run_workers(mpiexec, tmp_path, 2, CUDA_STAGING, timeout=180)
    assert status == 0, output
    for rank, r in results.items():
        assert all(r["checks"].values()), (rank, r["checks"])
