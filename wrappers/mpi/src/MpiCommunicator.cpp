/*
 * The MPI engine of the communicate interface (OpenMMGraphMPI.h,
 * ommgraph_mpi_communicator_create / _destroy): one domain per rank.
 *
 * At create every rank sends each owner the list of owned rows it holds as
 * ghosts (MPI_Alltoall of the counts, MPI_Alltoallv of the row indices), so
 * that afterwards every rank knows
 *
 *   sendRows  (per rank r, concatenated): my owned rows that r holds as ghosts, in r's ghost order;
 *   recvGhosts (per rank r, concatenated): my ghost indices that r owns, ascending.
 *
 * forward: pack sendRows, one MPI_Alltoallv (rows as a contiguous datatype of
 * numFeatures elements), unpack into recvGhosts.  reverse: the transpose: pack
 * the ghost rows in recvGhosts order, MPI_Alltoallv back to the owners, add
 * them into sendRows in rank order then ghost order, zero the ghost rows.
 * Before the exchange, one MPI_Allreduce agrees that every rank's buffer is
 * right (split, dtype, width, direction), so a wrong buffer on one rank is an
 * error on every rank, not a hang.
 *
 * CUDA buffers: the stream is synchronised, the table staged into pinned host
 * memory (2D copies that leave row padding alone), exchanged as above, and
 * the changed rows copied back (then synchronised, so the staging memory is
 * free again when the callback returns).
 */
#include "OpenMMGraphCommunicate.h"
#include "OpenMMGraphMPI.h"
#include "CudaDriver.h"
#include "MpiSupport.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

using namespace GraphMPI;

namespace {

const std::size_t kAgreeMessageSize = 512;

struct Domain {
    MPI_Comm comm = MPI_COMM_NULL;
    int rank = 0, size = 1;
    int64_t numOwned = 0, numGhost = 0;
    std::vector<int> sendCounts, sendDispls, recvCounts, recvDispls; // in rows, per rank
    std::vector<int64_t> sendRows;   // owned rows to send, grouped by destination rank
    std::vector<int64_t> recvGhosts; // ghost indices (0-based among the ghosts) to receive into, grouped by source rank
    int64_t totalSend = 0, totalRecv = 0;
    std::string name;
    std::mutex mutex; // one exchange at a time on this handle
    std::vector<char> sendBuffer, recvBuffer;
    // The row datatype of the last call (contiguous numFeatures elements of the dtype).
    MPI_Datatype rowType = MPI_DATATYPE_NULL;
    int rowTypeDType = -1;
    int64_t rowTypeFeatures = -1;
    // Staging of CUDA buffers.
    void* pinned = nullptr;
    std::size_t pinnedBytes = 0;

    ~Domain() {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) {
            if (rowType != MPI_DATATYPE_NULL)
                MPI_Type_free(&rowType);
            if (comm != MPI_COMM_NULL)
                MPI_Comm_free(&comm);
        }
        if (pinned) {
            std::string why;
            if (CudaDriver* driver = CudaDriver::get(&why))
                driver->freePinned(pinned);
        }
    }
};

std::mutex handlesMutex;
std::set<int64_t> ourHandles;

void releaseDomain(void* userData) { delete static_cast<Domain*>(userData); }

const char* dtypeName(int dtype) { return dtype == OMMGRAPH_COMM_FLOAT64 ? "float64" : "float32"; }

std::size_t elementSize(int dtype) { return dtype == OMMGRAPH_COMM_FLOAT64 ? sizeof(double) : sizeof(float); }

/**
 * After the ranks have learnt (by an MPI_Allreduce MIN of "my rank if I failed, else size") that rank
 * `first` is the lowest failing rank: it broadcasts its message, the others return it prefixed with
 * `what`.  The failing rank returns localCode with its own message.
 */
int broadcastFailure(MPI_Comm comm, int rank, int first, int localCode, char* message, std::size_t messageSize, const std::string& what) {
    char text[kAgreeMessageSize] = {0};
    if (rank == first && message)
        std::strncpy(text, message, kAgreeMessageSize - 1);
    const int rc = MPI_Bcast(text, static_cast<int>(kAgreeMessageSize), MPI_CHAR, first, comm);
    if (rank == first)
        return localCode;
    text[kAgreeMessageSize - 1] = '\0';
    return fail(message, messageSize, kOtherRank,
                what + ": rank " + std::to_string(first) + " failed: " + (rc == MPI_SUCCESS ? text : "(its message was lost)"));
}

