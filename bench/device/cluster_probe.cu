/**
 * What does one stage of the cluster-fused fitting network
 * (platforms/cuda/src/ClusterNetworkKernels.cu) cost in communication alone?
 * That kernel took 76 us for the small grade at 512 particles on an H200
 * (bench/NOTES.md v13), about 5 us for each of its 14 stages, although each
 * block's arithmetic is small.  Each stage there: every thread stores its
 * values into the shared memory of every block of the cluster (generic
 * stores through map_shared_rank), then cluster.sync().  On sm_90 that
 * barrier (release/acquire at cluster scope) compiles to MEMBAR.ALL.GPU,
 * the barrier and CCTL.IVALL (an L1 invalidation).  This probe times, per
 * stage, with one block of 256 threads per multiprocessor (the dynamic
 * shared memory forces it) and as many clusters as fill 128
 * multiprocessors:
 *
 *   sync        stores to every block (generic), cluster.sync()  (the kernel's way)
 *   sync-only   cluster.sync() alone
 *   relaxed     barrier.cluster.arrive.relaxed + wait alone (no fence: not enough for stores)
 *   st.async    st.async to every block, each block's mbarrier counting the
 *               bytes it expects (complete_tx), no cluster barrier per stage
 *
 * and prints the device's largest number of co-resident clusters for each
 * size (cudaOccupancyMaxActiveClusters): fewer than the clusters launched
 * means more than one wave.
 *
 * Build and run on a GPU machine (sm_90):
 *   nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/cluster_probe bench/device/cluster_probe.cu && /tmp/cluster_probe
 */

#include "probe_common.cuh"
#include <cooperative_groups.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

namespace cg = cooperative_groups;

namespace {

constexpr int Threads = 256;
constexpr int Values = 2; ///< values a thread computes per stage (32 rows x 16 columns over 256 threads)
constexpr int MaxCluster = 16;
constexpr int BufferFloats = Threads * Values * MaxCluster; ///< one stage's values from every block

enum Method { Sync = 0, SyncOnly = 1, Relaxed = 2, StAsync = 3 };
const char* methodName[] = {"sync", "sync-only", "relaxed", "st.async"};

/**
 * `stages` stages of the chosen method; out gets a sum of what arrived (so
 * that nothing is optimised away).  Two buffers of BufferFloats in dynamic
 * shared memory, alternating by stage, and an mbarrier for each.
 */
__global__ void __launch_bounds__(Threads) probeKernel(int method, int stages, float* out) {
    extern __shared__ __align__(16) float buffers[];
    __shared__ __align__(8) uint64_t barriers[2];
    cg::cluster_group cluster = cg::this_cluster();
    const int S = (int) cluster.num_blocks(), rank = (int) cluster.block_rank();
    if (threadIdx.x == 0)
        for (int b = 0; b < 2; b++)
            initBarrier(sharedAddress(&barriers[b]), 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    cluster.sync(); // every block started, the barriers initialised
    float sum = 0;
    const int bytesPerStage = S * Threads * Values * (int) sizeof(float);
    for (int k = 0; k < stages; k++) {
        float* buffer = buffers + (k % 2) * BufferFloats;
        const float value = sum + (float) (k + threadIdx.x);
        if (method == Sync) {
            for (int q = 0; q < S; q++) {
                float* remote = cluster.map_shared_rank(buffer, q);
                for (int v = 0; v < Values; v++)
                    remote[(rank * Threads + threadIdx.x) * Values + v] = value + v;
            }
            cluster.sync();
        }
        else if (method == SyncOnly)
            cluster.sync();
        else if (method == Relaxed)
            asm volatile("barrier.cluster.arrive.relaxed.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
        else {
            // This block expects every block's values in this stage's buffer (its previous use completed a stage ago).
            const unsigned barrier = sharedAddress(&barriers[k % 2]);
            if (threadIdx.x == 0)
                asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(barrier), "r"(bytesPerStage) : "memory");
            for (int q = 0; q < S; q++) {
                unsigned remoteBuffer, remoteBarrier;
                asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remoteBuffer) : "r"(sharedAddress(buffer)), "r"(q));
                asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remoteBarrier) : "r"(barrier), "r"(q));
                for (int v = 0; v < Values; v++)
                    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(
                                     remoteBuffer + (unsigned) (((rank * Threads + threadIdx.x) * Values + v) * sizeof(float))),
                                 "r"(__float_as_uint(value + v)), "r"(remoteBarrier)
                                 : "memory");
            }
            const unsigned parity = (k / 2) & 1;
            waitParity(barrier, parity);
        }
        // Read a value another block wrote (in the "kernel's" pattern the next stage's product reads them all).
        if (method == Sync || method == StAsync)
            sum += buffer[(((rank + 1) % S) * Threads + threadIdx.x) * Values];
    }
    // No block leaves while another may still store into it.
    cluster.sync();
    out[blockIdx.x * Threads + threadIdx.x] = sum;
}

} // namespace

