"""openmmgraph.dlpack.callback_force: a bias written in Python (NumPy, PyTorch),
added in place inside OpenMM's force evaluation, against the same bias as a
CustomExternalForce (the PySAGES-style use).  Host platforms here; the CUDA
test is marked gpu."""

import numpy as np
import openmm
import pytest
import torch

from openmmgraph import dlpack

K = 300.0  # kJ/mol/nm^2
CENTER = np.array([0.4, -0.2, 0.3])  # nm
BIASED = [0, 2, 3]


def make_system(n=5):
    system = openmm.System()
    for _ in range(n):
        system.addParticle(12.0)
    bonds = openmm.HarmonicBondForce()  # other forces in the System: the bias adds to theirs
    for i in range(n - 1):
        bonds.addBond(i, i + 1, 0.15, 500.0)
    system.addForce(bonds)
    return system


def custom_bias():
    force = openmm.CustomExternalForce("0.5*k*((x-x0)^2+(y-y0)^2+(z-z0)^2)")
    for name, value in zip(("k", "x0", "y0", "z0"), (K, *CENTER)):
        force.addGlobalParameter(name, value)
    for i in BIASED:
        force.addParticle(i)
    return force


def numpy_bias(positions, forces, box, atom_order, stream):
    x = np.from_dlpack(positions)  # [n, 3] float64, System order on host platforms
    d = x[BIASED] - CENTER
    if forces is not None:
        f = np.from_dlpack(forces)
        f[BIASED] -= K * d  # in place: OpenMM's own force buffer
    return 0.5 * K * float(np.sum(d * d))


def torch_bias(positions, forces, box, atom_order, stream):
    x = torch.from_dlpack(positions)
    d = x[BIASED] - torch.tensor(CENTER, dtype=x.dtype)
    if forces is not None:
        torch.from_dlpack(forces)[BIASED] -= K * d
    return 0.5 * K * float((d * d).sum())


def run(system, platform, positions, steps):
    integrator = openmm.VerletIntegrator(0.001)
    context = openmm.Context(system, integrator, openmm.Platform.getPlatformByName(platform))
    context.setPositions(positions)
    context.setVelocitiesToTemperature(300, 5)
    state = context.getState(getEnergy=True, getForces=True)
    energy = state.getPotentialEnergy().value_in_unit(openmm.unit.kilojoule_per_mole)
    forces = np.array(state.getForces(asNumpy=True).value_in_unit(openmm.unit.kilojoule_per_mole / openmm.unit.nanometer))
    integrator.step(steps)
    final = np.array(context.getState(getPositions=True).getPositions(asNumpy=True).value_in_unit(openmm.unit.nanometer))
    return energy, forces, final


@pytest.mark.parametrize("platform", ["Reference", "CPU"])
@pytest.mark.parametrize("bias", [numpy_bias, torch_bias], ids=["numpy", "torch"])
def test_callback_bias_matches_custom_external_force(platform, bias):
    positions = np.array([[0.0, 0.0, 0.0], [0.15, 0.02, 0.0], [0.3, 0.0, 0.05], [0.45, 0.05, 0.0], [0.6, 0.0, -0.02]])
    with_callback = make_system()
    with_callback.addForce(dlpack.callback_force(bias))
    with_custom = make_system()
    with_custom.addForce(custom_bias())
    e1, f1, x1 = run(with_callback, platform, positions, 50)
    e2, f2, x2 = run(with_custom, platform, positions, 50)
    assert e1 == pytest.approx(e2, rel=1e-12)
    assert np.max(np.abs(f1 - f2)) < 1e-9 * K
    assert np.max(np.abs(x1 - x2)) < 1e-9  # the same trajectory: the bias acts in the dynamics


def test_an_exception_in_the_callback_becomes_an_openmm_exception(capsys):
    def broken(positions, forces, box, atom_order, stream):
        raise ValueError("bias failed on purpose")

    system = make_system()
    system.addForce(dlpack.callback_force(broken))
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference"))
    context.setPositions(np.zeros((5, 3)))
    with pytest.raises(openmm.OpenMMException, match="CallbackForce"):
        context.getState(getForces=True)
    assert "bias failed on purpose" in capsys.readouterr().err


def reference_context(system, positions=None):
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference"))
    context.setPositions(np.arange(15, dtype=float).reshape(5, 3) * 0.1 if positions is None else positions)
    return context


