#include "GraphDeviceFunctions.cuh"
#include "TorchGraphKernels.h"
#include <algorithm>
#include <cub/device/device_scan.cuh>

namespace GraphPlugin {

namespace {

constexpr int WarpsPerBlock = 8;

int warpBlocks(int n) {
    return std::max(1, std::min((n + WarpsPerBlock - 1) / WarpsPerBlock, 65535 * 8));
}

__global__ void widenCountsKernel(const int* __restrict__ rowCount, int n, int capacity, long long* __restrict__ counts,
                                  long long* __restrict__ scanned) {
    // A row longer than the capacity (the caller grows and recomputes) holds only `capacity` neighbours.
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        counts[i] = min(rowCount[i], capacity);
    if (blockIdx.x == 0 && threadIdx.x == 0)
        scanned[0] = 0;
}

template <typename real>
__global__ void graphInputsKernel(const double* __restrict__ x, const int* __restrict__ rows, const int* __restrict__ rowCount,
                                  int capacity, const long long* __restrict__ scanned, int n, GraphBox<double> box, double toModel,
                                  double paddingLength, long long edgeCapacity, int writeBox, real* __restrict__ positions,
                                  long long* __restrict__ rowOffsets, long long* __restrict__ neighbors, real* __restrict__ edgeVectors,
                                  real* __restrict__ boxOut, GraphStatus* __restrict__ status) {
    const int lane = threadIdx.x & 31;
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, numWarps = (gridDim.x * blockDim.x) >> 5;
    const long long total = scanned[n];
    // Rows: one warp per center.
    for (int i = warp; i < n; i += numWarps) {
        const long long base = scanned[i];
        const int count = min(rowCount[i], capacity);
        if (lane < 3)
            positions[3 * i + lane] = (real) (x[3 * i + lane] * toModel);
        if (lane == 0)
            rowOffsets[i] = min(base, edgeCapacity);
        for (int e = lane; e < count; e += 32) {
            const long long slot = base + e;
            if (slot >= edgeCapacity)
                break;
            const int j = rows[(size_t) i * capacity + e];
            double d[3] = {x[3 * j] - x[3 * i], x[3 * j + 1] - x[3 * i + 1], x[3 * j + 2] - x[3 * i + 2]};
            minimumImage(d, box);
            neighbors[slot] = j;
            for (int c = 0; c < 3; c++)
                edgeVectors[3 * slot + c] = (real) (d[c] * toModel);
        }
    }
    // Padding: the edges past the graph's, self-edges of particle n beyond the cut-off.
    const int thread = blockIdx.x * blockDim.x + threadIdx.x, numThreads = gridDim.x * blockDim.x;
    for (long long e = min(total, edgeCapacity) + thread; e < edgeCapacity; e += numThreads) {
        neighbors[e] = n;
        edgeVectors[3 * e] = (real) paddingLength;
        edgeVectors[3 * e + 1] = 0;
        edgeVectors[3 * e + 2] = 0;
    }
    if (thread == 0) {
        rowOffsets[n] = min(total, edgeCapacity);
        rowOffsets[n + 1] = edgeCapacity;
        positions[3 * n] = positions[3 * n + 1] = positions[3 * n + 2] = 0;
        status->edgeCount = total;
        if (writeBox) {
            const double* vectors[3] = {box.a, box.b, box.c};
            for (int a = 0; a < 3; a++)
                for (int c = 0; c < 3; c++)
                    boxOut[3 * a + c] = (real) (box.periodic ? vectors[a][c] * toModel : 0.0);
        }
    }
}

/** Add one contribution (kJ/mol/nm) to OpenMM's fixed-point buffer, or report it when it is out of range. */
__device__ inline void addForce(double f, int slot, int component, int paddedAtoms, long long* forceBuffer, GraphStatus* status, int i,
                                int j) {
    if (!(fabs(f) <= FixedPointLimit)) {
        reportError(status, GraphErrorForceOutOfRange, i, j, f);
        return;
    }
    atomicAdd((unsigned long long*) &forceBuffer[slot + component * paddedAtoms], (unsigned long long) realToFixedPoint(f));
}

template <typename real>
__global__ void forcesKernel(const real* __restrict__ gradEdges, const real* __restrict__ gradPositions,
                             const long long* __restrict__ rowOffsets, const long long* __restrict__ neighbors, int n, double scale,
                             const int* __restrict__ slotOfNode, long long* __restrict__ forceBuffer, int paddedAtoms,
                             GraphStatus* __restrict__ status) {
    const int lane = threadIdx.x & 31;
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, numWarps = (gridDim.x * blockDim.x) >> 5;
    for (int i = warp; i < n; i += numWarps) {
        const int si = slotOfNode[i];
        if (gradEdges != nullptr)
            for (long long e = rowOffsets[i] + lane; e < rowOffsets[i + 1]; e += 32) {
                // d = x_j - x_i: dE/dx_j = g, dE/dx_i = -g, F = -dE/dx.
                const int j = (int) neighbors[e];
                const int sj = slotOfNode[j];
                for (int c = 0; c < 3; c++) {
                    const double g = (double) gradEdges[3 * e + c] * scale;
                    addForce(g, si, c, paddedAtoms, forceBuffer, status, i, j);
                    addForce(-g, sj, c, paddedAtoms, forceBuffer, status, i, j);
                }
            }
        if (gradPositions != nullptr && lane < 3)
            addForce(-(double) gradPositions[3 * i + lane] * scale, si, lane, paddedAtoms, forceBuffer, status, i, i);
    }
}

template <typename real>
__global__ void energyKernel(const real* __restrict__ energies, int n, double scale, GraphStatus* __restrict__ status, void* energyBuffer,
                             int energyIsDouble) {
    __shared__ double partial[256];
    double sum = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const double e = (double) energies[i] * scale;
        if (!(fabs(e) <= 1e9))
            reportError(status, GraphErrorNonFiniteEnergy, i, i, e);
        sum += e;
    }
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (int width = blockDim.x / 2; width > 0; width /= 2) {
        if (threadIdx.x < width)
            partial[threadIdx.x] += partial[threadIdx.x + width];
        __syncthreads();
    }
    if (threadIdx.x == 0 && energyBuffer != nullptr) {
        if (energyIsDouble)
            ((double*) energyBuffer)[0] += partial[0];
        else
            ((float*) energyBuffer)[0] += (float) partial[0];
    }
}

} // namespace

