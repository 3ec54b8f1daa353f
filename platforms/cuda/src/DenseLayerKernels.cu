/**
 * Stage 3 of the CUDA pipeline: the fitting and node networks, forward and
 * input-gradient backward, as tiled matrix products over the nodes of one type
 * (rows gathered through a node list) with the bias, activation and residual
 * update fused into the epilogue.  Plain FMA arithmetic in `real` (no tensor
 * cores, no TF32); every output element sums over k in a fixed order, so a
 * node's result does not depend on which other nodes share its tile.
 */

#include "GraphDeviceFunctions.cuh"
#include "GraphKernelLaunch.h"
#include <algorithm>

namespace GraphPlugin {

namespace {

constexpr int TileCols = 64, TileK = 16, SharedPad = 4;

/** W consecutive values from 16-byte aligned (W >= 4, or 8-byte for W = 2 floats) shared memory, as vector loads. */
template <typename real, int W>
__device__ inline void loadShared(const real* p, real out[W]) {
    if constexpr (sizeof(real) == 4 && W == 4) {
        const float4 v = *reinterpret_cast<const float4*>(p);
        out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
    }
    else if constexpr (sizeof(real) == 4 && W == 2) {
        const float2 v = *reinterpret_cast<const float2*>(p);
        out[0] = v.x, out[1] = v.y;
    }
    else if constexpr (sizeof(real) == 8 && W % 2 == 0) {
#pragma unroll
        for (int x = 0; x < W; x += 2) {
            const double2 v = *reinterpret_cast<const double2*>(p + x);
            out[x] = v.x, out[x + 1] = v.y;
        }
    }
    else {
#pragma unroll
        for (int x = 0; x < W; x++)
            out[x] = p[x];
    }
}

int elementBlocks(size_t count) {
    return (int) std::min<size_t>((count + 255) / 256, 65535 * 16);
}


template <typename real>
__device__ inline real activate(int activation, real z) {
    if (activation == GraphTanh)
        return tanh(z);
    if (activation == GraphSilu)
        return z / (1 + exp(-z));
    return z;
}

template <typename real>
__device__ inline real activateDerivative(int activation, real z) {
    if (activation == GraphTanh) {
        real t = tanh(z);
        return 1 - t * t;
    }
    if (activation == GraphSilu) {
        real s = 1 / (1 + exp(-z));
        return s * (1 + z * (1 - s));
    }
    return 1;
}

/** The group of a row tile (linear search over at most MaxBatchedGroups groups). */
template <typename real>
__device__ inline int groupOfTile(const DenseBatch<real>& batch, int tile) {
    int g = 0;
    while (g < batch.numGroups - 1 && tile >= batch.tileStart[g + 1])
        g++;
    return g;
}

template <typename real>
__device__ inline int groupOfRow(const DenseBatch<real>& batch, int row) {
    int g = 0;
    while (g < batch.numGroups - 1 && row >= batch.rowStart[g + 1])
        g++;
    return g;
}

/**
 * C[row][c] = sum_k A[node(row)][k] * B(k, c), B(k, c) = W[c * ldw + k] (forward,
 * W^T) or W[k * ldw + c] (backward, W), W the weights of the row's group.
 * A tile of 16 * RPT rows by 64 columns per block of 256 threads, each thread
 * RPT x 4 outputs; the next k-slice is loaded into registers while the current
 * one is multiplied out of shared memory (double buffered), so a block waits
 * for global memory once per tile instead of once per k-slice.
 * Epilogue:
 * forward:  z = C + bias; preActivation = z; out = act(z) (+ residualSource + timestep * act(z) if residual)
 * backward: out = C (+ residualSource if residual)
 */
template <typename real, bool Forward, int RPT>
__global__ void __launch_bounds__(256) denseGemmKernel(DenseBatch<real> batch, const int* __restrict__ rowNodes, const real* __restrict__ A,
                                                       int aStride, int K, int N, int ldw, int activation, int residual,
                                                       const real* __restrict__ residualSource, int residualStride,
                                                       real* __restrict__ preActivation, real* __restrict__ out, int outStride) {
    constexpr int Rows = 16 * RPT;
    constexpr int ALoads = TileK * Rows / 256, BLoads = TileK * TileCols / 256;
    // Rows padded by 4: 16-byte aligned vector reads in the inner loop, few bank conflicts on the transposed stores.
    __shared__ __align__(16) real As[2][TileK][Rows + SharedPad];
    __shared__ __align__(16) real Bs[2][TileK][TileCols + SharedPad];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int group = groupOfTile(batch, blockIdx.x);
    const int rowBase = batch.rowStart[group] + (blockIdx.x - batch.tileStart[group]) * Rows;
    const int rowEnd = batch.rowStart[group + 1];
    const int colBase = blockIdx.y * TileCols;
    const real* __restrict__ W = batch.weight[group];
    // The A rows this thread loads (fixed over k): element e = threadIdx.x + 256 * m, kk = e % TileK, rr = e / TileK.
    const int aK = threadIdx.x % TileK;
    const real* aRow[ALoads];
#pragma unroll
    for (int m = 0; m < ALoads; m++) {
        const int row = rowBase + (threadIdx.x + 256 * m) / TileK;
        aRow[m] = row < rowEnd ? A + (size_t) rowNodes[row] * aStride : nullptr;
    }
    real aNext[ALoads], bNext[BLoads];
    auto load = [&](int k0) {
#pragma unroll
        for (int m = 0; m < ALoads; m++) {
            const int k = k0 + aK;
            aNext[m] = (aRow[m] != nullptr && k < K) ? aRow[m][k] : real(0);
        }
#pragma unroll
        for (int m = 0; m < BLoads; m++) {
            const int e = threadIdx.x + 256 * m;
            int kk, cc;
            if (Forward)
                kk = e % TileK, cc = e / TileK;
            else
                cc = e % TileCols, kk = e / TileCols;
            const int col = colBase + cc, k = k0 + kk;
            real value = 0;
            if (col < N && k < K)
                value = Forward ? W[(size_t) col * ldw + k] : W[(size_t) k * ldw + col];
            bNext[m] = value;
        }
    };
    auto store = [&](int buffer) {
#pragma unroll
        for (int m = 0; m < ALoads; m++)
            As[buffer][aK][(threadIdx.x + 256 * m) / TileK] = aNext[m];
#pragma unroll
        for (int m = 0; m < BLoads; m++) {
            const int e = threadIdx.x + 256 * m;
            if (Forward)
                Bs[buffer][e % TileK][e / TileK] = bNext[m];
            else
                Bs[buffer][e / TileCols][e % TileCols] = bNext[m];
        }
    };
    real acc[RPT][4] = {};
    load(0);
    store(0);
    __syncthreads();
    int buffer = 0;
    for (int k0 = 0; k0 < K; k0 += TileK) {
        const bool more = k0 + TileK < K;
        if (more)
            load(k0 + TileK);
#pragma unroll
        for (int kk = 0; kk < TileK; kk++) {
            real a[RPT], b[4];
            loadShared<real, RPT>(&As[buffer][kk][ty * RPT], a);
            loadShared<real, 4>(&Bs[buffer][kk][tx * 4], b);
#pragma unroll
            for (int x = 0; x < RPT; x++)
#pragma unroll
                for (int y = 0; y < 4; y++)
                    acc[x][y] = fma(a[x], b[y], acc[x][y]);
        }
        if (more) {
            store(1 - buffer);
            __syncthreads();
            buffer = 1 - buffer;
        }
    }
    const real* __restrict__ bias = batch.bias[group];
    const real* __restrict__ timestep = batch.timestep[group];
#pragma unroll
    for (int x = 0; x < RPT; x++) {
        const int row = rowBase + ty * RPT + x;
        if (row >= rowEnd)
            continue;
        const size_t node = rowNodes[row];
#pragma unroll
        for (int y = 0; y < 4; y++) {
            const int col = colBase + tx * 4 + y;
            if (col >= N)
                continue;
            if (Forward) {
                const real z = acc[x][y] + bias[col];
                const real value = activate(activation, z);
                if (preActivation)
                    preActivation[node * outStride + col] = z;
                out[node * outStride + col] = residual ? residualSource[node * residualStride + col] + timestep[col] * value : value;
            }
            else
                out[node * outStride + col] = acc[x][y] + (residual ? residualSource[node * residualStride + col] : real(0));
        }
    }
}

/** Launches denseGemmKernel with the batch's tile rows. */
template <typename real, bool Forward>
void launchGemm(const DenseBatch<real>& batch, dim3 blocks, cudaStream_t stream, const int* rowNodes, const real* A, int aStride, int K, int N,
                int ldw, int activation, int residual, const real* residualSource, int residualStride, real* preActivation, real* out,
                int outStride) {
#define GRAPH_GEMM(RPT)                                                                                                                      \
    denseGemmKernel<real, Forward, RPT><<<blocks, 256, 0, stream>>>(batch, rowNodes, A, aStride, K, N, ldw, activation, residual,         \
                                                                    residualSource, residualStride, preActivation, out, outStride)
    if (batch.tileRows == 16)
        GRAPH_GEMM(1);
    else if (batch.tileRows == 32)
        GRAPH_GEMM(2);
    else
        GRAPH_GEMM(4);
#undef GRAPH_GEMM
}

template <typename real>
__global__ void gradientThroughActivationKernel(DenseBatch<real> batch, const int* __restrict__ rowNodes, const real* __restrict__ gradOutput,
                                                const real* __restrict__ preActivation, int stride, int width, int activation, int residual,
                                                real* __restrict__ gradZ) {
    const int firstRow = batch.rowStart[0], numRows = batch.rowStart[batch.numGroups] - firstRow;
    for (size_t index = blockIdx.x * (size_t) blockDim.x + threadIdx.x; index < (size_t) numRows * width;
         index += (size_t) gridDim.x * blockDim.x) {
        const int row = firstRow + (int) (index / width);
        const size_t node = rowNodes[row];
        const int col = (int) (index % width);
        const size_t at = node * stride + col;
        const real g = activation == GraphIdentity ? gradOutput[at] : gradOutput[at] * activateDerivative(activation, preActivation[at]);
        gradZ[at] = residual ? g * batch.timestep[groupOfRow(batch, row)][col] : g;
    }
}

template <typename real>
__global__ void energyOutputKernel(DenseBatch<real> batch, const int* __restrict__ rowNodes, const real* __restrict__ hidden, int stride,
                                   int width, real* __restrict__ particleEnergy, real* __restrict__ gradHidden) {
    const int lane = threadIdx.x & 31;
    const int firstRow = batch.rowStart[0], lastRow = batch.rowStart[batch.numGroups];
    for (int row = firstRow + ((blockIdx.x * blockDim.x + threadIdx.x) >> 5); row < lastRow; row += (gridDim.x * blockDim.x) >> 5) {
        const int group = groupOfRow(batch, row);
        const real* __restrict__ weight = batch.weight[group];
        const size_t node = rowNodes[row];
        real sum = 0;
        for (int k = lane; k < width; k += 32) {
            sum += weight[k] * hidden[node * stride + k];
            if (gradHidden)
                gradHidden[node * stride + k] = weight[k];
        }
        sum = warpSum(sum);
        if (lane == 0)
            particleEnergy[node] = sum + batch.bias[group][0] + batch.energyShift[group];
    }
}

template <typename real>
__global__ void energyReductionKernel(const real* __restrict__ particleEnergy, int n, long long* __restrict__ accumulator, GraphStatus* status) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const double e = particleEnergy[i];
        if (!(fabs(e) < FixedPointLimit))
            reportError(status, GraphErrorNonFiniteEnergy, i, -1, e);
        else
            atomicAdd((unsigned long long*) accumulator, (unsigned long long) realToFixedPoint(e));
    }
}

