"""The communicate operation (docs/communicate.md): torch.ops.openmmgraph.communicate
with the pure-Python engine of openmmgraph.simulated_domains.

The main check: a small message-passing model (two rounds of node updates
from neighbour features, float64) split into 2 and 3 spatial domains, one
thread per domain, with communicate between the rounds (and on the input
positions and features, so that the ghosts' gradients go back to their
owners), agrees with the one-domain run:

- per-particle energies and their total (summed in the same global order):
  bitwise, because every owned particle sums the same neighbour terms in the
  same order and the ghost rows are exact copies;
- the sum of the per-domain energies: to 1e-12 relative (a different
  summation order: the sum of partial sums);
- gradients with respect to positions and features: to 1e-12 relative to the
  largest component (the contributions to an owned particle from different
  domains are added by the reverse exchange, a different association order
  than one domain's backward); the figures are printed (pytest -s).
"""

import os
import subprocess
import sys
import threading

import pytest

torch = pytest.importorskip("torch")
communicate = pytest.importorskip("openmmgraph.communicate", exc_type=ImportError)
from openmmgraph.simulated_domains import SimulatedDomains  # noqa: E402

CUTOFF = 1.0
FEATURES = 4
BOX = (4.0, 2.0, 2.0)
NUM_PARTICLES = 96


# --- the model -------------------------------------------------------------------------------------


def linear(h, weights):
    """h [n, F] @ weights [F, F] as F elementwise terms added in a fixed order
    (a BLAS matmul may block rows differently for different n)."""
    out = h[:, 0:1] * weights[0]
    for k in range(1, weights.shape[0]):
        out = out + h[:, k : k + 1] * weights[k]
    return out


def node_update(h, x, source, target, numOwned, weights):
    """One round: h'_i = tanh(h_i W + sum_{j in N(i)} phi(r_ij) h_j) for the
    owned rows i (edges target -> i owned, source -> any local row)."""
    r = torch.linalg.vector_norm(x[source] - x[target], dim=1)
    phi = (1 - r / CUTOFF) ** 2
    messages = torch.zeros(numOwned, h.shape[1], dtype=h.dtype).index_add_(0, target, phi[:, None] * h[source])
    return torch.tanh(linear(h[:numOwned], weights) + messages)


def domain_energies(x, h0, source, target, numOwned, handle, parameters):
    """Per-particle energies [numOwned] of one domain: positions x and
    features h0 [numOwned + numGhost, ...] (ghost rows filled by communicate)."""
    w1, w2, wOut = parameters
    x = torch.ops.openmmgraph.communicate(x, handle, numOwned)
    h = torch.ops.openmmgraph.communicate(h0, handle, numOwned)
    h1Owned = node_update(h, x, source, target, numOwned, w1)
    h1 = torch.cat([h1Owned, torch.zeros(h.shape[0] - numOwned, h.shape[1], dtype=h.dtype)])
    h1 = torch.ops.openmmgraph.communicate(h1, handle, numOwned)
    h2 = node_update(h1, x, source, target, numOwned, w2)
    energy = h2[:, 0] * wOut[0]
    for k in range(1, h2.shape[1]):
        energy = energy + h2[:, k] * wOut[k]
    return energy


def make_system(seed=7):
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(NUM_PARTICLES, 3, generator=generator, dtype=torch.float64) * torch.tensor(BOX, dtype=torch.float64)
    h0 = torch.randn(NUM_PARTICLES, FEATURES, generator=generator, dtype=torch.float64)
    parameters = tuple(torch.randn(*shape, generator=generator, dtype=torch.float64) * 0.5 for shape in [(4, 4), (4, 4), (4,)])
    return x, h0, parameters


def decompose(x, numDomains):
    """Slabs along x: owned particles (ascending) and a one-cutoff halo of ghosts per domain."""
    distances = torch.cdist(x, x)
    slab = torch.clamp((x[:, 0] / (BOX[0] / numDomains)).long(), max=numDomains - 1)
    owned, ghosts = [], []
    for d in range(numDomains):
        mine = torch.nonzero(slab == d).flatten()
        near = (distances[mine] < CUTOFF).any(dim=0)
        near[mine] = False
        owned.append(mine.tolist())
        ghosts.append(torch.nonzero(near).flatten().tolist())
    return owned, ghosts


