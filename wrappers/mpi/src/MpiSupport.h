/*
 * Shared helpers of libOpenMMGraphMPI: messages, the library's own duplicate
 * of MPI_COMM_WORLD, waits with the optional OMMGRAPH_MPI_TIMEOUT.
 */
#ifndef OPENMM_GRAPH_MPI_SUPPORT_H_
#define OPENMM_GRAPH_MPI_SUPPORT_H_

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace GraphMPI {

/** Return codes (the header promises only "nonzero"; these make logs easier to read). */
enum Code {
    kOk = 0,
    kArgument = 1,    // a bad argument of this call
    kState = 2,       // MPI not initialized / already finalized
    kMpi = 3,         // an MPI call failed
    kOtherRank = 4,   // another rank's arguments were wrong (collective calls fail together)
    kCuda = 5,        // the CUDA driver failed or is missing
    kInternal = 6,    // an unexpected exception
};

/** Write `text` (truncated, NUL-terminated) into message; return code. */
int fail(char* message, std::size_t messageSize, int code, const std::string& text);

/** "MPI_Xxx failed: <MPI_Error_string>" */
std::string mpiError(const char* call, int rc);

/** 0 when MPI is initialized and not finalized; otherwise kState and a message naming `what`. */
int checkMpiReady(const char* what, char* message, std::size_t messageSize);

/** The library's duplicate of MPI_COMM_WORLD (errors returned, not fatal), made on the first
 *  collective call (every rank makes it at the same collective call).  MPI_COMM_NULL and rc on failure. */
MPI_Comm libraryComm(int* rc);

/** A duplicate of MPI_COMM_WORLD into *comm (MPI_Comm_idup waited for by waitFor, so OMMGRAPH_MPI_TIMEOUT covers
 *  a rank that never makes it; `what` names the caller in the timeout's message); *comm is MPI_COMM_NULL on failure. */
int duplicateWorld(MPI_Comm* comm, const std::string& what);

/** Forget the library communicator (called by finalize before MPI_Finalize; frees it). */
void freeLibraryComm();

/** Seconds of OMMGRAPH_MPI_TIMEOUT (<= 0: none). */
double exchangeTimeout();

/** MPI_Wait, or with a timeout a polling MPI_Test loop that prints `what` and calls MPI_Abort when the
 *  timeout passes (a collective that cannot complete cannot be cancelled). */
int waitFor(MPI_Request* request, const std::string& what);

} // namespace GraphMPI

#endif
