/**
 * The weight stream of the one-block fused fitting network
 * (FusedNetworkKernels.cu): every weight matrix the kernel multiplies by, in
 * the order it multiplies them (forward: W^T of hidden layers 0..L-1;
 * backward: W of hidden layers L-1..0), as one sequence of slices through
 * FusedStages stages of shared memory.  Slice g lands in stage
 * g % FusedStages while the block works on slice g - FusedStages + 1, so
 * FusedStages - 1 slices are in flight at all times: the stream does not
 * drain at the end of a product and refill at the start of the next (the
 * per-product pipelines of sessions 10-12 exposed a full L2 round trip at
 * each of the small grade's 6 products), and the first slices load while
 * the tile's moments and descriptor do.
 *
 * Copies: on sm_90 and later, one bulk copy (TMA, cp.async.bulk) per slice
 * issued by thread 0, its bytes counted by the stage's mbarrier (bench/
 * NOTES.md v12: a block streams 18 bytes per clock this way against 14 with
 * 16-byte cp.async); before sm_90, 16-byte cp.async by every thread, one
 * commit group per slice.
 */

#ifndef GRAPH_FUSED_WEIGHT_STREAM_CUH
#define GRAPH_FUSED_WEIGHT_STREAM_CUH

#include "GraphKernelLaunch.h"
#include <cuda_pipeline.h>

namespace GraphPlugin {

/**
 * Rows of a weight matrix of ldb (padded) columns per slice of stageElements
 * reals: a multiple of 4 (aligned 4-k reads of the rows' inputs), at least 4
 * (the host sizes the stages for 4 rows of the widest matrix), at most 64.
 */
__device__ inline int fusedSliceRows(int ldb, int stageElements) {
    return max(4, min(64, stageElements / ldb) / 4 * 4);
}

/**
 * Streams the block's weights.  Construct with the same arguments in every
 * thread, call start() once (all threads, before any other use; it must be
 * followed by a __syncthreads before the first acquire), then acquire the
 * slices of each product in order.  All threads take part in every call.
 */
template <typename real> class FusedWeightStream {
public:
    /**
     * net: the tile's type's weights (device); stage: FusedStages x
     * stageElements reals of shared memory; barriers: FusedStages mbarriers in
     * shared memory (sm_90 and later); products: the first `products` of the
     * 2 L products are streamed (L without forces).
     */
    __device__ FusedWeightStream(const FusedNetworkWeights<real>& net, const FusedNetworkShape& shape, real* stage,
                                 unsigned long long* barriers, int products)
        : net(net), shape(shape), stage(stage), barriers(barriers), products(products) {}

    /** Initialises the barriers and issues the first FusedStages - 1 slices. */
    __device__ void start() {
#if __CUDA_ARCH__ >= 900
        if (threadIdx.x == 0) {
            for (int s = 0; s < FusedStages; s++)
                asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(sharedAddress(&barriers[s])) : "memory");
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        }
#endif
        for (int s = 0; s < FusedStages - 1; s++)
            issue();
    }

    /** Rows per slice of the product of K rows and ldb (padded) columns: K when it fits one slice. */
    __device__ int sliceRows(int K, int ldb) const {
        return min(K, fusedSliceRows(ldb, shape.stageElements));
    }

    /**
     * The next slice of the current product, once it has landed (shared
     * memory, sliceRows rows of ldb reals); the stage the block read before
     * it is refilled with the slice FusedStages - 1 further on.
     */
    __device__ const real* acquire(int /*slice*/) {
        const int g = consumed++;
#if __CUDA_ARCH__ >= 900
        const unsigned barrier = sharedAddress(&barriers[g % FusedStages]), parity = (g / FusedStages) & 1;
        unsigned done = 0;
        while (!done)
            asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
                         : "=r"(done)
                         : "r"(barrier), "r"(parity)
                         : "memory");
#else
        __pipeline_wait_prior(FusedStages - 2); // slice g has landed (this thread's copies) ...
#endif
        __syncthreads(); // ... everyone's; and everyone is done with the stage of slice g - 1
        issue();
        return stage + (g % FusedStages) * shape.stageElements;
    }

private:
    static __device__ unsigned sharedAddress(const void* p) {
        return (unsigned) __cvta_generic_to_shared(p);
    }

    /** Product p: its matrix (device), rows and padded columns. */
    __device__ void productShape(int p, const real*& B, int& K, int& ldb) const {
        const int L = shape.numLayers;
        if (p < L) {
            B = net.forward[p];
            K = shape.width[p];
            ldb = fusedPadded<real>(shape.width[p + 1]);
        }
        else {
            const int l = 2 * L - 1 - p;
            B = net.backward[l];
            K = shape.width[l + 1];
            ldb = fusedPadded<real>(shape.width[l]);
        }
    }

    /** Issues the next slice of the sequence into its stage (nothing past the end; before sm_90 an empty commit group). */
    __device__ void issue() {
        if (product < products) {
            const real* B;
            int K, ldb;
            productShape(product, B, K, ldb);
            const int rows = sliceRows(K, ldb), first = slice * rows, count = min(rows, K - first);
            const real* src = B + (size_t) first * ldb;
            const int g = issued++;
            real* dst = stage + (g % FusedStages) * shape.stageElements;
#if __CUDA_ARCH__ >= 900
            if (threadIdx.x == 0) {
                const unsigned barrier = sharedAddress(&barriers[g % FusedStages]), bytes = (unsigned) (count * ldb * sizeof(real));
                asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(barrier), "r"(bytes) : "memory");
                asm volatile(
                    "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(sharedAddress(dst)),
                    "l"(src), "r"(bytes), "r"(barrier)
                    : "memory");
            }
#else
            constexpr int V = fusedVector<real>();
            for (int e = threadIdx.x * V; e < count * ldb; e += FusedThreads * V)
                __pipeline_memcpy_async(dst + e, src + e, 16);
#endif
            if (first + count >= K) {
                product++;
                slice = 0;
            }
            else
                slice++;
        }
#if __CUDA_ARCH__ < 900
        __pipeline_commit();
#endif
    }

    const FusedNetworkWeights<real>& net;
    const FusedNetworkShape& shape;
    real* stage;
    unsigned long long* barriers;
    const int products;
    int product = 0, slice = 0; ///< the next slice to issue: slice `slice` of product `product`
    int issued = 0, consumed = 0;
};

/** A weight matrix already in shared memory (all K rows), read in place as one slice. */
template <typename real> struct ResidentWeights {
    const real* B;
    __device__ int sliceRows(int K, int) const {
        return K;
    }
    __device__ const real* acquire(int) const {
        return B;
    }
};

} // namespace GraphPlugin

#endif
