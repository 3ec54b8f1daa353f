"""Tests of openmmgraph.training: the uncompressed model, compression, data readers, training, CLI."""

import json
import os
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from openmmgraph.cli import main
from openmmgraph.modelfile import read_model
from openmmgraph.torch_model import GraphModelTorch
from openmmgraph.training.compress import TableStartRaised, aligned_r0
from openmmgraph.training import EmbeddingModel, compress, export, frame_pairs, load_data, load_checkpoint, read_deepmd, train

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared tiny_training_data module (importlib mode)
from tiny_training_data import write_tiny_extxyz  # noqa: E402

@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny tensors: one intra-op thread is faster and immune to a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


SMALL = dict(n_channels=6, n_axis=3, embedding_widths=(8, 8), fitting_widths=(12, 12), n_norm=4.0)
VARIANTS = {
    "r": dict(radial="r"),
    "deepmd-interaction-l2": dict(radial="deepmd", r_smooth=2.0, n_interactions=1, l_max=2, descriptor_l_sum=False,
                                  activation="silu"),
}


def _model(variant, seed=0, **extra):
    options = dict(SMALL, **VARIANTS[variant], **extra)
    return EmbeddingModel(["O", "H"], 4.0, seed=seed, **options)


def _cluster(rng, n, radius, minimum):
    points = []
    while len(points) < n:
        p = rng.uniform(-radius, radius, 3)
        if np.linalg.norm(p) <= radius and all(np.linalg.norm(p - q) >= minimum for q in points):
            points.append(p)
    return np.array(points)


def _morse(positions, types, cell=None, depth=(1.0, 0.7), a=1.5, r_e=2.4):
    """Energy and forces of a Morse cluster (open boundaries) with type-dependent depths, eV and angstrom."""
    d = positions[None, :, :] - positions[:, None, :]
    r = np.linalg.norm(d, axis=-1)
    np.fill_diagonal(r, 1.0)
    pair_depth = np.sqrt(np.asarray(depth)[types][:, None] * np.asarray(depth)[types][None, :])
    e = np.exp(-a * (r - r_e))
    energy_matrix = pair_depth * (e * e - 2 * e)
    derivative = pair_depth * 2 * a * (e - e * e)
    np.fill_diagonal(energy_matrix, 0.0)
    np.fill_diagonal(derivative, 0.0)
    forces = ((derivative / r)[:, :, None] * d).sum(axis=1)
    return 0.5 * energy_matrix.sum(), forces


def _write_morse_extxyz(path, count, seed=0, n=8):
    import ase
    import ase.io
    from ase.calculators.singlepoint import SinglePointCalculator

    rng = np.random.default_rng(seed)
    images = []
    for _ in range(count):
        positions = _cluster(rng, n, 3.0, 2.0)
        types = rng.integers(0, 2, n)
        energy, forces = _morse(positions, types)
        atoms = ase.Atoms(symbols=[("H", "O")[t] for t in types], positions=positions)
        atoms.calc = SinglePointCalculator(atoms, energy=energy, forces=forces)
        images.append(atoms)
    ase.io.write(str(path), images, format="extxyz")


# -- the uncompressed model ------------------------------------------------------------


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("periodic", [False, True])
def test_forces_are_minus_gradient(variant, periodic):
    model = _model(variant, seed=3)
    rng = np.random.default_rng(1)
    if periodic:
        cell = np.array([[7.0, 0.0, 0.0], [1.0, 6.5, 0.0], [-0.5, 0.8, 6.8]])  # smaller than 2 r_c: images count
        positions = _cluster(rng, 10, 3.0, 1.6) + 3.0
    else:
        cell = None
        positions = _cluster(rng, 10, 3.0, 1.6)
    types = rng.integers(0, 2, 10)
    energy, forces = model.energy_and_forces(positions, types, cell)
    assert np.abs(forces).max() > 1e-3
    step = 1e-5
    numeric = np.zeros_like(forces)
    checked = [0, 3, 7]
    for atom in checked:
        for axis in range(3):
            plus, minus = positions.copy(), positions.copy()
            plus[atom, axis] += step
            minus[atom, axis] -= step
            numeric[atom, axis] = -(model.energy_and_forces(plus, types, cell)[0]
                                    - model.energy_and_forces(minus, types, cell)[0]) / (2 * step)
    np.testing.assert_allclose(forces[checked], numeric[checked], atol=1e-7 * max(1.0, np.abs(forces).max()))
    assert abs(forces.sum(axis=0)).max() < 1e-10 * max(1.0, np.abs(forces).max())  # translation invariance


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_radial_functions_and_two_derivatives_vanish_at_cutoff(variant):
    model = _model(variant, seed=5).to(torch.float64)
    cutoff = model.cutoff
    ones = None

    def derivatives(r, pair):
        nonlocal ones
        ones = torch.ones_like(r)
        f = lambda x: model.radial_functions(model.embedding, pair, x)  # noqa: E731
        first = lambda x: torch.func.jvp(f, (x,), (torch.ones_like(x),))[1]  # noqa: E731
        with torch.no_grad():
            return f(r), torch.func.jvp(f, (r,), (ones,))[1], torch.func.jvp(first, (r,), (ones,))[1]

    for pair in range(4):
        at_cutoff = derivatives(torch.tensor([cutoff], dtype=torch.float64), pair)
        for values in at_cutoff:
            assert float(values.abs().max()) < 1e-12
        # Just inside: f ~ eps^3, f' ~ eps^2, f'' ~ eps (a C2 zero).
        inside = [derivatives(torch.tensor([cutoff * (1 - eps)], dtype=torch.float64), pair) for eps in (1e-2, 1e-3)]
        for order, power in ((0, 3), (1, 2), (2, 1)):
            ratio = float(inside[0][order].abs().max()) / float(inside[1][order].abs().max())
            assert ratio == pytest.approx(10.0 ** power, rel=0.2)
    r = torch.tensor([cutoff, cutoff * 1.01, 2 * cutoff], dtype=torch.float64)
    with torch.no_grad():
        assert float(model._radial(model.embedding, torch.zeros(3, dtype=torch.long), r).abs().max()) == 0.0


