"""Conformance tests of openmmgraph.dlpack on the CUDA platform: every view
through PyTorch, CuPy and JAX (when installed) and NumPy (host copies), the
DLPack protocol's arguments (stream, dl_device, copy), the deleter contract,
the lifetime of the Context, and the helpers against Context.getState(),
also after OpenMM has reordered the atoms.

Marked "gpu"; skipped where the CUDA platform (or a CUDA PyTorch) is missing.
They need the package installed with its C library and its CUDA plugin.
"""

import gc
import os
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

from openmmgraph import dlpack

pytestmark = pytest.mark.gpu

# JAX (test_jax) must not take most of the GPU's memory for itself.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

torch = pytest.importorskip("torch")

PRECISIONS = ["single", "mixed", "double"]
DEVICE_VIEWS = ["positions", "velocities", "forces", "atom_order"]
ALL_VIEWS = DEVICE_VIEWS + ["box"]


def positionDtype(precision):
    return "float64" if precision == "double" else "float32"


def velocityDtype(precision):
    return "float32" if precision == "single" else "float64"


def expectedLayout(name, precision, padded):
    """shape, dtype name, read-only of each view on the CUDA platform."""
    return {
        "positions": ((padded, 4), positionDtype(precision), False),
        "velocities": ((padded, 4), velocityDtype(precision), False),
        "forces": ((3, padded), "int64", False),
        "atom_order": ((padded,), "int32", True),
        "box": ((3, 3), "float64", True),
    }[name]


TORCH_DTYPES = {"float32": torch.float32, "float64": torch.float64, "int32": torch.int32, "int64": torch.int64}


def cudaPlatform():
    try:
        return openmm.Platform.getPlatformByName("CUDA")
    except Exception:
        return None


@pytest.fixture(scope="module", autouse=True)
def cudaAvailable():
    platform = cudaPlatform()
    if platform is None:
        pytest.skip("OpenMM has no CUDA platform here")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA device here")
    system = openmm.System()
    system.addParticle(1.0)
    try:
        context = openmm.Context(system, openmm.VerletIntegrator(0.001), platform)
    except Exception as error:
        pytest.skip(f"no Context on the CUDA platform: {error}")
    device = dlpack.views(context).positions.__dlpack_device__()
    assert device[0] == dlpack.DLDeviceType.kDLCUDA, device
    del context


@pytest.fixture(autouse=True)
def noLeakedViews():
    gc.collect()
    start = dlpack.live_views()
    yield
    gc.collect()
    assert dlpack.live_views() == start


def positionTolerance(precision):
    """posq holds float32 in single and mixed precision (mixed keeps the low bits in
    posqCorrection, which the positions view does not include), float64 in double."""
    return 1e-12 if precision == "double" else 1e-6


def makeContext(precision, system=None, positions=POSITIONS, velocities=VELOCITIES, integrator=None):
    system = system if system is not None else makeSystem()
    integrator = integrator if integrator is not None else openmm.VerletIntegrator(0.001)
    context = openmm.Context(system, integrator, cudaPlatform(), {"Precision": precision})
    context.setPositions(positions)
    if velocities is not None:
        context.setVelocities(velocities)
    return context


def deviceIndex(context):
    return int(context.getPlatform().getPropertyValue(context, "DeviceIndex").split(",")[0])


