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

/** The G = fusedVector<real>() values at p (16-byte aligned shared memory) in one load. */
template <typename real> __device__ inline void loadVector(const real* p, real (&v)[fusedVector<real>()]) {
    if constexpr (sizeof(real) == 4) {
        const float4 q = *reinterpret_cast<const float4*>(p);
        v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
    }
    else {
        const double2 q = *reinterpret_cast<const double2*>(p);
        v[0] = q.x, v[1] = q.y;
    }
}

/**
 * acc[j][i] += sum over the slice's `count` k of a(i, k) b(k, j), k in order, for a slice b of the k-grouped layout (G k
 * of a column in one load) and a = the thread's rows of the tile (a(i, k) = in[RS i inStride + k], 16-byte aligned).
 * Columns past C read column C - 1 (a valid address; those sums are never used), so the loop has no predicates.
 */
template <typename real, int RPT, int CPT, int CT, int RS>
__device__ inline void groupedSlice(const real* b, int ldb, int C, int c0, const real* a, int inStride, int count, real (&acc)[CPT][RPT]) {
    constexpr int G = fusedVector<real>();
    const real* column[CPT];
#pragma unroll
    for (int j = 0; j < CPT; j++)
        column[j] = b + min(c0 + j * CT, C - 1) * G;
    const real* row[RPT];
#pragma unroll
    for (int i = 0; i < RPT; i++)
        row[i] = a + RS * i * inStride;
    const int groupStride = ldb * G;
    auto group = [&](int g, int n) { // k = g G .. g G + n - 1
        real av[RPT][G], bv[CPT][G];
#pragma unroll
        for (int i = 0; i < RPT; i++)
            loadVector(row[i] + g * G, av[i]);
#pragma unroll
        for (int j = 0; j < CPT; j++)
            loadVector(column[j] + g * groupStride, bv[j]);
#pragma unroll
        for (int x = 0; x < G; x++)
            if (x < n)
#pragma unroll
                for (int j = 0; j < CPT; j++)
#pragma unroll
                    for (int i = 0; i < RPT; i++)
                        acc[j][i] = fma(av[i][x], bv[j][x], acc[j][i]);
    };
    const int groups = count / G;
    for (int g = 0; g < groups; g++)
        group(g, G);
    if (count % G != 0) // the last slice's partial group (K not a multiple of G); B's padding is never read as a term
        group(groups, count % G);
}

/**
 * The same sums for a slice in the plain layout b [k][ldb] (the cluster kernel's resident weights): one load per k and
 * column, `in` read G k at a time.
 */
template <typename real, int RPT, int CPT, int CT, int RS>
__device__ inline void residentSlice(const real* b, int ldb, int C, int c0, const real* a, int inStride, int count, real (&acc)[CPT][RPT]) {
    auto step = [&](int kk, const real(&av)[RPT]) {
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
                acc[j][i] = fma(av[i], bv[j], acc[j][i]);
    };
    constexpr int G = fusedVector<real>();
    int kk = 0;
    for (; kk + G <= count; kk += G) {
        real a4[RPT][G];
#pragma unroll
        for (int i = 0; i < RPT; i++)
            loadVector(a + RS * i * inStride + kk, a4[i]);
#pragma unroll
        for (int x = 0; x < G; x++) {
            real av[RPT];
#pragma unroll
            for (int i = 0; i < RPT; i++)
                av[i] = a4[i][x];
            step(kk + x, av);
        }
    }
    for (; kk < count; kk++) {
        real av[RPT];
#pragma unroll
        for (int i = 0; i < RPT; i++)
            av[i] = a[RS * i * inStride + kk];
        step(kk, av);
    }
}

/**
 * Rows of B (K x ldb, k-grouped) per slice of a streamed product whose rows are shared by CT threads: a multiple of 4
 * (aligned 4-k reads of `in`), at least 4 (the host sizes the stages for it), at most 64 rows of 128 columns' worth
 * (more rows of narrower B) and what a stage of stageElements holds.
 */
