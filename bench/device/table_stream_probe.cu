/**
 * Center-stationary, table-streamed moments scan probe (bench/NOTES.md v29):
 * can a block that owns many centers of one type stream its center type's
 * radial table through shared memory once, in knot order, and so read far
 * fewer table bytes from L2 than a row scan does?
 *
 * The moments scan of the medium grade at 100,800 particles reads, per edge,
 * two knots of the quintic Hermite table for each of 3 degrees and 64
 * channels: 4,608 bytes from L2, 39.5 GB a scan, and runs at the L2's
 * throughput (v25).  The table-stationary probe (v16, table_probe.cu) cut
 * the table into channel slices kept in shared memory and lost, because
 * every slice repeated each edge's fixed work (basis, harmonics, geometry).
 * Here nothing is repeated: a block takes C = 64 centers of one type (the
 * type-ordered rows), each lane group keeps its centers' sums in registers,
 * and a producer warp streams that center type's knots (all four neighbour
 * types, 3 degrees, 3 values, 64 channels: 9,216 bytes a knot, 3.7 MB in
 * all) in rising knot order into a ring of S knot slots with 1-D TMA bulk
 * copies (cp.async.bulk, mbarrier complete_tx).  Since every row is sorted by
 * distance, a row's edges come in rising knot order too: the consumers walk
 * the intervals in stages of G, each summing its centers' edges that fall in
 * the stage (every row still in row order, so the sums are those of a row
 * scan in the same order), then release the stage's knots (an mbarrier
 * arrival a consumer warp) for the producer to refill.  Warps may drift
 * apart by up to S - G - 1 knots.  L2 table bytes: 1,575 blocks x 3.7 MB =
 * 5.8 GB instead of 39.5 GB; the table now comes from shared memory (128
 * B/clk a multiprocessor: 1.2 ms for 4,608 bytes an edge at best).
 *
 * Kernels (all compute the same A[i][lm][k]; data and l2 from
 * table_probe_common.cuh / table_probe.cu):
 *
 *   l2         a warp per row, rows in type order (the plugin's v25 scan: table_probe_common.cuh's scanRows);
 *   stream LPC lanes a center (32: 2 channels a lane, 4 centers a lane
 *              group; 16: 4 channels a lane, 2 centers a half-warp), 16
 *              consumer warps and a producer warp, S knot slots.
 *
 * Prints each kernel's mean time over `runs` runs (after a warm-up) and its
 * largest difference from l2 relative to max |A| (the same summation order:
 * 0 expected up to FMA contraction).
 *
 *   nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -o table_stream_probe table_stream_probe.cu
 *   table_stream_probe [n [runs]]
 */

#include "table_probe_common.cuh"

#include <vector>

namespace {

using namespace table_probe;

/** Floats and bytes of one knot of one center type's table: [tj][l][3][M]. */
constexpr int KnotFloats = T * NL * 3 * M, KnotBytes = KnotFloats * sizeof(float);
/** Consumer warps a block, and a producer warp: 16 warps, 4 a scheduler, so that each may have 128 registers (a 17th warp
 * would put 5 on one scheduler, whose 16 K registers then allow 96 a thread: "too many resources" at 120, run 1). */
constexpr int Consumers = 15;

/** Centers a block of scanStreamed<LPC, CPG, ...> takes. */
constexpr int centersPerBlock(int LPC, int CPG) {
    return Consumers * (32 / LPC) * CPG;
}

__device__ inline void arrive(unsigned barrier) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(barrier) : "memory");
}

__device__ inline void expectBytes(unsigned barrier, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(barrier), "r"(bytes) : "memory");
}

/** 1-D TMA: `bytes` (a multiple of 16) from global `src` to shared `dst`, completing on `barrier`. */
__device__ inline void bulkCopy(unsigned dst, const void* src, unsigned bytes, unsigned barrier) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst), "l"(src),
                 "r"(bytes), "r"(barrier)
                 : "memory");
}

/** The knot interval of r (table_probe_common.cuh's basis, without the weights). */
__device__ inline int intervalOf(float r) {
    return min(KI - 1, max(0, (int) floorf((r - R0) * (1.0f / DR))));
}

/**
 * Block b: centers centersOfType[blocks[b].x .. + blocks[b].y) of type blocks[b].z (at most centersPerBlock(LPC, CPG)).
 * Lane group g = (warp, lane / LPC) owns centers g * CPG .. g * CPG + CPG - 1 of the block, CPL = M / LPC channels a lane.
 * tableK [T][KN][T][NL][3][M] (center type, knot, neighbour type, degree, value, channel).
 */
