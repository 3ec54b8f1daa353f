"""Zero-copy DLPack views of an OpenMM Context's state (positions, velocities,
forces, the atom order, the box), for NumPy, PyTorch, CuPy, JAX or any other
consumer of the Python array API's DLPack protocol.

    import numpy as np, torch
    from openmmgraph import dlpack

    v = dlpack.views(context)            # a StateViews of an openmm.Context
    f = torch.from_dlpack(v.forces)      # zero copy (device memory on CUDA)
    x = np.from_dlpack(v.positions)      # zero copy on Reference/CPU
    x = np.from_dlpack(v.positions, device="cpu")   # host copy on CUDA (NumPy >= 2.1)

    dlpack.forces(context)               # float64 [n, 3] kJ/mol/nm in System order, any platform
    dlpack.positions(context, xp=torch)  # the same for positions, as torch tensors

Every attribute of :class:`StateViews` is a :class:`View`, an object that
implements ``__dlpack__`` and ``__dlpack_device__`` exactly as the Python array
API specifies, so any ``from_dlpack`` accepts it.  Each call of
``from_dlpack`` exports a new tensor through the C library
``libOpenMMGraphDLPack`` (``wrappers/include/OpenMMGraphDLPack.h``), loaded
with ctypes from ``openmmgraph/lib`` on first use (or from the path in the
environment variable ``OPENMMGRAPH_DLPACK_LIBRARY``).

Layout of the views, per platform (the raw memory OpenMM keeps; the helpers
:func:`forces`, :func:`positions`, :func:`velocities` and :func:`box` turn it
into float64 [n, 3] in System order on every platform):

====================  ===============================================  ======================================
view                  CUDA platform (device memory, kDLCUDA)           Reference / CPU (host memory, kDLCPU)
====================  ===============================================  ======================================
positions             posq: float32 or float64 [padded][4]: x, y, z    float64 [n][3], nm
                      in nm, w = charge (e); rows >= n are padding
position_correction   float32 [padded][4], mixed precision only        not available (error)
                      (x, y, z + correction = the position)
velocities            velm: float32/float64 [padded][4]: v in nm/ps,   float64 [n][3], nm/ps
                      w = 1/mass (1/amu), 0 for massless particles
forces                int64 [3][padded]: 64-bit fixed point,           float64 [n][3], kJ/mol/nm
                      2^32 units per kJ/mol/nm
atom_order            int32 [padded]: System index of the particle     int32 [n]: the identity (a copy)
                      in each sorted slot (read-only)
box                   float64 [3][3]: rows a, b, c in nm (a copy,      the same
                      read-only) on every platform, in host memory
                      (kDLCPU) also on CUDA
====================  ===============================================  ======================================

``padded`` is OpenMM's padded number of atoms (a multiple of 32, >= n).

Atom reordering (CUDA): OpenMM sorts the atoms in space every so often (every
250 steps or so, when the System has a nonbonded force with a cutoff).  The
pointers of the views stay valid (a tensor taken before a reordering still
points at the Context's memory), but the rows change order: row ``i`` of
positions, velocities and forces (column ``i`` of forces) then belongs to
particle ``atom_order[i]`` of the System, with ``atom_order`` as it is *now*.
The helpers always read the current ``atom_order`` and reorder by it; code
that uses the raw views must do the same every time it reads them.  When it
reorders, OpenMM also moves each molecule into the periodic box, so on CUDA
:func:`positions` gives the wrapped positions, which may differ from
``context.getState(getPositions=True)`` by whole periodic box vectors (the
C API does not export OpenMM's cell offsets).

Which forces are in the forces view: those of the Context's last evaluation
of any kind (an integrator step, ``getState(getForces=True)``, and also
``getState(getEnergy=True)``, which refills OpenMM's force buffer), restricted
to the force groups that evaluation asked for (``groups=``): never computed by
the views or the helpers.  Before the Context's first evaluation the view
holds whatever OpenMM's buffer holds (on CUDA, memory OpenMM has not written
yet): evaluate first.

Writing: the positions, velocities and forces views (and the Reference/CPU
results of the helpers, which are those views) are writable, and a write
changes the Context's state at once, but OpenMM is not told. An Integrator
that keeps forces between steps then uses the forces of the old positions for
its next step: ``CustomIntegrator`` and its subclasses (e.g. openmmtools'
integrators) and ``NoseHooverIntegrator``. Verlet, Langevin, LangevinMiddle and
Brownian integrators compute the forces at every step and need nothing. After
writing positions for one of the former, call :func:`positions_changed`
(``context.setPositions`` of the positions as they are, which tells the
integrator; a host round trip on CUDA).

Lifetime: every exported tensor holds a reference to the Python Context
object (released by the tensor's deleter, even after a consumer took the
capsule), so ``del context`` does not free the memory an array points into.
``Context.reinitialize()`` does free OpenMM's memory, so while a zero-copy
tensor of the Context is alive (an array made from a view without a copy,
including the host helpers' results on Reference/CPU) it raises an
``openmm.OpenMMException`` that names the views, and leaves the Context
unchanged: delete those arrays, then reinitialize and take new ones.  On
CUDA a device copy (``copy=True``) counts too: it lives in the CUDA context
OpenMM creates for the Context, which reinitialize() destroys.  Host copies
and the box are not counted.  This module installs that check on
``openmm.Context.reinitialize`` when it is imported (a wrapper that asks
:func:`live_views` of the Context and otherwise calls OpenMM's own method);
C, C++ and Julia callers ask ``ommgraph_context_live_views`` themselves.

The DLPack protocol: ``__dlpack__(stream=None, max_version=None,
dl_device=None, copy=None)`` returns a versioned capsule
("dltensor_versioned", DLPack 1.1) when ``max_version[0] >= 1``, else a legacy
one ("dltensor"; JAX and other older consumers).  atom_order and box carry
the read-only flag (visible only through the versioned protocol: NumPy makes
them non-writeable arrays).  ``copy=True`` exports an owned copy;
``dl_device=(kDLCPU, 0)`` of a CUDA view exports a host copy (refused with
``copy=False``); any other device raises BufferError. ``copy=False`` of a view
that is always a copy (box; atom_order on Reference/CPU) raises BufferError, as
the array API asks.  ``stream`` (CUDA):
``None`` or 1 is the legacy default stream, 2 the per-thread default stream,
any other integer > 2 a ``cudaStream_t``; the consumer's stream is made to
wait for the work OpenMM has queued, and ``-1`` skips that.  On host
platforms only ``None`` and ``-1`` are accepted (ValueError otherwise).

Errors of the C library raise ValueError (an argument error), or
RuntimeError (:class:`UnavailableViewError` for a view that does not exist on
the Context's platform or precision), with the library's message.
"""