def local_edges(x, owned, ghosts):
    """Edges (source, target) in local rows: every owned target i with every
    local source j != i within the cutoff, ordered by (global i, global j)
    exactly as in the one-domain run."""
    local = owned + ghosts
    rowOf = {p: row for row, p in enumerate(local)}
    distances = torch.cdist(x, x)
    source, target = [], []
    for i in sorted(owned):
        for j in sorted(p for p in local if p != i and distances[i, p] < CUTOFF):
            source.append(rowOf[j])
            target.append(rowOf[i])
    return torch.tensor(source, dtype=torch.long), torch.tensor(target, dtype=torch.long)


def run_single_domain(x, h0, parameters, handle=0):
    everything = list(range(NUM_PARTICLES))
    source, target = local_edges(x, everything, [])
    xLeaf, hLeaf = x.clone().requires_grad_(True), h0.clone().requires_grad_(True)
    energies = domain_energies(xLeaf, hLeaf, source, target, NUM_PARTICLES, handle, parameters)
    total = energies.sum()
    gx, gh = torch.autograd.grad(total, [xLeaf, hLeaf])
    return energies.detach(), total.detach(), gx, gh


def run_domains(x, h0, parameters, owned, ghosts):
    """Each domain in its own thread, as a multi-device engine runs them.
    Ghost rows of the inputs start as NaN: only communicate may fill them."""
    with SimulatedDomains(owned, ghosts, timeout=60) as domains:
        results, errors = [None] * len(owned), [None] * len(owned)

        def work(d):
            try:
                local = owned[d] + ghosts[d]
                source, target = local_edges(x, owned[d], ghosts[d])
                xLocal, hLocal = x[local].clone(), h0[local].clone()
                xLocal[len(owned[d]) :] = float("nan")
                hLocal[len(owned[d]) :] = float("nan")
                xLocal.requires_grad_(True)
                hLocal.requires_grad_(True)
                energies = domain_energies(xLocal, hLocal, source, target, len(owned[d]), domains.handles[d], parameters)
                gx, gh = torch.autograd.grad(energies.sum(), [xLocal, hLocal])
                results[d] = (energies.detach(), gx, gh)
            except BaseException as error:
                errors[d] = error
                domains._barrier.abort()

        threads = [threading.Thread(target=work, args=(d,)) for d in range(len(owned))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for error in errors:
            if error is not None:
                raise error
        calls = [list(c) for c in domains.calls]
    return results, calls


@pytest.mark.parametrize("numDomains", [2, 3])
def test_domains_agree_with_one_domain(numDomains):
    x, h0, parameters = make_system()
    energies, total, gx, gh = run_single_domain(x, h0, parameters)
    owned, ghosts = decompose(x, numDomains)
    assert all(len(g) > 0 for g in ghosts), "every domain must have ghosts for the test to mean something"
    results, calls = run_domains(x, h0, parameters, owned, ghosts)

    energiesSplit = torch.empty_like(energies)
    gxSplit, ghSplit = torch.full_like(gx, float("nan")), torch.full_like(gh, float("nan"))
    for d, (e, gxLocal, ghLocal) in enumerate(results):
        n = len(owned[d])
        energiesSplit[owned[d]] = e
        gxSplit[owned[d]] = gxLocal[:n]
        ghSplit[owned[d]] = ghLocal[:n]
        # The ghost rows' gradients went to their owners.
        assert torch.equal(gxLocal[n:], torch.zeros_like(gxLocal[n:]))
        assert torch.equal(ghLocal[n:], torch.zeros_like(ghLocal[n:]))
        # Three exchanges forward, three back, in reverse order of use (collective order).
        assert [c[0] for c in calls[d]] == ["forward"] * 3 + ["reverse"] * 3

    # Bitwise: same terms in the same order.
    assert torch.equal(energies, energiesSplit)
    assert torch.equal(total, energiesSplit.sum())
    # Sum of partial sums: another order.
    partial = sum(r[0].sum() for r in results)
    energyDifference = abs((partial - total) / total).item()
    assert energyDifference <= 1e-12
    gxDifference = ((gxSplit - gx).abs().max() / gx.abs().max()).item()
    ghDifference = ((ghSplit - gh).abs().max() / gh.abs().max()).item()
    print(
        f"\n{numDomains} domains: ghosts {[len(g) for g in ghosts]}; per-particle energies bitwise; "
        f"sum of domain energies rel. diff {energyDifference:.2e}; "
        f"position gradients max rel. diff {gxDifference:.2e} (bitwise: {torch.equal(gxSplit, gx)}); "
        f"feature gradients max rel. diff {ghDifference:.2e} (bitwise: {torch.equal(ghSplit, gh)})"
    )
    assert gxDifference <= 1e-12
    assert ghDifference <= 1e-12


def test_one_domain_is_the_identity():
    x, h0, parameters = make_system()
    features = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    result = torch.ops.openmmgraph.communicate(features, 0, 3)
    assert torch.equal(result, features)
    assert result.data_ptr() != features.data_ptr()  # functional: never an alias of the input
    (gradient,) = torch.autograd.grad((result * 2).sum(), [features])
    assert torch.equal(gradient, torch.full_like(features, 2.0))
    # An engine with one domain and no ghosts gives exactly the run without an engine.
    reference = run_single_domain(x, h0, parameters, handle=0)
    with SimulatedDomains([list(range(NUM_PARTICLES))], [[]]) as domains:
        withEngine = run_single_domain(x, h0, parameters, handle=domains.handles[0])
        assert len(domains.calls[0]) == 6  # the engine is called (collective), with nothing to exchange
    for a, b in zip(reference, withEngine):
        assert torch.equal(a, b)


def test_communicate_helpers_match_the_operators():
    features = torch.randn(4, 2, dtype=torch.float64)
    with SimulatedDomains([[0, 1]], [[1, 0]]) as domains:
        handle = domains.handles[0]
        assert torch.equal(communicate.communicate(features, handle, 2), torch.ops.openmmgraph.communicate(features, handle, 2))
        assert torch.equal(
            communicate.communicate_reverse(features, handle, 2), torch.ops.openmmgraph.communicate_reverse(features, handle, 2)
        )
        assert communicate.is_registered(handle) and communicate.is_registered(0)
        # Integers beyond the int64 handles are no handles (ctypes wrapped 2**64 + h to h, and 2**64 to 0).
        assert not communicate.is_registered(2**64 + handle) and not communicate.is_registered(2**64)
        assert not communicate.is_registered(-(2**63) - 1)
    assert not communicate.is_registered(handle)
    for mask in (2**32 + 1, -1, 1.0, True):
        with pytest.raises(ValueError, match=r"device_types must be an integer mask in \[0, 2\*\*32\)"):
            communicate.Communicator(lambda buffer: None, lambda buffer: None, device_types=mask)
    with pytest.raises(TypeError, match="name must be a str"):
        communicate.Communicator(lambda buffer: None, lambda buffer: None, name=b"bytes")


def test_periodic_images_forward_and_reverse():
    # One domain whose ghosts are periodic images of its own rows 2, 0, 2.
    with SimulatedDomains([[0, 1, 2]], [[2, 0, 2]]) as domains:
        handle = domains.handles[0]
        features = torch.arange(12, dtype=torch.float32).reshape(6, 2)
        result = torch.ops.openmmgraph.communicate(features, handle, 3)
        assert torch.equal(result[3:], features[[2, 0, 2]])
        assert torch.equal(result[:3], features[:3])
        gradient = torch.arange(12, dtype=torch.float32).reshape(6, 2) * 10
        reverse = torch.ops.openmmgraph.communicate_reverse(gradient, handle, 3)
        expected = gradient.clone()
        expected[2] += gradient[3] + gradient[5]
        expected[0] += gradient[4]
        expected[3:] = 0
        assert torch.equal(reverse, expected)
        # Rows of any shape: [rows, 2, 3] flattened to 6 features per row.
        cube = torch.randn(6, 2, 3, dtype=torch.float64)
        assert torch.equal(torch.ops.openmmgraph.communicate(cube, handle, 3)[3:], cube[[2, 0, 2]])


def test_gradcheck():
    with SimulatedDomains([[0, 1, 2]], [[2, 0]]) as domains:
        handle = domains.handles[0]
        features = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(lambda f: torch.ops.openmmgraph.communicate(f, handle, 3), (features,))
        assert torch.autograd.gradgradcheck(lambda f: torch.ops.openmmgraph.communicate(f, handle, 3), (features,))
        assert torch.autograd.gradcheck(lambda f: torch.ops.openmmgraph.communicate_reverse(f, handle, 3), (features,))
        # The adjoint identity <reverse(y), x> == <y, forward(x)>.
        x, y = torch.randn(5, 3, dtype=torch.float64), torch.randn(5, 3, dtype=torch.float64)
        forward = torch.ops.openmmgraph.communicate(x, handle, 3)
        reverse = torch.ops.openmmgraph.communicate_reverse(y, handle, 3)
        assert abs((reverse * x).sum() - (y * forward).sum()) < 1e-12


class Exchange(torch.nn.Module):
    """Two rounds of communicate around elementwise work, for TorchScript and export."""

    def forward(self, features: torch.Tensor, handle: int, num_owned: int) -> torch.Tensor:
        h = torch.ops.openmmgraph.communicate(features, handle, num_owned)
        h = torch.tanh(h) * 2.0
        return torch.ops.openmmgraph.communicate(h, handle, num_owned)


def test_torchscript_save_load(tmp_path):
    scripted = torch.jit.script(Exchange())
    assert "openmmgraph::communicate" in str(scripted.graph)
    path = str(tmp_path / "exchange.pt")
    scripted.save(path)
    loaded = torch.jit.load(path)
    with SimulatedDomains([[0, 1, 2]], [[2, 0]]) as domains:
        handle = domains.handles[0]
        features = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
        expected = Exchange()(features, handle, 3)
        result = loaded(features, handle, 3)
        assert torch.equal(result, expected)
        (g1,) = torch.autograd.grad(result.sum(), [features])
        (g2,) = torch.autograd.grad(expected.sum(), [features])
        assert torch.equal(g1, g2)
        assert torch.equal(g1[3:], torch.zeros(2, 3, dtype=torch.float64))
    # A fresh process: load the operators, then the saved module (what a LibTorch application does).
    code = (
        "import torch, sys; torch.ops.load_library(sys.argv[1]); m = torch.jit.load(sys.argv[2]); "
        "x = torch.ones(4, 2, dtype=torch.float64); print(bool(torch.equal(m(x, 0, 2), torch.tanh(x) * 2.0)))"
    )
    output = subprocess.run(
        [sys.executable, "-c", code, communicate.library_path(), path], capture_output=True, text=True, timeout=120
    )
    assert output.returncode == 0, output.stderr
    assert output.stdout.strip() == "True"


def test_torch_export_keeps_handle_and_num_owned_as_inputs():
    from torch.export import Dim

    features = torch.randn(5, 3, dtype=torch.float64)
    program = torch.export.export(
        Exchange(), (features, 0, 3), dynamic_shapes={"features": None, "handle": Dim.DYNAMIC, "num_owned": Dim.DYNAMIC}
    )
    targets = [str(node.target) for node in program.graph.nodes if node.op == "call_function"]
    assert targets.count("openmmgraph.communicate.default") == 2, targets
    decomposed = program.run_decompositions()
    assert [str(n.target) for n in decomposed.graph.nodes if n.op == "call_function"].count("openmmgraph.communicate.default") == 2
    # Traced with handle 0, run with an engine's handle (and another split).
    module = program.module()
    with SimulatedDomains([[0, 1, 2, 3]], [[1]]) as domains:
        handle = domains.handles[0]
        assert torch.equal(module(features, handle, 4), Exchange()(features, handle, 4))
        assert torch.equal(Exchange()(features, handle, 4)[4], torch.tanh(features[1]) * 2.0)


def test_torch_export_with_autograd_in_the_program():
    """A model that computes forces in its forward (as a GraphForce model would): export traces the backward too."""

    class Forces(torch.nn.Module):
        def forward(self, x: torch.Tensor, handle: int, num_owned: int) -> torch.Tensor:
            x = x.detach().requires_grad_(True)
            h = torch.ops.openmmgraph.communicate(x, handle, num_owned)
            energy = (h**2).sum()
            return torch.autograd.grad(energy, [x])[0]

    from torch.export import Dim

    x = torch.randn(5, 3, dtype=torch.float64)
    program = torch.export.export(Forces(), (x, 0, 3), dynamic_shapes={"x": None, "handle": Dim.DYNAMIC, "num_owned": Dim.DYNAMIC})
    targets = [str(n.target) for n in program.graph.nodes if n.op == "call_function"]
    assert "openmmgraph.communicate_reverse.default" in targets, targets
    with SimulatedDomains([[0, 1, 2]], [[2, 0]]) as domains:
        handle = domains.handles[0]
        expected = 2 * x.clone()
        expected[2] += 2 * x[2]
        expected[0] += 2 * x[0]
        expected[3:] = 0
        assert torch.equal(program.module()(x, handle, 3), expected)


# --- errors ----------------------------------------------------------------------------------------


def test_errors_name_the_problem():
    features = torch.randn(5, 3, dtype=torch.float64)
    with SimulatedDomains([[0, 1, 2]], [[2, 0]]) as domains:
        handle = domains.handles[0]
        with pytest.raises(RuntimeError, match=r"handle \d+ is not registered"):
            torch.ops.openmmgraph.communicate(features, handle + 1000, 3)
        with pytest.raises(RuntimeError, match="handle -1 is negative"):
            torch.ops.openmmgraph.communicate(features, -1, 3)
        with pytest.raises(RuntimeError, match="dtype Int is not supported"):
            torch.ops.openmmgraph.communicate(features.int(), handle, 3)
        with pytest.raises(RuntimeError, match="dtype Half is not supported"):
            torch.ops.openmmgraph.communicate(features.half(), handle, 3)
        with pytest.raises(RuntimeError, match="0-dimensional tensor"):
            torch.ops.openmmgraph.communicate(torch.tensor(1.0, dtype=torch.float64), handle, 0)
        with pytest.raises(RuntimeError, match="num_owned is 6 but the tensor has only 5 rows"):
            torch.ops.openmmgraph.communicate(features, handle, 6)
        with pytest.raises(RuntimeError, match="num_owned is -2"):
            torch.ops.openmmgraph.communicate(features, handle, -2)
        with pytest.raises(RuntimeError, match="not contiguous"):
            torch.ops.openmmgraph.communicate(torch.randn(3, 5, dtype=torch.float64).t(), handle, 3)
        with pytest.raises(RuntimeError, match="not contiguous"):
            torch.ops.openmmgraph.communicate_reverse(torch.randn(3, 5, dtype=torch.float64).t(), handle, 3)
        # The engine refuses a split that is not its own: its message reaches the caller.
        with pytest.raises(RuntimeError, match="domain 0 has 3 owned and 2 ghost rows, the forward buffer 4 and 1"):
            torch.ops.openmmgraph.communicate(features, handle, 4)
    # An engine callback that fails.
    def broken(buffer):
        raise OSError("link to rank 1 is down")

    with communicate.Communicator(broken, broken, name="broken engine") as engine:
        with pytest.raises(RuntimeError, match=r"'broken engine'.*forward callback failed.*OSError: link to rank 1 is down"):
            torch.ops.openmmgraph.communicate(features, engine.handle, 3)
        x = features.clone().requires_grad_(True)
        with pytest.raises(RuntimeError, match=r"reverse callback failed.*link to rank 1 is down"):
            torch.ops.openmmgraph.communicate_reverse(x, engine.handle, 3)
        handle = engine.handle
    with pytest.raises(RuntimeError, match="is not registered"):
        torch.ops.openmmgraph.communicate(features, handle, 3)

    # A message longer than the C buffer, cut inside a character: the error still names the engine (it was a
    # UnicodeDecodeError).
    def wordy(buffer):
        raise OSError("x" + "\u00e9" * 1000)

    with communicate.Communicator(wordy, wordy, name="wordy engine") as engine:
        for operator in (torch.ops.openmmgraph.communicate, torch.ops.openmmgraph.communicate_reverse):
            with pytest.raises(RuntimeError, match="'wordy engine'.*callback failed.*OSError: x\u00e9\u00e9") as error:
                operator(features, engine.handle, 3)
            assert "\u00e9" * 400 in str(error.value)
    # The meta kernel checks too (export reports a bad call while tracing).
    with pytest.raises(RuntimeError, match="dtype Long is not supported"):
        torch.ops.openmmgraph.communicate(torch.zeros(5, 3, dtype=torch.long, device="meta"), 0, 3)
    assert torch.ops.openmmgraph.communicate(torch.zeros(5, 3, device="meta"), 0, 3).shape == (5, 3)


def test_a_closed_endpoint_and_a_kept_buffer_are_errors():
    kept = []

    def keep(buffer):
        kept.append(buffer)
        buffer.as_numpy()  # fine during the call

    features = torch.randn(5, 3, dtype=torch.float64)
    engine = communicate.Communicator(keep, keep, name="keeper")
    torch.ops.openmmgraph.communicate(features, engine.handle, 3)
    with pytest.raises(ValueError, match="used after its callback returned"):
        kept[0].as_numpy()
    engine.close()
    engine.close()  # idempotent
    # Handle 0 would mean "one domain": a closed endpoint must not silently become the identity.
    with pytest.raises(ValueError, match="the endpoint is closed"):
        engine.handle
    with pytest.raises(ValueError, match="the endpoint is closed"):
        torch.ops.openmmgraph.communicate(features, int(engine), 3)


def test_a_failing_domain_fails_the_others_without_a_hang():
    x, h0, parameters = make_system()
    owned, ghosts = decompose(x, 2)
    badGhosts = [ghosts[0], ghosts[1][:-1]]  # the model of domain 1 passes one ghost row more than the engine expects
    with SimulatedDomains(owned, badGhosts, timeout=30) as domains:
        errors = [None, None]

        def work(d):
            try:
                n = len(owned[d])
                h = torch.randn(n + len(ghosts[d]), FEATURES, dtype=torch.float64)
                torch.ops.openmmgraph.communicate(h, domains.handles[d], n)
            except RuntimeError as error:
                errors[d] = str(error)

        threads = [threading.Thread(target=work, args=(d,)) for d in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in threads)
    assert "domain 1 has" in errors[1]
    # Domain 0 fails at the broken barrier, or is refused if it calls after domain 1 failed: both name the failure.
    assert "first failure: domain 1 has" in errors[0], errors[0]


def _in_threads(work, count):
    """Run work(d) for d < count in threads; the exceptions' texts (None for a success) and the seconds it took."""
    import time

    errors = [None] * count

    def run(d):
        try:
            work(d)
        except Exception as error:
            errors[d] = str(error)

    started = time.time()
    threads = [threading.Thread(target=run, args=(d,)) for d in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    return errors, time.time() - started


def test_simulated_domains_refuse_rows_of_another_width_on_every_domain():
    # Domain 0's ghost is particle 3, owned by domain 1, whose rows had 1 feature: NumPy broadcast it into domain 0's
    # 3 (no error); when the widths made the copy fail, the other domain waited for the whole timeout.
    for widths in ((3, 1), (1, 3)):
        with SimulatedDomains([[0, 1, 2], [3]], [[3], [0]], timeout=30) as domains:
            def work(d):
                rows = 4 if d == 0 else 2
                torch.ops.openmmgraph.communicate(torch.ones(rows, widths[d], dtype=torch.float64), domains.handles[d],
                                                  3 if d == 0 else 1)

            errors, seconds = _in_threads(work, 2)
        assert all(error is not None and "the domains' rows differ" in error for error in errors), errors
        assert seconds < 20
    with SimulatedDomains([[0, 1, 2], [3]], [[3], [0]], timeout=30) as domains:
        def work(d):
            dtype = torch.float64 if d == 0 else torch.float32
            x = torch.ones(4 if d == 0 else 2, 2, dtype=dtype)
            torch.ops.openmmgraph.communicate_reverse(x, domains.handles[d], 3 if d == 0 else 1)

        errors, _ = _in_threads(work, 2)
    assert all(error is not None and "float64" in error and "float32" in error for error in errors), errors


def test_simulated_domains_refuse_a_second_call_on_a_handle_in_progress():
    import time

    with SimulatedDomains([[0, 1, 2], [3]], [[3], [0]], timeout=30) as domains:
        first = torch.zeros(4, 2, dtype=torch.float64)
        first[:3] = 1.0
        errors = [None]
        thread = threading.Thread(target=lambda: torch.ops.openmmgraph.communicate(first, domains.handles[0], 3))
        thread.start()
        deadline = time.time() + 30
        while not domains.calls[0] and time.time() < deadline:  # the first call is inside the engine
            time.sleep(0.01)
        try:
            torch.ops.openmmgraph.communicate(torch.zeros(4, 2, dtype=torch.float64), domains.handles[0], 3)
        except RuntimeError as error:
            errors[0] = str(error)
        # The call in progress is not disturbed: domain 1 joins it, and its ghost row is domain 1's row.
        result = torch.ops.openmmgraph.communicate(torch.full((2, 2), 7.0, dtype=torch.float64), domains.handles[1], 1)
        thread.join(timeout=60)
    assert errors[0] is not None and "a second forward call on its handle while one is in progress" in errors[0]
    assert result[1].tolist() == [1.0, 1.0] and domains.calls[0] == [("forward", 3, 1)]


def test_simulated_domains_after_a_failure_name_it():
    with SimulatedDomains([[0, 1, 2], [3]], [[3], [0]], timeout=30) as domains:
        def bad(d):  # domain 1 passes a wrong split
            torch.ops.openmmgraph.communicate(torch.ones(4, 2, dtype=torch.float64), domains.handles[d], 3 if d == 0 else 2)

        errors, seconds = _in_threads(bad, 2)
        assert "domain 1 has 1 owned and 1 ghost rows, the forward buffer 2 and 2" in errors[1]
        assert "first failure: domain 1 has 1 owned" in errors[0] and seconds < 20

        def good(d):
            torch.ops.openmmgraph.communicate(torch.ones(4 if d == 0 else 2, 2, dtype=torch.float64), domains.handles[d],
                                              3 if d == 0 else 1)

        errors, _ = _in_threads(good, 2)
    # The later exchange is refused by name (it read "another domain failed", though none did that time).
    assert all("the engine has failed (first failure: domain 1 has 1 owned" in error for error in errors), errors


def test_library_paths_are_installed():
    assert os.path.exists(communicate.library_path())
    assert os.path.exists(communicate.communicate_library_path())


@pytest.mark.gpu
def test_cuda_identity_and_device_refusal():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    features = torch.randn(5, 3, dtype=torch.float64, device="cuda", requires_grad=True)
    result = torch.ops.openmmgraph.communicate(features, 0, 3)
    assert torch.equal(result, features)
    (gradient,) = torch.autograd.grad(result.sum(), [features])
    assert torch.equal(gradient, torch.ones_like(features))
    # The Python test engine serves host buffers only: a CUDA tensor is refused before any callback.
    with SimulatedDomains([[0, 1, 2]], [[2, 0]]) as domains:
        with pytest.raises(RuntimeError, match="does not exchange CUDA device buffers"):
            torch.ops.openmmgraph.communicate(features, domains.handles[0], 3)
        assert domains.calls[0] == []
