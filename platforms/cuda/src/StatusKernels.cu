/**
 * The status record of an evaluation on the CUDA platform: at its end the
 * energy into OpenMM's buffer and the record to the host, in one kernel
 * (launchFinishEvaluation, which with CheckFinite "true" also leaves a clean
 * record for the next evaluation; launchClearStatus where none was left);
 * with CheckFinite "deferred" or "false", copies of it to the host at its
 * start and after the graph build (launchCopyStatus).
 */

#include "ChainedLaunch.cuh"
#include "GraphDeviceFunctions.cuh"
#include "GraphKernelLaunch.h"

namespace GraphPlugin {

namespace {

/**
 * One warp: lane 0 adds the energy to energyBuffer (when not null); the lanes copy the status record to mapped host memory
 * (when hostStatus is not null) word by word and, with clear, zero each word after copying it.
 */
__global__ void statusKernel(GraphStatus* __restrict__ status, GraphStatus* hostStatus, void* energyBuffer, int energyIsDouble,
                             int clear) {
    beginChainedKernel();
    static_assert(sizeof(GraphStatus) % sizeof(int) == 0, "the status record is copied in 4-byte words");
    constexpr int Words = sizeof(GraphStatus) / sizeof(int);
    if (threadIdx.x == 0 && energyBuffer != nullptr) {
        const double energy = energyOfWords(status->energyTop, status->energyHigh, status->energyLow);
        if (energyIsDouble)
            ((double*) energyBuffer)[0] += energy;
        else
            ((float*) energyBuffer)[0] += (float) energy;
    }
    __syncwarp(); // lane 0 has read the energy before any lane clears it
    int* source = reinterpret_cast<int*>(status);
    volatile int* target = reinterpret_cast<volatile int*>(hostStatus);
    for (int w = threadIdx.x; w < Words; w += blockDim.x) {
        if (target != nullptr)
            target[w] = source[w];
        if (clear)
            source[w] = 0;
    }
}

} // namespace

void launchCopyStatus(GraphStatus* status, GraphStatus* hostStatus, bool clear, cudaStream_t stream) {
    launchChained(statusKernel, 1, 32, 0, stream, status, hostStatus, nullptr, 0, clear ? 1 : 0);
}

void launchClearStatus(GraphStatus* status, cudaStream_t stream) {
    launchChained(statusKernel, 1, 32, 0, stream, status, nullptr, nullptr, 0, 1);
}

void launchFinishEvaluation(GraphStatus* status, GraphStatus* hostStatus, void* energyBuffer, bool energyIsDouble, bool clear,
                            cudaStream_t stream) {
    launchChained(statusKernel, 1, 32, 0, stream, status, hostStatus, energyBuffer, energyIsDouble ? 1 : 0, clear ? 1 : 0);
}

} // namespace GraphPlugin
