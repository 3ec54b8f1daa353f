/**
 * Stage 2, streamed: the moments scan with the radial table streamed through shared memory (StreamedScan.cuh,
 * bench/NOTES.md v29-v31).  Each center's sums are taken edge by edge in canonical order by one lane group (the R of an
 * edge exactly as the row scan computes it), so they are a function of the row alone and bitwise reproducible; they
 * differ from the row scan's (which adds per-warp chunks) in rounding only.
 */

#include "ChainedLaunch.cuh"
#include "StreamedScan.cuh"

namespace GraphPlugin {

namespace {

using namespace streamed;

/** Registers of sums a lane (4-byte words) that a group's centers may take. */
constexpr int MomentSumRegisters = 72;

/**
 * One edge of a group's window over a row (shared memory), everything its lanes need and nothing computed twice: the
 * Hermite basis of its r in parity order (HermiteBasis::value), its harmonics, the neighbour (for the node weights),
 * the offset of its neighbour type's table in a ring slot, and its interval.  Entry s is filled by lane s of the group
 * (fillEntry) and read by all of them (16-byte broadcasts).
 */
template <typename real, int LMAX> struct alignas(16) MomentEdge {
    static constexpr int H = (LMAX + 1) * (LMAX + 1);
    real basis[6], Y[H];
    int j, tableOffset, interval;
    int nextJ; ///< the neighbour of the edge `depth` further on (loaded by fillEntry for the entry's next fill)

    /** The edge's own values (fillEntry): its basis and harmonics. */
    __device__ void set(const HermiteBasis<real>& hermite, real r, const real u[3]) {
        real grad[MaxHarmonics][3], harmonic[MaxHarmonics];
        harmonics(LMAX, u, harmonic, grad);
#pragma unroll
        for (int w = 0; w < 6; w++)
            basis[w] = hermite.value[w];
#pragma unroll
        for (int lm = 0; lm < H; lm++)
            Y[lm] = harmonic[lm];
    }
};

/**
 * The moments scan's Body of streamedScan: lane s of a group sums its channels' R_l,k(r) (times nodeWeights[j][k]
 * when Weighted) Y_lm of each of its centers' edges in registers and stores them, times 1 / n_norm, at the end.
 */
template <typename real, int LMAX, typename Shape, bool Weighted> struct MomentsBody {
    static constexpr int H = (LMAX + 1) * (LMAX + 1), C = Shape::Channels, V = Shape::V, LPE = Shape::LPE;
    using Edge = MomentEdge<real, LMAX>;
    static constexpr int Centers = centersPerGroup<Edge, Shape>(MomentSumRegisters, H* C*(int) (sizeof(real) / 4));
    const GraphModelParams<real>& model;
    const real* __restrict__ nodeWeights;
    real* __restrict__ moments;
    real acc[Centers][H][C];

    __device__ MomentsBody(const GraphModelParams<real>& model, const real* nodeWeights, real* moments)
        : model(model), nodeWeights(nodeWeights), moments(moments) {}

    __device__ void begin(int c, int node, int sub) {
#pragma unroll
        for (int lm = 0; lm < H; lm++)
#pragma unroll
            for (int x = 0; x < C; x++)
                acc[c][lm][x] = 0;
    }

    __device__ void edge(int c, int node, const Edge& edge, const real* even, const real* odd, int sub) {
        const int M = model.numChannels;
        const real* basis = edge.basis;
        const real* Y = edge.Y;
        // R_l,k of this lane's channels: channelsFromKnots' sums, in its order.
        real R[LMAX + 1][C];
#pragma unroll
        for (int x = 0; x < Shape::XPL; x++) {
            const int k0 = min(sub + LPE * x, M / V - 1) * V; // a lane past M (XPL > 1) reads the last vector again
#pragma unroll
            for (int l = 0; l <= LMAX; l++) {
                real knot[6][V];
                loadKnots<real, V>(even, odd, l, k0, M, knot);
#pragma unroll
                for (int v = 0; v < V; v++)
                    R[l][x * V + v] = knotValue<real, V>(knot, v, basis);
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

    __device__ void end(int c, int node, int count, int sub) {
        const int M = model.numChannels;
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
};

/** The streamed moments (streamedScan with MomentsBody): blocks of Threads threads, one a multiprocessor. */
template <typename real, int LMAX, typename Shape, bool Weighted>
__global__ void __launch_bounds__(Threads, 1)
    streamedMomentsKernel(GraphModelParams<real> model, const real* __restrict__ tableByKnot, const real* __restrict__ nodeWeights,
                          const double* __restrict__ positions, const int* __restrict__ types, const int* __restrict__ centers,
                          const int4* __restrict__ blocks, GraphBox<double> box, const int* __restrict__ neighbors,
                          const int* __restrict__ rowCount, int capacity, real* __restrict__ moments, GraphStatus* status, int slots,
                          int stageIntervals) {
    beginChainedKernel();
    MomentsBody<real, LMAX, Shape, Weighted> body(model, nodeWeights, moments);
    streamedScan<real, LMAX, Shape>(body, model, tableByKnot, positions, types, centers, blocks, box, neighbors, rowCount, capacity, status,
                                    slots, stageIntervals);
}

} // namespace

template <typename real> StreamedScanPlan streamedMomentsPlan(const GraphModelParams<real>& model, int maxSharedBytes) {
    return bodyPlan<real>(model, maxSharedBytes,
                          [](auto l, auto shape) { return BodyTag<MomentsBody<real, decltype(l)::value, decltype(shape), false>>(); });
}

template <typename real> bool configureStreamedMoments(const GraphModelParams<real>& model, const StreamedScanPlan& plan) {
    return allowSharedMemory<real>(model, plan, [](auto l, auto shape) {
        return std::array{streamedMomentsKernel<real, decltype(l)::value, decltype(shape), false>,
                          streamedMomentsKernel<real, decltype(l)::value, decltype(shape), true>};
    });
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

std::vector<int> streamedScanBlocks(const std::vector<int>& typeOffsets, int centersPerBlock) {
    std::vector<int> blocks;
    for (int t = 0; t + 1 < (int) typeOffsets.size(); t++)
        for (int b = typeOffsets[t]; b < typeOffsets[t + 1]; b += centersPerBlock)
            blocks.insert(blocks.end(), {b, std::min(centersPerBlock, typeOffsets[t + 1] - b), t, 0});
    return blocks;
}

template <typename real>
void launchStreamedMoments(const GraphModelParams<real>& model, const StreamedScanPlan& plan, const real* tableByKnot,
                           const real* nodeWeights, const double* positions, const int* types, const int* centers, const int* blocks,
                           int numBlocks, GraphBox<double> box, const int* neighbors, const int* rowCount, int capacity, real* moments,
                           GraphStatus* status, cudaStream_t stream) {
    if (numBlocks == 0)
        return;
    dispatchStreamedShape<real>(model.lMax, model.numChannels, [&](auto l, auto shape) {
        auto kernel = nodeWeights ? streamedMomentsKernel<real, decltype(l)::value, decltype(shape), true>
                                  : streamedMomentsKernel<real, decltype(l)::value, decltype(shape), false>;
        launchChained(kernel, numBlocks, Threads, plan.sharedBytes, stream, model, tableByKnot, nodeWeights, positions, types, centers,
                      reinterpret_cast<const int4*>(blocks), box, neighbors, rowCount, capacity, moments, status, plan.slots,
                      plan.stageIntervals);
    });
}

#define GRAPH_INSTANTIATE_STREAMED(real)                                                                                                   \
    template StreamedScanPlan streamedMomentsPlan<real>(const GraphModelParams<real>&, int);                                               \
    template bool configureStreamedMoments<real>(const GraphModelParams<real>&, const StreamedScanPlan&);                                  \
    template std::vector<real> streamedTableLayout<real>(const std::vector<real>&, int, int, int, int);                                    \
    template void launchStreamedMoments<real>(const GraphModelParams<real>&, const StreamedScanPlan&, const real*, const real*,            \
                                              const double*, const int*, const int*, const int*, int, GraphBox<double>, const int*,        \
                                              const int*, int, real*, GraphStatus*, cudaStream_t);
GRAPH_INSTANTIATE_STREAMED(float)
GRAPH_INSTANTIATE_STREAMED(double)

} // namespace GraphPlugin