__device__ inline int fusedSliceRows(int ldb, int stageElements, int CT) {
    return max(4, min(64 * 128 / CT, stageElements / ldb) / 4 * 4);
}

/**
 * Issues slice s (rows [s sliceRows, ...) of B, whole k-groups) into its stage (cp.async, 16 bytes a copy), with
 * rider(s, numSlices)'s copies, and commits them as one group; a slice past the last commits an empty group.
 */
template <typename real, typename Rider>
__device__ inline void issueSlice(const real* __restrict__ B, int K, int ldb, real* stage, int stageElements, int sliceRows, int s,
                                  Rider& rider) {
    constexpr int V = fusedVector<real>();
    const int numSlices = (K + sliceRows - 1) / sliceRows;
    if (s < numSlices) {
        const int first = s * sliceRows, count = (min(sliceRows, K - first) + V - 1) / V * V; // whole k-groups
        const real* src = B + (size_t) first * ldb;
        real* dst = stage + (s % FusedStages) * stageElements;
        for (int e = threadIdx.x * V; e < count * ldb; e += FusedThreads * V)
            __pipeline_memcpy_async(dst + e, src + e, 16);
        rider(s, numSlices);
    }
    __pipeline_commit();
}

/** Where the B of a fused product is (streamedProduct). */
enum class FusedWeights {
    Streamed,       ///< global, k-grouped ([ceil(K / G)][ldb][G]), streamed through the stages
    ResidentPlain,  ///< shared, [K][ldb] (the cluster kernel's slices)
    ResidentGrouped ///< shared, k-grouped with a group stride of ldb G (the one-block kernel's resident layers)
};

/** A rider of streamedProduct that copies nothing. */
struct NoRider {
    __device__ void operator()(int, int) const {}
};

/**
 * out(r, c) = sum_k in[r][k] B[k][c] for the tile's R rows and C columns, k in
 * order 0..K-1 (fma), handed to epilogue(r, c, sum) for r < R, c < C.  `in` is
 * shared [R][inStride].  CT threads share a row: thread t holds
 * CPT x R / (FusedThreads / CT) sums, columns t % CT + CT j of rows
 * t / CT + (FusedThreads / CT) i; a warp's lanes share their rows (broadcast
 * reads of `in`) and read consecutive columns of B.  Begins and ends with the
 * block synchronised.
 *
 * Streamed: B is global in k-groups, [ceil(K / G)][ldb][G] with
 * G = fusedVector<real>() (fusedGroupedIndex; ldb a multiple of G, padding
 * zero), streamed through `stage` (FusedStages slices of sliceRows rows, a
 * multiple of G, so that a slice is one contiguous block); a thread reads G
 * consecutive k of a column with one 16-byte load.  rider(s, numSlices) may
 * issue more copies (`cp.async`) into the commit group of slice s: the wait
 * for the last slice covers them, and the closing barrier shares them.
 * `issued`: the first slices' commit groups (at most FusedStages - 1) that the
 * caller has issued already with issueSlice (the first product's, before the
 * kernel waits for its predecessor).
 * ResidentPlain: B is already in shared memory, [K][ldb] (all K rows; `stage`
 * unused), read in place as one slice.
 * ResidentGrouped: B is already in shared memory in k-groups, group g at
 * B + g ldb G (ldb may exceed the padded width: the resident layers' padding
 * against bank conflicts in residentTransposedProduct), read as one slice.
 */
