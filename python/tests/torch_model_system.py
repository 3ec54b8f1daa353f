"""What the tests of exported PyTorch models share (test_torch_export.py on the CPU, test_torch_cuda.py on
CUDA): the two small models, and a Context with one GraphForce over a periodic system."""

import numpy as np
import openmm

import openmmgraph
from openmmgraph.grades import make_model

MODELS = {
    "plain": dict(grade="small"),
    "interaction": dict(grade="small", l_max=2, n_interactions=1, descriptor_l_sum=False, length_unit="angstrom",
                        energy_unit="eV", activation="silu"),
}


def small_model(name, seed=3):
    return make_model(seed=seed, n_channels=8, n_axis=4, fitting_widths=(16, 16), **MODELS[name])


def torch_kernel_on(platform):
    """Whether the LibTorch plugin for `platform` ("Reference" or "CUDA") is loaded (kernel CalcTorchGraphForce)."""
    openmmgraph.GraphForce  # noqa: B018  (the package loads its plugins on first use)
    try:
        return openmm.Platform.getPlatformByName(platform).supportsKernels(["CalcTorchGraphForce"])
    except Exception:
        return False


def torch_cuda_memory(a):
    """(allocated, reserved) bytes of PyTorch's caching allocator, after a matmul of `a` (a CUDA matrix) has made
    this stream's cuBLAS workspace again (a Context drops PyTorch's cuBLAS workspaces when it goes) and the cache is
    emptied."""
    import torch

    a @ a
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return torch.cuda.memory_allocated(), torch.cuda.memory_reserved()


def graph_context(path, types, box, positions, platform, configure=None, properties=None, periodic=True):
    """(context, force, system): a GraphForce of the model at `path` over every particle, on `platform` with
    `properties`; configure(force) runs before the force is added to the System."""
    force = openmmgraph.GraphForce(path)
    system = openmm.System()
    for i in range(len(types)):
        system.addParticle(12.0)
        force.addParticle(i, int(types[i]))
    force.setUsesPeriodicBoundaryConditions(periodic)
    if configure:
        configure(force)
    system.setDefaultPeriodicBoxVectors(*[openmm.Vec3(*map(float, row)) for row in np.asarray(box)])
    system.addForce(force)
    context = openmm.Context(system, openmm.VerletIntegrator(0.0005), openmm.Platform.getPlatformByName(platform),
                             properties or {})
    context.setPositions(np.asarray(positions))
    return context, force, system


def energy_forces(context):
    """Energy (kJ/mol) and forces (kJ/mol/nm, numpy) of the Context's current state."""
    state = context.getState(getEnergy=True, getForces=True)
    return (state.getPotentialEnergy().value_in_unit(openmm.unit.kilojoule_per_mole),
            state.getForces(asNumpy=True).value_in_unit(openmm.unit.kilojoule_per_mole / openmm.unit.nanometer))


def change_every_third_type(types, n_types, pairs):
    """Give every third particle the next type: in `types` and in each (context, force) of `pairs`, updated in the
    Context (types change in a Context for PyTorch models as for native ones)."""
    for i in range(0, len(types), 3):
        types[i] = (types[i] + 1) % n_types
        for _, force in pairs:
            force.setParticleParameters(i, i, int(types[i]))
    for context, force in pairs:
        force.updateParametersInContext(context)


def assert_float32_accuracy(energy, forces, expected_energy, expected_forces, where=""):
    """A float32 model against float64: energy to 1e-5 relative, RMS force error below 1e-4 of the RMS force."""
    assert abs(energy - expected_energy) <= 1e-5 * abs(expected_energy), where
    rms = np.sqrt(np.mean(np.sum(np.asarray(expected_forces) ** 2, axis=1)))
    assert np.sqrt(np.mean(np.sum((np.asarray(forces) - expected_forces) ** 2, axis=1))) < 1e-4 * rms, where
