#include "ManagedView.h"
#include <utility>

using namespace GraphPlugin;

std::atomic<int64_t> ManagedView::live(0);

ManagedView::ManagedView(StateView&& view, void* owner, OMMGraphReleaseOwner releaseOwner)
    : layout(view.layout), owned(std::move(view.owned)), owner(owner), releaseOwner(releaseOwner) {
    live.fetch_add(1, std::memory_order_relaxed);
}

ManagedView::~ManagedView() {
    // The copy first: freeing device memory needs the Context that the owner keeps alive.
    owned.reset();
    if (releaseOwner != nullptr)
        releaseOwner(owner);
    live.fetch_sub(1, std::memory_order_relaxed);
}

DLTensor ManagedView::makeTensor() {
    return dlTensorOf(layout, shape, strides);
}

DLManagedTensorVersioned* ManagedView::createVersioned(StateView&& view, uint64_t flags, void* owner, OMMGraphReleaseOwner releaseOwner) {
    ManagedView* managed = new ManagedView(std::move(view), owner, releaseOwner);
    managed->versioned.version = DLPackVersion{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
    managed->versioned.manager_ctx = managed;
    managed->versioned.deleter = deleteVersioned;
    managed->versioned.flags = flags;
    managed->versioned.dl_tensor = managed->makeTensor();
    return &managed->versioned;
}

DLManagedTensor* ManagedView::createLegacy(StateView&& view, void* owner, OMMGraphReleaseOwner releaseOwner) {
    ManagedView* managed = new ManagedView(std::move(view), owner, releaseOwner);
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
