/**
 * Stage 1 of the CUDA pipeline: the compact canonical neighbour graph, built on
 * the device from OpenMM's posq every evaluation.  Positions are gathered into
 * force order, binned into cells at least half a cut-off thick, sorted by
 * cell (stable radix sort) and copied in that order, and every row (the
 * centers taken in cell order) is collected from the columns of cells that the
 * cut-off sphere reaches (CellColumns.h) and sorted by (fixed-point r^2,
 * index), so the graph depends only on positions and force indices, never on
 * OpenMM's atom order.
 */

#include "CellColumns.h"
#include "ChainedLaunch.cuh"
#include "GraphDeviceFunctions.cuh"
#include "GraphKernelLaunch.h"
#include "internal/GraphSamePosition.h"
#include <algorithm>
#include <cub/device/device_radix_sort.cuh>

namespace GraphPlugin {

namespace {

constexpr int WarpsPerBlock = 4;
/**
 * The all-pairs kernel's block: 8 warps a row (two rounds of candidates at 512 particles, not four) and 4 lanes per entry
 * of its rank sort (about 22 comparisons a lane for a row of 85, not 85); 4 blocks fit on a multiprocessor, so the
 * 512 rows of the smallest standard case run in one wave on 128 or more multiprocessors.
 */
constexpr int AllPairsWarps = 8, AllPairsSplit = 4;

template <typename posqType>
__global__ void gatherPositionsKernel(const posqType* __restrict__ posq, const float4* __restrict__ posqCorrection,
                                      const int* __restrict__ atomIndex, int numSlots, const int* __restrict__ nodeOfSystemParticle,
                                      double* __restrict__ positions, int* __restrict__ slotOfNode, GraphStatus* status) {
    beginChainedKernel();
    for (int slot = blockIdx.x * blockDim.x + threadIdx.x; slot < numSlots; slot += gridDim.x * blockDim.x) {
        int node = nodeOfSystemParticle[atomIndex[slot]];
        if (node < 0)
            continue;
        const posqType p = posq[slot];
        double x = p.x, y = p.y, z = p.z;
        if (posqCorrection) {
            const float4 c = posqCorrection[slot];
            x += (double) c.x;
            y += (double) c.y;
            z += (double) c.z;
        }
        positions[3 * node] = x;
        positions[3 * node + 1] = y;
        positions[3 * node + 2] = z;
        slotOfNode[node] = slot;
        if (!isfinite(x) || !isfinite(y) || !isfinite(z))
            reportError(status, GraphErrorNonFinitePosition, node, -1, 0.0);
    }
}

/**
 * The block's bounding box of the boxes lo/hi of its threads (shared reduction, blockDim.x = GridBoundsThreads): the
 * result in low[d][0] and high[d][0] for every thread.  Minima and maxima are exact, so any order gives the same bits.
 */
template <typename real>
__device__ void reduceBounds(const real lo[3], const real hi[3], real (*low)[GridBoundsThreads], real (*high)[GridBoundsThreads]) {
    for (int d = 0; d < 3; d++) {
        low[d][threadIdx.x] = lo[d];
        high[d][threadIdx.x] = hi[d];
    }
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride)
            for (int d = 0; d < 3; d++) {
                low[d][threadIdx.x] = min(low[d][threadIdx.x], low[d][threadIdx.x + stride]);
                high[d][threadIdx.x] = max(high[d][threadIdx.x], high[d][threadIdx.x + stride]);
            }
        __syncthreads();
    }
}

/** Open boundaries with more than one block of bounds: each block's bounding box of its grid-stride share of the particles into
 * bounds[block] (low xyz, high xyz). */
template <typename real>
__global__ void __launch_bounds__(GridBoundsThreads) boundsKernel(const real* __restrict__ positions, int n, real* __restrict__ bounds) {
    beginChainedKernel();
    __shared__ real low[3][GridBoundsThreads], high[3][GridBoundsThreads];
    real lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        for (int d = 0; d < 3; d++) {
            lo[d] = min(lo[d], positions[3 * i + d]);
            hi[d] = max(hi[d], positions[3 * i + d]);
        }
    reduceBounds(lo, hi, low, high);
    if (threadIdx.x < 3) {
        bounds[6 * blockIdx.x + threadIdx.x] = low[threadIdx.x][0];
        bounds[6 * blockIdx.x + 3 + threadIdx.x] = high[threadIdx.x][0];
    }
}

