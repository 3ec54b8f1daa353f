/**
 * Stage 3 of the CUDA pipeline for batches too small to fill the device, on
 * devices with thread-block clusters (sm_90 and later): the whole fitting
 * network of a tile of rows in one cluster of S blocks.  Every block of the
 * cluster works on all of the tile's rows but only on its slice of each
 * layer's columns (clusterSlice), so it needs 1/S of the weights, which it
 * copies into its shared memory once at the start (cp.async, while the
 * moments load) and keeps there, instead of streaming all of them through
 * each product (what v15 found to bound fusedFittingKernel;
 * docs/performance.md has the later probes).  The values a block computes
 * that the others need (the descriptor, each layer's activations, each dE/dz and the descriptor's
 * gradient) it stores into every block's shared memory (distributed shared
 * memory), and a cluster barrier after each stage makes them visible: one
 * barrier per stage, no copies after it.
 *
 * Why one barrier per stage is enough: a stage writes remote buffers that no
 * block reads during that stage; the activations alternate between two
 * buffers and dE/dz between two more, so a block that runs one stage ahead
 * never writes a buffer another block still reads.
 *
 * Every value is formed by the same operations in the same order as in the
 * per-layer kernels (each block sums k over all K inputs in order), so the
 * results are bitwise those of the per-layer path and of fusedFittingKernel.
 */

#include "FusedProduct.cuh"
#include "FusedTileFunctions.cuh"
#include "GraphKernelLaunch.h"
#include "NetworkDeviceFunctions.cuh"
#include <algorithm>
#include <cooperative_groups.h>

namespace GraphPlugin {

namespace {

namespace cg = cooperative_groups;

/**
 * The product with B (this block's slice, [K][ldb]) resident in shared
 * memory, with as many threads per row as the slice has columns (ldb = the
 * slice's padded width, at most 128), so that all threads work on narrow
 * slices; the host keeps R x ldb <= 2048 (at most 8 rows a thread).
 */
template <typename real, int R, typename Epilogue>
__device__ inline void slicedProduct(const real* B, int K, int C, int ldb, const real* in, int inStride, Epilogue epilogue) {
    if (ldb <= 16)
        streamedProduct<real, R, 16, 1, FusedWeights::ResidentPlain>(B, K, C, ldb, in, inStride, nullptr, 0, epilogue);
    else if (ldb <= 32)
        streamedProduct<real, R, 32, 1, FusedWeights::ResidentPlain>(B, K, C, ldb, in, inStride, nullptr, 0, epilogue);
    else if constexpr (R <= 32) {
        if (ldb <= 64)
            streamedProduct<real, R, 64, 1, FusedWeights::ResidentPlain>(B, K, C, ldb, in, inStride, nullptr, 0, epilogue);
        else if constexpr (R <= 16)
            streamedProduct<real, R, 128, 1, FusedWeights::ResidentPlain>(B, K, C, ldb, in, inStride, nullptr, 0, epilogue);
    }
}

template <typename real, int R>
__global__ void __launch_bounds__(FusedThreads)
    clusterFittingKernel(GraphModelParams<real> model, FusedNetworkShape shape, const FusedNetworkWeights<real>* __restrict__ groups,
                         const int* __restrict__ rowNodes, const real* __restrict__ moments, real* __restrict__ particleEnergy,
                         real* __restrict__ gradMoments, GraphStatus* status, int withForces) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cg::cluster_group cluster = cg::this_cluster();
    const int S = (int) cluster.num_blocks(), rank = (int) cluster.block_rank();
    extern __shared__ __align__(16) unsigned char sharedBytes[];
    real* shared = reinterpret_cast<real*>(sharedBytes);
    const int H = (model.lMax + 1) * (model.lMax + 1), HM = H * model.numChannels;
    const int D = shape.width[0], L = shape.numLayers;
    const int warp = threadIdx.x >> 5;
    const int tile = blockIdx.x / S;
    const int group = groupOf(shape.tileStart, shape.numGroups, tile);
    const int rowBase = shape.rowStart[group] + (tile - shape.tileStart[group]) * R;
    const int rows = min(R, shape.rowStart[group + 1] - rowBase);
    const FusedNetworkWeights<real>& net = groups[group];
    real* A = shared + shape.momentsOffset;
    const int strideA = fusedPadded<real>(HM);
    real* input = shared + shape.inputOffset; // the descriptor, later its gradient
    const int strideD = fusedPadded<real>(D);
    // This block's columns [first, first + count) of a layer of `width` units; returns the slice's padded width.
    auto slice = [&](int width, int& first, int& count) {
        const int q = clusterSlice<real>(width, S);
        first = rank * q;
        count = max(0, min(width, first + q) - first);
        return q;
    };
    // Stores a value at `index` of the array at `local` in every block of the cluster (this one included).
    auto toAll = [&](real* local, int index, real value) {
        for (int b = 0; b < S; b++)
            cluster.map_shared_rank(local, b)[index] = value;
    };