def paddedNumAtoms(n):
    return 32 * ((n + 31) // 32)


def hostCopy(view):
    """A NumPy host copy of a device view, through the public protocol."""
    if np.lib.NumpyVersion(np.__version__) >= "2.1.0":
        return np.from_dlpack(view, device="cpu")

    class Host:
        def __dlpack__(self, **kwargs):
            return view.__dlpack__(dl_device=(1, 0), max_version=kwargs.get("max_version"))

        def __dlpack_device__(self):
            return (1, 0)

    return np.from_dlpack(Host())


def assertSameModuloBox(actual, expected, box, atol):
    """Equal up to whole periodic box vectors (rows of box)."""
    delta = np.asarray(actual) - np.asarray(expected)
    fractional = delta @ np.linalg.inv(box)
    residual = (fractional - np.round(fractional)) @ box
    assert np.abs(residual).max() <= atol, np.abs(residual).max()


@pytest.fixture(params=PRECISIONS)
def precision(request):
    return request.param


@pytest.fixture()
def context(precision):
    return makeContext(precision)


@pytest.mark.parametrize("name", ALL_VIEWS)
def test_device(context, name):
    view = getattr(dlpack.views(context), name)
    if name == "box":
        assert view.__dlpack_device__() == (1, 0)  # a host copy on every platform
    else:
        assert view.__dlpack_device__() == (2, deviceIndex(context))
    assert dlpack.views(context).device == (2, deviceIndex(context))


@pytest.mark.parametrize("name", ALL_VIEWS)
def test_torch_layout(context, precision, name):
    padded = paddedNumAtoms(NUM_PARTICLES)
    shape, dtype, readOnly = expectedLayout(name, precision, padded)
    view = getattr(dlpack.views(context), name)
    info = view.info()
    assert info.shape == shape
    assert info.dtype == dtype
    assert info.read_only == readOnly
    tensor = torch.from_dlpack(view)
    assert tuple(tensor.shape) == shape
    assert tensor.dtype == TORCH_DTYPES[dtype]
    assert tensor.is_contiguous()
    if name == "box":
        assert tensor.device.type == "cpu"
    else:
        assert tensor.device == torch.device("cuda", deviceIndex(context))


def test_values_through_torch(context, precision):
    n = NUM_PARTICLES
    forces = stateForces(context)
    v = dlpack.views(context)
    order = torch.from_dlpack(v.atom_order).cpu().numpy()
    np.testing.assert_array_equal(order[:n], np.arange(n))  # no cutoff: OpenMM never reorders
    posq = torch.from_dlpack(v.positions).cpu().numpy()
    np.testing.assert_allclose(posq[:n, :3], POSITIONS, atol=positionTolerance(precision), rtol=0)
    velm = torch.from_dlpack(v.velocities).cpu().numpy()
    # Velocities are float32 only in single precision (mixed keeps them in double).
    np.testing.assert_allclose(velm[:n, :3], VELOCITIES, atol=1e-6 if precision == "single" else 1e-12, rtol=0)
    masses = np.array([1.0 + i for i in range(n)])
    np.testing.assert_allclose(velm[:n, 3], 1 / masses, rtol=1e-6)
    fixed = torch.from_dlpack(v.forces).cpu().numpy()
    np.testing.assert_allclose(fixed[:, :n].T / 2**32, forces, rtol=0, atol=1e-9)
    assert np.abs(forces).max() > 1.0
    np.testing.assert_array_equal(torch.from_dlpack(v.box).numpy(), BOX)


@pytest.mark.parametrize("name", DEVICE_VIEWS)
def test_numpy_host_copy(context, name):
    view = getattr(dlpack.views(context), name)
    stateForces(context)
    host = hostCopy(view)
    np.testing.assert_array_equal(host, torch.from_dlpack(view).cpu().numpy())
    capsule = view.__dlpack__(dl_device=(1, 0), max_version=(1, 0))
    assert dlpack._DLManagedTensorVersioned.from_address(
        ctypesCapsulePointer(capsule, b"dltensor_versioned")
    ).flags & 2  # IS_COPIED
    del capsule
    start = dlpack.live_views()
    with pytest.raises(BufferError):
        view.__dlpack__(dl_device=(1, 0), copy=False)
    with pytest.raises(BufferError):
        view.__dlpack__(dl_device=(3, 0))
    with pytest.raises(BufferError):
        view.__dlpack__(dl_device=(2, deviceIndex(context) + 1))
    with pytest.raises(Exception):
        np.from_dlpack(view)  # NumPy refuses device memory; the capsule frees the tensor
    gc.collect()
    assert dlpack.live_views() == start


def ctypesCapsulePointer(capsule, name):
    import ctypes

    getPointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
        ("PyCapsule_GetPointer", ctypes.pythonapi)
    )
    return getPointer(capsule, name)


def test_capsules_and_flags(context):
    v = dlpack.views(context)
    capsule = v.atom_order.__dlpack__(max_version=(1, 0), stream=1)
    tensor = dlpack._DLManagedTensorVersioned.from_address(ctypesCapsulePointer(capsule, b"dltensor_versioned"))
    assert tensor.version.major == 1
    assert tensor.flags & 1  # read-only
    assert tensor.dl_tensor.device.device_type == 2
    del tensor, capsule
    legacy = v.positions.__dlpack__(stream=1)
    assert ctypesCapsulePointer(legacy, b"dltensor")
    t = torch.utils.dlpack.from_dlpack(legacy)
    assert t.device.type == "cuda"


