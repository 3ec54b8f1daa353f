#include "CudaMpiExchange.h"
#include "CudaGraphErrors.h"
#include "openmm/OpenMMException.h"
#include <cstring>

using namespace GraphPlugin;

CudaMpiExchange::CudaMpiExchange(const ReferenceMpiDomains& domains, const std::vector<int>& first, const std::vector<int>& count, int n)
    : domains(domains), first(first), count(count), n(n) {}

void CudaMpiExchange::attach(int domain, Point point, CUdeviceptr array, size_t bytesPerNode) {
    slots[point].array = array;
    slots[point].bytesPerNode = bytesPerNode;
}

void CudaMpiExchange::allGather(int domain, Point point, CUstream stream) {
    const Slot& slot = slots[point];
    const size_t total = (size_t) n * slot.bytesPerNode, numWords = (total + 7) / 8;
    const size_t offset = (size_t) first[domain] * slot.bytesPerNode, own = (size_t) count[domain] * slot.bytesPerNode;
    // This rank's rows in place, zeros elsewhere; then the integer sum over the ranks is the union of their rows.  A
    // rank that could not stage its rows still joins the sum (sumAgreed's error word), and all of them throw.
    words.reserve(numWords + 1);
    words.assign(numWords, 0);
    joined[point] = true;
    std::string failure;
    if (own > 0) {
        try {
            GRAPH_CU_CHECK(cuMemcpyDtoHAsync(reinterpret_cast<unsigned char*>(words.data()) + offset, slot.array + offset, own, stream));
            GRAPH_CU_CHECK(cuStreamSynchronize(stream));
        }
        catch (const std::exception& error) {
            failure = error.what();
        }
    }
    domains.sumAgreed(words, failure);
    if (injectedFailure && point == NodeFeatures)
        throw injectedFailureError(domain, "exchange");
    // Back to the device: the other ranks' rows (this rank's come back unchanged).  Synchronous: the host buffer is
    // reused by the next point.
    GRAPH_CU_CHECK(cuMemcpyHtoDAsync(slot.array, words.data(), total, stream));
    GRAPH_CU_CHECK(cuStreamSynchronize(stream));
}

bool CudaMpiExchange::allOf(int domain, bool value) {
    std::vector<int64_t> flag = {value ? 0 : 1};
    domains.sumInt64(flag);
    return flag[0] == 0;
}

void CudaMpiExchange::beginEvaluation(bool injectFailure) {
    joined.fill(false);
    injectedFailure = injectFailure;
}

void CudaMpiExchange::joinRemaining(bool includeForces, const std::string& failure) {
    if (n == 0)
        return; // an evaluation without particles reaches no point (CudaGraphPipeline returns before them)
    for (int point = 0; point < (includeForces ? NumPoints : 1); point++)
        if (!joined[point]) {
            joined[point] = true;
            try {
                words.assign(((size_t) n * slots[point].bytesPerNode + 7) / 8, 0);
                domains.sumAgreed(words, failure); // throws this rank's failure once every rank has joined
            }
            catch (const std::exception&) {
                // Expected: the evaluation's own error is what this rank reports, after the flag sum.
            }
        }
}

OpenMM::OpenMMException GraphPlugin::injectedFailureError(int rank, const std::string& where) {
    return OpenMM::OpenMMException(
        "GraphForce: Domains = \"mpi\": the failure injected by OMMGRAPH_MPI_TEST_FAILURE=" + std::to_string(rank) + ":" + where);
}
