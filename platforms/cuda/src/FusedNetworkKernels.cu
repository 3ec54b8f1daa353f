/**
 * Stage 3 of the CUDA pipeline for batches too small to fill the device: the
 * whole fitting network of a tile of rows in one block.  The invariants, the
 * hidden layers, the energy output, the backward through the layers and the
 * invariants' backward run one after another on the tile's rows; every
 * intermediate (descriptor, activations, act'(z), gradients) stays in shared
 * memory and only the moments come in and dE/dA goes out.  The weights stream
 * through shared memory in slices of consecutive rows (cp.async, two stages
 * of 32 KB: one loads while the other is multiplied), from copies laid out so
 * that a slice is one contiguous block: W^T for the forward products, W for
 * the backward ones.  Where the block has room (fusedResidentLayout), the W^T
 * of the last hidden layers is copied into shared memory during the first
 * layer's product and stays there: their forward and backward products read
 * it in place (residentTransposedProduct), so a block takes in fewer bytes
 * (small grade: 384 KB instead of 512 KB).
 *
 * Every value is formed by the same operations in the same order as in the
 * per-layer kernels (NetworkDeviceFunctions.cuh; dense products sum k in order
 * 0..K-1 with fma), so the results are bitwise those of the per-layer path;
 * what changes is 9 kernel launches (and their gaps) per evaluation become one.
 */

#include "ChainedLaunch.cuh"
#include "EdgeMoments.cuh"
#include "FusedProduct.cuh"
#include "FusedTileFunctions.cuh"
#include "GraphKernelLaunch.h"
#include "NetworkDeviceFunctions.cuh"
#include <type_traits>

