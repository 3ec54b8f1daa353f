/**
 * Stages 2 and 4 of the CUDA pipeline: the edge scans.  One block per center,
 * the centers taken grouped by type (the pipeline's type-sorted node list), so
 * that the multiprocessors read one center type's quarter of the radial table
 * at a time (medium grade: 3.7 of 14.8 MB) and their L1 serves more of it
 * (bench/NOTES.md v25);
 * its warps walk contiguous chunks of the canonical row in order and the block
 * adds the chunks in warp order; lane k handles channels k, k + 32, ...
 * (M <= 32 * MaxChannelsPerLane), evaluating the radial tables and harmonics on
 * the fly (no per-edge features in global memory).  Sums over a row are taken
 * in canonical order and reductions over lanes in a fixed butterfly, so every
 * result is bitwise reproducible; forces go into OpenMM's buffer with 64-bit
 * integer atomics, which are order independent.
 */

#include "ChainedLaunch.cuh"
#include "EdgeForce.cuh"
#include "EdgeMoments.cuh"
#include "EdgeShape.cuh"
#include "GraphKernelLaunch.h"
#include "L1Preference.cuh"
#include "NetworkDeviceFunctions.cuh"
#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace GraphPlugin {

namespace {

constexpr int WarpsPerBlock = 4;
static_assert(WarpsPerBlock == MomentChunks, "the moments kernel's warps are the chunks of a row (chunkMoments)");
constexpr int MaxForceWarps = 8; // 256 threads: the largest lane-per-channel shapes keep their registers (no spills)

/**
 * Blocks of MaxForceWarps warps the force scan is compiled to fit on a
 * multiprocessor.  A lane per channel (V = 1): 4 for fp32 with l_max <= 1 and
 * M <= 32, so that 512 centers of 8 warps run in one wave on a device of 128
 * or more multiprocessors (at 76 registers, 3 blocks fit and 512 centers took
 * two waves on an H200, session 10); 1 otherwise.  Vector shapes: 2 (at most
 * 128 registers; the compiler wanted up to 188 to have every l's loads in
 * flight; 4-12 bytes of spills remain for fp32 l_max = 2 with groups of 8 or
 * 16 and for most fp64 l_max = 2 shapes), and they run 4 warps per center
 * (launchForces), so 4 blocks fit.
 */
template <typename real, int LMAX, typename Shape> constexpr int forceMinBlocks() {
    if constexpr (Shape::V > 1)
        return 2;
    else
        return sizeof(real) == 4 && LMAX <= 1 && Shape::XPL == 1 ? 4 : 1;
}

/**
 * This lane's share (its channels, EdgeShape) of S_lm = sum_k G_lm,k R_l,k and
 * P_lm = sum_k G_lm,k R'_l,k for staged edge q of center ti's row, over
 * `numTables` tables: table 0 the radial table with G = dE/dA, table 1 the
 * interaction table, weighted by phi[j][k], with G = dE/dB.  `grad` holds the
 * center's G of every table, [numTables][H][M] in shared memory (staged once
 * per center: read from global memory per edge, the center's 2.3 KB competed
 * in L1 with the table's stream of 4.6 KB an edge).  The per-edge body of
 * forcesKernel, before edgeForce.
 */
template <typename real, int LMAX, typename Shape, typename Stage>
__device__ inline void edgeGradientSums(const Stage* stage, int q, int sub, const GraphModelParams<real>& model, int ti, const real* grad,
                                        const real* phi, int numTables, real* S, real* P) {
    constexpr int H = (LMAX + 1) * (LMAX + 1), V = Shape::V;
    const int M = model.numChannels;
    const int j = stage->j[q], tj = stage->tj[q], interval = stage->interval[q];
    real coefficient[6], slope[6];
#pragma unroll
    for (int x = 0; x < 6; x++) {
        coefficient[x] = stage->value[x][q];
        slope[x] = stage->slope[x][q];
    }
#pragma unroll
    for (int lm = 0; lm < H; lm++)
        S[lm] = P[lm] = 0;
    for (int t = 0; t < numTables; t++) {
        const real* knots = tableKnot(t == 0 ? model.radialTable : model.interactionTable, model, ti, tj, 0, interval);
        const real* G = grad + t * H * M; // center i's [H][M] of table t, in shared memory
#pragma unroll
        for (int x = 0; x < Shape::XPL; x++) {
            const int k0 = (sub + Shape::LPE * x) * V;
            if (k0 < M) { // M is a multiple of V
                real weight[V];
                if (t == 0)
#pragma unroll
                    for (int v = 0; v < V; v++)
                        weight[v] = 1;
                else
                    loadChannels<real, V>(phi + (size_t) j * M + k0, weight);
#pragma unroll
                for (int l = 0; l <= LMAX; l++) {
                    real value[V], deriv[V];
                    channelsFromKnots<real, V, true>(knots, l, k0, model, knotParity(interval), coefficient, slope, value, deriv);
#pragma unroll
                    for (int lm = l * l; lm < (l + 1) * (l + 1); lm++) {
                        real g[V];
                        loadVector<real, V>(G + lm * M + k0, g);
#pragma unroll
                        for (int v = 0; v < V; v++) {
                            S[lm] += g[v] * (value[v] * weight[v]);
                            P[lm] += g[v] * (deriv[v] * weight[v]);
                        }
                    }
                }
            }
        }
    }
}

/**
 * One block per center, WarpsPerBlock warps over contiguous chunks of its row;
 * a warp's lane groups (EdgeShape) take every Groups-th edge of its chunk.
 * Edges are staged a batch at a time (EdgeStage); each lane sums its edges in
 * canonical order, then the groups' sums are added in a fixed tree (every lane
 * gets the same total) and the warps' in warp order: the sums are a function
 * of the row alone.
 */
template <typename real, int LMAX, typename Shape>
__global__ void __launch_bounds__(32 * WarpsPerBlock)
    momentsKernel(GraphModelParams<real> model, const real* __restrict__ table, const real* __restrict__ nodeWeights,
                  const double* __restrict__ positions, const int* __restrict__ types, const int* __restrict__ centers, int numCenters,
                  GraphBox<double> box, const int* __restrict__ neighbors, const int* __restrict__ rowCount, int capacity,
                  real* __restrict__ moments) {
    beginChainedKernel();
    constexpr int H = (LMAX + 1) * (LMAX + 1), C = Shape::Channels;
    using Stage = EdgeStage<real, H, false>;
    extern __shared__ unsigned char sharedBytes[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    Stage* stage = reinterpret_cast<Stage*>(sharedBytes) + warp;
    // [WarpsPerBlock][H][M], over the warps' stages once every warp is done with its chunk: the block's shared memory is
    // what the stages or the partial sums need, not both, and the rest of the multiprocessor is L1 (L1Preference).
    real* partial = reinterpret_cast<real*>(sharedBytes);
    const int M = model.numChannels;
    for (int b = blockIdx.x; b < numCenters; b += gridDim.x) {
        const int i = centers[b];
        real acc[H][C];
        chunkMoments<real, LMAX, Shape>(stage, lane, model, table, nodeWeights, positions, types, neighbors, capacity, box, i, rowCount[i],
                                        warp, acc);
        __syncthreads(); // every warp's stage is free for the partial sums
        storeChunkMoments<real, LMAX, Shape>(acc, lane, M, partial + warp * H * M);
        __syncthreads();
        for (int x = threadIdx.x; x < H * M; x += blockDim.x) {
            real sum = 0;
            for (int w = 0; w < WarpsPerBlock; w++)
                sum += partial[w * H * M + x];
            moments[(size_t) i * H * M + x] = sum * model.invNorm;
        }
        __syncthreads();
    }
}

/**
 * Copies a rows x cols matrix, contiguous at src (global memory, read-only for the kernel), into dst (shared memory) with
 * rows ld apart (ld >= cols: padding keeps the column reads of the invariants' backward off one bank).  The block's
 * threads take consecutive elements, by 16-byte vectors (float4, double2) where cols is a multiple of them and src is
 * aligned to them, else one by one.  No barrier.
 */
template <typename real> __device__ inline void stageRows(const real* __restrict__ src, int rows, int cols, real* dst, int ld) {
    constexpr int VV = 16 / sizeof(real);
    const bool vectors = cols % VV == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0;
    const int width = vectors ? VV : 1, perRow = cols / width; // elements of a copy, copies a row
    int r = threadIdx.x / perRow, c = threadIdx.x % perRow * width;
    const int stepR = blockDim.x / perRow, stepC = blockDim.x % perRow * width;
    for (int v = threadIdx.x; v < rows * perRow; v += blockDim.x) {
        if (vectors) {
            real value[VV];
            loadChannels<real, VV>(src + (size_t) v * VV, value);
#pragma unroll
            for (int e = 0; e < VV; e++)
                dst[r * ld + c + e] = value[e];
        }
        else
            dst[r * ld + c] = __ldg(src + v);
        r += stepR;
        c += stepC;
        if (c >= cols) {
            c -= cols;
            r++;
        }
    }
}

/**
 * Invariants, one block per row (grid-stride over rows): X_i and A_i are staged in shared memory ([H][M] reals each; A_i
 * not again when it is X_i), then each thread takes pairs p = k M_axis + k' (p = threadIdx.x, + blockDim.x, ...; (k, k')
 * by additions) and writes the pair's entry of every degree, [l][p], or its one l-summed entry, [p]: stores of
 * consecutive threads are consecutive.  The m sums are unrolled (LMAX is l_max) and each is invariantSum in the order of
 * invariantValue, so the entries are bitwise those of the fused kernel.
 */
template <typename real, int LMAX>
__global__ void invariantsKernel(GraphModelParams<real> model, const real* __restrict__ X, const real* __restrict__ A,
                                 const int* __restrict__ rowNodes, int numRows, real* __restrict__ out, int outStride, int outOffset) {
    constexpr int H = (LMAX + 1) * (LMAX + 1);
    extern __shared__ unsigned char sharedBytes[];
    const int M = model.numChannels, Maxis = model.numAxis, pairs = M * Maxis;
    const bool same = X == A;
    real* Xs = reinterpret_cast<real*>(sharedBytes);
    real* As = same ? Xs : Xs + H * M;
    const int firstK = threadIdx.x / Maxis, firstKp = threadIdx.x % Maxis;
    const int stepK = blockDim.x / Maxis, stepKp = blockDim.x % Maxis;
    for (int row = blockIdx.x; row < numRows; row += gridDim.x) {
        const int i = rowNodes[row];
        stageRows(X + (size_t) i * H * M, H, M, Xs, M);
        if (!same)
            stageRows(A + (size_t) i * H * M, H, M, As, M);
        __syncthreads();
        real* o = out + (size_t) row * outStride + outOffset;
        int k = firstK, kp = firstKp;
        for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
            if (model.descriptorLSum)
                o[p] = invariantSum(Xs, As, M, 0, H, k, kp);
            else
#pragma unroll
                for (int l = 0; l <= LMAX; l++)
                    o[l * pairs + p] = invariantSum(Xs, As, M, l * l, (l + 1) * (l + 1), k, kp);
            k += stepK;
            kp += stepKp;
            if (kp >= Maxis) {
                kp -= Maxis;
                k++;
            }
        }
        __syncthreads();
    }
}

/**
 * The first pass of the invariants' backward for entry out = [i][lm][k]: with X = A (`same`), dA's entry (the earlier sum
 * where `accumulate`, + gx) goes to partial[lm][k] (shared memory, [H][M_axis]) for k < M_axis, where the second pass adds
 * ga, and to gradA otherwise (+ ga, which is 0 there, as invariantGradient adds it); with X != A, gx goes to gradX and
 * dA's k >= M_axis entries get their ga of 0.
 */
template <typename real>
__device__ inline void storeGradientX(real gx, size_t out, int lm, int k, int Maxis, bool same, int accumulate, real* partial,
                                      real* __restrict__ gradX, real* __restrict__ gradA) {
    if (same) {
        const real sum = (accumulate ? gradA[out] : real(0)) + gx;
        if (k < Maxis)
            partial[lm * Maxis + k] = sum;
        else
            gradA[out] = sum + real(0);
    }
    else {
        gradX[out] = (accumulate ? gradX[out] : real(0)) + gx;
        if (k >= Maxis)
            gradA[out] = (accumulate ? gradA[out] : real(0)) + real(0);
    }
}

/**
 * The invariants' backward, one block per row like the forward.  X_i and A_i are staged in shared memory with rows
 * M + 1 apart, and, with StageG, the row's descriptor gradient too, with its [l][k] rows of M_axis entries an odd number
 * of reals apart (invariantsBackwardShared); without StageG (a gradient row beyond the shared memory the launch allows)
 * it is read through L1.  Two passes: every entry x = [lm][k] adds gx (invariantGradientXSum), then the H M_axis entries
 * with k < M_axis add ga (invariantGradientASum) on consecutive threads: per entry the same sums in the same order as
 * invariantGradient, so dA (and dX) are bitwise those of the fused kernel.  When X is A the first pass keeps
 * (previous + gx) of the k < M_axis entries in shared memory (where A_i would be) for the second.
 */
template <typename real, int LMAX, bool StageG>
__global__ void invariantsBackwardKernel(GraphModelParams<real> model, const real* __restrict__ X, const real* __restrict__ A,
                                         const int* __restrict__ rowNodes, int numRows, const real* __restrict__ gradIn, int gradStride,
                                         int gradOffset, real* __restrict__ gradX, real* __restrict__ gradA, int accumulate) {
    constexpr int H = (LMAX + 1) * (LMAX + 1);
    extern __shared__ unsigned char sharedBytes[];
    const int M = model.numChannels, Maxis = model.numAxis, ld = M + 1;
    const int gld = StageG ? Maxis | 1 : Maxis;             // between the gradient's [l][k] rows
    const int gDegree = model.descriptorLSum ? 0 : M * gld; // between its degrees
    const int gRows = (model.descriptorLSum ? 1 : LMAX + 1) * M;
    const bool same = X == A;
    real* Xs = reinterpret_cast<real*>(sharedBytes);
    real* As = same ? Xs : Xs + H * ld;
    real* partial = Xs + H * ld; // [H][M_axis] when same (M_axis <= M)
    real* gs = Xs + 2 * H * ld;
    const int stepK = blockDim.x % M, stepLm = blockDim.x / M;
    for (int row = blockIdx.x; row < numRows; row += gridDim.x) {
        const int i = rowNodes[row];
        const real* gRow = gradIn + (size_t) row * gradStride + gradOffset;
        stageRows(X + (size_t) i * H * M, H, M, Xs, ld);
        if (!same)
            stageRows(A + (size_t) i * H * M, H, M, As, ld);
        if (StageG)
            stageRows(gRow, gRows, Maxis, gs, gld);
        const real* g = StageG ? gs : gRow;
        __syncthreads();
        int lm = threadIdx.x / M, k = threadIdx.x % M;
        for (int x = threadIdx.x; x < H * M; x += blockDim.x) {
            const real gx = invariantGradientXSum(g + degreeOf(lm) * gDegree + k * gld, As + lm * ld, Maxis);
            storeGradientX(gx, (size_t) i * H * M + x, lm, k, Maxis, same, accumulate, partial, gradX, gradA);
            k += stepK;
            lm += stepLm;
            if (k >= M) {
                k -= M;
                lm++;
            }
        }
        __syncthreads();
        for (int e = threadIdx.x; e < H * Maxis; e += blockDim.x) {
            const int elm = e / Maxis, ek = e % Maxis;
            const real ga = invariantGradientASum(g + degreeOf(elm) * gDegree + ek, gld, Xs + elm * ld, M);
            const size_t out = (size_t) i * H * M + elm * M + ek;
            gradA[out] = (same ? partial[e] : accumulate ? gradA[out] : real(0)) + ga;
        }
        __syncthreads();
    }
}

/**
 * The invariants' backward for M_axis = AX (a compile-time 4, 8 or 16) and M a multiple of 4: one block per row like
 * invariantsBackwardKernel, with its sums in its order (so bitwise its results and the fused kernel's), in fewer
 * instructions.  X_i and A_i are staged with rows ld = M + VV apart (VV = 16 / sizeof(real): rows 16-byte aligned, read
 * by vectors).  The first pass gives a thread a row dD[l][k][.] of the descriptor gradient, read from global memory
 * into registers (the thread's first row while X_i is staged, by vectors where `gradVectors`: gradIn + gradOffset and
 * the stride 16-byte aligned), and with it every entry [lm][k] of that l (invariantsBackwardKernel: one entry a thread,
 * the row read from shared memory for each); it also stores the row transposed, [l][k'][k] with rows ld apart, so that
 * the second pass reads both factors of its sums over k by vectors.  Shared memory: invariantsBackwardAxisShared.
 * bench/NOTES.md v50: medium 100,800 483 -> 463 us an evaluation, large 10,296 768 -> 563 us (H100).
 */
template <typename real, int LMAX, int AX>
__global__ void invariantsBackwardAxisKernel(GraphModelParams<real> model, const real* __restrict__ X, const real* __restrict__ A,
                                             const int* __restrict__ rowNodes, int numRows, const real* __restrict__ gradIn, int gradStride,
                                             int gradOffset, bool gradVectors, real* __restrict__ gradX, real* __restrict__ gradA,
                                             int accumulate) {
    constexpr int H = (LMAX + 1) * (LMAX + 1), VV = 16 / sizeof(real);
    static_assert(AX % VV == 0, "M_axis in whole vectors");
    extern __shared__ unsigned char sharedBytes[];
    const int M = model.numChannels, ld = M + VV;
    const int degrees = model.descriptorLSum ? 1 : LMAX + 1;
    const int gDegree = model.descriptorLSum ? 0 : M * AX; // between the gradient's degrees (its [l][k] rows are AX apart)
    const bool same = X == A;
    real* Xs = reinterpret_cast<real*>(sharedBytes);
    real* As = same ? Xs : Xs + H * ld;
    real* partial = Xs + H * ld; // [H][AX] when same (AX <= M)
    real* gt = Xs + 2 * H * ld;  // dD transposed: [degree][k'][k], rows ld apart, for the second pass
    for (int row = blockIdx.x; row < numRows; row += gridDim.x) {
        const real* gRow = gradIn + (size_t) row * gradStride + gradOffset;
        // dD[l][k][.] of task t (l = t / M, k = t % M) into g.
        real g[AX];
        auto loadGradientRow = [&](int t) {
            const real* src = gRow + t / M * gDegree + t % M * AX;
            if (gradVectors)
#pragma unroll
                for (int v = 0; v < AX; v += VV) {
                    real part[VV];
                    loadChannels<real, VV>(src + v, part);
#pragma unroll
                    for (int w = 0; w < VV; w++)
                        g[v + w] = part[w];
                }
            else
#pragma unroll
                for (int v = 0; v < AX; v++)
                    g[v] = __ldg(src + v);
        };
        // A thread's first row is read while X_i and A_i are staged (its latency overlaps theirs).
        if (threadIdx.x < degrees * M)
            loadGradientRow(threadIdx.x);
        const int i = rowNodes[row];
        stageRows(X + (size_t) i * H * M, H, M, Xs, ld);
        if (!same)
            stageRows(A + (size_t) i * H * M, H, M, As, ld);
        __syncthreads();
        for (int t = threadIdx.x; t < degrees * M; t += blockDim.x) {
            const int d = t / M, k = t % M;
            if (t != threadIdx.x)
                loadGradientRow(t);
#pragma unroll
            for (int v = 0; v < AX; v++)
                gt[(d * AX + v) * ld + k] = g[v];
            const int lmEnd = model.descriptorLSum ? H : (d + 1) * (d + 1);
            for (int lm = model.descriptorLSum ? 0 : d * d; lm < lmEnd; lm++) {
                real a[AX];
#pragma unroll
                for (int v = 0; v < AX; v += VV)
                    loadVector<real, VV>(As + lm * ld + v, a + v);
                real gx = 0;
#pragma unroll
                for (int kp = 0; kp < AX; kp++)
                    gx += g[kp] * a[kp];
                storeGradientX(gx, (size_t) i * H * M + lm * M + k, lm, k, AX, same, accumulate, partial, gradX, gradA);
            }
        }
        __syncthreads();
        for (int e = threadIdx.x; e < H * AX; e += blockDim.x) {
            const int elm = e / AX, ek = e % AX;
            const real* g = gt + ((model.descriptorLSum ? 0 : degreeOf(elm)) * AX + ek) * ld;
            real ga = 0;
            for (int kk = 0; kk < M; kk += VV) {
                real x[VV], gv[VV];
                loadVector<real, VV>(Xs + elm * ld + kk, x);
                loadVector<real, VV>(g + kk, gv);
#pragma unroll
                for (int v = 0; v < VV; v++)
                    ga += gv[v] * x[v];
            }
            const size_t out = (size_t) i * H * M + elm * M + ek;
            gradA[out] = (same ? partial[e] : accumulate ? gradA[out] : real(0)) + ga;
        }
        __syncthreads();
    }
}

template <typename real, int LMAX, int CPL>
__global__ void __launch_bounds__(32 * WarpsPerBlock)
    nodeFeatureGradientKernel(GraphModelParams<real> model, const real* __restrict__ gradB, const double* __restrict__ positions,
                              const int* __restrict__ types, const int* __restrict__ nodes, int numNodes, GraphBox<double> box,
                              const int* __restrict__ neighbors, const int* __restrict__ rowCount, int capacity,
                              real* __restrict__ gradPhi) {
    constexpr int H = (LMAX + 1) * (LMAX + 1);
    extern __shared__ unsigned char sharedBytes[];
    real* partial = reinterpret_cast<real*>(sharedBytes); // [WarpsPerBlock][M]
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int M = model.numChannels;
    for (int b = blockIdx.x; b < numNodes; b += gridDim.x) {
        const int j = nodes[b];
        real acc[CPL];
#pragma unroll
        for (int c = 0; c < CPL; c++)
            acc[c] = 0;
        const int tj = types[j];
        int first, last;
        rowChunk(rowCount[j], warp, WarpsPerBlock, first, last);
        for (int e = first; e < last; e++) {
            const int i = neighbors[(size_t) j * capacity + e];
            // The edge as seen from center i: u_ij = -u_ji.
            real u[3], Y[MaxHarmonics], grad[MaxHarmonics][3];
            const real r = edgeGeometry(positions, i, j, box, u);
            harmonics(LMAX, u, Y, grad);
            const HermiteBasis<real> basis(r, model);
            const int ti = types[i];
#pragma unroll
            for (int c = 0; c < CPL; c++) {
                const int k = lane + 32 * c;
                if (k < M) {
#pragma unroll
                    for (int l = 0; l <= LMAX; l++) {
                        real value, deriv;
                        basis.evaluate(model.interactionTable, model, ti, tj, l, k, value, deriv);
                        real sum = 0;
#pragma unroll
                        for (int lm = l * l; lm < (l + 1) * (l + 1); lm++)
                            sum += gradB[((size_t) i * H + lm) * M + k] * Y[lm];
                        acc[c] += sum * value;
                    }
                }
            }
        }
#pragma unroll
        for (int c = 0; c < CPL; c++) {
            const int k = lane + 32 * c;
            if (k < M)
                partial[warp * M + k] = acc[c];
        }
        __syncthreads();
        for (int k = threadIdx.x; k < M; k += blockDim.x) {
            real sum = 0;
            for (int w = 0; w < WarpsPerBlock; w++)
                sum += partial[w * M + k];
            gradPhi[(size_t) j * M + k] = sum * model.invNorm;
        }
        __syncthreads();
    }
}

/**
 * Forces.  Per edge, each lane sums its channels' share of
 * S_lm = sum_k G_lm,k R_l,k and P_lm = sum_k G_lm,k R'_l,k and contracts them
 * at once with the edge's harmonics into its share of dE/dd (linear in S and
 * P); one reduce-scatter of the three components over the lanes (6 shuffles,
 * not the 2H-value reduction of S and P) leaves component c in lanes 8c..8c+7,
 * and lanes 0, 8 and 16 add it to OpenMM's buffer.  Edges are staged a batch at
 * a time as in the moments.
 */
template <typename real, int LMAX, typename Shape>
__global__ void __launch_bounds__(32 * MaxForceWarps, forceMinBlocks<real, LMAX, Shape>())
    forcesKernel(GraphModelParams<real> model, const real* __restrict__ gradA, const real* __restrict__ gradB, const real* __restrict__ phi,
                 const double* __restrict__ positions, const int* __restrict__ types, const int* __restrict__ centers, int numCenters,
                 GraphBox<double> box, const int* __restrict__ neighbors, const int* __restrict__ rowCount, int capacity,
                 const int* __restrict__ slotOfNode, long long* __restrict__ forceBuffer, int paddedAtoms, GraphStatus* status) {
    // The block's first center and its type: the center list and the types are set up before the evaluation and no
    // kernel of it writes them, so they are read before the wait for the kernel before (their two dependent round trips
    // overlap its end instead of following it).
    int i = blockIdx.x < numCenters ? centers[blockIdx.x] : 0;
    int ti = blockIdx.x < numCenters ? types[i] : 0;
    beginChainedKernel();
    constexpr int H = (LMAX + 1) * (LMAX + 1);
    using Stage = EdgeStage<real, H, true>;
    extern __shared__ unsigned char sharedBytes[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, sub = lane % Shape::LPE;
    static_assert(sizeof(Stage) % 16 == 0, "the staged gradient after the warps' stages is aligned for 16-byte loads");
    Stage* stage = reinterpret_cast<Stage*>(sharedBytes) + warp;
    const int numBlocks = model.numInteractions == 1 ? 2 : 1;
    const int numWarps = blockDim.x >> 5;
    const int HM = H * model.numChannels;
    real* grad = reinterpret_cast<real*>(sharedBytes + numWarps * sizeof(Stage)); // [numBlocks][H][M]: center i's dE/dA (and dE/dB)
    for (int b = blockIdx.x; b < numCenters; b += gridDim.x) {
        if (b != blockIdx.x) {
            i = centers[b];
            ti = types[i];
        }
        __syncthreads(); // the last center's gradient is no longer read
        for (int x = threadIdx.x; x < numBlocks * HM; x += blockDim.x)
            grad[x] = x < HM ? gradA[(size_t) i * HM + x] : gradB[(size_t) i * HM + x - HM];
        __syncthreads();
        int first, last;
        rowChunk(rowCount[i], warp, numWarps, first, last);
        // This lane's component of F_i in fixed point, edge by edge: the sum does not depend on how the row is split over warps.
        long long forceI = 0;
        forEachStagedEdge<LMAX, Shape::Groups>(
            stage, lane, model, positions, types, i, neighbors, capacity, box, first, last,
            [&](int q, bool valid) {
                real S[H] = {}, P[H] = {};
                if (valid)
                    edgeGradientSums<real, LMAX, Shape>(stage, q, sub, model, ti, grad, phi, numBlocks, S, P);
                const real u[3] = {stage->u[0][q], stage->u[1][q], stage->u[2][q]};
                edgeForce<real, LMAX, Shape::LPE>(S, P, u, stage->invR[q], valid, sub, i, stage->j[q], stage->slotJ[q], model, status,
                                                  forceBuffer, paddedAtoms, forceI);
            },
            slotOfNode);
        // Each group adds its edges' share of F_i (integer atomics: order independent).
        if (forceOwner<Shape::LPE>(sub) && last > first)
            atomicAdd((unsigned long long*) &forceBuffer[slotOfNode[i] + forceComponent<Shape::LPE>(sub) * paddedAtoms],
                      (unsigned long long) forceI);
    }
}

int elementBlocks(size_t count) {
    return (int) std::min<size_t>((count + 255) / 256, 65535 * 16);
}

__global__ void addForcesKernel(const long long* __restrict__ forces, int n, const int* __restrict__ slotOfNode,
                                long long* __restrict__ forceBuffer, int paddedAtoms) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const int slot = slotOfNode[i];
        for (int c = 0; c < 3; c++)
            forceBuffer[slot + c * paddedAtoms] += forces[(size_t) c * n + i];
    }
}

} // namespace

