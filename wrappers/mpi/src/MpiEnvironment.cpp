/*
 * MPI set-up and the reductions of OpenMMGraphMPI.h: initialize, finalize,
 * world, the integer sum and the rank-ordered double sum.
 */
#include "OpenMMGraphMPI.h"
#include "MpiSupport.h"

#include <climits>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

using namespace GraphMPI;

namespace {

std::mutex stateMutex;
bool weInitialized = false; // this library called MPI_Init_thread

/** Elements per MPI_Allreduce call: INT_MAX, or OMMGRAPH_MPI_ALLREDUCE_CHUNK (for the tests of the chunking). */
std::size_t allreduceChunk() {
    const char* text = std::getenv("OMMGRAPH_MPI_ALLREDUCE_CHUNK");
    if (text && *text) {
        char* end = nullptr;
        const long long value = std::strtoll(text, &end, 10);
        if (end != text && value > 0 && value <= INT_MAX)
            return static_cast<std::size_t>(value);
    }
    return static_cast<std::size_t>(INT_MAX);
}

template <typename Body> int guarded(char* message, std::size_t messageSize, const char* what, Body body) {
    try {
        return body();
    }
    catch (const std::exception& error) {
        return fail(message, messageSize, kInternal, std::string(what) + ": unexpected error: " + error.what());
    }
    catch (...) {
        return fail(message, messageSize, kInternal, std::string(what) + ": unexpected error");
    }
}

} // namespace

extern "C" {

OMMGRAPH_MPI_EXPORT int ommgraph_mpi_initialize(char* message, std::size_t messageSize) {
    return guarded(message, messageSize, "ommgraph_mpi_initialize", [&] {
        std::lock_guard<std::mutex> lock(stateMutex);
        int initialized = 0, finalized = 0;
        MPI_Finalized(&finalized);
        if (finalized)
            return fail(message, messageSize, kState, "ommgraph_mpi_initialize: MPI is already finalized (it cannot be initialized twice)");
        MPI_Initialized(&initialized);
        if (initialized)
            return fail(message, messageSize, kOk, "");
        int provided = 0;
        const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS)
            return fail(message, messageSize, kMpi, "ommgraph_mpi_initialize: " + mpiError("MPI_Init_thread", rc));
        weInitialized = true;
        return fail(message, messageSize, kOk, "");
    });
}

OMMGRAPH_MPI_EXPORT int ommgraph_mpi_finalize(char* message, std::size_t messageSize) {
    return guarded(message, messageSize, "ommgraph_mpi_finalize", [&] {
        std::lock_guard<std::mutex> lock(stateMutex);
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!weInitialized || finalized)
            return fail(message, messageSize, kOk, "");
        freeLibraryComm();
        const int rc = MPI_Finalize();
        weInitialized = false;
        if (rc != MPI_SUCCESS)
            return fail(message, messageSize, kMpi, "ommgraph_mpi_finalize: " + mpiError("MPI_Finalize", rc));
        return fail(message, messageSize, kOk, "");
    });
}

OMMGRAPH_MPI_EXPORT int ommgraph_mpi_world(int* rank, int* size, char* message, std::size_t messageSize) {
    return guarded(message, messageSize, "ommgraph_mpi_world", [&] {
        if (!rank || !size)
            return fail(message, messageSize, kArgument, std::string("ommgraph_mpi_world: ") + (rank ? "size" : "rank") + " is NULL");
        if (int code = checkMpiReady("ommgraph_mpi_world", message, messageSize))
            return code;
        int rc = MPI_Comm_rank(MPI_COMM_WORLD, rank);
        if (rc == MPI_SUCCESS)
            rc = MPI_Comm_size(MPI_COMM_WORLD, size);
        if (rc != MPI_SUCCESS)
            return fail(message, messageSize, kMpi, "ommgraph_mpi_world: " + mpiError("MPI_Comm_rank/size", rc));
        return fail(message, messageSize, kOk, "");
    });
}

