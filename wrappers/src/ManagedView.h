#ifndef OPENMM_GRAPH_MANAGED_VIEW_H_
#define OPENMM_GRAPH_MANAGED_VIEW_H_

#include "OpenMMGraphDLPack.h"
#include "StateView.h"
#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>

namespace GraphPlugin {

/**
 * The manager_ctx of every tensor this library makes: one allocation that
 * holds the DLPack struct handed out, its shape and strides, the memory the
 * view owns (a copy, the box) and the owner that keeps the Context alive.
 * The deleter frees it all exactly once, then calls releaseOwner(owner).
 *
 * A tensor whose memory Context::reinitialize() frees is also counted per
 * Context and view until its deleter runs: a zero-copy view (OpenMM's own
 * arrays) and a device copy (allocated in the CUDA context OpenMM creates for
 * the Context, which reinitialize() destroys).  Bindings ask liveCountOf()
 * first and refuse the reinitialize while any is alive.
 */
class ManagedView {
public:
    /**
     * Where a tensor's data lives: the Context (an OpenMM::Context*) and view
     * number it was made from, or {nullptr, -1} for a borrowed tensor.
     */
    struct Source {
        const void* context = nullptr;
        int view = -1;
    };
    /** A DLPack 1.1 tensor of `view`; flags: DLPACK_FLAG_BITMASK_* (READ_ONLY, IS_COPIED). */
    static DLManagedTensorVersioned* createVersioned(StateView&& view, Source source, uint64_t flags, void* owner,
                                                     OMMGraphReleaseOwner releaseOwner);
    /** A legacy tensor of `view` (no flags: the consumer cannot be told about read-only or copied data). */
    static DLManagedTensor* createLegacy(StateView&& view, Source source, void* owner, OMMGraphReleaseOwner releaseOwner);
    /** The number of tensors whose deleter has not run yet. */
    static int64_t liveCount();
    /**
     * The number of tensors of `context` (an OpenMM::Context*) and `view` (0
     * to numViewKinds - 1, or -1 for every view) whose deleter has not run yet
     * and whose memory reinitialize() frees (zero-copy views, device copies).
     */
    static int64_t liveCountOf(const void* context, int view);

    /** The number of view kinds (POSITIONS to BOX). */
    static constexpr int numViewKinds = 6;

private:
    using ViewCounts = std::array<int64_t, numViewKinds>;
    ManagedView(StateView&& view, Source source, void* owner, OMMGraphReleaseOwner releaseOwner);
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
    Source pointsInto; ///< {nullptr, -1} unless the data dies with the Context's memory (counted)
    static std::atomic<int64_t> live;
    static std::mutex countsLock;
    static std::map<const void*, ViewCounts> countsByContext; ///< counted tensors alive, per Context and view
};

} // namespace GraphPlugin

#endif