namespace GraphPlugin {

namespace {

constexpr int ColumnThreads = 128; ///< thread t computes columns t % 128 (+ 128 j) of rows t / 128 (+ 2 i)
constexpr bool FusedPreissue = true; ///< the first layer's first slices issued before the wait for the kernel before
/// The first layer's slices that carry the resident layers' copies (copyResidentShare): the first ones, at most this many.
constexpr int FusedRiderSlices = FusedStages - 1;
static_assert(FusedRiderSlices >= 1, "the resident copies ride with at least one slice");

/**
 * streamedProduct with the fewest columns per thread that cover C.  MaxCPT (1, 2, 4 or 16: fusedColumnsPerThread of the
 * network's widest layer) bounds the variants compiled into a kernel: the unused wider ones would make its code several
 * times larger (instruction-cache misses were 29% of its stall samples with all five) and raise its register count.  With
 * 16-row tiles C <= 512, which the host ensures: their sums of 8 rows would not fit in registers beyond 4 columns.
 * Source and rider as in streamedProduct.
 */
template <typename real, int R, int MaxCPT, FusedWeights Source, typename Epilogue, typename Rider = NoRider>
__device__ inline void product(const real* __restrict__ B, int K, int C, int ldb, const real* in, int inStride, real* stage,
                               int stageElements, Epilogue epilogue, Rider rider = Rider(), int issued = 0) {
    if constexpr (MaxCPT == 1)
        streamedProduct<real, R, ColumnThreads, 1, Source>(B, K, C, ldb, in, inStride, stage, stageElements, epilogue, rider, issued);
    else if (C <= ColumnThreads)
        streamedProduct<real, R, ColumnThreads, 1, Source>(B, K, C, ldb, in, inStride, stage, stageElements, epilogue, rider, issued);
    else if constexpr (MaxCPT == 2)
        streamedProduct<real, R, ColumnThreads, 2, Source>(B, K, C, ldb, in, inStride, stage, stageElements, epilogue, rider, issued);
    else if (C <= 2 * ColumnThreads)
        streamedProduct<real, R, ColumnThreads, 2, Source>(B, K, C, ldb, in, inStride, stage, stageElements, epilogue, rider, issued);
    else if constexpr (MaxCPT == 4 || R == 16)
        streamedProduct<real, R, ColumnThreads, 4, Source>(B, K, C, ldb, in, inStride, stage, stageElements, epilogue, rider, issued);
    else if (C <= 4 * ColumnThreads)
        streamedProduct<real, R, ColumnThreads, 4, Source>(B, K, C, ldb, in, inStride, stage, stageElements, epilogue, rider, issued);
    else if (C <= 8 * ColumnThreads)
        streamedProduct<real, R, ColumnThreads, 8, Source>(B, K, C, ldb, in, inStride, stage, stageElements, epilogue, rider, issued);
    else
        streamedProduct<real, R, ColumnThreads, 16, Source>(B, K, C, ldb, in, inStride, stage, stageElements, epilogue, rider, issued);
}

/**
 * The group stride (in columns of G reals) of a resident layer of C outputs: fusedPadded(C) + 1, so that the k-groups of
 * residentTransposedProduct's consecutive threads fall on different banks (fusedResidentLayout).
 */
template <typename real> __host__ __device__ constexpr int residentLdb(int C) {
    return fusedPadded<real>(C) + 1;
}

/**
 * Issues (cp.async, no commit) slice s of numSlices's share of the copies of every resident layer's W^T (layers
 * shape.residentFrom and up) from its global k-grouped copy, [ceil(K / G)][fusedPadded(C)][G], into shared memory at
 * shape.weightOffset[l], whose groups are residentLdb(C) G apart.
 */
template <typename real>
__device__ inline void copyResidentShare(const FusedNetworkShape& shape, const FusedNetworkWeights<real>& net, real* shared, int s,
                                         int numSlices) {
    constexpr int G = fusedVector<real>();
    for (int l = shape.residentFrom; l < shape.numLayers; l++) {
        const int q = fusedPadded<real>(shape.width[l + 1]), chunks = (shape.width[l] + G - 1) / G * q; // 16-byte copies
        const int per = (chunks + numSlices - 1) / numSlices, last = min(chunks, (s + 1) * per);
        const real* src = net.forward[l];
        real* dst = shared + shape.weightOffset[l];
        for (int e = s * per + threadIdx.x; e < last; e += FusedThreads) {
            const int group = e / q, column = e - group * q;
            __pipeline_memcpy_async(dst + ((size_t) group * residentLdb<real>(shape.width[l + 1]) + column) * G, src + (size_t) e * G, 16);
        }
    }
}

/** The (row, chunk) tasks of scanTileMoments that one warp takes (a warp takes tasks w, w + 8, ...). */
template <int R> constexpr int FusedScanSteps = (R * MomentChunks + FusedThreads / 32 - 1) / (FusedThreads / 32);

/**
 * The node of this warp's scanTileMoments task `lane` (lanes 0 .. FusedScanSteps - 1; 0 in the others and past the tile's
 * rows: never used), one register a thread: the scan takes task `step`'s node from lane `step` (a shuffle).  nodes: the
 * tile's rows' nodes (global, [rows]), set up with the types before the evaluation and written by no kernel of it, so this
 * may run before the wait for the kernel before: the scan's first loads (its rows' counts, written by the graph build)
 * then follow the wait directly instead of this round trip.
 */
template <int R> __device__ inline int loadTaskNode(const int* nodes, int rows) {
    static_assert(FusedScanSteps<R> <= 32, "loadTaskNode holds one task's node a lane");
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int r = (warp + lane * (FusedThreads / 32)) / MomentChunks;
    return lane < FusedScanSteps<R> && r < rows ? nodes[r] : 0;
}

/** Where the fused kernel's moments come from: global memory, written by the moments kernel before it. */
struct MomentsRead {
    static constexpr bool Scans = false;
};

/** Where the fused kernel's moments come from: its own scan of the tile's rows (scanTileMoments), l_max L, lane groups Shape_. */
template <int L, typename Shape_> struct MomentsScanned {
    static constexpr bool Scans = true;
    static constexpr int LMAX = L;
    using Shape = Shape_;
};

/**
 * The moments of the tile's rows (nodes[0..rows)) into A (shared, [R][strideA]; zero past rows) and moments (global,
 * [node][H M]), as momentsKernel forms them: each row in MomentChunks chunks, a chunk summed by one warp
 * (chunkMoments: the same lane groups, order and butterfly), the chunks added in order, times invNorm, so bitwise the
 * same.  The block's warps take the R MomentChunks (row, chunk) pairs in turn: warp w the tasks w, w + 8, ...
 * (loadTaskNode read their nodes).  stages: a free weight stage, room for a warp's EdgeStage each; partial:
 * R MomentChunks H M reals of shared memory not otherwise in use.  Ends synchronised.
 */
template <typename real, int R, int LMAX, typename Shape>
__device__ inline void scanTileMoments(const GraphModelParams<real>& model, const FusedMomentScan<real>& scan, const int* nodes,
                                       int taskNode, int rows, int HM, real* A, int strideA, real* stages, real* partial, real* moments) {
    constexpr int H = (LMAX + 1) * (LMAX + 1), Warps = FusedThreads / 32;
    using Stage = EdgeStage<real, H, false>;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    Stage* stage = reinterpret_cast<Stage*>(stages) + warp;
#pragma unroll
    for (int step = 0; step < FusedScanSteps<R>; step++) {
        const int task = warp + step * Warps, r = task / MomentChunks, chunk = task % MomentChunks;
        if (r >= rows) // the same for the whole warp (past R MomentChunks tasks too: rows <= R)
            continue;
        const int i = __shfl_sync(0xffffffff, taskNode, step);
        real acc[H][Shape::Channels];
        chunkMoments<real, LMAX, Shape>(stage, lane, model, scan.table, nullptr, scan.positions, scan.types, scan.neighbors, scan.capacity,
                                        scan.box, i, scan.rowCount[i], chunk, acc);
        storeChunkMoments<real, LMAX, Shape>(acc, lane, model.numChannels, partial + task * HM);
    }
    __syncthreads();
    for (int e = threadIdx.x; e < R * HM; e += FusedThreads) {
        const int r = e / HM, x = e % HM;
        real value = 0;
        if (r < rows) {
            real sum = 0;
            for (int c = 0; c < MomentChunks; c++)
                sum += partial[(r * MomentChunks + c) * HM + x];
            value = sum * model.invNorm;
            moments[(size_t) nodes[r] * HM + x] = value;
        }
        A[r * strideA + x] = value;
    }
    __syncthreads();
}

template <typename real, int R, int MaxCPT, typename Moments>
__global__ void __launch_bounds__(FusedThreads)
    fusedFittingKernel(GraphModelParams<real> model, FusedNetworkShape shape, const FusedNetworkWeights<real>* __restrict__ groups,
                       const int* __restrict__ rowNodes, real* __restrict__ moments, real* __restrict__ particleEnergy,
                       real* __restrict__ gradMoments, GraphStatus* status, int withForces, FusedMomentScan<real> scan) {
    extern __shared__ __align__(16) unsigned char sharedBytes[];
    real* shared = reinterpret_cast<real*>(sharedBytes);
    const int H = (model.lMax + 1) * (model.lMax + 1), HM = H * model.numChannels;
    const int D = shape.width[0], L = shape.numLayers;
    const int warp = threadIdx.x >> 5;
    const int group = groupOf(shape.tileStart, shape.numGroups, blockIdx.x);
    const int rowBase = shape.rowStart[group] + (blockIdx.x - shape.tileStart[group]) * R;
    const int rows = min(R, shape.rowStart[group + 1] - rowBase);
    const FusedNetworkWeights<real>& net = groups[group];
    real* A = shared + shape.momentsOffset;
    const int strideA = fusedPadded<real>(HM);
    real* input = shared + shape.inputOffset; // the descriptor, later its gradient
    const int strideD = fusedPadded<real>(D);
    real* stage = shared + shape.stageOffset;

    // The first layer's first slices, with the resident layers' shares that ride with them (copyResidentShare), read
    // only weights, which no kernel of the evaluation writes: issued before waiting for the kernel before (the moments),
    // so that they load while it finishes; so are the scan's nodes (loadTaskNode).  Everything after the wait as in
    // any chained kernel.  The copies ride with the first FusedRiderSlices slices, by default the pre-issued ones.
    constexpr int Preissued = FusedPreissue ? FusedStages - 1 : 0;
    auto firstRider = [&](int s, int numSlices) {
        const int carriers = min(numSlices, FusedRiderSlices);
        if (s < carriers)
            copyResidentShare(shape, net, shared, s, carriers);
    };
    {
        const int ldb = fusedPadded<real>(shape.width[1]), sliceRows = fusedSliceRows(ldb, shape.stageElements, ColumnThreads);
        for (int s = 0; s < Preissued; s++)
            issueSlice(net.forward[0], D, ldb, stage, shape.stageElements, sliceRows, s, firstRider);
    }
    [[maybe_unused]] int taskNode = 0; // the scan's nodes, read before the wait (loadTaskNode)
    if constexpr (Moments::Scans)
        taskNode = loadTaskNode<R>(rowNodes + rowBase, rows);
    beginChainedKernel();

    // The rows' moments (zero for the rows past the group's end: finite values that are never written out): scanned here
    // while the first slices load (the last stage is free until the first product issues into it), or read.
    if constexpr (Moments::Scans)
        scanTileMoments<real, R, Moments::LMAX, typename Moments::Shape>(model, scan, rowNodes + rowBase, taskNode, rows, HM, A, strideA,
                                                                         stage + (FusedStages - 1) * shape.stageElements, input, moments);
    else {
        loadTileMoments<real, R>(moments, rowNodes + rowBase, rows, HM, A, strideA, threadIdx.x, FusedThreads);
        __syncthreads();
    }
    for (int e = threadIdx.x; e < R * D; e += FusedThreads) {
        const int r = e / D, flat = e % D;
        input[r * strideD + flat] = invariantValue(model, A + r * strideA, A + r * strideA, flat);
    }
    __syncthreads();

    // Forward: h_l = act(W_l h_(l-1) + b_l) (+ h_(l-1) residual), alternating between buffers 0 and 1.
    const real* h = input;
    int strideH = strideD;
    for (int l = 0; l < L; l++) {
        real* out = shared + shape.bufferOffset[l % 2];
        real* deriv = shared + shape.derivOffset[l];
        const int K = shape.width[l], C = shape.width[l + 1], strideOut = fusedPadded<real>(C);
        const bool residual = shape.residual[l] != 0;
        const real* __restrict__ bias = net.bias[l];
        const real* __restrict__ timestep = net.timestep[l];
        auto epilogue = [&](int r, int c, real acc) {
            out[r * strideOut + c] = denseForwardValue(shape.activation, residual, acc, bias[c], residual ? timestep[c] : real(0),
                                                       residual ? h[r * strideH + c] : real(0), &deriv[r * strideOut + c]);
        };
        if (l >= shape.residentFrom)
            product<real, R, MaxCPT, FusedWeights::ResidentGrouped>(shared + shape.weightOffset[l], K, C, residentLdb<real>(C), h, strideH,
                                                                    nullptr, 0, epilogue);
        else // the first layer's slices carry the resident layers' W^T, and its first ones are issued already
            product<real, R, MaxCPT, FusedWeights::Streamed>(
                net.forward[l], K, C, strideOut, h, strideH, stage, shape.stageElements, epilogue,
                [&](int s, int numSlices) {
                    if (l == 0)
                        firstRider(s, numSlices);
                },
                l == 0 ? Preissued : 0);
        h = out;
        strideH = strideOut;
    }

    // The energy output: a warp per row.
    const int W = shape.width[L];
    tileEnergies(net, h, strideH, W, rowNodes + rowBase, rows, warp, FusedThreads / 32, particleEnergy, status);
    if (!withForces)
        return;

    // Backward: dE/dh_(L-1) = w, then through the layers to dE/d(descriptor) (into `input`).  dE/dz of a layer
    // (denseOutputGradient) alternates between buffers 2 and 3: the epilogue of layer l's product forms layer l - 1's
    // from the gradient it has just formed, so no pass (and barrier) of its own comes between the products; the same
    // values as a pass over the stored gradient.
    int gBuffer = L % 2, dzBuffer = 2; // gBuffer: the buffer that h_(L-1) is not in
    real* g = shared + shape.bufferOffset[gBuffer];
    real* dz = shared + shape.bufferOffset[dzBuffer];
    {
        const bool residual = shape.residual[L - 1] != 0;
        const real* deriv = shared + shape.derivOffset[L - 1];
        const real* __restrict__ timestep = net.timestep[L - 1];
        for (int e = threadIdx.x; e < R * W; e += FusedThreads) {
            const int r = e / W, k = e % W;
            const real w = net.outputWeight[k];
            g[r * strideH + k] = w;
            dz[r * strideH + k] =
                denseOutputGradient(shape.activation, residual, w, deriv[r * strideH + k], residual ? timestep[k] : real(1));
        }
        __syncthreads();
    }
    for (int l = L - 1; l >= 0; l--) {
        const int N = shape.width[l + 1], K = shape.width[l], strideN = fusedPadded<real>(N);
        const bool residual = shape.residual[l] != 0;
        gBuffer = 1 - gBuffer;
        real* target = l == 0 ? input : shared + shape.bufferOffset[gBuffer];
        const int strideK = l == 0 ? strideD : fusedPadded<real>(K);
        // Layer l - 1's dE/dz, formed in this product's epilogue (none below the first layer).
        real* dzBelow = shared + shape.bufferOffset[5 - dzBuffer];
        const bool residualBelow = l > 0 && shape.residual[l - 1] != 0;
        const real* derivBelow = l > 0 ? shared + shape.derivOffset[l - 1] : nullptr;
        const real* __restrict__ timestepBelow = l > 0 ? net.timestep[l - 1] : nullptr;
        auto epilogue = [&](int r, int c, real acc) {
            const real gradient = denseInputGradient(residual, acc, residual ? g[r * strideN + c] : real(0));
            target[r * strideK + c] = gradient;
            if (derivBelow != nullptr)
                dzBelow[r * strideK + c] = denseOutputGradient(shape.activation, residualBelow, gradient, derivBelow[r * strideK + c],
                                                               residualBelow ? timestepBelow[c] : real(1));
        };
        if (l >= shape.residentFrom)
            residentTransposedProduct<real, R>(shared + shape.weightOffset[l], residentLdb<real>(N), N, K, dz, strideN, epilogue);
        else
            product<real, R, MaxCPT, FusedWeights::Streamed>(net.backward[l], N, K, fusedPadded<real>(K), dz, strideN, stage,
                                                             shape.stageElements, epilogue);
        g = target;
        dz = dzBelow;
        dzBuffer = 5 - dzBuffer;
    }

    // dE/dA from the descriptor's gradient.
    tileMomentGradients<real, R>(model, A, strideA, input, strideD, rowNodes + rowBase, rows, HM, threadIdx.x, FusedThreads, gradMoments);
}

} // namespace

int fusedTileArrays(FusedNetworkShape& shape, int momentEntries, int realSize, int buffers) {
    const int V = 16 / realSize, R = shape.tileRows, S = std::max(1, shape.clusterSize);
    auto pad = [&](int w) { return (w + V - 1) / V * V; };
    int widest = 0;
    for (int l = 1; l <= shape.numLayers; l++)
        widest = std::max(widest, pad(shape.width[l]));
    int offset = 0;
    shape.momentsOffset = offset;
    offset += R * pad(momentEntries);
    shape.inputOffset = offset;
    offset += R * pad(shape.width[0]);
    for (int b = 0; b < buffers; b++) {
        shape.bufferOffset[b] = offset;
        offset += R * widest;
    }
    for (int l = 0; l < shape.numLayers; l++) {
        shape.derivOffset[l] = offset;
        offset += R * pad((shape.width[l + 1] + S - 1) / S); // clusterSlice
    }
    return offset;
}

size_t fusedLayout(FusedNetworkShape& shape, int momentEntries, int realSize) {
    const int V = 16 / realSize;
    auto pad = [&](int w) { return (w + V - 1) / V * V; };
    int widest = 0;
    for (int l = 1; l <= shape.numLayers; l++)
        widest = std::max(widest, pad(shape.width[l]));
    const int offset = fusedTileArrays(shape, momentEntries, realSize, 4); // h and g alternate in 0-1, dE/dz in 2-3
    // A slice is 32 KB, or 4 rows of the widest B if more (the backward of the first layer: rows of the descriptor's width):
    // two of 32 KB took 2 us less a small-512 step than four of 16 KB (fewer waits and barriers, bench/NOTES.md v57).
    shape.stageOffset = offset;
    shape.stageElements = std::max(32768 / realSize, 4 * std::max(widest, pad(shape.width[0])));
    shape.totalElements = offset + FusedStages * shape.stageElements;
    shape.residentFrom = shape.numLayers; // none until fusedResidentLayout
    return (size_t) shape.totalElements * realSize;
}

int fusedResidentLayerElements(const FusedNetworkShape& shape, int l, int realSize) {
    const int G = 16 / realSize, C = shape.width[l + 1], ldb = realSize == 4 ? residentLdb<float>(C) : residentLdb<double>(C);
    return (shape.width[l] + G - 1) / G * ldb * G;
}

size_t fusedResidentLayout(FusedNetworkShape& shape, int realSize, size_t maxBytes) {
    int offset = shape.totalElements;
    for (int l = shape.numLayers - 1; l >= 1; l--) {
        const int need = fusedResidentLayerElements(shape, l, realSize);
        if ((size_t) (offset + need) * realSize > maxBytes)
            break;
        shape.weightOffset[l] = offset;
        offset += need;
        shape.residentFrom = l;
    }
    shape.totalElements = offset;
    return (size_t) offset * realSize;
}

namespace {

template <typename real> using FusedKernel = decltype(&fusedFittingKernel<real, 4, 1, MomentsRead>);

/** The kernel for tiles of `rows` rows whose widest layer needs `columns` columns per thread (fusedColumnsPerThread). */
template <typename real> FusedKernel<real> fusedKernel(int rows, int columns) {
    static constexpr FusedKernel<real> kernels[3][4] = {
        {fusedFittingKernel<real, 4, 1, MomentsRead>, fusedFittingKernel<real, 4, 2, MomentsRead>,
         fusedFittingKernel<real, 4, 4, MomentsRead>, fusedFittingKernel<real, 4, 16, MomentsRead>},
        {fusedFittingKernel<real, 8, 1, MomentsRead>, fusedFittingKernel<real, 8, 2, MomentsRead>,
         fusedFittingKernel<real, 8, 4, MomentsRead>, fusedFittingKernel<real, 8, 16, MomentsRead>},
        {fusedFittingKernel<real, 16, 1, MomentsRead>, fusedFittingKernel<real, 16, 2, MomentsRead>,
         fusedFittingKernel<real, 16, 4, MomentsRead>, fusedFittingKernel<real, 16, 4, MomentsRead>}};
    return kernels[rows == 4 ? 0 : rows == 8 ? 1 : 2][columns == 1 ? 0 : columns == 2 ? 1 : columns == 4 ? 2 : 3];
}

/** The lane groups of the moments that a fused kernel may scan itself (fusedMomentScanObstacle): 8 lanes of 4 floats, M 20 to 32. */
using ScannedShape = EdgeShape<4, 8, 1>;

/**
 * The kernel with its own moments scan (MomentsScanned) for 4-row tiles, l_max L (0 or 1) and `columns` of 1, 2 or 4:
 * fp32 only (fusedMomentScanObstacle), a few variants beside fusedKernel's.
 */
template <int L> FusedKernel<float> fusedScanKernel(int columns) {
    using Moments = MomentsScanned<L, ScannedShape>;
    static constexpr FusedKernel<float> kernels[3] = {fusedFittingKernel<float, 4, 1, Moments>, fusedFittingKernel<float, 4, 2, Moments>,
                                                      fusedFittingKernel<float, 4, 4, Moments>};
    return kernels[columns == 1 ? 0 : columns == 2 ? 1 : 2];
}

/** Columns per thread that the widest layer (or the descriptor, the backward's widest output) of `shape` needs: 1, 2, 4 or 16. */
int fusedColumnsPerThread(const FusedNetworkShape& shape) {
    const int columns = (fusedWidestWidth(shape) + ColumnThreads - 1) / ColumnThreads;
    return columns <= 1 ? 1 : columns <= 2 ? 2 : columns <= 4 ? 4 : 16;
}

} // namespace

template <typename real> std::string fusedMomentScanObstacle(const GraphModelParams<real>& model, const FusedNetworkShape& shape) {
    if constexpr (sizeof(real) != 4)
        return "the fused network scans the moments only in single and mixed precision";
    if (shape.clusterSize > 1)
        return "the fitting network runs over clusters of " + std::to_string(shape.clusterSize) + " blocks (CudaFusedCluster)";
    if (shape.tileRows != 4)
        return "the fused network's tiles have " + std::to_string(shape.tileRows) + " rows (the scan needs 4: CudaFusedTileRows)";
    if (fusedColumnsPerThread(shape) > 4)
        return "the fitting network's widest layer or descriptor has " + std::to_string(fusedWidestWidth(shape)) +
               " entries (the scan needs at most " + std::to_string(4 * ColumnThreads) + ")";
    if (model.lMax > 1)
        return "the model has l_max " + std::to_string(model.lMax) + " (the scan needs at most 1)";
    std::string obstacle =
        "the model has " + std::to_string(model.numChannels) + " channels (the scan needs 20 to 32, a multiple of 4: lane groups of 8)";
    dispatchEdgeShape<real>(model.lMax, model.numChannels, [&](auto l, auto edgeShape) {
        constexpr int L = decltype(l)::value, H = (L + 1) * (L + 1);
        if constexpr (L <= 1 && std::is_same_v<decltype(edgeShape), ScannedShape>) {
            const size_t stages = (FusedThreads / 32) * sizeof(EdgeStage<real, H, false>);
            const size_t partial = (size_t) shape.tileRows * MomentChunks * H * model.numChannels * sizeof(real);
            const size_t stageBytes = (size_t) shape.stageElements * sizeof(real);
            const size_t arrayBytes = (size_t) (shape.stageOffset - shape.inputOffset) * sizeof(real);
            if (stages > stageBytes)
                obstacle = "the scan's edge stages (" + std::to_string(stages) + " bytes) do not fit in a weight stage of " +
                           std::to_string(stageBytes) + " bytes";
            else if (partial > arrayBytes)
                obstacle = "the scan's chunk sums (" + std::to_string(partial) + " bytes) do not fit in the tile's arrays (" +
                           std::to_string(arrayBytes) + " bytes)";
            else
                obstacle.clear();
        }
    });
    return obstacle;
}

template <typename real> bool configureFusedFitting(int maxSharedBytes) {
    bool ok = true;
    for (int rows : {4, 8, 16})
        for (int columns : {1, 2, 4, 16})
            ok = ok && cudaFuncSetAttribute(fusedKernel<real>(rows, columns), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            maxSharedBytes) == cudaSuccess;
    if constexpr (sizeof(real) == 4)
        for (int columns : {1, 2, 4})
            for (FusedKernel<float> kernel : {fusedScanKernel<0>(columns), fusedScanKernel<1>(columns)})
                ok = ok && cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, maxSharedBytes) == cudaSuccess;
    cudaGetLastError(); // reported by the return value, not left for the next launch's check
    return ok;
}