import ctypes
import enum
import operator
import os
import sys
import threading

__all__ = [
    "views",
    "StateViews",
    "View",
    "ViewInfo",
    "forces",
    "compute_forces",
    "positions",
    "velocities",
    "box",
    "live_views",
    "positions_changed",
    "DLDeviceType",
    "UnavailableViewError",
]

# OMMGraphView
VIEW_POSITIONS = 0
VIEW_POSITION_CORRECTION = 1
VIEW_VELOCITIES = 2
VIEW_FORCES = 3
VIEW_ATOM_ORDER = 4
VIEW_BOX = 5

# Flags of ommgraph_view_*
FLAG_READ_ONLY = 1
FLAG_COPY = 2
FLAG_HOST = 4

# OMMGraphStatus
_OK = 0
_ERROR_ARGUMENT = 1
_ERROR_UNAVAILABLE = 2
_ERROR_PLATFORM = 3
_ERROR_RUNTIME = 4

# DLPack tensor flags (versioned tensors only)
_DLPACK_FLAG_READ_ONLY = 1
_DLPACK_FLAG_IS_COPIED = 2

_VIEW_NAMES = {
    VIEW_POSITIONS: "POSITIONS",
    VIEW_POSITION_CORRECTION: "POSITION_CORRECTION",
    VIEW_VELOCITIES: "VELOCITIES",
    VIEW_FORCES: "FORCES",
    VIEW_ATOM_ORDER: "ATOM_ORDER",
    VIEW_BOX: "BOX",
}
_ATTRIBUTES = {
    "positions": VIEW_POSITIONS,
    "position_correction": VIEW_POSITION_CORRECTION,
    "velocities": VIEW_VELOCITIES,
    "forces": VIEW_FORCES,
    "atom_order": VIEW_ATOM_ORDER,
    "box": VIEW_BOX,
}
_READ_ONLY_VIEWS = (VIEW_ATOM_ORDER, VIEW_BOX)

# The capsule names must outlive every capsule: module constants.
_CAPSULE_NAME_VERSIONED = b"dltensor_versioned"
_CAPSULE_NAME_LEGACY = b"dltensor"

# Fixed point of CUDA forces: 2^32 units per kJ/mol/nm.
FORCE_SCALE = float(2**32)


class DLDeviceType(enum.IntEnum):
    """DLPack device types (the ones OpenMM's platforms use, and a few more)."""

    kDLCPU = 1
    kDLCUDA = 2
    kDLCUDAHost = 3
    kDLOpenCL = 4
    kDLROCM = 10
    kDLCUDAManaged = 13


class UnavailableViewError(RuntimeError):
    """The view does not exist on the Context's platform or precision
    (e.g. position_correction outside mixed precision on CUDA)."""


# --- the DLPack ABI (wrappers/include/GraphDLPackABI.h) ---------------------


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", _DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

# Private function objects of the C API of Python (setting argtypes on
# ctypes.pythonapi's shared attributes would change them for everyone).
_PyCapsule_New = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi)
)
_Py_IncRef = ctypes.PYFUNCTYPE(None, ctypes.py_object)(("Py_IncRef", ctypes.pythonapi))
_Py_DecRef = ctypes.PYFUNCTYPE(None, ctypes.py_object)(("Py_DecRef", ctypes.pythonapi))

