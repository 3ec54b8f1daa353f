"""Conformance tests of openmmgraph.dlpack on the host platforms (Reference
and CPU): every view through the real consumers (NumPy, PyTorch), the
DLPack protocol's arguments, capsule names, the deleter contract, the
lifetime of the Context, and the values against Context.getState().

They need the package installed with its C library (``pip install .``).
"""

import ctypes
import gc
import pathlib
import sys
import weakref

import numpy as np
import openmm
import pytest
from openmm import unit

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # the shared dlpack_system module (importlib mode)
from dlpack_system import (  # noqa: E402
    BOX,
    NUM_PARTICLES,
    POSITIONS,
    VELOCITIES,
    makeSystem,
    statePositions,
    stateForces,
    stateVelocities,
)

import openmmgraph
from openmmgraph import dlpack

torch = pytest.importorskip("torch")

_SOURCE_PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "openmmgraph"
if pathlib.Path(openmmgraph.__file__).resolve().parent == _SOURCE_PACKAGE:
    pytest.fail(
        "these tests must import the installed openmmgraph (pip install .), not the sources in "
        f"{_SOURCE_PACKAGE}; run pytest from the repository root (it uses --import-mode=importlib)",
        pytrace=False,
    )

PLATFORMS = ["Reference", "CPU"]

# name, shape, dtype, writeable (NumPy, versioned protocol)
HOST_LAYOUT = {
    "positions": ((NUM_PARTICLES, 3), np.float64, True),
    "velocities": ((NUM_PARTICLES, 3), np.float64, True),
    "forces": ((NUM_PARTICLES, 3), np.float64, True),
    "atom_order": ((NUM_PARTICLES,), np.int32, False),
    "box": ((3, 3), np.float64, False),
}
VIEW_NAMES = list(HOST_LAYOUT)

_PyCapsule_IsValid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi)
)
_PyCapsule_GetPointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)


def capsuleName(capsule):
    for name in (b"dltensor", b"dltensor_versioned", b"used_dltensor", b"used_dltensor_versioned"):
        if _PyCapsule_IsValid(capsule, name):
            return name.decode()
    return None


def versionedTensor(capsule):
    """The DLManagedTensorVersioned of an unconsumed versioned capsule."""
    address = _PyCapsule_GetPointer(capsule, b"dltensor_versioned")
    return dlpack._DLManagedTensorVersioned.from_address(address)