/** Every rank says whether it failed; kOk if none did, else (on every rank) the first failing rank's message. */
int agreeOnFailure(MPI_Comm comm, int rank, int size, bool failed, int localCode, char* message, std::size_t messageSize,
                   const std::string& what) {
    int first = failed ? rank : size;
    const int rc = MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm);
    if (rc != MPI_SUCCESS)
        return fail(message, messageSize, kMpi, what + ": " + mpiError("MPI_Allreduce", rc));
    if (first >= size)
        return kOk;
    return broadcastFailure(comm, rank, first, localCode, message, messageSize, what);
}

template <typename T> void packRows(const T* data, int64_t rowStride, int64_t features, const int64_t* rows, int64_t count, T* out) {
    for (int64_t i = 0; i < count; i++)
        std::memcpy(out + i * features, data + rows[i] * rowStride, static_cast<std::size_t>(features) * sizeof(T));
}

/** The exchange on a host table (the buffer itself, or the staged copy of a CUDA buffer). */
template <typename T>
int exchangeHost(Domain& d, T* data, int64_t rowStride, int64_t features, bool reverse, char* message, std::size_t messageSize) {
    const std::size_t rowBytes = static_cast<std::size_t>(features) * sizeof(T);
    const int64_t sendRowsCount = reverse ? d.totalRecv : d.totalSend;
    const int64_t recvRowsCount = reverse ? d.totalSend : d.totalRecv;
    d.sendBuffer.resize(std::max<std::size_t>(1, static_cast<std::size_t>(sendRowsCount) * rowBytes));
    d.recvBuffer.resize(std::max<std::size_t>(1, static_cast<std::size_t>(recvRowsCount) * rowBytes));
    T* sendBuffer = reinterpret_cast<T*>(d.sendBuffer.data());
    T* recvBuffer = reinterpret_cast<T*>(d.recvBuffer.data());
    T* ghosts = data + d.numOwned * rowStride;
    if (reverse)
        packRows(ghosts, rowStride, features, d.recvGhosts.data(), d.totalRecv, sendBuffer);
    else
        packRows(data, rowStride, features, d.sendRows.data(), d.totalSend, sendBuffer);

    const std::string what = d.name + ": the " + (reverse ? "reverse" : "forward") + " exchange (MPI_Ialltoallv)";
    MPI_Request request;
    int rc = reverse ? MPI_Ialltoallv(sendBuffer, d.recvCounts.data(), d.recvDispls.data(), d.rowType, recvBuffer, d.sendCounts.data(),
                                      d.sendDispls.data(), d.rowType, d.comm, &request)
                     : MPI_Ialltoallv(sendBuffer, d.sendCounts.data(), d.sendDispls.data(), d.rowType, recvBuffer, d.recvCounts.data(),
                                      d.recvDispls.data(), d.rowType, d.comm, &request);
    if (rc == MPI_SUCCESS)
        rc = waitFor(&request, what);
    if (rc != MPI_SUCCESS)
        return fail(message, messageSize, kMpi, d.name + ": " + mpiError("MPI_Ialltoallv", rc));

    if (!reverse) {
        for (int64_t i = 0; i < d.totalRecv; i++)
            std::memcpy(ghosts + d.recvGhosts[i] * rowStride, recvBuffer + i * features, rowBytes);
    }
    else {
        // Source ranks ascending, each one's ghosts ascending: a fixed order, so reproducible sums.
        for (int64_t i = 0; i < d.totalSend; i++) {
            T* row = data + d.sendRows[i] * rowStride;
            const T* add = recvBuffer + i * features;
            for (int64_t k = 0; k < features; k++)
                row[k] += add[k];
        }
        for (int64_t g = 0; g < d.numGhost; g++)
            std::memset(ghosts + g * rowStride, 0, rowBytes);
    }
    return kOk;
}