_DTYPES = {(0, 32): "int32", (0, 64): "int64", (1, 8): "uint8", (2, 32): "float32", (2, 64): "float64"}


# --- the C library ------------------------------------------------------------

_LIBRARY_ENV = "OPENMMGRAPH_DLPACK_LIBRARY"
_LIBRARY_NAMES = {
    "darwin": "libOpenMMGraphDLPack.dylib",
    "win32": "OpenMMGraphDLPack.dll",
}
_lib = None
_libLock = threading.Lock()


class _Library:
    """The loaded C library, its functions typed, and the addresses of its
    Python helpers."""

    def __init__(self, path):
        import openmm  # noqa: F401  (loads libOpenMM, which the library links)

        try:
            # openmm-graph's platform plugins: the CUDA views are served by
            # libOpenMMGraphCUDA.so, which must be loaded into OpenMM.
            from . import _plugin  # noqa: F401
        except ImportError:
            pass  # host platforms work without the plugins
        self.path = path
        self.dll = ctypes.CDLL(path)
        dll = self.dll
        tensorOut = ctypes.POINTER(ctypes.POINTER(_DLManagedTensorVersioned))
        legacyOut = ctypes.POINTER(ctypes.POINTER(_DLManagedTensor))
        common = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]
        self.viewVersioned = dll.ommgraph_view_versioned
        self.viewVersioned.argtypes = common + [tensorOut]
        self.viewVersioned.restype = ctypes.c_int
        self.viewLegacy = dll.ommgraph_view_legacy
        self.viewLegacy.argtypes = common + [legacyOut]
        self.viewLegacy.restype = ctypes.c_int
        self.viewDevice = dll.ommgraph_view_device
        self.viewDevice.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int32)]
        self.viewDevice.restype = ctypes.c_int
        self.synchronizeStream = dll.ommgraph_synchronize_stream
        self.synchronizeStream.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        self.synchronizeStream.restype = ctypes.c_int
        self.lastError = dll.ommgraph_last_error
        self.lastError.argtypes = []
        self.lastError.restype = ctypes.c_char_p
        self.liveViews = dll.ommgraph_live_views
        self.liveViews.argtypes = []
        self.liveViews.restype = ctypes.c_int64
        self.contextLiveViews = dll.ommgraph_context_live_views
        self.contextLiveViews.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int64)]
        self.contextLiveViews.restype = ctypes.c_int
        self.computeForces = dll.ommgraph_compute_forces
        self.computeForces.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_double)]
        self.computeForces.restype = ctypes.c_int
        self.borrowTensor = dll.ommgraph_borrow_tensor
        self.borrowTensor.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p)]
        self.borrowTensor.restype = ctypes.c_int
        self.pythonRelease = ctypes.cast(dll.ommgraph_python_release, ctypes.c_void_p).value
        self.capsuleDestructor = ctypes.cast(dll.ommgraph_capsule_destructor, ctypes.c_void_p).value

    def check(self, status, what):
        """Raise the exception of a nonzero status, with the library's message."""
        if status == _OK:
            return
        message = self.lastError()
        message = message.decode("utf-8", "replace") if message else f"status {status}"
        text = f"{what}: {message}"
        if status == _ERROR_ARGUMENT:
            error = ValueError(text)
        elif status == _ERROR_UNAVAILABLE:
            error = UnavailableViewError(text)
        else:
            error = RuntimeError(text)
        error.status = status
        raise error


def _libraryPath():
    override = os.environ.get(_LIBRARY_ENV)
    if override:
        return override
    name = _LIBRARY_NAMES.get(sys.platform, "libOpenMMGraphDLPack.so")
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib", name)


def _library():
    global _lib
    if _lib is None:
        with _libLock:
            if _lib is None:
                path = _libraryPath()
                if not os.path.exists(path):
                    raise ImportError(
                        f"openmmgraph.dlpack: the C library {path} is not installed; install the package "
                        f"with `pip install .` from the openmm-graph sources (or set {_LIBRARY_ENV})"
                    )
                _lib = _Library(path)
    return _lib


def live_views(context=None, view=None):
    """The number of exported tensors whose deleter has not run yet.

    Without arguments: every tensor of every Context, copies included (for
    tests of the deleter contract).  With ``context`` (an openmm.Context or a
    Simulation): only the tensors whose memory ``Context.reinitialize()``
    frees (zero-copy views, and device copies on CUDA), of one view (a :class:`StateViews` attribute name
    such as ``"forces"``) or of every view (``view=None``)."""
    lib = _library()
    if context is None:
        if view is not None:
            raise ValueError("live_views: a view needs a context")
        return int(lib.liveViews())
    pointer = _contextPointer(_asContext(context))
    if view is None:
        number = -1
    elif view in _ATTRIBUTES:
        number = _ATTRIBUTES[view]
    else:
        raise ValueError(f"live_views: unknown view {view!r}; the views are {', '.join(_ATTRIBUTES)}")
    count = ctypes.c_int64()
    lib.check(lib.contextLiveViews(pointer, number, ctypes.byref(count)), "ommgraph_context_live_views")
    return int(count.value)