int main() {
    int device = 0, clockKHz = 0, smCount = 0, maxShared = 0;
    CHECK(cudaGetDevice(&device));
    CHECK(cudaDeviceGetAttribute(&clockKHz, cudaDevAttrClockRate, device));
    CHECK(cudaDeviceGetAttribute(&smCount, cudaDevAttrMultiProcessorCount, device));
    CHECK(cudaDeviceGetAttribute(&maxShared, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, device));
    std::printf("%s: %d multiprocessors, %d MHz, %d KB shared memory per block\n", prop.name, smCount, clockKHz / 1000, maxShared / 1024);
    CHECK(cudaFuncSetAttribute(probeKernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    float* out = nullptr;
    CHECK(cudaMalloc(&out, sizeof(float) * Threads * 1024));
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    const int blocks = 128, stagesMeasured = 14, repeats = 200;
    for (int sharedKB : {182, 91}) {
        const size_t shared = (size_t) sharedKB * 1024;
        CHECK(cudaFuncSetAttribute(probeKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int) shared));
        for (int S : {2, 4, 8, 16}) {
            cudaLaunchConfig_t config = {};
            cudaLaunchAttribute attribute;
            attribute.id = cudaLaunchAttributeClusterDimension;
            attribute.val.clusterDim.x = S;
            attribute.val.clusterDim.y = 1;
            attribute.val.clusterDim.z = 1;
            config.attrs = &attribute;
            config.numAttrs = 1;
            config.blockDim = dim3(Threads);
            config.dynamicSmemBytes = shared;
            config.gridDim = dim3(S);
            int active = 0;
            CHECK(cudaOccupancyMaxActiveClusters(&active, probeKernel, &config));
            config.gridDim = dim3(blocks);
            std::printf("shared %3d KB, clusters of %2d: at most %3d clusters at once (%d launched)\n", sharedKB, S, active, blocks / S);
            for (int method : {Sync, SyncOnly, Relaxed, StAsync}) {
                double microseconds[2];
                for (int pass = 0; pass < 2; pass++) {
                    const int stages = pass == 0 ? 0 : stagesMeasured;
                    CHECK(cudaLaunchKernelEx(&config, probeKernel, method, stages, out)); // warm-up
                    CHECK(cudaEventRecord(start));
                    for (int r = 0; r < repeats; r++)
                        CHECK(cudaLaunchKernelEx(&config, probeKernel, method, stages, out));
                    CHECK(cudaEventRecord(stop));
                    CHECK(cudaEventSynchronize(stop));
                    float ms = 0;
                    CHECK(cudaEventElapsedTime(&ms, start, stop));
                    microseconds[pass] = 1000.0 * ms / repeats;
                }
                std::printf("  %-10s kernel %7.2f us with %d stages, %6.2f with none: %6.3f us a stage\n", methodName[method],
                            microseconds[1], stagesMeasured, microseconds[0], (microseconds[1] - microseconds[0]) / stagesMeasured);
            }
        }
    }
    CHECK(cudaFree(out));
    return 0;
}