int exchangeCuda(Domain& d, const OMMGraphCommBuffer& b, bool reverse, char* message, std::size_t messageSize) {
    std::string why;
    CudaDriver* driver = CudaDriver::get(&why);
    if (!driver)
        return fail(message, messageSize, kCuda, d.name + ": " + why);
    const std::size_t element = elementSize(b.dtype);
    const std::size_t rowBytes = static_cast<std::size_t>(b.numFeatures) * element;
    const std::size_t devicePitch = static_cast<std::size_t>(b.rowStride) * element;
    const std::size_t rows = static_cast<std::size_t>(b.numOwned + b.numGhost);
    const std::size_t bytes = std::max<std::size_t>(1, rows * rowBytes);
    if (d.pinnedBytes < bytes) {
        driver->freePinned(d.pinned);
        d.pinned = nullptr;
        d.pinnedBytes = 0;
        d.pinned = driver->allocatePinned(bytes, &why);
        if (!d.pinned)
            return fail(message, messageSize, kCuda, d.name + ": staging buffer of " + std::to_string(bytes) + " bytes: " + why);
        d.pinnedBytes = bytes;
    }
    char* host = static_cast<char*>(d.pinned);
    char* device = static_cast<char*>(b.data);
    // forward reads the owned rows and writes the ghosts; reverse reads and writes everything.
    const std::size_t readRows = reverse ? rows : static_cast<std::size_t>(b.numOwned);
    if (!driver->deviceToHost(host, rowBytes, device, devicePitch, rowBytes, readRows, b.stream, &why) ||
        !driver->synchronize(b.stream, &why))
        return fail(message, messageSize, kCuda, d.name + ": staging to the host: " + why);
    int code = b.dtype == OMMGRAPH_COMM_FLOAT64
                   ? exchangeHost(d, reinterpret_cast<double*>(host), b.numFeatures, b.numFeatures, reverse, message, messageSize)
                   : exchangeHost(d, reinterpret_cast<float*>(host), b.numFeatures, b.numFeatures, reverse, message, messageSize);
    if (code != kOk)
        return code;
    const std::size_t firstRow = reverse ? 0 : static_cast<std::size_t>(b.numOwned);
    if (!driver->hostToDevice(device + firstRow * devicePitch, devicePitch, host + firstRow * rowBytes, rowBytes, rowBytes, rows - firstRow,
                              b.stream, &why) ||
        !driver->synchronize(b.stream, &why))
        return fail(message, messageSize, kCuda, d.name + ": staging back to the device: " + why);
    return kOk;
}