template <int LPC, int CPG, int S, int G, bool Lockstep = false>
__global__ void __launch_bounds__(32 * (Consumers + 1), 1)
    scanStreamed(const float4* __restrict__ geo, const int* __restrict__ ntype, const int* __restrict__ centersOfType,
                 const int3* __restrict__ blocks, const float* __restrict__ tableK, float* __restrict__ A) {
    constexpr int CPL = M / LPC;
    static_assert(S >= G + 2, "a stage's knots and the next one's first must fit the ring");
    extern __shared__ __align__(128) float ring[]; // [S][KnotFloats], then 2 S mbarriers
    __shared__ int firstKnot;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int3 blk = blocks[blockIdx.x]; // first, count, center type
    const unsigned ringAddress = sharedAddress(ring), full = ringAddress + S * KnotBytes, empty = full + 8 * S;
    if (threadIdx.x == 0) {
        for (int s = 0; s < S; s++) {
            initBarrier(full + 8 * s, 1);
            initBarrier(empty + 8 * s, Consumers);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        firstKnot = KI - 1;
    }
    __syncthreads();
    const int group = warp * (32 / LPC) + lane / LPC, part = lane % LPC;
    int centers[CPG], cursor[CPG], next[CPG];
    float4 g[CPG];
#pragma unroll
    for (int c = 0; c < CPG; c++) {
        const int slot = group * CPG + c;
        centers[c] = slot < blk.y && warp < Consumers ? centersOfType[blk.x + slot] : -1;
        cursor[c] = centers[c] < 0 ? E : 0;
        g[c] = cursor[c] < E ? __ldg(&geo[(size_t) centers[c] * E]) : make_float4(RC, 0, 0, 0);
        next[c] = cursor[c] < E ? intervalOf(g[c].x) : KI;
        if (cursor[c] < E && part == 0)
            atomicMin(&firstKnot, next[c]);
    }
    __syncthreads();
    const int q0 = firstKnot; // every row's first edge lies in interval q0 or later
    if (warp == Consumers) {
        if (lane == 0)
            for (int k = q0; k < KN; k++) {
                const int n = k - q0, s = n % S;
                if (n >= S)
                    waitParity(empty + 8 * s, (n / S - 1) & 1);
                expectBytes(full + 8 * s, KnotBytes);
                bulkCopy(ringAddress + s * KnotBytes, tableK + ((size_t) blk.z * KN + k) * KnotFloats, KnotBytes, full + 8 * s);
            }
        return;
    }
    float acc[CPG][H][CPL] = {};
    int waited = q0 - 1; // knots up to this one have arrived
    for (int qs = q0; qs < KI; qs += G) {
        const int qe = min(qs + G, KI);
        for (int k = waited + 1; k <= qe; k++)
            waitParity(full + 8 * ((k - q0) % S), ((k - q0) / S) & 1);
        waited = qe;
        // Edge e of center c in interval q (knots q, q + 1 staged); Y scaled by `use` (0: a lockstep slot with no edge).
        auto edge = [&](int c, float use) {
            const int e = min(cursor[c], E - 1), q = use != 0 ? next[c] : qs, tj = __ldg(&ntype[(size_t) max(centers[c], 0) * E + e]);
            int qq;
            float h[6], Y[H];
            basis(g[c].x, qq, h);
            harmonics(g[c].y, g[c].z, g[c].w, Y);
#pragma unroll
            for (int lm = 0; lm < H; lm++)
                Y[lm] *= use;
            const float* p0 = ring + ((q - q0) % S) * KnotFloats + tj * NL * 3 * M + part * CPL;
            const float* p1 = ring + ((q + 1 - q0) % S) * KnotFloats + tj * NL * 3 * M + part * CPL;
#pragma unroll
            for (int l = 0; l < NL; l++) {
                float k[6][CPL];
#pragma unroll
                for (int v = 0; v < 3; v++) {
                    if constexpr (CPL % 4 == 0) {
#pragma unroll
                        for (int x = 0; x < CPL; x += 4) {
                            const float4 a = *reinterpret_cast<const float4*>(p0 + (l * 3 + v) * M + x);
                            const float4 b = *reinterpret_cast<const float4*>(p1 + (l * 3 + v) * M + x);
                            k[v][x] = a.x, k[v][x + 1] = a.y, k[v][x + 2] = a.z, k[v][x + 3] = a.w;
                            k[5 - v][x] = b.x, k[5 - v][x + 1] = b.y, k[5 - v][x + 2] = b.z, k[5 - v][x + 3] = b.w;
                        }
                    }
                    else {
                        const float2 a = *reinterpret_cast<const float2*>(p0 + (l * 3 + v) * M);
                        const float2 b = *reinterpret_cast<const float2*>(p1 + (l * 3 + v) * M);
                        k[v][0] = a.x, k[v][1] = a.y;
                        k[5 - v][0] = b.x, k[5 - v][1] = b.y;
                    }
                }
                // k[0..2] = p0 v0 a0, k[3..5] = a1 v1 p1: the weights' order h0..h5
#pragma unroll
                for (int v = 0; v < CPL; v++) {
                    const float R = k[0][v] * h[0] + k[1][v] * h[1] + k[2][v] * h[2] + k[3][v] * h[3] + k[4][v] * h[4] + k[5][v] * h[5];
#pragma unroll
                    for (int lm = l * l; lm < (l + 1) * (l + 1); lm++)
                        acc[c][lm][v] += R * Y[lm];
                }
            }
            if (use != 0) {
                cursor[c] = e + 1;
                if (e + 1 < E) {
                    g[c] = __ldg(&geo[(size_t) centers[c] * E + e + 1]);
                    next[c] = intervalOf(g[c].x);
                }
                else
                    next[c] = KI;
            }
        };
        if constexpr (Lockstep)
            // Rounds: every group of the warp takes one edge of each of its centers a round, a slot with no edge left in the
            // stage computing zeros, until no lane of the warp has one: straight-line code over the centers (their loads
            // overlap) and no divergence between the groups of a warp.
            while (true) {
                bool left = false;
#pragma unroll
                for (int c = 0; c < CPG; c++)
                    left |= next[c] < qe;
                if (!__any_sync(0xffffffff, left))
                    break;
#pragma unroll
                for (int c = 0; c < CPG; c++)
                    edge(c, next[c] < qe ? 1.0f : 0.0f);
            }
        else
#pragma unroll
            for (int c = 0; c < CPG; c++)
                while (next[c] < qe)
                    edge(c, 1.0f);
        __syncwarp();
        if (lane == 0)
            for (int k = qs; k < qe; k++)
                arrive(empty + 8 * ((k - q0) % S));
    }
#pragma unroll
    for (int c = 0; c < CPG; c++)
        if (centers[c] >= 0)
#pragma unroll
            for (int lm = 0; lm < H; lm++)
#pragma unroll
                for (int v = 0; v < CPL; v++)
                    A[((size_t) centers[c] * H + lm) * M + part * CPL + v] = acc[c][lm][v];
}

} // namespace

