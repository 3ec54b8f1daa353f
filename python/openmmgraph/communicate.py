"""The ``communicate`` operation: explicit communication between spatial
domains inside a PyTorch model (docs/communicate.md).

A model running in one domain holds per-particle features as a tensor
``[num_owned + num_ghost, features...]``: the rows of the particles the domain
owns, then the ghost rows (copies of particles owned by other domains, or
periodic images).  Between message-passing rounds it calls

    features = torch.ops.openmmgraph.communicate(features, handle, num_owned)

which returns a copy whose ghost rows hold their owners' current values; in
the backward pass the gradients of the ghost rows are added to their owners'
rows (``openmmgraph::communicate_reverse``), so forces stay exact.  ``handle``
identifies the domain's endpoint in the engine that does the exchange (OpenMM
with several devices, MPI, LAMMPS, or :class:`~openmmgraph.simulated_domains.SimulatedDomains`
in tests); handle 0 means one domain and no engine: the op is then the
identity (one copy of the tensor, no engine call).

    import torch
    from openmmgraph import communicate     # loads libOpenMMGraphTorchOps

    h = communicate.communicate(h, handle, num_owned)   # the same as the torch.ops call

The operators work in eager code, TorchScript (save and load; in C++ load
``library_path()`` before torch::jit::load) and torch.export (mark ``handle``
and ``num_owned`` ``Dim.DYNAMIC`` so that they stay inputs of the program).

Engines written in Python register through :class:`Communicator` (ctypes
callbacks); engines in C/C++ use ``wrappers/include/OpenMMGraphCommunicate.h``
directly.  The libraries are loaded from ``openmmgraph/lib`` (or the paths in
the environment variables ``OPENMMGRAPH_TORCH_OPS_LIBRARY`` and
``OPENMMGRAPH_COMMUNICATE_LIBRARY``).
"""

import ctypes
import operator
import os
import sys
import threading

import torch

from ._endpoint import Endpoint

__all__ = [
    "communicate",
    "communicate_reverse",
    "Communicator",
    "CommunicateBuffer",
    "library_path",
    "communicate_library_path",
    "load_library",
]

_TORCH_OPS_ENV = "OPENMMGRAPH_TORCH_OPS_LIBRARY"
_COMMUNICATE_ENV = "OPENMMGRAPH_COMMUNICATE_LIBRARY"
_SUFFIX = {"darwin": ".dylib", "win32": ".dll"}.get(sys.platform, ".so")

# OpenMMGraphCommunicate.h
COMMUNICATOR_VERSION = 1
FLOAT32 = 0
FLOAT64 = 1
DEVICE_CPU = 1
DEVICE_CUDA = 2
SUPPORTS_CPU = 1
SUPPORTS_CUDA = 2
_OK = 0


def _library_file(env, name):
    override = os.environ.get(env)
    if override:
        return override
    prefix = "" if sys.platform == "win32" else "lib"
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib", prefix + name + _SUFFIX)


def library_path():
    """The path of libOpenMMGraphTorchOps (the operators), for
    ``torch.ops.load_library`` or a LibTorch application's dlopen."""
    return _library_file(_TORCH_OPS_ENV, "OpenMMGraphTorchOps")


def communicate_library_path():
    """The path of libOpenMMGraphCommunicate (the C interface engines register
    with): the one next to :func:`library_path`, which the operators link, so
    that engines and operators share one table of handles."""
    override = os.environ.get(_COMMUNICATE_ENV)
    if override:
        return override
    prefix = "" if sys.platform == "win32" else "lib"
    return os.path.join(os.path.dirname(library_path()), prefix + "OpenMMGraphCommunicate" + _SUFFIX)


