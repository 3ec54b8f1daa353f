/**
 * How fast can one block per multiprocessor stream a weight matrix from L2
 * into shared memory?  The fused fitting network (platforms/cuda/src/
 * FusedNetworkKernels.cu) streams every weight through each block with
 * cp.async and measured about 5 bytes per clock per multiprocessor on an
 * H200 (bench/NOTES.md v11), whatever its tile's rows; this probe measures
 * the stream alone, so the cause can be told apart:
 *
 *   copies    the blocks read `copies` copies of the data, block b copy
 *             b % copies: 1 = every block the same slices at the same time
 *             (as the fused kernel does), one per block = each its own;
 *   stages    slices in flight (ring of `stages` 16 KB slices);
 *   rotate    each block starts its copies of a slice at a different offset
 *             (spreads simultaneous requests for one line over the slice);
 *   method    cp.async 16-byte copies by all threads ("cp.async"), or one
 *             bulk copy per slice through the tensor memory accelerator
 *             ("bulk", cp.async.bulk with an mbarrier), or plain 16-byte
 *             loads into registers ("ld"), or ("multicast S") clusters of S
 *             blocks sharing one stream: block r of a cluster copies part r
 *             of each slice with cp.async.bulk .multicast::cluster into the
 *             shared memory of all S blocks, so L2 is read once per cluster
 *             while every block still receives every byte.  Whether that is
 *             faster tells whether the limit of "bulk" is on the L2 side
 *             (requests per line, slice bandwidth) or in each
 *             multiprocessor's intake (bench/NOTES.md v14).
 *
 * Build and run on a GPU machine (sm_90a: multicast is an sm_90a feature):
 *   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/stream_probe bench/device/stream_probe.cu && /tmp/stream_probe
 * Prints one line per case: bytes per clock per multiprocessor (the clock
 * from the device attribute, so an approximation) and TB/s in all.
 */

#include "probe_common.cuh"
#include <cooperative_groups.h>
#include <cstdio>
#include <cstdlib>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>
#include <vector>

namespace {

constexpr int Threads = 256;
constexpr int SliceBytes = 16384;
constexpr int SliceVectors = SliceBytes / 16;
constexpr int MaxStages = 8;

/** A little work on a landed slice, so that nothing is optimised away: thread t sums its own 16-byte words. */
__device__ inline float touch(const float4* slice) {
    float sum = 0;
    for (int v = threadIdx.x; v < SliceVectors; v += Threads) {
        const float4 x = slice[v];
        sum += x.x + x.y + x.z + x.w;
    }
    return sum;
}

/** cp.async: every thread copies 16 bytes at a time; `stages` slices in the ring, stages - 1 in flight. */
__global__ void __launch_bounds__(Threads)
    asyncKernel(const float4* __restrict__ source, int numSlices, int copies, int rotate, int stages, float* sink) {
    extern __shared__ __align__(16) float4 asyncRing[];
    float4* ring = asyncRing;
    const float4* base = source + (size_t) (blockIdx.x % copies) * numSlices * SliceVectors;
    const int offset = rotate ? (blockIdx.x * 97) % SliceVectors : 0;
    auto issue = [&](int s) {
        if (s < numSlices) {
            const float4* src = base + (size_t) s * SliceVectors;
            float4* dst = ring + (s % stages) * SliceVectors;
            for (int v = threadIdx.x; v < SliceVectors; v += Threads) {
                const int w = (v + offset) % SliceVectors;
                __pipeline_memcpy_async(dst + w, src + w, 16);
            }
        }
        __pipeline_commit();
    };
    float sum = 0;
    for (int s = 0; s < stages - 1; s++)
        issue(s);
    for (int s = 0; s < numSlices; s++) {
        // Wait until slice s has landed: at most stages - 2 younger groups may still be pending.
        switch (stages) {
        case 2:
            __pipeline_wait_prior(0);
            break;
        case 3:
            __pipeline_wait_prior(1);
            break;
        case 4:
            __pipeline_wait_prior(2);
            break;
        case 6:
            __pipeline_wait_prior(4);
            break;
        default:
            __pipeline_wait_prior(6);
            break;
        }
        __syncthreads();
        issue(s + stages - 1);
        sum += touch(ring + (s % stages) * SliceVectors);
    }
    if (sum == 12345.0f)
        sink[blockIdx.x] = sum;
}

/** Plain 16-byte loads into registers, `depth` of them in flight per thread. */
__global__ void __launch_bounds__(Threads) loadKernel(const float4* __restrict__ source, int numSlices, int copies, float* sink) {
    const float4* base = source + (size_t) (blockIdx.x % copies) * numSlices * SliceVectors;
    float sum = 0;
    const size_t total = (size_t) numSlices * SliceVectors;
    for (size_t v = threadIdx.x; v < total; v += Threads * 8) {
        float4 x[8];
#pragma unroll
        for (int u = 0; u < 8; u++)
            x[u] = v + u * Threads < total ? __ldg(base + v + u * Threads) : make_float4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < 8; u++)
            sum += x[u].x + x[u].y + x[u].z + x[u].w;
    }
    if (sum == 12345.0f)
        sink[blockIdx.x] = sum;
}