int exchange(void* userData, const OMMGraphCommBuffer* buffer, char* message, std::size_t messageSize, bool reverse) {
    Domain& d = *static_cast<Domain*>(userData);
    const char* direction = reverse ? "reverse" : "forward";
    try {
        std::lock_guard<std::mutex> lock(d.mutex);
        if (int code = checkMpiReady((d.name + " " + direction).c_str(), message, messageSize))
            return code;
        const OMMGraphCommBuffer& b = *buffer;
        // Local checks, then agreement: a wrong buffer on one rank fails every rank.
        int localCode = kOk;
        if (b.numOwned != d.numOwned || b.numGhost != d.numGhost)
            localCode = fail(message, messageSize, kArgument,
                             d.name + " has " + std::to_string(d.numOwned) + " owned and " + std::to_string(d.numGhost) + " ghost rows, the " +
                                 direction + " buffer " + std::to_string(b.numOwned) + " and " + std::to_string(b.numGhost));
        if (localCode == kOk && b.deviceType == OMMGRAPH_COMM_DEVICE_CUDA) {
            std::string why;
            if (!CudaDriver::get(&why))
                localCode = fail(message, messageSize, kCuda, d.name + ": " + why);
        }
        // One MPI_Allreduce (MIN) agrees on everything: the first failing rank, and width, dtype and
        // direction (each as the MIN of the value and of its negative: equal on all ranks iff min == -min(-x)).
        int64_t agree[7] = {localCode != kOk ? d.rank : d.size, b.numFeatures, -b.numFeatures,
                            b.dtype, -static_cast<int64_t>(b.dtype), reverse ? 1 : 0, reverse ? -1 : 0};
        const std::string what = d.name + ": " + direction;
        MPI_Request request;
        int rc = MPI_Iallreduce(MPI_IN_PLACE, agree, 7, MPI_INT64_T, MPI_MIN, d.comm, &request);
        if (rc == MPI_SUCCESS)
            rc = waitFor(&request, what + " (the agreement before the exchange, MPI_Iallreduce)");
        if (rc != MPI_SUCCESS)
            return fail(message, messageSize, kMpi, what + ": " + mpiError("MPI_Iallreduce", rc));
        if (agree[0] < d.size)
            return broadcastFailure(d.comm, d.rank, static_cast<int>(agree[0]), localCode, message, messageSize, what);
        const int64_t* same = agree + 1;
        if (same[0] != -same[1])
            return fail(message, messageSize, kArgument,
                        what + ": the ranks disagree on the row width (numFeatures from " + std::to_string(same[0]) + " to " +
                            std::to_string(-same[1]) + "; this rank " + std::to_string(b.numFeatures) + ")");
        if (same[2] != -same[3])
            return fail(message, messageSize, kArgument, what + ": the ranks disagree on the dtype (this rank " + dtypeName(b.dtype) + ")");
        if (same[4] != -same[5])
            return fail(message, messageSize, kArgument, what + ": some ranks called forward, others reverse (collective order broken)");
        if (b.numFeatures == 0)
            return kOk;
        if (d.rowType == MPI_DATATYPE_NULL || d.rowTypeDType != b.dtype || d.rowTypeFeatures != b.numFeatures) {
            if (d.rowType != MPI_DATATYPE_NULL)
                MPI_Type_free(&d.rowType);
            d.rowType = MPI_DATATYPE_NULL;
            if (b.numFeatures > INT_MAX)
                return fail(message, messageSize, kArgument, what + ": rows of " + std::to_string(b.numFeatures) + " elements are too wide for MPI");
            rc = MPI_Type_contiguous(static_cast<int>(b.numFeatures), b.dtype == OMMGRAPH_COMM_FLOAT64 ? MPI_DOUBLE : MPI_FLOAT, &d.rowType);
            if (rc == MPI_SUCCESS)
                rc = MPI_Type_commit(&d.rowType);
            if (rc != MPI_SUCCESS)
                return fail(message, messageSize, kMpi, what + ": " + mpiError("MPI_Type_contiguous", rc));
            d.rowTypeDType = b.dtype;
            d.rowTypeFeatures = b.numFeatures;
        }
        if (b.deviceType == OMMGRAPH_COMM_DEVICE_CUDA)
            return exchangeCuda(d, b, reverse, message, messageSize);
        return b.dtype == OMMGRAPH_COMM_FLOAT64
                   ? exchangeHost(d, static_cast<double*>(b.data), b.rowStride, b.numFeatures, reverse, message, messageSize)
                   : exchangeHost(d, static_cast<float*>(b.data), b.rowStride, b.numFeatures, reverse, message, messageSize);
    }
    catch (const std::exception& error) {
        return fail(message, messageSize, kInternal, d.name + ": " + direction + ": unexpected error: " + error.what());
    }
    catch (...) {
        return fail(message, messageSize, kInternal, d.name + ": " + direction + ": unexpected error");
    }
}

int forwardCallback(void* userData, const OMMGraphCommBuffer* buffer, char* message, std::size_t messageSize) {
    return exchange(userData, buffer, message, messageSize, false);
}

int reverseCallback(void* userData, const OMMGraphCommBuffer* buffer, char* message, std::size_t messageSize) {
    return exchange(userData, buffer, message, messageSize, true);
}

/** Displacements of counts (prefix sums); false if the total exceeds INT_MAX. */
bool displacements(const std::vector<int64_t>& counts, std::vector<int>* ints, std::vector<int>* displs, int64_t* total) {
    ints->resize(counts.size());
    displs->resize(counts.size());
    int64_t sum = 0;
    for (std::size_t r = 0; r < counts.size(); r++) {
        (*displs)[r] = static_cast<int>(std::min<int64_t>(sum, INT_MAX));
        (*ints)[r] = static_cast<int>(std::min<int64_t>(counts[r], INT_MAX));
        sum += counts[r];
    }
    *total = sum;
    return sum <= INT_MAX;
}

