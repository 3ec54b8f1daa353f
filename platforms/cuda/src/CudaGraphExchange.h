#ifndef OPENMM_GRAPH_CUDA_GRAPH_EXCHANGE_H_
#define OPENMM_GRAPH_CUDA_GRAPH_EXCHANGE_H_

#include <cstddef>
#include <cuda.h>

namespace GraphPlugin {

/**
 * The `communicate` operation of the native interaction block between
 * domains: the devices of one Context (CudaPeerExchange, docs/multi-gpu.md)
 * or MPI ranks (CudaMpiExchange, docs/mpi.md).  Every device's pipeline owns
 * per-node arrays of the whole force ([n][width], device memory of its own
 * context) but computes only the rows of its centers [first, first + count);
 * an exchange point makes every other domain's rows current.  Two points per
 * evaluation: the node features phi after the node network (forward), and
 * dE/dB after the fitting network's backward (so that each device can sum
 * dE/dphi of its own nodes over their rows).  Every device calls the points
 * of an evaluation in the same order, each from its own host thread.
 */
class CudaGraphExchange {
public:
    enum Point { NodeFeatures = 0, InteractionMomentGradients = 1, NumPoints = 2 };
    virtual ~CudaGraphExchange() {}
    /** At pipeline creation: the device array of a point (bytesPerNode bytes per node) of domain `domain`. */
    virtual void attach(int domain, Point point, CUdeviceptr array, size_t bytesPerNode) = 0;
    /**
     * Enqueue on `stream` (domain's context current, after the work that wrote its own rows): fill the rows of
     * every other domain's centers in this domain's array from their owners (between devices without waiting for
     * them: the host threads meet once, so every owner's rows are enqueued first; between ranks through MPI).
     */
    virtual void allGather(int domain, Point point, CUstream stream) = 0;
    /** Whether `value` holds on every domain (a meeting of the host threads; for repeated evaluations after an overflow). */
    virtual bool allOf(int domain, bool value) = 0;
};

} // namespace GraphPlugin

#endif
