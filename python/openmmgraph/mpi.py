"""The MPI backend (docs/mpi.md): libOpenMMGraphMPI through ctypes.

One MPI rank per spatial domain.  The module gives the MPI set-up, the two
reductions a multi-process run needs to keep every rank on bitwise the same
trajectory, and an engine of the ``communicate`` operation
(docs/communicate.md) whose handle the model passes to
``torch.ops.openmmgraph.communicate``::

    from openmmgraph import mpi

    mpi.initialize()                    # MPI_Init_thread unless MPI is already initialized (mpi4py)
    rank, size = mpi.world()
    forces = mpi.allreduce_sum_int64(fixed_point_forces)       # in place, bitwise the same on every rank
    energy = mpi.allreduce_sum_double_ordered(my_energy)       # summed in rank order, the same on every rank
    with mpi.Communicator(ghost_owner_rank, ghost_owner_row, num_owned) as engine:
        h = torch.ops.openmmgraph.communicate(h, engine.handle, num_owned)

Run it under ``mpiexec -n N python script.py`` (the ``mpiexec`` of the MPI the
library was built against: with ``pip install mpich``, the one in the
environment's ``bin``).  Every function raises :class:`MPIError` with the
library's message on failure; :class:`MPIUnavailableError` when openmm-graph
was built without MPI or the MPI library cannot be loaded.  This module does
not import torch.

If MPI was initialized here, ``finalize`` runs at exit, except when the
interpreter is ending because of an unhandled exception: then the process
exits (status 1) without MPI_Finalize, which could wait for the other ranks,
so that ``mpiexec`` sees the failure and stops the whole job.
"""

import atexit
import ctypes
import operator
import os
import sys
import threading

import numpy as np

from ._endpoint import Endpoint

__all__ = [
    "MPIError",
    "MPIUnavailableError",
    "library_path",
    "available",
    "initialize",
    "finalize",
    "world",
    "allreduce_sum_int64",
    "allreduce_sum_double_ordered",
    "Communicator",
]

_LIBRARY_ENV = "OPENMMGRAPH_MPI_LIBRARY"
_SUFFIX = {"darwin": ".dylib", "win32": ".dll"}.get(sys.platform, ".so")
_MESSAGE_SIZE = 1024


class MPIError(RuntimeError):
    """A call of libOpenMMGraphMPI failed; the text is the library's message."""


class MPIUnavailableError(MPIError, ImportError):
    """openmm-graph was built without MPI, or the MPI library cannot be loaded."""


def library_path():
    """The path of libOpenMMGraphMPI: ``openmmgraph/lib`` of this package, or ``$OPENMMGRAPH_MPI_LIBRARY``."""
    override = os.environ.get(_LIBRARY_ENV)
    if override:
        return override
    prefix = "" if sys.platform == "win32" else "lib"
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib", prefix + "OpenMMGraphMPI" + _SUFFIX)


_lock = threading.Lock()
_dll = None


def _library():
    global _dll
    with _lock:
        if _dll is not None:
            return _dll
        path = library_path()
        if not os.path.exists(path):
            raise MPIUnavailableError(
                f"openmmgraph.mpi: {path} is not installed: openmm-graph was built without MPI "
                f"(install an MPI, e.g. `pip install mpich`, then rebuild with `pip install . --no-build-isolation`; "
                f"or set {_LIBRARY_ENV})"
            )
        try:
            # RTLD_GLOBAL: some MPIs (Open MPI) load plugins that need libmpi's symbols in the global scope.
            dll = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError as error:
            raise MPIUnavailableError(
                f"openmmgraph.mpi: could not load {path}: {error} (the MPI library it was built against must be "
                f"installed: with the mpich wheel, `pip install mpich` in this environment)"
            ) from None
        message = [ctypes.c_char_p, ctypes.c_size_t]
        dll.ommgraph_mpi_initialize.argtypes = message
        dll.ommgraph_mpi_finalize.argtypes = message
        dll.ommgraph_mpi_world.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)] + message
        dll.ommgraph_mpi_allreduce_sum_int64.argtypes = [ctypes.c_void_p, ctypes.c_size_t] + message
        dll.ommgraph_mpi_allreduce_sum_double_ordered.argtypes = [ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_double)] + message
        dll.ommgraph_mpi_communicator_create.argtypes = [
            ctypes.c_int64,
            ctypes.c_int64,
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_int64),
        ] + message
        dll.ommgraph_mpi_communicator_destroy.argtypes = [ctypes.c_int64] + message
        for name in (
            "ommgraph_mpi_initialize",
            "ommgraph_mpi_finalize",
            "ommgraph_mpi_world",
            "ommgraph_mpi_allreduce_sum_int64",
            "ommgraph_mpi_allreduce_sum_double_ordered",
            "ommgraph_mpi_communicator_create",
            "ommgraph_mpi_communicator_destroy",
        ):
            getattr(dll, name).restype = ctypes.c_int
        _dll = dll
        return dll