/**
 * One block: the grid from the periodic box, or from the bounding box of the open system's positions, read directly
 * (numBounds 0) or as the numBounds block boxes of boundsKernel.
 */
template <typename real>
__global__ void __launch_bounds__(GridBoundsThreads)
    gridSetupKernel(const real* __restrict__ positions, int n, GraphBox<real> box, real cutoff, int maxCells,
                    const real* __restrict__ bounds, int numBounds, GraphGrid<real>* grid) {
    beginChainedKernel();
    __shared__ real low[3][GridBoundsThreads], high[3][GridBoundsThreads];
    real extent[3];
    if (box.periodic)
        periodicHeights(box, extent);
    else {
        real lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
        if (numBounds > 0)
            for (int b = threadIdx.x; b < numBounds; b += blockDim.x)
                for (int d = 0; d < 3; d++) {
                    lo[d] = min(lo[d], bounds[6 * b + d]);
                    hi[d] = max(hi[d], bounds[6 * b + 3 + d]);
                }
        else
            for (int i = threadIdx.x; i < n; i += blockDim.x)
                for (int d = 0; d < 3; d++) {
                    lo[d] = min(lo[d], positions[3 * i + d]);
                    hi[d] = max(hi[d], positions[3 * i + d]);
                }
        reduceBounds(lo, hi, low, high);
        for (int d = 0; d < 3; d++)
            extent[d] = n > 0 ? high[d][0] - low[d][0] : real(0);
    }
    if (threadIdx.x != 0)
        return;
    real origin[3];
    for (int d = 0; d < 3; d++)
        origin[d] = box.periodic || n == 0 ? real(0) : low[d][0];
    setGrid(extent, origin, cutoff, maxCells, *grid);
}

template <typename real>
__global__ void cellKeysKernel(const real* __restrict__ positions, int n, GraphBox<real> box, const GraphGrid<real>* __restrict__ gridPtr,
                               uint32_t* __restrict__ cellOfNode, int* __restrict__ nodeIds) {
    beginChainedKernel();
    const GraphGrid<real> grid = *gridPtr;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        real x[3] = {positions[3 * i], positions[3 * i + 1], positions[3 * i + 2]};
        real u[3];
        int cell[3];
        cellCoordinates(x, box, grid, u, cell);
        cellOfNode[i] = (uint32_t) ((cell[2] * grid.numCells[1] + cell[1]) * grid.numCells[0] + cell[0]);
        nodeIds[i] = i;
    }
}

/**
 * The positions in the cell order of the sort (w: the particle's index, exact in a double), index p < n, and cellStart[c] for every cell c
 * of the grid and c = the cells: the first cell-sorted particle of cell c or later (a binary search), so that the particles of cells [c,
 * c'] are [cellStart[c], cellStart[c' + 1]) whether or not any is empty.
 */
template <typename real>
__global__ void cellRangesKernel(const uint32_t* __restrict__ sortedCells, const int* __restrict__ sortedNodes,
                                 const double* __restrict__ positions, int n, const GraphGrid<real>* __restrict__ grid,
                                 int* __restrict__ cellStart, GraphDouble4* __restrict__ sortedPositions) {
    const int cells = grid->numCells[0] * grid->numCells[1] * grid->numCells[2];
    for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < max(n, cells + 1); p += gridDim.x * blockDim.x) {
        if (p < n) {
            const int node = sortedNodes[p];
            sortedPositions[p] = GraphDouble4{positions[3 * node], positions[3 * node + 1], positions[3 * node + 2], (double) node};
        }
        if (p <= cells) {
            int low = 0, high = n; // the first position whose cell is p or later lies in [low, high]
            while (low < high) {
                const int middle = (low + high) / 2;
                if (sortedCells[middle] < (uint32_t) p)
                    low = middle + 1;
                else
                    high = middle;
            }
            cellStart[p] = low;
        }
    }
}

/** Rows up to this capacity are collected and sorted in shared memory (8 bytes per entry and warp); longer ones in global scratch. */
constexpr int SharedRowCapacity = 1024;