def _refuseDanglingReinitialize(context):
    """Raise openmm.OpenMMException when zero-copy tensors of `context` are
    alive: Context.reinitialize() would free the memory they point into."""
    import openmm

    if _lib is None or not isinstance(context, openmm.Context) or not int(context.this):
        return  # nothing was exported in this process (or OpenMM reports the deleted Context itself)
    if live_views(context) == 0:
        return
    import gc

    gc.collect()  # arrays that are garbage in a reference cycle still hold their capsules
    counts = {name: live_views(context, name) for name in _ATTRIBUTES}
    alive = {name: count for name, count in counts.items() if count}
    if not alive:
        return

    total = sum(alive.values())
    listed = ", ".join(f"{name} {count}" for name, count in alive.items())
    raise openmm.OpenMMException(
        f"Context.reinitialize(): {total} tensor{'s' if total != 1 else ''} exported by openmmgraph.dlpack "
        f"still point into this Context's memory ({listed}), which reinitialize() frees; delete them, and every "
        "array made from them without a copy, then call reinitialize() again and take new views "
        "(host copies are not affected). The Context is unchanged."
    )


def _guardedReinitialize(original):
    import functools

    @functools.wraps(original)
    def reinitialize(self, *args, **kwargs):
        _refuseDanglingReinitialize(self)
        return original(self, *args, **kwargs)

    reinitialize._openmmgraphGuard = True
    return reinitialize


def _installReinitializeGuard():
    """Wrap openmm.Context.reinitialize once per process with the check of
    :func:`_refuseDanglingReinitialize`."""
    import openmm

    current = openmm.Context.reinitialize
    if not getattr(current, "_openmmgraphGuard", False):
        openmm.Context.reinitialize = _guardedReinitialize(current)


# --- the Context ----------------------------------------------------------------


def _asContext(context):
    """The openmm.Context of a Context (or of an object with a .context, such
    as an openmm.app.Simulation)."""
    import openmm

    if isinstance(context, openmm.Context):
        return context
    inner = getattr(context, "context", None)
    if isinstance(inner, openmm.Context):
        return inner
    raise TypeError(f"openmmgraph.dlpack: expected an openmm.Context, found {type(context).__name__}")


def _contextPointer(context):
    pointer = int(context.this)
    if not pointer:
        raise ValueError("openmmgraph.dlpack: the Context has been deleted")
    return pointer


def _device(context):
    lib = _library()
    deviceType = ctypes.c_int32()
    deviceId = ctypes.c_int32()
    lib.check(
        lib.viewDevice(_contextPointer(context), ctypes.byref(deviceType), ctypes.byref(deviceId)),
        "ommgraph_view_device",
    )
    try:
        kind = DLDeviceType(deviceType.value)
    except ValueError:
        kind = deviceType.value
    return (kind, int(deviceId.value))


def _streamHandle(stream, device):
    """The consumer's stream as the C API's uintptr_t (None: no
    synchronization), validated as the array API specifies."""
    if stream is None:
        return None if device[0] == DLDeviceType.kDLCPU else 0
    try:
        stream = operator.index(stream)
    except TypeError:
        raise TypeError(f"__dlpack__: stream must be None or an integer, found {type(stream).__name__}") from None
    if device[0] == DLDeviceType.kDLCPU:
        if stream != -1:
            raise ValueError(f"__dlpack__: stream must be None (or -1) for a tensor on the CPU, found {stream}")
        return None
    if stream == -1:
        return None  # the consumer asks for no synchronization
    if stream == 0:
        raise ValueError("__dlpack__: stream=0 is ambiguous and disallowed; use None or 1 (legacy default) or 2 (per-thread)")
    if stream < -1:
        raise ValueError(f"__dlpack__: invalid stream {stream}")
    if stream == 1:
        return 0  # the legacy default stream (the C API's 0)
    return stream  # 2 (per-thread default) or a cudaStream_t


class ViewInfo:
    """What a view exports: shape, strides (in elements), dtype (a NumPy
    dtype name), device (DLPack type, id) and the read-only flag."""

    __slots__ = ("shape", "strides", "dtype", "device", "read_only")

    def __init__(self, shape, strides, dtype, device, read_only):
        self.shape = shape
        self.strides = strides
        self.dtype = dtype
        self.device = device
        self.read_only = read_only

    def __repr__(self):
        return (
            f"ViewInfo(shape={self.shape}, strides={self.strides}, dtype={self.dtype!r}, "
            f"device={tuple(int(d) for d in self.device)}, read_only={self.read_only})"
        )


