"""The platforms against spec_oracle.py, a clean-room NumPy implementation of docs/model-format.md written from the
contract alone (bench/NOTES.md v65).  The model files come from the oracle's own safetensors writer, so the loader is
checked against the contract as well.  Every case maps the force's particles to the System's in reverse order and
leaves one System particle outside the force (its force must be exactly zero).

Reference (double precision) agrees with the oracle to rounding: energy 1e-10 relative, forces 1e-9 of their RMS.
CUDA (marked gpu) is held to the shared C++ tests' tolerances (tests/GraphForceTests.h): 5e-5 of the force RMS and
2e-6 of the energy scale in single and mixed precision, 1e-8 in double.
"""

import pathlib
import sys

import numpy as np
import openmm
import pytest

import openmmgraph

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # the shared spec_oracle module (importlib mode)
import spec_oracle  # noqa: E402


def _cases():
    """24 combinations of degree, summed degrees, interaction block and activation, each with its own number of types,
    axis channels, units, box, depth and timesteps, and two files of float32 tensors."""
    cases = []
    index = 0
    for l_max in (0, 1, 2):
        for l_sum in (True, False):
            for interactions in (0, 1):
                for activation in ("tanh", "silu"):
                    box = [None, "rect", "tric"][(index // 2) % 3]
                    options = dict(
                        T=1 + index % 3, L=l_max, M=4, Ma=4 if index % 2 else 2, lsum=l_sum, nint=interactions,
                        act=activation, H=2 + index % 2, timestep=[True, False, "mixed"][index % 3],
                        length_unit=["nm", "angstrom", "bohr"][index % 3],
                        energy_unit=["kJ/mol", "kcal/mol", "eV", "hartree"][(index // 3) % 4])
                    cases.append(pytest.param(1000 + index, options, box, 30 if box is None else 45, np.float64,
                                              id=f"L{l_max}-{'sum' if l_sum else 'per'}-i{interactions}-{activation}-{box}"))
                    index += 1
    cases.append(pytest.param(7, dict(T=2, L=2, M=4, Ma=3, nint=1, act="silu"), None, 30, np.float32, id="float32"))
    cases.append(pytest.param(8, dict(T=3, L=1, M=3, Ma=3, nint=1, length_unit="angstrom", energy_unit="eV"), "tric", 45,
                              np.float32, id="float32-tric"))
    return cases


CASES = _cases()


def _case(seed, options, box, n, dtype):
    model = spec_oracle.random_model(seed, dtype=dtype, **options)
    positions, types, box_vectors = spec_oracle.random_positions(seed, model, n=n, box=box)
    return spec_oracle.model_bytes(*model), positions, types, box_vectors


def _evaluate(model_bytes, positions, types, box_vectors, platform, properties=None):
    """Energy (kJ/mol), forces (kJ/mol/nm) and particle energies in the force's particle order."""
    n = len(positions)
    system_index = np.arange(n)[::-1]  # force particle k is System particle n - 1 - k
    system = openmm.System()
    for _ in range(n + 1):  # System particle n is outside the force
        system.addParticle(1.0)
    force = openmmgraph.GraphForce.fromModelBytes(model_bytes)
    for k in range(n):
        force.addParticle(int(system_index[k]), int(types[k]))
    if box_vectors is not None:
        system.setDefaultPeriodicBoxVectors(*[openmm.Vec3(*row) for row in box_vectors])
        force.setUsesPeriodicBoundaryConditions(True)
    system.addForce(force)
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName(platform),
                             properties or {})
    system_positions = np.zeros((n + 1, 3))
    system_positions[system_index] = positions
    system_positions[n] = positions[0] + 50.0
    context.setPositions(system_positions)
    state = context.getState(getEnergy=True, getForces=True)
    energy = state.getPotentialEnergy().value_in_unit(openmm.unit.kilojoule_per_mole)
    forces = state.getForces(asNumpy=True).value_in_unit(openmm.unit.kilojoule_per_mole / openmm.unit.nanometer)
    assert np.all(np.asarray(forces)[n] == 0.0), "the System particle outside the force got a force"
    return energy, np.asarray(forces)[system_index], np.array(force.getParticleEnergies(context))


def _errors(case, platform, properties=None):
    model_bytes, positions, types, box_vectors = _case(*case)
    e_oracle, f_oracle, pe_oracle = spec_oracle.energy_forces(spec_oracle.read_model(model_bytes), positions, types,
                                                              box_vectors, per_particle=True)
    e, f, pe = _evaluate(model_bytes, positions, types, box_vectors, platform, properties)
    scale = max(abs(e_oracle), np.sum(np.abs(pe_oracle)))
    force_error = np.sqrt(np.mean((f - f_oracle) ** 2)) / np.sqrt(np.mean(f_oracle**2))
    return abs(e - e_oracle) / scale, force_error, np.max(np.abs(pe - pe_oracle)) / scale


def test_the_oracle_forces_are_its_energy_gradient():
    """The oracle checks itself: its analytic forces against central differences of its energy (an interaction block,
    l = 2, per-degree invariants, SiLU, a triclinic box)."""
    model = spec_oracle.random_model(1, T=2, L=2, nint=1, lsum=False, act="silu")
    positions, types, box_vectors = spec_oracle.random_positions(1, model, n=20, box="tric")
    _, relative = spec_oracle.finite_difference_check(model, positions, types, box_vectors, h=1e-6, nsample=4)
    assert relative < 1e-6


@pytest.mark.parametrize("seed, options, box, n, dtype", CASES)
def test_reference_follows_the_contract(seed, options, box, n, dtype):
    energy, forces, particle_energies = _errors((seed, options, box, n, dtype), "Reference")
    assert energy < 1e-10
    assert forces < 1e-9
    assert particle_energies < 1e-10


# Mixed precision on every case; single and double on every third.
GPU_CASES = [pytest.param("mixed", *case.values, id="mixed-" + case.id) for case in CASES] + [
    pytest.param(precision, *case.values, id=f"{precision}-{case.id}") for case in CASES[::3] for precision in ("single", "double")]


@pytest.mark.gpu
@pytest.mark.parametrize("precision, seed, options, box, n, dtype", GPU_CASES)
def test_cuda_follows_the_contract(precision, seed, options, box, n, dtype, graph_cuda):
    energy, forces, particle_energies = _errors((seed, options, box, n, dtype), "CUDA", {"Precision": precision})
    tolerance = 1e-8 if precision == "double" else 5e-5
    assert forces < tolerance
    assert energy < (1e-8 if precision == "double" else 2e-6)
    assert particle_energies < (1e-8 if precision == "double" else 2e-6)