/**
 * Whether j (at xj) is a neighbour of center i (at xi): r < r_c after the
 * minimum image, j != i and not at i's position (isSamePosition: distance 0
 * up to the rounding of the coordinates, reported as an error); its sort key
 * (distanceKey) in key.
 */
template <typename real>
__device__ inline bool acceptCandidate(int i, const real xi[3], int j, const real xj[3], const GraphBox<real>& box, real cutoff2,
                                       real invCutoff2, GraphStatus* status, uint32_t& key) {
    real d[3] = {xj[0] - xi[0], xj[1] - xi[1], xj[2] - xi[2]};
    minimumImage(d, box);
    real r2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
    key = distanceKey(r2, invCutoff2);
    if (j == i || !(r2 < cutoff2))
        return false;
    if (isSamePosition(r2, xi, xj, cutoff2)) {
        reportError(status, GraphErrorSamePosition, min(i, j), max(i, j), 0.0);
        return false;
    }
    return true;
}

/** A collected entry of a row: its sort key above, the neighbour's index below, so that entries order as (key, index). */
__device__ inline uint64_t rowEntry(uint32_t key, int j) {
    return (uint64_t) key << 32 | (uint32_t) j;
}

/**
 * Rank sort of a collected row (distinct rowEntry values, in any order) into neighbors[i][0, stored): each entry's
 * rank is the number of entries below it.  Threads thread and thread + k threads (k = 0, 1, ...) of `threads` (a
 * multiple of 32, all of them calling) rank entries thread / Split + k threads / Split, each entry counted by Split
 * consecutive lanes (a power of two up to 32) over every Split-th other entry and their counts added with shuffles:
 * more lanes per entry, a shorter loop.
 */
template <int Split>
__device__ inline void sortRowByRank(const uint64_t* entries, int stored, int i, int capacity, int* neighbors, int thread, int threads) {
    const int sub = thread % Split, perPass = threads / Split;
    for (int base = 0; base < stored; base += perPass) {
        const int e = base + thread / Split;
        const bool active = e < stored;
        int rank = 0;
        uint64_t entry = 0;
        if (active) {
            entry = entries[e];
            for (int f = sub; f < stored; f += Split)
                rank += entries[f] < entry ? 1 : 0;
        }
#pragma unroll
        for (int offset = 1; offset < Split; offset *= 2)
            rank += __shfl_xor_sync(0xffffffff, rank, offset);
        if (active && sub == 0)
            neighbors[(size_t) i * capacity + rank] = (int) (uint32_t) entry;
    }
}

/**
 * Bitonic sort of a warp's row of up to 32 PerLane entries (rowEntry values) in registers: entry e = lane PerLane + s
 * in v[s] (entries past the row hold ~0, which sort last), compare-exchanges within a lane for partners less than
 * PerLane apart and by shuffles across lanes beyond (15 of the 28 stages of a row of 128).  Then the lane's entries
 * are neighbors[i][lane PerLane + s] for those below stored.  Called by all 32 lanes.
 */
template <int PerLane>
__device__ inline void sortRowInRegisters(const uint64_t* entries, int stored, int i, int capacity, int* neighbors, int lane) {
    constexpr int Count = 32 * PerLane;
    uint64_t v[PerLane];
#pragma unroll
    for (int s = 0; s < PerLane; s++) {
        const int e = lane * PerLane + s;
        v[s] = e < stored ? entries[e] : ~0ull;
    }
#pragma unroll
    for (int k = 2; k <= Count; k *= 2) {
#pragma unroll
        for (int j = k / 2; j > 0; j /= 2) {
            if (j < PerLane) {
#pragma unroll
                for (int s = 0; s < PerLane; s++) {
                    if ((s & j) != 0)
                        continue;
                    const bool ascending = ((lane * PerLane + s) & k) == 0;
                    const uint64_t a = v[s], b = v[s | j];
                    const bool swap = ascending ? b < a : a < b;
                    v[s] = swap ? b : a;
                    v[s | j] = swap ? a : b;
                }
            }
            else {
                const int laneMask = j / PerLane;
                const bool lower = (lane & laneMask) == 0;
#pragma unroll
                for (int s = 0; s < PerLane; s++) {
                    const uint64_t other = __shfl_xor_sync(0xffffffff, v[s], laneMask);
                    const bool ascending = ((lane * PerLane + s) & k) == 0;
                    // The lower entry of an ascending pair keeps the smaller value, as does the upper of a descending one.
                    const bool keepSmaller = lower == ascending;
                    v[s] = (other < v[s]) == keepSmaller ? other : v[s];
                }
            }
        }
    }
#pragma unroll
    for (int s = 0; s < PerLane; s++) {
        const int e = lane * PerLane + s;
        if (e < stored)
            neighbors[(size_t) i * capacity + e] = (int) (uint32_t) v[s];
    }
}

