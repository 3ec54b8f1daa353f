#ifndef OPENMM_GRAPH_STREAMED_SCAN_CUH_
#define OPENMM_GRAPH_STREAMED_SCAN_CUH_

/**
 * The streamed edge scan shared by the moments (StreamedMomentsKernels.cu) and the forces (StreamedForcesKernels.cu):
 * the radial table streamed through shared memory (bench/NOTES.md v29-v31).  The row scans (EdgeScanKernels.cu) read
 * two knots of the table from L2 for every edge: 4,608 bytes an edge at the medium grade, 39.5 GB a scan at 100,800
 * particles, at the L2's throughput.  Here a block owns up to centersPerBlock centers of one type (consecutive in the
 * type-sorted node list), its lane groups keep their centers' state in registers, and a producer warp streams that
 * center type's knots, all neighbour types, degrees, values and channels of one knot at a time ([T][L+1][3][M] reals,
 * one 1-D TMA bulk copy each, from the table laid out by knot: streamedTableLayout), in rising knot order through a
 * ring of `slots` knots.  Every row is sorted by distance, so its edges come in rising knot order too: the consumer
 * warps walk the intervals in stages of `stageIntervals`, each group taking its centers' edges of the stage in row
 * order, then release the stage's knots (one mbarrier arrival a warp) for the producer to refill.  The table is read
 * from L2 once a block instead of once an edge.
 *
 * Each center's edges are taken one by one in canonical order by one lane group, so whatever a scan sums over a row
 * is a function of the row alone and bitwise reproducible.  An edge whose interval lies below its stage (a tie of the
 * rows' fixed-point distance keys can put an edge of interval q after one of q + 1) reads the knot the ring keeps
 * below the stage; two intervals below it is an error (GraphErrorEdgeOrder), which the plan rules out.
 *
 * What a scan does with an edge is its Body (streamedScan).
 */

#include "EdgeShape.cuh"
#include "GraphKernelLaunch.h"
#include "NetworkDeviceFunctions.cuh"
#include <algorithm>
#include <array>

