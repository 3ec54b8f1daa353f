#include "ManagedView.h"
#include <utility>

using namespace GraphPlugin;

std::atomic<int64_t> ManagedView::live(0);
std::mutex ManagedView::countsLock;
std::map<const void*, ManagedView::ViewCounts> ManagedView::countsByContext;

ManagedView::ManagedView(StateView&& view, Source source, void* owner, OMMGraphReleaseOwner releaseOwner)
    : layout(view.layout), owned(std::move(view.owned)), owner(owner), releaseOwner(releaseOwner) {
    // OpenMM's memory, or a device copy: it lives in OpenMM's own CUDA context, which reinitialize() destroys.
    const bool dependsOnContext = owned.data() == nullptr || layout.deviceType == kDLCUDA;
    if (dependsOnContext && source.context != nullptr && source.view >= 0 && source.view < numViewKinds) {
        std::lock_guard<std::mutex> lock(countsLock);
        countsByContext[source.context][source.view]++; // may throw bad_alloc: nothing is counted yet
        pointsInto = source;
    }
    live.fetch_add(1, std::memory_order_relaxed);
}

ManagedView::~ManagedView() {
    // The copy first: freeing device memory needs the Context that the owner keeps alive.
    owned.reset();
    if (pointsInto.context != nullptr) {
        std::lock_guard<std::mutex> lock(countsLock);
        auto entry = countsByContext.find(pointsInto.context);
        if (entry != countsByContext.end()) {
            entry->second[pointsInto.view]--;
            bool none = true;
            for (int64_t count : entry->second)
                none = none && count == 0;
            if (none)
                countsByContext.erase(entry);
        }
    }
    if (releaseOwner != nullptr)
        releaseOwner(owner);
    live.fetch_sub(1, std::memory_order_relaxed);
}

DLTensor ManagedView::makeTensor() {
    return dlTensorOf(layout, shape, strides);
}

DLManagedTensorVersioned* ManagedView::createVersioned(StateView&& view, Source source, uint64_t flags, void* owner,
                                                       OMMGraphReleaseOwner releaseOwner) {
    ManagedView* managed = new ManagedView(std::move(view), source, owner, releaseOwner);
    managed->versioned.version = DLPackVersion{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
    managed->versioned.manager_ctx = managed;
    managed->versioned.deleter = deleteVersioned;
    managed->versioned.flags = flags;
    managed->versioned.dl_tensor = managed->makeTensor();
    return &managed->versioned;
}

DLManagedTensor* ManagedView::createLegacy(StateView&& view, Source source, void* owner, OMMGraphReleaseOwner releaseOwner) {
    ManagedView* managed = new ManagedView(std::move(view), source, owner, releaseOwner);
    managed->legacy.dl_tensor = managed->makeTensor();
    managed->legacy.manager_ctx = managed;
    managed->legacy.deleter = deleteLegacy;
    return &managed->legacy;
}

void ManagedView::deleteVersioned(DLManagedTensorVersioned* tensor) {
    if (tensor != nullptr)
        delete static_cast<ManagedView*>(tensor->manager_ctx);
}

void ManagedView::deleteLegacy(DLManagedTensor* tensor) {
    if (tensor != nullptr)
        delete static_cast<ManagedView*>(tensor->manager_ctx);
}

int64_t ManagedView::liveCount() {
    return live.load(std::memory_order_relaxed);
}

int64_t ManagedView::liveCountOf(const void* context, int view) {
    std::lock_guard<std::mutex> lock(countsLock);
    auto entry = countsByContext.find(context);
    if (entry == countsByContext.end())
        return 0;
    if (view >= 0)
        return entry->second[view];
    int64_t total = 0;
    for (int64_t count : entry->second)
        total += count;
    return total;
}
