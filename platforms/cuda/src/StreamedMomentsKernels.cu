/**
 * Stage 2, streamed: the moments scan with the radial table streamed through
 * shared memory (bench/NOTES.md v29, v30).  The row scan (EdgeScanKernels.cu) reads
 * two knots of the table from L2 for every edge: 4,608 bytes an edge at the
 * medium grade, 39.5 GB a scan at 100,800 particles, at the L2's throughput.
 * Here a block owns up to centersPerBlock centers of one type (consecutive in
 * the type-sorted node list), its lane groups keep their centers' sums in
 * registers, and a producer warp streams that center type's knots, all
 * neighbour types, degrees, values and channels of one knot at a time
 * ([T][L+1][3][M] reals, one 1-D TMA bulk copy each, from the table laid
 * out by knot: streamedTableLayout), in rising knot order through a ring of
 * `slots` knots.  Every row is sorted by distance, so its edges come in rising
 * knot order too: the consumer warps walk the intervals in stages of
 * `stageIntervals`, each group summing its centers' edges of the stage in row
 * order, then release the stage's knots (one mbarrier arrival a warp) for the
 * producer to refill.  The table is read from L2 once a block instead of once
 * an edge.
 *
 * Each center's sums are taken edge by edge in canonical order by one lane
 * group (the R of an edge exactly as the row scan computes it), so they are a
 * function of the row alone and bitwise reproducible; they differ from the row
 * scan's (which adds per-warp chunks) in rounding only.  An edge whose interval
 * lies below its stage (a tie of the rows' fixed-point distance keys can put an
 * edge of interval q after one of q + 1) reads the knot the ring keeps below the
 * stage; two intervals below it is an error (GraphErrorEdgeOrder), which the
 * plan rules out.
 */

#include "ChainedLaunch.cuh"
#include "EdgeShape.cuh"
#include "GraphKernelLaunch.h"
#include "NetworkDeviceFunctions.cuh"
#include <algorithm>

namespace GraphPlugin {

namespace {

/** Consumer warps a block, and one producer warp: 16 warps, 4 a scheduler, so that a thread may have 128 registers. */
constexpr int StreamConsumers = 15;
constexpr int StreamThreads = 32 * (StreamConsumers + 1);
/** Registers of sums a lane (4-byte words) that a group's centers may take: CentersPerGroup. */
constexpr int StreamSumRegisters = 72;
/** Static shared memory of the kernel beside the dynamic: the dynamic array's 128-byte alignment, which the static variable takes. */
constexpr size_t StreamStaticShared = 128;
/** Edges of a group's window over a row: one a lane, at most 16 (the lanes past it fill none). */
template <int LPE> __host__ __device__ constexpr int windowDepth() {
    return LPE < 16 ? LPE : 16;
}

template <typename real, int LMAX> struct WindowEdge;

/** Centers a lane group takes: as many as StreamSumRegisters words of sums hold, 1 to 4. */
template <typename real, int LMAX, typename Shape> __host__ __device__ constexpr int centersPerGroup() {
    constexpr int words = (LMAX + 1) * (LMAX + 1) * Shape::Channels * (int) (sizeof(real) / 4);
    return StreamSumRegisters / words < 1 ? 1 : StreamSumRegisters / words > 4 ? 4 : StreamSumRegisters / words;
}

template <typename real, int LMAX, typename Shape> __host__ __device__ constexpr int streamCentersPerBlock() {
    return StreamConsumers * Shape::Groups * centersPerGroup<real, LMAX, Shape>();
}

/** Shared memory of the groups' windows (windowDepth entries for each group and each of its centers) and rows (node, length). */
template <typename real, int LMAX, typename Shape> constexpr size_t streamWindowBytes() {
    constexpr size_t centers = (size_t) StreamConsumers * Shape::Groups * centersPerGroup<real, LMAX, Shape>();
    return centers * windowDepth<Shape::LPE>() * sizeof(WindowEdge<real, LMAX>) + centers * sizeof(int2);
}

__device__ inline unsigned sharedWindow(const void* p) {
    return (unsigned) __cvta_generic_to_shared(p);
}

__device__ inline void barrierInit(unsigned barrier, unsigned arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(barrier), "r"(arrivals) : "memory");
}

__device__ inline void barrierArrive(unsigned barrier) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(barrier) : "memory");
}

