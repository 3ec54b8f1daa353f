"""The multi-process mode of the GraphForce (property Domains = "mpi", docs/mpi.md) on the CPU
platform with two MPI ranks: every rank evaluates its own slab of particles, forces and energy are
summed over the ranks, and both ranks integrate bitwise the same trajectory, which follows the
single-process one (up to the fixed-point rounding of the summed forces, 2^-32 kJ/mol/nm)."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import openmmgraph

WORKER = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import openmm
    import openmmgraph
    from openmmgraph.grades import lattice_system, make_model

    model_path, domains, platform, out, interactions = sys.argv[1:6]
    model = make_model(seed=11, n_channels=8, n_axis=4, fitting_widths=(16, 16), grade="small", l_max=2,
                       n_interactions=int(interactions), descriptor_l_sum=False)
    positions, types, box = lattice_system(250, n_types=model.n_types, seed=3)
    force = openmmgraph.GraphForce(model_path)
    force.setProperty("Domains", domains)
    system = openmm.System()
    for i in range(len(types)):
        system.addParticle(12.0)
        force.addParticle(i, int(types[i]))
    force.setUsesPeriodicBoundaryConditions(True)
    system.setDefaultPeriodicBoxVectors(*[openmm.Vec3(*map(float, row)) for row in box])
    system.addForce(force)
    properties = {}
    device = None
    if platform == "CUDA":
        # Mixed precision (energies in double, as the MPI sum returns them); each rank on its own GPU when there are several.
        import ctypes, os
        cuda = ctypes.CDLL("libcuda.so.1")
        count = ctypes.c_int(0)
        if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
            count.value = 1
        local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", os.environ.get("MPI_LOCALRANKID", os.environ.get("PMI_RANK", "0"))))
        device = local % max(1, count.value) if domains == "mpi" else 0
        properties = {"Precision": "mixed", "DeviceIndex": str(device)}
    context = openmm.Context(system, openmm.VerletIntegrator(0.0005), openmm.Platform.getPlatformByName(platform), properties)
    context.setPositions(positions)
    context.setVelocitiesToTemperature(300, 7)
    state = context.getState(getEnergy=True, getForces=True)
    energies = [state.getPotentialEnergy()._value]
    forces = state.getForces(asNumpy=True)._value.tolist()
    for _ in range(4):
        context.getIntegrator().step(5)
        energies.append(context.getState(getEnergy=True).getPotentialEnergy()._value)
    final = context.getState(getPositions=True).getPositions(asNumpy=True)._value
    rank = 0
    if domains == "mpi":
        from openmmgraph import mpi
        rank = mpi.world()[0]
    with open(f"{out}.{rank}.json", "w") as handle:
        json.dump({"energies": [e.hex() for e in energies], "forces": forces, "positions": [x.hex() for x in final.ravel()],
                   "device": device}, handle)
    if domains == "mpi":
        mpi.finalize()
    """
)


def mpiexec():
    """$OPENMMGRAPH_TEST_MPIEXEC, else the mpiexec next to this Python (the mpich wheel), else on the PATH."""
    if os.environ.get("OPENMMGRAPH_TEST_MPIEXEC"):
        return os.environ["OPENMMGRAPH_TEST_MPIEXEC"]
    for candidate in (os.path.join(os.path.dirname(sys.executable), "mpiexec"), shutil.which("mpiexec")):
        if candidate and os.path.exists(candidate):
            return candidate
    return None


def load(path):
    with open(path) as handle:
        data = json.load(handle)
    return ([float.fromhex(e) for e in data["energies"]], np.array(data["forces"]),
            np.array([float.fromhex(x) for x in data["positions"]]))


@pytest.mark.parametrize("platform, kind, interactions", [
    ("CPU", "native", 1), ("CPU", "torchscript", 1),
    pytest.param("CUDA", "native", 0, marks=pytest.mark.gpu), pytest.param("CUDA", "native", 1, marks=pytest.mark.gpu)])
