#ifndef OPENMM_GRAPH_CUDA_PEER_EXCHANGE_H_
#define OPENMM_GRAPH_CUDA_PEER_EXCHANGE_H_

#include "CudaGraphExchange.h"
#include "CudaPeerCopyStream.h"
#include "openmm/cuda/CudaContext.h"
#include <array>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace GraphPlugin {

/**
 * CudaGraphExchange between the devices of one multi-device Context, by peer
 * copies (cuMemcpyPeerAsync: NVLink or PCIe, staged by the driver where the
 * devices cannot reach each other).  Each device pulls the other domains'
 * rows into its own array on its own copy stream (CudaPeerCopyStream: not
 * OpenMM's legacy stream, where a peer copy would serialise the devices),
 * after waiting (on the device, cuStreamWaitEvent) for its own stream's work
 * so far and for the event its owner recorded when the rows were written; its
 * stream then waits for the pulls.  The host threads of the domains meet once
 * per point, so that every owner's event is recorded before anyone waits on
 * it; no host thread waits for a device.
 *
 * The host meeting also serves as a barrier: meet() via allOf(), with the
 * same abort semantics (CudaParallelCalcGraphForceKernel meets before each
 * evaluation is enqueued).
 *
 * Ordering (why no copy reads rows that are being rewritten): within an
 * evaluation with forces, a domain rewrites its rows of one point only after
 * its stream has waited for every other domain's event of a later point,
 * which those domains recorded after their pulls of the earlier one.  Between
 * evaluations (and in one without forces, which has a single point), every
 * device's status check waits for its stream in OpenMM's finishComputation
 * and OpenMM joins the worker threads before the next evaluation starts.
 *
 * If one domain's evaluation fails, abort() wakes the others, whose meetings
 * then throw, so a failure is an OpenMMException and never a hang.
 */
class CudaPeerExchange : public CudaGraphExchange {
public:
    /**
     * @param contexts [domains] the context of each domain
     * @param first    [domains] the first center of each domain (force order)
     * @param count    [domains] the number of centers of each domain
     */
    CudaPeerExchange(const std::vector<OpenMM::CudaContext*>& contexts, const std::vector<int>& first, const std::vector<int>& count);
    ~CudaPeerExchange();
    void attach(int domain, Point point, CUdeviceptr array, size_t bytesPerNode) override;
    void allGather(int domain, Point point, CUstream stream) override;
    bool allOf(int domain, bool value) override;
    /** Whether an evaluation was aborted since the last reset(). */
    bool wasAborted();
    /**
     * After an aborted evaluation, once every worker thread has finished its tasks (main thread): forget the abort.
     */
    void reset();
    /** A domain's task failed with `error`: the other domains' meetings throw it instead of waiting. */
    void abort(const std::string& error);

private:
    /** All domains' host threads meet; returns whether `value` held on all.  Throws after abort(). */
    bool meet(bool value);

    struct Slot {
        CUdeviceptr array = 0;
        size_t bytesPerNode = 0;
        CUevent written = nullptr; ///< recorded on the owner's stream after it wrote its rows (owner's context)
    };
    std::vector<OpenMM::CudaContext*> contexts;
    std::vector<int> first, count;
    std::vector<std::array<Slot, NumPoints>> slots;         ///< [domain][point]
    std::vector<std::unique_ptr<CudaPeerCopyStream>> pulls; ///< [domain] the stream of the domain's pulls
    std::mutex mutex;
    std::condition_variable arrivedAll;
    int arrived = 0;
    long long generation = 0;
    bool aborted = false, vote = true, result = true;
    std::string failure; ///< the error of the domain that aborted
};

} // namespace GraphPlugin

#endif