/** Waits until the phase of parity `parity` of the mbarrier at `barrier` has completed. */
__device__ inline void barrierWait(unsigned barrier, unsigned parity) {
    unsigned done = 0;
    while (!done)
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done)
                     : "r"(barrier), "r"(parity)
                     : "memory");
}

/** `bytes` (a multiple of 16, both addresses 16-byte aligned) from global `src` to shared `dst` by TMA, completing on `barrier`. */
__device__ inline void bulkLoad(unsigned dst, const void* src, unsigned bytes, unsigned barrier) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(barrier), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst), "l"(src), "r"(bytes),
                 "r"(barrier)
                 : "memory");
}

/**
 * One edge of a group's window over a row (shared memory), everything its lanes need and nothing computed twice: the
 * Hermite basis of its r in parity order (HermiteBasis::value), its harmonics, the neighbour (for the node weights),
 * the offset of its neighbour type's table in a ring slot, and its interval.  Entry s is filled by lane s of the group
 * and read by all of them (16-byte broadcasts).  Past the row's end: interval K (the table's intervals, so that no
 * stage takes it).
 */
template <typename real, int LMAX> struct alignas(16) WindowEdge {
    static constexpr int H = (LMAX + 1) * (LMAX + 1);
    real basis[6], Y[H];
    int j, tableOffset, interval;
    int nextJ; ///< the neighbour of the edge `depth` further on (loaded by fill for the entry's next fill)

    /**
     * Edge e of center i's row of `count` edges (j its neighbour; past the row's end, i and a harmless entry), and the
     * neighbour of edge e + depth for the next fill of this entry.
     */
    __device__ void fill(const GraphModelParams<real>& model, const double* positions, const int* types, const int* neighbors, int capacity,
                         int i, int e, int j, int count, int depth, const GraphBox<double>& box) {
        if (e < count) {
            real u[3], grad[MaxHarmonics][3], harmonic[MaxHarmonics];
            const real r = edgeGeometry(positions, i, j, box, u);
            const HermiteBasis<real> hermite(r, model);
            harmonics(LMAX, u, harmonic, grad);
#pragma unroll
            for (int w = 0; w < 6; w++)
                basis[w] = hermite.value[w];
#pragma unroll
            for (int lm = 0; lm < H; lm++)
                Y[lm] = harmonic[lm];
            this->j = j;
            tableOffset = types[j] * (LMAX + 1) * 3 * model.numChannels;
            interval = hermite.interval;
        }
        else {
            this->j = i;
            tableOffset = 0;
            interval = model.radialIntervals;
        }
        nextJ = e + depth < count ? neighbors[(size_t) i * capacity + e + depth] : i;
    }
};

/**
 * Blocks of StreamThreads threads; block b takes centers[blocks[b].x .. + blocks[b].y), all of type blocks[b].z.
 * Warp StreamConsumers is the producer; in the others, lane group g (Shape::LPE lanes) takes the block's centers
 * g * CPG .. g * CPG + CPG - 1, lane s of it channels (s + LPE x) V + v (EdgeShape).  Dynamic shared memory:
 * `slots` knots of tableByKnot ([T][K+1][T][L+1][3][M]), 2 * slots mbarriers, then the groups' windows
 * [groups][CPG][windowDepth] (streamWindowBytes).
 *
 * A group takes a stage center by center: the run of its window's edges (from the row's cursor on) below the stage's
 * end, counted at once from the lanes' intervals (a ballot), then those edges one by one with no other condition; a
 * window used up is refilled with the row's next edges, whose neighbours were loaded when it was last filled.
 */