void launchAddForces(const long long* forces, int n, const int* slotOfNode, long long* forceBuffer, int paddedAtoms, cudaStream_t stream) {
    if (n > 0)
        addForcesKernel<<<elementBlocks(n), 256, 0, stream>>>(forces, n, slotOfNode, forceBuffer, paddedAtoms);
}

/** body(l, cpl) with l_max and the channels per lane of a lane per channel, as std::integral_constants. */
template <typename Body> void dispatchShape(int lMax, int numChannels, Body body) {
    const int cpl = (numChannels + 31) / 32;
    dispatchLMax(lMax, [&](auto l) {
        if (cpl <= 1)
            body(l, std::integral_constant<int, 1>());
        else if (cpl <= 2)
            body(l, std::integral_constant<int, 2>());
        else
            body(l, std::integral_constant<int, 4>());
    });
}

int centerBlocks(int n) {
    return std::max(1, std::min(n, 65535 * 16));
}

/** Blocks of the one-block-per-row kernels (grid-stride beyond; enough to fill any device several times). */
int rowBlocks(int numRows) {
    return std::max(1, std::min(numRows, 65535));
}

template <typename real>
void launchMoments(const GraphModelParams<real>& model, const real* table, const real* nodeWeights, const double* positions,
                   const int* types, const int* centers, int numCenters, GraphBox<double> box, const int* neighbors, const int* rowCount,
                   int capacity, real* moments, cudaStream_t stream) {
    if (numCenters == 0)
        return;
    dispatchEdgeShape<real>(model.lMax, model.numChannels, [&](auto l, auto shape) {
        // The warps' stages, then (over them) their partial sums.
        const size_t shared = WarpsPerBlock * std::max(stageBytes<real, decltype(l)::value, false>(),
                                                       sizeof(real) * (model.lMax + 1) * (model.lMax + 1) * model.numChannels);
        auto kernel = momentsKernel<real, decltype(l)::value, decltype(shape)>;
        L1Preference::apply(kernel, 32 * WarpsPerBlock, shared); // the table is read through L1
        launchChained(kernel, centerBlocks(numCenters), 32 * WarpsPerBlock, shared, stream, model, table, nodeWeights, positions, types,
                      centers, numCenters, box, neighbors, rowCount, capacity, moments);
    });
}