    // This block's slices of every layer's weights, into shared memory once (they stay for the whole evaluation).
    constexpr int V = fusedVector<real>();
    for (int l = 0; l < L; l++) {
        const int K = shape.width[l], N = shape.width[l + 1], qN = clusterSlice<real>(N, S), qK = clusterSlice<real>(K, S);
        const real* forward = net.forward[l] + (size_t) rank * K * qN;
        const real* backward = net.backward[l] + (size_t) rank * N * qK;
        for (int e = threadIdx.x * V; e < K * qN; e += FusedThreads * V)
            __pipeline_memcpy_async(shared + shape.weightOffset[l] + e, forward + e, 16);
        if (withForces)
            for (int e = threadIdx.x * V; e < N * qK; e += FusedThreads * V)
                __pipeline_memcpy_async(shared + shape.weightOffset[MaxFusedLayers + l] + e, backward + e, 16);
    }
    __pipeline_commit();

    // The rows' moments (zero for the rows past the group's end: finite values that are never written out).
    loadTileMoments<real, R>(moments, rowNodes + rowBase, rows, HM, A, strideA, threadIdx.x, FusedThreads);
    __pipeline_wait_prior(0); // this thread's weight copies; the barrier below makes them everyone's
    cluster.sync();           // the moments and weights are in, and every block of the cluster has started (before any remote store)
    {
        int first, count;
        slice(D, first, count);
        for (int e = threadIdx.x; e < R * count; e += FusedThreads) {
            const int r = e / count, flat = first + e % count;
            toAll(input, r * strideD + flat, invariantValue(model, A + r * strideA, A + r * strideA, flat));
        }
    }
    cluster.sync();

    // Forward: h_l = act(W_l h_(l-1) + b_l) (+ h_(l-1) residual), alternating between buffers 0 and 1; act'(z) of this
    // block's columns only (the backward needs no others).
    const real* h = input;
    int strideH = strideD;
    for (int l = 0; l < L; l++) {
        real* out = shared + shape.bufferOffset[l % 2];
        real* deriv = shared + shape.derivOffset[l];
        const int K = shape.width[l], C = shape.width[l + 1], strideOut = fusedPadded<real>(C);
        int first, count;
        const int q = slice(C, first, count);
        const bool residual = shape.residual[l] != 0;
        const real* __restrict__ bias = net.bias[l];
        const real* __restrict__ timestep = net.timestep[l];
        slicedProduct<real, R>(shared + shape.weightOffset[l], K, count, q, h, strideH, [&](int r, int c, real acc) {
                                   const int col = first + c;
                                   toAll(out, r * strideOut + col,
                                         denseForwardValue(shape.activation, residual, acc, bias[col], residual ? timestep[col] : real(0),
                                                           residual ? h[r * strideH + col] : real(0), &deriv[r * q + c]));
                               });
        cluster.sync();
        h = out;
        strideH = strideOut;
    }

    // The energy output: a warp per row, the rows shared among the cluster's blocks.
    const int W = shape.width[L];
    tileEnergies(net, h, strideH, W, rowNodes + rowBase, rows, rank * (FusedThreads / 32) + warp, S * (FusedThreads / 32), particleEnergy,
                 status);
    if (!withForces)
        return; // no store into another block follows the last barrier

    // Backward: dE/dh_(L-1) = w (this block's columns), then through the layers to dE/d(descriptor) (into `input`, in
    // every block); dE/dz in buffers 2 and 3 by turns, in every block.
    int gBuffer = L % 2; // the buffer that h_(L-1) is not in
    real* g = shared + shape.bufferOffset[gBuffer];
    {
        int first, count;
        slice(W, first, count);
        for (int e = threadIdx.x; e < R * count; e += FusedThreads)
            g[(e / count) * strideH + first + e % count] = net.outputWeight[first + e % count];
    }
    __syncthreads();
    for (int l = L - 1; l >= 0; l--) {
        const int N = shape.width[l + 1], K = shape.width[l], strideN = fusedPadded<real>(N);
        const bool residual = shape.residual[l] != 0;
        const real* deriv = shared + shape.derivOffset[l];
        const real* __restrict__ timestep = net.timestep[l];
        real* dz = shared + shape.bufferOffset[2 + (l & 1)];
        int nFirst, nCount;
        const int qN = slice(N, nFirst, nCount);
        for (int e = threadIdx.x; e < R * nCount; e += FusedThreads) {
            const int r = e / nCount, c = e % nCount, n = nFirst + c;
            toAll(dz, r * strideN + n,
                  denseOutputGradient(shape.activation, residual, g[r * strideN + n], deriv[r * qN + c], residual ? timestep[n] : real(1)));
        }
        cluster.sync();
        gBuffer = 1 - gBuffer;
        real* target = shared + shape.bufferOffset[gBuffer]; // l > 0: this block's columns of dE/dh_(l-1)
        const int strideK = fusedPadded<real>(K);
        int kFirst, kCount;
        const int qK = slice(K, kFirst, kCount);
        slicedProduct<real, R>(shared + shape.weightOffset[MaxFusedLayers + l], N, kCount, qK, dz, strideN, [&](int r, int c, real acc) {
                                   const int k = kFirst + c;
                                   const real value = denseInputGradient(residual, acc, residual ? g[r * strideN + k] : real(0));
                                   if (l == 0)
                                       toAll(input, r * strideD + k, value);
                                   else
                                       target[r * strideK + k] = value;
                               });
        g = target;
    }
    cluster.sync(); // the descriptor's gradient is whole in every block; no remote store follows

