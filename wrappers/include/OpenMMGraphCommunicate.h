/*
 * openmm-graph: the engine side of the `communicate` operation.
 *
 * A stable C ABI (no C++ types, no CUDA or torch includes) through which a
 * simulation engine that splits the particles into spatial domains (OpenMM
 * with several devices, MPI ranks, LAMMPS, ...) lets a model running in one
 * domain exchange per-particle features with the other domains.
 *
 * The buffer of one domain is a row-major table [numOwned + numGhost][numFeatures]:
 * rows 0 .. numOwned-1 belong to the particles this domain owns, rows
 * numOwned .. numOwned+numGhost-1 are ghosts: copies of particles owned by
 * another domain (or periodic images of this domain's own particles).  The
 * engine alone knows which domain and row own each ghost row.
 *
 *  forward  (the op's forward pass):   ghost rows := the owner's rows (a copy)
 *  reverse  (the op's backward pass):  owner rows += the ghost rows that copy
 *                                      them (from every domain), then the
 *                                      ghost rows := 0
 *
 * reverse is the transpose (adjoint) of forward, so gradients, and forces, are
 * exact.  The full contract (ownership, collectives, threading, CUDA streams,
 * errors) and an example engine are in docs/communicate.md.
 *
 * Use: fill an OMMGraphCommunicator, register it (one registration per domain,
 * i.e. per endpoint), pass the handle to the model (the `handle` argument of
 * torch.ops.openmmgraph.communicate), unregister when done.  Handle 0 is
 * reserved and means "one domain, no engine": communicating with it does
 * nothing.  Every function returns 0 (OMMGRAPH_COMM_OK) on success and a
 * nonzero OMMGraphCommStatus on failure; ommgraph_communicator_last_error()
 * then gives this thread's message, which names the problem.
 */
#ifndef OPENMM_GRAPH_COMMUNICATE_H_
#define OPENMM_GRAPH_COMMUNICATE_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_MSC_VER)
#define OMMGRAPH_COMM_EXPORT __declspec(dllexport)
#else
#define OMMGRAPH_COMM_EXPORT __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** The version of OMMGraphCommunicator this header describes (set .version to it). */
#define OMMGRAPH_COMMUNICATOR_VERSION 1

/** Bytes of the message buffer a callback may write its error message into (NUL included). */
#define OMMGRAPH_COMM_MESSAGE_SIZE 1024

typedef enum {
    OMMGRAPH_COMM_OK = 0,
    OMMGRAPH_COMM_ERROR_ARGUMENT = 1,    /* a null pointer, a bad version, an inconsistent buffer description */
    OMMGRAPH_COMM_ERROR_HANDLE = 2,      /* the handle is negative, or not (or no longer) registered */
    OMMGRAPH_COMM_ERROR_UNSUPPORTED = 3, /* the engine does not serve this buffer's device */
    OMMGRAPH_COMM_ERROR_ENGINE = 4,      /* the engine's callback returned an error (see the message) */
} OMMGraphCommStatus;

/** Element types of a buffer. */
typedef enum {
    OMMGRAPH_COMM_FLOAT32 = 0,
    OMMGRAPH_COMM_FLOAT64 = 1,
} OMMGraphCommDType;

/** Where a buffer lives: the DLPack device type codes (kDLCPU, kDLCUDA). */
typedef enum {
    OMMGRAPH_COMM_DEVICE_CPU = 1,
    OMMGRAPH_COMM_DEVICE_CUDA = 2,
} OMMGraphCommDeviceType;

/** Bits of OMMGraphCommunicator.deviceTypes: the devices whose buffers the engine can exchange. */
#define OMMGRAPH_COMM_SUPPORTS_CPU 1u
#define OMMGRAPH_COMM_SUPPORTS_CUDA 2u

/**
 * One domain's buffer, as handed to a callback.  Valid only during the call.
 *
 *  data         the first element of row 0: host memory (CPU) or device memory of
 *               CUDA device deviceIndex (CUDA).  May be NULL only when the table
 *               has no elements.
 *  dtype        OMMGRAPH_COMM_FLOAT32 or OMMGRAPH_COMM_FLOAT64.
 *  deviceType   OMMGRAPH_COMM_DEVICE_CPU or OMMGRAPH_COMM_DEVICE_CUDA.
 *  deviceIndex  the CUDA device ordinal (0 on CPU).
 *  numOwned     rows owned by this domain, first in the table (>= 0).
 *  numGhost     ghost rows, after the owned ones (>= 0).
 *  numFeatures  elements per row that take part (>= 0): the whole row of the
 *               model's feature tensor (all dimensions after the first, flattened).
 *  rowStride    elements from the start of one row to the next (>= numFeatures);
 *               the elements of a row are contiguous.  Elements between
 *               numFeatures and rowStride (padding) must not be touched.
 *  stream       CUDA: the cudaStream_t (as void*) the caller orders its work on,
 *               NULL for the legacy default stream; CPU: NULL.  The engine makes
 *               its reads and writes of `data` stream-ordered on it (see
 *               docs/communicate.md, "CUDA streams").
 */