template <typename real>
void launchInvariants(const GraphModelParams<real>& model, const real* X, const real* A, const int* rowNodes, int numRows, real* out,
                      int outStride, int outOffset, cudaStream_t stream) {
    const size_t shared = sizeof(real) * 2 * (model.lMax + 1) * (model.lMax + 1) * model.numChannels;
    if (numRows > 0)
        dispatchLMax(model.lMax, [&](auto l) {
            invariantsKernel<real, decltype(l)::value>
                <<<rowBlocks(numRows), 128, shared, stream>>>(model, X, A, rowNodes, numRows, out, outStride, outOffset);
        });
}

/** The degrees the descriptor has a block of invariants for: l_max + 1, or 1 when they are summed over l. */
template <typename real> int descriptorDegrees(const GraphModelParams<real>& model) {
    return model.descriptorLSum ? 1 : model.lMax + 1;
}

/**
 * Shared memory of the invariants' backward: X_i and A_i ([H][M + 1] each), with `stageGradient` also the descriptor
 * gradient ((L + 1 or 1) M rows of M_axis | 1 reals).
 */
template <typename real> size_t invariantsBackwardShared(const GraphModelParams<real>& model, bool stageGradient) {
    const int H = (model.lMax + 1) * (model.lMax + 1), M = model.numChannels;
    const int gradientRows = descriptorDegrees(model) * M;
    return sizeof(real) * (2 * H * (M + 1) + (stageGradient ? gradientRows * (model.numAxis | 1) : 0));
}