# -- compression -------------------------------------------------------------------------


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_compression_error_decreases_with_intervals(variant):
    model = _model(variant, seed=7)
    r0 = 0.0 if variant == "r" else 0.8
    errors = [compress(model, intervals, r0).report for intervals in (25, 50, 100, 400)]
    values = [e.table_relative_error for e in errors]
    assert all(a > b for a, b in zip(values, values[1:])), values
    assert values[-1] < 1e-6
    assert errors[-1].derivative_relative_error < 1e-5
    assert errors[-1].energy_difference < 1e-6 * max(1.0, abs(errors[-1].energy))
    # quintic Hermite: error ~ dr^6 once resolved
    assert values[1] / values[2] > 20


def test_deepmd_switch_point_is_put_on_a_knot():
    model = _model("deepmd-interaction-l2", seed=7)  # r_s = 2, r_c = 4
    aligned = compress(model, 100, 0.8)
    unaligned = compress(model, 100, 0.8, align=False)
    r0, dr = aligned.radial_r0, aligned.radial_dr
    # r0 is a lower bound of the distances to cover: the start moves down, never up
    assert 0.8 - dr < r0 <= 0.8 and (2.0 - r0) / dr == pytest.approx(round((2.0 - r0) / dr), abs=1e-9)
    assert unaligned.radial_r0 == 0.8
    # r_s inside an interval: the switch's third-derivative jump limits the table to O(dr^3)
    assert aligned.report.table_relative_error < 1e-2 * unaligned.report.table_relative_error


def test_table_start_is_raised_only_with_a_warning():
    model = _model("deepmd-interaction-l2", seed=7)  # r_s = 2, r_c = 4
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning where a positive lower start exists
        assert aligned_r0(model, 100, 0.8) == pytest.approx(4.0 - 200 / 62)
    # 3 intervals: every start below 0.8 that puts r_s on a knot is <= 0 (4 - 3 * 2 = -2)
    with pytest.warns(TableStartRaised, match="raised to 1 .*extrapolated"):
        assert aligned_r0(model, 3, 0.8) == pytest.approx(1.0)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_compressed_file_matches_uncompressed_model(variant, tmp_path):
    model = _model(variant, seed=11, length_unit="angstrom", energy_unit="eV")
    with torch.no_grad():
        model.energy_shift.copy_(torch.tensor([-3.0, -0.5], dtype=torch.float64))
    r0 = 0.0 if variant == "r" else 0.8
    rng = np.random.default_rng(2)
    positions = _cluster(rng, 16, 3.5, 1.5) + 5.0
    types = rng.integers(0, 2, 16)
    box = np.diag([10.0, 9.0, 9.5])  # reduced form, r_c <= half the smallest height
    path = tmp_path / "model.safetensors"
    written = export(model, path, intervals=400, r0=r0, sample=(positions, types, box))
    model_file = read_model(path)
    shape = model_file.validate()
    assert (shape.radial_intervals, shape.cutoff) == (400, 4.0)
    assert shape.radial_r0 == pytest.approx(r0, abs=1e-12)
    assert shape.n_interactions == model.n_interactions
    assert written.report.force_difference < 1e-6 * written.report.force_scale

    energy, forces = model.energy_and_forces(positions, types, box)  # eV, eV/angstrom
    compressed = GraphModelTorch(path)
    energy_kj, forces_kj = compressed.energy_and_forces(positions * 0.1, types, box * 0.1)
    ev = 96.48533212331
    assert energy_kj / ev == pytest.approx(energy, rel=1e-6, abs=1e-7)
    np.testing.assert_allclose(forces_kj / ev * 0.1, forces, atol=1e-6 * np.abs(forces).max())


def test_compress_rejects_bad_r0():
    with pytest.raises(ValueError, match="r0"):
        compress(_model("deepmd-interaction-l2"), 10, r0=0.0)
    with pytest.raises(ValueError, match="r0"):
        compress(_model("r"), 10, r0=4.0)


# -- data ----------------------------------------------------------------------------------


def _write_deepmd_system(folder, rng, frames=3):
    """A periodic 2-type system in a small triclinic cell (images within r_c count)."""
    n = 6
    folder.mkdir(parents=True)
    atom_types = np.array([0, 1, 1, 0, 1, 1])
    np.savetxt(folder / "type.raw", atom_types, fmt="%d")
    (folder / "type_map.raw").write_text("O\nH\n")
    cell = np.array([[4.5, 0.0, 0.0], [0.7, 4.2, 0.0], [0.3, -0.4, 4.8]])
    for name, count in (("set.000", frames - 1), ("set.001", 1)):
        coords = np.stack([rng.uniform(0, 1, (n, 3)) @ cell for _ in range(count)])
        (folder / name).mkdir()
        np.save(folder / name / "coord.npy", coords.reshape(count, -1))
        np.save(folder / name / "energy.npy", rng.standard_normal(count))
        np.save(folder / name / "force.npy", rng.standard_normal((count, n * 3)))
        np.save(folder / name / "box.npy", np.tile(cell.reshape(1, 9), (count, 1)))
    return atom_types, cell


