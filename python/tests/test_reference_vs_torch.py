"""The Reference platform (C++, double) against the PyTorch implementation
(float64): the two independent implementations of docs/model-format.md agree
to 1e-10 relative in energy and forces on every test model."""

import numpy as np
import openmm
import pytest
import torch

import openmmgraph
from openmmgraph.grades import lattice_system, make_model
from openmmgraph.torch_model import GraphModelTorch

# (id, make_model arguments).  The grades at their own shape (fewer table
# intervals only where noted, to keep the files small), then the variants.
MODELS = [
    ("small", dict(grade="small")),
    ("medium", dict(grade="medium", radial_intervals=100)),
    ("large", dict(grade="large", radial_intervals=60, n_channels=48, n_axis=8)),
    ("l0", dict(grade="small", l_max=0, radial_intervals=50)),
    ("l1-per-degree", dict(grade="small", l_max=1, descriptor_l_sum=False, radial_intervals=50)),
    ("l2-summed", dict(grade="medium", l_max=2, descriptor_l_sum=True, radial_intervals=50, n_channels=16)),
    ("l2-per-degree-interacting", dict(grade="medium", descriptor_l_sum=False, n_interactions=1, radial_intervals=50, n_channels=16)),
    ("l1-summed-interacting", dict(grade="small", n_interactions=1, radial_intervals=50)),
    ("float32-file", dict(grade="small", dtype="float32", radial_intervals=50, n_interactions=1)),
    ("angstrom-ev-silu", dict(grade="small", length_unit="angstrom", energy_unit="eV", activation="silu", radial_intervals=50)),
    ("bohr-hartree", dict(grade="small", length_unit="bohr", energy_unit="hartree", radial_intervals=50, l_max=2)),
]


def reference_energy_forces(model_bytes, positions, types, box, periodic=True, particle_subset=None, platform="Reference",
                            properties=None):
    """Energy (kJ/mol) and forces (kJ/mol/nm) of the model on an OpenMM platform (Reference by default)."""
    n = len(positions)
    system = openmm.System()
    for _ in range(n):
        system.addParticle(12.0)
    if box is not None:
        system.setDefaultPeriodicBoxVectors(*[openmm.Vec3(*row) for row in box])
    force = openmmgraph.GraphForce.fromModelBytes(model_bytes)
    for i in particle_subset if particle_subset is not None else range(n):
        force.addParticle(int(i), int(types[i]))
    force.setUsesPeriodicBoundaryConditions(periodic)
    system.addForce(force)
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName(platform), properties or {})
    context.setPositions(positions)
    state = context.getState(getEnergy=True, getForces=True)
    energy = state.getPotentialEnergy().value_in_unit(openmm.unit.kilojoule_per_mole)
    forces = np.array(state.getForces(asNumpy=True).value_in_unit(openmm.unit.kilojoule_per_mole / openmm.unit.nanometer))
    return energy, forces


def assert_agree(energy, forces, expected_energy, expected_forces, tolerance=1e-10):
    assert abs(energy - expected_energy) <= tolerance * max(1.0, abs(expected_energy)), (energy, expected_energy)
    scale = np.max(np.abs(expected_forces))
    assert scale > 0
    assert np.max(np.abs(forces - expected_forces)) <= tolerance * scale


@pytest.mark.parametrize("name, arguments", MODELS, ids=[m[0] for m in MODELS])
def test_reference_matches_torch(name, arguments):
    model = make_model(seed=3, **arguments)
    n_types = len(model.type_names)
    positions, types, box = lattice_system(250, n_types=n_types, seed=5)
    energy, forces = reference_energy_forces(model.to_bytes(), positions, types, box)
    torch_model = GraphModelTorch(model, dtype=torch.float64)
    expected_energy, expected_forces = torch_model.energy_and_forces(
        torch.tensor(positions), torch.tensor(types), torch.tensor(box)
    )
    assert_agree(energy, forces, expected_energy, expected_forces)


def test_reference_matches_torch_without_box_and_on_a_subset():
    model = make_model(grade="small", seed=4, n_interactions=1, radial_intervals=50)
    positions, types, _ = lattice_system(120, seed=6)
    subset = np.arange(0, 120, 3)
    energy, forces = reference_energy_forces(model.to_bytes(), positions, types, None, periodic=False, particle_subset=subset)
    torch_model = GraphModelTorch(model, dtype=torch.float64)
    expected_energy, expected_forces = torch_model.energy_and_forces(
        torch.tensor(positions[subset]), torch.tensor(types[subset]), None
    )
    assert_agree(energy, forces[subset], expected_energy, expected_forces)
    others = np.setdiff1d(np.arange(120), subset)
    assert np.all(forces[others] == 0.0)


def test_reference_matches_torch_in_a_triclinic_box():
    model = make_model(grade="medium", seed=8, radial_intervals=50, n_channels=16, n_interactions=1)
    rng = np.random.default_rng(9)
    box = np.array([[1.5, 0.0, 0.0], [0.4, 1.4, 0.0], [-0.5, 0.6, 1.3]])
    fractional = rng.uniform(0, 1, size=(270, 3))
    positions = fractional @ box
    types = rng.integers(0, 4, size=270)
    energy, forces = reference_energy_forces(model.to_bytes(), positions, types, box)
    torch_model = GraphModelTorch(model, dtype=torch.float64)
    expected_energy, expected_forces = torch_model.energy_and_forces(
        torch.tensor(positions), torch.tensor(types), torch.tensor(box)
    )
    assert_agree(energy, forces, expected_energy, expected_forces)


def test_particle_energies_match_torch():
    model = make_model(grade="small", seed=10, n_interactions=1, radial_intervals=50)
    positions, types, box = lattice_system(250, seed=11)
    system = openmm.System()
    for _ in range(250):
        system.addParticle(12.0)
    system.setDefaultPeriodicBoxVectors(*[openmm.Vec3(*row) for row in box])
    force = openmmgraph.GraphForce.fromModelBytes(model.to_bytes())
    for i in range(250):
        force.addParticle(i, int(types[i]))
    force.setUsesPeriodicBoundaryConditions(True)
    system.addForce(force)
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference"))
    context.setPositions(positions)
    energies = np.array(force.getParticleEnergies(context))
    expected = GraphModelTorch(model).energy(torch.tensor(positions), torch.tensor(types), torch.tensor(box), particle_energies=True)
    expected = expected.detach().numpy()
    assert np.max(np.abs(energies - expected)) <= 1e-10 * max(1.0, np.max(np.abs(expected)))


def test_cpu_platform_matches_reference_platform():
    """The CPU platform runs the same evaluator spread over its threads."""
    model = make_model(grade="small", seed=12, n_interactions=1, radial_intervals=50)
    positions, types, box = lattice_system(300, seed=13)
    reference = reference_energy_forces(model.to_bytes(), positions, types, box)
    cpu = reference_energy_forces(model.to_bytes(), positions, types, box, platform="CPU", properties={"Threads": "2"})
    assert_agree(*cpu, *reference, tolerance=1e-12)