def test_two_ranks_integrate_the_same_trajectory(tmp_path, platform, kind, interactions):
    """Native models, and TorchScript models whose interaction block fills its ghosts' node features through
    openmmgraph::communicate with the MPI engine (the LibTorch plugin hands each rank's module its slab and ghosts).
    On CUDA (mixed precision; rank r on GPU r modulo the GPUs present, so two GPUs where there are two) each rank
    evaluates its share of the centers and the fixed-point sums go through MPI; with an interaction block the node
    features and dE/dB of the ranks' centers go between them too (CudaMpiExchange)."""
    launcher = mpiexec()
    if launcher is None:
        pytest.skip("no mpiexec (pip install mpich)")
    from openmmgraph import mpi

    if not mpi.available():
        pytest.skip("libOpenMMGraphMPI is not built (no MPI found at build time)")
    from openmmgraph.grades import make_model

    model_path = str(tmp_path / "model.safetensors")
    model = make_model(seed=11, n_channels=8, n_axis=4, fitting_widths=(16, 16), grade="small", l_max=2,
                       n_interactions=interactions, descriptor_l_sum=False)
    model.write(model_path)
    if kind == "torchscript":
        import openmm

        pytest.importorskip("torch")
        openmmgraph.GraphForce  # noqa: B018  (the package loads its plugins on first use)
        if not openmm.Platform.getPlatformByName("CPU").supportsKernels(["CalcTorchGraphForce"]):
            pytest.skip("the LibTorch plugin (libOpenMMGraphTorch) is not loaded")
        from openmmgraph import communicate  # noqa: F401  (registers the operator the export routes ghosts through)
        from openmmgraph.torch_export import export_torchscript

        model_path = str(tmp_path / "model.pt")
        assert export_torchscript(model, model_path)["uses_communicate"]
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    out = str(tmp_path / "result")
    environment = dict(os.environ, OMP_NUM_THREADS="1", OPENMM_CPU_THREADS="1")
    if os.geteuid() == 0:  # Open MPI's mpiexec refuses root unless told (containers, the GPU machine)
        environment.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    # Open MPI refuses more ranks than cores unless told (4.x: OMPI_MCA_..., 5.x: PRTE_MCA_...); MPICH ignores these.
    environment.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")
    environment.setdefault("PRTE_MCA_rmaps_default_mapping_policy", ":oversubscribe")
    subprocess.run([sys.executable, str(worker), model_path, "single", platform, out + "-single", str(interactions)], check=True,
                   timeout=300, env=environment)
    run = subprocess.run([launcher, "-n", "2", sys.executable, str(worker), model_path, "mpi", platform, out + "-mpi", str(interactions)],
                         capture_output=True, text=True, timeout=300, env=environment)
    assert run.returncode == 0, f"mpiexec failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    e0, f0, x0 = load(out + "-mpi.0.json")
    e1, f1, x1 = load(out + "-mpi.1.json")
    assert e0 == e1  # bitwise, every step
    assert np.array_equal(f0, f1) and np.array_equal(x0, x1)
    if platform == "CUDA":
        devices = [json.load(open(f"{out}-mpi.{rank}.json"))["device"] for rank in (0, 1)]
        print(f"CUDA ranks on devices {devices}")
    es, fs, xs = load(out + "-single.0.json")
    np.testing.assert_allclose(e0, es, rtol=1e-11, atol=0)
    np.testing.assert_allclose(f0, fs, rtol=0, atol=1e-9 * np.abs(fs).max())
    np.testing.assert_allclose(x0, xs, rtol=0, atol=1e-9)


def test_bad_domains_property_is_refused():
    import openmm

    with pytest.raises(openmm.OpenMMException, match="Domains"):
        force = openmmgraph.GraphForce(os.path.join(os.path.dirname(__file__), "..", "..", "examples", "models", "silicon-sw.safetensors"))
        force.setProperty("Domains", "threads")


FAILURE_WORKER = textwrap.dedent(
    """
    import json, math, os, sys
    import openmm
    import openmmgraph
    from openmmgraph import mpi

    model_path, platform, out, mode = sys.argv[1:5]
    mpi.initialize()
    rank, _ = mpi.world()
    # Non-periodic, on a line: particles 0 and 1 are 0.3 nm apart, the others 1 nm from any other (beyond the
    # 0.6 nm cut-off). The slabs split along x, so only rank 0's slab holds the pair.
    xs = [0.0, 0.3] + [10.0 + i for i in range(8)]
    force = openmmgraph.GraphForce(model_path)
    force.setProperty("Domains", "mpi")
    system = openmm.System()
    for i in range(len(xs)):
        system.addParticle(12.0)
        force.addParticle(i, i % 2)
    system.addForce(force)
    properties = {}
    if platform == "CUDA":
        properties = {"Precision": "mixed", "DeviceIndex": "0"}
    result = {"errors": [], "energies": []}
    try:
        context = openmm.Context(system, openmm.VerletIntegrator(0.0005), openmm.Platform.getPlatformByName(platform), properties)
        context.setPositions([openmm.Vec3(x, 0, 0) for x in xs])
        # Two evaluations that fail on every rank, none hanging: with forces twice ("forces"), or an energy alone
        # and then with forces ("mixed").
        for forces in ([True, True] if mode == "forces" else [False, True]):
            try:
                context.getState(getEnergy=True, getForces=forces)
                result["errors"].append(None)
            except openmm.OpenMMException as error:
                result["errors"].append(str(error))
        # Then, every pair beyond the cut-off, the ranks evaluate together again: their collectives still pair up.
        context.setPositions([openmm.Vec3(x, 0, 0) for x in [0.0, 5.0] + xs[2:]])
        result["energies"].append(context.getState(getEnergy=True).getPotentialEnergy()._value.hex())
        result["energies"].append(context.getState(getEnergy=True, getForces=True).getPotentialEnergy()._value.hex())
        result["energies"].append(math.fsum(force.getParticleEnergies(context)).hex())
    except openmm.OpenMMException as error:
        result["errors"].append("context: " + str(error))
    with open(f"{out}.{rank}.json", "w") as handle:
        json.dump(result, handle)
    mpi.finalize()
    """
)


