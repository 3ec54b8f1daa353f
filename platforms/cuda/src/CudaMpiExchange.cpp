#include "CudaMpiExchange.h"
#include "CudaGraphErrors.h"
#include <cstring>

using namespace GraphPlugin;

CudaMpiExchange::CudaMpiExchange(const ReferenceMpiDomains& domains, const std::vector<int>& first, const std::vector<int>& count, int n)
    : domains(domains), first(first), count(count), n(n) {}

CudaMpiExchange::~CudaMpiExchange() {
    if (staging != nullptr)
        cuMemFreeHost(staging);
}

void CudaMpiExchange::attach(int domain, Point point, CUdeviceptr array, size_t bytesPerNode) {
    slots[point].array = array;
    slots[point].bytesPerNode = bytesPerNode;
    const size_t bytes = ((size_t) n * bytesPerNode + 7) / 8 * 8;
    if (bytes > stagingBytes) {
        // attach() runs while the pipeline is created, with its context current.
        if (staging != nullptr)
            GRAPH_CU_CHECK(cuMemFreeHost(staging));
        staging = nullptr;
        GRAPH_CU_CHECK(cuMemHostAlloc((void**) &staging, bytes, 0));
        stagingBytes = bytes;
    }
}

void CudaMpiExchange::allGather(int domain, Point point, CUstream stream) {
    const Slot& slot = slots[point];
    const size_t total = (size_t) n * slot.bytesPerNode, wordBytes = (total + 7) / 8 * 8;
    const size_t offset = (size_t) first[domain] * slot.bytesPerNode, own = (size_t) count[domain] * slot.bytesPerNode;
    // This rank's rows in place, zeros elsewhere; then the integer sum over the ranks is the union of their rows.
    std::memset(staging, 0, wordBytes);
    if (own > 0) {
        GRAPH_CU_CHECK(cuMemcpyDtoHAsync(staging + offset, slot.array + offset, own, stream));
        GRAPH_CU_CHECK(cuStreamSynchronize(stream));
    }
    words.resize(wordBytes / 8);
    std::memcpy(words.data(), staging, wordBytes);
    domains.sumInt64(words);
    std::memcpy(staging, words.data(), wordBytes);
    // Back to the device: the other ranks' rows (this rank's come back unchanged).
    GRAPH_CU_CHECK(cuMemcpyHtoDAsync(slot.array, staging, total, stream));
    GRAPH_CU_CHECK(cuStreamSynchronize(stream)); // the staging buffer is reused by the next point
}

bool CudaMpiExchange::allOf(int domain, bool value) {
    std::vector<int64_t> flag = {value ? 0 : 1};
    domains.sumInt64(flag);
    return flag[0] == 0;
}