/**
 * Shared memory of invariantsBackwardAxisKernel: X_i and A_i ([H][M + VV] each) and the descriptor gradient transposed
 * ((L + 1 or 1) M_axis rows of M + VV reals), VV = 16 / sizeof(real).
 */
template <typename real> size_t invariantsBackwardAxisShared(const GraphModelParams<real>& model) {
    const int H = (model.lMax + 1) * (model.lMax + 1);
    return sizeof(real) * (2 * H + descriptorDegrees(model) * model.numAxis) * (model.numChannels + 16 / sizeof(real));
}

/** The gradient is staged where the block still fits in the shared memory every launch has without opting in (48 KB). */
constexpr size_t InvariantsBackwardSharedLimit = 48 * 1024;

template <typename real>
void launchInvariantsBackward(const GraphModelParams<real>& model, const real* X, const real* A, const int* rowNodes, int numRows,
                              const real* gradIn, int gradStride, int gradOffset, real* gradX, real* gradA, bool accumulate,
                              cudaStream_t stream) {
    if (numRows == 0)
        return;
    const int H = (model.lMax + 1) * (model.lMax + 1), M = model.numChannels, Maxis = model.numAxis;
    const size_t axisShared = invariantsBackwardAxisShared(model);
    if (M % 4 == 0 && (Maxis == 4 || Maxis == 8 || Maxis == 16) && axisShared <= InvariantsBackwardSharedLimit) {
        // Enough threads for the larger pass: a gradient row each in the first, an entry [lm][k' < M_axis] in the second.
        const int tasks = std::max(descriptorDegrees(model) * M, H * Maxis);
        const int threads = std::min(256, std::max(64, (tasks + 31) / 32 * 32));
        const bool gradVectors = reinterpret_cast<uintptr_t>(gradIn + gradOffset) % 16 == 0 && gradStride * sizeof(real) % 16 == 0;
        dispatchLMax(model.lMax, [&](auto l) {
            constexpr int L = decltype(l)::value;
            auto kernel = Maxis == 4   ? invariantsBackwardAxisKernel<real, L, 4>
                          : Maxis == 8 ? invariantsBackwardAxisKernel<real, L, 8>
                                       : invariantsBackwardAxisKernel<real, L, 16>;
            kernel<<<rowBlocks(numRows), threads, axisShared, stream>>>(model, X, A, rowNodes, numRows, gradIn, gradStride, gradOffset,
                                                                        gradVectors, gradX, gradA, accumulate ? 1 : 0);
        });
        return;
    }
    const bool stage = invariantsBackwardShared(model, true) <= InvariantsBackwardSharedLimit;
    const size_t shared = invariantsBackwardShared(model, stage);
    dispatchLMax(model.lMax, [&](auto l) {
        constexpr int L = decltype(l)::value;
        auto kernel = stage ? invariantsBackwardKernel<real, L, true> : invariantsBackwardKernel<real, L, false>;
        kernel<<<rowBlocks(numRows), 128, shared, stream>>>(model, X, A, rowNodes, numRows, gradIn, gradStride, gradOffset, gradX, gradA,
                                                            accumulate ? 1 : 0);
    });
}