/**
 * A warp's collected row sorted into neighbors[i][0, stored): in registers (sortRowInRegisters, the fewest entries a
 * lane that hold it) up to 128 entries, by rank beyond.  Called by all 32 lanes.
 */
__device__ inline void sortWarpRow(const uint64_t* entries, int stored, int i, int capacity, int* neighbors, int lane) {
    if (stored <= 32)
        sortRowInRegisters<1>(entries, stored, i, capacity, neighbors, lane);
    else if (stored <= 64)
        sortRowInRegisters<2>(entries, stored, i, capacity, neighbors, lane);
    else if (stored <= 128)
        sortRowInRegisters<4>(entries, stored, i, capacity, neighbors, lane);
    else
        sortRowByRank<1>(entries, stored, i, capacity, neighbors, lane, 32);
}

/**
 * One warp's row of center i while it is collected: candidates are offered
 * 32 at a time (one per lane, in any order), the accepted ones (0 < r < r_c)
 * go to the warp's scratch with their keys, and finish() sorts the row by
 * (key, index) into the row storage.  The scratch is shared memory when the
 * launch gave it (capacity <= SharedRowCapacity), else global, reused row
 * after row by the warp.
 */
template <typename real> struct RowBuilder {
    int lane, i, capacity, count = 0;
    real xi[3], cutoff2, invCutoff2;
    uint64_t* entries; ///< the warp's scratch: [capacity] rowEntry values

    __device__ RowBuilder(int i, const GraphDouble4& position, real cutoff, int capacity, uint64_t* entryScratch)
        : lane(threadIdx.x & 31), i(i), capacity(capacity) {
        xi[0] = position.x;
        xi[1] = position.y;
        xi[2] = position.z;
        cutoff2 = cutoff * cutoff;
        invCutoff2 = 1 / cutoff2;
        extern __shared__ uint64_t rowShared[];
        if (capacity <= SharedRowCapacity)
            entries = rowShared + (threadIdx.x >> 5) * capacity;
        else
            entries = entryScratch + (size_t) ((blockIdx.x * blockDim.x + threadIdx.x) >> 5) * capacity;
    }

    /** Lane's candidate j at position xj (j -1: none); called by all 32 lanes. */
    __device__ void offer(int j, const GraphDouble4& xj, const GraphBox<real>& box, GraphStatus* status) {
        uint32_t key = 0;
        const real x[3] = {xj.x, xj.y, xj.z};
        const bool accept = j >= 0 && acceptCandidate(i, xi, j, x, box, cutoff2, invCutoff2, status, key);
        unsigned mask = __ballot_sync(0xffffffff, accept);
        int position = count + __popc(mask & ((1u << lane) - 1));
        if (accept && position < capacity)
            entries[position] = rowEntry(key, j);
        count += __popc(mask);
    }

    /** The row sorted by (key, index) into neighbors[i][0, min(count, capacity)), its length into rowCount[i]. */
    __device__ void finish(int* neighbors, int* rowCount, GraphStatus* status) {
        if (lane == 0)
            atomicMax(&status->maxRowCount, count);
        const int stored = min(count, capacity);
        __syncwarp();
        sortWarpRow(entries, stored, i, capacity, neighbors, lane);
        if (lane == 0)
            rowCount[i] = stored;
        __syncwarp(); // the scratch is rewritten by this warp's next row
    }
};

/**
 * A warp's candidates of one row: the particles of the row's columns (CellColumns.h, a lane each, each up to two ranges
 * of the cell-sorted particles), as one flat list.  The lanes' sizes are summed with shuffles (`end`, inclusive), and
 * candidate q (0 <= q < total) is found by a binary search over the lanes' `end`s, so 32 candidates go out at once
 * whatever the columns' sizes and the cells' ranges are read once, all at the same time.  The order of the candidates
 * does not matter: the sort orders the row.
 */