def test_deepmd_npy_reader_and_periodic_pairs(tmp_path):
    import ase
    from ase.neighborlist import neighbor_list

    rng = np.random.default_rng(0)
    atom_types, cell = _write_deepmd_system(tmp_path / "systems" / "water", rng)
    dataset = load_data(tmp_path / "systems")  # a folder: DeePMD-kit npy, found recursively
    assert dataset.type_names == ["H", "O"]  # sorted by atomic number
    assert len(dataset) == 3
    frame = dataset.frames[2]
    raw = np.load(tmp_path / "systems" / "water" / "set.001" / "coord.npy").reshape(-1, 3)
    np.testing.assert_array_equal(frame.positions, raw)
    np.testing.assert_array_equal(frame.types, np.where(atom_types == 0, 1, 0))
    np.testing.assert_array_equal(frame.cell, cell)
    assert frame.forces.shape == (6, 3)
    same_order = read_deepmd(tmp_path / "systems" / "water", type_map=["O", "H"])
    np.testing.assert_array_equal(same_order.frames[0].types, atom_types)

    # All images within the cut-off (which exceeds half the cell) against ASE's neighbour list.
    cutoff = 3.9
    for frame in dataset.frames:
        i, j, shift = frame_pairs(frame.positions, frame.cell, cutoff)
        atoms = ase.Atoms(positions=frame.positions, cell=frame.cell, pbc=True, numbers=[1] * 6)
        ai, aj, distances = neighbor_list("ijd", atoms, cutoff)
        ours = np.linalg.norm(frame.positions[j] - frame.positions[i] + shift, axis=1)
        assert len(i) == len(ai)
        np.testing.assert_allclose(np.sort(ours), np.sort(distances), atol=1e-12)


# -- training -------------------------------------------------------------------------------


def test_tiny_training_run_lowers_validation_loss_and_writes_a_model(tmp_path):
    data = tmp_path / "morse.extxyz"
    _write_morse_extxyz(data, 20)
    lines = []
    result = train(data=[str(data)], output=str(tmp_path / "model.safetensors"), cutoff=4.0, epochs=30,
                   batch_size=4, validation_fraction=0.2, start_lr=1e-2, stop_lr=1e-4, start_pref_f=100,
                   checkpoint_every=15,
                   intervals=100, log=lines.append, **{k: v for k, v in SMALL.items() if k != "n_norm"})
    assert result.type_names == ["H", "O"]
    assert result.final_validation["frames"] == 4
    assert result.final_validation["loss"] < 0.7 * result.initial_validation["loss"]
    assert len(result.history) == 30 and result.history[-1]["lr"] < 2e-4
    assert result.compression.table_relative_error < 1e-6
    model_file = read_model(tmp_path / "model.safetensors")
    model_file.validate()
    assert (model_file.type_names, model_file.length_unit, model_file.energy_unit) == (["H", "O"], "angstrom", "eV")
    checkpoints = tmp_path / "model.checkpoints"
    assert {"best.pt", "epoch-00015.pt", "epoch-00030.pt"} <= set(os.listdir(checkpoints))
    restored = load_checkpoint(checkpoints / "best.pt")
    frame = load_data(data).frames[0]
    assert restored.energy_and_forces(frame.positions, frame.types)[0] == pytest.approx(
        result.model.energy_and_forces(frame.positions, frame.types)[0], rel=1e-12)
    assert any(line.startswith("final model") and "eV/atom" in line for line in lines)
    # A second run with the same output would mix its checkpoints with these: refused before the data is read,
    # these kept byte for byte.
    before = {name: (checkpoints / name).read_bytes() for name in os.listdir(checkpoints)}
    (checkpoints / "notes.txt").write_text("the user's own file")
    with pytest.raises(ValueError, match=r"^training config: the checkpoint folder .*model.checkpoints' already holds "
                                         r"checkpoints of an earlier run \(best.pt, epoch-00015.pt, epoch-00030.pt\); "
                                         r"move or delete them, or choose another 'checkpoint_dir'"):
        train(data=[str(tmp_path / "missing.extxyz")], output=str(tmp_path / "model.safetensors"), log=None, **TINY)
    assert {name: (checkpoints / name).read_bytes() for name in before} == before
    # Other files in the folder are not checkpoints: a folder with only those is used.
    for name in before:
        (checkpoints / name).unlink()
    with pytest.raises(ValueError, match="missing.extxyz"):
        train(data=[str(tmp_path / "missing.extxyz")], output=str(tmp_path / "model.safetensors"), log=None, **TINY)

    # The energy shift starts at the per-type energies: frames whose energies are exactly 2 n_H - 3 n_O
    # (with different compositions) give back (2, -3).
    from openmmgraph.training.train import fit_energy_shift

    dataset = load_data(data)
    for index, frame in enumerate(dataset.frames):
        frame.types = (np.arange(frame.n_atoms) < 1 + index % frame.n_atoms).astype(np.int64)  # 1 + index % n O atoms
        frame.energy = 2.0 * np.count_nonzero(frame.types == 0) - 3.0 * np.count_nonzero(frame.types == 1)
    shift = fit_energy_shift(EmbeddingModel(["H", "O"], 4.0, **SMALL), dataset, range(len(dataset)))
    np.testing.assert_allclose(shift, [2.0, -3.0], atol=1e-10)


