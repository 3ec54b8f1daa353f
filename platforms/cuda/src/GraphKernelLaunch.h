#ifndef OPENMM_GRAPH_KERNEL_LAUNCH_H_
#define OPENMM_GRAPH_KERNEL_LAUNCH_H_

/**
 * Host-callable launchers of the CUDA pipeline's stages (implemented in the
 * .cu files of this folder, instantiated for float and double).  Every
 * launcher only enqueues work on `stream`; none synchronises.  All pointers are
 * device memory; arrays are in force order (the order of addParticle) unless
 * said otherwise.
 */

#include "GraphDeviceTypes.h"
#include <cstddef>
#include <cstdint>
#include <cuda_runtime.h>
#include <string>
#include <vector>

namespace GraphPlugin {

// ---------------------------------------------------------------- graph build (GraphBuildKernels.cu)

/**
 * Positions of the force's particles from OpenMM's posq (posqType is float4 or
 * GraphDouble4; [numSlots] in OpenMM's sorted order), plus posqCorrection in
 * mixed precision (else nullptr), and the slot of each particle.  Positions are
 * kept in double, so that edge vectors (computed in double, then rounded to
 * `real`) do not change when OpenMM moves a particle by a box vector.
 * @param nodeOfSystemParticle [numSystemParticles]: force index or -1
 * @param positions            out [n][3] nm, double
 * @param slotOfNode           out [n]
 */
template <typename posqType>
void launchGatherPositions(const posqType* posq, const float4* posqCorrection, const int* atomIndex, int numSlots,
                           const int* nodeOfSystemParticle, double* positions, int* slotOfNode, GraphStatus* status, cudaStream_t stream);

/**
 * The open-boundary bounding box's work: blocks of GridBoundsThreads threads, one a GridBoundsParticles particles up to
 * GridBoundsMaxBlocks (each then reads more), whose boxes one block combines.  Up to GridBoundsParticles particles one
 * block reads the positions itself (one kernel, as for a periodic box); before, one block read every particle, 1.6 GB
 * at OpenMM's 67M-particle limit (bench/NOTES.md v67).
 */
constexpr int GridBoundsThreads = 256, GridBoundsParticles = 2048, GridBoundsMaxBlocks = 512;

/** The blocks of launchGridSetup's bounds (0: none, the grid's own block reads the positions or the box). */
int gridBoundsBlocks(int n, bool periodic);

/**
 * The cell grid (device), from the box or from the bounding box of the positions.
 * @param positions [n][3] nm, double (device)
 * @param bounds    scratch of [gridBoundsBlocks(n, box.periodic)][6] doubles (device): the blocks' boxes of open
 *                  boundaries (unused, may be null, where that is 0)
 * @param grid      out (device)
 */
void launchGridSetup(const double* positions, int n, GraphBox<double> box, double cutoff, int maxCells, double* bounds,
                     GraphGrid<double>* grid, cudaStream_t stream);

/**
 * Bin the particles into cells and sort them by cell (stable radix sort, so the
 * result is deterministic).  cellStart [maxCells + 1] (device) gets, for each
 * cell c of the grid and for c = the cells, the first cell-sorted particle of
 * cell c or later (the particles of cells [c, c'] are [cellStart[c],
 * cellStart[c' + 1])), and sortedPositions [n] (device) the positions (nm; w
 * the particle's index) in the cell order of sortedNodes, so that a row's
 * candidates are read contiguously, one 32-byte load each.  sortScratch is CUB's temporary storage of
 * sortScratchBytes (getCellSortScratchBytes).
 */
void launchCellSort(const double* positions, int n, GraphBox<double> box, const GraphGrid<double>* grid, int maxCells, uint32_t* cellOfNode,
                    uint32_t* sortedCells, int* nodeIds, int* sortedNodes, GraphDouble4* sortedPositions, int* cellStart, void* sortScratch,
                    size_t sortScratchBytes, cudaStream_t stream);

size_t getCellSortScratchBytes(int n, int maxCells);

/**
 * The canonical rows of the centers [firstCenter, firstCenter + numCenters)
 * (neighbours among all particles of the grid): neighbors[i * capacity + e],
 * e < rowCount[i], sorted by fixed-point r^2 and then index.  Rows longer than
 * capacity raise status->maxRowCount above capacity (the caller grows and
 * recomputes).  entryScratch is [scratchRows * capacity] (a row's entries while
 * it is collected: key << 32 | index): one row per warp, reused (rows up to
 * 1024 long use shared memory instead); the launch runs
 * min(numCenters, scratchRows) warps.  sortedPositions [n] is launchCellSort's
 * (w: the particle's index): the rows are built in cell order (the warps of a
 * multiprocessor read the same cells) from the positions in that order (a
 * warp's candidates are contiguous), n the particles of the grid.  A row is
 * collected from the columns of CellColumns.h and sorted in registers up to
 * 128 entries (a bitonic sort a warp), by rank beyond.
 */
void launchBuildRows(int n, int firstCenter, int numCenters, GraphBox<double> box, const GraphGrid<double>* grid,
                     const GraphDouble4* sortedPositions, const int* cellStart, double cutoff, int capacity, int scratchRows,
                     uint64_t* entryScratch, int* neighbors, int* rowCount, GraphStatus* status, cudaStream_t stream);

/**
 * Systems up to this many particles build their rows with
 * launchBuildRowsAllPairs: every particle is a candidate of every row (no
 * cell grid, sort or indirection).  For the standard systems (0.6 nm cut-off,
 * 100 particles/nm^3) a periodic box of 1,024 particles is 2.2 nm (3.6
 * cut-offs) a side: 1,023 candidates a row against the cells' ~229, but
 * without the grid's kernels, which cost more than the extra candidates
 * at this size.
 */
constexpr int AllPairsLimit = 1024;

/**
 * The rows of launchBuildRows (the same rows, bitwise) with every particle
 * 0..n-1 a candidate of every row, for n <= AllPairsLimit.
 */
void launchBuildRowsAllPairs(const double* positions, int n, int firstCenter, int numCenters, GraphBox<double> box, double cutoff,
                             int capacity, int scratchRows, uint64_t* entryScratch, int* neighbors, int* rowCount, GraphStatus* status,
                             cudaStream_t stream);

// ---------------------------------------------------------------- edge scans (EdgeScanKernels.cu)

/**
 * Moments of the centers centers[0..numCenters) (device memory; the blocks take them in that order: grouped by type,
 * so that the multiprocessors read one center type's part of the table at a time and the L1 serves more of it,
 * bench/NOTES.md v25), [node][H][M] (scaled by 1/n_norm):
 * X_i[lm][k] = sum_j table(t_i, t_j, l, k)(r) * (nodeWeights ? nodeWeights[j][k] : 1) * Y_lm(u_ij) / n_norm.
 * Each center's sums do not depend on the order.
 */
template <typename real>
void launchMoments(const GraphModelParams<real>& model, const real* table, const real* nodeWeights, const double* positions,
                   const int* types, const int* centers, int numCenters, GraphBox<double> box, const int* neighbors, const int* rowCount,
                   int capacity, real* moments, cudaStream_t stream);

/**
 * How a streamed scan (StreamedScan.cuh: the moments, StreamedMomentsKernels.cu, and the forces,
 * StreamedForcesKernels.cu) runs a model on a device: a ring of `slots` knots of one center type's table (knotBytes
 * each) in a block's shared memory, stages of `stageIntervals` intervals, blocks of up to centersPerBlock centers of
 * one type.  slots == 0: the scan cannot run the model, for `refusal`.
 */
struct StreamedScanPlan {
    /// Why slots == 0: M not whole 16-byte vectors of reals, too little shared memory for 4 knots beside the windows,
    /// table intervals too fine for the ring's one-knot lag (dr below about r_c^2 / 2^32 / (r_0 + dr) or a few ulps
    /// of r_c; StreamedScan.cuh), or (the forces) an interaction block.
    enum class Refusal { None, Channels, SharedMemory, Intervals, Interactions };
    static constexpr int MaxSlots = 24, MaxStageIntervals = 12;
    /// Waves of blocks (one block a multiprocessor) below which CudaMomentsScan "auto" takes the row scan: each block
    /// streams its type's whole table however few edges its centers have (bench/NOTES.md v31).
    static constexpr int MinWaves = 2;
    int slots = 0, stageIntervals = 0, centersPerBlock = 0;
    int groupLanes = 0; ///< lanes of a group (EdgeShape::LPE of the model's shape), each group 1 to 4 centers
    size_t knotBytes = 0, sharedBytes = 0;
    size_t windowBytes = 0; ///< shared memory of the block's windows (set where the shape can be streamed)
    Refusal refusal = Refusal::Channels; ///< a plan no shape of the scan matched (bodyPlan) refuses for the channels
};

/** The moments scan's plan for `model` with at most maxSharedBytes of shared memory a block (the device's opt-in limit). */
template <typename real> StreamedScanPlan streamedMomentsPlan(const GraphModelParams<real>& model, int maxSharedBytes);

/** Allows the streamed kernel of `model`'s shape plan.sharedBytes of dynamic shared memory; false if it cannot run. */
template <typename real> bool configureStreamedMoments(const GraphModelParams<real>& model, const StreamedScanPlan& plan);

/** A radial table [T][T][L+1][K+1][3][M] (host) laid out by knot for the streamed scan: [T][K+1][T][L+1][3][M]. */
template <typename real>
std::vector<real> streamedTableLayout(const std::vector<real>& table, int numTypes, int lMax, int intervals, int numChannels);

/**
 * The streamed scan's blocks (host), 4 ints each: first index into the type-sorted centers, count (at most
 * centersPerBlock), center type, 0; typeOffsets[t] .. typeOffsets[t + 1] are type t's centers in that list.
 */
std::vector<int> streamedScanBlocks(const std::vector<int>& typeOffsets, int centersPerBlock);

/**
 * The moments of launchMoments (the same per-edge terms, each center's sums in canonical order by one lane group),
 * the table streamed through shared memory: tableByKnot the streamedTableLayout of the table; `blocks` [numBlocks][4]
 * from streamedScanBlocks over `centers` (the type-sorted node list).  An edge out of the order the plan relies on
 * (impossible where streamedMomentsPlan allows the scan) is reported as GraphErrorEdgeOrder in `status`.
 */
template <typename real>
void launchStreamedMoments(const GraphModelParams<real>& model, const StreamedScanPlan& plan, const real* tableByKnot,
                           const real* nodeWeights, const double* positions, const int* types, const int* centers, const int* blocks,
                           int numBlocks, GraphBox<double> box, const int* neighbors, const int* rowCount, int capacity, real* moments,
                           GraphStatus* status, cudaStream_t stream);

/** The force scan's plan (refused for a model with an interaction block), as streamedMomentsPlan. */
template <typename real> StreamedScanPlan streamedForcesPlan(const GraphModelParams<real>& model, int maxSharedBytes);

/** Allows the streamed force kernel of `model`'s shape plan.sharedBytes of dynamic shared memory; false if it cannot run. */
template <typename real> bool configureStreamedForces(const GraphModelParams<real>& model, const StreamedScanPlan& plan);

/**
 * The forces of launchForces for a model without an interaction block (bitwise the same: each edge's force is the
 * same and goes into the fixed-point buffer on its own), the table streamed through shared memory: tableByKnot the
 * streamedTableLayout of the radial table, gradA dE/dA [node][H][M], `blocks` [numBlocks][4] from streamedScanBlocks
 * over `centers` with the plan's centersPerBlock.  Forces are added to forceBuffer[slotOfNode[i] + c * paddedAtoms]
 * (64-bit fixed point, device memory); errors (a force beyond the fixed-point range, an edge out of order) go to
 * `status`.
 */
template <typename real>
void launchStreamedForces(const GraphModelParams<real>& model, const StreamedScanPlan& plan, const real* tableByKnot, const real* gradA,
                          const double* positions, const int* types, const int* centers, const int* blocks, int numBlocks,
                          GraphBox<double> box, const int* neighbors, const int* rowCount, int capacity, const int* slotOfNode,
                          long long* forceBuffer, int paddedAtoms, GraphStatus* status, cudaStream_t stream);

/**
 * Invariants D[l][k][k'] = sum_m X[lm][k] A[lm][k'] of the centers
 * rowNodes[0..numRows) (X, A [node][H][M]), written to the chunk array
 * out[row * outStride + outOffset + flat index].
 */
template <typename real>
void launchInvariants(const GraphModelParams<real>& model, const real* X, const real* A, const int* rowNodes, int numRows, real* out,
                      int outStride, int outOffset, cudaStream_t stream);

/**
 * Back through the invariants of the centers rowNodes[0..numRows):
 * gradX[lm][k] (+)= sum_k' gD[l][k][k'] A[lm][k'],
 * gradA[lm][k'] (+)= sum_k gD[l][k][k'] X[lm][k] (k' < M_axis); gD read from the
 * chunk array gradIn[row * gradStride + gradOffset + ...]; gradX, gradA
 * [node][H][M].  With X == A both land in gradA.  `accumulate`: add to the
 * outputs instead of overwriting them.
 */
template <typename real>
void launchInvariantsBackward(const GraphModelParams<real>& model, const real* X, const real* A, const int* rowNodes, int numRows,
                              const real* gradIn, int gradStride, int gradOffset, real* gradX, real* gradA, bool accumulate,
                              cudaStream_t stream);

/**
 * dE/dphi_j of the nodes j in nodes[0..numNodes) (device memory, grouped by type as launchMoments' centers; pulled over
 * the row of j, deterministic):
 * sum_{i in N(j)} sum_lm gradB_i[lm][k] R2(t_i, t_j, l, k)(r) Y_lm(u_ij) / n_norm.  Reads gradB of every
 * neighbour i (rows are symmetric), so with several domains gradB must be exchanged first.
 */
template <typename real>
void launchNodeFeatureGradient(const GraphModelParams<real>& model, const real* gradB, const double* positions, const int* types,
                               const int* nodes, int numNodes, GraphBox<double> box, const int* neighbors, const int* rowCount,
                               int capacity, real* gradPhi, cudaStream_t stream);

/**
 * The edge backward of the centers centers[0..numCenters) (device memory, grouped by type as launchMoments' centers):
 * forces from dE/dA (and dE/dB, phi), added in 64-bit fixed point to OpenMM's
 * force buffer ([3][paddedAtoms], slot order).  Each center's
 * row is split over warpsPerCenter warps (4 or 8; chooseForceWarps); every
 * edge's contribution is converted to fixed point on its own, so the forces do
 * not depend on the split.
 */
template <typename real>
void launchForces(const GraphModelParams<real>& model, const real* gradA, const real* gradB, const real* phi, const double* positions,
                  const int* types, const int* centers, int numCenters, GraphBox<double> box, const int* neighbors, const int* rowCount,
                  int capacity, const int* slotOfNode, long long* forceBuffer, int paddedAtoms, GraphStatus* status, int warpsPerCenter,
                  cudaStream_t stream);

/** forceBuffer[slotOfNode[i] + c * paddedAtoms] += forces[c * n + i] (64-bit fixed point), for i < n, c < 3. */
void launchAddForces(const long long* forces, int n, const int* slotOfNode, long long* forceBuffer, int paddedAtoms, cudaStream_t stream);

/**
 * Launch choice of the force scan: 4 warps per center, or 8 when there are too
 * few centers to give every multiprocessor 32 warps (launchForces caps it so
 * that the block's staged edges fit in 48 KB of shared memory).
 */
int chooseForceWarps(int n, int numMultiprocessors);

// ---------------------------------------------------------------- dense networks (DenseLayerKernels.cu)

enum GraphActivation : int { GraphTanh = 0, GraphSilu = 1, GraphIdentity = 2 };

constexpr int MaxBatchedGroups = 16;

/**
 * One dense layer of several type groups at once (same shape, each group its
 * own weights): group g owns the rows [rowStart[g], rowStart[g+1]) of the
 * type-sorted node list and the row tiles [tileStart[g], tileStart[g+1]) of
 * tileRows rows each.  A batch covers (part of) one chunk of that list: the
 * chunk's arrays hold row r at local index r - chunkStart (row-major, `stride`
 * elements per row); arrays over all nodes are reached through rowNodes
 * (the node of each row of the list).  Passed by value.
 */
template <typename real> struct DenseBatch {
    int numGroups;
    int tileRows;   ///< one of DenseTileRowChoices (chooseDenseTileRows)
    int streamedWide; ///< 128-row tiles: 1 streams k-slices with asynchronous copies, 0 prefetches through registers (configureDenseLayers)
    /// 64-row tiles: 1 takes the streamed 64 x 128 tiles (128 threads, needs streamedWide; denseStreamedHalfTiles), 0 the
    /// 64 x 64 tiles through registers
    int streamedHalf;
    int chunkStart; ///< the first row of the chunk: row r is at local index r - chunkStart of the chunk arrays
    int rowStart[MaxBatchedGroups + 1];
    int tileStart[MaxBatchedGroups + 1];
    const real* weight[MaxBatchedGroups];   ///< [numOutputs][numInputs]
    /// The same weights transposed, [numInputs][numOutputs] (device memory), or nullptr: where every group has them with
    /// 16-byte aligned rows, the streamed 128 x 128 forward tiles copy their k-slices of W^T 16 bytes at a time.
    const real* weightT[MaxBatchedGroups];
    const real* bias[MaxBatchedGroups];     ///< [numOutputs]
    const real* timestep[MaxBatchedGroups]; ///< [numOutputs] or nullptr
    real energyShift[MaxBatchedGroups];     ///< energy output only
    /// Backward products only, when not null: the input gradient is multiplied by gradScale [local row][gradScaleStride]
    /// (the act'(z) of the layer below, not residual), so that the layer below reads its dE/dz ready (launchDenseBackward).
    const real* gradScale;
    int gradScaleStride;
};

/** A layer's weights [numOutputs][numInputs] (host memory) transposed to [numInputs][numOutputs]: DenseBatch::weightT. */
template <typename T> std::vector<T> transposedWeights(const std::vector<T>& weight, int numInputs, int numOutputs) {
    std::vector<T> transposed((size_t) numInputs * numOutputs);
    for (int c = 0; c < numOutputs; c++)
        for (int k = 0; k < numInputs; k++)
            transposed[(size_t) k * numOutputs + c] = weight[(size_t) c * numInputs + k];
    return transposed;
}

/**
 * The row tiles the dense kernels are compiled for.  128-row tiles are 128
 * columns wide (8 x 8 outputs per thread, single and mixed precision only:
 * in double they would exceed the static shared memory); 8-row tiles, for
 * batches too small to fill the device otherwise, are 32 wide (a kernel of
 * their own that streams k through shared memory with asynchronous copies);
 * the others 64.
 */
constexpr int DenseTileRowChoices[5] = {128, 64, 32, 16, 8};

inline constexpr int denseTileColumns(int tileRows) {
    return tileRows == 128 ? 128 : tileRows == 8 ? 32 : 64;
}

/**
 * The blocks per two multiprocessors from which chooseDenseTileRows takes a
 * tile of `tileRows` rows (allowWide: fp32, where 128-row tiles exist).  In
 * fp32 a 128 x 128 tile from one block per two multiprocessors on (a lone
 * block on a multiprocessor runs at about 89% of the rate of two), 64-row
 * tiles from one block per multiprocessor; the others, and every tile in
 * fp64, from two per multiprocessor.  H200, medium grade's layers, 4 types
 * (bench/NOTES.md v37): at 5,148 rows the 128-row tiles (82 blocks) took
 * the first layer's forward in 0.170 ms against 0.281 for 64-row tiles (324
 * blocks); at 2,576 rows 64-row tiles (164 blocks) 0.128 ms against 0.169
 * for 128-row tiles (42 blocks) and 0.151 for 32-row tiles (324 blocks).
 */
inline constexpr int denseTileBlocksPerTwoMultiprocessors(int tileRows, bool allowWide) {
    return !allowWide ? 4 : tileRows == 128 ? 1 : tileRows == 64 ? 2 : 4;
}

/**
 * Launch choice of the dense kernels: the largest tile that gives at least
 * denseTileBlocksPerTwoMultiprocessors blocks for `rows` rows and
 * `numOutputs` columns (allowWide: 128 x 128 tiles are allowed, i.e. `real`
 * is float); small batches get short tiles, so more blocks share the device.
 * The 8-row tiles (and so CudaFusedNetwork "auto") are taken exactly where
 * even 16-row tiles give fewer than two blocks per multiprocessor.  The
 * choice never changes a result: every output element sums over k in the
 * same order.
 */
int chooseDenseTileRows(int rows, int numOutputs, int numMultiprocessors, bool allowWide);

/**
 * Whether a product that chooseDenseTileRows gives 128-row tiles (streamed)
 * takes the streamed 64 x 128 tiles instead (DenseBatch::streamedHalf: four
 * blocks of 128 threads a multiprocessor in the forward pass, three in the
 * backward (denseStreamedMinBlocks), against two of 256), from the row
 * tiles of each size over the batch's groups (each group rounded up), the
 * product's columns (128 a tile either way) and the pass.  Each
 * multiprocessor's share of the busiest wave, counted in 64-row tiles, is
 * 2 ceil(B128 / SMs) with 128-row tiles and ceil(B64 / SMs) with 64-row
 * ones; a forward product takes the 64-row tiles where that share is
 * smaller, a backward product where it is at most 3/4 as large (the
 * backward 64-row tiles, three blocks a multiprocessor, run about 4-12%
 * slower than the 128-row ones on the same or a 5/6 share).  H200,
 * dense_layers_bench (bench/NOTES.md v38 and v40), ms, 128 against 64-row
 * tiles: medium grade at 10,296 rows, first layer's forward 0.304 against
 * 0.243, hidden forward 0.065 against 0.055, hidden backward 0.064 against
 * 0.055 (taken), first layer's backward 0.194 against 0.199 (not); at
 * 20,592 rows the first layer's forward 0.459 against 0.403 (taken), the
 * hidden backward 0.104 against 0.108 (not); at 100,800 rows the same
 * shares, 128-row tiles kept (forward 1.756 against 1.807, backward 1.696
 * against 1.797); large grade at 10,296 rows, first layer's forward 1.134
 * against 0.903.  The choice never changes a result (the sums run in the
 * same order).
 */
inline constexpr bool denseStreamedHalfTiles(long long rowTiles128, long long rowTiles64, int numOutputs, int numMultiprocessors,
                                             bool forward) {
    const long long columnTiles = (numOutputs + 127) / 128;
    const long long share128 = 2 * ((rowTiles128 * columnTiles + numMultiprocessors - 1) / numMultiprocessors);
    const long long share64 = (rowTiles64 * columnTiles + numMultiprocessors - 1) / numMultiprocessors;
    return forward ? share64 < share128 : 4 * share64 <= 3 * share128;
}

/** tileStart of a batch from its rowStart and tileRows: each group's rows in tiles of their own, the groups' in turn. */
template <typename real> void setDenseTileStarts(DenseBatch<real>& batch) {
    batch.tileStart[0] = 0;
    for (int g = 0; g < batch.numGroups; g++)
        batch.tileStart[g + 1] = batch.tileStart[g] + (batch.rowStart[g + 1] - batch.rowStart[g] + batch.tileRows - 1) / batch.tileRows;
}

/**
 * The launch choice of a product over a batch whose groups' rows (rowStart) are set: tileRows by
 * chooseDenseTileRows over all its rows, the streamed tiles where the device has them (`streamable`:
 * configureDenseLayers<real>()'s result), the 64 x 128 ones instead of 128 x 128 where denseStreamedHalfTiles
 * says so for the pass (`forward`), and tileStart.  Never changes a result.
 */
template <typename real>
void chooseDenseTiles(DenseBatch<real>& batch, int numOutputs, int numMultiprocessors, int streamable, bool forward) {
    batch.tileRows =
        chooseDenseTileRows(batch.rowStart[batch.numGroups] - batch.rowStart[0], numOutputs, numMultiprocessors, sizeof(real) == 4);
    batch.streamedWide = streamable > 0 ? 1 : 0;
    batch.streamedHalf = 0;
    if (batch.tileRows == 128 && streamable == 2) {
        long long tiles128 = 0, tiles64 = 0;
        for (int g = 0; g < batch.numGroups; g++) {
            const int rows = batch.rowStart[g + 1] - batch.rowStart[g];
            tiles128 += (rows + 127) / 128;
            tiles64 += (rows + 63) / 64;
        }
        if (denseStreamedHalfTiles(tiles128, tiles64, numOutputs, numMultiprocessors, forward)) {
            batch.tileRows = 64;
            batch.streamedHalf = 1;
        }
    }
    setDenseTileStarts(batch);
}

/**
 * Whether the 128 x 128 tiles may stream their k-slices through shared
 * memory with asynchronous copies on the current device (DenseBatch's
 * streamedWide): three stages of 16-deep slices and the rows' indices take
 * 74.8 KB a block in the backward pass, so it needs the opt-in to more than
 * 48 KB and room for two blocks a multiprocessor (164 KB or more: compute
 * capability 8.0, 9.0 and 10.0; not 7.5, 8.6, 8.9 or 12.0, nor double
 * precision): 0 where not, 1 where they may, 2 where four blocks of the
 * streamed 64 x 128 tiles (50.5 KB each in the backward pass) fit a
 * multiprocessor too (DenseBatch::streamedHalf; 228 KB: compute capability
 * 9.0 and 10.0).  Sets the kernels' shared-memory attribute when it returns
 * more than 0; call it with the device current.  The choice never changes a
 * result (the sums run in the same order).
 */
template <typename real> int configureDenseLayers();

/**
 * One dense layer for every group of the batch: z = W h + b; out = act(z)
 * (h + timestep * act(z) if residual); derivative = act'(z) for the backward
 * pass (when not null).  input and derivative are chunk arrays ([local
 * row][inStride] and [local row][outStride]); output is a chunk array, or
 * [node][outStride] when outputByNode.
 */
template <typename real>
void launchDenseForward(const DenseBatch<real>& batch, const int* rowNodes, const real* input, int inStride, int numInputs, int numOutputs,
                        int activation, bool residual, real* derivative, real* output, int outStride, bool outputByNode,
                        cudaStream_t stream);

/**
 * Backward of launchDenseForward: given dE/d(out) in gradOutput (a chunk array
 * [local row][gradStride], or [node][gradStride] when gradByNode),
 * gradInput[local row][inStride] = W^T (dE/dz) (+ dE/d(out) if residual), with
 * dE/dz = dE/d(out) act'(z) (times the timestep if residual) formed on the
 * fly from the forward pass's derivative [local row][derivStride] (unused
 * for GraphIdentity).  With batch.gradScale, gradInput is then multiplied by
 * it element by element: given the act'(z) of a non-residual layer below,
 * gradInput is that layer's dE/dz, and its backward product takes it with
 * activation GraphIdentity (the same products in the same order: bitwise the
 * same results, without a third operand stream in that product).
 */
template <typename real>
void launchDenseBackward(const DenseBatch<real>& batch, const int* rowNodes, const real* gradOutput, int gradStride, bool gradByNode,
                         const real* derivative, int derivStride, int numInputs, int numOutputs, int activation, bool residual,
                         real* gradInput, int inStride, cudaStream_t stream);

/**
 * The fitting network's scalar output for every group: E_i = w . h_i + b + shift
 * (weight [width], bias [1] of each group) into particleEnergy [node]; with
 * gradHidden also dE/dh_i = w ([local row][stride]); with status also the sum
 * of the energies in fixed point (GraphStatus::energyHigh/Low/Top: order
 * independent, so bitwise reproducible), reporting a non-finite energy.
 */
template <typename real>
void launchEnergyOutput(const DenseBatch<real>& batch, const int* rowNodes, const real* hidden, int stride, int width, real* particleEnergy,
                        real* gradHidden, GraphStatus* status, cudaStream_t stream);

// ---------------------------------------------------------------- fused fitting network (FusedNetworkKernels.cu)

constexpr int MaxFusedLayers = 8;   ///< hidden layers of a fused fitting network
constexpr int MaxFusedWidth = 2048; ///< the widest layer (or descriptor) of a fused fitting network
constexpr int FusedThreads = 256;   ///< threads per block of the fused kernel
constexpr int FusedStages = 2;      ///< weight slices in shared memory: one in flight while one is multiplied

/** Values per 16-byte copy, and a width rounded up to a whole number of them. */
template <typename real> GRAPH_HOST_DEVICE constexpr int fusedVector() {
    return 16 / (int) sizeof(real);
}
template <typename real> GRAPH_HOST_DEVICE constexpr int fusedPadded(int width) {
    return (width + fusedVector<real>() - 1) / fusedVector<real>() * fusedVector<real>();
}

/**
 * The entry (k, c) of a matrix [K][ldb] in the k-grouped layout of the one-block
 * fused kernel's weights (FusedProduct.cuh): [ceil(K / G)][ldb][G], the G
 * consecutive k of a column together, G = fusedVector<real>().
 */
GRAPH_HOST_DEVICE constexpr size_t fusedGroupedIndex(int k, int c, int ldb, int G) {
    return ((size_t) (k / G) * ldb + c) * G + k % G;
}

/**
 * Columns of a layer of `width` units that each block of a cluster of S
 * blocks computes (ClusterNetworkKernels.cu): ceil(width / S) rounded up to
 * the 16-byte vector; block b holds [b q, min(width, (b + 1) q)), possibly
 * none.  With S = 1 the padded width.
 */
template <typename real> GRAPH_HOST_DEVICE constexpr int clusterSlice(int width, int S) {
    return fusedPadded<real>((width + S - 1) / S);
}

/**
 * The fitting network of one type for the fused kernels (device memory).
 * One block (S = 1): both weight copies whole, rows padded to 16 bytes, in
 * k-groups (fusedGroupedIndex, rows rounded up to G with zeros), so that a
 * run of G-aligned rows is one aligned block.  A cluster (S = clusterSize):
 * split by column into the S blocks' slices (clusterSlice: q columns,
 * zero-padded), each slice contiguous, [K][q].
 */
template <typename real> struct FusedNetworkWeights {
    const real* forward[MaxFusedLayers];  ///< hidden layer l: W^T, [numInputs][numOutputs] laid out as above
    const real* backward[MaxFusedLayers]; ///< hidden layer l: W, [numOutputs][numInputs] laid out as above
    const real* bias[MaxFusedLayers];     ///< [numOutputs]
    const real* timestep[MaxFusedLayers]; ///< [numOutputs], residual layers only
    const real* outputWeight;             ///< [width of the last hidden layer]
    const real* outputBias;               ///< [1]
    real energyShift;
};

/**
 * The shape of a fused launch (passed by value): the networks' layer widths
 * (the same for every type), the row tiles of each type group of the
 * type-sorted node list, and the block's shared-memory layout in `real`s
 * (fusedLayout).
 */
struct FusedNetworkShape {
    int numLayers;                 ///< hidden layers, 1..MaxFusedLayers
    int width[MaxFusedLayers + 1]; ///< width[0]: the descriptor; width[l + 1]: the outputs of hidden layer l
    int residual[MaxFusedLayers];
    int activation; ///< GraphActivation
    int tileRows;   ///< rows per tile: 4, 8 or 16 (one block); 16, 32 or 64 (a cluster)
    int clusterSize; ///< blocks per tile: 1 (fusedFittingKernel) or 2, 4, 8, 16 (clusterFittingKernel)
    int numGroups;
    int rowStart[MaxBatchedGroups + 1];  ///< group g: rows [rowStart[g], rowStart[g+1]) of the type-sorted list
    int tileStart[MaxBatchedGroups + 1]; ///< group g: tiles [tileStart[g], tileStart[g+1])
    // Shared memory, offsets in reals (each a multiple of fusedVector): moments [tileRows][fusedPadded(H M)], descriptor and
    // its gradient [tileRows][fusedPadded(width[0])], four buffers [tileRows][fusedPadded(max width)],
    // act'(z) of each layer [tileRows][clusterSlice(width[l + 1], clusterSize)], then one block: FusedStages weight slices
    // of stageElements, then the W^T of the resident layers l >= residentFrom at weightOffset[l] (fusedResidentLayout); a
    // cluster: the block's resident weight slices, layer l's W^T at weightOffset[l] and its W at
    // weightOffset[MaxFusedLayers + l].
    int momentsOffset, inputOffset, bufferOffset[4], derivOffset[MaxFusedLayers], weightOffset[2 * MaxFusedLayers], stageOffset,
        stageElements, totalElements;
    int residentFrom; ///< one block: the first hidden layer whose W^T stays in shared memory (numLayers: none)
};

/** The most entries of any layer of `shape`'s network, the descriptor (width[0]) included: what bounds a thread's columns. */
inline int fusedWidestWidth(const FusedNetworkShape& shape) {
    int widest = 0;
    for (int l = 0; l <= shape.numLayers; l++)
        widest = widest > shape.width[l] ? widest : shape.width[l];
    return widest;
}

/**
 * Fills the layout of `shape` (widths set) for tileRows rows and H M moment
 * entries per row of `real`s of realSize bytes; returns its bytes.
 */
size_t fusedLayout(FusedNetworkShape& shape, int momentEntries, int realSize);

/**
 * Adds to the one-block layout of `shape` (fusedLayout) the W^T of as many of
 * the last hidden layers (not the first) as fit in maxBytes of shared memory,
 * resident for the whole evaluation: the kernel copies them during the first
 * layer's product and reads them in place for their forward and backward
 * products instead of streaming them twice.  Sets residentFrom (numLayers if
 * none fit) and weightOffset; returns the layout's bytes.
 */
size_t fusedResidentLayout(FusedNetworkShape& shape, int realSize, size_t maxBytes);

/**
 * The reals that hidden layer l's resident W^T takes in shared memory
 * (fusedResidentLayout): width[l] rows in k-groups of 16 / realSize, each
 * group residentLdb(width[l + 1]) columns apart.
 */
int fusedResidentLayerElements(const FusedNetworkShape& shape, int l, int realSize);

/**
 * The arrays of a tile that both fused kernels lay out first (moments,
 * descriptor, `buffers` buffers of the widest layer, act'(z) of each layer's
 * clusterSlice for shape.clusterSize blocks); returns the offset after them,
 * in reals.
 */
int fusedTileArrays(FusedNetworkShape& shape, int momentEntries, int realSize, int buffers);

/**
 * The moments kernel's inputs (launchMoments; device memory), for a fused
 * network that scans its tiles' moments itself: the radial table, the graph's
 * positions [n][3] (nm, double), the particle types, the rows [node][capacity]
 * and their lengths, and the box.
 */
template <typename real> struct FusedMomentScan {
    const real* table;
    const double* positions;
    const int* types;
    const int* neighbors;
    const int* rowCount;
    int capacity;
    GraphBox<double> box;
};

/**
 * The fitting network of small batches in one kernel (the per-layer kernels'
 * invariants, dense layers, energy output, backward and invariants' backward
 * for the rows of one block together), bitwise the same results: a block of
 * FusedThreads threads per tile of shape.tileRows rows of one type; every
 * intermediate stays in shared memory and the weights stream through it.
 * Reads moments [node][H][M], or with scan (fusedMomentScanObstacle) forms them
 * from the rows first, bitwise as launchMoments does, while the first weights
 * load, and writes them there; writes particleEnergy [node], adds the
 * energies to status (when not null), and with withForces writes dE/dA into
 * gradMoments [node][H][M].  Call configureFusedFitting<real>() once first.
 */
template <typename real>
void launchFusedFitting(const GraphModelParams<real>& model, const FusedNetworkShape& shape, const FusedNetworkWeights<real>* groups,
                        const int* rowNodes, real* moments, real* particleEnergy, real* gradMoments, GraphStatus* status, bool withForces,
                        const FusedMomentScan<real>* scan, cudaStream_t stream);

/**
 * Why launchFusedFitting cannot scan the moments of `shape`'s tiles itself
 * for `model` (the CudaMomentsScan property's "fused"), or "" if it can: it
 * needs fp32, tiles of 4 rows in one block, layers of at most 4 columns a
 * thread, l_max at most 1, the moments' lane groups of 8 lanes (20 to 32
 * channels, a multiple of 4), room in the tile's arrays and a free weight
 * stage for the scan.  Host only.
 */
template <typename real> std::string fusedMomentScanObstacle(const GraphModelParams<real>& model, const FusedNetworkShape& shape);

/**
 * Allows the fused kernels maxSharedBytes of dynamic shared memory per block
 * (host only; not during a capture); false when the device refuses.
 */
template <typename real> bool configureFusedFitting(int maxSharedBytes);

/**
 * The fitting network of small batches with each tile's columns spread over
 * a thread-block cluster of shape.clusterSize blocks (sm_90 and later):
 * every block streams only its slice of the weights (FusedNetworkWeights with
 * S = clusterSize) and sends the activations it computes to every block of
 * the cluster through distributed shared memory; the same operations in the
 * same order as launchFusedFitting, so bitwise the same results.  Layout
 * from clusterLayout; call configureClusterFitting<real>() once first.
 */
template <typename real>
void launchClusterFitting(const GraphModelParams<real>& model, const FusedNetworkShape& shape, const FusedNetworkWeights<real>* groups,
                          const int* rowNodes, const real* moments, real* particleEnergy, real* gradMoments, GraphStatus* status,
                          bool withForces, cudaStream_t stream);

/**
 * Fills the layout of `shape` (widths, tileRows and clusterSize set) for the
 * cluster kernel; returns its bytes per block.
 */
size_t clusterLayout(FusedNetworkShape& shape, int momentEntries, int realSize);

/**
 * Allows the cluster kernel maxSharedBytes of shared memory per block (and
 * clusters of 16); returns how many clusters of shape.clusterSize blocks of
 * shape's layout the device can run at once, 0 if none (host only).
 */
template <typename real> int configureClusterFitting(const FusedNetworkShape& shape, int maxSharedBytes);

/**
 * Whether the cluster kernel that the device runs was compiled for compute
 * capability 9.0 or later (its body is empty below; a build for older
 * architectures only would run that through PTX on a newer device).
 */
template <typename real> bool clusterFittingCompiled();

/**
 * The last kernel of an evaluation (StatusKernels.cu): adds the evaluation's
 * fixed-point energy (status) to OpenMM's energy buffer (float or double;
 * none when energyBuffer is null) and writes the status record to
 * hostStatus, pinned host memory mapped into the device's address space
 * (readable on the host once an event recorded after this kernel has
 * completed).  A kernel rather than a copy: in a CUDA graph a device-to-host
 * copy node costs 3-5 us of idle device before it (H200), a kernel node none.
 * With clear it then zeroes the record (device), so that the next evaluation
 * starts with a clean one without a kernel of its own (CheckFinite "true",
 * whose host reads the record at the end of each evaluation).
 */
void launchFinishEvaluation(GraphStatus* status, GraphStatus* hostStatus, void* energyBuffer, bool energyIsDouble, bool clear,
                            cudaStream_t stream);

/**
 * Copies the status record (device) to hostStatus (pinned host memory mapped
 * into the device's address space) and, when clear, zeroes it: at the start
 * of an evaluation this hands the host the previous evaluation's record and
 * starts a new one; after the graph build it hands the host what the build
 * found (row overflow, coincident or non-finite positions) before the rest of
 * the evaluation has run.
 */
void launchCopyStatus(GraphStatus* status, GraphStatus* hostStatus, bool clear, cudaStream_t stream);

/**
 * Zeroes the status record (device): before an evaluation whose record the
 * host reads at its end (CheckFinite "true") when the evaluation before it
 * did not end with launchFinishEvaluation's clear (the first one, or one
 * that failed while it was being enqueued or captured).  A kernel rather
 * than a memset node: a small-512 step 1.2 us shorter on an H200 (CUDA
 * graph, bench/NOTES.md v28).
 */
void launchClearStatus(GraphStatus* status, cudaStream_t stream);

} // namespace GraphPlugin

#endif