def run_failure_workers(tmp_path, platform, interactions, env=None, scale=1e13, mode="forces"):
    """Two ranks of FAILURE_WORKER with a model whose fitting network's output weights are scaled by `scale` (1e13:
    the forces on the close pair are far beyond the fixed-point range); returns the two ranks' results."""
    launcher = mpiexec()
    if launcher is None:
        pytest.skip("no mpiexec (pip install mpich)")
    from openmmgraph import mpi

    if not mpi.available():
        pytest.skip("libOpenMMGraphMPI is not built (no MPI found at build time)")
    from openmmgraph.grades import make_model

    model = make_model(seed=5, n_types=2, n_channels=8, n_axis=4, fitting_widths=(16, 16), grade="small", l_max=1,
                       n_interactions=interactions)
    for name in list(model.tensors):
        if name.startswith("fitting.") and name.endswith(".out.weight"):
            model.tensors[name] = model.tensors[name] * scale
    model_path = str(tmp_path / "model.safetensors")
    model.write(model_path)
    worker = tmp_path / "failure_worker.py"
    worker.write_text(FAILURE_WORKER)
    out = str(tmp_path / "failure")
    # A hang before the fix: the timeout makes it an MPI_Abort with a message instead of the test's own timeout.
    environment = dict(os.environ, OMP_NUM_THREADS="1", OPENMM_CPU_THREADS="1", OMMGRAPH_MPI_TIMEOUT="60", **(env or {}))
    if os.geteuid() == 0:
        environment.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    environment.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")
    environment.setdefault("PRTE_MCA_rmaps_default_mapping_policy", ":oversubscribe")
    run = subprocess.run([launcher, "-n", "2", sys.executable, str(worker), model_path, platform, out, mode],
                         capture_output=True, text=True, timeout=300, env=environment)
    assert run.returncode == 0, f"mpiexec failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return [json.load(open(f"{out}.{rank}.json")) for rank in (0, 1)]


@pytest.mark.parametrize("interactions", [0, 1])
def test_a_force_beyond_the_fixed_point_range_on_one_rank_raises_on_every_rank(tmp_path, interactions):
    """Only rank 0's slab holds the pair whose force is beyond the 64-bit fixed-point range.  Rank 0 finds it while
    converting its forces for the sum; before, it raised alone and rank 1 waited in the force sum forever.  Now both
    raise, twice in a row, and then evaluate together again.  (On CUDA such errors are found on the device and were
    already agreed through the flag sum; this model's energies, beyond 1e9 kJ/mol, are refused there first.)"""
    zero, one = run_failure_workers(tmp_path, "CPU", interactions)
    for result in (zero, one):
        assert len(result["errors"]) == 2 and all(result["errors"]), result
        assert len(result["energies"]) == 3 and result["energies"][0] == result["energies"][1], result
    assert zero["energies"] == one["energies"]
    assert all("fixed-point range" in error for error in zero["errors"]), zero
    assert all("failed on 1 other rank" in error for error in one["errors"]), one


@pytest.mark.gpu
@pytest.mark.parametrize("where, interactions", [
    ("evaluation", 0), ("result", 0), ("evaluation", 1), ("exchange", 1), ("result", 1)])
def test_a_host_failure_on_one_rank_raises_on_every_rank_cuda(tmp_path, where, interactions):
    """The CUDA platform's host-side failures on one rank (a driver error, a failed allocation or copy), injected
    with OMMGRAPH_MPI_TEST_FAILURE=1:<where>:2 before the evaluation is enqueued, after the node features' exchange,
    and before the result is read back, in an energy evaluation and then one with forces: the failing rank still
    joins every collective of the evaluation with an error word, so both ranks raise (before, the other rank waited
    in MPI); then both evaluate together again (energy, forces, per-particle energies), bitwise alike."""
    zero, one = run_failure_workers(tmp_path, "CUDA", interactions, env={"OMMGRAPH_MPI_TEST_FAILURE": f"1:{where}:2"}, scale=1,
                                    mode="mixed")
    assert len(one["errors"]) == 2 and all(f"OMMGRAPH_MPI_TEST_FAILURE=1:{where}" in e for e in one["errors"]), one
    assert len(zero["errors"]) == 2 and all("failed on 1 other rank" in e for e in zero["errors"]), zero
    assert len(zero["energies"]) == 3 and zero["energies"] == one["energies"], (zero, one)
    assert zero["energies"][0] == zero["energies"][1]


@pytest.mark.gpu
def test_a_malformed_test_failure_hook_is_refused_cuda(tmp_path):
    """A malformed OMMGRAPH_MPI_TEST_FAILURE is an error naming it, agreed at Context creation: every rank's Context
    creation fails (the set-up agreement that also covers a rank whose pipeline cannot be made)."""
    zero, one = run_failure_workers(tmp_path, "CUDA", 0, env={"OMMGRAPH_MPI_TEST_FAILURE": "one:exchange"}, scale=1)
    for result in (zero, one):
        assert len(result["errors"]) == 1 and result["errors"][0].startswith("context: "), result
        assert 'OMMGRAPH_MPI_TEST_FAILURE="one:exchange" is not <rank>:<where>[:<count>]' in result["errors"][0], result