def test_misuse_of_the_callback_is_an_error_not_a_crash(monkeypatch):
    kept = {}

    def keep(positions, forces, box, atom_order, stream):
        kept["positions"] = positions
        assert not np.from_dlpack(positions).flags.writeable  # lent read-only, as the C signature's const says
        return 0.0

    system = make_system()
    force = dlpack.callback_force(keep)
    system.addForce(force)
    context = reference_context(system)
    context.getState(getEnergy=True)
    # A view kept past the call: its memory is OpenMM's again.
    with pytest.raises(BufferError, match="positions view was used after the callback returned"):
        kept["positions"].shape
    with pytest.raises(BufferError, match="after the callback returned"):
        np.from_dlpack(kept["positions"])
    # The function cleared after the Context was created.
    force.setFunctionAddress(0, 0)
    with pytest.raises(openmm.OpenMMException, match="function was cleared after the Context was created"):
        context.getState(getEnergy=True)


def test_a_callback_that_evaluates_its_own_context_is_refused(capsys):
    holder = {}

    def reentrant(positions, forces, box, atom_order, stream):
        try:
            holder["context"].getState(getEnergy=True, groups={0})  # the rest of the System's energy, from inside
        except openmm.OpenMMException:
            if not holder.get("catch"):
                raise
        return 0.0

    # The callback first in the System, so that a nested evaluation would refill the force buffer before the bonds
    # add theirs (their forces doubled, with no error, before the check).
    system = openmm.System()
    for _ in range(5):
        system.addParticle(12.0)
    bias = dlpack.callback_force(reentrant)
    bias.setForceGroup(1)
    system.addForce(bias)
    bonds = openmm.HarmonicBondForce()
    for i in range(4):
        bonds.addBond(i, i + 1, 0.15, 500.0)
    system.addForce(bonds)
    holder["context"] = reference_context(system)
    with pytest.raises(openmm.OpenMMException, match="CallbackForce: the callback function evaluated its own Context"):
        holder["context"].getState(getForces=True)
    assert "evaluated its own Context" in capsys.readouterr().err  # the nested refusal, printed by the callback
    # A callback that catches the refusal still fails the evaluation: the nested attempt had refilled the buffer.
    holder["catch"] = True
    with pytest.raises(openmm.OpenMMException, match="evaluated its own Context .*the forces of this evaluation are lost"):
        holder["context"].getState(getForces=True)


def test_a_callback_failure_is_reported_even_when_printing_it_fails(monkeypatch):
    class BrokenStream:
        def write(self, text):
            raise OSError("stderr is gone")

        def flush(self):
            pass

    def broken(positions, forces, box, atom_order, stream):
        raise ValueError("bias failed")

    system = make_system()
    system.addForce(dlpack.callback_force(broken))
    context = reference_context(system)
    monkeypatch.setattr("sys.stderr", BrokenStream())
    with pytest.raises(openmm.OpenMMException, match="reported failure"):
        context.getState(getEnergy=True)


def test_callback_views_describe_the_state():
    seen = {}

    def inspect(positions, forces, box, atom_order, stream):
        seen["positions"] = np.from_dlpack(positions).copy()
        seen["box"] = np.from_dlpack(box).copy()
        seen["order"] = np.from_dlpack(atom_order).copy()
        seen["stream"] = stream
        seen["device"] = positions.__dlpack_device__()
        return 0.0

    system = make_system()
    system.setDefaultPeriodicBoxVectors(openmm.Vec3(2, 0, 0), openmm.Vec3(0, 2.5, 0), openmm.Vec3(0, 0, 3))
    system.addForce(dlpack.callback_force(inspect, periodic=False))
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("CPU"))
    positions = np.arange(15, dtype=float).reshape(5, 3) * 0.1
    context.setPositions(positions)
    context.getState(getEnergy=True)
    assert np.allclose(seen["positions"], positions)
    assert np.allclose(seen["box"], np.diag([2.0, 2.5, 3.0]))
    assert list(seen["order"]) == [0, 1, 2, 3, 4]
    assert seen["stream"] == 0 and seen["device"] == (dlpack.DLDeviceType.kDLCPU, 0)


