/**
 * Does compute-sanitizer's racecheck follow a ring of shared-memory slots filled by bulk copies (TMA) and ordered by
 * mbarriers alone?  The streamed scans (platforms/cuda/src/StreamedScan.cuh) are such a ring, and racecheck reports
 * hazards between their `bulkLoad` and the lanes' reads (bench/NOTES.md v67).  This probe runs the scans' protocol
 * with their own functions (barrierInit, barrierWait, barrierArrive, bulkLoad) and nothing else: one producer lane
 * copies knot k into slot k % slots once the slot's "empty" barrier has every consumer warp's arrival for knot
 * k - slots; each consumer warp waits for the slot's "full" phase, reads the knot, `__syncwarp`s and arrives on
 * "empty" (lane 0).  Variant "early" arrives before reading: a real write-after-read hazard, which racecheck should
 * report where it reports the correct ring clean.  Each run checks the sums against the host's.
 *
 * Build and run on a GPU machine (sm_90), from the repository root:
 *   nvcc -O3 -std=c++17 -arch=sm_90 -Iplatforms/cuda/src -Iopenmmapi/include -o /tmp/ring_probe \
 *       bench/device/ring_racecheck_probe.cu
 *   /tmp/ring_probe ring; compute-sanitizer --tool racecheck /tmp/ring_probe ring; ... early
 */

#include "StreamedScan.cuh"
#include "probe_common.cuh"
#include <cstring>

using namespace GraphPlugin;

namespace {

constexpr int RingConsumers = 4, Slots = 4, KnotFloats = 64, Knots = 96, Threads = 32 * (RingConsumers + 1);

__global__ void __launch_bounds__(Threads) ringKernel(const float* __restrict__ table, float* __restrict__ out, int early) {
    extern __shared__ __align__(128) unsigned char sharedBytes[];
    const float* ring = reinterpret_cast<const float*>(sharedBytes);
    const unsigned ringAddress = streamed::sharedAddress(sharedBytes);
    const unsigned full = ringAddress + Slots * KnotFloats * (unsigned) sizeof(float), empty = full + 8 * Slots;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (threadIdx.x == 0) {
        for (int s = 0; s < Slots; s++) {
            streamed::barrierInit(full + 8 * s, 1);
            streamed::barrierInit(empty + 8 * s, RingConsumers);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (warp == RingConsumers) {
        if (lane == 0)
            for (int k = 0, s = 0, round = 0; k < Knots; k++) {
                if (round > 0)
                    streamed::barrierWait(empty + 8 * s, (round - 1) & 1);
                streamed::bulkLoad(ringAddress + s * KnotFloats * (unsigned) sizeof(float), table + (size_t) k * KnotFloats,
                                   KnotFloats * (unsigned) sizeof(float), full + 8 * s);
                if (++s == Slots)
                    s = 0, round++;
            }
        return;
    }
    float sum = 0;
    for (int k = 0, s = 0, round = 0; k < Knots; k++) {
        streamed::barrierWait(full + 8 * s, round & 1);
        if (early) { // wrong on purpose: the slot is released before it is read
            __syncwarp();
            if (lane == 0)
                streamed::barrierArrive(empty + 8 * s);
        }
        sum += ring[s * KnotFloats + lane] * (float) (warp + 1) + ring[s * KnotFloats + 32 + lane];
        if (!early) {
            __syncwarp();
            if (lane == 0)
                streamed::barrierArrive(empty + 8 * s);
        }
        if (++s == Slots)
            s = 0, round++;
    }
    out[threadIdx.x] = sum;
}

} // namespace

int main(int argc, char** argv) {
    const bool early = argc > 1 && std::strcmp(argv[1], "early") == 0;
    std::vector<float> table((size_t) Knots * KnotFloats);
    for (size_t i = 0; i < table.size(); i++)
        table[i] = (float) (i % 97) * 0.25f;
    float* deviceTable = upload(table);
    float* out;
    CHECK(cudaMalloc(&out, RingConsumers * 32 * sizeof(float)));
    const size_t shared = Slots * (KnotFloats * sizeof(float) + 16);
    ringKernel<<<1, Threads, shared>>>(deviceTable, out, early ? 1 : 0);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    std::vector<float> found(RingConsumers * 32);
    CHECK(cudaMemcpy(found.data(), out, found.size() * sizeof(float), cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int t = 0; t < RingConsumers * 32; t++) {
        float sum = 0;
        for (int k = 0; k < Knots; k++)
            sum += table[(size_t) k * KnotFloats + t % 32] * (float) (t / 32 + 1) + table[(size_t) k * KnotFloats + 32 + t % 32];
        wrong += found[t] != sum;
    }
    std::printf("%s: %d of %d sums wrong\n", early ? "early release" : "ring", wrong, RingConsumers * 32);
    return 0;
}
