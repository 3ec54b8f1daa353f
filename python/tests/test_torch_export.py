"""The project's model exported as TorchScript with the graph interface
(openmmgraph.torch_export, docs/torch-models.md) against the PyTorch
implementation, the OpenMM Reference platform and a split into domains."""

import json
import os

import numpy as np
import openmm
import pytest
import torch

import openmmgraph
from openmmgraph.grades import lattice_system, make_model
from openmmgraph.torch_export import canonical_graph, export_torchscript, read_metadata
from openmmgraph.torch_model import GraphModelTorch

MODELS = {
    "plain": dict(grade="small"),
    "interaction": dict(grade="small", l_max=2, n_interactions=1, descriptor_l_sum=False, length_unit="angstrom",
                        energy_unit="eV", activation="silu"),
}


def small_model(name, seed=3):
    return make_model(seed=seed, n_channels=8, n_axis=4, fitting_widths=(16, 16), **MODELS[name])


def system_of(n, n_types, seed=1):
    positions, types, box = lattice_system(n, n_types=n_types, seed=seed)
    return torch.tensor(positions, dtype=torch.float64), torch.as_tensor(types, dtype=torch.int64), torch.tensor(box)


def module_energy_and_forces(module, reference, positions, types, box, dtype=torch.float64):
    """Energy (kJ/mol) and forces (kJ/mol/nm) of the exported module on the canonical graph (one domain)."""
    p = positions.clone().requires_grad_(True)
    rows, neighbors, vectors = canonical_graph(p, box, reference.cutoff_nm, reference.length_scale_nm)
    energies = module(p.to(dtype) / reference.length_scale_nm, types, rows, neighbors, vectors.to(dtype),
                      (box / reference.length_scale_nm).to(dtype), len(types), 0)
    energy = energies.to(torch.float64).sum() * reference.energy_scale_kj_per_mol
    (gradient,) = torch.autograd.grad(energy, p)
    return float(energy.detach()), (-gradient).numpy()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_export_matches_pytorch_implementation(tmp_path, name):
    model = small_model(name)
    reference = GraphModelTorch(model)
    path = str(tmp_path / "model.pt")
    metadata = export_torchscript(model, path)
    assert metadata == read_metadata(path)
    assert metadata["cutoff"] == pytest.approx(reference.cutoff)
    assert [t["name"] for t in metadata["types"]] == list(model.type_names)
    module = torch.jit.load(path)
    positions, types, box = system_of(250, model.n_types)
    expected_energy, expected_forces = reference.energy_and_forces(positions, types, box)
    energy, forces = module_energy_and_forces(module, reference, positions, types, box)
    assert energy == pytest.approx(expected_energy, rel=1e-12)
    np.testing.assert_allclose(forces, expected_forces, rtol=0, atol=1e-11 * np.abs(expected_forces).max())


def test_float32_export(tmp_path):
    model = small_model("interaction")
    reference = GraphModelTorch(model)
    path = str(tmp_path / "model32.pt")
    assert export_torchscript(model, path, dtype="float32")["dtype"] == "float32"
    positions, types, box = system_of(250, model.n_types)
    expected_energy, expected_forces = reference.energy_and_forces(positions, types, box)
    energy, forces = module_energy_and_forces(torch.jit.load(path), reference, positions, types, box, torch.float32)
    assert energy == pytest.approx(expected_energy, rel=1e-5)
    rms = np.sqrt(np.mean(np.sum(expected_forces**2, axis=1)))
    assert np.sqrt(np.mean(np.sum((forces - expected_forces) ** 2, axis=1))) < 1e-4 * rms


def test_export_matches_openmm_reference_platform(tmp_path):
    model = small_model("interaction", seed=5)
    model_path = str(tmp_path / "model.safetensors")
    model.write(model_path)
    reference = GraphModelTorch(model)
    positions, types, box = system_of(250, model.n_types, seed=2)
    force = openmmgraph.GraphForce(model_path)
    system = openmm.System()
    for i in range(len(types)):
        system.addParticle(12.0)
        force.addParticle(i, int(types[i]))
    force.setUsesPeriodicBoundaryConditions(True)
    system.setDefaultPeriodicBoxVectors(*[openmm.Vec3(*map(float, row)) for row in box.numpy()])
    system.addForce(force)
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference"))
    context.setPositions(positions.numpy())
    state = context.getState(getEnergy=True, getForces=True)
    expected_energy = state.getPotentialEnergy().value_in_unit(openmm.unit.kilojoule_per_mole)
    expected_forces = state.getForces(asNumpy=True).value_in_unit(openmm.unit.kilojoule_per_mole / openmm.unit.nanometer)
    path = str(tmp_path / "model.pt")
    export_torchscript(model, path)
    energy, forces = module_energy_and_forces(torch.jit.load(path), reference, positions, types, box)
    assert energy == pytest.approx(expected_energy, rel=1e-10)
    np.testing.assert_allclose(forces, expected_forces, rtol=0, atol=1e-8 * np.abs(expected_forces).max())