template <typename real, int R, int CT, int CPT, FusedWeights Source = FusedWeights::Streamed, typename Epilogue, typename Rider = NoRider>
__device__ inline void streamedProduct(const real* __restrict__ B, int K, int C, int ldb, const real* in, int inStride, real* stage,
                                       int stageElements, Epilogue epilogue, Rider rider = Rider(), int issued = 0) {
    constexpr bool Streamed = Source == FusedWeights::Streamed;
    constexpr int V = fusedVector<real>(), RS = FusedThreads / CT, RPT = R / RS; // RS: rows between a thread's rows
    static_assert(RPT >= 1 && R % RS == 0, "a tile's rows must cover the threads");
    const int c0 = threadIdx.x % CT, r0 = threadIdx.x / CT;
    const int sliceRows = !Streamed ? K : fusedSliceRows(ldb, stageElements, CT);
    const int numSlices = !Streamed ? 1 : (K + sliceRows - 1) / sliceRows;
    auto issue = [&](int s) { issueSlice(B, K, ldb, stage, stageElements, sliceRows, s, rider); };
    real acc[CPT][RPT] = {};
    if constexpr (Streamed)
        for (int s = issued; s < FusedStages - 1; s++)
            issue(s);
    for (int s = 0; s < numSlices; s++) {
        if constexpr (Streamed) {
            __pipeline_wait_prior(FusedStages - 2); // slice s has landed (this thread's copies) ...
            __syncthreads();                        // ... everyone's; and the stage of slice s - 1 is free
            issue(s + FusedStages - 1);
        }
        const real* b = !Streamed ? B : stage + (s % FusedStages) * stageElements;
        const int k0 = s * sliceRows, count = min(sliceRows, K - k0);
        if constexpr (Source == FusedWeights::ResidentPlain)
            residentSlice<real, RPT, CPT, CT, RS>(b, ldb, C, c0, in + r0 * inStride + k0, inStride, count, acc);
        else
            groupedSlice<real, RPT, CPT, CT, RS>(b, ldb, C, c0, in + r0 * inStride + k0, inStride, count, acc);
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

/**
 * out(r, k) = sum_n in[r][n] W^T[k][n] for the tile's R rows and K outputs,
 * n in order 0..N-1 (fma): the backward product of a layer whose W^T stays in
 * shared memory (ResidentGrouped: k-groups, group g at WT + g ldb G; ldb of
 * fusedPadded(N) + 1 keeps the loads below free of bank conflicts), the same
 * terms in the same order as the streamed product over W, so bitwise its
 * sums.  Thread t takes G / 2 consecutive k (8 bytes) of one row at a time,
 * consecutive threads consecutive k of the same row (broadcast reads of
 * `in`, shared [R][inStride], 16-byte aligned rows).  Hands epilogue(r, k, sum)
 * for r < R, k < K; ends with the block synchronised.
 */
template <typename real, int R, typename Epilogue>
__device__ inline void residentTransposedProduct(const real* WT, int ldb, int N, int K, const real* in, int inStride, Epilogue epilogue) {
    constexpr int G = fusedVector<real>(), P = G / 2;
    const int pieces = (K + P - 1) / P;
    for (int item = threadIdx.x; item < R * pieces; item += FusedThreads) {
        const int r = item / pieces, k0 = item % pieces * P;
        const real* w = WT + (size_t) (k0 / G) * ldb * G + k0 % G; // W^T[k0 + p][n] at w[n G + p]
        const real* a = in + r * inStride;
        real acc[P] = {};
        auto term = [&](real x, int n) {
            real wv[P];
            if constexpr (P == 2) {
                const float2 q = *reinterpret_cast<const float2*>(w + (size_t) n * G);
                wv[0] = q.x, wv[1] = q.y;
            }
            else
                wv[0] = w[(size_t) n * G];
#pragma unroll
            for (int p = 0; p < P; p++)
                acc[p] = fma(x, wv[p], acc[p]);
        };
        int n = 0;
        for (; n + G <= N; n += G) {
            real av[G];
            loadVector(a + n, av);
#pragma unroll
            for (int x = 0; x < G; x++)
                term(av[x], n + x);
        }
        for (; n < N; n++)
            term(a[n], n);
#pragma unroll
        for (int p = 0; p < P; p++)
            if (k0 + p < K)
                epilogue(r, k0 + p, acc[p]);
    }
    __syncthreads();
}

} // namespace GraphPlugin

#endif
