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
    // This rank's rows in place, zeros elsewhere; then the integer sum over the ranks is the union of their rows.  One
    // more word says whether a rank could not stage its rows: every rank still joins the sum, and all of them throw.
    words.assign(numWords + 1, 0);
    joined[point] = true;
    std::string failure;
    if (own > 0) {
        try {
            GRAPH_CU_CHECK(cuMemcpyDtoHAsync(reinterpret_cast<unsigned char*>(words.data()) + offset, slot.array + offset, own, stream));
            GRAPH_CU_CHECK(cuStreamSynchronize(stream));
        }
        catch (const std::exception& error) {
            failure = error.what();
            words.assign(numWords + 1, 0);
            words[numWords] = 1;
        }
    }
    domains.sumInt64(words);
    ReferenceMpiDomains::throwIfFailed(words[numWords], failure);
    if (injectedFailure && point == NodeFeatures)
        throw OpenMM::OpenMMException(
            "GraphForce: Domains = \"mpi\": the failure injected by OMMGRAPH_MPI_TEST_FAILURE=" + std::to_string(domain) + ":exchange");
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

void CudaMpiExchange::joinRemaining(bool includeForces) {
    if (n == 0)
        return; // an evaluation without particles reaches no point (CudaGraphPipeline returns before them)
    for (int point = 0; point < (includeForces ? NumPoints : 1); point++)
        if (!joined[point]) {
            joined[point] = true;
            const size_t numWords = ((size_t) n * slots[point].bytesPerNode + 7) / 8;
            try {
                words.assign(numWords + 1, 0);
                words[numWords] = 1;
                domains.sumInt64(words);
            }
            catch (const std::exception&) {
                // An MPI failure of the sum itself: the evaluation's own error is what this rank reports.
            }
        }
}