def test_streams(context):
    view = dlpack.views(context).positions
    for stream in (None, 1, 2, -1, torch.cuda.current_stream().cuda_stream or 1):
        assert view.__dlpack__(stream=stream) is not None
        assert view.__dlpack__(stream=stream, max_version=(1, 0)) is not None
    side = torch.cuda.Stream()
    assert view.__dlpack__(stream=side.cuda_stream, max_version=(1, 0)) is not None
    with torch.cuda.stream(side):
        tensor = torch.from_dlpack(view)  # torch passes its current stream: the side stream
        result = tensor[:NUM_PARTICLES, :3].double().cpu().numpy()
    np.testing.assert_allclose(result, POSITIONS, atol=positionTolerance(context.getPlatform().getPropertyValue(context, "Precision")), rtol=0)
    for bad in (0, -2):
        with pytest.raises(ValueError, match="stream"):
            view.__dlpack__(stream=bad)
    # the box is a host copy: CPU rules
    with pytest.raises(ValueError, match="stream"):
        dlpack.views(context).box.__dlpack__(stream=1)


def test_copy_true(context):
    view = dlpack.views(context).positions
    live = torch.from_dlpack(view)
    copied = torch.from_dlpack(view, copy=True)
    assert copied.device == live.device
    assert copied.data_ptr() != live.data_ptr()
    torch.testing.assert_close(copied, live, rtol=0, atol=0)
    copied[0, 0] = 42.0
    torch.cuda.synchronize()
    assert live[0, 0].item() != 42.0
    assert torch.from_dlpack(view).data_ptr() == live.data_ptr()  # no copy: the same memory


def test_position_correction(context, precision):
    view = dlpack.views(context).position_correction
    if precision == "mixed":
        tensor = torch.from_dlpack(view)
        assert tuple(tensor.shape) == (paddedNumAtoms(NUM_PARTICLES), 4)
        assert tensor.dtype == torch.float32
        posq = torch.from_dlpack(dlpack.views(context).positions)
        total = posq[:NUM_PARTICLES, :3].double() + tensor[:NUM_PARTICLES, :3].double()
        np.testing.assert_allclose(total.cpu().numpy(), POSITIONS, atol=1e-12, rtol=0)
    else:
        with pytest.raises(dlpack.UnavailableViewError, match="POSITION_CORRECTION"):
            torch.from_dlpack(view)


def test_writes_reach_the_context(context, precision):
    v = dlpack.views(context)
    order = torch.from_dlpack(v.atom_order).cpu().numpy()
    slot = int(np.nonzero(order == 2)[0][0])
    posq = torch.from_dlpack(v.positions)
    posq[slot, 0] = 0.75
    velm = torch.from_dlpack(v.velocities)
    velm[slot, 1] = -1.5
    torch.cuda.synchronize()
    assert statePositions(context)[2, 0] == pytest.approx(0.75, abs=1e-6)
    assert stateVelocities(context)[2, 1] == pytest.approx(-1.5, abs=1e-6)


def test_tensor_keeps_context_alive(precision):
    context = makeContext(precision)
    alive = weakref.ref(context)
    v = dlpack.views(context)
    before = sys.getrefcount(context)
    tensor = torch.from_dlpack(v.positions)
    assert sys.getrefcount(context) == before + 1
    del v, context
    gc.collect()
    assert alive() is not None
    np.testing.assert_allclose(tensor[:NUM_PARTICLES, :3].double().cpu().numpy(), POSITIONS, atol=positionTolerance(precision), rtol=0)
    del tensor
    gc.collect()
    assert alive() is None


@pytest.mark.parametrize("consumer", ["torch", "cupy"])
def test_reinitialize_refused_while_a_view_is_alive(context, precision, consumer):
    """reinitialize() frees OpenMM's device arrays and destroys the CUDA context
    they live in: refused (Context unchanged) while a zero-copy device tensor
    or a device copy lives; host copies do not count."""
    xp = torch if consumer == "torch" else pytest.importorskip("cupy")
    v = dlpack.views(context)
    held = xp.from_dlpack(v.positions)
    deviceCopy = torch.from_dlpack(v.forces, copy=True)
    copies = [hostCopy(v.velocities), np.from_dlpack(v.box)]
    assert dlpack.live_views(context) == 2
    with pytest.raises(openmm.OpenMMException, match=r"2 tensors exported .*\(positions 1, forces 1\)"):
        context.reinitialize(preserveState=True)
    del deviceCopy
    with pytest.raises(openmm.OpenMMException, match=r"1 tensor exported .*\(positions 1\)"):
        context.reinitialize(preserveState=True)
    tolerance = positionTolerance(precision)
    np.testing.assert_allclose(statePositions(context), POSITIONS, atol=tolerance, rtol=0)
    hostHeld = held.cpu().numpy() if consumer == "torch" else xp.asnumpy(held)  # still readable: no cutoff, no reordering
    np.testing.assert_allclose(hostHeld[:NUM_PARTICLES, :3], POSITIONS, atol=tolerance, rtol=0)
    del held
    context.reinitialize(preserveState=True)
    np.testing.assert_allclose(statePositions(context), POSITIONS, atol=tolerance, rtol=0)
    del copies


