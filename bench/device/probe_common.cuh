/**
 * What the device probes (stream_probe.cu, cluster_probe.cu) share: CHECK
 * for CUDA runtime calls, and the mbarrier operations (sm_90 PTX,
 * shared-memory addresses as 32-bit shared-window offsets).
 */

#ifndef PROBE_COMMON_CUH
#define PROBE_COMMON_CUH

#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#include <vector>

/** Exits with the file, line and CUDA error when a runtime call fails. */
#define CHECK(call)                                                                                                                        \
    do {                                                                                                                                   \
        cudaError_t error_ = (call);                                                                                                       \
        if (error_ != cudaSuccess) {                                                                                                       \
            std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(error_));                                           \
            std::exit(1);                                                                                                                  \
        }                                                                                                                                  \
    } while (0)

/** A device copy of `values` (cudaMalloc'd; the probes never free it). */
inline float* uploadFloats(const std::vector<float>& values) {
    float* p;
    CHECK(cudaMalloc(&p, values.size() * sizeof(float)));
    CHECK(cudaMemcpy(p, values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice));
    return p;
}

/** `count` zeroed floats on the device. */
inline float* deviceZeros(size_t count) {
    float* p;
    CHECK(cudaMalloc(&p, count * sizeof(float)));
    CHECK(cudaMemset(p, 0, count * sizeof(float)));
    return p;
}

/** The shared-window address of p (shared memory). */
__device__ inline unsigned sharedAddress(const void* p) {
    return (unsigned) __cvta_generic_to_shared(p);
}

/** Initialises the mbarrier at shared address `barrier` for `arrivals` arrivals per phase (one thread). */
__device__ inline void initBarrier(unsigned barrier, unsigned arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(barrier), "r"(arrivals) : "memory");
}

/**
 * Waits until the phase of the given parity of the mbarrier at shared
 * address `barrier` has completed.  Cluster: with acquire at cluster scope
 * (the arrivals that complete it come from other blocks of the cluster).
 */
template <bool Cluster = false> __device__ inline void waitParity(unsigned barrier, unsigned parity) {
    unsigned done = 0;
    while (!done) {
        if constexpr (Cluster)
            asm volatile(
                "{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                : "=r"(done)
                : "r"(barrier), "r"(parity)
                : "memory");
        else
            asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                         : "=r"(done)
                         : "r"(barrier), "r"(parity)
                         : "memory");
    }
}

#endif