class Exporter:
    """Hands a prepared capsule to a consumer (to watch what it does to it)."""

    def __init__(self, capsule, device=(1, 0)):
        self.capsule = capsule
        self.device = device

    def __dlpack__(self, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return self.device


def makeContext(platformName):
    system = makeSystem()
    integrator = openmm.VerletIntegrator(0.001)
    context = openmm.Context(system, integrator, openmm.Platform.getPlatformByName(platformName))
    context.setPositions(POSITIONS)
    context.setVelocities(VELOCITIES)
    return context


@pytest.fixture(params=PLATFORMS)
def platformName(request):
    return request.param


@pytest.fixture()
def context(platformName):
    return makeContext(platformName)


@pytest.fixture(autouse=True)
def noLeakedViews():
    """Every test frees every tensor it exported."""
    gc.collect()
    start = dlpack.live_views()
    yield
    gc.collect()
    assert dlpack.live_views() == start


def test_lazy_names():
    assert openmmgraph.views is dlpack.views
    assert openmmgraph.dlpack is dlpack
    assert "views" in dir(openmmgraph)


@pytest.mark.parametrize("name", VIEW_NAMES)
def test_device(context, name):
    view = getattr(dlpack.views(context), name)
    assert view.__dlpack_device__() == (1, 0)
    assert view.__dlpack_device__()[0] == dlpack.DLDeviceType.kDLCPU
    assert dlpack.views(context).device == (1, 0)


@pytest.mark.parametrize("name", VIEW_NAMES)
def test_numpy_layout(context, name):
    shape, dtype, writeable = HOST_LAYOUT[name]
    view = getattr(dlpack.views(context), name)
    array = np.from_dlpack(view)
    assert array.shape == shape
    assert array.dtype == dtype
    assert array.strides == tuple(
        int(np.prod(shape[i + 1 :])) * np.dtype(dtype).itemsize for i in range(len(shape))
    )
    assert array.flags.c_contiguous
    assert array.flags.writeable == writeable
    assert view.read_only == (not writeable)
    info = view.info()
    assert info.shape == shape
    assert info.dtype == np.dtype(dtype).name
    assert info.device == (1, 0)
    assert info.read_only == (not writeable)
    assert view.shape == shape and view.dtype == np.dtype(dtype).name


@pytest.mark.parametrize("name", VIEW_NAMES)
def test_torch_layout(context, name):
    shape, dtype, _ = HOST_LAYOUT[name]
    tensor = torch.from_dlpack(getattr(dlpack.views(context), name))
    assert tuple(tensor.shape) == shape
    assert tensor.dtype == {np.float64: torch.float64, np.int32: torch.int32}[dtype]
    assert tensor.device.type == "cpu"
    assert tensor.is_contiguous()


@pytest.mark.parametrize("name", VIEW_NAMES)
def test_legacy_capsule(context, name):
    """Without max_version (or with a major version 0): a "dltensor" capsule,
    which the consumer renames when it takes the tensor."""
    shape, dtype, _ = HOST_LAYOUT[name]
    view = getattr(dlpack.views(context), name)
    for capsule in (view.__dlpack__(), view.__dlpack__(max_version=(0, 8))):
        assert capsuleName(capsule) == "dltensor"
        tensor = torch.utils.dlpack.from_dlpack(capsule)
        assert capsuleName(capsule) == "used_dltensor"
        assert tuple(tensor.shape) == shape
        np.testing.assert_array_equal(tensor.numpy(), np.from_dlpack(view))
        # NumPy takes legacy capsules too (NumPy >= 2 makes them read-only:
        # a legacy tensor cannot say whether it may be written)
        capsule = view.__dlpack__()
        array = np.from_dlpack(Exporter(capsule))
        assert capsuleName(capsule) == "used_dltensor"
        assert array.shape == shape
        np.testing.assert_array_equal(array, tensor.numpy())
        del array, tensor


@pytest.mark.parametrize("name", VIEW_NAMES)
def test_versioned_capsule(context, name):
    _, _, writeable = HOST_LAYOUT[name]
    view = getattr(dlpack.views(context), name)
    for maxVersion in ((1, 0), (1, 1), (2, 0)):
        capsule = view.__dlpack__(max_version=maxVersion)
        assert capsuleName(capsule) == "dltensor_versioned"
        tensor = versionedTensor(capsule)
        assert tensor.version.major == 1
        assert bool(tensor.flags & 1) == (not writeable)  # DLPACK_FLAG_BITMASK_READ_ONLY
        assert tensor.dl_tensor.device.device_type == 1
        array = np.from_dlpack(Exporter(capsule))
        assert capsuleName(capsule) == "used_dltensor_versioned"
        assert array.flags.writeable == writeable
        del array, tensor, capsule


def test_numpy_asks_for_versioned(context):
    """NumPy >= 2 passes max_version: read-only views reach it read-only."""
    asked = {}

    class Spy:
        def __init__(self, view):
            self.view = view

        def __dlpack__(self, **kwargs):
            asked.update(kwargs)
            return self.view.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.view.__dlpack_device__()

    array = np.from_dlpack(Spy(dlpack.views(context).box))
    if np.lib.NumpyVersion(np.__version__) >= "2.0.0":
        assert tuple(asked["max_version"]) >= (1, 0)
        assert not array.flags.writeable


def test_capsule_not_consumed_frees_tensor(context):
    start = dlpack.live_views()
    view = dlpack.views(context).positions
    capsules = [view.__dlpack__(), view.__dlpack__(max_version=(1, 0))]
    assert dlpack.live_views() == start + 2
    del capsules
    gc.collect()
    assert dlpack.live_views() == start


def test_deleter_count(context):
    start = dlpack.live_views()
    v = dlpack.views(context)
    arrays = [np.from_dlpack(getattr(v, name)) for name in VIEW_NAMES]
    tensors = [torch.from_dlpack(getattr(v, name)) for name in VIEW_NAMES]
    legacy = [torch.utils.dlpack.from_dlpack(getattr(v, name).__dlpack__()) for name in VIEW_NAMES]
    assert dlpack.live_views() == start + 3 * len(VIEW_NAMES)
    del arrays
    gc.collect()
    assert dlpack.live_views() == start + 2 * len(VIEW_NAMES)
    del tensors, legacy
    gc.collect()
    assert dlpack.live_views() == start


@pytest.mark.parametrize("consumer", ["numpy", "torch", "legacy capsule", "capsule"])
def test_array_keeps_context_alive(platformName, consumer):
    context = makeContext(platformName)
    expected = statePositions(context)
    alive = weakref.ref(context)
    v = dlpack.views(context)
    before = sys.getrefcount(context)
    if consumer == "numpy":
        array = np.from_dlpack(v.positions)
    elif consumer == "torch":
        array = torch.from_dlpack(v.positions).numpy()
    elif consumer == "legacy capsule":
        array = torch.utils.dlpack.from_dlpack(v.positions.__dlpack__()).numpy()
    else:
        array = v.positions.__dlpack__(max_version=(1, 0))  # an unconsumed capsule
    assert sys.getrefcount(context) == before + 1
    del v, context
    gc.collect()
    assert alive() is not None, "the exported tensor must keep the Context alive"
    if consumer != "capsule":
        np.testing.assert_array_equal(array, expected)
    del array
    gc.collect()
    assert alive() is None, "the Context must be freed with the last tensor"


@pytest.mark.parametrize("consumer", ["numpy", "torch", "legacy capsule", "helper"])
def test_reinitialize_refused_while_a_view_is_alive(context, consumer):
    """Context.reinitialize() frees the memory a zero-copy array points into:
    while one is alive it raises, names the view and changes nothing; once
    the arrays are gone it works (and copies never stop it)."""
    context.getState(getForces=True)
    v = dlpack.views(context)
    if consumer == "numpy":
        array = np.from_dlpack(v.forces)
    elif consumer == "torch":
        array = torch.from_dlpack(v.forces)
    elif consumer == "legacy capsule":
        array = torch.utils.dlpack.from_dlpack(v.forces.__dlpack__())
    else:
        array = dlpack.forces(context)  # the host helpers return the view itself
    copies = [np.from_dlpack(v.positions, copy=True), np.from_dlpack(v.box), np.from_dlpack(v.atom_order)]
    assert dlpack.live_views(context) == 1
    assert dlpack.live_views(context, "forces") == 1
    assert dlpack.live_views(context, "positions") == 0
    hostArray = array.numpy() if torch.is_tensor(array) else array
    before = hostArray.copy()
    context.setPositions(POSITIONS * 1.01)  # state the refused call must keep
    with pytest.raises(openmm.OpenMMException, match=r"1 tensor exported .*\(forces 1\).*The Context is unchanged"):
        context.reinitialize(preserveState=True)
    np.testing.assert_array_equal(hostArray, before)  # still the Context's memory, still readable
    np.testing.assert_allclose(statePositions(context), POSITIONS * 1.01)
    array[0, 0] += 1.0  # and still the Context's: a write reaches it
    assert np.from_dlpack(v.forces)[0, 0] == before[0, 0] + 1.0
    del array, hostArray
    context.reinitialize(preserveState=True)  # copies do not count
    assert dlpack.live_views(context) == 0
    np.testing.assert_allclose(statePositions(context), POSITIONS * 1.01)
    np.testing.assert_allclose(np.from_dlpack(dlpack.views(context).positions), POSITIONS * 1.01)
    del copies


def test_reinitialize_refusal_collects_cycles_and_counts_each_view(context):
    """Arrays kept only by a reference cycle do not block the reinitialize;
    several live views are each named."""
    v = dlpack.views(context)
    cycle = [np.from_dlpack(v.positions)]
    cycle.append(cycle)
    del cycle
    context.reinitialize()  # the guard collects the cycle before counting
    v = dlpack.views(context)
    held = [np.from_dlpack(v.positions), torch.from_dlpack(v.velocities), torch.from_dlpack(v.velocities)]
    with pytest.raises(openmm.OpenMMException, match=r"3 tensors .*\(positions 1, velocities 2\)"):
        context.reinitialize()
    other = makeContext(context.getPlatform().getName())
    other.reinitialize()  # another Context's views are not this one's
    del held
    context.reinitialize()


def test_live_views_arguments(context):
    with pytest.raises(ValueError, match="unknown view 'force'; the views are positions"):
        dlpack.live_views(context, "force")
    with pytest.raises(ValueError, match="a view needs a context"):
        dlpack.live_views(view="forces")
    with pytest.raises(TypeError, match="expected an openmm.Context"):
        dlpack.live_views(object())
    lib = dlpack._library()
    count = ctypes.c_int64()
    assert lib.contextLiveViews(int(context.this), 6, ctypes.byref(count)) == 1
    assert "unknown view number 6" in lib.lastError().decode()
    assert lib.contextLiveViews(None, -1, ctypes.byref(count)) == 1
    assert lib.contextLiveViews(int(context.this), -1, None) == 1
    assert "must not be NULL" in lib.lastError().decode()


def test_failed_export_releases_nothing(context):
    """POSITION_CORRECTION does not exist on host platforms: the error names
    it, and the reference taken for the tensor is given back."""
    v = dlpack.views(context)
    start = dlpack.live_views()
    before = sys.getrefcount(context)
    for call in (
        lambda: v.position_correction.__dlpack__(),
        lambda: v.position_correction.__dlpack__(max_version=(1, 0)),
        lambda: np.from_dlpack(v.position_correction),
        lambda: torch.from_dlpack(v.position_correction),
        lambda: v.position_correction.info(),
    ):
        with pytest.raises(dlpack.UnavailableViewError, match="POSITION_CORRECTION") as error:
            call()
        assert isinstance(error.value, RuntimeError)
        del error
    gc.collect()  # the tracebacks' frames
    assert sys.getrefcount(context) == before
    assert dlpack.live_views() == start


def test_values(context):
    v = dlpack.views(context)
    forces = stateForces(context)  # computes the forces into the Context's buffer
    assert np.abs(forces).max() > 1.0
    np.testing.assert_array_equal(np.from_dlpack(v.forces), forces)
    np.testing.assert_array_equal(np.from_dlpack(v.positions), statePositions(context))
    np.testing.assert_array_equal(np.from_dlpack(v.velocities), stateVelocities(context))
    np.testing.assert_array_equal(np.from_dlpack(v.atom_order), np.arange(NUM_PARTICLES))
    boxVectors = context.getState().getPeriodicBoxVectors(asNumpy=True).value_in_unit(unit.nanometer)
    np.testing.assert_array_equal(np.from_dlpack(v.box), boxVectors)
    np.testing.assert_array_equal(np.from_dlpack(v.box), BOX)
    np.testing.assert_array_equal(torch.from_dlpack(v.forces).numpy(), forces)


def test_views_follow_the_context(context):
    """Zero copy: the views show what OpenMM changes after they were taken."""
    v = dlpack.views(context)
    positions = np.from_dlpack(v.positions)
    forces = np.from_dlpack(v.forces)
    velocities = torch.from_dlpack(v.velocities)
    context.getIntegrator().step(3)
    np.testing.assert_array_equal(positions, statePositions(context))
    np.testing.assert_array_equal(velocities.numpy(), stateVelocities(context))
    np.testing.assert_array_equal(forces, stateForces(context))
    moved = POSITIONS + 0.01
    context.setPositions(moved)
    np.testing.assert_array_equal(positions, moved)


def test_writes_reach_the_context(context):
    v = dlpack.views(context)
    positions = np.from_dlpack(v.positions)
    positions[2] = [0.7, 0.8, 0.9]
    expected = POSITIONS.copy()
    expected[2] = [0.7, 0.8, 0.9]
    np.testing.assert_array_equal(statePositions(context), expected)
    torch.from_dlpack(v.velocities)[4, 1] = 2.5
    assert stateVelocities(context)[4, 1] == 2.5
    # the forces of the moved positions
    reference = makeContext(context.getPlatform().getName())
    reference.setPositions(expected)
    np.testing.assert_allclose(stateForces(context), stateForces(reference), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", VIEW_NAMES)
def test_copy_true_is_independent(context, name):
    view = getattr(dlpack.views(context), name)
    stateForces(context)
    live = np.from_dlpack(view)
    copied = np.from_dlpack(view, copy=True)
    np.testing.assert_array_equal(copied, live)
    assert not np.shares_memory(copied, live)
    capsule = view.__dlpack__(max_version=(1, 0), copy=True)
    assert versionedTensor(capsule).flags & 2  # DLPACK_FLAG_BITMASK_IS_COPIED
    del capsule
    if name in ("positions", "velocities", "forces"):
        capsule = view.__dlpack__(max_version=(1, 0))
        assert not versionedTensor(capsule).flags & 2
        del capsule
        copied[0, 0] = 123.0
        assert live[0, 0] != 123.0
        tensorCopy = torch.from_dlpack(view, copy=True)
        tensorCopy[1, 1] = -55.0
        assert live[1, 1] != -55.0
    if name == "positions":
        assert statePositions(context)[0, 0] == POSITIONS[0, 0]


def test_copy_false_and_none(context):
    view = dlpack.views(context).positions
    live = np.from_dlpack(view)
    assert np.shares_memory(np.from_dlpack(view, copy=False), live)
    assert np.shares_memory(np.from_dlpack(view, copy=None), live)
    with pytest.raises(TypeError):
        view.__dlpack__(copy="yes")


def test_copy_false_of_a_view_that_is_always_a_copy(context):
    """The array API: copy=False must never copy, and raise BufferError where a copy is needed."""
    v = dlpack.views(context)
    for view in (v.box, v.atom_order):  # host platforms keep no such arrays: both are copies
        with pytest.raises(BufferError, match=f"view {view.name} is always exported as a copy"):
            view.__dlpack__(max_version=(1, 0), copy=False)
        with pytest.raises(BufferError, match="copy=False forbids one"):
            view.__dlpack__(copy=False)
        assert np.from_dlpack(view).shape[0] in (3, len(POSITIONS))


def _custom_verlet_context(platformName):
    """One particle in a harmonic well, stepped by a CustomIntegrator (which keeps forces between steps)."""
    system = openmm.System()
    system.addParticle(1.0)
    well = openmm.CustomExternalForce("0.5*100*x^2")
    well.addParticle(0, [])
    system.addForce(well)
    integrator = openmm.CustomIntegrator(0.001)
    integrator.addComputePerDof("v", "v+0.5*dt*f/m")
    integrator.addComputePerDof("x", "x+dt*v")
    integrator.addComputePerDof("v", "v+0.5*dt*f/m")
    context = openmm.Context(system, integrator, openmm.Platform.getPlatformByName(platformName))
    context.setPositions([openmm.Vec3(1, 0, 0)])
    context.setVelocities([openmm.Vec3(0, 0, 0)])
    context.getIntegrator().step(1)
    return context


def test_positions_changed_tells_an_integrator_that_keeps_forces(platformName):
    """A write through the positions view is not announced to OpenMM: a CustomIntegrator steps with the
    forces of the old positions until positions_changed() tells it (as setPositions does)."""
    velocity = {}
    for how in ("setPositions", "view", "view + positions_changed"):
        context = _custom_verlet_context(platformName)
        if how == "setPositions":
            context.setPositions([openmm.Vec3(-1, 0, 0)])
        else:
            positions = np.from_dlpack(dlpack.views(context).positions)
            positions[0] = [-1.0, 0.0, 0.0]
            del positions
            if how.endswith("positions_changed"):
                dlpack.positions_changed(context)
        assert statePositions(context)[0, 0] == -1.0
        context.getIntegrator().step(1)
        velocity[how] = context.getState(getVelocities=True).getVelocities(asNumpy=True)._value[0, 0]
    assert velocity["setPositions"] > 0.0 and velocity["view"] < 0.0  # the stale forces pull the wrong way
    assert velocity["view + positions_changed"] == velocity["setPositions"]


def test_stream_on_cpu(context):
    view = dlpack.views(context).positions
    for stream in (5, 1, 2, 0):
        with pytest.raises(ValueError, match="stream"):
            view.__dlpack__(stream=stream)
        with pytest.raises(ValueError, match="stream"):
            view.__dlpack__(stream=stream, max_version=(1, 0))
    # None and -1 (no synchronization) are accepted
    assert capsuleName(view.__dlpack__(stream=None)) == "dltensor"
    assert capsuleName(view.__dlpack__(stream=-1, max_version=(1, 0))) == "dltensor_versioned"


def test_dl_device(context):
    view = dlpack.views(context).positions
    with pytest.raises(BufferError):
        view.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError):
        view.__dlpack__(dl_device=(2, 0), max_version=(1, 0), copy=True)
    with pytest.raises(BufferError):
        view.__dlpack__(dl_device=(1, 1))
    # its own device, with or without a copy
    live = np.from_dlpack(view)
    assert np.shares_memory(np.from_dlpack(view, device="cpu"), live)
    assert np.shares_memory(np.from_dlpack(view, device="cpu", copy=False), live)
    assert not np.shares_memory(np.from_dlpack(view, device="cpu", copy=True), live)
    capsule = view.__dlpack__(dl_device=(dlpack.DLDeviceType.kDLCPU, 0), max_version=(1, 0))
    assert capsuleName(capsule) == "dltensor_versioned"


def test_helpers(context):
    forces = stateForces(context)
    np.testing.assert_array_equal(dlpack.forces(context), forces)
    np.testing.assert_array_equal(dlpack.positions(context), statePositions(context))
    np.testing.assert_array_equal(dlpack.velocities(context), stateVelocities(context))
    box = dlpack.box(context)
    np.testing.assert_array_equal(box, BOX)
    box[0, 0] = 9.0  # a writeable copy
    np.testing.assert_array_equal(dlpack.box(context), BOX)
    for helper, expected in (
        (dlpack.forces, forces),
        (dlpack.positions, statePositions(context)),
        (dlpack.velocities, stateVelocities(context)),
        (dlpack.box, BOX),
    ):
        result = helper(context, xp=torch)
        assert isinstance(result, torch.Tensor)
        assert result.dtype == torch.float64
        np.testing.assert_array_equal(result.numpy(), expected)
        result = helper(context, xp=np)
        assert result.dtype == np.float64 and result.shape == expected.shape


def test_helpers_are_views_on_host(context):
    positions = dlpack.positions(context)
    positions[0] = [0.4, 0.4, 0.4]
    assert statePositions(context)[0].tolist() == [0.4, 0.4, 0.4]


def test_simulation_and_bad_arguments(context):
    class Simulation:
        pass

    simulation = Simulation()
    simulation.context = context
    np.testing.assert_array_equal(np.from_dlpack(dlpack.views(simulation).positions), POSITIONS)
    with pytest.raises(TypeError):
        dlpack.views(object())
    with pytest.raises(ValueError):
        dlpack.View(context, 17)
    names = [name for name, _ in dlpack.views(context)]
    assert names == ["positions", "position_correction", "velocities", "forces", "atom_order", "box"]
    assert "POSITIONS" in repr(dlpack.views(context).positions)