namespace GraphPlugin {

namespace streamed {

/** Consumer warps a block, and one producer warp: 16 warps, 4 a scheduler, so that a thread may have 128 registers. */
constexpr int Consumers = 15;
constexpr int Threads = 32 * (Consumers + 1);
/** Static shared memory of a kernel beside the dynamic: the dynamic array's 128-byte alignment, which the static variable takes. */
constexpr size_t StaticShared = 128;

/** Edges of a group's window over a row: one a lane, at most 16 (the lanes past it fill none). */
template <int LPE> __host__ __device__ constexpr int windowDepth() {
    return LPE < 16 ? LPE : 16;
}

/** Shared memory of the groups' windows (windowDepth entries for each group and each of its centers) and rows (node, length). */
template <typename Edge, typename Shape> constexpr size_t windowBytes(int centersPerGroup) {
    const size_t centers = (size_t) Consumers * Shape::Groups * centersPerGroup;
    return centers * windowDepth<Shape::LPE>() * sizeof(Edge) + centers * sizeof(int2);
}

/**
 * Shared memory a block's windows may take, so that the ring keeps room for its knots in the 227 KB of a block on
 * compute capability 9.0: the moments' windows take at most 181 KB (double precision, l_max 1, four centers a group).
 */
constexpr size_t MaxWindowBytes = 192 * 1024;

/**
 * Centers a lane group of Shape takes: as many as `budget` registers (4-byte words) hold at `words` a center, 1 to 4,
 * and no more than keep the block's windows of Edge within MaxWindowBytes (the forces' 144-byte entries in double
 * precision at l_max 0 would take 276 KB with four).
 */
template <typename Edge, typename Shape> constexpr int centersPerGroup(int budget, int words) {
    int centers = budget / words < 1 ? 1 : budget / words > 4 ? 4 : budget / words;
    while (centers > 1 && windowBytes<Edge, Shape>(centers) > MaxWindowBytes)
        centers--;
    return centers;
}

__device__ inline unsigned sharedAddress(const void* p) {
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
 * The six table values (parity order: f, f', f'' of the even knot, then of the odd one) of channels k0 .. k0 + V - 1 of
 * degree l at an edge, from its interval's `even` and `odd` knots of its neighbour type in the ring ([L+1][3][M] reals
 * each, shared memory).
 */
template <typename real, int V>
__device__ inline void loadKnots(const real* even, const real* odd, int l, int k0, int M, real (&knot)[6][V]) {
#pragma unroll
    for (int w = 0; w < 3; w++) {
        loadVector<real, V>(even + l * 3 * M + w * M + k0, knot[w]);
        loadVector<real, V>(odd + l * 3 * M + w * M + k0, knot[w + 3]);
    }
}

/**
 * Window entry `entry` (Body::Edge) becomes edge e of center i's row of `count` edges, j its neighbour: the entry's
 * own values (Edge::set, from the edge's r, unit vector u and Hermite basis), the neighbour, its type's offset in a
 * ring slot and the interval; past the row's end, interval K (the table's intervals, so that no stage takes it), j = i
 * and nothing else.  And the neighbour of edge e + depth, for the entry's next fill.
 */
template <int LMAX, typename real, typename Edge>
__device__ inline void fillEntry(Edge& entry, const GraphModelParams<real>& model, const double* positions, const int* types,
                                 const int* neighbors, int capacity, int i, int e, int j, int count, int depth,
                                 const GraphBox<double>& box) {
    if (e < count) {
        real u[3];
        const real r = edgeGeometry(positions, i, j, box, u);
        const HermiteBasis<real> hermite(r, model);
        entry.set(hermite, r, u);
        entry.j = j;
        entry.tableOffset = types[j] * (LMAX + 1) * 3 * model.numChannels;
        entry.interval = hermite.interval;
    }
    else {
        entry.j = i;
        entry.tableOffset = 0;
        entry.interval = model.radialIntervals;
    }
    entry.nextJ = e + depth < count ? neighbors[(size_t) i * capacity + e + depth] : i;
}

/**
 * The streamed scan of this block (a kernel of Threads threads calls it and nothing else): block b takes
 * centers[blocks[b].x .. + blocks[b].y), all of type blocks[b].z.  Warp Consumers is the producer; in the others, lane
 * group g (Shape::LPE lanes) takes the block's centers g * CPG .. g * CPG + CPG - 1 (CPG = Body::Centers), lane s of it
 * channels (s + LPE x) V + v (EdgeShape).  Dynamic shared memory: `slots` knots of tableByKnot ([T][K+1][T][L+1][3][M]),
 * 2 * slots mbarriers, then the groups' windows [groups][CPG][windowDepth] of Body::Edge and their rows
 * (windowBytes).
 *
 * A group takes a stage center by center: the run of its window's edges (from the row's cursor on) below the stage's
 * end, counted at once from the lanes' intervals (a ballot), then those edges one by one with no other condition; a
 * window used up is refilled with the row's next edges, whose neighbours were loaded when it was last filled.
 *
 * Body (one object a thread, its state in registers):
 *  - `Edge`: a window entry, 16-byte aligned, with j, tableOffset, interval and nextJ (fillEntry) and the scan's own
 *    values, set(hermite, r, u) (HermiteBasis of the edge's r, its unit vector u);
 *  - `Centers`: centers a group takes;
 *  - begin(c, node, sub): before the first stage, for the group's center c (node -1: none);
 *  - edge(c, node, edge, even, odd, sub): one edge of center c's row, in row order, with its interval's even and odd
 *    knots (parity order, knotParity) of its neighbour type in the ring: [L+1][3][M] reals each, shared memory;
 *  - end(c, node, count, sub): after the last stage (count: the row's edges).
 * Every lane of a group calls them alike (group-wide shuffles are allowed, with the group's mask); groups of a warp
 * run different numbers of edges.
 */
template <typename real, int LMAX, typename Shape, typename Body>
__device__ inline void streamedScan(Body& body, const GraphModelParams<real>& model, const real* __restrict__ tableByKnot,
                                    const double* __restrict__ positions, const int* __restrict__ types, const int* __restrict__ centers,
                                    const int4* __restrict__ blocks, const GraphBox<double>& box, const int* __restrict__ neighbors,
                                    const int* __restrict__ rowCount, int capacity, GraphStatus* status, int slots, int stageIntervals) {
    constexpr int LPE = Shape::LPE, CPG = Body::Centers, Depth = windowDepth<LPE>();
    using Edge = typename Body::Edge;
    extern __shared__ __align__(128) unsigned char sharedBytes[];
    __shared__ int firstInterval;
    const real* ring = reinterpret_cast<const real*>(sharedBytes);
    const int K = model.radialIntervals;
    const int knotSize = model.numTypes * (LMAX + 1) * 3 * model.numChannels; // reals of one center type's knot
    const unsigned ringAddress = sharedAddress(sharedBytes);
    const unsigned full = ringAddress + slots * knotSize * (unsigned) sizeof(real), empty = full + 8 * slots;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, sub = lane % LPE, groupBase = lane / LPE * LPE;
    const int4 block = blocks[blockIdx.x]; // first, count, center type
    if (threadIdx.x == 0) {
        for (int s = 0; s < slots; s++) {
            barrierInit(full + 8 * s, 1);
            barrierInit(empty + 8 * s, Consumers);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        firstInterval = K - 1;
    }
    __syncthreads();

    // This group's window over each of its centers' rows (each entry with the neighbour of the edge Depth further on, for
    // the refill), the rows (node, length; shared memory, read only to refill a window) and each row's next edge (cursor).
    const unsigned groupMask = LPE == 32 ? 0xffffffffu : ((1u << LPE) - 1) << groupBase;
    const int group = min(warp * Shape::Groups + lane / LPE, Consumers * Shape::Groups - 1);
    Edge* windows = reinterpret_cast<Edge*>(sharedBytes + slots * (knotSize * sizeof(real) + 16));
    int2* rows = reinterpret_cast<int2*>(windows + Consumers * Shape::Groups * CPG * Depth) + group * CPG;
    windows += group * CPG * Depth;
    int cursor[CPG];
#pragma unroll
    for (int c = 0; c < CPG; c++) {
        const int slot = group * CPG + c;
        const bool active = warp < Consumers && slot < block.y;
        const int node = active ? centers[block.x + slot] : -1, count = active ? min(rowCount[node], capacity) : 0, i = max(node, 0);
        cursor[c] = 0;
        if (warp < Consumers && sub < Depth) {
            Edge& entry = windows[c * Depth + sub];
            const int j = sub < count ? neighbors[(size_t) i * capacity + sub] : i;
            fillEntry<LMAX>(entry, model, positions, types, neighbors, capacity, i, sub, j, count, Depth, box);
            if (sub == 0) {
                rows[c] = make_int2(node, count);
                if (entry.interval < K)
                    atomicMin(&firstInterval, entry.interval);
            }
        }
    }
    __syncthreads();
    const int q0 = firstInterval; // no row's first edge lies below it: the ring holds knots q0 .. K

    if (warp == Consumers) { // the producer: knot k into slot (k - q0) % slots once its previous knot is released
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

#pragma unroll
    for (int c = 0; c < CPG; c++)
        body.begin(c, rows[c].x, sub);
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
                    // The ring holds knots qs - 1 .. qe (one knot of lag: an edge may follow one of the next interval up).  An
                    // edge further below cannot come where the plan allows the scan (streamedScanPlan): it is taken at qs
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
                    body.edge(c, rows[c].x, edge, knotParity(q) ? second : first, knotParity(q) ? first : second, sub);
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
                    fillEntry<LMAX>(entry, model, positions, types, neighbors, capacity, i, e, entry.nextJ, row.y, Depth, box);
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
    for (int c = 0; c < CPG; c++)
        body.end(c, rows[c].x, rows[c].y, sub);
}

/** body(l, shape) for the model shapes the streamed scans are built for: vector shapes (M a multiple of 16 bytes of reals). */
template <typename real, typename Body> bool dispatchStreamedShape(int lMax, int numChannels, Body body) {
    if (numChannels % (16 / (int) sizeof(real)) != 0)
        return false;
    dispatchEdgeShape<real>(lMax, numChannels, [&](auto l, auto shape) {
        if constexpr (decltype(shape)::V > 1)
            body(l, shape);
    });
    return true;
}

/**
 * The ring and stages of a streamed scan whose blocks take centersPerBlock centers and windowBytes of windows (host):
 * `plan` with slots == 0 where the model cannot use it.
 */
template <typename real>
StreamedScanPlan ringPlan(const GraphModelParams<real>& model, int maxSharedBytes, int centersPerBlock, int groupLanes,
                          size_t windowBytes) {
    StreamedScanPlan plan;
    plan.knotBytes = sizeof(real) * (size_t) model.numTypes * (model.lMax + 1) * 3 * model.numChannels;
    plan.centersPerBlock = centersPerBlock;
    plan.groupLanes = groupLanes;
    // The ring keeps one knot below the stage, enough if an edge never follows one two or more intervals above it.
    // Rows are sorted by r^2 / r_c^2 in 32-bit fixed point, then by index: two edges out of distance order have the
    // same key, so their r differ by less than r_c^2 / (2^32 (r_1 + r_2)); if the later is in interval q >= 1 and the
    // earlier above q + 1, r_1 + r_2 > 2 (r_0 + dr) and the two are more than dr apart.  Rounding r to `real` adds
    // at most an ulp of r_c each.  So the order holds if dr exceeds both with a margin of 2.
    const double r0 = model.radialR0, dr = model.radialDr, rc = model.cutoff;
    const double ulp = sizeof(real) == 4 ? 0x1p-23 : 0x1p-52;
    plan.windowBytes = windowBytes;
    plan.refusal = StreamedScanPlan::Refusal::Intervals;
    if (!(r0 + dr > 0) || !(2 * (rc * rc / (0x1p32 * 2 * (r0 + dr)) + 2 * ulp * rc) < dr))
        return plan;
    // As many knots as the block's shared memory holds beside the windows and the static variable (each knot with its
    // two mbarriers), at most MaxSlots; a stage of a third of them (at most MaxStageIntervals), so that the warps may
    // drift two stages apart (a slot is refilled once every warp has finished the stage that read it).  With half of them
    // a warp waited for the slowest one and then for the copies at every stage: 3.86 ms against 3.56 at medium 100,800
    // (bench/NOTES.md v30).
    const size_t perSlot = plan.knotBytes + 16;
    plan.refusal = StreamedScanPlan::Refusal::SharedMemory;
    if ((size_t) maxSharedBytes < windowBytes + StaticShared + 4 * perSlot)
        return plan;
    const int fit = (int) std::min<size_t>(StreamedScanPlan::MaxSlots, (maxSharedBytes - StaticShared - windowBytes) / perSlot);
    plan.refusal = StreamedScanPlan::Refusal::None;
    plan.slots = fit;
    plan.stageIntervals = std::max(1, std::min(StreamedScanPlan::MaxStageIntervals, (fit - 1) / 3));
    plan.sharedBytes = plan.slots * perSlot + windowBytes;
    return plan;
}

/** A Body type as a value, for bodyPlan. */
template <typename T> struct BodyTag { using type = T; };

/** The plan (ringPlan) of the scan whose Body for the model's (l, shape) is bodyFor(l, shape)'s BodyTag. */
template <typename real, typename BodyFor>
StreamedScanPlan bodyPlan(const GraphModelParams<real>& model, int maxSharedBytes, BodyFor bodyFor) {
    StreamedScanPlan plan;
    dispatchStreamedShape<real>(model.lMax, model.numChannels, [&](auto l, auto shape) {
        using Body = typename decltype(bodyFor(l, shape))::type;
        using Shape = decltype(shape);
        plan = ringPlan<real>(model, maxSharedBytes, Consumers * Shape::Groups * Body::Centers, Shape::LPE,
                              windowBytes<typename Body::Edge, Shape>(Body::Centers));
    });
    return plan;
}

/**
 * Allows the kernels kernelsFor(l, shape) (a std::array) of the model's shape plan.sharedBytes of dynamic shared memory;
 * false if the plan or the device refuses.
 */
template <typename real, typename KernelsFor>
bool allowSharedMemory(const GraphModelParams<real>& model, const StreamedScanPlan& plan, KernelsFor kernelsFor) {
    bool ok = plan.slots > 0;
    dispatchStreamedShape<real>(model.lMax, model.numChannels, [&](auto l, auto shape) {
        for (auto kernel : kernelsFor(l, shape))
            ok = ok && cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int) plan.sharedBytes) == cudaSuccess;
    });
    cudaGetLastError(); // reported by the return value, not left for the next launch's check
    return ok;
}

} // namespace streamed

} // namespace GraphPlugin

#endif