template <typename real, int LMAX, typename Shape, bool Weighted>
__global__ void __launch_bounds__(StreamThreads, 1)
    streamedMomentsKernel(GraphModelParams<real> model, const real* __restrict__ tableByKnot, const real* __restrict__ nodeWeights,
                          const double* __restrict__ positions, const int* __restrict__ types, const int* __restrict__ centers,
                          const int4* __restrict__ blocks, GraphBox<double> box, const int* __restrict__ neighbors,
                          const int* __restrict__ rowCount, int capacity, real* __restrict__ moments, GraphStatus* status, int slots,
                          int stageIntervals) {
    beginChainedKernel();
    constexpr int H = (LMAX + 1) * (LMAX + 1), C = Shape::Channels, V = Shape::V, LPE = Shape::LPE;
    constexpr int CPG = centersPerGroup<real, LMAX, Shape>(), Depth = windowDepth<LPE>();
    using Edge = WindowEdge<real, LMAX>;
    extern __shared__ __align__(128) unsigned char sharedBytes[];
    __shared__ int firstInterval;
    const real* ring = reinterpret_cast<const real*>(sharedBytes);
    const int M = model.numChannels, K = model.radialIntervals;
    const int knotSize = model.numTypes * (LMAX + 1) * 3 * M; // reals of one center type's knot
    const unsigned ringAddress = sharedWindow(sharedBytes);
    const unsigned full = ringAddress + slots * knotSize * (unsigned) sizeof(real), empty = full + 8 * slots;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, sub = lane % LPE, groupBase = lane / LPE * LPE;
    const int4 block = blocks[blockIdx.x]; // first, count, center type
    if (threadIdx.x == 0) {
        for (int s = 0; s < slots; s++) {
            barrierInit(full + 8 * s, 1);
            barrierInit(empty + 8 * s, StreamConsumers);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        firstInterval = K - 1;
    }
    __syncthreads();

    // This group's window over each of its centers' rows (each entry with the neighbour of the edge Depth further on, for
    // the refill), the rows (node, length; shared memory, read only to refill a window) and each row's next edge (cursor).
    const unsigned groupMask = LPE == 32 ? 0xffffffffu : ((1u << LPE) - 1) << groupBase;
    const int group = min(warp * Shape::Groups + lane / LPE, StreamConsumers * Shape::Groups - 1);
    Edge* windows = reinterpret_cast<Edge*>(sharedBytes + slots * (knotSize * sizeof(real) + 16));
    int2* rows = reinterpret_cast<int2*>(windows + StreamConsumers * Shape::Groups * CPG * Depth) + group * CPG;
    windows += group * CPG * Depth;
    int cursor[CPG];
#pragma unroll
    for (int c = 0; c < CPG; c++) {
        const int slot = group * CPG + c;
        const bool active = warp < StreamConsumers && slot < block.y;
        const int node = active ? centers[block.x + slot] : -1, count = active ? min(rowCount[node], capacity) : 0, i = max(node, 0);
        cursor[c] = 0;
        if (warp < StreamConsumers && sub < Depth) {
            Edge& entry = windows[c * Depth + sub];
            const int j = sub < count ? neighbors[(size_t) i * capacity + sub] : i;
            entry.fill(model, positions, types, neighbors, capacity, i, sub, j, count, Depth, box);
            if (sub == 0) {
                rows[c] = make_int2(node, count);
                if (entry.interval < K)
                    atomicMin(&firstInterval, entry.interval);
            }
        }
    }
    __syncthreads();
    const int q0 = firstInterval; // no row's first edge lies below it: the ring holds knots q0 .. K

    if (warp == StreamConsumers) { // the producer: knot k into slot (k - q0) % slots once its previous knot is released
        if (lane == 0)
            for (int k = q0, s = 0, round = 0; k <= K; k++) {
                if (round > 0)
                    barrierWait(empty + 8 * s, (round - 1) & 1);
                bulkLoad(ringAddress + s * knotSize * (unsigned) sizeof(real), tableByKnot + ((size_t) block.z * (K + 1) + k) * knotSize,
                         knotSize * (unsigned) sizeof(real), full + 8 * s);
                if (++s == slots)
                    s = 0, round++;
            }
        return;
    }

    real acc[CPG][H][C];
#pragma unroll
    for (int c = 0; c < CPG; c++)
#pragma unroll
        for (int lm = 0; lm < H; lm++)
#pragma unroll
            for (int x = 0; x < C; x++)
                acc[c][lm][x] = 0;
    int waited = q0 - 1, waitSlot = 0, waitRound = 0; // knots through `waited` have arrived; the next is in waitSlot
    int stageSlot = 0;                                // the ring slot of knot qs
    for (int qs = q0; qs < K; qs += stageIntervals) {
        const int qe = min(qs + stageIntervals, K);
        // Knots qs - 1 .. qe must have arrived.  (Waiting for each run's knots before the run instead, so that a warp could
        // start a stage on the knots that had arrived, took 4.02 ms instead of 3.56 at medium 100,800: bench/NOTES.md v30.)
        for (; waited < qe; waited++) {
            barrierWait(full + 8 * waitSlot, waitRound & 1);
            if (++waitSlot == slots)
                waitSlot = 0, waitRound++;
        }
#pragma unroll
        for (int c = 0; c < CPG; c++)
            while (true) {
                // The run of window entries from the cursor on whose intervals lie below qe (rows come in knot order but for
                // ties, so the run ends at the first entry at or above qe).
                const int pos = cursor[c] % Depth;
                const unsigned above =
                    (~__ballot_sync(groupMask, sub < Depth && windows[c * Depth + min(sub, Depth - 1)].interval < qe) >> groupBase) &
                    ((Depth == 32 ? 0u : 1u << Depth) - 1u);
                const unsigned stop = above & (~0u << pos);
                const int n = (stop ? __ffs(stop) - 1 : Depth) - pos;
                int badJ = -1, badInterval = 0; // the first edge of the run below the ring's knots, if any
#pragma unroll 1
                for (int e = pos; e < pos + n; e++) {
                    // The entry, 16 bytes at a time (broadcasts to the group).
                    Edge edge;
#pragma unroll
                    for (int w = 0; w < (int) (sizeof(Edge) / 16); w++)
                        reinterpret_cast<uint4*>(&edge)[w] = reinterpret_cast<const uint4*>(&windows[c * Depth + e])[w];
                    const real* basis = edge.basis;
                    const real* Y = edge.Y;
                    // The ring holds knots qs - 1 .. qe (one knot of lag: an edge may follow one of the next interval up).  An
                    // edge further below cannot come where the plan allows the scan (streamedMomentsPlan): it is summed at qs
                    // and reported after the run (refused, not guessed).
                    const bool outOfOrder = edge.interval + 1 < qs;
                    const int q = outOfOrder ? qs : edge.interval;
                    if (outOfOrder && badJ < 0)
                        badJ = edge.j, badInterval = edge.interval;
                    int s0 = stageSlot + (q - qs); // the slot of knot q; knot q + 1 is in the next one
                    s0 += s0 < 0 ? slots : s0 >= slots ? -slots : 0;
                    const int s1 = s0 + 1 == slots ? 0 : s0 + 1;
                    const real* first = ring + s0 * knotSize + edge.tableOffset;
                    const real* second = ring + s1 * knotSize + edge.tableOffset;
                    const real* even = knotParity(q) ? second : first; // slots 0-2 of the basis: the even knot's
                    const real* odd = knotParity(q) ? first : second;
                    // R_l,k of this lane's channels: channelsFromKnots' sums, in its order.
                    real R[LMAX + 1][C];
#pragma unroll
                    for (int x = 0; x < Shape::XPL; x++) {
                        const int k0 = min(sub + LPE * x, M / V - 1) * V; // a lane past M (XPL > 1) reads the last vector again
#pragma unroll
                        for (int l = 0; l <= LMAX; l++) {
                            real knot[6][V];
#pragma unroll
                            for (int w = 0; w < 3; w++) {
                                loadVector<real, V>(even + l * 3 * M + w * M + k0, knot[w]);
                                loadVector<real, V>(odd + l * 3 * M + w * M + k0, knot[w + 3]);
                            }
#pragma unroll
                            for (int v = 0; v < V; v++)
                                R[l][x * V + v] = knot[0][v] * basis[0] + knot[1][v] * basis[1] + knot[2][v] * basis[2] +
                                                  knot[3][v] * basis[3] + knot[4][v] * basis[4] + knot[5][v] * basis[5];
                        }
                    }
#pragma unroll
                    for (int x = 0; x < Shape::XPL; x++) {
                        const int k0 = (sub + LPE * x) * V;
                        if (k0 < M) { // M is a multiple of V
                            real weight[V];
                            if constexpr (Weighted)
                                loadChannels<real, V>(nodeWeights + (size_t) edge.j * M + k0, weight);
#pragma unroll
                            for (int l = 0; l <= LMAX; l++)
#pragma unroll
                                for (int v = 0; v < V; v++) {
                                    const real value = Weighted ? R[l][x * V + v] * weight[v] : R[l][x * V + v];
#pragma unroll
                                    for (int lm = l * l; lm < (l + 1) * (l + 1); lm++)
                                        acc[c][lm][x * V + v] += value * Y[lm];
                                }
                        }
                    }
                }
                if (badJ >= 0 && sub == 0) {
                    reportError(status, GraphErrorEdgeOrder, rows[c].x, badJ, (double) badInterval);
                    badJ = -1;
                }
                cursor[c] += n;
                if (pos + n < Depth) // the next entry lies at or above qe, or past the row's end
                    break;
                // The window is used up: the row's next Depth edges, their neighbours loaded at the last fill.
                __syncwarp(groupMask); // every lane of the group is done with the window
                if (sub < Depth) {
                    const int2 row = rows[c];
                    const int i = max(row.x, 0), e = cursor[c] + sub;
                    Edge& entry = windows[c * Depth + sub];
                    entry.fill(model, positions, types, neighbors, capacity, i, e, entry.nextJ, row.y, Depth, box);
                }
                __syncwarp(groupMask);
            }
        __syncwarp();
        if (lane == 0) // knots qs - 1 .. qe - 2 are done with (knot q0 - 1 was never loaded)
            for (int k = max(qs - 1, q0), s = stageSlot - (qs - k); k + 1 < qe; k++) {
                barrierArrive(empty + 8 * (s < 0 ? s + slots : s));
                s = s + 1 == slots ? 0 : s + 1;
            }
        stageSlot += qe - qs;
        stageSlot -= stageSlot >= slots ? slots : 0;
    }
#pragma unroll
    for (int c = 0; c < CPG; c++) {
        const int node = rows[c].x;
        if (node >= 0)
#pragma unroll
            for (int x = 0; x < Shape::XPL; x++) {
                const int k0 = (sub + LPE * x) * V;
                if (k0 < M)
#pragma unroll
                    for (int lm = 0; lm < H; lm++) {
                        real out[V];
#pragma unroll
                        for (int v = 0; v < V; v++)
                            out[v] = acc[c][lm][x * V + v] * model.invNorm;
                        storeVector<real, V>(moments + ((size_t) node * H + lm) * M + k0, out);
                    }
            }
    }
}

/** body(l, shape) for the model shapes the streamed scan is built for: vector shapes (M a multiple of 16 bytes of reals). */
template <typename real, typename Body> bool dispatchStreamedShape(int lMax, int numChannels, Body body) {
    if (numChannels % (16 / (int) sizeof(real)) != 0)
        return false;
    dispatchEdgeShape<real>(lMax, numChannels, [&](auto l, auto shape) {
        if constexpr (decltype(shape)::V > 1)
            body(l, shape);
    });
    return true;
}

} // namespace