struct CellCandidates {
    int split = 0;  ///< this lane's candidates before `split` are in its first range, the rest in its second
    int shiftA = 0; ///< candidate q of the first range is position q + shiftA of the cell-sorted particles
    int shiftB = 0; ///< and of the second, q + shiftB
    int end = 0;    ///< one past this lane's last candidate
    int total = 0;  ///< the row's candidates

    /** This lane's ranges [startA, startA + sizeA) and [startB, startB + sizeB) (sizes 0: none). Called by all 32 lanes. */
    __device__ CellCandidates(int startA, int sizeA, int startB, int sizeB) {
        const int lane = threadIdx.x & 31;
        end = sizeA + sizeB;
#pragma unroll
        for (int offset = 1; offset < 32; offset *= 2) {
            const int before = __shfl_up_sync(0xffffffff, end, offset);
            if (lane >= offset)
                end += before;
        }
        const int begin = end - sizeA - sizeB;
        split = begin + sizeA;
        shiftA = startA - begin;
        shiftB = startB - split;
        total = __shfl_sync(0xffffffff, end, 31);
    }

    /** Candidate q's position in the cell-sorted particles (q < total; any value otherwise). Called by all 32 lanes. */
    __device__ int position(int q) const {
        int lane = 0; // the lanes whose end is <= q: the first lane past them holds q
#pragma unroll
        for (int step = 16; step > 0; step /= 2)
            if (__shfl_sync(0xffffffff, end, lane + step - 1) <= q)
                lane += step;
        lane = min(lane, 31);
        const int splitAt = __shfl_sync(0xffffffff, split, lane), a = __shfl_sync(0xffffffff, shiftA, lane),
                  b = __shfl_sync(0xffffffff, shiftB, lane);
        return q + (q < splitAt ? a : b);
    }
};

/**
 * The rows of the centers [firstCenter, firstCenter + numCenters), a warp a row, taken in cell order (position p of
 * the cell-sorted particles, those outside the range skipped), so that the warps of a multiprocessor read the same
 * cells; the candidates' positions come from sortedPositions, contiguous within a column.  cellStart [cells + 1]:
 * cellRangesKernel's.  The rows do not depend on the order they are built in.  Bounded to 6 blocks (24 warps) a
 * multiprocessor: 80 registers with the register sort, no spills (88 and 5 blocks unbounded).
 */
template <typename real>
__global__ void __launch_bounds__(32 * WarpsPerBlock, 6)
    buildRowsKernel(int n, int firstCenter, int numCenters, GraphBox<real> box, const GraphGrid<real>* __restrict__ gridPtr,
                    const GraphDouble4* __restrict__ sortedPositions, const int* __restrict__ cellStart, real cutoff, int capacity,
                    uint64_t* __restrict__ entryScratch, int* __restrict__ neighbors, int* __restrict__ rowCount, GraphStatus* status) {
    beginChainedKernel();
    const GraphGrid<real> grid = *gridPtr;
    const int lane = threadIdx.x & 31;
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int numWarps = (gridDim.x * blockDim.x) >> 5;
    const ColumnGeometry<real> geometry = columnGeometry(box, grid, cutoff);
    const bool hasColumn = lane < geometry.columns;
    for (int b = warp; b < n; b += numWarps) {
        const GraphDouble4 position = sortedPositions[b];
        const int center = (int) position.w;
        if (center < firstCenter || center >= firstCenter + numCenters)
            continue;
        RowBuilder<real> row(center, position, cutoff, capacity, entryScratch);
        real u[3];
        int cell[3];
        cellCoordinates(row.xi, box, grid, u, cell);
        int startA = 0, sizeA = 0, startB = 0, sizeB = 0;
        if (hasColumn) {
            int first[2], last[2];
            const int parts = columnRanges(lane, u, cell, grid, geometry, first, last);
            if (parts > 0) {
                startA = cellStart[first[0]];
                sizeA = cellStart[last[0] + 1] - startA;
            }
            if (parts > 1) {
                startB = cellStart[first[1]];
                sizeB = cellStart[last[1] + 1] - startB;
            }
        }
        const CellCandidates candidates(startA, sizeA, startB, sizeB);
        // Each round's position and index (w) are loaded one round ahead, so the load overlaps the round before.
        const int p0 = candidates.position(lane);
        GraphDouble4 next{0, 0, 0, -1.0};
        if (lane < candidates.total)
            next = sortedPositions[p0];
        for (int base = 0; base < candidates.total; base += 32) {
            const GraphDouble4 xj = next;
            const int q = base + 32 + lane;
            const int p = candidates.position(q);
            next = q < candidates.total ? sortedPositions[p] : GraphDouble4{0, 0, 0, -1.0};
            row.offer((int) xj.w, xj, box, status);
        }
        row.finish(neighbors, rowCount, status);
    }
}