__global__ void energyStoreKernel(const long long* __restrict__ accumulator, void* energyBuffer, int energyIsDouble) {
    const double energy = (double) *accumulator / FixedPointScale;
    if (energyIsDouble)
        ((double*) energyBuffer)[0] += energy;
    else
        ((float*) energyBuffer)[0] += (float) energy;
}

template <typename real>
__global__ void addKernel(const real* __restrict__ in, real* __restrict__ out, size_t count) {
    for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < count; i += (size_t) gridDim.x * blockDim.x)
        out[i] += in[i];
}


} // namespace

int chooseDenseTileRows(int rows, int numOutputs, int numMultiprocessors) {
    const int columnTiles = (numOutputs + TileCols - 1) / TileCols;
    for (int tileRows : DenseTileRowChoices)
        if ((long long) ((rows + tileRows - 1) / tileRows) * columnTiles >= 2LL * numMultiprocessors)
            return tileRows;
    return DenseTileRowChoices[2];
}

template <typename real>
int rowsOf(const DenseBatch<real>& batch) {
    return batch.rowStart[batch.numGroups] - batch.rowStart[0];
}

template <typename real>
void launchDenseForward(const DenseBatch<real>& batch, const int* rowNodes, const real* input, int inStride, int numInputs, int numOutputs,
                        int activation, bool residual, real* preActivation, real* output, int outStride, cudaStream_t stream) {
    const int tiles = batch.tileStart[batch.numGroups];
    if (tiles == 0)
        return;
    dim3 blocks(tiles, (numOutputs + TileCols - 1) / TileCols);
    launchGemm<real, true>(batch, blocks, stream, rowNodes, input, inStride, numInputs, numOutputs, numInputs, activation, residual ? 1 : 0,
                           input, inStride, preActivation, output, outStride);
}

