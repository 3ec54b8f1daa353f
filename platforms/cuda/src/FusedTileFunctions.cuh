/**
 * The parts of the fused fitting networks (FusedNetworkKernels.cu, one block
 * per tile of rows; ClusterNetworkKernels.cu, a cluster of blocks per tile)
 * that read and write a tile's rows: its moments in, the energy output and
 * dE/dA out.  Each spreads its work over the threads given by first and
 * step, so a cluster's blocks can share it.
 */

#ifndef GRAPH_FUSED_TILE_FUNCTIONS_CUH
#define GRAPH_FUSED_TILE_FUNCTIONS_CUH

#include "GraphKernelLaunch.h"
#include "NetworkDeviceFunctions.cuh"

namespace GraphPlugin {

/**
 * A[r][x] (shared, [R][strideA]) = the moments [node][HM] (device) of the
 * tile's rows r < rows (nodes[r]), zero for the rows past them (finite
 * values that are never written out); entries first, first + step, ...
 */
template <typename real, int R>
__device__ inline void loadTileMoments(const real* __restrict__ moments, const int* __restrict__ nodes, int rows, int HM, real* A,
                                       int strideA, int first, int step) {
    for (int e = first; e < R * HM; e += step) {
        const int r = e / HM, x = e % HM;
        A[r * strideA + x] = r < rows ? moments[(size_t) nodes[r] * HM + x] : real(0);
    }
}

/**
 * The energy output of rows first, first + step, ... (< rows), a warp a row:
 * E = w . h_r + b + shift (kJ/mol) into particleEnergy[nodes[r]] and, when
 * status is not null, the evaluation's fixed-point sum.  h: shared
 * [R][strideH] of the last hidden layer's `width` outputs.
 */
template <typename real>
__device__ inline void tileEnergies(const FusedNetworkWeights<real>& net, const real* h, int strideH, int width, const int* nodes, int rows,
                                    int first, int step, real* particleEnergy, GraphStatus* status) {
    const int lane = threadIdx.x & 31;
    for (int r = first; r < rows; r += step) {
        const real sum = warpDot(net.outputWeight, h + r * strideH, width, lane);
        if (lane == 0) {
            const real energy = sum + net.outputBias[0] + net.energyShift;
            particleEnergy[nodes[r]] = energy;
            if (status)
                addParticleEnergy(status, nodes[r], energy);
        }
    }
}

/**
 * dE/dA [node][HM] (device) of the tile's rows r < rows from their moments A
 * (shared, [R][strideA]) and descriptor gradients (shared, [R][strideD]);
 * entries first, first + step, ...
 */
template <typename real, int R>
__device__ inline void tileMomentGradients(const GraphModelParams<real>& model, const real* A, int strideA, const real* gradDescriptor,
                                           int strideD, const int* nodes, int rows, int HM, int first, int step, real* gradMoments) {
    for (int e = first; e < R * HM; e += step) {
        const int r = e / HM, x = e % HM;
        if (r < rows) {
            real gx, ga;
            invariantGradient(model, A + r * strideA, A + r * strideA, gradDescriptor + r * strideD, x, gx, ga);
            gradMoments[(size_t) nodes[r] * HM + x] = real(0) + gx + ga;
        }
    }
}

} // namespace GraphPlugin

#endif