def test_deleter_count(context):
    start = dlpack.live_views()
    v = dlpack.views(context)
    tensors = [torch.from_dlpack(getattr(v, name)) for name in ALL_VIEWS]
    copies = [torch.from_dlpack(getattr(v, name), copy=True) for name in DEVICE_VIEWS]
    hosts = [hostCopy(getattr(v, name)) for name in DEVICE_VIEWS]
    assert dlpack.live_views() == start + len(ALL_VIEWS) + 2 * len(DEVICE_VIEWS)
    del tensors, copies, hosts
    gc.collect()
    assert dlpack.live_views() == start


def test_helpers(context, precision):
    forces = stateForces(context)
    positionTolerance = 1e-6 if precision == "single" else 1e-12
    np.testing.assert_allclose(dlpack.forces(context), forces, rtol=0, atol=1e-9)
    np.testing.assert_allclose(dlpack.positions(context), statePositions(context), rtol=0, atol=positionTolerance)
    np.testing.assert_allclose(dlpack.velocities(context), stateVelocities(context), rtol=0, atol=1e-6)
    np.testing.assert_array_equal(dlpack.box(context), BOX)
    for helper in (dlpack.forces, dlpack.positions, dlpack.velocities):
        onDevice = helper(context, xp=torch)
        assert onDevice.device.type == "cuda"
        assert onDevice.dtype == torch.float64
        assert tuple(onDevice.shape) == (NUM_PARTICLES, 3)
        np.testing.assert_array_equal(onDevice.cpu().numpy(), helper(context))
    assert dlpack.box(context, xp=torch).dtype == torch.float64


def test_compute_forces(context, precision):
    """compute_forces: getState's energy, and its forces left on the device (the buffer first holds other forces)."""
    state = context.getState(getEnergy=True, getForces=True)
    expected = state.getForces(asNumpy=True).value_in_unit(unit.kilojoule_per_mole / unit.nanometer)
    context.setPositions(POSITIONS + 0.01)
    context.getState(getForces=True)
    assert not np.array_equal(dlpack.forces(context), expected)
    context.setPositions(POSITIONS)
    energy = dlpack.compute_forces(context)
    assert energy == pytest.approx(state.getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole), rel=1e-6)
    onDevice = dlpack.forces(context, xp=torch)
    assert onDevice.device.type == "cuda"
    np.testing.assert_allclose(onDevice.cpu().numpy(), expected, rtol=0, atol=1e-9)
    assert dlpack.compute_forces(context, 1 << 9) == 0.0  # no force in group 9


# --- OpenMM's atom reordering --------------------------------------------------


def makeReorderingSystem(seed=1):
    """216 identical Lennard-Jones particles (OpenMM may permute them), in
    random System order over a lattice, some outside the box."""
    rng = np.random.default_rng(seed)
    side = 3.0
    system = openmm.System()
    system.setDefaultPeriodicBoxVectors(openmm.Vec3(side, 0, 0), openmm.Vec3(0, side, 0), openmm.Vec3(0, 0, side))
    nonbonded = openmm.NonbondedForce()
    nonbonded.setNonbondedMethod(openmm.NonbondedForce.CutoffPeriodic)
    nonbonded.setCutoffDistance(0.9)
    grid = (np.arange(6) + 0.5) * side / 6
    lattice = np.array([[x, y, z] for x in grid for y in grid for z in grid])
    positions = lattice[rng.permutation(len(lattice))] + rng.uniform(-0.03, 0.03, lattice.shape)
    positions[::7] += side  # outside the box: OpenMM wraps them when it reorders
    for _ in range(len(positions)):
        system.addParticle(39.9)
        nonbonded.addParticle(0.0, 0.34, 0.5)
    system.addForce(nonbonded)
    return system, positions, side * np.eye(3)