def domain_inputs(positions, types, box, reference, owned_mask):
    """The inputs of one domain: its owned particles first, then the ghosts its rows reach."""
    rows, neighbors, vectors = canonical_graph(positions, box, reference.cutoff_nm, reference.length_scale_nm)
    owned = torch.nonzero(owned_mask).flatten()
    counts = rows[1:] - rows[:-1]
    centers = torch.repeat_interleave(torch.arange(len(types)), counts)
    keep = owned_mask[centers]
    edge_neighbors = neighbors[keep]
    ghosts = torch.tensor(sorted(set(edge_neighbors.tolist()) - set(owned.tolist())), dtype=torch.int64)
    local = torch.cat((owned, ghosts))
    local_of = torch.full((len(types),), -1, dtype=torch.int64)
    local_of[local] = torch.arange(len(local))
    owned_rows = torch.zeros(len(owned) + 1, dtype=torch.int64)
    owned_rows[1:] = torch.cumsum(counts[owned], 0)
    return local, owned_rows, local_of[edge_neighbors], vectors[keep], len(owned)


def test_domains_add_up_without_communication(tmp_path):
    """A model without an interaction block needs no communication: the energies and forces of
    two domains (owned particles plus the ghosts their rows reach) add up to the whole system's."""
    model = small_model("plain")
    reference = GraphModelTorch(model)
    path = str(tmp_path / "model.pt")
    export_torchscript(model, path)
    module = torch.jit.load(path)
    positions, types, box = system_of(250, model.n_types)
    expected_energy, expected_forces = module_energy_and_forces(module, reference, positions, types, box)
    p = positions.clone().requires_grad_(True)
    total = 0.0
    for owned_mask in (positions[:, 0] < box[0, 0] / 2, positions[:, 0] >= box[0, 0] / 2):
        local, rows, neighbors, vectors, n_owned = domain_inputs(p, types, box, reference, owned_mask)
        assert len(local) > n_owned  # there are ghosts
        energies = module(p[local] / reference.length_scale_nm, types[local], rows, neighbors, vectors,
                          box / reference.length_scale_nm, n_owned, 0)
        total = total + energies.sum() * reference.energy_scale_kj_per_mol
    (gradient,) = torch.autograd.grad(total, p)
    assert float(total.detach()) == pytest.approx(expected_energy, rel=1e-12)
    np.testing.assert_allclose(-gradient.numpy(), expected_forces, rtol=0, atol=1e-11 * np.abs(expected_forces).max())


def test_ghosts_without_communicate_are_refused(tmp_path):
    model = small_model("interaction")
    reference = GraphModelTorch(model)
    path = str(tmp_path / "model.pt")
    export_torchscript(model, path, use_communicate=False)
    module = torch.jit.load(path)
    positions, types, box = system_of(250, model.n_types)
    local, rows, neighbors, vectors, n_owned = domain_inputs(positions, types, box, reference, positions[:, 0] < box[0, 0] / 2)
    with pytest.raises(torch.jit.Error, match="communicate"):
        module(positions[local] / reference.length_scale_nm, types[local], rows, neighbors, vectors,
               box / reference.length_scale_nm, n_owned, 0)


def test_bad_inputs_are_refused(tmp_path):
    model = small_model("plain")
    with pytest.raises(ValueError, match="dtype"):
        export_torchscript(model, str(tmp_path / "m.pt"), dtype="float16")
    plain = torch.jit.script(torch.nn.Linear(2, 2))
    foreign = str(tmp_path / "foreign.pt")
    torch.jit.save(plain, foreign)
    with pytest.raises(ValueError, match="openmmgraph.json"):
        read_metadata(foreign)
    wrong = str(tmp_path / "wrong.pt")
    torch.jit.save(plain, wrong, _extra_files={"openmmgraph.json": json.dumps({"format": "other", "version": 9})})
    with pytest.raises(ValueError, match="format"):
        read_metadata(wrong)
    path = str(tmp_path / "model.pt")
    export_torchscript(model, path)
    module = torch.jit.load(path)
    positions, types, box = system_of(250, model.n_types)
    with pytest.raises(torch.jit.Error, match="row_offsets"):
        module(positions, types, torch.zeros(3, dtype=torch.int64), torch.zeros(0, dtype=torch.int64),
               torch.zeros(0, 3, dtype=torch.float64), box, len(types), 0)
    assert os.path.exists(path)