typedef struct OMMGraphCommBuffer {
    void* data;
    int32_t dtype;
    int32_t deviceType;
    int32_t deviceIndex;
    int32_t reserved; /* 0 */
    int64_t numOwned;
    int64_t numGhost;
    int64_t numFeatures;
    int64_t rowStride;
    void* stream;
} OMMGraphCommBuffer;

/**
 * A callback of the engine (forward or reverse) for one domain: operate on
 * `buffer` in place and return 0, or return any nonzero code and write a
 * NUL-terminated message of at most `messageSize` bytes into `message` (which
 * is never NULL; it starts as "").  It must not throw C++ exceptions or longjmp
 * out.  userData is OMMGraphCommunicator.userData.
 */
typedef int (*OMMGraphCommFunction)(void* userData, const OMMGraphCommBuffer* buffer, char* message, size_t messageSize);

/**
 * What an engine supplies for one domain.  ommgraph_communicator_register
 * copies it (and the name), so the struct itself may be freed after the call;
 * userData must stay valid until `release` is called (or, without `release`,
 * until ommgraph_communicator_unregister has returned and no communication
 * with the handle is in flight).
 *
 *  version      OMMGRAPH_COMMUNICATOR_VERSION.
 *  deviceTypes  OMMGRAPH_COMM_SUPPORTS_* bits: buffers of other devices are
 *               refused with OMMGRAPH_COMM_ERROR_UNSUPPORTED before any callback.
 *  name         for error messages ("MPI rank 3 of 8"); may be NULL.
 *  userData     passed to every callback.
 *  forward      fill the ghost rows from their owners (required).
 *  reverse      add the ghost rows into their owners' rows, then zero the ghost
 *               rows (required).
 *  release      called once with userData when the handle is unregistered and
 *               no call on it is in flight anymore (may be NULL); possibly on
 *               another thread than the one that unregistered.
 */
typedef struct OMMGraphCommunicator {
    uint32_t version;
    uint32_t deviceTypes;
    const char* name;
    void* userData;
    OMMGraphCommFunction forward;
    OMMGraphCommFunction reverse;
    void (*release)(void* userData);
} OMMGraphCommunicator;

/**
 * Register one domain's endpoint.  *handle receives a positive integer, never
 * reused within the process (so a stale handle is an error, not another
 * engine).  Thread-safe.
 */
OMMGRAPH_COMM_EXPORT int ommgraph_communicator_register(const OMMGraphCommunicator* communicator, int64_t* handle);

/**
 * Unregister a handle: later calls with it fail with OMMGRAPH_COMM_ERROR_HANDLE;
 * calls already in flight finish, then `release` runs.  Thread-safe.
 */
OMMGRAPH_COMM_EXPORT int ommgraph_communicator_unregister(int64_t handle);

/**
 * Fill the ghost rows of `buffer` from their owners, through the engine of
 * `handle`: checks the description, then calls its forward callback.  Handle 0:
 * nothing to do (success).  This is what torch.ops.openmmgraph.communicate
 * calls, and what a native (non-torch) model calls between its message-passing
 * rounds.
 */
OMMGRAPH_COMM_EXPORT int ommgraph_communicate_forward(int64_t handle, const OMMGraphCommBuffer* buffer);

/** The adjoint of ommgraph_communicate_forward: add the ghost rows into their owners, zero them (reverse callback). */
OMMGRAPH_COMM_EXPORT int ommgraph_communicate_reverse(int64_t handle, const OMMGraphCommBuffer* buffer);

/** 1 if `handle` is 0 or currently registered, else 0 (no message). */
OMMGRAPH_COMM_EXPORT int ommgraph_communicator_is_registered(int64_t handle);

/** The message of the last failed call on this thread ("" if it succeeded); valid until the thread's next call. */
OMMGRAPH_COMM_EXPORT const char* ommgraph_communicator_last_error(void);

#ifdef __cplusplus
}
#endif

#endif