def test_cli_train_end_to_end(tmp_path, capsys):
    data = tmp_path / "morse.extxyz"
    _write_morse_extxyz(data, 8, seed=4)
    _write_deepmd_system(tmp_path / "npy", np.random.default_rng(3), frames=2)
    config = tmp_path / "train.json"
    config.write_text(json.dumps(dict(cutoff=4.0, epochs=2, batch_size=4, n_channels=4, n_axis=2,
                                      embedding_widths=[6], fitting_widths=[8], validation_fraction=0.25,
                                      checkpoint_every=0, radial="deepmd", r_smooth=1.0)))
    output = tmp_path / "out.safetensors"
    status = main(["train", str(config), "--data", str(data), str(tmp_path / "npy"), "-o", str(output),
                   "--intervals", "60", "--set", "start_pref_f=10", "--no-progress"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert "final model" in captured.out and "compression: K = 60" in captured.out
    model_file = read_model(output)
    assert model_file.radial_intervals == 60 and model_file.type_names == ["H", "O"]
    assert model_file.radial_r0 > 0  # deepmd radial form: half the closest distance
    assert main(["inspect", str(output)]) == 0
    assert main(["train", "--data", str(data), "--set", "no_such_option=1"]) == 2
    assert "unknown key 'no_such_option'" in capsys.readouterr().err


# -- bad input: clear errors before any work, and the data is never overwritten ------------------


TINY = dict(cutoff=3.0, epochs=1, n_channels=2, n_axis=1, embedding_widths=[4], fitting_widths=[4], intervals=10,
            checkpoint_every=0, progress=False)


def test_train_refuses_an_output_that_is_its_training_data(tmp_path):
    data = tmp_path / "data.extxyz"
    write_tiny_extxyz(data)
    before = data.read_bytes()
    with pytest.raises(ValueError, match="'output' .*data.extxyz.* is the training data .*data.extxyz"):
        train(data=[str(data)], output=str(data), log=None, **TINY)
    (tmp_path / "link.extxyz").symlink_to(data)
    os.link(data, tmp_path / "hard.extxyz")
    for output in ("link.extxyz", "hard.extxyz"):  # the same file under another name
        with pytest.raises(ValueError, match="is the training data"):
            train(data=[str(data)], output=str(tmp_path / output), log=None, **TINY)
    assert data.read_bytes() == before
    assert not (tmp_path / "data.checkpoints").exists()

    # An existing file inside a DeePMD-kit data folder, or the data folder itself (a new file beside the data is fine).
    _write_deepmd_system(tmp_path / "npy", np.random.default_rng(0), frames=2)
    with pytest.raises(ValueError, match="'output' .* is a file inside the training data folder .*npy"):
        train(data=[str(data), str(tmp_path / "npy")], output=str(tmp_path / "npy" / "set.000" / "coord.npy"),
              log=None, **TINY)
    with pytest.raises(ValueError, match="'checkpoint_dir' .* is the training data"):
        train(data=[str(tmp_path / "npy")], output=str(tmp_path / "m.safetensors"),
              checkpoint_dir=str(tmp_path / "npy"), log=None, **TINY)
    with pytest.raises(ValueError, match="'output' .* is the training data"):
        train(data=[str(tmp_path / "npy")], output=str(tmp_path / "npy"), log=None, **TINY)
    assert sorted(os.listdir(tmp_path / "npy" / "set.000")) == ["box.npy", "coord.npy", "energy.npy", "force.npy"]
    # A new file beside the data, in folders that do not exist yet, is fine (they are made).
    train(data=[str(data)], output=str(tmp_path / "runs" / "one" / "m.safetensors"), log=None, **TINY)
    assert (tmp_path / "runs" / "one" / "m.safetensors").is_file()


@pytest.mark.parametrize("options, message", [
    (dict(output_dtype="float16"), "'output_dtype': expected 'float64' or 'float32', found 'float16'"),
    (dict(intervals=0), "'intervals': expected an integer >= 1, found 0"),
    (dict(r0=10.0), r"'r0': expected 0 <= r0 < cutoff = 3.0, found 10.0"),
    (dict(r0=-1.0), r"'r0': expected 0 <= r0 < cutoff"),
    (dict(r0=0.0, radial="deepmd"), "'r0': expected r0 > 0 with radial 'deepmd'"),
    (dict(fitting_widths=[8, 0]), r"'fitting_widths': expected widths >= 1, found \[8, 0\]"),
    (dict(node_widths=[0], n_interactions=1), "'node_widths': expected widths >= 1"),
    (dict(embedding_widths=[-2]), "'embedding_widths': expected widths >= 1"),
    (dict(cutoff=float("inf")), "'cutoff': expected a finite number, found inf"),
    (dict(cutoff=float("nan")), "'cutoff': expected a finite number, found nan"),
    (dict(cutoff="nan"), "'cutoff': expected a finite number"),
    (dict(start_lr=float("inf")), "'start_lr': expected a finite number"),
    (dict(cutoff=-1.0), "'cutoff': expected a number > 0"),
    (dict(type_map=5), "'type_map': expected a list of type names"),
    (dict(type_map="Si"), "'type_map': expected a list of type names"),
    (dict(type_map=["Si", "Si"]), "'type_map': type 'Si' is named twice"),
    (dict(fitting_widths=5), "'fitting_widths': expected a list of integer widths, found 5"),
    (dict(embedding_widths=[8, 2.5]), "'embedding_widths': expected a list of integer widths"),
    (dict(epochs=True), "'epochs': expected an integer, found True"),
    (dict(epochs=[2]), "'epochs': expected an integer"),
    (dict(seed=-1), r"'seed': expected an integer in \[0, 2\^63\), found -1"),
    (dict(seed=2**64), r"'seed': expected an integer in \[0, 2\^63\), found 18446744073709551616"),
    (dict(epochs="2.5"), "'epochs': expected an integer, found '2.5'"),
    (dict(cutoff=10**400), r"'cutoff': expected a number, found 1000000"),
    (dict(seed=10**400), r"'seed': expected an integer in \[0, 2\^63\)"),
    (dict(data=5), "'data': expected a path or a list of paths, found 5"),
    (dict(output=5), "'output': expected a path, found 5"),
    (dict(cutoff=None), "'cutoff': expected a value, found null"),
    (dict(output="OUT_DIR"), "'output' .*: is a folder; expected a file path"),
    (dict(output="A_FILE/missing/m.safetensors"), "'output' .*: cannot be made .*a_file' is not a folder"),
    (dict(checkpoint_dir="A_FILE"), "'checkpoint_dir' .*a_file': exists and is not a folder"),
    (dict(output="OUT_DIR/run.checkpoints"), "'output' .*run.checkpoints' is the checkpoint folder"),
    (dict(output="OUT_DIR/m.safetensors", checkpoint_dir="OUT_DIR/m.safetensors"), "'output' .* is the checkpoint"),
    (dict(energy_weight=-1.0, force_weight=1.0), "'energy_weight': expected a weight >= 0, found -1.0"),
    (dict(limit_pref_f=-1.0), "'limit_pref_f': expected a weight >= 0"),
    (dict(energy_weight=0.0, force_weight=0.0), "energy_weight, force_weight are all 0"),
    (dict(length_unit="furlong"), "length_unit: expected one of"),
    (dict(activation="relu"), "activation: expected one of"),
    (dict(embedding_activation="relu"), "embedding_activation: expected one of"),
    (dict(radial="exp"), "radial: expected one of"),
    (dict(radial="deepmd", r_smooth=5.0), r"r_smooth: expected 0 <= r_smooth < cutoff = 3.0"),
    (dict(n_axis=3), "expected 1 <= n_axis <= n_channels"),
    (dict(l_max=3), "expected 1 <= n_axis <= n_channels, 0 <= l_max <= 2"),
    # The format's limits (session 61: these were refused only after the training run).
    (dict(intervals=2**20 + 1), r"'intervals': expected at most 1048576 \(the format's limit\), found 1048577"),
    (dict(n_channels=4097, n_axis=1), r"'n_channels': expected at most 4096"),
    (dict(fitting_widths=[4] * 65), r"'fitting_widths': expected at most 64 widths of at most 65536"),
    (dict(fitting_widths=[2**16 + 1]), r"'fitting_widths': expected at most 64 widths of at most 65536"),
    (dict(type_map=[f"T{k}" for k in range(257)]), r"'type_map': expected at most 256 type names"),
    (dict(output="OUT_DIR/new/"), "'output' .*: ends with a path separator"),
    (dict(start_lr=1e-308, stop_lr=1e308), r"'stop_lr' / 'start_lr' = 1e\+308 / 1e-308 is beyond the range"),
    (dict(start_lr=1e308, stop_lr=1e-308), r"'stop_lr' / 'start_lr' = 1e-308 / 1e\+308 is beyond the range"),
])
def test_bad_options_are_refused_before_the_data_is_read(tmp_path, options, message):
    """A path that does not exist as the data: any option error must come first."""
    (tmp_path / "a_file").write_text("x")
    options = {key: value.replace("OUT_DIR", str(tmp_path)).replace("A_FILE", str(tmp_path / "a_file"))
               if isinstance(value, str) and key in ("output", "checkpoint_dir") else value
               for key, value in options.items()}
    values = dict(TINY, data=[str(tmp_path / "missing.extxyz")], output=str(tmp_path / "m.safetensors"))
    values.update(options)
    with pytest.raises(ValueError, match="^training config: " + message):
        train(values, log=None)
    assert not (tmp_path / "m.checkpoints").exists()


def test_numbers_given_as_text_still_work():
    from openmmgraph.training.train import TrainingConfig

    config = TrainingConfig.from_dict(dict(data="x.extxyz", cutoff=".5", epochs=3.0, r0="0.25", batch_size="2"))
    assert (config.data, config.cutoff, config.epochs, config.r0, config.batch_size) == (["x.extxyz"], 0.5, 3, 0.25, 2)
    assert isinstance(config.epochs, int) and isinstance(config.batch_size, int)


def _npy_header_only(path, shape):
    """A .npy file whose header claims ``shape`` (float64) with 64 bytes of data."""
    with open(path, "wb") as stream:
        np.lib.format.write_array_header_1_0(stream, dict(descr="<f8", fortran_order=False, shape=shape))
        stream.write(bytes(64))


def _deepmd_copy(tmp_path, change):
    folder = tmp_path / "system"
    _write_deepmd_system(folder, np.random.default_rng(0), frames=3)
    change(folder)
    return folder


_BAD_DEEPMD = [
    ("empty energy.npy", lambda f: (f / "set.000" / "energy.npy").write_bytes(b""),
     r"set.000/energy.npy: not a readable .npy file \(EOFError"),
    ("truncated coord.npy", lambda f: (f / "set.000" / "coord.npy").write_bytes(
        (f / "set.000" / "coord.npy").read_bytes()[:100]), "set.000/coord.npy: not a readable .npy file"),
    ("text force.npy", lambda f: (f / "set.000" / "force.npy").write_text("hello\n"), "set.000/force.npy: not a readable"),
    ("wrong coord shape", lambda f: np.save(f / "set.000" / "coord.npy", np.zeros((2, 7))),
     r"set.000/coord.npy: expected frames x 18 values \(3 coordinates per atom; 6 atoms in type.raw\), "
     r"found an array of shape \[2, 7\]"),
    ("wrong energy count", lambda f: np.save(f / "set.000" / "energy.npy", np.zeros(5)),
     r"set.000/energy.npy: expected 2 x 1 values"),
    ("wrong force shape", lambda f: np.save(f / "set.001" / "force.npy", np.zeros((1, 17))),
     r"set.001/force.npy: expected 1 x 18 values"),
    ("wrong box shape", lambda f: np.save(f / "set.000" / "box.npy", np.zeros((2, 3))), r"set.000/box.npy: expected 2 x 9"),
    ("object array", lambda f: np.save(f / "set.000" / "energy.npy", np.array([{"a": 1}] * 2, dtype=object),
                                       allow_pickle=True), "set.000/energy.npy: not a readable .npy file"),
    ("string array", lambda f: np.save(f / "set.000" / "energy.npy", np.array(["a", "b"])),
     "set.000/energy.npy: expected a numeric array"),
    ("header claims 8 TB", lambda f: _npy_header_only(f / "set.000" / "energy.npy", (10 ** 12,)),
     "set.000/energy.npy: not a readable .npy file"),
    ("header shape overflows", lambda f: _npy_header_only(f / "set.000" / "force.npy", (10 ** 22,)),
     "set.000/force.npy: not a readable .npy file"),
    ("empty type.raw", lambda f: (f / "type.raw").write_text(""), "type.raw: no atoms"),
    ("names in type.raw", lambda f: (f / "type.raw").write_text("Si\nO\n"), "type.raw: expected one integer type per atom"),
    ("empty type_map.raw", lambda f: (f / "type_map.raw").write_text("\n"), "type_map.raw: no type names"),
    ("type_map.raw not UTF-8", lambda f: (f / "type_map.raw").write_bytes(b"O\n\xff\n"),
     "type_map.raw: expected one type name per line"),
    # Session 61: accepted before (booleans as energies 1 and 0; frames scrambled by the transposed layout).
    ("boolean energy.npy", lambda f: np.save(f / "set.000" / "energy.npy", np.array([True, False])),
     "set.000/energy.npy: expected a numeric array, found bool"),
    ("transposed coord.npy", lambda f: np.save(f / "set.000" / "coord.npy", np.load(f / "set.000" / "coord.npy").T.copy()),
     r"set.000/coord.npy: expected frames x 18 values .*found an array of shape \[18, 2\]"),
]


@pytest.mark.parametrize("change, message", [c[1:] for c in _BAD_DEEPMD], ids=[c[0] for c in _BAD_DEEPMD])
def test_malformed_deepmd_files_are_named(tmp_path, change, message):
    folder = _deepmd_copy(tmp_path, change)
    with pytest.raises(ValueError, match="^training data " + str(folder) + ".*" + message):
        load_data(folder)


@pytest.mark.parametrize("text, message", [
    ("", "Empty file"),
    ("2\nnot a comment line with Properties\nSi 0 0 0\n", "AttributeError"),
    ('3\nenergy=1.0 pbc="F F F"\nSi 0 0 0\nSi 1 1 1\n', "Frame has 2 atoms, expected 3"),
    ("abc\n", "XYZError"),
    ('1\nProperties=species:S:1:pos:R:3:forces:R:3 energy=abc pbc="F F F"\nSi 0 0 0 0 0 0\n', "energy"),
    ('1\nProperties=species:S:1:pos:R:3:forces:R:3 energy=T pbc="F F F"\nSi 0 0 0 0 0 0\n',
     "energy: expected a number, found True"),
    # Session 61: reported as "no energy" (ASE's calculator refuses atoms with non-finite positions).
    ('2\nProperties=species:S:1:pos:R:3:forces:R:3 energy=-1.0 pbc="F F F"\nSi 0 0 0 0 0 0\nSi nan 0 2 0 0 0\n',
     "positions: expected finite numbers, found nan in row 1"),
    ('1\nLattice="8 0 0 0 nan 0 0 0 8" Properties=species:S:1:pos:R:3:forces:R:3 energy=-1.0 pbc="T T T"\n'
     'Si 0 0 0 0 0 0\n', "cell: expected finite numbers, found nan in row 1"),
])
def test_malformed_extxyz_is_named(tmp_path, text, message):
    path = tmp_path / "bad.extxyz"
    path.write_text(text)
    with pytest.raises(ValueError, match=f"^training data {path}.*{message}"):
        load_data(path)


def _flat_system(tmp_path, cell):
    folder = tmp_path / "flat"
    _write_deepmd_system(folder, np.random.default_rng(0), frames=2)
    for name in ("set.000", "set.001"):
        count = np.load(folder / name / "energy.npy").shape[0]
        np.save(folder / name / "box.npy", np.tile(np.asarray(cell, float).reshape(1, 9), (count, 1)))
    return folder


@pytest.mark.parametrize("cell, message", [
    (np.diag([11.0, 11.0, 1e-4]), "height along lattice vector c .* is 0.0001, against a cut-off of 3"),
    ([[11.0, 0, 0], [0, 0.02, 0], [0, 0, 11.0]], "height along lattice vector b .* is 0.02"),  # < cutoff / 100
    (np.diag([0.1, 0.1, 0.1]), r"height along lattice vector a .* is 0.1, .* would visit 2.27e\+05 periodic images"),
])
def test_flat_cell_is_refused_quickly(tmp_path, cell, message):
    import time

    folder = _flat_system(tmp_path, cell)
    started = time.time()
    with pytest.raises(ValueError, match=f"^training data {folder}/set.00[01] frame [01]: the periodic cell's {message}"):
        train(data=[str(folder)], output=str(tmp_path / "m.safetensors"), log=None, **TINY)
    assert time.time() - started < 20
    with pytest.raises(ValueError, match="expected every height >= 0.01 \\* cutoff and at most 100000 images"):
        frame_pairs(np.zeros((1, 3)), np.asarray(cell, float), 3.0)
    # A small but real cell (every height cutoff / 10) is searched: ~4/3 pi 10^3 images of the atom.
    i, _, _ = frame_pairs(np.zeros((1, 3)), np.eye(3) * 0.3, 3.0)
    assert abs(len(i) - 4 * np.pi / 3 * 1000) < 100


def test_frame_pairs_refuses_particles_at_the_same_position_through_an_image():
    # Particle 1 one lattice vector from particle 0: wrapping leaves a rounding residue, still distance 0.
    cell = np.diag([7.3, 8.1, 9.7])
    rng = np.random.default_rng(3)
    for _ in range(20):
        x0 = rng.uniform(0, 7, 3)
        x1 = x0 + cell[0]
        fractional = np.array([x0, x1]) @ np.linalg.inv(cell)
        wrapped = np.array([x0, x1]) - np.floor(fractional) @ cell
        if np.any(wrapped[0] != wrapped[1]):
            break
    else:
        pytest.skip("no residue found")
    with pytest.raises(ValueError, match="particles 0 and 1 are at distance 0"):
        frame_pairs(np.array([x0, x1, [1.0, 1.0, 1.0]]), cell, 3.0)


def test_frame_pairs_takes_its_rows_in_blocks_with_the_same_pairs_and_bounded_memory(monkeypatch):
    import tracemalloc

    from openmmgraph.training import data as training_data

    rng = np.random.default_rng(5)
    cell = np.array([[9.1, 0.0, 0.0], [1.3, 8.7, 0.0], [-0.9, 0.8, 9.4]])
    positions = rng.uniform(-2.0, 11.0, (97, 3))  # some outside the cell: wrapped
    whole = [frame_pairs(positions, c, 3.5) for c in (cell, None)]
    for block in (1, 97 * 5, 97 * 13 + 1):  # a row a block, 5 rows, 13 rows and a remainder
        monkeypatch.setattr(training_data, "PAIR_BLOCK_ELEMENTS", block)
        for c, expected in zip((cell, None), whole):
            for ours, theirs in zip(frame_pairs(positions, c, 3.5), expected):
                np.testing.assert_array_equal(ours, theirs)
        # A coincident pair in a later block is named by its particles.
        with pytest.raises(ValueError, match="^particles 70 and 80 are at distance 0"):
            frame_pairs(np.concatenate([positions[:80], positions[70:71], positions[81:]]), cell, 3.5)
    monkeypatch.undo()
    # 6,000 atoms in an open frame: the unblocked search held [n, n, 3] float64 (864 MB); the blocks about 16 MiB each.
    positions = rng.uniform(0.0, 60.0, (6000, 3))
    tracemalloc.start()
    try:
        i, j, _ = frame_pairs(positions, None, 3.0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(i) > 0 and np.all(i != j)
    assert peak < 200 * 2**20, f"frame_pairs held {peak / 2**20:.0f} MiB at its peak"


# -- review of session 45: checkpoints, schedule, statistics and DeePMD-kit systems ---------------


def test_an_interrupted_checkpoint_write_keeps_the_previous_one(tmp_path, monkeypatch):
    from openmmgraph.training.train import TrainingConfig, save_checkpoint

    model = EmbeddingModel(["H", "O"], 4.0, **SMALL)
    path = tmp_path / "best.pt"
    save_checkpoint(path, model, TrainingConfig(), 1, {})
    before = path.read_bytes()

    def failing_save(obj, target):  # a disk that fills up half-way through the write
        (open(target, "wb") if isinstance(target, (str, os.PathLike)) else target).write(b"partial")
        raise OSError("No space left on device")

    monkeypatch.setattr(torch, "save", failing_save)
    with pytest.raises(OSError, match="No space left"):
        save_checkpoint(path, model, TrainingConfig(), 2, {})
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["best.pt"]
    monkeypatch.undo()

    def failing_replace(*args):  # the write completes but the rename fails (a full or read-only file system)
        raise OSError("Read-only file system")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="Read-only"):
        save_checkpoint(path, model, TrainingConfig(), 3, {})
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["best.pt"]  # no temporary file left
    monkeypatch.undo()
    assert load_checkpoint(path).n_types == 2


def test_learning_rate_reaches_stop_lr_at_the_last_step(tmp_path):
    data = tmp_path / "data.extxyz"
    write_tiny_extxyz(data, frames=4)
    result = train(data=[str(data)], output=str(tmp_path / "m.safetensors"), log=None,
                   **dict(TINY, epochs=3, batch_size=1, validation_fraction=0.25, start_lr=1e-3, stop_lr=1e-5))
    assert result.history[-1]["lr"] == pytest.approx(1e-5, rel=1e-12)  # 3 epochs x 3 steps, the last at stop_lr
    assert result.history[0]["lr"] == pytest.approx(1e-3 * (1e-2) ** (2 / 8), rel=1e-12)


def test_inputs_the_same_in_every_environment_are_not_scaled_up():
    """A dimer: every atom's descriptor is the same, with zero variance; the scale stays 1 (it was 1e8)."""
    from openmmgraph.training.data import Frame
    from openmmgraph.training.train import _Frames, fit_input_statistics

    model = EmbeddingModel(["Si"], 4.0, **SMALL)
    frame = Frame(np.array([[0.0, 0.0, 0.0], [2.3, 0.0, 0.0]]), np.zeros(2, np.int64), -1.0, np.zeros((2, 3)), None,
                  "dimer")
    fit_input_statistics(model, _Frames([frame], model.cutoff, torch.float64))
    network = model.fitting_networks[0]
    assert torch.all(network.input_scale == 1.0) and torch.any(network.input_shift != 0.0)


def test_deepmd_systems_need_a_box_or_nopbc(tmp_path):
    _write_deepmd_system(tmp_path / "water", np.random.default_rng(0))
    os.remove(tmp_path / "water" / "set.001" / "box.npy")
    with pytest.raises(ValueError, match=r"water/set.001: missing box.npy .*file named nopbc"):
        load_data(tmp_path / "water")
    (tmp_path / "water" / "nopbc").write_text("")
    assert all(frame.cell is None for frame in load_data(tmp_path / "water").frames)


def test_deepmd_type_indices_without_a_type_map(tmp_path):
    _write_deepmd_system(tmp_path / "sys", np.random.default_rng(0))
    os.remove(tmp_path / "sys" / "type_map.raw")
    np.savetxt(tmp_path / "sys" / "type.raw", [14] * 6, fmt="%d")  # an atomic number, not an index
    dataset = load_data(tmp_path / "sys")
    assert dataset.type_names == ["T14"] and all(np.all(frame.types == 0) for frame in dataset.frames)
    np.savetxt(tmp_path / "sys" / "type.raw", [3_000_000] * 6, fmt="%d")
    with pytest.raises(ValueError, match=r"type.raw: type index 3000000 without a type_map.raw .*below 1024"):
        load_data(tmp_path / "sys")


def test_data_read_twice_is_refused(tmp_path):
    _write_deepmd_system(tmp_path / "systems" / "water", np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"water: read twice \(through .*systems' and .*water'\)"):
        load_data([tmp_path / "systems", tmp_path / "systems" / "water"])
    data = tmp_path / "data.extxyz"
    write_tiny_extxyz(data)
    os.symlink(data, tmp_path / "link.extxyz")
    with pytest.raises(ValueError, match="read twice"):
        load_data([data, tmp_path / "link.extxyz"])


def test_a_diverging_run_stops_with_a_message(tmp_path):
    data = tmp_path / "data.extxyz"
    write_tiny_extxyz(data, frames=4)
    with pytest.raises(ValueError, match=r"^training: the (training|validation) loss .* is not finite .*lower start_lr"):
        train(data=[str(data)], output=str(tmp_path / "m.safetensors"), log=None,
              **dict(TINY, epochs=3, start_lr=1e200, stop_lr=1e199))
    assert not (tmp_path / "m.safetensors").exists()


def test_checkpoints_are_read_without_running_pickled_code(tmp_path):
    class Payload:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp_path / "ran"),))

    path = tmp_path / "evil.pt"
    torch.save({"state_dict": Payload()}, path)
    with pytest.raises(ValueError, match=r"^checkpoint .*evil.pt: cannot read it as a checkpoint"):
        load_checkpoint(path)
    assert not (tmp_path / "ran").exists()


