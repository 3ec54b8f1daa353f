"""The silicon example (examples/silicon): the Stillinger-Weber reference, the
bundled trained model examples/models/silicon-sw.safetensors, and the demo."""

import pathlib
import sys

import numpy as np
import openmm
import openmm.unit as unit
import pytest

import openmmgraph
from openmmgraph.modelfile import read_model

ROOT = pathlib.Path(__file__).resolve().parents[2]
SILICON = ROOT / "examples" / "silicon"
MODEL = ROOT / "examples" / "models" / "silicon-sw.safetensors"
# Held-out force RMSE must stay below this factor times the validation RMSE of examples/silicon/README.md.
FORCE_TOLERANCE_FACTOR = 2.0

sys.path.insert(0, str(SILICON))
import sw  # noqa: E402


def _readme_validation_force_rmse():
    text = (SILICON / "README.md").read_text()
    for line in text.splitlines():
        if line.startswith("| validation") and "|" in line:
            return float(line.split("|")[3].strip())
    raise AssertionError("examples/silicon/README.md: no '| validation | E | F |' row")


def _context(system, platform="Reference"):
    return openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName(platform))


def _sw_numpy(positions, edge):
    """Stillinger-Weber energy (eV) by direct sums, independent of OpenMM (cubic box, angstrom)."""
    s, rc = sw.SIGMA_A, sw.A_CUT * sw.SIGMA_A
    neighbours = []
    for i in range(len(positions)):
        d = positions - positions[i]
        d -= edge * np.round(d / edge)
        r = np.linalg.norm(d, axis=1)
        keep = (r < rc) & (r > 0)
        neighbours.append((d[keep], r[keep]))
    energy = 0.0
    for d, r in neighbours:
        energy += 0.5 * np.sum(sw.A_2B * sw.EPSILON_EV * (sw.B_2B * (s / r) ** 4 - 1) * np.exp(s / (r - rc)))
        h = np.exp(sw.GAMMA * s / (r - rc))
        cos = (d @ d.T) / np.outer(r, r)
        j, k = np.triu_indices(len(r), 1)
        energy += np.sum(sw.LAMBDA * sw.EPSILON_EV * (cos[j, k] + 1.0 / 3.0) ** 2 * h[j] * h[k])
    return energy


def test_sw_diamond_cohesive_energy():
    positions, edge = sw.diamond(2)
    context = _context(sw.sw_system(len(positions), edge))
    context.setPositions(positions * sw.ANGSTROM)
    energy, forces = sw.energy_forces(context)
    assert energy / len(positions) == pytest.approx(sw.COHESIVE_EV, abs=1e-4)
    assert np.abs(forces).max() < 1e-8


def test_sw_matches_direct_sums_and_finite_differences():
    positions, edge = sw.diamond(2)
    positions = positions + np.random.default_rng(3).normal(0.0, 0.12, positions.shape)
    context = _context(sw.sw_system(len(positions), edge))
    context.setPositions(positions * sw.ANGSTROM)
    energy, forces = sw.energy_forces(context)
    assert energy == pytest.approx(_sw_numpy(positions, edge), rel=1e-10)
    h = 1e-4
    for atom in (0, 17, 42):
        for axis in range(3):
            values = []
            for sign in (1, -1):
                moved = positions.copy()
                moved[atom, axis] += sign * h
                context.setPositions(moved * sw.ANGSTROM)
                values.append(sw.energy_forces(context)[0])
            assert -(values[0] - values[1]) / (2 * h) == pytest.approx(forces[atom, axis], abs=1e-5)


def test_model_file_is_valid_and_small():
    assert MODEL.stat().st_size < 2 * 1024 * 1024
    model = read_model(MODEL)
    assert model.type_names == ["Si"]
    assert model.length_unit == "angstrom" and model.energy_unit == "eV"
    force = openmmgraph.GraphForce(str(MODEL))
    assert force.getNumTypes() == 1 and force.getTypeIndex("Si") == 0


def _held_out_frames():
    """Two frames not in the training data: short SW MD from fixed seeds (64 atoms)."""
    frames = []
    for temperature, scale, seed in ((1500.0, 1.0, 11), (2500.0, 0.99, 12)):
        positions, edge = sw.diamond(2, sw.LATTICE_A * scale)
        system = sw.sw_system(len(positions), edge)
        integrator = openmm.LangevinMiddleIntegrator(temperature * unit.kelvin, 2.0 / unit.picosecond,
                                                     0.001 * unit.picosecond)
        integrator.setRandomNumberSeed(seed)
        # Reference platform: the same trajectory on every machine.
        context = openmm.Context(system, integrator, openmm.Platform.getPlatformByName("Reference"))
        context.setPositions(positions * sw.ANGSTROM)
        context.setVelocitiesToTemperature(temperature * unit.kelvin, seed)
        integrator.step(150)
        xyz = context.getState(getPositions=True).getPositions(asNumpy=True).value_in_unit(unit.nanometer)
        reference = _context(sw.sw_system(len(xyz), edge))
        reference.setPositions(xyz)
        energy, forces = sw.energy_forces(reference)
        frames.append((xyz / sw.ANGSTROM, edge, energy, forces))
    return frames


def test_model_reproduces_sw_forces_on_held_out_frames(load_script):
    tolerance = FORCE_TOLERANCE_FACTOR * _readme_validation_force_rmse()
    sys.path.insert(0, str(SILICON))
    demo = load_script("examples/silicon/silicon_md.py")
    for positions, edge, energy, forces in _held_out_frames():
        context = _context(demo.ml_system(str(MODEL), len(positions), edge))
        context.setPositions(positions * sw.ANGSTROM)
        model_energy, model_forces = sw.energy_forces(context)
        rmse = np.sqrt(np.mean((model_forces - forces) ** 2))
        assert rmse < tolerance, (rmse, tolerance)
        # Energies: within 0.05 eV/atom (the SW energy range of the data is about 0.5 eV/atom).
        assert abs(model_energy - energy) / len(positions) < 0.05


def test_demo_runs(capsys, tmp_path, load_script):
    plot = tmp_path / "observables.png"
    assert load_script("examples/silicon/silicon_md.py").main(["--platform", "CPU", "--steps", "20", "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    assert "steps/s" in out and "integrated absolute difference" in out
    pytest.importorskip("matplotlib")
    assert plot.stat().st_size > 0