size_t getTorchScanScratchBytes(int n) {
    size_t bytes = 0;
    cub::DeviceScan::InclusiveSum(nullptr, bytes, (const long long*) nullptr, (long long*) nullptr, std::max(1, n));
    return bytes;
}

void launchTorchRowOffsets(const int* rowCount, int n, int capacity, long long* counts, long long* scanned, void* scratch,
                           size_t scratchBytes, cudaStream_t stream) {
    widenCountsKernel<<<std::max(1, std::min((n + 255) / 256, 4096)), 256, 0, stream>>>(rowCount, n, capacity, counts, scanned);
    if (n > 0)
        cub::DeviceScan::InclusiveSum(scratch, scratchBytes, counts, scanned + 1, n, stream);
}

template <typename real>
void launchTorchGraphInputs(const double* positionsNm, const int* rows, const int* rowCount, int capacity, const long long* scanned, int n,
                            GraphBox<double> box, double toModel, double paddingLength, long long edgeCapacity, bool writeBox,
                            real* positions, long long* rowOffsets, long long* neighbors, real* edgeVectors, real* boxOut,
                            GraphStatus* status, cudaStream_t stream) {
    graphInputsKernel<real><<<warpBlocks(n), 32 * WarpsPerBlock, 0, stream>>>(
        positionsNm, rows, rowCount, capacity, scanned, n, box, toModel, paddingLength, edgeCapacity, writeBox ? 1 : 0, positions,
        rowOffsets, neighbors, edgeVectors, boxOut, status);
}

template <typename real>
void launchTorchForces(const real* gradEdges, const real* gradPositions, const long long* rowOffsets, const long long* neighbors, int n,
                       double scale, const int* slotOfNode, long long* forceBuffer, int paddedAtoms, GraphStatus* status,
                       cudaStream_t stream) {
    if (n > 0)
        forcesKernel<real><<<warpBlocks(n), 32 * WarpsPerBlock, 0, stream>>>(gradEdges, gradPositions, rowOffsets, neighbors, n, scale,
                                                                             slotOfNode, forceBuffer, paddedAtoms, status);
}

template <typename real>
void launchTorchEnergy(const real* energies, int n, double scale, GraphStatus* status, void* energyBuffer, bool energyIsDouble,
                       cudaStream_t stream) {
    energyKernel<real><<<1, 256, 0, stream>>>(energies, n, scale, status, energyBuffer, energyIsDouble ? 1 : 0);
}

#define GRAPH_INSTANTIATE_TORCH(real)                                                                                                      \
    template void launchTorchGraphInputs<real>(const double*, const int*, const int*, int, const long long*, int, GraphBox<double>,        \
                                               double, double, long long, bool, real*, long long*, long long*, real*, real*, GraphStatus*, \
                                               cudaStream_t);                                                                              \
    template void launchTorchForces<real>(const real*, const real*, const long long*, const long long*, int, double, const int*,           \
                                          long long*, int, GraphStatus*, cudaStream_t);                                                    \
    template void launchTorchEnergy<real>(const real*, int, double, GraphStatus*, void*, bool, cudaStream_t);
GRAPH_INSTANTIATE_TORCH(float)
GRAPH_INSTANTIATE_TORCH(double)

} // namespace GraphPlugin