def _cluster_extxyz(path, frames, spacing, isolated_first=False):
    """Frames of 4 Si atoms on a square of side ``spacing`` (angstrom), open boundaries, made-up labels; with
    ``isolated_first`` a one-atom frame comes first (an isolated-atom reference, as training sets often hold)."""
    lines = []
    if isolated_first:
        lines += ["1", 'Properties=species:S:1:pos:R:3:forces:R:3 energy=-0.5 pbc="F F F"', "Si 0 0 0 0 0 0"]
    for k in range(frames):
        lines += ["4", f'Properties=species:S:1:pos:R:3:forces:R:3 energy={-10.0 - 0.1 * k} pbc="F F F"']
        for x, y in ((0, 0), (1, 0), (0, 1), (1, 1)):
            lines.append(f"Si {x * spacing + 0.01 * k} {y * spacing} 0 0.1 0 0")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_no_pair_within_the_cutoff_is_refused(tmp_path):
    # Session 61: a cut-off below every distance trained a model of per-type constants, and the log gave the
    # cut-off as the closest pair.
    data = _cluster_extxyz(tmp_path / "square.extxyz", 3, spacing=2.4)
    with pytest.raises(ValueError, match=r"no pair of atoms lies within the cut-off 1 angstrom in any of the \d+ "
                                         r"training frames: use a larger cut-off"):
        train(dict(TINY, cutoff=1.0), data=[str(data)], output=str(tmp_path / "m.safetensors"), log=None)
    assert not (tmp_path / "m.safetensors").exists()