int create(int64_t numOwned, int64_t numGhost, const int32_t* ghostOwnerRank, const int64_t* ghostOwnerRow, int64_t* handle, char* message,
           std::size_t messageSize) {
    const std::string what = "ommgraph_mpi_communicator_create";
    if (int code = checkMpiReady(what.c_str(), message, messageSize))
        return code;
    std::unique_ptr<Domain> domain(new Domain());
    Domain& d = *domain;
    int rc = duplicateWorld(&d.comm, what);
    if (rc != MPI_SUCCESS)
        return fail(message, messageSize, kMpi, what + ": " + mpiError("MPI_Comm_idup", rc));
    MPI_Comm_set_errhandler(d.comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(d.comm, &d.rank);
    MPI_Comm_size(d.comm, &d.size);
    d.name = "MPI rank " + std::to_string(d.rank) + " of " + std::to_string(d.size);
    const std::string where = what + " (" + d.name + ")";

    // Local checks of the arguments.
    int localCode = kOk;
    auto localFail = [&](const std::string& text) {
        if (localCode == kOk)
            localCode = fail(message, messageSize, kArgument, where + ": " + text);
    };
    if (!handle)
        localFail("handle is NULL");
    if (numOwned < 0)
        localFail("numOwned is " + std::to_string(numOwned));
    if (numGhost < 0)
        localFail("numGhost is " + std::to_string(numGhost));
    if (numGhost > 0 && (!ghostOwnerRank || !ghostOwnerRow))
        localFail(std::string(ghostOwnerRank ? "ghostOwnerRow" : "ghostOwnerRank") + " is NULL with " + std::to_string(numGhost) + " ghosts");
    if (numGhost > INT_MAX)
        localFail("numGhost is " + std::to_string(numGhost) + ", more than MPI's int counts allow");
    if (localCode == kOk)
        for (int64_t g = 0; g < numGhost; g++)
            if (ghostOwnerRank[g] < 0 || ghostOwnerRank[g] >= d.size) {
                localFail("ghost " + std::to_string(g) + " has owner rank " + std::to_string(ghostOwnerRank[g]) + ", not in [0, " +
                          std::to_string(d.size) + ")");
                break;
            }
    // Every rank's numOwned, then the rows.
    std::vector<int64_t> ownedOf(static_cast<std::size_t>(d.size));
    const int64_t myOwned = numOwned;
    rc = MPI_Allgather(&myOwned, 1, MPI_INT64_T, ownedOf.data(), 1, MPI_INT64_T, d.comm);
    if (rc != MPI_SUCCESS)
        return fail(message, messageSize, kMpi, where + ": " + mpiError("MPI_Allgather", rc));
    if (localCode == kOk)
        for (int64_t g = 0; g < numGhost; g++) {
            const int64_t row = ghostOwnerRow[g], owners = ownedOf[static_cast<std::size_t>(ghostOwnerRank[g])];
            if (row < 0 || row >= owners) {
                localFail("ghost " + std::to_string(g) + " copies row " + std::to_string(row) + " of rank " + std::to_string(ghostOwnerRank[g]) +
                          ", which owns " + std::to_string(owners) + " rows");
                break;
            }
        }
    if (int code = agreeOnFailure(d.comm, d.rank, d.size, localCode != kOk, localCode, message, messageSize, where))
        return code;

    // My ghosts grouped by owner rank (stable: ascending within a rank), and the owner rows they copy.
    std::vector<int64_t> recvCount(static_cast<std::size_t>(d.size), 0), sendCount(static_cast<std::size_t>(d.size), 0);
    for (int64_t g = 0; g < numGhost; g++)
        recvCount[static_cast<std::size_t>(ghostOwnerRank[g])]++;
    d.numOwned = numOwned;
    d.numGhost = numGhost;
    bool fits = displacements(recvCount, &d.recvCounts, &d.recvDispls, &d.totalRecv);
    d.recvGhosts.resize(static_cast<std::size_t>(numGhost));
    std::vector<int64_t> wantedRows(static_cast<std::size_t>(numGhost));
    {
        std::vector<int64_t> next(d.recvDispls.begin(), d.recvDispls.end());
        for (int64_t g = 0; g < numGhost; g++) {
            const std::size_t r = static_cast<std::size_t>(ghostOwnerRank[g]);
            d.recvGhosts[static_cast<std::size_t>(next[r])] = g;
            wantedRows[static_cast<std::size_t>(next[r])] = ghostOwnerRow[g];
            next[r]++;
        }
    }
    rc = MPI_Alltoall(recvCount.data(), 1, MPI_INT64_T, sendCount.data(), 1, MPI_INT64_T, d.comm);
    if (rc != MPI_SUCCESS)
        return fail(message, messageSize, kMpi, where + ": " + mpiError("MPI_Alltoall", rc));
    fits = displacements(sendCount, &d.sendCounts, &d.sendDispls, &d.totalSend) && fits;
    if (!fits)
        fail(message, messageSize, kArgument, where + ": more than INT_MAX rows to exchange with one rank");
    if (int code = agreeOnFailure(d.comm, d.rank, d.size, !fits, kArgument, message, messageSize, where))
        return code;
    d.sendRows.resize(static_cast<std::size_t>(d.totalSend));
    rc = MPI_Alltoallv(wantedRows.data(), d.recvCounts.data(), d.recvDispls.data(), MPI_INT64_T, d.sendRows.data(), d.sendCounts.data(),
                       d.sendDispls.data(), MPI_INT64_T, d.comm);
    if (rc != MPI_SUCCESS)
        return fail(message, messageSize, kMpi, where + ": " + mpiError("MPI_Alltoallv", rc));

    OMMGraphCommunicator communicator = {};
    communicator.version = OMMGRAPH_COMMUNICATOR_VERSION;
    communicator.deviceTypes = OMMGRAPH_COMM_SUPPORTS_CPU | OMMGRAPH_COMM_SUPPORTS_CUDA;
    communicator.name = d.name.c_str();
    communicator.userData = domain.get();
    communicator.forward = forwardCallback;
    communicator.reverse = reverseCallback;
    communicator.release = releaseDomain;
    int64_t newHandle = 0;
    if (ommgraph_communicator_register(&communicator, &newHandle) != OMMGRAPH_COMM_OK)
        return fail(message, messageSize, kInternal, where + ": " + ommgraph_communicator_last_error());
    domain.release(); // owned by the registry now: releaseDomain deletes it
    {
        std::lock_guard<std::mutex> lock(handlesMutex);
        ourHandles.insert(newHandle);
    }
    *handle = newHandle;
    return fail(message, messageSize, kOk, "");
}

} // namespace

