#ifndef OPENMM_GRAPH_L1_PREFERENCE_CUH_
#define OPENMM_GRAPH_L1_PREFERENCE_CUH_

/**
 * The shared-memory carveout of a kernel that reads through L1: each multiprocessor's 256 KB are split between shared
 * memory and L1, and without a preference the driver gave the edge scans the largest carveout (228 KB of shared memory,
 * about 23 KB of L1: the moments scan hit L1 for 2.9% of its table reads at medium 100,800; Nsight Compute on an H200,
 * bench/NOTES.md v25), although their blocks use at most 20 KB each.  L1Preference asks for the smallest carveout that still
 * holds as many blocks as the kernel's other limits (registers, warps) allow, so the rest is L1; the occupancy does not
 * change.  The driver takes the next supported capacity at or above the percentage asked for (CUDA C++ Programming
 * Guide, "Shared Memory" of compute capability 7.x and later), and the preference is a hint: a kernel always runs.
 */

#include <algorithm>
#include <cuda_runtime.h>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <utility>

namespace GraphPlugin {

class L1Preference {
public:
    /**
     * Sets `kernel`'s preferred carveout for blocks of `threads` threads and `shared` bytes of dynamic shared memory
     * (host function; once per kernel, device, block size and shared size, then cached).  A failure leaves the kernel
     * with the driver's choice (it still runs) and no error behind.
     */
    template <typename... Params> static void apply(void (*kernel)(Params...), int threads, size_t shared) {
        const void* key = reinterpret_cast<const void*>(kernel);
        int device = 0;
        // An error pending from an earlier launch is left for its check (a failure here clears the last error).
        if (cudaPeekAtLastError() != cudaSuccess || cudaGetDevice(&device) != cudaSuccess)
            return;
        std::lock_guard<std::mutex> lock(mutex());
        if (!done().insert({key, device, threads, shared}).second)
            return;
        // Neither call is a stream operation, but the first launch of a kernel may come while this thread captures the
        // evaluation into a CUDA graph: relaxed, the capture allows them (a call it deems unsafe would invalidate it).
        CaptureModeRelaxed relaxed;
        // The occupancy with the largest carveout (a preference set for another block size must not limit it), then the
        // largest preference any block size of this kernel has needed on this device: one kernel may serve several models.
        int blocks = 0, reserved = 0, perMultiprocessor = 0;
        int& percent = preferred()[{key, device}];
        if (cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100) != cudaSuccess ||
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, shared) != cudaSuccess ||
            cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, device) != cudaSuccess ||
            cudaDeviceGetAttribute(&perMultiprocessor, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device) != cudaSuccess || blocks < 1 ||
            perMultiprocessor < 1) {
            cudaGetLastError();
            percent = 100;
            return;
        }
        const size_t needed = (size_t) blocks * (shared + (size_t) reserved);
        percent = std::max(percent, (int) std::min<size_t>(100, (100 * needed + perMultiprocessor - 1) / perMultiprocessor));
        if (cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, percent) != cudaSuccess)
            cudaGetLastError();
    }

private:
    /** This thread in cudaStreamCaptureModeRelaxed for the object's lifetime (its mode before is restored). */
    struct CaptureModeRelaxed {
        cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
        CaptureModeRelaxed() {
            if (cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess) {
                cudaGetLastError();
                mode = cudaStreamCaptureModeRelaxed; // unchanged: nothing to restore
            }
        }
        ~CaptureModeRelaxed() {
            if (cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess)
                cudaGetLastError();
        }
    };
    static std::mutex& mutex() {
        static std::mutex m;
        return m;
    }
    static std::set<std::tuple<const void*, int, int, size_t>>& done() {
        static std::set<std::tuple<const void*, int, int, size_t>> s;
        return s;
    }
    /** The carveout (percent) set for each kernel and device: the largest any of its block sizes needed. */
    static std::map<std::pair<const void*, int>, int>& preferred() {
        static std::map<std::pair<const void*, int>, int> m;
        return m;
    }
};

} // namespace GraphPlugin

#endif