def _tensorInfo(tensor, flags):
    ndim = tensor.ndim
    shape = tuple(int(tensor.shape[i]) for i in range(ndim))
    if tensor.strides:
        strides = tuple(int(tensor.strides[i]) for i in range(ndim))
    else:
        strides = []
        step = 1
        for extent in reversed(shape):
            strides.insert(0, step)
            step *= extent
        strides = tuple(strides)
    dtype = _DTYPES.get((tensor.dtype.code, tensor.dtype.bits), f"code{tensor.dtype.code}/bits{tensor.dtype.bits}")
    if tensor.dtype.lanes != 1:
        dtype += f"x{tensor.dtype.lanes}"
    try:
        kind = DLDeviceType(tensor.device.device_type)
    except ValueError:
        kind = tensor.device.device_type
    return ViewInfo(shape, strides, dtype, (kind, int(tensor.device.device_id)), bool(flags & _DLPACK_FLAG_READ_ONLY))


class View:
    """One view of a Context's state (see the module's table); implements
    the DLPack protocol of the Python array API."""

    __slots__ = ("_context", "_view")

    def __init__(self, context, view):
        if view not in _VIEW_NAMES:
            raise ValueError(f"openmmgraph.dlpack: unknown view {view!r}")
        self._context = _asContext(context)
        self._view = view

    @property
    def name(self):
        """The view's name in the C API (POSITIONS, FORCES, ...)."""
        return _VIEW_NAMES[self._view]

    @property
    def context(self):
        return self._context

    @property
    def read_only(self):
        """Whether exported tensors are flagged read-only (atom_order, box)."""
        return self._view in _READ_ONLY_VIEWS

    def _flags(self):
        return FLAG_READ_ONLY if self._view in _READ_ONLY_VIEWS else 0

    def __dlpack_device__(self):
        """(device type, device id) of the exported tensor: (kDLCUDA, ordinal)
        on the CUDA platform, (kDLCPU, 0) on Reference and CPU; the box, a
        host copy, is always (kDLCPU, 0)."""
        if self._view == VIEW_BOX:
            return self.info().device
        return _device(self._context)

    def info(self):
        """Shape, strides, dtype and device of the tensor this view exports
        now (a :class:`ViewInfo`)."""
        lib = _library()
        out = ctypes.POINTER(_DLManagedTensorVersioned)()
        lib.check(
            lib.viewVersioned(_contextPointer(self._context), self._view, self._flags(), None, None, ctypes.byref(out)),
            f"view {self.name}",
        )
        try:
            return _tensorInfo(out.contents.dl_tensor, out.contents.flags)
        finally:
            if out.contents.deleter:
                _Deleter(out.contents.deleter)(ctypes.cast(out, ctypes.c_void_p))

    @property
    def shape(self):
        return self.info().shape

    @property
    def dtype(self):
        return self.info().dtype

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """Export the view as a DLPack capsule (the Python array API's
        protocol; see the module documentation for each argument)."""
        lib = _library()
        context = self._context
        pointer = _contextPointer(context)
        device = self.__dlpack_device__()
        flags = self._flags()
        if copy is not None and not isinstance(copy, bool):
            raise TypeError(f"__dlpack__: copy must be None, True or False, found {copy!r}")
        if dl_device is not None:
            try:
                target = (int(dl_device[0]), int(dl_device[1]))
            except (TypeError, ValueError, IndexError):
                raise BufferError(f"__dlpack__: invalid dl_device {dl_device!r}") from None
            if target != (int(device[0]), device[1]):
                if target == (int(DLDeviceType.kDLCPU), 0):
                    if copy is False:
                        raise BufferError(
                            f"__dlpack__: view {self.name} lives on device {tuple(int(d) for d in device)}; "
                            "exporting it to the CPU needs a copy, and copy=False forbids one"
                        )
                    flags |= FLAG_COPY | FLAG_HOST
                    device = (DLDeviceType.kDLCPU, 0)
                else:
                    raise BufferError(
                        f"__dlpack__: view {self.name} lives on device {tuple(int(d) for d in device)} and can "
                        f"only be exported there or (as a copy) to the CPU (1, 0), not to {target}"
                    )
        if copy:
            flags |= FLAG_COPY
        elif copy is False and (self._view == VIEW_BOX or (self._view == VIEW_ATOM_ORDER and _isHost(context))):
            raise BufferError(f"__dlpack__: view {self.name} is always exported as a copy on this platform "
                              "(OpenMM keeps no such array), and copy=False forbids one")
        streamHandle = _streamHandle(stream, device)
        versioned = _wants_versioned(max_version)

        # The tensor holds a reference to the Context (released by its deleter).
        _Py_IncRef(context)
        try:
            if versioned:
                out = ctypes.POINTER(_DLManagedTensorVersioned)()
                status = lib.viewVersioned(pointer, self._view, flags, id(context), lib.pythonRelease, ctypes.byref(out))
            else:
                out = ctypes.POINTER(_DLManagedTensor)()
                status = lib.viewLegacy(pointer, self._view, flags, id(context), lib.pythonRelease, ctypes.byref(out))
        except BaseException:
            _Py_DecRef(context)
            raise
        if status != _OK or not out:
            _Py_DecRef(context)  # no tensor: the library did not take the reference
            lib.check(status if status != _OK else _ERROR_RUNTIME, f"view {self.name}")
        address = ctypes.cast(out, ctypes.c_void_p).value
        try:
            if streamHandle is not None:
                lib.check(lib.synchronizeStream(pointer, streamHandle), f"view {self.name}: ommgraph_synchronize_stream")
            name = _CAPSULE_NAME_VERSIONED if versioned else _CAPSULE_NAME_LEGACY
            return _PyCapsule_New(address, name, lib.capsuleDestructor)
        except BaseException:
            # No capsule owns the tensor: free it here (this also releases the Context).
            _Deleter(out.contents.deleter)(address)
            raise

    def __repr__(self):
        return f"<openmmgraph.dlpack.View {self.name} of {self._context!r}>"