template <typename real> StreamedMomentsPlan streamedMomentsPlan(const GraphModelParams<real>& model, int maxSharedBytes) {
    StreamedMomentsPlan plan;
    size_t windowBytes = 0;
    dispatchStreamedShape<real>(model.lMax, model.numChannels, [&](auto l, auto shape) {
        constexpr int L = decltype(l)::value;
        plan.knotBytes = sizeof(real) * (size_t) model.numTypes * (L + 1) * 3 * model.numChannels;
        plan.centersPerBlock = streamCentersPerBlock<real, L, decltype(shape)>();
        plan.groupLanes = decltype(shape)::LPE;
        windowBytes = streamWindowBytes<real, L, decltype(shape)>();
    });
    if (plan.knotBytes == 0)
        return StreamedMomentsPlan();
    // The ring keeps one knot below the stage, enough if an edge never follows one two or more intervals above it.
    // Rows are sorted by r^2 / r_c^2 in 32-bit fixed point, then by index: two edges out of distance order have the
    // same key, so their r differ by less than r_c^2 / (2^32 (r_1 + r_2)); if the later is in interval q >= 1 and the
    // earlier above q + 1, r_1 + r_2 > 2 (r_0 + dr) and the two are more than dr apart.  Rounding r to `real` adds
    // at most an ulp of r_c each.  So the order holds if dr exceeds both with a margin of 2.
    const double r0 = model.radialR0, dr = model.radialDr, rc = model.cutoff;
    const double ulp = sizeof(real) == 4 ? 0x1p-23 : 0x1p-52;
    if (!(r0 + dr > 0) || !(2 * (rc * rc / (0x1p32 * 2 * (r0 + dr)) + 2 * ulp * rc) < dr))
        return StreamedMomentsPlan();
    // As many knots as the block's shared memory holds beside the windows and the static variable (each knot with its
    // two mbarriers), at most MaxSlots; a stage of a third of them (at most MaxStageIntervals), so that the warps may
    // drift two stages apart (a slot is refilled once every warp has finished the stage that read it).  With half of them
    // a warp waited for the slowest one and then for the copies at every stage: 3.86 ms against 3.56 at medium 100,800
    // (bench/NOTES.md v30).
    const size_t perSlot = plan.knotBytes + 16;
    if ((size_t) maxSharedBytes < windowBytes + StreamStaticShared + 4 * perSlot)
        return StreamedMomentsPlan();
    const int fit = (int) std::min<size_t>(StreamedMomentsPlan::MaxSlots, (maxSharedBytes - StreamStaticShared - windowBytes) / perSlot);
    if (fit < 4)
        return StreamedMomentsPlan();
    plan.slots = fit;
    plan.stageIntervals = std::max(1, std::min(StreamedMomentsPlan::MaxStageIntervals, (fit - 1) / 3));
    plan.sharedBytes = plan.slots * perSlot + windowBytes;
    return plan;
}

