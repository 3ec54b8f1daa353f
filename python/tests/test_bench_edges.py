"""bench/run_benchmarks.py's edge count after the timed steps (`edges_after_steps`): the Context's positions wrapped into
the box and counted as the starting positions are (CPU only)."""

import json

import numpy as np
import openmm
import pytest

from openmmgraph.grades import DEFAULT_CUTOFF_NM, lattice_system
from openmmgraph.torch_model import neighbor_pairs

torch = pytest.importorskip("torch")


def bare_run(bench, systems):
    """A Run without its set-up (no platform or device probing): what edges_after_steps needs, torch on the CPU."""
    run = bench.Run.__new__(bench.Run)
    run.torch, run.torch_device, run.systems = None, None, systems
    return run


def test_final_positions_are_wrapped_and_counted_as_the_start(load_script):
    bench = load_script("bench/run_benchmarks.py")
    positions, _, box = lattice_system(300, n_types=2, seed=4)
    box = np.asarray(box, dtype=np.float64)
    system = openmm.System()
    for _ in range(len(positions)):
        system.addParticle(1.0)
    system.setDefaultPeriodicBoxVectors(*[openmm.Vec3(*row) for row in box])
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference"))
    # every particle moved by whole box vectors (and a few by a slight shift): the pairs are those of the shifted positions
    shift = np.zeros_like(positions)
    shift[::3] += box[0]
    shift[1::3] -= 2 * box[1]
    shift[2::3] += box[2]
    moved = np.asarray(positions) + shift
    moved[:10] += 0.05
    context.setPositions(moved)
    final = bench.final_positions_nm(context)
    assert final.shape == (300, 3)
    assert np.all(final >= -1e-9) and np.all(final <= np.diag(box) + 1e-9)  # wrapped into the (rectangular) box
    expected = int(neighbor_pairs(torch.as_tensor(moved), torch.as_tensor(box), DEFAULT_CUTOFF_NM)[0].shape[0])
    start = int(neighbor_pairs(torch.as_tensor(np.asarray(positions)), torch.as_tensor(box), DEFAULT_CUTOFF_NM)[0].shape[0])
    assert expected != start  # the slight shift changed the pairs, so the count below follows the positions it is given
    run = bare_run(bench, {300: {"edges": start}})
    assert run.edges_after_steps(final, box, 300) == expected
    # without the starting count (it failed) there is nothing to compare with: None, not a count
    assert bare_run(bench, {300: {"edges": None}}).edges_after_steps(final, box, 300) is None


def test_quick_reference_run_records_the_edges_after_the_steps(load_script, tmp_path):
    bench = load_script("bench/run_benchmarks.py")
    out = tmp_path / "bench.json"
    assert bench.main(["--quick", "--platform", "Reference", "--grades", "small", "--sizes", "250", "--peers", "none",
                       "--time-budget", "120", "--out", str(out), "--plot", ""]) == 0
    records = json.loads(out.read_text())["records"]
    graph = [r for r in records if r["implementation"].startswith("openmm-graph") and r["grade"] == "small"]
    floor = [r for r in records if r["implementation"] == "openmm-floor"]
    assert len(graph) == 1 and len(floor) == 1, records
    assert graph[0]["error"] is None and graph[0]["step_time_s"] > 0
    assert isinstance(graph[0]["edges"], int) and graph[0]["edges"] > 0
    assert isinstance(graph[0]["edges_after_steps"], int) and graph[0]["edges_after_steps"] > 0
    assert "edges_after_steps" not in floor[0]  # a trivial force: nothing of the model's runs on those steps


def test_small_512_step_overhead_is_quoted_with_its_edge_counts(load_script, tmp_path):
    """The 512-particle step overhead of issue 3 carries the edges at the start of the timed steps and after them (the
    trajectory gathers the particles, so the steps run on more edges than the force times)."""
    bench = load_script("bench/run_benchmarks.py")
    out = tmp_path / "bench.json"
    assert bench.main(["--quick", "--platform", "Reference", "--grades", "small", "--sizes", "512", "--peers", "none",
                       "--time-budget", "120", "--out", str(out), "--plot", ""]) == 0
    document = json.loads(out.read_text())
    graph = [r for r in document["records"] if r["implementation"].startswith("openmm-graph")]
    assert len(graph) == 1 and graph[0]["error"] is None, document["records"]
    overhead = document["step_overhead_small_512"]
    assert overhead["step_overhead_s"] == pytest.approx(overhead["step_time_s"] - overhead["floor_step_time_s"])
    assert overhead["edges"] == graph[0]["edges"] and overhead["edges"] > 0
    assert overhead["edges_after_steps"] == graph[0]["edges_after_steps"] and overhead["edges_after_steps"] > 0