def _wants_versioned(max_version):
    """Whether a consumer's ``max_version`` (None or a (major, minor) tuple of integers) asks for a
    versioned capsule (DLPack >= 1.0)."""
    if max_version is None:
        return False
    try:
        major, _minor = (operator.index(v) for v in max_version)
    except (TypeError, ValueError):
        raise TypeError(f"__dlpack__: max_version: expected None or a (major, minor) tuple of integers, "
                        f"found {max_version!r}") from None
    return major >= 1


class BorrowedView:
    """A tensor lent to a :func:`callback_force` function for the duration of
    one call (positions, forces, box or atom order of the Context, in the
    layouts of the module documentation).  Like :class:`View` it implements
    ``__dlpack__`` and ``__dlpack_device__``, so ``torch.from_dlpack(view)``,
    ``numpy.from_dlpack(view)`` and friends give zero-copy arrays; those arrays
    point into the Context's memory and must not be used after the call
    returns (OpenMM then owns the buffers again; the view itself raises
    BufferError from then on).  Positions, box and atom order are lent
    read-only; forces writable."""

    def __init__(self, address, name, read_only):
        self._address = address
        self._tensor = _DLTensor.from_address(address)
        self.name = name
        self.read_only = read_only

    def _release(self):
        """End the loan (the callback returned): the tensor's memory is OpenMM's again."""
        self._address = None
        self._tensor = None

    def _live(self):
        if self._tensor is None:
            raise BufferError(f"the callback's {self.name} view was used after the callback returned; its memory is "
                              "OpenMM's again (copy what you need inside the callback)")
        return self._tensor

    def __dlpack_device__(self):
        tensor = self._live()
        return (DLDeviceType(tensor.device.device_type), int(tensor.device.device_id))

    @property
    def shape(self):
        tensor = self._live()
        return tuple(tensor.shape[i] for i in range(tensor.ndim))

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self._live()
        if copy:
            raise BufferError(f"__dlpack__: the callback's {self.name} view cannot be copied here; copy the array you get")
        if dl_device is not None and (int(dl_device[0]), int(dl_device[1])) != tuple(int(d) for d in self.__dlpack_device__()):
            raise BufferError(f"__dlpack__: the callback's {self.name} view lives on {self.__dlpack_device__()}, not {tuple(dl_device)}")
        # No stream handshake: inside the callback the caller works on OpenMM's stream (the `stream` argument).
        lib = _library()
        versioned = _wants_versioned(max_version)
        out = ctypes.c_void_p()
        lib.check(lib.borrowTensor(self._address, 1 if versioned else 0, FLAG_READ_ONLY if self.read_only else 0, ctypes.byref(out)),
                  f"callback view {self.name}")
        name = _CAPSULE_NAME_VERSIONED if versioned else _CAPSULE_NAME_LEGACY
        return _PyCapsule_New(out.value, name, lib.capsuleDestructor)

    def __repr__(self):
        if self._tensor is None:
            return f"<openmmgraph.dlpack.BorrowedView {self.name} (released)>"
        return f"<openmmgraph.dlpack.BorrowedView {self.name} {self.shape}>"


_CALLBACK_TYPE = ctypes.CFUNCTYPE(
    ctypes.c_int,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.POINTER(ctypes.c_double),
)
# The ctypes trampolines of all callback forces, kept for the life of the process:
# a System or Context may call them at any time, whatever happens to the Python objects.
_CALLBACK_TRAMPOLINES = []