def available():
    """Whether libOpenMMGraphMPI (and the MPI library it needs) can be loaded."""
    try:
        _library()
        return True
    except MPIUnavailableError:
        return False


def _call(function, *arguments):
    message = ctypes.create_string_buffer(_MESSAGE_SIZE)
    status = function(*arguments, message, _MESSAGE_SIZE)
    if status != 0:
        raise MPIError(message.value.decode("utf-8", "replace") or f"{function.__name__} failed with status {status}")


# --- set-up ---------------------------------------------------------------------------------------------

_dyingOfException = False
_finalizeRegistered = False


def _excepthook(kind, value, traceback):
    global _dyingOfException
    _dyingOfException = True
    _previousExcepthook(kind, value, traceback)


_previousExcepthook = sys.excepthook


def _finalizeAtExit():
    if _dyingOfException:
        # MPI_Finalize could wait for ranks that wait for this one: leave without it, so that the
        # process's failure status makes mpiexec end the job.
        sys.stderr.flush()
        return
    try:
        finalize()
    except MPIError as error:
        print(f"openmmgraph.mpi: at exit: {error}", file=sys.stderr)


def _initialized():
    rank, size = ctypes.c_int(), ctypes.c_int()
    message = ctypes.create_string_buffer(_MESSAGE_SIZE)
    return _library().ommgraph_mpi_world(ctypes.byref(rank), ctypes.byref(size), message, _MESSAGE_SIZE) == 0


def initialize():
    """Initialize MPI (MPI_THREAD_FUNNELED) unless it already is (by mpi4py, or an earlier call);
    idempotent.  If this call initialized it, :func:`finalize` is registered to run at exit."""
    global _finalizeRegistered
    dll = _library()
    already = _initialized()
    _call(dll.ommgraph_mpi_initialize)
    if not already and not _finalizeRegistered:
        global _previousExcepthook
        _previousExcepthook = sys.excepthook
        sys.excepthook = _excepthook
        atexit.register(_finalizeAtExit)
        _finalizeRegistered = True


def finalize():
    """MPI_Finalize if this library initialized MPI and it is not finalized yet; idempotent.  Collective."""
    _call(_library().ommgraph_mpi_finalize)


def world():
    """``(rank, size)`` of MPI_COMM_WORLD; :class:`MPIError` if MPI is not initialized."""
    rank, size = ctypes.c_int(), ctypes.c_int()
    _call(_library().ommgraph_mpi_world, ctypes.byref(rank), ctypes.byref(size))
    return rank.value, size.value


def allreduce_sum_int64(values):
    """Sum a C-contiguous, writable ``numpy.int64`` array over all ranks, in place (collective: every
    rank passes the same length); returns it.  Integer sums are exact, so every rank gets bitwise
    the same result."""
    if not isinstance(values, np.ndarray) or values.dtype != np.int64:
        raise TypeError(f"allreduce_sum_int64: expected a numpy.int64 array, got {type(values).__name__} "
                        f"{getattr(values, 'dtype', '')}".rstrip())
    if not values.flags.c_contiguous or not values.flags.writeable:
        raise ValueError("allreduce_sum_int64: the array must be C-contiguous and writable (the sum is in place)")
    _call(_library().ommgraph_mpi_allreduce_sum_int64, ctypes.c_void_p(values.ctypes.data), ctypes.c_size_t(values.size))
    return values