template <typename real>
void launchDenseBackward(const DenseBatch<real>& batch, const int* rowNodes, const real* gradOutput, int outStride, const real* preActivation,
                         int numInputs, int numOutputs, int activation, bool residual, real* gradZ, real* gradInput, int inStride,
                         cudaStream_t stream) {
    const int tiles = batch.tileStart[batch.numGroups];
    if (tiles == 0)
        return;
    gradientThroughActivationKernel<real><<<elementBlocks((size_t) rowsOf(batch) * numOutputs), 256, 0, stream>>>(
        batch, rowNodes, gradOutput, preActivation, outStride, numOutputs, activation, residual ? 1 : 0, gradZ);
    dim3 blocks(tiles, (numInputs + TileCols - 1) / TileCols);
    launchGemm<real, false>(batch, blocks, stream, rowNodes, gradZ, outStride, numOutputs, numInputs, numInputs, GraphIdentity,
                            residual ? 1 : 0, gradOutput, outStride, nullptr, gradInput, inStride);
}

template <typename real>
void launchEnergyOutput(const DenseBatch<real>& batch, const int* rowNodes, const real* hidden, int stride, int width, real* particleEnergy,
                        real* gradHidden, cudaStream_t stream) {
    const int rows = rowsOf(batch);
    if (rows == 0)
        return;
    const int warpsPerBlock = 4;
    const int blocks = (int) std::min<size_t>(((size_t) rows + warpsPerBlock - 1) / warpsPerBlock, 65535 * 8);
    energyOutputKernel<real><<<blocks, 32 * warpsPerBlock, 0, stream>>>(batch, rowNodes, hidden, stride, width, particleEnergy, gradHidden);
}

