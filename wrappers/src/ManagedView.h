#ifndef OPENMM_GRAPH_MANAGED_VIEW_H_
#define OPENMM_GRAPH_MANAGED_VIEW_H_

#include "OpenMMGraphDLPack.h"
#include "StateView.h"
#include <atomic>
#include <cstdint>

namespace GraphPlugin {

/**
 * The manager_ctx of every tensor this library makes: one allocation that
 * holds the DLPack struct handed out, its shape and strides, the memory the
 * view owns (a copy, the box) and the owner that keeps the Context alive.
 * The deleter frees it all exactly once, then calls releaseOwner(owner).
 */
class ManagedView {
public:
    /** A DLPack 1.1 tensor of `view`; flags: DLPACK_FLAG_BITMASK_* (READ_ONLY, IS_COPIED). */
    static DLManagedTensorVersioned* createVersioned(StateView&& view, uint64_t flags, void* owner, OMMGraphReleaseOwner releaseOwner);
    /** A legacy tensor of `view` (no flags: the consumer cannot be told about read-only or copied data). */
    static DLManagedTensor* createLegacy(StateView&& view, void* owner, OMMGraphReleaseOwner releaseOwner);
    /** The number of tensors whose deleter has not run yet. */
    static int64_t liveCount();

private:
    ManagedView(StateView&& view, void* owner, OMMGraphReleaseOwner releaseOwner);
    ~ManagedView();
    ManagedView(const ManagedView&) = delete;
    ManagedView& operator=(const ManagedView&) = delete;
    DLTensor makeTensor();
    static void deleteVersioned(DLManagedTensorVersioned* tensor);
    static void deleteLegacy(DLManagedTensor* tensor);

    DLManagedTensorVersioned versioned{};
    DLManagedTensor legacy{};
    OMMGraphViewDescriptor layout;
    int64_t shape[OMMGRAPH_VIEW_MAX_DIMS] = {};
    int64_t strides[OMMGRAPH_VIEW_MAX_DIMS] = {};
    OwnedBuffer owned;
    void* owner;
    OMMGraphReleaseOwner releaseOwner;
    static std::atomic<int64_t> live;
};

} // namespace GraphPlugin

#endif