    // dE/dA from the descriptor's gradient, the entries shared among the cluster's blocks.
    tileMomentGradients<real, R>(model, A, strideA, input, strideD, rowNodes + rowBase, rows, HM, rank * FusedThreads + threadIdx.x,
                                 S * FusedThreads, gradMoments);
#endif
}

/** The kernel for tiles of `rows` rows (16, 32 or 64). */
template <typename real> auto clusterKernel(int rows) {
    return rows == 16 ? clusterFittingKernel<real, 16> : rows == 32 ? clusterFittingKernel<real, 32> : clusterFittingKernel<real, 64>;
}

template <typename real>
cudaLaunchConfig_t clusterConfig(const FusedNetworkShape& shape, int tiles, cudaStream_t stream, cudaLaunchAttribute& attribute) {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(tiles * shape.clusterSize);
    config.blockDim = dim3(FusedThreads);
    config.dynamicSmemBytes = (size_t) shape.totalElements * sizeof(real);
    config.stream = stream;
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = shape.clusterSize;
    attribute.val.clusterDim.y = 1;
    attribute.val.clusterDim.z = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
    return config;
}

} // namespace

size_t clusterLayout(FusedNetworkShape& shape, int momentEntries, int realSize) {
    const int V = 16 / realSize, S = shape.clusterSize;
    auto slice = [&](int w) { return ((w + S - 1) / S + V - 1) / V * V; }; // clusterSlice
    int offset = fusedTileArrays(shape, momentEntries, realSize, 4);
    // The block's weight slices, resident: W^T [K][slice(N)] and W [N][slice(K)] of each layer.
    for (int l = 0; l < shape.numLayers; l++) {
        const int K = shape.width[l], N = shape.width[l + 1];
        shape.weightOffset[l] = offset;
        offset += K * slice(N);
        shape.weightOffset[MaxFusedLayers + l] = offset;
        offset += N * slice(K);
    }
    shape.stageOffset = offset;
    shape.stageElements = 0;
    shape.totalElements = offset;
    shape.residentFrom = shape.numLayers; // the one-block kernel's resident layers: none here
    return (size_t) shape.totalElements * realSize;
}

template <typename real> int configureClusterFitting(const FusedNetworkShape& shape, int maxSharedBytes) {
    bool ok = true;
    for (int rows : {16, 32, 64}) {
        ok = ok &&
             cudaFuncSetAttribute(clusterKernel<real>(rows), cudaFuncAttributeMaxDynamicSharedMemorySize, maxSharedBytes) == cudaSuccess;
        ok = ok && cudaFuncSetAttribute(clusterKernel<real>(rows), cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess;
    }
    int clusters = 0;
    cudaLaunchAttribute attribute;
    const cudaLaunchConfig_t config = clusterConfig<real>(shape, 1, nullptr, attribute);
    if (!ok || cudaOccupancyMaxActiveClusters(&clusters, clusterKernel<real>(shape.tileRows), &config) != cudaSuccess)
        clusters = 0;
    cudaGetLastError(); // a failure is reported as 0 clusters, not left for the next launch's check
    return clusters;
}

template <typename real> bool clusterFittingCompiled() {
    cudaFuncAttributes attributes;
    const bool compiled = cudaFuncGetAttributes(&attributes, clusterKernel<real>(16)) == cudaSuccess && attributes.ptxVersion >= 90;
    cudaGetLastError();
    return compiled;
}

template <typename real>
void launchClusterFitting(const GraphModelParams<real>& model, const FusedNetworkShape& shape, const FusedNetworkWeights<real>* groups,
                          const int* rowNodes, const real* moments, real* particleEnergy, real* gradMoments, GraphStatus* status,
                          bool withForces, cudaStream_t stream) {
    const int tiles = shape.tileStart[shape.numGroups];
    if (tiles == 0)
        return;
    cudaLaunchAttribute attribute;
    const cudaLaunchConfig_t config = clusterConfig<real>(shape, tiles, stream, attribute);
    // A failed launch leaves its error for the caller's cudaGetLastError().
    cudaLaunchKernelEx(&config, clusterKernel<real>(shape.tileRows), model, shape, groups, rowNodes, moments, particleEnergy, gradMoments,
                       status, withForces ? 1 : 0);
}

#define GRAPH_INSTANTIATE_CLUSTER(real)                                                                                                    \
    template int configureClusterFitting<real>(const FusedNetworkShape&, int);                                                             \
    template bool clusterFittingCompiled<real>();                                                                                          \
    template void launchClusterFitting<real>(const GraphModelParams<real>&, const FusedNetworkShape&, const FusedNetworkWeights<real>*,    \
                                             const int*, const real*, real*, real*, GraphStatus*, bool, cudaStream_t);
GRAPH_INSTANTIATE_CLUSTER(float)
GRAPH_INSTANTIATE_CLUSTER(double)

} // namespace GraphPlugin