template <typename real>
void launchEnergyReduction(const real* particleEnergy, int n, long long* energyAccumulator, void* energyBuffer, bool energyIsDouble,
                           GraphStatus* status, cudaStream_t stream) {
    cudaMemsetAsync(energyAccumulator, 0, sizeof(long long), stream);
    if (n > 0)
        energyReductionKernel<real><<<elementBlocks(n), 256, 0, stream>>>(particleEnergy, n, energyAccumulator, status);
    energyStoreKernel<<<1, 1, 0, stream>>>(energyAccumulator, energyBuffer, energyIsDouble ? 1 : 0);
}

template <typename real>
void launchAdd(const real* in, real* out, size_t count, cudaStream_t stream) {
    if (count > 0)
        addKernel<real><<<elementBlocks(count), 256, 0, stream>>>(in, out, count);
}

#define GRAPH_INSTANTIATE_DENSE(real)                                                                                                        \
    template void launchDenseForward<real>(const DenseBatch<real>&, const int*, const real*, int, int, int, int, bool, real*, real*, int,  \
                                           cudaStream_t);                                                                                 \
    template void launchDenseBackward<real>(const DenseBatch<real>&, const int*, const real*, int, const real*, int, int, int, bool,      \
                                            real*, real*, int, cudaStream_t);                                                             \
    template void launchEnergyOutput<real>(const DenseBatch<real>&, const int*, const real*, int, int, real*, real*, cudaStream_t);       \
    template void launchEnergyReduction<real>(const real*, int, long long*, void*, bool, GraphStatus*, cudaStream_t);                     \
    template void launchAdd<real>(const real*, real*, size_t, cudaStream_t);
GRAPH_INSTANTIATE_DENSE(float)
GRAPH_INSTANTIATE_DENSE(double)

} // namespace GraphPlugin