template <typename real>
void launchNodeFeatureGradient(const GraphModelParams<real>& model, const real* gradB, const double* positions, const int* types,
                               const int* nodes, int numNodes, GraphBox<double> box, const int* neighbors, const int* rowCount,
                               int capacity, real* gradPhi, cudaStream_t stream) {
    if (numNodes == 0)
        return;
    const size_t shared = sizeof(real) * WarpsPerBlock * model.numChannels;
    dispatchShape(model.lMax, model.numChannels, [&](auto l, auto cpl) {
        auto kernel = nodeFeatureGradientKernel<real, decltype(l)::value, decltype(cpl)::value>;
        L1Preference::apply(kernel, 32 * WarpsPerBlock, shared); // the table is read through L1
        kernel<<<centerBlocks(numNodes), 32 * WarpsPerBlock, shared, stream>>>(model, gradB, positions, types, nodes, numNodes, box,
                                                                               neighbors, rowCount, capacity, gradPhi);
    });
}

int chooseForceWarps(int n, int numMultiprocessors) {
    return (long long) n * WarpsPerBlock >= 32LL * numMultiprocessors ? WarpsPerBlock : MaxForceWarps;
}

template <typename real>
void launchForces(const GraphModelParams<real>& model, const real* gradA, const real* gradB, const real* phi, const double* positions,
                  const int* types, const int* centers, int numCenters, GraphBox<double> box, const int* neighbors, const int* rowCount,
                  int capacity, const int* slotOfNode, long long* forceBuffer, int paddedAtoms, GraphStatus* status, int warpsPerCenter,
                  cudaStream_t stream) {
    if (numCenters == 0)
        return;
    dispatchEdgeShape<real>(model.lMax, model.numChannels, [&](auto l, auto shape) {
        // At most 48 KB per block (the default limit of dynamic shared memory): the center's gradient (numTables x H x M reals,
        // at most 18 KB: fp64, two tables, l_max 2, 128 channels) and the staged edges, 3.6 KB a warp in float for l_max = 2
        // (3.4 KB in double), so every shape keeps its warps.
        const size_t stage = stageBytes<real, decltype(l)::value, true>();
        const size_t gradient =
            sizeof(real) * (model.numInteractions == 1 ? 2 : 1) * (model.lMax + 1) * (model.lMax + 1) * model.numChannels;
        // Vector shapes work on 32 / LPE edges at once: 4 warps per center are as many edges in flight as 8 of a lane per channel.
        const int most = decltype(shape)::V > 1 ? WarpsPerBlock : MaxForceWarps;
        const int warps = std::max(1, std::min({warpsPerCenter, most, (int) ((48 * 1024 - gradient) / stage)}));
        auto kernel = forcesKernel<real, decltype(l)::value, decltype(shape)>;
        L1Preference::apply(kernel, 32 * warps, warps * stage + gradient); // the table is read through L1
        launchChained(kernel, centerBlocks(numCenters), 32 * warps, warps * stage + gradient, stream, model, gradA, gradB, phi, positions,
                      types, centers, numCenters, box, neighbors, rowCount, capacity, slotOfNode, forceBuffer, paddedAtoms, status);
    });
}