@pytest.mark.gpu
def test_callback_bias_on_cuda_in_fixed_point():
    """On CUDA the force buffer is OpenMM's int64 fixed point [3][padded] in sorted order."""
    names = [openmm.Platform.getPlatform(i).getName() for i in range(openmm.Platform.getNumPlatforms())]
    if "CUDA" not in names:
        pytest.skip("no CUDA platform")

    def cuda_bias(positions, forces, box, atom_order, stream):
        with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
            posq = torch.from_dlpack(positions)  # [padded, 4]
            order = torch.from_dlpack(atom_order).long()  # slot -> System index
            n = 5
            slots = torch.nonzero(torch.isin(order[:n], torch.tensor(BIASED, device=order.device))).flatten()
            d = posq[slots, :3].double() - torch.tensor(CENTER, device=posq.device)
            if forces is not None:
                f = torch.from_dlpack(forces)  # [3, padded] int64
                f[:, slots] += torch.round(-K * d.T * 2**32).long()
            return 0.5 * K * float((d * d).sum())

    positions = np.array([[0.0, 0.0, 0.0], [0.15, 0.02, 0.0], [0.3, 0.0, 0.05], [0.45, 0.05, 0.0], [0.6, 0.0, -0.02]])
    with_callback = make_system()
    with_callback.addForce(dlpack.callback_force(cuda_bias))
    with_custom = make_system()
    with_custom.addForce(custom_bias())
    e1, f1, _ = run(with_callback, "CUDA", positions, 0)
    e2, f2, _ = run(with_custom, "CUDA", positions, 0)
    assert e1 == pytest.approx(e2, rel=1e-5)
    assert np.max(np.abs(f1 - f2)) < 1e-4 * K


def test_compute_forces_is_get_state_without_the_copy():
    system = make_system()
    bias = dlpack.callback_force(numpy_bias)
    bias.setForceGroup(3)
    system.addForce(bias)
    context = reference_context(system)
    unit = openmm.unit.kilojoule_per_mole
    for groups in (-1, 1 << 0, {3}, {0, 3}, 1 << 7, 0xFFFFFFFF):
        state = context.getState(getEnergy=True, getForces=True, groups=groups)
        context.setPositions(np.arange(15, dtype=float).reshape(5, 3) * 0.1 + 0.01)  # the buffer now holds other forces
        context.getState(getForces=True)
        context.setPositions(np.arange(15, dtype=float).reshape(5, 3) * 0.1)
        energy = dlpack.compute_forces(context, groups)
        assert energy == state.getPotentialEnergy().value_in_unit(unit), groups
        expected = state.getForces(asNumpy=True).value_in_unit(unit / openmm.unit.nanometer)
        assert np.array_equal(dlpack.forces(context), expected), groups
    assert dlpack.compute_forces(context, [0, 3]) == dlpack.compute_forces(context, {0, 3})  # a list of groups too
    # NumPy integers, as getState takes them.
    assert dlpack.compute_forces(context, np.int64(1)) == dlpack.compute_forces(context, 1)
    assert dlpack.compute_forces(context, np.uint32(0xFFFFFFFF)) == dlpack.compute_forces(context, -1)
    assert dlpack.compute_forces(context, {np.int64(3)}) == dlpack.compute_forces(context, {3})
    assert dlpack.compute_forces(context, {31}) == 0.0  # group 31: the C int's sign bit
    # The forces alone: no energy returned, the buffer refilled all the same.
    full = context.getState(getForces=True).getForces(asNumpy=True).value_in_unit(unit / openmm.unit.nanometer)
    context.setPositions(np.arange(15, dtype=float).reshape(5, 3) * 0.1 + 0.01)
    context.getState(getForces=True)
    context.setPositions(np.arange(15, dtype=float).reshape(5, 3) * 0.1)
    assert dlpack.compute_forces(context, energy=False) is None
    assert np.array_equal(dlpack.forces(context), full)
    with pytest.raises(TypeError, match="bit mask"):
        dlpack.compute_forces(context, True)
    with pytest.raises(ValueError, match="integers from 0 to 31, found True"):
        dlpack.compute_forces(context, {True})
    with pytest.raises(ValueError, match="integers from 0 to 31, found 32"):
        dlpack.compute_forces(context, {32})
    with pytest.raises(TypeError, match="bit mask"):
        dlpack.compute_forces(context, "all")
    with pytest.raises(ValueError, match="does not fit 32 bits"):
        dlpack.compute_forces(context, 1 << 33)


def test_compute_forces_raises_what_the_evaluation_reported(capsys):
    def broken(positions, forces, box, atom_order, stream):
        raise ValueError("bias failed on purpose")

    system = make_system()
    system.addForce(dlpack.callback_force(broken))
    context = reference_context(system)
    with pytest.raises(RuntimeError, match="ommgraph_compute_forces: .*CallbackForce: the callback function reported failure"):
        dlpack.compute_forces(context)
    assert "bias failed on purpose" in capsys.readouterr().err
