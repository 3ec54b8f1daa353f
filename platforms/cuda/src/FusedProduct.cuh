/**
 * The dense product of the fused fitting networks (FusedNetworkKernels.cu,
 * one block per tile of rows; ClusterNetworkKernels.cu, a cluster of blocks
 * per tile, each with a slice of the columns): a tile's rows times a weight
 * matrix in shared memory, k summed in order 0..K-1 with fma
 * as in the per-layer kernels, so that the results are bitwise theirs.
 */

#ifndef GRAPH_FUSED_PRODUCT_CUH
#define GRAPH_FUSED_PRODUCT_CUH

#include "FusedWeightStream.cuh"
#include "GraphKernelLaunch.h"

namespace GraphPlugin {

/**
 * out(r, c) = sum_k in[r][k] B[k][c] for the tile's R rows and C columns, k in
 * order 0..K-1 (fma), handed to epilogue(r, c, sum) for r < R, c < C.  B
 * ([K][ldb], ldb a multiple of the 16-byte vector, rows padded with zeros)
 * comes from `weights` in slices: a FusedWeightStream (the next product of
 * the block's stream) or ResidentWeights (already in shared memory, one
 * slice).  `in` is shared [R][inStride].  CT threads share a row: thread t
 * holds CPT x R / (FusedThreads / CT) sums, columns t % CT + CT j of rows
 * t / CT + (FusedThreads / CT) i; a warp's lanes share their rows (broadcast
 * reads of `in`) and read consecutive columns of B.  Begins and ends with the
 * block synchronised.
 */
template <typename real, int R, int CT, int CPT, typename Weights, typename Epilogue>
__device__ inline void tileProduct(Weights& weights, int K, int C, int ldb, const real* in, int inStride, Epilogue epilogue) {
    constexpr int RS = FusedThreads / CT, RPT = R / RS; // RS: rows between a thread's rows
    static_assert(RPT >= 1 && R % RS == 0, "a tile's rows must cover the threads");
    const int c0 = threadIdx.x % CT, r0 = threadIdx.x / CT;
    const int sliceRows = weights.sliceRows(K, ldb);
    const int numSlices = (K + sliceRows - 1) / sliceRows;
    real acc[CPT][RPT] = {};
    for (int s = 0; s < numSlices; s++) {
        const real* b = weights.acquire(s);
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
