#include "MpiSupport.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <mutex>
#include <thread>

namespace GraphMPI {

namespace {
std::mutex commMutex;
MPI_Comm commWorld = MPI_COMM_NULL;
} // namespace

int fail(char* message, std::size_t messageSize, int code, const std::string& text) {
    if (message && messageSize > 0) {
        const std::size_t n = text.size() < messageSize - 1 ? text.size() : messageSize - 1;
        std::memcpy(message, text.data(), n);
        message[n] = '\0';
    }
    return code;
}

std::string mpiError(const char* call, int rc) {
    char text[MPI_MAX_ERROR_STRING + 1] = {0};
    int length = 0;
    if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS)
        std::snprintf(text, sizeof(text), "error code %d", rc);
    return std::string(call) + " failed: " + text;
}

int checkMpiReady(const char* what, char* message, std::size_t messageSize) {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (finalized)
        return fail(message, messageSize, kState, std::string(what) + ": MPI is already finalized");
    if (!initialized)
        return fail(message, messageSize, kState,
                    std::string(what) + ": MPI is not initialized (call ommgraph_mpi_initialize, or openmmgraph.mpi.initialize(), first)");
    return kOk;
}

MPI_Comm libraryComm(int* rc) {
    std::lock_guard<std::mutex> lock(commMutex);
    *rc = MPI_SUCCESS;
    if (commWorld == MPI_COMM_NULL) {
        MPI_Comm comm = MPI_COMM_NULL;
        *rc = duplicateWorld(&comm, "the library's first collective call");
        if (*rc != MPI_SUCCESS)
            return MPI_COMM_NULL;
        MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
        commWorld = comm;
    }
    return commWorld;
}

int duplicateWorld(MPI_Comm* comm, const std::string& what) {
    MPI_Request request = MPI_REQUEST_NULL;
    int rc = MPI_Comm_idup(MPI_COMM_WORLD, comm, &request);
    if (rc == MPI_SUCCESS)
        rc = waitFor(&request, what + " (MPI_Comm_idup of MPI_COMM_WORLD)");
    if (rc != MPI_SUCCESS)
        *comm = MPI_COMM_NULL; // not a communicator to free (its creation did not complete)
    return rc;
}

void freeLibraryComm() {
    std::lock_guard<std::mutex> lock(commMutex);
    if (commWorld != MPI_COMM_NULL)
        MPI_Comm_free(&commWorld);
    commWorld = MPI_COMM_NULL;
}

double exchangeTimeout() {
    const char* text = std::getenv("OMMGRAPH_MPI_TIMEOUT");
    if (!text || !*text)
        return 0.0;
    char* end = nullptr;
    const double seconds = std::strtod(text, &end);
    return end != text && seconds > 0 ? seconds : 0.0;
}

int waitFor(MPI_Request* request, const std::string& what) {
    const double timeout = exchangeTimeout();
    if (timeout <= 0)
        return MPI_Wait(request, MPI_STATUS_IGNORE);
    const double start = MPI_Wtime();
    for (;;) {
        int done = 0;
        const int rc = MPI_Test(request, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS || done)
            return rc;
        if (MPI_Wtime() - start > timeout) {
            int rank = -1;
            MPI_Comm_rank(MPI_COMM_WORLD, &rank);
            std::fprintf(stderr,
                         "openmm-graph MPI: rank %d: %s did not complete within OMMGRAPH_MPI_TIMEOUT=%g s "
                         "(another rank failed, stopped, or did not make the same collective call); calling MPI_Abort\n",
                         rank, what.c_str(), timeout);
            std::fflush(stderr);
            // Give mpiexec's output forwarding a moment before the job is torn down.
            std::this_thread::sleep_for(std::chrono::milliseconds(500));
            MPI_Abort(MPI_COMM_WORLD, 3);
            return MPI_ERR_OTHER; // not reached
        }
    }
}

} // namespace GraphMPI