/**
 * The tensor memory accelerator: thread 0 issues one bulk copy of 16 KB per
 * slice, completing on the slice's mbarrier; `stages` slices in the ring.
 */
__global__ void __launch_bounds__(Threads)
    bulkKernel(const float4* __restrict__ source, int numSlices, int copies, int stages, float* sink) {
    extern __shared__ __align__(128) float4 bulkRing[];
    float4* ring = bulkRing;
    __shared__ __align__(8) unsigned long long barrier[MaxStages];
    const float4* base = source + (size_t) (blockIdx.x % copies) * numSlices * SliceVectors;
    if (threadIdx.x == 0)
        for (int b = 0; b < stages; b++)
            initBarrier(sharedAddress(&barrier[b]), 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    __syncthreads();
    auto issue = [&](int s) {
        if (threadIdx.x == 0 && s < numSlices) {
            const int b = s % stages;
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sharedAddress(&barrier[b])), "r"(SliceBytes)
                         : "memory");
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                             sharedAddress(ring + b * SliceVectors)),
                         "l"(base + (size_t) s * SliceVectors), "r"(SliceBytes), "r"(sharedAddress(&barrier[b]))
                         : "memory");
        }
    };
    float sum = 0;
    for (int s = 0; s < stages - 1; s++)
        issue(s);
    for (int s = 0; s < numSlices; s++) {
        const int b = s % stages;
        const unsigned parity = (s / stages) & 1;
        waitParity(sharedAddress(&barrier[b]), parity);
        __syncthreads(); // everyone is past slice s - 1: its stage may be refilled
        issue(s + stages - 1);
        sum += touch(ring + b * SliceVectors);
    }
    if (sum == 12345.0f)
        sink[blockIdx.x] = sum;
}

/**
 * Clusters of S blocks sharing one stream (TMA multicast): for each slice,
 * block r of the cluster issues bytes [r q, (r + 1) q) (q = SliceBytes / S)
 * to the same offset in every block of the cluster; each block's `full`
 * mbarrier of the stage expects the whole slice.  A stage is refilled only
 * when all S blocks have read it: each block, once past a slice, arrives on
 * the stage's `empty` mbarrier (S arrivals) of every block of the cluster,
 * and a block waits on its own before it issues into the stage again.
 */
__global__ void __launch_bounds__(Threads)
    multicastKernel(const float4* __restrict__ source, int numSlices, int copies, int stages, float* sink) {
    namespace cg = cooperative_groups;
    extern __shared__ __align__(128) float4 multicastRing[];
    float4* ring = multicastRing;
    __shared__ __align__(8) unsigned long long full[MaxStages], empty[MaxStages];
    cg::cluster_group cluster = cg::this_cluster();
    const int S = (int) cluster.num_blocks(), rank = (int) cluster.block_rank();
    const float4* base = source + (size_t) ((blockIdx.x / S) % copies) * numSlices * SliceVectors;
    if (threadIdx.x == 0)
        for (int b = 0; b < stages; b++) {
            initBarrier(sharedAddress(&full[b]), 1);
            initBarrier(sharedAddress(&empty[b]), S);
        }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    cluster.sync(); // every block's barriers initialised before anyone copies into it
    const int partBytes = SliceBytes / S, partVectors = SliceVectors / S;
    const unsigned short mask = (unsigned short) ((1u << S) - 1);
    auto issue = [&](int s) {
        if (threadIdx.x == 0 && s < numSlices) {
            const int b = s % stages;
            if (s >= stages) // every block has read this stage's previous slice
                waitParity<true>(sharedAddress(&empty[b]), ((s / stages) - 1) & 1);
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sharedAddress(&full[b])), "r"(SliceBytes)
                         : "memory");
            asm volatile(
                "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], %4;" ::"r"(
                    sharedAddress(ring + b * SliceVectors + rank * partVectors)),
                "l"(base + (size_t) s * SliceVectors + rank * partVectors), "r"(partBytes), "r"(sharedAddress(&full[b])), "h"(mask)
                : "memory");
        }
    };
    auto release = [&](int s) { // this block has read slice s: tell every block of the cluster
        if (threadIdx.x == 0 && s >= 0 && s + stages < numSlices)
            for (int q = 0; q < S; q++) {
                unsigned remote;
                asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(sharedAddress(&empty[s % stages])), "r"(q));
                asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
            }
    };
    float sum = 0;
    for (int s = 0; s < stages - 1; s++)
        issue(s);
    for (int s = 0; s < numSlices; s++) {
        const int b = s % stages;
        waitParity<true>(sharedAddress(&full[b]), (s / stages) & 1);
        __syncthreads(); // everyone is past slice s - 1
        release(s - 1);
        issue(s + stages - 1);
        sum += touch(ring + b * SliceVectors);
    }
    cluster.sync(); // no block leaves while another may still copy into it or arrive on its barriers
    if (sum == 12345.0f)
        sink[blockIdx.x] = sum;
}

} // namespace