template <typename real> bool configureStreamedMoments(const GraphModelParams<real>& model, const StreamedMomentsPlan& plan) {
    bool ok = plan.slots > 0;
    dispatchStreamedShape<real>(model.lMax, model.numChannels, [&](auto l, auto shape) {
        for (auto kernel : {streamedMomentsKernel<real, decltype(l)::value, decltype(shape), false>,
                            streamedMomentsKernel<real, decltype(l)::value, decltype(shape), true>})
            ok = ok && cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int) plan.sharedBytes) == cudaSuccess;
    });
    cudaGetLastError(); // reported by the return value, not left for the next launch's check
    return ok;
}

template <typename real>
std::vector<real> streamedTableLayout(const std::vector<real>& table, int numTypes, int lMax, int intervals, int numChannels) {
    std::vector<real> out(table.size());
    const size_t knot = 3 * (size_t) numChannels; // f, f', f'' of M channels
    for (int a = 0; a < numTypes; a++)
        for (int b = 0; b < numTypes; b++)
            for (int l = 0; l <= lMax; l++)
                for (int k = 0; k <= intervals; k++) {
                    const real* from = &table[((((size_t) a * numTypes + b) * (lMax + 1) + l) * (intervals + 1) + k) * knot];
                    real* to = &out[((((size_t) a * (intervals + 1) + k) * numTypes + b) * (lMax + 1) + l) * knot];
                    std::copy(from, from + knot, to);
                }
    return out;
}

