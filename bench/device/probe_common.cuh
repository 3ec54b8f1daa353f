/**
 * What the device probes (stream_probe.cu, cluster_probe.cu) share: CHECK
 * for CUDA runtime calls, and the mbarrier operations (sm_90 PTX,
 * shared-memory addresses as 32-bit shared-window offsets).
 */

#ifndef PROBE_COMMON_CUH
#define PROBE_COMMON_CUH

#include <cmath>
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
template <typename T> T* upload(const std::vector<T>& values) {
    T* p;
    CHECK(cudaMalloc(&p, values.size() * sizeof(T)));
    CHECK(cudaMemcpy(p, values.data(), values.size() * sizeof(T), cudaMemcpyHostToDevice));
    return p;
}

/** upload() of floats. */
inline float* uploadFloats(const std::vector<float>& values) {
    return upload(values);
}

/** `count` zeroed floats on the device. */
inline float* deviceZeros(size_t count) {
    float* p;
    CHECK(cudaMalloc(&p, count * sizeof(float)));
    CHECK(cudaMemset(p, 0, count * sizeof(float)));
    return p;
}

/** What referenceNetwork computes for one row, in double precision. */
struct ReferenceRow {
    double energy;                ///< h_L . outputWeight
    std::vector<double> last;     ///< h_L
    std::vector<double> gradient; ///< dE/dh_0
};

/**
 * The probes' network on the host in double precision, for one row: widths width[0..L], weight(l, k, c) the weight of
 * layer l from input k to output c (each probe keeps its own layout), tanh, layers of equal widths residual with a
 * timestep (h + timestep tanh(z)), energy h_L . outputWeight; and its input-gradient backward.
 */
template <typename Weight>
ReferenceRow referenceNetwork(const std::vector<int>& width, Weight weight, const std::vector<std::vector<float>>& bias,
                              const std::vector<std::vector<float>>& timestep, const std::vector<float>& outputWeight, const float* input) {
    const int L = (int) width.size() - 1;
    std::vector<std::vector<double>> h(L + 1), d(L);
    h[0].assign(input, input + width[0]);
    for (int l = 0; l < L; l++) {
        const int K = width[l], C = width[l + 1];
        const bool residual = K == C;
        h[l + 1].resize(C);
        d[l].resize(C);
        for (int c = 0; c < C; c++) {
            double z = bias[l][c];
            for (int k = 0; k < K; k++)
                z += h[l][k] * weight(l, k, c);
            const double t = std::tanh(z), ts = residual ? timestep[l][c] : 1.0;
            h[l + 1][c] = residual ? h[l][c] + ts * t : t;
            d[l][c] = ts * (1 - t * t);
        }
    }
    ReferenceRow row{0.0, h[L], {}};
    for (int c = 0; c < width[L]; c++)
        row.energy += h[L][c] * outputWeight[c];
    std::vector<double> g(outputWeight.begin(), outputWeight.end());
    for (int l = L - 1; l >= 0; l--) {
        const int K = width[l], C = width[l + 1];
        std::vector<double> next(K, 0.0);
        for (int k = 0; k < K; k++) {
            for (int c = 0; c < C; c++)
                next[k] += g[c] * d[l][c] * weight(l, k, c);
            if (K == C)
                next[k] += g[k];
        }
        g = next;
    }
    row.gradient = g;
    return row;
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