int main(int argc, char** argv) {
    const int n = argc > 1 ? std::atoi(argv[1]) : 100800, runs = argc > 2 ? std::atoi(argv[2]) : 10;
    const Rows rows(n);
    std::vector<int> centersOfType, typeStart;
    for (int t = 0; t < T; t++) {
        typeStart.push_back((int) centersOfType.size());
        for (int i = 0; i < n; i++)
            if (rows.types[i] == t)
                centersOfType.push_back(i);
    }
    typeStart.push_back(n);
    // Blocks of up to C centers of one type: (first index into centersOfType, count, type).
    auto blocksOf = [&](int C) {
        std::vector<int3> blocks;
        for (int t = 0; t < T; t++)
            for (int b = typeStart[t]; b < typeStart[t + 1]; b += C)
                blocks.push_back(make_int3(b, std::min(C, typeStart[t + 1] - b), t));
        return blocks;
    };
    // [ti][tj][l][knot][3][M] -> [ti][knot][tj][l][3][M]
    std::vector<float> tableK(rows.table.size());
    for (int ti = 0; ti < T; ti++)
        for (int tj = 0; tj < T; tj++)
            for (int l = 0; l < NL; l++)
                for (int k = 0; k < KN; k++)
                    for (int x = 0; x < 3 * M; x++)
                        tableK[(((size_t) ti * KN + k) * T * NL + tj * NL + l) * 3 * M + x] =
                            rows.table[((((size_t) ti * T + tj) * NL + l) * KN + k) * 3 * M + x];
    const float4* dGeo = upload(rows.geo);
    const int *dNtype = upload(rows.ntype), *dTypes = upload(rows.types), *dCenters = upload(centersOfType);
    const float *dTable = upload(rows.table), *dTableK = upload(tableK);
    float *dA1 = deviceZeros((size_t) n * H * M), *dA2 = deviceZeros((size_t) n * H * M);

    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("%s, %d SMs; n = %d, %lld edges, %d bytes a knot\n", prop.name, prop.multiProcessorCount, n, (long long) n * E, KnotBytes);
    const double tableBytes = (double) n * E * NL * 6 * M * sizeof(float);
    const float l2 = timeIt([&] { scanRows<<<(n + Warps - 1) / Warps, 32 * Warps>>>(dGeo, dNtype, dTypes, dCenters, dTable, dA1, n); }, runs);
    std::printf("l2 (type order)          %8.3f ms  (table rows %.2f GB: %.2f TB/s)\n", l2, tableBytes / 1e9, tableBytes / l2 / 1e9);
    std::vector<float> a1((size_t) n * H * M), a2(a1.size());
    CHECK(cudaMemcpy(a1.data(), dA1, a1.size() * sizeof(float), cudaMemcpyDeviceToHost));
    float largest = 0;
    for (float x : a1)
        largest = std::max(largest, std::fabs(x));
    bool ok = true;
    auto streamed = [&](auto kernel, const char* name, int centers, int slots) {
        const std::vector<int3> blocks = blocksOf(centers);
        const int3* dBlocks = upload(blocks);
        const int bytes = slots * KnotBytes + 16 * slots;
        CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
        CHECK(cudaMemset(dA2, 0, a2.size() * sizeof(float)));
        const float ms = timeIt([&] { kernel<<<(int) blocks.size(), 32 * (Consumers + 1), bytes>>>(dGeo, dNtype, dCenters, dBlocks, dTableK, dA2); },
                                runs);
        CHECK(cudaMemcpy(a2.data(), dA2, a2.size() * sizeof(float), cudaMemcpyDeviceToHost));
        float worst = 0;
        for (size_t x = 0; x < a1.size(); x++)
            worst = std::max(worst, std::fabs(a1[x] - a2[x]));
        std::printf("%-28s %8.3f ms  (%.2fx l2; %zu blocks of up to %d centers, L2 table bytes %.2f GB; max |difference| / max |A| = %.2e)\n",
                    name, ms, l2 / ms, blocks.size(), centers, (double) blocks.size() * KN * KnotBytes / 1e9, worst / largest);
        CHECK(cudaFree((void*) dBlocks));
        ok &= worst / largest < 1e-5f;
    };
    streamed(scanStreamed<32, 4, 20, 4>, "stream 32 lanes x4 S20 G4", centersPerBlock(32, 4), 20);
    streamed(scanStreamed<16, 2, 20, 4>, "stream 16 lanes x2 S20 G4", centersPerBlock(16, 2), 20);
    streamed(scanStreamed<16, 2, 20, 8>, "stream 16 lanes x2 S20 G8", centersPerBlock(16, 2), 20);
    streamed(scanStreamed<16, 2, 24, 8>, "stream 16 lanes x2 S24 G8", centersPerBlock(16, 2), 24);
    streamed(scanStreamed<16, 2, 24, 12>, "stream 16 lanes x2 S24 G12", centersPerBlock(16, 2), 24);
    streamed(scanStreamed<16, 2, 20, 8, true>, "lockstep 16 lanes x2 S20 G8", centersPerBlock(16, 2), 20);
    streamed(scanStreamed<16, 2, 24, 12, true>, "lockstep 16 lanes x2 S24 G12", centersPerBlock(16, 2), 24);
    streamed(scanStreamed<32, 4, 24, 12, true>, "lockstep 32 lanes x4 S24 G12", centersPerBlock(32, 4), 24);
    streamed(scanStreamed<32, 2, 24, 12, true>, "lockstep 32 lanes x2 S24 G12", centersPerBlock(32, 2), 24);
    streamed(scanStreamed<8, 1, 24, 12, true>, "lockstep 8 lanes x1 S24 G12", centersPerBlock(8, 1), 24);
    streamed(scanStreamed<8, 1, 20, 8, true>, "lockstep 8 lanes x1 S20 G8", centersPerBlock(8, 1), 20);
    std::printf(ok ? "results agree\n" : "RESULTS DIFFER\n");
    return ok ? 0 : 1;
}