@pytest.fixture()
def reorderedContext(precision):
    system, positions, box = makeReorderingSystem()
    integrator = openmm.LangevinMiddleIntegrator(300 * unit.kelvin, 1 / unit.picosecond, 0.002 * unit.picoseconds)
    integrator.setRandomNumberSeed(7)
    context = makeContext(precision, system, positions, velocities=None, integrator=integrator)
    context.setVelocitiesToTemperature(300 * unit.kelvin, 3)
    return context, box


def test_helpers_after_reordering(reorderedContext, precision):
    context, box = reorderedContext
    n = context.getSystem().getNumParticles()
    v = dlpack.views(context)
    posqBefore = torch.from_dlpack(v.positions)  # taken before any reordering
    pointer = posqBefore.data_ptr()
    context.getIntegrator().step(300)
    state = context.getState(getPositions=True, getVelocities=True, getForces=True)
    order = hostCopy(v.atom_order)[:n]
    assert sorted(order.tolist()) == list(range(n))
    assert not np.array_equal(order, np.arange(n)), "OpenMM did not reorder the atoms"
    # the pointers stay valid, the rows change order
    posqNow = torch.from_dlpack(v.positions)
    assert posqNow.data_ptr() == pointer
    torch.testing.assert_close(posqBefore, posqNow, rtol=0, atol=0)
    forces = state.getForces(asNumpy=True).value_in_unit(unit.kilojoule_per_mole / unit.nanometer)
    velocities = state.getVelocities(asNumpy=True).value_in_unit(unit.nanometer / unit.picosecond)
    positions = state.getPositions(asNumpy=True).value_in_unit(unit.nanometer)
    np.testing.assert_allclose(dlpack.forces(context), forces, rtol=0, atol=1e-9)
    np.testing.assert_allclose(dlpack.velocities(context), velocities, rtol=0, atol=1e-12)
    positionTolerance = 1e-5 if precision == "single" else 1e-9
    assertSameModuloBox(dlpack.positions(context), positions, box, positionTolerance)
    for helper in (dlpack.forces, dlpack.velocities, dlpack.positions):
        np.testing.assert_array_equal(helper(context, xp=torch).cpu().numpy(), helper(context))
    # by hand from the raw views, as the module documentation describes
    fixed = hostCopy(v.forces)
    byHand = np.empty((n, 3))
    byHand[order] = fixed[:, :n].T / 2**32
    np.testing.assert_allclose(byHand, forces, rtol=0, atol=1e-9)


# --- other consumers -----------------------------------------------------------------


def test_cupy(context, precision):
    cupy = pytest.importorskip("cupy")
    stateForces(context)
    v = dlpack.views(context)
    padded = paddedNumAtoms(NUM_PARTICLES)
    for name in DEVICE_VIEWS:
        shape, dtype, _ = expectedLayout(name, precision, padded)
        array = cupy.from_dlpack(getattr(v, name))
        assert array.shape == shape
        assert array.dtype == np.dtype(dtype)
        assert array.device.id == deviceIndex(context)
        np.testing.assert_array_equal(cupy.asnumpy(array), torch.from_dlpack(getattr(v, name)).cpu().numpy())
    for helper in (dlpack.forces, dlpack.positions, dlpack.velocities):
        result = helper(context, xp=cupy)
        assert isinstance(result, cupy.ndarray)
        np.testing.assert_array_equal(cupy.asnumpy(result), helper(context))
    assert isinstance(dlpack.box(context, xp=cupy), cupy.ndarray)


def test_jax(context, precision):
    jax = pytest.importorskip("jax")
    import jax.dlpack

    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        gpus = []
    if not gpus:
        pytest.skip("JAX has no GPU backend here")
    v = dlpack.views(context)
    asked = []

    class Spy:
        """Records what JAX asks for (a legacy capsule unless it passes max_version)."""

        def __init__(self, view):
            self.view = view

        def __dlpack__(self, **kwargs):
            asked.append(kwargs)
            return self.view.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.view.__dlpack_device__()

    order = jax.dlpack.from_dlpack(Spy(v.atom_order))
    assert order.shape == (paddedNumAtoms(NUM_PARTICLES),)
    np.testing.assert_array_equal(np.asarray(order)[:NUM_PARTICLES], np.arange(NUM_PARTICLES))
    assert asked and asked[0].get("stream") not in (0,)
    if precision != "double":  # float64 needs jax_enable_x64
        posq = jax.dlpack.from_dlpack(v.positions)
        assert posq.dtype == np.float32
        np.testing.assert_allclose(np.asarray(posq)[:NUM_PARTICLES, :3], POSITIONS, atol=1e-6, rtol=0)
