/*
 * openmm-graph: the MPI backend (libOpenMMGraphMPI).
 *
 * A small C library (no C++ types, no OpenMM, torch, CUDA or even MPI
 * includes in this header) for runs in which every MPI rank is one spatial
 * domain:
 *
 *  - MPI set-up (initialize / finalize, tolerant of an MPI that someone else,
 *    e.g. mpi4py, initialized), rank and size of MPI_COMM_WORLD;
 *  - the reductions a multi-process OpenMM run needs to keep every rank on
 *    bitwise the same trajectory: an integer (fixed-point) sum of int64
 *    arrays and an ordered sum of one double per rank, both identical on
 *    every rank;
 *  - an engine of the `communicate` operation (OpenMMGraphCommunicate.h):
 *    ghost rows filled from their owners on other ranks (forward) and ghost
 *    gradients added back into their owners (reverse), with MPI_Alltoallv
 *    over a private duplicate of MPI_COMM_WORLD.
 *
 * Every function returns 0 on success; on failure a nonzero code and a
 * NUL-terminated message that names the problem in `message` (of
 * `messageSize` bytes; may be NULL when messageSize is 0).  Nothing throws and
 * nothing aborts the process, except an exchange that waits longer than the
 * timeout of the environment variable OMMGRAPH_MPI_TIMEOUT (seconds; unset or
 * 0: wait as long as MPI waits), which calls MPI_Abort after printing why.
 *
 * docs/mpi.md describes the API, the costs and the tests.
 */
#ifndef OPENMM_GRAPH_MPI_H_
#define OPENMM_GRAPH_MPI_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_MSC_VER)
#define OMMGRAPH_MPI_EXPORT __declspec(dllexport)
#else
#define OMMGRAPH_MPI_EXPORT __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** MPI_Init_thread(MPI_THREAD_FUNNELED) unless MPI is already initialized (e.g. by mpi4py); idempotent.
 *  An error if MPI was already finalized. */
OMMGRAPH_MPI_EXPORT int ommgraph_mpi_initialize(char* message, size_t messageSize);

/** MPI_Finalize, only if this library initialized MPI and it is not finalized yet; idempotent.
 *  Call it on every rank (it is collective in MPI). */
OMMGRAPH_MPI_EXPORT int ommgraph_mpi_finalize(char* message, size_t messageSize);

/** Rank and size of MPI_COMM_WORLD.  An error (not a crash) if MPI is not initialized or already finalized. */
OMMGRAPH_MPI_EXPORT int ommgraph_mpi_world(int* rank, int* size, char* message, size_t messageSize);

/** In-place sum of `count` int64 values over MPI_COMM_WORLD (collective: every rank calls it with the same
 *  count).  Integer sums: every rank gets bitwise the same result.  Counts above INT_MAX are sent in chunks. */
OMMGRAPH_MPI_EXPORT int ommgraph_mpi_allreduce_sum_int64(int64_t* values, size_t count, char* message, size_t messageSize);

/** One double per rank, gathered and summed in rank order (rank 0 first) on every rank: bitwise the same
 *  *total on all ranks (collective). */
OMMGRAPH_MPI_EXPORT int ommgraph_mpi_allreduce_sum_double_ordered(const double* value, double* total, char* message,
                                                                  size_t messageSize);

/**
 * Register a communicate engine for this rank's domain (collective over MPI_COMM_WORLD: every rank calls it,
 * with its own lists).
 *
 *  numOwned        rows this rank owns (the first rows of its tables).
 *  numGhost        ghost rows (after the owned ones).
 *  ghostOwnerRank  [numGhost]: the rank that owns ghost g (may be this rank: a periodic image).
 *  ghostOwnerRow   [numGhost]: the owned row of that rank which ghost g copies (0 <= row < its numOwned).
 *  handle          receives the handle for torch.ops.openmmgraph.communicate / ommgraph_communicate_forward.
 *
 * The lists are checked on every rank and the verdict is agreed: if any rank's lists are wrong, every rank
 * fails (the others with "rank r failed: <its message>").  The index lists are exchanged once, here; each
 * forward / reverse call is then one MPI_Alltoallv of the rows (plus a one-integer MPI_Allreduce that makes
 * a wrong buffer on one rank an error on every rank rather than a hang).  forward: ghost := owner row;
 * reverse: owner += ghost rows in a fixed order (source ranks ascending, ghosts ascending), ghosts := 0.
 * Host buffers directly; CUDA buffers staged through pinned host memory (the CUDA driver is loaded at run
 * time; see docs/mpi.md).
 */
OMMGRAPH_MPI_EXPORT int ommgraph_mpi_communicator_create(int64_t numOwned, int64_t numGhost, const int32_t* ghostOwnerRank,
                                                         const int64_t* ghostOwnerRow, int64_t* handle, char* message,
                                                         size_t messageSize);

/** Unregister a handle made by ommgraph_mpi_communicator_create (its resources go when no call is in flight).
 *  An error for any other handle. */
OMMGRAPH_MPI_EXPORT int ommgraph_mpi_communicator_destroy(int64_t handle, char* message, size_t messageSize);

#ifdef __cplusplus
}
#endif

#endif