class CommunicateBuffer(ctypes.Structure):
    """OMMGraphCommBuffer: one domain's table as an engine callback sees it."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int32),
        ("deviceType", ctypes.c_int32),
        ("deviceIndex", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
        ("numOwned", ctypes.c_int64),
        ("numGhost", ctypes.c_int64),
        ("numFeatures", ctypes.c_int64),
        ("rowStride", ctypes.c_int64),
        ("stream", ctypes.c_void_p),
    ]

    def as_numpy(self):
        """The table of a host (CPU) buffer as a writable NumPy view
        ``[numOwned + numGhost, numFeatures]`` (no copy; valid only during the
        callback).  Raises ValueError for a device buffer."""
        import numpy as np

        if getattr(self, "_released", False):
            raise ValueError("CommunicateBuffer.as_numpy: the buffer was used after its callback returned; its table "
                             "is the caller's again (copy what you need inside the callback)")
        if self.deviceType != DEVICE_CPU:
            raise ValueError(f"CommunicateBuffer.as_numpy: a device buffer (deviceType {self.deviceType}) has no host view")
        dtype = np.float64 if self.dtype == FLOAT64 else np.float32
        rows = self.numOwned + self.numGhost
        if rows == 0 or self.numFeatures == 0 or not self.data:
            return np.zeros((rows, self.numFeatures), dtype=dtype)
        element = ctypes.c_double if self.dtype == FLOAT64 else ctypes.c_float
        flat = np.ctypeslib.as_array(ctypes.cast(self.data, ctypes.POINTER(element)), shape=(rows * self.rowStride,))
        return flat.reshape(rows, self.rowStride)[:, : self.numFeatures]


_Callback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(CommunicateBuffer), ctypes.c_void_p, ctypes.c_size_t)
_Release = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _CommunicatorStruct(ctypes.Structure):
    """OMMGraphCommunicator."""

    _fields_ = [
        ("version", ctypes.c_uint32),
        ("deviceTypes", ctypes.c_uint32),
        ("name", ctypes.c_char_p),
        ("userData", ctypes.c_void_p),
        ("forward", _Callback),
        ("reverse", _Callback),
        ("release", _Release),
    ]


class _CommunicateLibrary:
    """libOpenMMGraphCommunicate through ctypes, its functions typed."""

    def __init__(self, path):
        self.path = path
        self.dll = ctypes.CDLL(path)
        self.register = self.dll.ommgraph_communicator_register
        self.register.argtypes = [ctypes.POINTER(_CommunicatorStruct), ctypes.POINTER(ctypes.c_int64)]
        self.register.restype = ctypes.c_int
        self.unregister = self.dll.ommgraph_communicator_unregister
        self.unregister.argtypes = [ctypes.c_int64]
        self.unregister.restype = ctypes.c_int
        self.isRegistered = self.dll.ommgraph_communicator_is_registered
        self.isRegistered.argtypes = [ctypes.c_int64]
        self.isRegistered.restype = ctypes.c_int
        self.lastError = self.dll.ommgraph_communicator_last_error
        self.lastError.argtypes = []
        self.lastError.restype = ctypes.c_char_p

    def check(self, status, what):
        if status != _OK:
            message = self.lastError()
            raise RuntimeError(f"{what}: {message.decode('utf-8', 'replace') if message else f'status {status}'}")


_lock = threading.Lock()
_communicateLibrary = None
_opsLoaded = False


def load_library():
    """Load the operators into torch (once; also done on import of this
    module).  Raises ImportError when the package was built without them."""
    global _opsLoaded
    with _lock:
        if _opsLoaded:
            return
        path = library_path()
        if not os.path.exists(path):
            raise ImportError(
                f"openmmgraph.communicate: the operator library {path} is not installed: openmm-graph was built "
                f"without torch (install torch, then `pip install . --no-build-isolation` from the sources; "
                f"or set {_TORCH_OPS_ENV})"
            )
        torch.ops.load_library(path)
        _opsLoaded = True


def _library():
    global _communicateLibrary
    if _communicateLibrary is None:
        load_library()  # the operators link the C library: load it through them first (one copy in the process)
        with _lock:
            if _communicateLibrary is None:
                _communicateLibrary = _CommunicateLibrary(communicate_library_path())
    return _communicateLibrary


def communicate(features: torch.Tensor, handle: int, num_owned: int) -> torch.Tensor:
    """``torch.ops.openmmgraph.communicate``: a copy of ``features``
    ``[num_owned + num_ghost, features...]`` (float32/float64, contiguous, CPU
    or CUDA) with the ghost rows filled from their owners by the engine of
    ``handle``; backward adds ghost-row gradients to their owners.  Scriptable."""
    return torch.ops.openmmgraph.communicate(features, handle, num_owned)


def communicate_reverse(gradient: torch.Tensor, handle: int, num_owned: int) -> torch.Tensor:
    """``torch.ops.openmmgraph.communicate_reverse``, the transpose of
    :func:`communicate`: a copy of ``gradient`` with every ghost row added into
    its owner's row and the ghost rows zeroed.  Scriptable."""
    return torch.ops.openmmgraph.communicate_reverse(gradient, handle, num_owned)