def callback_force(function, periodic=False):
    """A force whose energy and forces come from a Python function, called
    inside every force evaluation of the Context (enhanced sampling biases,
    coupling to other models).

    ``function(positions, forces, box, atom_order, stream) -> energy``:
    each argument but ``stream`` is a :class:`BorrowedView` of the Context's
    own memory in the layouts of the module documentation (on the CUDA
    platform: posq, the int64 fixed-point force buffer with 2**32 units per
    kJ/mol/nm, the atom order of the sorted slots; on Reference/CPU: float64
    [n, 3] in System order); ``forces`` is None when OpenMM asks for the energy
    alone.  Add the bias forces in place into ``forces`` (for example
    ``torch.from_dlpack(forces).add_(...)``; on CUDA add integers, which makes
    the sum independent of the order of additions) and return the energy in
    kJ/mol.  On CUDA, queue GPU work on ``stream`` (OpenMM's CUstream, e.g.
    ``torch.cuda.ExternalStream(stream)``) or synchronise with it.  An exception
    in the function is printed and makes OpenMM raise an OpenMMException, as
    does a non-finite energy; the forces it adds are not checked (as with
    OpenMM's own custom forces).  Positions, box and atom order are lent read-only; the views raise
    BufferError once the call has returned.  The function must not evaluate
    its own Context (``getState`` with energy or forces, a step): that is an
    OpenMMException, as the nested evaluation would refill the force buffer
    the outer one is filling.

    Returns the force (an openmm.Force; add it to a System).  Function and
    force live as long as the process (OpenMM may call the function whenever a
    Context with the force evaluates forces).
    """
    from . import _plugin
    from .graphforce import CallbackForce

    if not callable(function):
        raise TypeError(f"callback_force: function must be callable, found {type(function).__name__}")

    def trampoline(userData, positions, forces, box, atomOrder, stream, energy):
        views = []
        try:
            # Positions are lent read-only (the C signature's const): a write would change them mid-evaluation.
            views = [
                BorrowedView(positions, "positions", True),
                BorrowedView(forces, "forces", False) if forces else None,
                BorrowedView(box, "box", True),
                BorrowedView(atomOrder, "atom_order", True),
            ]
            result = function(*views, int(stream))
            energy[0] = float(result)
            return 0
        except BaseException:  # noqa: B902 - reported to OpenMM, never raised through C
            try:  # the report must not stop the failure from reaching OpenMM (a broken stderr, the recursion limit)
                import traceback

                traceback.print_exc()
            except BaseException:  # noqa: B902
                pass
            return 1
        finally:
            for view in views:
                if view is not None:
                    view._release()

    callback = _CALLBACK_TYPE(trampoline)
    _CALLBACK_TRAMPOLINES.append(callback)
    force = CallbackForce()
    force.setFunctionAddress(ctypes.cast(callback, ctypes.c_void_p).value, 0)
    force.setUsesPeriodicBoundaryConditions(bool(periodic))
    force._callback = callback
    return force


class StateViews:
    """The views of one Context: positions, position_correction, velocities,
    forces, atom_order, box (each a :class:`View`)."""

    __slots__ = ("context",) + tuple(_ATTRIBUTES)

    def __init__(self, context):
        context = _asContext(context)
        self.context = context
        for attribute, view in _ATTRIBUTES.items():
            setattr(self, attribute, View(context, view))

    @property
    def device(self):
        """The DLPack device of the views: (kDLCUDA, ordinal) or (kDLCPU, 0)."""
        return _device(self.context)

    def __iter__(self):
        return iter((attribute, getattr(self, attribute)) for attribute in _ATTRIBUTES)

    def __repr__(self):
        return f"<openmmgraph.dlpack.StateViews of {self.context!r}>"


def views(context):
    """The DLPack views of an openmm.Context's state (a :class:`StateViews`;
    an openmm.app.Simulation is accepted too)."""
    return StateViews(context)


# --- helpers: float64 [n, 3] in System order on every platform -------------------