extern "C" {

OMMGRAPH_MPI_EXPORT int ommgraph_mpi_communicator_create(int64_t numOwned, int64_t numGhost, const int32_t* ghostOwnerRank,
                                                         const int64_t* ghostOwnerRow, int64_t* handle, char* message,
                                                         std::size_t messageSize) {
    try {
        return create(numOwned, numGhost, ghostOwnerRank, ghostOwnerRow, handle, message, messageSize);
    }
    catch (const std::exception& error) {
        return fail(message, messageSize, kInternal, std::string("ommgraph_mpi_communicator_create: unexpected error: ") + error.what());
    }
    catch (...) {
        return fail(message, messageSize, kInternal, "ommgraph_mpi_communicator_create: unexpected error");
    }
}

OMMGRAPH_MPI_EXPORT int ommgraph_mpi_communicator_destroy(int64_t handle, char* message, std::size_t messageSize) {
    try {
        {
            std::lock_guard<std::mutex> lock(handlesMutex);
            if (ourHandles.erase(handle) == 0)
                return fail(message, messageSize, kArgument,
                            "ommgraph_mpi_communicator_destroy: handle " + std::to_string(handle) +
                                " was not made by ommgraph_mpi_communicator_create (or is already destroyed)");
        }
        if (ommgraph_communicator_unregister(handle) != OMMGRAPH_COMM_OK)
            return fail(message, messageSize, kInternal, std::string("ommgraph_mpi_communicator_destroy: ") + ommgraph_communicator_last_error());
        return fail(message, messageSize, kOk, "");
    }
    catch (...) {
        return fail(message, messageSize, kInternal, "ommgraph_mpi_communicator_destroy: unexpected error");
    }
}

} // extern "C"