int main() {
    int device = 0, numSMs = 0, clockKHz = 0;
    CHECK(cudaGetDevice(&device));
    CHECK(cudaDeviceGetAttribute(&numSMs, cudaDevAttrMultiProcessorCount, device));
    CHECK(cudaDeviceGetAttribute(&clockKHz, cudaDevAttrClockRate, device));
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, device));
    std::printf("%s: %d multiprocessors, clock %.2f GHz (attribute), L2 %.1f MB\n", prop.name, numSMs, clockKHz * 1e-6,
                prop.l2CacheSize / 1048576.0);
    const int numSlices = 32; // 512 KB per block: the small grade's weights, both passes
    const size_t distinctBytes = (size_t) numSMs * numSlices * SliceBytes;
    float4* source;
    float* sink;
    CHECK(cudaMalloc(&source, distinctBytes));
    CHECK(cudaMemset(source, 0, distinctBytes));
    CHECK(cudaMalloc(&sink, numSMs * sizeof(float)));
    // The largest ring (the bulk kernel's mbarriers are static shared memory on top of it).
    CHECK(cudaFuncSetAttribute(asyncKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, MaxStages * SliceBytes));
    CHECK(cudaFuncSetAttribute(bulkKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, MaxStages * SliceBytes));
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    auto report = [&](const char* method, int blocks, int copies, int stages, int rotate, auto launch) {
        for (int warm = 0; warm < 3; warm++)
            launch();
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        const int reps = 20;
        CHECK(cudaEventRecord(start));
        for (int r = 0; r < reps; r++)
            launch();
        CHECK(cudaEventRecord(stop));
        CHECK(cudaEventSynchronize(stop));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, start, stop));
        const double seconds = ms * 1e-3 / reps;
        const double perBlock = (double) numSlices * SliceBytes;
        std::printf("%-8s blocks %3d copies %3d stages %d rotate %d: %8.2f us, %6.1f B/clk per SM, %6.2f TB/s in all\n", method, blocks,
                    copies, stages, rotate, seconds * 1e6, perBlock / (seconds * clockKHz * 1e3), perBlock * blocks / seconds * 1e-12);
        std::fflush(stdout);
    };
    for (int blocks : {numSMs, numSMs / 2})
        for (int copies : {1, 4, 16, blocks}) {
            for (int stages : {2, 4, 8})
                for (int rotate = 0; rotate <= (copies == 1 ? 1 : 0); rotate++)
                    report("cp.async", blocks, copies, stages, rotate, [&] {
                        asyncKernel<<<blocks, Threads, (size_t) stages * SliceBytes>>>(source, numSlices, copies, rotate, stages, sink);
                    });
            for (int stages : {2, 4, 8})
                report("bulk", blocks, copies, stages, 0,
                       [&] { bulkKernel<<<blocks, Threads, (size_t) stages * SliceBytes>>>(source, numSlices, copies, stages, sink); });
            report("ld", blocks, copies, 0, 0, [&] { loadKernel<<<blocks, Threads>>>(source, numSlices, copies, sink); });
        }
    CHECK(cudaFuncSetAttribute(multicastKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, MaxStages * SliceBytes));
    for (int S : {1, 2, 4, 8})
        for (int stages : {2, 4, 8}) {
            const int blocks = numSMs / S * S;
            cudaLaunchAttribute attribute;
            attribute.id = cudaLaunchAttributeClusterDimension;
            attribute.val.clusterDim.x = S;
            attribute.val.clusterDim.y = 1;
            attribute.val.clusterDim.z = 1;
            cudaLaunchConfig_t config = {};
            config.gridDim = dim3(S);
            config.blockDim = dim3(Threads);
            config.dynamicSmemBytes = (size_t) stages * SliceBytes;
            config.attrs = &attribute;
            config.numAttrs = 1;
            int active = 0;
            CHECK(cudaOccupancyMaxActiveClusters(&active, multicastKernel, &config));
            config.gridDim = dim3(blocks);
            char name[32];
            std::snprintf(name, sizeof(name), "mcast %d", S);
            std::printf("(clusters of %d: %d at once, %d launched)\n", S, active, blocks / S);
            report(name, blocks, 1, stages, 0,
                   [&] { CHECK(cudaLaunchKernelEx(&config, multicastKernel, (const float4*) source, numSlices, 1, stages, sink)); });
        }
    CHECK(cudaFree(source));
    CHECK(cudaFree(sink));
    return 0;
}
