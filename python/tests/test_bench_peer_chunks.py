"""bench/run_benchmarks.py's torch peers in ranges of particles (--peer-chunks): the same energy and forces as the
whole peer, and the option's errors (CPU only)."""

import numpy as np
import pytest
import torch

from openmmgraph.grades import lattice_system, make_model
from openmmgraph.torch_model import GraphModelTorch


@pytest.mark.parametrize("with_pairs", [False, True], ids=["fixed-pairs", "pairs-built"])
def test_peer_in_ranges_gives_the_whole_peers_energy_and_forces(load_script, with_pairs):
    bench = load_script("bench/run_benchmarks.py")
    model = GraphModelTorch(make_model("medium", seed=2, radial_intervals=40, fitting_widths=[16, 16]), dtype=torch.float64)
    positions, types, box = lattice_system(400, n_types=model.n_types, seed=6)
    x, t, b = torch.tensor(positions), torch.tensor(types), torch.tensor(box)
    energy, forces = bench.torch_peer_evaluation(torch, model, x, t, b, False, with_pairs, 1)[0]()
    assert float(forces.abs().max()) > 1e-3
    for chunks in (2, 3, 7):
        evaluate, fixed_pairs = bench.torch_peer_evaluation(torch, model, x, t, b, False, with_pairs, chunks)
        assert (fixed_pairs is None) == with_pairs and (with_pairs or len(fixed_pairs) == chunks)
        energy_k, forces_k = evaluate()
        assert float(energy_k) == pytest.approx(float(energy), rel=1e-12)
        np.testing.assert_allclose(forces_k.numpy(), forces.numpy(), rtol=1e-10, atol=1e-10)


def test_compiled_peer_in_ranges_compiles_every_range(load_script):
    # torch.compile (dynamic=False) compiles each type's network once per row count: T counts a range. With too low a
    # recompile limit the ranges past it ran uncompiled, and the timing mixed compiled and eager code (a review's
    # finding): the limit the benchmark sets must hold every range, which fail_on_recompile_limit_hit makes an error.
    bench = load_script("bench/run_benchmarks.py")
    model = GraphModelTorch(make_model("medium", seed=2, radial_intervals=40, fitting_widths=[8, 8]), dtype=torch.float64)
    positions, types, box = lattice_system(240, n_types=model.n_types, seed=7)
    x, t, b = torch.tensor(positions), torch.tensor(types), torch.tensor(box)
    chunks = 3
    energy, forces = bench.torch_peer_evaluation(torch, model, x, t, b, False, False, 1)[0]()
    config = torch._dynamo.config
    saved = config.cache_size_limit, config.fail_on_recompile_limit_hit
    torch._dynamo.reset()
    try:
        config.cache_size_limit = bench.compile_limit(model.n_types, chunks)
        assert config.cache_size_limit > model.n_types * chunks
        config.fail_on_recompile_limit_hit = True
        evaluate, _ = bench.torch_peer_evaluation(torch, model, x, t, b, True, False, chunks)
        for _ in range(2):
            energy_k, forces_k = evaluate()
    finally:
        config.cache_size_limit, config.fail_on_recompile_limit_hit = saved
        torch._dynamo.reset()
    assert float(energy_k) == pytest.approx(float(energy), rel=1e-10)
    np.testing.assert_allclose(forces_k.numpy(), forces.numpy(), rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("bad, message", [("0", "distinct counts from 1 to 16"), ("17", "distinct counts from 1 to 16"),
                                          ("1,1", "distinct counts from 1 to 16"), ("", "distinct counts from 1 to 16"),
                                          ("2,x", "comma-separated integers")])
def test_peer_chunks_option_names_the_problem(load_script, bad, message, capsys):
    bench = load_script("bench/run_benchmarks.py")
    with pytest.raises(SystemExit):
        bench.main(["--peer-chunks", bad, "--quick"])
    assert f"--peer-chunks: expected {message}" in capsys.readouterr().err