/**
 * The rows of small systems (n <= AllPairsLimit): one block per row, every
 * particle a candidate, offered in index order straight from the positions
 * (no cell grid, sort or indirection), the block's warps taking every
 * AllPairsWarps-th batch of 32.  The warps append what they accept to the
 * block's scratch (shared memory up to SharedRowCapacity, else global, one
 * row per block) in whatever order they come; the rank sort by (key, index)
 * then gives the same rows as buildRowsKernel.
 */
template <typename real>
__global__ void __launch_bounds__(32 * AllPairsWarps, 4)
    buildRowsAllPairsKernel(const real* __restrict__ positions, int n, int firstCenter, int numCenters, GraphBox<real> box, real cutoff,
                            int capacity, uint64_t* __restrict__ entryScratch, int* __restrict__ neighbors, int* __restrict__ rowCount,
                            GraphStatus* status) {
    beginChainedKernel();
    extern __shared__ uint64_t rowShared[];
    __shared__ int count;
    const int lane = threadIdx.x & 31;
    uint64_t* entries = capacity <= SharedRowCapacity ? rowShared : entryScratch + (size_t) blockIdx.x * capacity;
    const real cutoff2 = cutoff * cutoff, invCutoff2 = 1 / cutoff2;
    for (int b = blockIdx.x; b < numCenters; b += gridDim.x) {
        const int i = firstCenter + b;
        const real xi[3] = {positions[3 * i], positions[3 * i + 1], positions[3 * i + 2]};
        if (threadIdx.x == 0)
            count = 0;
        __syncthreads();
        for (int base = (threadIdx.x >> 5) * 32; base < n; base += blockDim.x) {
            const int j = base + lane;
            uint32_t key = 0;
            const bool accept = j < n && acceptCandidate(i, xi, j, positions + 3 * j, box, cutoff2, invCutoff2, status, key);
            const unsigned mask = __ballot_sync(0xffffffff, accept);
            int start = 0;
            if (lane == 0 && mask != 0)
                start = atomicAdd(&count, __popc(mask));
            const int position = __shfl_sync(0xffffffff, start, 0) + __popc(mask & ((1u << lane) - 1));
            if (accept && position < capacity)
                entries[position] = rowEntry(key, j);
        }
        __syncthreads();
        const int total = count, stored = min(total, capacity);
        if (threadIdx.x == 0) {
            atomicMax(&status->maxRowCount, total);
            rowCount[i] = stored;
        }
        sortRowByRank<AllPairsSplit>(entries, stored, i, capacity, neighbors, threadIdx.x, blockDim.x);
        __syncthreads(); // the scratch and the count are rewritten for the block's next row
    }
}

int blocksFor(size_t work, int threads) {
    return (int) std::min<size_t>((work + threads - 1) / threads, 65535 * 8);
}

} // namespace

template <typename posqType>
void launchGatherPositions(const posqType* posq, const float4* posqCorrection, const int* atomIndex, int numSlots,
                           const int* nodeOfSystemParticle, double* positions, int* slotOfNode, GraphStatus* status, cudaStream_t stream) {
    launchChained(gatherPositionsKernel<posqType>, blocksFor(numSlots, 256), 256, 0, stream, posq, posqCorrection, atomIndex, numSlots,
                  nodeOfSystemParticle, positions, slotOfNode, status);
}

int gridBoundsBlocks(int n, bool periodic) {
    if (periodic)
        return 0;
    const int blocks = (int) std::min<long long>(((long long) n + GridBoundsParticles - 1) / GridBoundsParticles, GridBoundsMaxBlocks);
    return blocks > 1 ? blocks : 0;
}

