/**
 * The dense product of the fused fitting networks (FusedNetworkKernels.cu,
 * one block per tile of rows; ClusterNetworkKernels.cu, a cluster of blocks
 * per tile, each with a slice of the columns): a tile's rows times a weight
 * matrix streamed through shared memory, k summed in order 0..K-1 with fma
 * as in the per-layer kernels, so that the results are bitwise theirs.
 */

#ifndef GRAPH_FUSED_PRODUCT_CUH
#define GRAPH_FUSED_PRODUCT_CUH

#include "GraphKernelLaunch.h"
#include <cuda_pipeline.h>

namespace GraphPlugin {

/**
 * out(r, c) = sum_k in[r][k] B[k][c] for the tile's R rows and C columns, k in
 * order 0..K-1 (fma), handed to epilogue(r, c, sum) for r < R, c < C.  B is
 * global [K][ldb] (ldb a multiple of the 16-byte vector, rows padded with
 * zeros), streamed through `stage` (FusedStages slices of sliceRows rows);
 * `in` is shared [R][inStride].  CT threads share a row: thread t holds
 * CPT x R / (FusedThreads / CT) sums, columns t % CT + CT j of rows
 * t / CT + (FusedThreads / CT) i; a warp's lanes share their rows (broadcast
 * reads of `in`) and read consecutive columns of B.  Begins and ends with the
 * block synchronised.  Resident: B is already in shared memory (all K rows;
 * `stage` unused), read in place as one slice.
 */
template <typename real, int R, int CT, int CPT, bool Resident = false, typename Epilogue>
__device__ inline void streamedProduct(const real* __restrict__ B, int K, int C, int ldb, const real* in, int inStride, real* stage,
                                       int stageElements, Epilogue epilogue) {
    constexpr int V = fusedVector<real>(), RS = FusedThreads / CT, RPT = R / RS; // RS: rows between a thread's rows
    static_assert(RPT >= 1 && R % RS == 0, "a tile's rows must cover the threads");
    const int c0 = threadIdx.x % CT, r0 = threadIdx.x / CT;
    // Rows of B per slice: a multiple of 4 (aligned 4-k reads of `in`), at least 4 (the host sizes the stages for it), at
    // most 64 rows of 128 columns' worth (more rows of narrower B).
    const int sliceRows = Resident ? K : max(4, min(64 * 128 / CT, stageElements / ldb) / 4 * 4);
    const int numSlices = Resident ? 1 : (K + sliceRows - 1) / sliceRows;
    auto issue = [&](int s) {
        if (s < numSlices) {
            const int first = s * sliceRows, count = min(sliceRows, K - first);
            const real* src = B + (size_t) first * ldb;
            real* dst = stage + (s % FusedStages) * stageElements;
            for (int e = threadIdx.x * V; e < count * ldb; e += FusedThreads * V)
                __pipeline_memcpy_async(dst + e, src + e, 16);
        }
        __pipeline_commit();
    };
    real acc[CPT][RPT] = {};
    if constexpr (!Resident)
        for (int s = 0; s < FusedStages - 1; s++)
            issue(s);
    for (int s = 0; s < numSlices; s++) {
        if constexpr (!Resident) {
            __pipeline_wait_prior(FusedStages - 2); // slice s has landed (this thread's copies) ...
            __syncthreads();                        // ... everyone's; and the stage of slice s - 1 is free
            issue(s + FusedStages - 1);
        }
        const real* b = Resident ? B : stage + (s % FusedStages) * stageElements;
        const int k0 = s * sliceRows, count = min(sliceRows, K - k0);
        auto step = [&](int kk, const real(&a)[RPT]) {
            real bv[CPT];
#pragma unroll
            for (int j = 0; j < CPT; j++) {
                const int c = c0 + j * CT;
                bv[j] = c < C ? b[kk * ldb + c] : real(0);
            }
#pragma unroll
            for (int j = 0; j < CPT; j++)
#pragma unroll
                for (int i = 0; i < RPT; i++)
                    acc[j][i] = fma(a[i], bv[j], acc[j][i]);
        };
        int kk = 0;
        for (; kk + 4 <= count; kk += 4) {
            real a4[RPT][4];
#pragma unroll
            for (int i = 0; i < RPT; i++) {
                const real* row = in + (r0 + RS * i) * inStride + k0 + kk;
                if constexpr (sizeof(real) == 4) {
                    const float4 v = *reinterpret_cast<const float4*>(row);
                    a4[i][0] = v.x, a4[i][1] = v.y, a4[i][2] = v.z, a4[i][3] = v.w;
                }
                else {
                    const double2 v0 = *reinterpret_cast<const double2*>(row), v1 = *reinterpret_cast<const double2*>(row + 2);
                    a4[i][0] = v0.x, a4[i][1] = v0.y, a4[i][2] = v1.x, a4[i][3] = v1.y;
                }
            }
#pragma unroll
            for (int x = 0; x < 4; x++) {
                real a[RPT];
#pragma unroll
                for (int i = 0; i < RPT; i++)
                    a[i] = a4[i][x];
                step(kk + x, a);
            }
        }
        for (; kk < count; kk++) {
            real a[RPT];
#pragma unroll
            for (int i = 0; i < RPT; i++)
                a[i] = in[(r0 + RS * i) * inStride + k0 + kk];
            step(kk, a);
        }
    }
#pragma unroll
    for (int j = 0; j < CPT; j++) {
        const int c = c0 + j * CT;
        if (c < C)
#pragma unroll
            for (int i = 0; i < RPT; i++)
                epilogue(r0 + RS * i, c, acc[j][i]);
    }
    __syncthreads();
}

} // namespace GraphPlugin

#endif