#define GRAPH_INSTANTIATE_EDGES(real)                                                                                                      \
    template void launchMoments<real>(const GraphModelParams<real>&, const real*, const real*, const double*, const int*, const int*, int, \
                                      GraphBox<double>, const int*, const int*, int, real*, cudaStream_t);                                 \
    template void launchInvariants<real>(const GraphModelParams<real>&, const real*, const real*, const int*, int, real*, int, int,        \
                                         cudaStream_t);                                                                                    \
    template void launchInvariantsBackward<real>(const GraphModelParams<real>&, const real*, const real*, const int*, int, const real*,    \
                                                 int, int, real*, real*, bool, cudaStream_t);                                              \
    template void launchNodeFeatureGradient<real>(const GraphModelParams<real>&, const real*, const double*, const int*, const int*, int,  \
                                                  GraphBox<double>, const int*, const int*, int, real*, cudaStream_t);                     \
    template void launchForces<real>(const GraphModelParams<real>&, const real*, const real*, const real*, const double*, const int*,      \
                                     const int*, int, GraphBox<double>, const int*, const int*, int, const int*, long long*, int,          \
                                     GraphStatus*, int, cudaStream_t);
GRAPH_INSTANTIATE_EDGES(float)
GRAPH_INSTANTIATE_EDGES(double)

} // namespace GraphPlugin
