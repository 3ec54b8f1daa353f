#ifndef OPENMM_GRAPH_CHAINED_LAUNCH_CUH_
#define OPENMM_GRAPH_CHAINED_LAUNCH_CUH_

/**
 * Programmatic dependent launch (compute capability 9.0 and later) for the kernels of one evaluation: a kernel launched
 * with launchChained may be scheduled while the kernel before it in the stream is still running; beginChainedKernel(),
 * before its first access to memory that a kernel of the evaluation writes, waits until that kernel has finished and
 * its writes are visible, then lets the kernel after it be scheduled in turn.  So each launch's latency (about 1-2 us a
 * kernel boundary, which small systems pay several times a step) overlaps the end of the kernel before, and nothing
 * reads a result early: what a chained kernel reads before the wait is set up before the evaluation and written by none
 * of its kernels (the fused network's first weight slices and its scan's nodes, FusedNetworkKernels.cu; the force
 * scan's first center and its type, EdgeScanKernels.cu; every other kernel waits first), and a kernel waits only once
 * its predecessor has completed, which completed only after its own predecessor, and so on (kernels launched the
 * ordinary way, and other stream operations, keep full serialization).  Captured into CUDA graphs as programmatic edges
 * between adjacent chained kernels.  Before 9.0 (the device, or the code built for it) the attribute is not set and the
 * device code is empty.
 */

#include <cuda_runtime.h>
#include <map>
#include <mutex>
#include <utility>

namespace GraphPlugin {

/**
 * In every kernel launched with launchChained, before its first read of what a kernel of the evaluation writes: its
 * first statement, except in the kernels named above that read static data first.  A no-op for a kernel launched
 * otherwise.
 */
__device__ inline void beginChainedKernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/**
 * Whether `kernel` may be launched as a programmatic dependent launch on the current device: compute capability 9.0 or
 * later, and the kernel's code for it built for 9.0 or later (both its binary and its PTX version): a build for an
 * older architecture that the driver compiles for a 9.0 device at load time has no griddepcontrol instructions, and
 * the attribute would let its kernels read results early.  Asked once per kernel and device, then cached; `false` after
 * a launch with the attribute was refused (launchChained).
 */
class ChainedLaunchSupport {
public:
    static bool get(const void* kernel) {
        int device = 0;
        if (cudaGetDevice(&device) != cudaSuccess)
            return false; // the launch itself will report the error
        std::lock_guard<std::mutex> lock(mutex());
        const auto known = cache().find({kernel, device});
        if (known != cache().end())
            return known->second;
        int major = 0;
        cudaFuncAttributes attributes = {};
        const bool supported = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess && major >= 9 &&
                               cudaFuncGetAttributes(&attributes, kernel) == cudaSuccess && attributes.binaryVersion >= 90 &&
                               attributes.ptxVersion >= 90;
        cache()[{kernel, device}] = supported;
        return supported;
    }
    static void refuse(const void* kernel) {
        int device = 0;
        if (cudaGetDevice(&device) != cudaSuccess)
            return;
        std::lock_guard<std::mutex> lock(mutex());
        cache()[{kernel, device}] = false;
    }

private:
    static std::mutex& mutex() {
        static std::mutex m;
        return m;
    }
    static std::map<std::pair<const void*, int>, bool>& cache() {
        static std::map<std::pair<const void*, int>, bool> c;
        return c;
    }
};

/**
 * kernel<<<grid, block, shared, stream>>>(args...), as a programmatic dependent launch where ChainedLaunchSupport says
 * it may be (else, or if the driver refuses the attribute, an ordinary launch).  The kernel must begin with
 * beginChainedKernel().  A launch error is left for cudaGetLastError, as with <<<>>>.
 */
template <typename... Params, typename... Args>
void launchChained(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, cudaStream_t stream, const Args&... args) {
    cudaLaunchAttribute attribute = {};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = shared;
    config.stream = stream;
    const void* key = reinterpret_cast<const void*>(kernel);
    // An error already pending (an earlier launch's) must reach cudaGetLastError: no attempt whose refusal would clear it.
    if (cudaPeekAtLastError() == cudaSuccess && ChainedLaunchSupport::get(key)) {
        config.attrs = &attribute;
        config.numAttrs = 1;
        if (cudaLaunchKernelEx(&config, kernel, args...) == cudaSuccess)
            return;
        cudaGetLastError(); // refused: launched again without the attribute, which reports any other error
        ChainedLaunchSupport::refuse(key);
        config.attrs = nullptr;
        config.numAttrs = 0;
    }
    cudaLaunchKernelEx(&config, kernel, args...);
}

} // namespace GraphPlugin

#endif
