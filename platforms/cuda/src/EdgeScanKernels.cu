/**
 * Stages 2 and 4 of the CUDA pipeline: the edge scans.  One block per center;
 * its warps walk contiguous chunks of the canonical row in order and the block
 * adds the chunks in warp order; lane k handles channels k, k + 32, ...
 * (M <= 32 * MaxChannelsPerLane), evaluating the radial tables and harmonics on
 * the fly (no per-edge features in global memory).  Sums over a row are taken
 * in canonical order and reductions over lanes in a fixed butterfly, so every
 * result is bitwise reproducible; forces go into OpenMM's buffer with 64-bit
 * integer atomics, which are order independent.
 */

#include "GraphDeviceFunctions.cuh"
#include "GraphKernelLaunch.h"
#include <algorithm>
#include <type_traits>

namespace GraphPlugin {

namespace {

constexpr int WarpsPerBlock = 4;

/**
 * The edge (i, j): d = x_j - x_i (minimum image) in double, then r and u
 * rounded to `real`: the same for any image OpenMM keeps the particles in.
 */
template <typename real>
__device__ inline real edgeGeometry(const double* positions, int i, int j, const GraphBox<double>& box, real u[3]) {
    double d[3] = {positions[3 * j] - positions[3 * i], positions[3 * j + 1] - positions[3 * i + 1],
                   positions[3 * j + 2] - positions[3 * i + 2]};
    minimumImage(d, box);
    const double r = sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
    for (int c = 0; c < 3; c++)
        u[c] = (real) (d[c] / r);
    return (real) r;
}

/**
 * The edges [first, last) of a row that warp `warp` of `numWarps` handles: a
 * contiguous chunk, so each warp sums its chunk in canonical order and the
 * block adds the chunks in warp order (deterministic for a given row).
 */
__device__ inline void rowChunk(int count, int warp, int numWarps, int& first, int& last) {
    const int chunk = (count + numWarps - 1) / numWarps;
    first = min(count, warp * chunk);
    last = min(count, first + chunk);
}

/**
 * One block per center, WarpsPerBlock warps over contiguous chunks of its row;
 * lane k of a warp handles channels k, k + 32, ... (CPL per lane).
 */
template <typename real, int LMAX, int CPL>
__global__ void __launch_bounds__(32 * WarpsPerBlock) momentsKernel(GraphModelParams<real> model, const real* __restrict__ table,
                                                                     const real* __restrict__ nodeWeights, const double* __restrict__ positions,
                                                                     const int* __restrict__ types, int n, GraphBox<double> box,
                                                                     const int* __restrict__ neighbors, const int* __restrict__ rowCount,
                                                                     int capacity, real* __restrict__ moments) {
    constexpr int H = (LMAX + 1) * (LMAX + 1);
    extern __shared__ unsigned char sharedBytes[];
    real* partial = reinterpret_cast<real*>(sharedBytes); // [WarpsPerBlock][H][M]
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int M = model.numChannels;
    for (int i = blockIdx.x; i < n; i += gridDim.x) {
        real acc[H][CPL];
#pragma unroll
        for (int lm = 0; lm < H; lm++)
#pragma unroll
            for (int c = 0; c < CPL; c++)
                acc[lm][c] = 0;
        const int ti = types[i];
        int first, last;
        rowChunk(rowCount[i], warp, WarpsPerBlock, first, last);
        for (int e = first; e < last; e++) {
            const int j = neighbors[(size_t) i * capacity + e];
            real u[3], Y[MaxHarmonics], grad[MaxHarmonics][3];
            const real r = edgeGeometry(positions, i, j, box, u);
            harmonics(LMAX, u, Y, grad);
            const HermiteBasis<real> basis(r, model);
            const int tj = types[j];
#pragma unroll
            for (int c = 0; c < CPL; c++) {
                const int k = lane + 32 * c;
                if (k < M) {
                    const real weight = nodeWeights ? nodeWeights[(size_t) j * M + k] : real(1);
#pragma unroll
                    for (int l = 0; l <= LMAX; l++) {
                        real value, deriv;
                        basis.evaluate(table, model, ti, tj, l, k, value, deriv);
                        value *= weight;
#pragma unroll
                        for (int lm = l * l; lm < (l + 1) * (l + 1); lm++)
                            acc[lm][c] += value * Y[lm];
                    }
                }
            }
        }
#pragma unroll
        for (int c = 0; c < CPL; c++) {
            const int k = lane + 32 * c;
            if (k < M)
#pragma unroll
                for (int lm = 0; lm < H; lm++)
                    partial[(warp * H + lm) * M + k] = acc[lm][c];
        }
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

template <typename real>
__global__ void invariantsKernel(GraphModelParams<real> model, const real* __restrict__ X, const real* __restrict__ A, int n,
                                 real* __restrict__ out, int outStride, int outOffset) {
    const int M = model.numChannels, Maxis = model.numAxis, H = (model.lMax + 1) * (model.lMax + 1);
    const int perDegree = M * Maxis;
    const int size = model.descriptorSize;
    for (size_t index = blockIdx.x * (size_t) blockDim.x + threadIdx.x; index < (size_t) n * size; index += (size_t) gridDim.x * blockDim.x) {
        const int i = (int) (index / size), flat = (int) (index % size);
        const int kp = flat % Maxis, k = (flat / Maxis) % M;
        const int lFirst = model.descriptorLSum ? 0 : flat / perDegree;
        const int lLast = model.descriptorLSum ? model.lMax : lFirst;
        const real* Xi = X + (size_t) i * H * M;
        const real* Ai = A + (size_t) i * H * M;
        real sum = 0;
        for (int l = lFirst; l <= lLast; l++)
            for (int lm = l * l; lm < (l + 1) * (l + 1); lm++)
                sum += Xi[lm * M + k] * Ai[lm * M + kp];
        out[(size_t) i * outStride + outOffset + flat] = sum;
    }
}

/** dD[l][k][k'] from the gradient array (same flat index as the invariants). */
template <typename real>
__device__ inline real descriptorGradient(const GraphModelParams<real>& model, const real* g, int l, int k, int kp) {
    const int M = model.numChannels, Maxis = model.numAxis;
    const int base = model.descriptorLSum ? 0 : l * M * Maxis;
    return g[base + k * Maxis + kp];
}

template <typename real>
__global__ void invariantsBackwardKernel(GraphModelParams<real> model, const real* __restrict__ X, const real* __restrict__ A,
                                         const real* __restrict__ gradIn, int gradStride, int gradOffset, int n, real* __restrict__ gradX,
                                         real* __restrict__ gradA, int accumulate) {
    const int M = model.numChannels, Maxis = model.numAxis, H = (model.lMax + 1) * (model.lMax + 1);
    const bool same = X == A;
    for (size_t index = blockIdx.x * (size_t) blockDim.x + threadIdx.x; index < (size_t) n * H * M; index += (size_t) gridDim.x * blockDim.x) {
        const int i = (int) (index / (H * M)), lm = (int) ((index / M) % H), k = (int) (index % M);
        const int l = degreeOf(lm);
        const real* g = gradIn + (size_t) i * gradStride + gradOffset;
        const real* Xi = X + (size_t) i * H * M;
        const real* Ai = A + (size_t) i * H * M;
        // Channel k as the first factor (X[lm][k]) ...
        real gx = 0;
        for (int kp = 0; kp < Maxis; kp++)
            gx += descriptorGradient(model, g, l, k, kp) * Ai[lm * M + kp];
        // ... and as the second (A[lm][k], k < M_axis).
        real ga = 0;
        if (k < Maxis)
            for (int kk = 0; kk < M; kk++)
                ga += descriptorGradient(model, g, l, kk, k) * Xi[lm * M + kk];
        const size_t out = (size_t) i * H * M + lm * M + k;
        if (same) {
            gradA[out] = (accumulate ? gradA[out] : real(0)) + gx + ga;
        }
        else {
            gradX[out] = (accumulate ? gradX[out] : real(0)) + gx;
            gradA[out] = (accumulate ? gradA[out] : real(0)) + ga;
        }
    }
}

template <typename real, int LMAX, int CPL>
__global__ void __launch_bounds__(32 * WarpsPerBlock)
    nodeFeatureGradientKernel(GraphModelParams<real> model, const real* __restrict__ gradB, const double* __restrict__ positions,
                              const int* __restrict__ types, int n, GraphBox<double> box, const int* __restrict__ neighbors,
                              const int* __restrict__ rowCount, int capacity, real* __restrict__ gradPhi) {
    constexpr int H = (LMAX + 1) * (LMAX + 1);
    extern __shared__ unsigned char sharedBytes[];
    real* partial = reinterpret_cast<real*>(sharedBytes); // [WarpsPerBlock][M]
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int M = model.numChannels;
    for (int j = blockIdx.x; j < n; j += gridDim.x) {
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

template <typename real, int LMAX, int CPL>
__global__ void __launch_bounds__(32 * WarpsPerBlock)
    forcesKernel(GraphModelParams<real> model, const real* __restrict__ gradA, const real* __restrict__ gradB, const real* __restrict__ phi,
                 const double* __restrict__ positions, const int* __restrict__ types, int n, GraphBox<double> box,
                 const int* __restrict__ neighbors, const int* __restrict__ rowCount, int capacity, const int* __restrict__ slotOfNode,
                 long long* __restrict__ forceBuffer, int paddedAtoms, GraphStatus* status) {
    constexpr int H = (LMAX + 1) * (LMAX + 1);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int M = model.numChannels;
    const int numBlocks = model.numInteractions == 1 ? 2 : 1;
    for (int i = blockIdx.x; i < n; i += gridDim.x) {
        const int ti = types[i];
        int first, last;
        rowChunk(rowCount[i], warp, WarpsPerBlock, first, last);
        real forceI[3] = {0, 0, 0};
        for (int e = first; e < last; e++) {
            const int j = neighbors[(size_t) i * capacity + e];
            real u[3], Y[MaxHarmonics], grad[MaxHarmonics][3];
            const real r = edgeGeometry(positions, i, j, box, u);
            harmonics(LMAX, u, Y, grad);
            const HermiteBasis<real> basis(r, model);
            const int tj = types[j];
            real sumValue[H], sumDeriv[H];
#pragma unroll
            for (int lm = 0; lm < H; lm++)
                sumValue[lm] = sumDeriv[lm] = 0;
            for (int block = 0; block < numBlocks; block++) {
                const real* table = block == 0 ? model.radialTable : model.interactionTable;
                const real* G = (block == 0 ? gradA : gradB) + (size_t) i * H * M;
#pragma unroll
                for (int c = 0; c < CPL; c++) {
                    const int k = lane + 32 * c;
                    if (k < M) {
                        const real weight = block == 0 ? real(1) : phi[(size_t) j * M + k];
#pragma unroll
                        for (int l = 0; l <= LMAX; l++) {
                            real value, deriv;
                            basis.evaluate(table, model, ti, tj, l, k, value, deriv);
                            value *= weight;
                            deriv *= weight;
#pragma unroll
                            for (int lm = l * l; lm < (l + 1) * (l + 1); lm++) {
                                sumValue[lm] += G[lm * M + k] * value;
                                sumDeriv[lm] += G[lm * M + k] * deriv;
                            }
                        }
                    }
                }
            }
            // dE/dd = (1/n_norm) sum_lm [ P_lm Y_lm u + S_lm (dY/du - u (u . dY/du)) / r ]
            real g[3] = {0, 0, 0};
#pragma unroll
            for (int lm = 0; lm < H; lm++) {
                const real S = warpSum(sumValue[lm]), P = warpSum(sumDeriv[lm]);
                const real uDotGrad = u[0] * grad[lm][0] + u[1] * grad[lm][1] + u[2] * grad[lm][2];
#pragma unroll
                for (int c = 0; c < 3; c++)
                    g[c] += P * Y[lm] * u[c] + S * (grad[lm][c] - u[c] * uDotGrad) / r;
            }
            if (lane == 0) {
                const int slot = slotOfNode[j];
#pragma unroll
                for (int c = 0; c < 3; c++) {
                    const real gc = g[c] * model.invNorm;
                    if (!(fabs((double) gc) < FixedPointLimit))
                        reportError(status, GraphErrorForceOutOfRange, i, j, (double) gc);
                    forceI[c] += gc;
                    atomicAdd((unsigned long long*) &forceBuffer[slot + c * paddedAtoms], (unsigned long long) realToFixedPoint(-(double) gc));
                }
            }
        }
        // Each warp adds its chunk's share of F_i (integer atomics: order independent).
        if (lane == 0 && last > first) {
            const int slot = slotOfNode[i];
#pragma unroll
            for (int c = 0; c < 3; c++)
                atomicAdd((unsigned long long*) &forceBuffer[slot + c * paddedAtoms], (unsigned long long) realToFixedPoint((double) forceI[c]));
        }
    }
}

int elementBlocks(size_t count) {
    return (int) std::min<size_t>((count + 255) / 256, 65535 * 16);
}

} // namespace

/** Calls body.template operator()<LMAX, CPL>() for the model's L and channels per lane. */
template <typename Body>
void dispatchShape(int lMax, int numChannels, Body body) {
    const int cpl = (numChannels + 31) / 32;
    auto withL = [&](auto lTag) {
        constexpr int L = decltype(lTag)::value;
        if (cpl <= 1)
            body(std::integral_constant<int, L>(), std::integral_constant<int, 1>());
        else if (cpl <= 2)
            body(std::integral_constant<int, L>(), std::integral_constant<int, 2>());
        else
            body(std::integral_constant<int, L>(), std::integral_constant<int, 4>());
    };
    if (lMax == 0)
        withL(std::integral_constant<int, 0>());
    else if (lMax == 1)
        withL(std::integral_constant<int, 1>());
    else
        withL(std::integral_constant<int, 2>());
}

int centerBlocks(int n) {
    return std::max(1, std::min(n, 65535 * 16));
}

template <typename real>
void launchMoments(const GraphModelParams<real>& model, const real* table, const real* nodeWeights, const double* positions, const int* types,
                   int n, GraphBox<double> box, const int* neighbors, const int* rowCount, int capacity, real* moments, cudaStream_t stream) {
    const size_t shared = sizeof(real) * WarpsPerBlock * (model.lMax + 1) * (model.lMax + 1) * model.numChannels;
    dispatchShape(model.lMax, model.numChannels, [&](auto l, auto cpl) {
        momentsKernel<real, decltype(l)::value, decltype(cpl)::value><<<centerBlocks(n), 32 * WarpsPerBlock, shared, stream>>>(
            model, table, nodeWeights, positions, types, n, box, neighbors, rowCount, capacity, moments);
    });
}

template <typename real>
void launchInvariants(const GraphModelParams<real>& model, const real* X, const real* A, int n, real* out, int outStride, int outOffset,
                      cudaStream_t stream) {
    invariantsKernel<real><<<elementBlocks((size_t) n * model.descriptorSize), 256, 0, stream>>>(model, X, A, n, out, outStride, outOffset);
}

template <typename real>
void launchInvariantsBackward(const GraphModelParams<real>& model, const real* X, const real* A, const real* gradIn, int gradStride,
                              int gradOffset, int n, real* gradX, real* gradA, bool accumulate, cudaStream_t stream) {
    const int H = (model.lMax + 1) * (model.lMax + 1);
    invariantsBackwardKernel<real><<<elementBlocks((size_t) n * H * model.numChannels), 256, 0, stream>>>(
        model, X, A, gradIn, gradStride, gradOffset, n, gradX, gradA, accumulate ? 1 : 0);
}

template <typename real>
void launchNodeFeatureGradient(const GraphModelParams<real>& model, const real* gradB, const double* positions, const int* types, int n,
                               GraphBox<double> box, const int* neighbors, const int* rowCount, int capacity, real* gradPhi,
                               cudaStream_t stream) {
    const size_t shared = sizeof(real) * WarpsPerBlock * model.numChannels;
    dispatchShape(model.lMax, model.numChannels, [&](auto l, auto cpl) {
        nodeFeatureGradientKernel<real, decltype(l)::value, decltype(cpl)::value><<<centerBlocks(n), 32 * WarpsPerBlock, shared, stream>>>(
            model, gradB, positions, types, n, box, neighbors, rowCount, capacity, gradPhi);
    });
}

template <typename real>
void launchForces(const GraphModelParams<real>& model, const real* gradA, const real* gradB, const real* phi, const double* positions,
                  const int* types, int n, GraphBox<double> box, const int* neighbors, const int* rowCount, int capacity,
                  const int* slotOfNode, long long* forceBuffer, int paddedAtoms, GraphStatus* status, cudaStream_t stream) {
    dispatchShape(model.lMax, model.numChannels, [&](auto l, auto cpl) {
        forcesKernel<real, decltype(l)::value, decltype(cpl)::value><<<centerBlocks(n), 32 * WarpsPerBlock, 0, stream>>>(
            model, gradA, gradB, phi, positions, types, n, box, neighbors, rowCount, capacity, slotOfNode, forceBuffer, paddedAtoms, status);
    });
}

#define GRAPH_INSTANTIATE_EDGES(real)                                                                                                        \
    template void launchMoments<real>(const GraphModelParams<real>&, const real*, const real*, const double*, const int*, int,             \
                                      GraphBox<double>, const int*, const int*, int, real*, cudaStream_t);                                  \
    template void launchInvariants<real>(const GraphModelParams<real>&, const real*, const real*, int, real*, int, int, cudaStream_t);    \
    template void launchInvariantsBackward<real>(const GraphModelParams<real>&, const real*, const real*, const real*, int, int, int,     \
                                                 real*, real*, bool, cudaStream_t);                                                       \
    template void launchNodeFeatureGradient<real>(const GraphModelParams<real>&, const real*, const double*, const int*, int,             \
                                                  GraphBox<double>, const int*, const int*, int, real*, cudaStream_t);                      \
    template void launchForces<real>(const GraphModelParams<real>&, const real*, const real*, const real*, const double*, const int*, int, \
                                     GraphBox<double>, const int*, const int*, int, const int*, long long*, int, GraphStatus*,             \
                                     cudaStream_t);
GRAPH_INSTANTIATE_EDGES(float)
GRAPH_INSTANTIATE_EDGES(double)

} // namespace GraphPlugin
