#ifndef OPENMM_GRAPH_CHAINED_LAUNCH_CUH_
#define OPENMM_GRAPH_CHAINED_LAUNCH_CUH_

/**
 * Programmatic dependent launch (compute capability 9.0 and later) for the kernels of one evaluation: a kernel launched
 * with launchChained may be scheduled while the kernel before it in the stream is still running; its first statement,
 * beginChainedKernel(), waits until that kernel has finished and its writes are visible, then lets the kernel after it
 * be scheduled in turn.  So each launch's latency (about 1-2 us a kernel boundary, which small systems pay several times
 * a step) overlaps the end of the kernel before, and nothing reads a result early: every chained kernel waits before its
 * first memory access, and a kernel waits only once its predecessor has completed, which completed only after its own
 * predecessor, and so on (kernels launched the ordinary way, and other stream operations, keep full serialization).
 * Captured into CUDA graphs as programmatic edges.  Before 9.0 the attribute is not set and the device code is empty.
 */

#include <atomic>
#include <cuda_runtime.h>
#include <utility>

namespace GraphPlugin {

/** The first statement of every kernel launched with launchChained (a no-op for a kernel launched otherwise). */
__device__ inline void beginChainedKernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/** Whether the current device takes programmatic dependent launches (compute capability >= 9.0); cached per device. */
inline bool chainedLaunchSupported() {
    constexpr int MaxDevices = 64;
    static std::atomic<int> known[MaxDevices] = {}; // 0: not asked yet, 1: no, 2: yes
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= MaxDevices) {
        cudaGetLastError(); // answered by the return value, not left for the next launch's check
        return false;
    }
    int answer = known[device].load(std::memory_order_relaxed);
    if (answer == 0) {
        int major = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
            cudaGetLastError();
            return false;
        }
        answer = major >= 9 ? 2 : 1;
        known[device].store(answer, std::memory_order_relaxed);
    }
    return answer == 2;
}

/**
 * kernel<<<grid, block, shared, stream>>>(args...), as a programmatic dependent launch where the device supports it.
 * The kernel must begin with beginChainedKernel().  A launch error is left for cudaGetLastError, as with <<<>>>.
 */
template <typename... Params, typename... Args>
void launchChained(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, cudaStream_t stream, Args&&... args) {
    cudaLaunchAttribute attribute = {};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = shared;
    config.stream = stream;
    if (chainedLaunchSupported()) {
        config.attrs = &attribute;
        config.numAttrs = 1;
    }
    cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

} // namespace GraphPlugin

#endif