void launchGridSetup(const double* positions, int n, GraphBox<double> box, double cutoff, int maxCells, double* bounds,
                     GraphGrid<double>* grid, cudaStream_t stream) {
    const int blocks = gridBoundsBlocks(n, box.periodic != 0);
    if (blocks > 0)
        launchChained(boundsKernel<double>, blocks, GridBoundsThreads, 0, stream, positions, n, bounds);
    launchChained(gridSetupKernel<double>, 1, GridBoundsThreads, 0, stream, positions, n, box, cutoff, maxCells, (const double*) bounds,
                  blocks, grid);
}

size_t getCellSortScratchBytes(int n, int maxCells) {
    size_t bytes = 0;
    cub::DeviceRadixSort::SortPairs(nullptr, bytes, (const uint32_t*) nullptr, (uint32_t*) nullptr, (const int*) nullptr, (int*) nullptr,
                                    n);
    return bytes;
}

void launchCellSort(const double* positions, int n, GraphBox<double> box, const GraphGrid<double>* grid, int maxCells, uint32_t* cellOfNode,
                    uint32_t* sortedCells, int* nodeIds, int* sortedNodes, GraphDouble4* sortedPositions, int* cellStart, void* sortScratch,
                    size_t sortScratchBytes, cudaStream_t stream) {
    launchChained(cellKeysKernel<double>, blocksFor(n, 256), 256, 0, stream, positions, n, box, grid, cellOfNode, nodeIds);
    int endBit = 1;
    while (endBit < 32 && (1ll << endBit) < (long long) maxCells)
        endBit++;
    cub::DeviceRadixSort::SortPairs(sortScratch, sortScratchBytes, cellOfNode, sortedCells, nodeIds, sortedNodes, n, 0, endBit, stream);
    cellRangesKernel<double><<<blocksFor(std::max(n, maxCells + 1), 256), 256, 0, stream>>>(sortedCells, sortedNodes, positions, n, grid,
                                                                                            cellStart, sortedPositions);
}

void launchBuildRows(int n, int firstCenter, int numCenters, GraphBox<double> box, const GraphGrid<double>* grid,
                     const GraphDouble4* sortedPositions, const int* cellStart, double cutoff, int capacity, int scratchRows,
                     uint64_t* entryScratch, int* neighbors, int* rowCount, GraphStatus* status, cudaStream_t stream) {
    const int threads = 32 * WarpsPerBlock;
    if (numCenters == 0)
        return;
    const size_t warps = std::min<size_t>(numCenters, scratchRows);
    const size_t shared = capacity <= SharedRowCapacity ? (size_t) WarpsPerBlock * capacity * sizeof(uint64_t) : 0;
    launchChained(buildRowsKernel<double>, (unsigned) ((warps + WarpsPerBlock - 1) / WarpsPerBlock), threads, shared, stream, n,
                  firstCenter, numCenters, box, grid, sortedPositions, cellStart, cutoff, capacity, entryScratch, neighbors, rowCount,
                  status);
}

void launchBuildRowsAllPairs(const double* positions, int n, int firstCenter, int numCenters, GraphBox<double> box, double cutoff,
                             int capacity, int scratchRows, uint64_t* entryScratch, int* neighbors, int* rowCount, GraphStatus* status,
                             cudaStream_t stream) {
    if (numCenters == 0)
        return;
    // One row per block; global scratch (beyond SharedRowCapacity) holds scratchRows rows, one per block.
    const int blocks = std::min(numCenters, std::max(1, scratchRows));
    const size_t shared = capacity <= SharedRowCapacity ? (size_t) capacity * sizeof(uint64_t) : 0;
    launchChained(buildRowsAllPairsKernel<double>, blocks, 32 * AllPairsWarps, shared, stream, positions, n, firstCenter, numCenters, box,
                  cutoff, capacity, entryScratch, neighbors, rowCount, status);
}

template void launchGatherPositions<float4>(const float4*, const float4*, const int*, int, const int*, double*, int*, GraphStatus*,
                                            cudaStream_t);
template void launchGatherPositions<GraphDouble4>(const GraphDouble4*, const float4*, const int*, int, const int*, double*, int*,
                                                  GraphStatus*, cudaStream_t);

} // namespace GraphPlugin