def allreduce_sum_double_ordered(value):
    """The sum over all ranks of one float per rank, added in rank order: bitwise the same on every rank."""
    v, total = ctypes.c_double(float(value)), ctypes.c_double()
    _call(_library().ommgraph_mpi_allreduce_sum_double_ordered, ctypes.byref(v), ctypes.byref(total))
    return total.value


# --- the communicate engine ---------------------------------------------------------------------------


class Communicator(Endpoint):
    """This rank's endpoint of the MPI communicate engine (collective: every rank makes one, with its
    own lists, in the same order).

    ``num_owned``: the rows this rank owns; ghost ``g`` (row ``num_owned + g`` of the tables) copies
    row ``ghost_owner_row[g]`` of rank ``ghost_owner_rank[g]`` (this rank for a periodic image).
    ``handle`` is the integer to pass to ``torch.ops.openmmgraph.communicate`` (or
    ``ommgraph_communicate_forward``).  A context manager (``with ... as engine``, then
    ``engine.handle``); :meth:`close` destroys it.

    Wrong lists on any rank make every rank raise (the others with "rank r failed: ..."), never hang.
    """

    def __init__(self, ghost_owner_rank, ghost_owner_row, num_owned):
        dll = _library()
        problem = None
        lists = []
        for name, values in (("ghost_owner_rank", ghost_owner_rank), ("ghost_owner_row", ghost_owner_row)):
            try:
                array = np.asarray(values)
            except Exception as error:  # ragged lists and the like: still a local problem, never a raise before the collective
                problem = problem or f"{name} must be a 1-D list of integers ({type(error).__name__}: {error})"
                array = np.zeros(0, dtype=np.int64)
            if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
                problem = problem or f"{name} must be a 1-D list of integers, found shape {list(array.shape)} of {array.dtype}"
                array = np.zeros(0, dtype=np.int64)
            lists.append(np.ascontiguousarray(array, dtype=np.int64))
        ranks, rows = lists
        try:
            self.num_owned = operator.index(num_owned)
        except Exception:
            problem = problem or f"num_owned must be an integer, found {num_owned!r}"
            self.num_owned = 0
        if not -(2**63) <= self.num_owned < 2**63:  # ctypes would wrap it silently (2**64 + 2 became 2)
            problem = problem or f"num_owned {self.num_owned} is outside the int64 range"
            self.num_owned = 0
        self.num_ghost = len(rows)
        self.handle = 0
        if problem is not None:
            pass
        elif len(ranks) != len(rows):
            problem = f"ghost_owner_rank has {len(ranks)} entries but ghost_owner_row has {len(rows)}"
        elif len(ranks) and (ranks.min() < np.iinfo(np.int32).min or ranks.max() > np.iinfo(np.int32).max):
            problem = "ghost_owner_rank has entries outside the int32 range"
        ranks32 = ranks.astype(np.int32) if problem is None else np.zeros(0, dtype=np.int32)
        handle = ctypes.c_int64(0)
        try:
            # A local problem still takes part in the collective create (numGhost -1 fails there), so
            # that the other ranks fail too instead of waiting for this one.
            _call(
                dll.ommgraph_mpi_communicator_create,
                ctypes.c_int64(self.num_owned),
                ctypes.c_int64(self.num_ghost if problem is None else -1),
                ctypes.c_void_p(ranks32.ctypes.data if len(ranks32) else None),
                ctypes.c_void_p(rows.ctypes.data if len(rows) else None),
                ctypes.byref(handle),
            )
        except MPIError:
            if problem is not None:
                raise ValueError(f"openmmgraph.mpi.Communicator: {problem}") from None
            raise
        self.handle = handle.value

    def _destroy(self, handle):
        _call(_library().ommgraph_mpi_communicator_destroy, ctypes.c_int64(handle))