std::vector<int> streamedMomentBlocks(const std::vector<int>& typeOffsets, int centersPerBlock) {
    std::vector<int> blocks;
    for (int t = 0; t + 1 < (int) typeOffsets.size(); t++)
        for (int b = typeOffsets[t]; b < typeOffsets[t + 1]; b += centersPerBlock)
            blocks.insert(blocks.end(), {b, std::min(centersPerBlock, typeOffsets[t + 1] - b), t, 0});
    return blocks;
}

template <typename real>
void launchStreamedMoments(const GraphModelParams<real>& model, const StreamedMomentsPlan& plan, const real* tableByKnot,
                           const real* nodeWeights, const double* positions, const int* types, const int* centers, const int* blocks,
                           int numBlocks, GraphBox<double> box, const int* neighbors, const int* rowCount, int capacity, real* moments,
                           GraphStatus* status, cudaStream_t stream) {
    if (numBlocks == 0)
        return;
    dispatchStreamedShape<real>(model.lMax, model.numChannels, [&](auto l, auto shape) {
        auto kernel = nodeWeights ? streamedMomentsKernel<real, decltype(l)::value, decltype(shape), true>
                                  : streamedMomentsKernel<real, decltype(l)::value, decltype(shape), false>;
        launchChained(kernel, numBlocks, StreamThreads, plan.sharedBytes, stream, model, tableByKnot, nodeWeights, positions, types,
                      centers, reinterpret_cast<const int4*>(blocks), box, neighbors, rowCount, capacity, moments, status, plan.slots,
                      plan.stageIntervals);
    });
}

#define GRAPH_INSTANTIATE_STREAMED(real)                                                                                                   \
    template StreamedMomentsPlan streamedMomentsPlan<real>(const GraphModelParams<real>&, int);                                            \
    template bool configureStreamedMoments<real>(const GraphModelParams<real>&, const StreamedMomentsPlan&);                               \
    template std::vector<real> streamedTableLayout<real>(const std::vector<real>&, int, int, int, int);                                    \
    template void launchStreamedMoments<real>(const GraphModelParams<real>&, const StreamedMomentsPlan&, const real*, const real*,         \
                                              const double*, const int*, const int*, const int*, int, GraphBox<double>, const int*,        \
                                              const int*, int, real*, GraphStatus*, cudaStream_t);
GRAPH_INSTANTIATE_STREAMED(float)
GRAPH_INSTANTIATE_STREAMED(double)

} // namespace GraphPlugin