OMMGRAPH_MPI_EXPORT int ommgraph_mpi_allreduce_sum_int64(int64_t* values, std::size_t count, char* message, std::size_t messageSize) {
    return guarded(message, messageSize, "ommgraph_mpi_allreduce_sum_int64", [&] {
        if (int code = checkMpiReady("ommgraph_mpi_allreduce_sum_int64", message, messageSize))
            return code;
        if (count == 0)
            return fail(message, messageSize, kOk, "");
        if (!values)
            return fail(message, messageSize, kArgument, "ommgraph_mpi_allreduce_sum_int64: values is NULL with count " + std::to_string(count));
        int rc = MPI_SUCCESS;
        MPI_Comm comm = libraryComm(&rc);
        if (comm == MPI_COMM_NULL)
            return fail(message, messageSize, kMpi, "ommgraph_mpi_allreduce_sum_int64: " + mpiError("MPI_Comm_idup", rc));
        const std::size_t chunk = allreduceChunk();
        for (std::size_t offset = 0; offset < count; offset += chunk) {
            const std::size_t n = count - offset < chunk ? count - offset : chunk;
            // Nonblocking, so that OMMGRAPH_MPI_TIMEOUT also covers a sum that another rank never joins.
            MPI_Request request = MPI_REQUEST_NULL;
            rc = MPI_Iallreduce(MPI_IN_PLACE, values + offset, static_cast<int>(n), MPI_INT64_T, MPI_SUM, comm, &request);
            if (rc == MPI_SUCCESS)
                rc = waitFor(&request, "ommgraph_mpi_allreduce_sum_int64 (MPI_Iallreduce of " + std::to_string(n) + " elements)");
            if (rc != MPI_SUCCESS)
                return fail(message, messageSize, kMpi,
                            "ommgraph_mpi_allreduce_sum_int64: " + mpiError("MPI_Iallreduce", rc) + " (elements " + std::to_string(offset) +
                                ".." + std::to_string(offset + n) + " of " + std::to_string(count) + ")");
        }
        return fail(message, messageSize, kOk, "");
    });
}

OMMGRAPH_MPI_EXPORT int ommgraph_mpi_allreduce_sum_double_ordered(const double* value, double* total, char* message,
                                                                  std::size_t messageSize) {
    return guarded(message, messageSize, "ommgraph_mpi_allreduce_sum_double_ordered", [&] {
        if (!value || !total)
            return fail(message, messageSize, kArgument,
                        std::string("ommgraph_mpi_allreduce_sum_double_ordered: ") + (value ? "total" : "value") + " is NULL");
        if (int code = checkMpiReady("ommgraph_mpi_allreduce_sum_double_ordered", message, messageSize))
            return code;
        int rc = MPI_SUCCESS;
        MPI_Comm comm = libraryComm(&rc);
        if (comm == MPI_COMM_NULL)
            return fail(message, messageSize, kMpi, "ommgraph_mpi_allreduce_sum_double_ordered: " + mpiError("MPI_Comm_idup", rc));
        int size = 1;
        MPI_Comm_size(comm, &size);
        std::vector<double> all(static_cast<std::size_t>(size));
        MPI_Request request = MPI_REQUEST_NULL;
        rc = MPI_Iallgather(value, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, comm, &request);
        if (rc == MPI_SUCCESS)
            rc = waitFor(&request, "ommgraph_mpi_allreduce_sum_double_ordered (MPI_Iallgather)");
        if (rc != MPI_SUCCESS)
            return fail(message, messageSize, kMpi, "ommgraph_mpi_allreduce_sum_double_ordered: " + mpiError("MPI_Iallgather", rc));
        // Rank order, one addition at a time: the same operations on every rank, so bitwise the same total.
        volatile double sum = all[0];
        for (int r = 1; r < size; r++)
            sum = sum + all[static_cast<std::size_t>(r)];
        *total = sum;
        return fail(message, messageSize, kOk, "");
    });
}

} // extern "C"
