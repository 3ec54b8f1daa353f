"""bench/run_benchmarks.py's resident evaluation (forces left on the device): on the Reference platform its step computes
the GraphForce's energy and forces of the Context's current positions, every step, and leaves the Verlet integrator
current (CPU only)."""

import numpy as np
import openmm
import pytest

from openmmgraph.grades import lattice_system, make_model


@pytest.fixture
def bench_context(load_script, tmp_path):
    bench = load_script("bench/run_benchmarks.py")
    model = make_model(grade="small", seed=3, radial_intervals=40)
    path = tmp_path / "small.graph"
    path.write_bytes(model.to_bytes())
    positions, types, box = lattice_system(250, n_types=len(model.type_names), seed=5)
    system = bench.make_openmm_system(len(positions), box, False, str(path), types)
    context, integrator = bench.make_context(system, positions, "Reference", {}, bench.GRAPH_FORCE_GROUP)
    return bench, context, integrator, positions


def kept(integrator):
    evaluator = integrator.getIntegrator(1)  # SWIG returns it as the CustomIntegrator it is
    return np.array(evaluator.getPerDofVariableByName("forceKept")), evaluator.getGlobalVariableByName("energyKept")


def reference(bench, context):
    state = context.getState(getForces=True, getEnergy=True, groups={bench.GRAPH_FORCE_GROUP})
    unit = openmm.unit.kilojoule_per_mole
    return (np.array(state.getForces(asNumpy=True).value_in_unit(unit / openmm.unit.nanometer)),
            state.getPotentialEnergy().value_in_unit(unit))


def test_resident_evaluator_keeps_the_forces_and_energy_of_each_step(bench_context):
    bench, context, integrator, positions = bench_context
    assert integrator.getCurrentIntegrator() == 0
    for shift in (0.0, 0.01):
        moved = np.asarray(positions) + shift * np.sin(np.arange(3 * len(positions))).reshape(-1, 3)
        context.setPositions(moved)
        integrator.setCurrentIntegrator(1)
        integrator.step(2)
        integrator.setCurrentIntegrator(0)
        forces, energy = kept(integrator)
        expected_forces, expected_energy = reference(bench, context)
        assert np.abs(forces).max() > 0
        np.testing.assert_allclose(forces, expected_forces, rtol=1e-10, atol=1e-10)
        assert energy == pytest.approx(expected_energy, rel=1e-12, abs=1e-12)
        # the step rewrote x with itself: the positions did not move
        np.testing.assert_allclose(context.getState(getPositions=True).getPositions(asNumpy=True)._value, moved, atol=1e-12)


def test_time_resident_force_restores_the_verlet_integrator(bench_context):
    bench, context, integrator, _ = bench_context
    seconds, reps, _ = bench.time_resident_force(context, integrator, bench.Settings(True), bench.Budget(60.0), 0.1)
    assert seconds > 0 and reps >= 1
    assert integrator.getCurrentIntegrator() == 0