# Endpoints registered from Python: userData -> the ctypes callbacks, kept alive
# until the C library calls the (module-lifetime) release callback, i.e. until
# the handle is unregistered and no call on it is in flight.
_liveCallbacks = {}
_nextUserData = [1]


def _release(userData):
    with _lock:
        _liveCallbacks.pop(userData, None)


_releaseCallback = _Release(_release)


def _wrap(function):
    """A ctypes callback around ``function(buffer)``: an exception becomes a
    nonzero return code and its text the message."""

    def callback(userData, buffer, message, messageSize):
        lent = None
        try:
            lent = CommunicateBuffer.from_buffer_copy(buffer.contents)
            function(lent)
            return 0
        except BaseException as error:  # noqa: B036 (nothing may escape into C)
            try:
                text = f"{type(error).__name__}: {error}"
            except BaseException:  # noqa: B036 (an exception whose str() raises)
                text = type(error).__name__
            # Cut to the C buffer on a character boundary (the C library would show a cut character as '?').
            text = text.encode("utf-8", "replace")[: max(0, messageSize - 1)].decode("utf-8", "ignore").encode("utf-8")
            ctypes.memmove(message, text + b"\0", len(text) + 1)
            return 1
        finally:
            if lent is not None:
                lent._released = True  # the table is the caller's again: as_numpy() refuses from now on

    return _Callback(callback)


class Communicator(Endpoint):
    """One domain's endpoint implemented in Python, registered with the C
    interface: ``forward(buffer)`` fills the ghost rows of ``buffer`` (a
    :class:`CommunicateBuffer`) from their owners, ``reverse(buffer)`` adds the
    ghost rows into their owners' rows and zeroes them; an exception in either
    becomes an error of the operator that names it.  ``handle`` is the integer
    to pass to the operator.  Use as a context manager or call
    :meth:`close` to unregister.
    """

    def __init__(self, forward, reverse, name="", device_types=SUPPORTS_CPU):
        lib = _library()
        if isinstance(device_types, bool) or not isinstance(device_types, int) or not 0 <= device_types < 2**32:
            # A uint32 field: ctypes would keep the low 32 bits silently.
            raise ValueError(f"openmmgraph.communicate.Communicator: device_types must be an integer mask in "
                             f"[0, 2**32) (SUPPORTS_CPU, SUPPORTS_CUDA or both), found {device_types!r}")
        if not isinstance(name, str):
            raise TypeError(f"openmmgraph.communicate.Communicator: name must be a str, found {type(name).__name__}")
        with _lock:
            userData = _nextUserData[0]
            _nextUserData[0] += 1
            callbacks = (_wrap(forward), _wrap(reverse))
            _liveCallbacks[userData] = callbacks
        self._name = name.encode("utf-8")
        struct = _CommunicatorStruct(
            COMMUNICATOR_VERSION, device_types, self._name, userData, callbacks[0], callbacks[1], _releaseCallback
        )
        handle = ctypes.c_int64(0)
        status = lib.register(ctypes.byref(struct), ctypes.byref(handle))
        if status != _OK:
            _release(userData)
            lib.check(status, "openmmgraph.communicate.Communicator")
        self.handle = handle.value

    def _destroy(self, handle):
        _library().check(_library().unregister(handle), "openmmgraph.communicate.Communicator.close")


def is_registered(handle):
    """Whether ``handle`` is 0 or a registered endpoint (False for an integer outside the int64 range of handles)."""
    handle = operator.index(handle)
    if not -(2**63) <= handle < 2**63:  # ctypes would wrap it (2**64 read as 0, "one domain")
        return False
    return bool(_library().isRegistered(handle))


load_library()
