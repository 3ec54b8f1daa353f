#ifndef OPENMM_GRAPH_CUDA_PEER_COPY_STREAM_H_
#define OPENMM_GRAPH_CUDA_PEER_COPY_STREAM_H_

#include "openmm/cuda/CudaContext.h"
#include <cuda.h>

namespace GraphPlugin {

/**
 * Copies into one device's memory from other devices that do not serialise
 * the devices' evaluations.
 *
 * OpenMM runs every CudaContext on the legacy default stream, and a peer copy
 * on that stream does not start until all work issued before it to either
 * device is done, and holds back all work issued after it to either device
 * (CUDA C++ Programming Guide, "Peer-to-Peer Memory Copy").  The devices'
 * worker threads enqueue their evaluations at the same time, so such a copy
 * made one device wait for the whole evaluation another device had already
 * enqueued: two GPUs ran at 0.7-0.9 of one GPU's time instead of 0.5.
 *
 * Here the copies run on a non-blocking stream of the destination context,
 * ordered by events alone:
 *
 *     begin(stream);            // the copies follow the work enqueued on stream so far
 *     waitFor(ownerEvent);      // ... and an event of another context (optional)
 *     copy(dst, src, ...);      // any number, in order
 *     end(stream);              // stream's later work follows the copies
 *
 * Not for use inside a captured CUDA graph.  Host-side only: nothing waits on
 * the host.
 */
class CudaPeerCopyStream {
public:
    /** @param cu the destination device's context */
    explicit CudaPeerCopyStream(OpenMM::CudaContext& cu);
    ~CudaPeerCopyStream();
    CudaPeerCopyStream(const CudaPeerCopyStream&) = delete;
    CudaPeerCopyStream& operator=(const CudaPeerCopyStream&) = delete;
    /** The copies that follow run after the work enqueued on `stream` (of the destination context) so far. */
    void begin(CUstream stream);
    /** ... and after `event`, recorded in any context. */
    void waitFor(CUevent event);
    /** Enqueue a copy of `bytes` bytes from `source` (memory of `sourceContext`) to `destination` (this context's). */
    void copy(CUdeviceptr destination, CUdeviceptr source, CUcontext sourceContext, size_t bytes);
    /** `stream`'s work enqueued after this call runs after the copies. */
    void end(CUstream stream);

private:
    OpenMM::CudaContext& cu;
    CUstream copyStream = nullptr;
    CUevent started = nullptr, finished = nullptr;
};

} // namespace GraphPlugin

#endif