template <typename real>
void launchFusedFitting(const GraphModelParams<real>& model, const FusedNetworkShape& shape, const FusedNetworkWeights<real>* groups,
                        const int* rowNodes, real* moments, real* particleEnergy, real* gradMoments, GraphStatus* status, bool withForces,
                        const FusedMomentScan<real>* scan, cudaStream_t stream) {
    const int blocks = shape.tileStart[shape.numGroups];
    if (blocks == 0)
        return;
    const size_t bytes = (size_t) shape.totalElements * sizeof(real);
    const int columns = fusedColumnsPerThread(shape);
    FusedKernel<real> kernel = fusedKernel<real>(shape.tileRows, columns);
    if constexpr (sizeof(real) == 4)
        if (scan != nullptr) // the caller has checked fusedMomentScanObstacle
            kernel = model.lMax == 0 ? fusedScanKernel<0>(columns) : fusedScanKernel<1>(columns);
    launchChained(kernel, blocks, FusedThreads, bytes, stream, model, shape, groups, rowNodes, moments, particleEnergy, gradMoments, status,
                  withForces ? 1 : 0, scan != nullptr ? *scan : FusedMomentScan<real>());
}

#define GRAPH_INSTANTIATE_FUSED(real)                                                                                                      \
    template bool configureFusedFitting<real>(int);                                                                                        \
    template std::string fusedMomentScanObstacle<real>(const GraphModelParams<real>&, const FusedNetworkShape&);                           \
    template void launchFusedFitting<real>(const GraphModelParams<real>&, const FusedNetworkShape&, const FusedNetworkWeights<real>*,      \
                                           const int*, real*, real*, real*, GraphStatus*, bool, const FusedMomentScan<real>*,              \
                                           cudaStream_t);
GRAPH_INSTANTIATE_FUSED(float)
GRAPH_INSTANTIATE_FUSED(double)

} // namespace GraphPlugin
