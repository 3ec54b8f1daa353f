#include "CudaPeerExchange.h"
#include "CudaGraphErrors.h"
#include "openmm/OpenMMException.h"
#include "openmm/common/ContextSelector.h"

using namespace GraphPlugin;
using namespace OpenMM;

CudaPeerExchange::CudaPeerExchange(const std::vector<CudaContext*>& contexts, const std::vector<int>& first, const std::vector<int>& count)
    : contexts(contexts), first(first), count(count), slots(contexts.size()) {
    for (size_t d = 0; d < contexts.size(); d++) {
        ContextSelector selector(*contexts[d]);
        pulls.emplace_back(new CudaPeerCopyStream(*contexts[d]));
        for (Slot& slot : slots[d])
            GRAPH_CU_CHECK(cuEventCreate(&slot.written, CU_EVENT_DISABLE_TIMING));
    }
}

CudaPeerExchange::~CudaPeerExchange() {
    for (size_t d = 0; d < contexts.size(); d++) {
        ContextSelector selector(*contexts[d]);
        for (Slot& slot : slots[d])
            if (slot.written != nullptr)
                cuEventDestroy(slot.written);
    }
}

void CudaPeerExchange::attach(int domain, Point point, CUdeviceptr array, size_t bytesPerNode) {
    slots[domain][point].array = array;
    slots[domain][point].bytesPerNode = bytesPerNode;
}

void CudaPeerExchange::allGather(int domain, Point point, CUstream stream) {
    const Slot& own = slots[domain][point];
    GRAPH_CU_CHECK(cuEventRecord(own.written, stream));
    meet(true); // every owner's event of this point is recorded
    CudaPeerCopyStream& pull = *pulls[domain];
    pull.begin(stream); // after this domain's own work (which may still use the rows being replaced)
    for (size_t e = 0; e < slots.size(); e++) {
        if ((int) e == domain || count[e] == 0)
            continue;
        const Slot& owner = slots[e][point];
        if (owner.array == 0 || owner.bytesPerNode != own.bytesPerNode)
            throw OpenMMException("GraphForce: internal error: the devices' exchange arrays do not match");
        pull.waitFor(owner.written);
        const size_t offset = (size_t) first[e] * own.bytesPerNode;
        pull.copy(own.array + offset, owner.array + offset, contexts[e]->getContext(), (size_t) count[e] * own.bytesPerNode);
    }
    pull.end(stream);
}

bool CudaPeerExchange::allOf(int domain, bool value) {
    return meet(value);
}

bool CudaPeerExchange::wasAborted() {
    std::lock_guard<std::mutex> lock(mutex);
    return aborted;
}

void CudaPeerExchange::reset() {
    std::lock_guard<std::mutex> lock(mutex);
    aborted = false;
    arrived = 0;
    vote = true;
}

void CudaPeerExchange::abort(const std::string& error) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!aborted)
        failure = error;
    aborted = true;
    arrivedAll.notify_all();
}

bool CudaPeerExchange::meet(bool value) {
    std::unique_lock<std::mutex> lock(mutex);
    if (aborted)
        throw OpenMMException(failure);
    const long long mine = generation;
    vote = vote && value;
    if (++arrived == (int) contexts.size()) {
        arrived = 0;
        result = vote;
        vote = true;
        generation++;
        arrivedAll.notify_all();
        return result;
    }
    arrivedAll.wait(lock, [&] { return generation != mine || aborted; });
    if (generation == mine)
        throw OpenMMException(failure);
    return result;
}