class _HostCopy:
    """A DLPack exporter of a view's host copy (for NumPy, whatever its version)."""

    __slots__ = ("_view",)

    def __init__(self, view):
        self._view = view

    def __dlpack_device__(self):
        return (DLDeviceType.kDLCPU, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        return self._view.__dlpack__(max_version=max_version, dl_device=(DLDeviceType.kDLCPU, 0))


def _namespace(xp):
    if xp is None:
        import numpy

        return numpy
    return xp


def _isNumpy(xp):
    return xp is None or getattr(xp, "__name__", "") == "numpy"


def _isTorch(xp):
    return getattr(xp, "__name__", "") == "torch"


def _array(view, xp):
    """The view as an array of xp (NumPy: a host copy of device memory)."""
    if _isNumpy(xp):
        numpy = _namespace(xp)
        if view.__dlpack_device__()[0] == DLDeviceType.kDLCPU:
            return numpy.from_dlpack(view)
        return numpy.from_dlpack(_HostCopy(view))
    return xp.from_dlpack(view)


def _astype(xp, array, name):
    """array as dtype xp.<name> (a new array unless it already is one)."""
    xp = _namespace(xp)
    if _isTorch(xp):
        return array.to(getattr(xp, name))
    return array.astype(getattr(xp, name))


def _toSystemOrder(xp, sortedRows, order):
    """Rows in System order: out[order[i]] = sortedRows[i]."""
    out = _namespace(xp).empty_like(sortedRows)
    out[_astype(xp, order, "int64")] = sortedRows
    return out


def _numParticles(context):
    return context.getSystem().getNumParticles()


def _isHost(context):
    return _device(context)[0] == DLDeviceType.kDLCPU


def forces(context, xp=None):
    """The forces of the Context's last evaluation (of the force groups it asked
    for; see the module documentation), float64 [n, 3] in kJ/mol/nm, rows in
    System order.

    Reference/CPU: the forces view itself (zero copy: it changes at the next
    force evaluation; copy it to keep it).  CUDA: the int64 fixed-point
    buffer [3][padded] / 2**32, transposed and reordered by the current
    atom_order; with the default ``xp`` (NumPy) from host copies, with
    ``xp=cupy`` or ``xp=torch`` on the device.
    """
    context = _asContext(context)
    v = views(context)
    if _isHost(context):
        return _array(v.forces, xp)
    n = _numParticles(context)
    raw = _array(v.forces, xp)
    order = _array(v.atom_order, xp)
    sortedForces = _astype(xp, raw[:, :n].T, "float64") / FORCE_SCALE
    return _toSystemOrder(xp, sortedForces, order[:n])


def compute_forces(context, groups=-1, energy=True):
    """Evaluate the forces of the force ``groups`` (a 32-bit mask, -1 for all,
    as ``getState(groups=...)`` takes; or a set of group numbers) at the
    Context's current positions and return their potential energy in kJ/mol
    (None with ``energy=False``, which spares the energy's reduction and, on
    CUDA, its download): what ``context.getState(getForces=True,
    getEnergy=True, groups=groups)`` computes, without the State's host copy of
    every force.  The forces view (and :func:`forces`) holds the result
    afterwards; on CUDA it stays on the device.  An error of the evaluation
    raises RuntimeError with OpenMM's message."""
    if isinstance(groups, (set, frozenset, list, tuple)):
        mask = 0
        for group in groups:
            number = None if isinstance(group, bool) else _integer(group)
            if number is None or not 0 <= number <= 31:
                raise ValueError(f"compute_forces: force groups are integers from 0 to 31, found {group!r}")
            mask |= 1 << number
    else:
        mask = None if isinstance(groups, bool) else _integer(groups)
        if mask is None:
            raise TypeError(f"compute_forces: groups is a bit mask (an integer) or a set of group numbers, found {groups!r}")
        if not -(2**31) <= mask < 2**32:
            raise ValueError(f"compute_forces: the groups mask {mask} does not fit 32 bits")
    groups = mask - 2**32 if mask >= 2**31 else mask  # the same 32 bits as a C int (group 31 included)
    lib = _library()
    value = ctypes.c_double()
    lib.check(
        lib.computeForces(_contextPointer(_asContext(context)), groups, ctypes.byref(value) if energy else None),
        "ommgraph_compute_forces",
    )
    return float(value.value) if energy else None


def _integer(value):
    """value as a Python int if it is an integer of any kind (NumPy's too), else None."""
    try:
        return operator.index(value)
    except TypeError:
        return None


def positions(context, xp=None):
    """The positions, float64 [n, 3] in nm, rows in System order.

    Reference/CPU: the positions view itself (zero copy; writing into it
    moves the particles).  CUDA: posq[:, :3] (+ position_correction in mixed
    precision) reordered by the current atom_order; these are the positions
    OpenMM keeps wrapped into the periodic box when it reorders atoms, which
    may differ from getState()'s by whole box vectors.
    """
    context = _asContext(context)
    v = views(context)
    if _isHost(context):
        return _array(v.positions, xp)
    n = _numParticles(context)
    posq = _array(v.positions, xp)
    order = _array(v.atom_order, xp)
    result = _astype(xp, posq[:n, :3], "float64")
    if posq.dtype == _namespace(xp).float32:
        try:
            correction = _array(v.position_correction, xp)
        except UnavailableViewError:
            correction = None  # single precision
        if correction is not None:
            result = result + _astype(xp, correction[:n, :3], "float64")
    return _toSystemOrder(xp, result, order[:n])


def velocities(context, xp=None):
    """The velocities, float64 [n, 3] in nm/ps, rows in System order
    (Reference/CPU: the view itself; CUDA: velm[:, :3] reordered by the
    current atom_order)."""
    context = _asContext(context)
    v = views(context)
    if _isHost(context):
        return _array(v.velocities, xp)
    n = _numParticles(context)
    velm = _array(v.velocities, xp)
    order = _array(v.atom_order, xp)
    return _toSystemOrder(xp, _astype(xp, velm[:n, :3], "float64"), order[:n])


def positions_changed(context):
    """Tell the Context's Integrator that its positions changed, after a write
    through the positions view: ``context.setPositions`` of the positions as
    they are (a host round trip on CUDA; the values are kept exactly, mixed
    precision included), so that an Integrator that keeps forces between
    steps (``CustomIntegrator``, ``NoseHooverIntegrator``) recomputes them."""
    context = _asContext(context)
    state = context.getState(getPositions=True)
    context.setPositions(state.getPositions(asNumpy=True))


def box(context, xp=None):
    """The periodic box vectors, float64 [3, 3] in nm (rows a, b, c); a new,
    writeable array in host memory on every platform (a CPU tensor with
    ``xp=torch``; ``xp.asarray`` of the host array for other array modules,
    e.g. a device array with CuPy)."""
    import numpy

    context = _asContext(context)
    array = numpy.from_dlpack(views(context).box).copy()
    if _isNumpy(xp):
        return array
    if _isTorch(xp):
        return xp.from_numpy(array)
    return xp.asarray(array)


_installReinitializeGuard()