def test_l_max_0_with_an_isolated_atom_frame_trains(tmp_path):
    # Session 61: at l_max = 0 a batch (or the compression's sample frame) with no pair within the cut-off has
    # energies that do not depend on the positions, and torch.autograd.grad raised.
    data = _cluster_extxyz(tmp_path / "with-isolated.extxyz", 3, spacing=2.4, isolated_first=True)
    output = tmp_path / "m.safetensors"
    train(dict(TINY, l_max=0, validation_fraction=0.0, batch_size=1), data=[str(data)], output=str(output), log=None)
    assert output.is_file()


def test_the_log_names_the_frames_it_monitors(tmp_path, monkeypatch):
    # Session 67's review: without a validation set every epoch's line said "validation loss" although it was the
    # training frames' loss (only the last line said so).  A line an epoch is logged where there is no tqdm bar.
    import importlib

    train_module = importlib.import_module("openmmgraph.training.train")  # the module, not the function of the package
    monkeypatch.setattr(train_module, "_progress", lambda total, enabled: None)
    data = tmp_path / "data.extxyz"
    _write_morse_extxyz(data, 4)
    lines = []
    train(data=[str(data)], output=str(tmp_path / "none.safetensors"), log=lines.append,
          **dict(TINY, epochs=2, validation_fraction=0.0, progress=True))
    epochs = [line for line in lines if line.startswith("epoch ")]
    assert len(epochs) == 3 and all("training-set loss" in line and "validation" not in line for line in epochs), epochs
    assert any("training (no validation set)" in line for line in lines)
    lines.clear()
    train(data=[str(data)], output=str(tmp_path / "split.safetensors"), log=lines.append,
          **dict(TINY, epochs=2, validation_fraction=0.25, progress=True))
    epochs = [line for line in lines if line.startswith("epoch ")]
    assert len(epochs) == 3 and all("validation loss" in line and "training-set" not in line for line in epochs), epochs


def test_cli_train_prints_no_torch_script_deprecation(tmp_path):
    # Session 67's review: every `openmm-graph train` printed torch 2.15's "`torch.jit.script` is deprecated" (torch.func
    # scripts itself on first use, inside compress); nothing of the training is scripted.  A fresh process, since torch
    # warns once.
    import subprocess
    import sys

    data = tmp_path / "morse.extxyz"
    _write_morse_extxyz(data, 4, seed=2)
    done = subprocess.run([sys.executable, "-W", "default", "-m", "openmmgraph.cli", "train", "--data", str(data), "-o",
                           str(tmp_path / "m.safetensors"), "--cutoff", "3.0", "--epochs", "1", "--intervals", "10",
                           "--no-progress"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "torch.jit.script" not in done.stderr, done.stderr
