/**
 * Stage 4, streamed: the force scan with the radial table streamed through shared memory (StreamedScan.cuh,
 * bench/NOTES.md v31), for models without an interaction block (one table).  A lane group keeps its center's dE/dA
 * (its channels of the [H][M] gradient) in registers; for each edge of the center's row, in row order, each lane sums
 * its channels' share of S_lm = sum_k G_lm,k R_l,k and P_lm = sum_k G_lm,k R'_l,k from the knots in the ring, exactly
 * as the row scan (EdgeScanKernels.cu, edgeGradientSums) does from L2, and edgeForce (EdgeForce.cuh) finishes the
 * edge's force into OpenMM's buffer in 64-bit fixed point.  Every edge's force is converted to fixed point on its own
 * and integer sums do not depend on their order, so the forces are bitwise those of the row scan.
 */

#include "ChainedLaunch.cuh"
#include "EdgeForce.cuh"
#include "StreamedScan.cuh"

namespace GraphPlugin {

namespace {

using namespace streamed;

/** Registers (4-byte words) a lane may give its group's centers' gradients: one center at the medium and large grades. */
constexpr int ForceGradientRegisters = 36;

/**
 * One edge of a group's window over a row (shared memory) for the force scan: the Hermite basis of its r and of its
 * derivative in parity order (HermiteBasis::value and slope), its unit vector u (i to j) and 1 / r, the neighbour, the
 * offset of its neighbour type's table in a ring slot, and its interval; the row scan stages the same values
 * (EdgeStage, Full).  Entry s is filled by lane s of the group (fillEntry) and read by all of them (16-byte broadcasts).
 */
template <typename real, int LMAX> struct alignas(16) ForceEdge {
    real basis[6], slope[6], u[3], invR;
    int j, tableOffset, interval;
    int nextJ; ///< the neighbour of the edge `depth` further on (loaded by fillEntry for the entry's next fill)

    /** The edge's own values (fillEntry): its bases, unit vector and 1 / r. */
    __device__ void set(const HermiteBasis<real>& hermite, real r, const real uu[3]) {
#pragma unroll
        for (int w = 0; w < 6; w++) {
            basis[w] = hermite.value[w];
            slope[w] = hermite.slope[w];
        }
#pragma unroll
        for (int c = 0; c < 3; c++)
            u[c] = uu[c];
        invR = real(1) / r;
    }
};

/**
 * The force scan's Body of streamedScan: the group's centers' dE/dA in registers (this lane's channels), each edge's S
 * and P summed as edgeGradientSums does for table 0 and finished by edgeForce (the group's lanes alone shuffle), this
 * lane's component of each center's force summed in fixed point and added at the end.
 */
template <typename real, int LMAX, typename Shape> struct ForcesBody {
    static constexpr int H = (LMAX + 1) * (LMAX + 1), C = Shape::Channels, V = Shape::V, LPE = Shape::LPE;
    using Edge = ForceEdge<real, LMAX>;
    static constexpr int Centers = centersPerGroup<Edge, Shape>(ForceGradientRegisters, H* C*(int) (sizeof(real) / 4));
    const GraphModelParams<real>& model;
    const real* __restrict__ gradA;
    const int* __restrict__ slotOfNode;
    long long* __restrict__ forceBuffer;
    int paddedAtoms;
    GraphStatus* status;
    unsigned groupMask;
    real G[Centers][H][C];
    long long forceI[Centers];

    __device__ ForcesBody(const GraphModelParams<real>& model, const real* gradA, const int* slotOfNode, long long* forceBuffer,
                          int paddedAtoms, GraphStatus* status)
        : model(model), gradA(gradA), slotOfNode(slotOfNode), forceBuffer(forceBuffer), paddedAtoms(paddedAtoms), status(status) {
        const int lane = threadIdx.x & 31;
        groupMask = LPE == 32 ? 0xffffffffu : ((1u << LPE) - 1) << (lane / LPE * LPE);
    }

    __device__ void begin(int c, int node, int sub) {
        const int M = model.numChannels;
        forceI[c] = 0;
#pragma unroll
        for (int x = 0; x < Shape::XPL; x++) {
            const int k0 = (sub + LPE * x) * V;
#pragma unroll
            for (int lm = 0; lm < H; lm++) {
                real g[V];
                if (node >= 0 && k0 < M)
                    loadChannels<real, V>(gradA + ((size_t) node * H + lm) * M + k0, g);
                else
#pragma unroll
                    for (int v = 0; v < V; v++)
                        g[v] = 0;
#pragma unroll
                for (int v = 0; v < V; v++)
                    G[c][lm][x * V + v] = g[v];
            }
        }
    }

    __device__ void edge(int c, int node, const Edge& edge, const real* even, const real* odd, int sub) {
        const int M = model.numChannels;
        real S[H], P[H];
#pragma unroll
        for (int lm = 0; lm < H; lm++)
            S[lm] = P[lm] = 0;
#pragma unroll
        for (int x = 0; x < Shape::XPL; x++) {
            const int k0 = (sub + LPE * x) * V;
            if (k0 < M) { // M is a multiple of V
#pragma unroll
                for (int l = 0; l <= LMAX; l++) {
                    // R and dR/dr of this lane's channels: channelsFromKnots' sums, in its order.
                    real knot[6][V], value[V], deriv[V];
                    loadKnots<real, V>(even, odd, l, k0, M, knot);
#pragma unroll
                    for (int v = 0; v < V; v++) {
                        value[v] = knotValue<real, V>(knot, v, edge.basis);
                        deriv[v] = knotSlope<real, V>(knot, v, edge.slope);
                    }
#pragma unroll
                    for (int lm = l * l; lm < (l + 1) * (l + 1); lm++)
#pragma unroll
                        for (int v = 0; v < V; v++) {
                            S[lm] += G[c][lm][x * V + v] * value[v];
                            P[lm] += G[c][lm][x * V + v] * deriv[v];
                        }
                }
            }
        }
        edgeForce<real, LMAX, LPE>(S, P, edge.u, edge.invR, true, sub, node, edge.j, slotOfNode[edge.j], model, status, forceBuffer,
                                   paddedAtoms, forceI[c], groupMask);
    }

    __device__ void end(int c, int node, int count, int sub) {
        // This lane's share of F_i (integer atomics: order independent).
        if (node >= 0 && count > 0 && forceOwner<LPE>(sub))
            atomicAdd((unsigned long long*) &forceBuffer[slotOfNode[node] + forceComponent<LPE>(sub) * paddedAtoms],
                      (unsigned long long) forceI[c]);
    }
};

/** The streamed forces (streamedScan with ForcesBody): blocks of Threads threads, one a multiprocessor. */
template <typename real, int LMAX, typename Shape>
__global__ void __launch_bounds__(Threads, 1)
    streamedForcesKernel(GraphModelParams<real> model, const real* __restrict__ tableByKnot, const real* __restrict__ gradA,
                         const double* __restrict__ positions, const int* __restrict__ types, const int* __restrict__ centers,
                         const int4* __restrict__ blocks, GraphBox<double> box, const int* __restrict__ neighbors,
                         const int* __restrict__ rowCount, int capacity, const int* __restrict__ slotOfNode,
                         long long* __restrict__ forceBuffer, int paddedAtoms, GraphStatus* status, int slots, int stageIntervals) {
    beginChainedKernel();
    ForcesBody<real, LMAX, Shape> body(model, gradA, slotOfNode, forceBuffer, paddedAtoms, status);
    streamedScan<real, LMAX, Shape>(body, model, tableByKnot, positions, types, centers, blocks, box, neighbors, rowCount, capacity, status,
                                    slots, stageIntervals);
}

} // namespace

template <typename real> StreamedScanPlan streamedForcesPlan(const GraphModelParams<real>& model, int maxSharedBytes) {
    if (model.numInteractions != 0) { // the row scan sums two tables' terms an edge; the ring holds one
        StreamedScanPlan plan;
        plan.refusal = StreamedScanPlan::Refusal::Interactions;
        return plan;
    }
    return bodyPlan<real>(model, maxSharedBytes,
                          [](auto l, auto shape) { return BodyTag<ForcesBody<real, decltype(l)::value, decltype(shape)>>(); });
}

template <typename real> bool configureStreamedForces(const GraphModelParams<real>& model, const StreamedScanPlan& plan) {
    return allowSharedMemory<real>(
        model, plan, [](auto l, auto shape) { return std::array{streamedForcesKernel<real, decltype(l)::value, decltype(shape)>}; });
}

template <typename real>
void launchStreamedForces(const GraphModelParams<real>& model, const StreamedScanPlan& plan, const real* tableByKnot, const real* gradA,
                          const double* positions, const int* types, const int* centers, const int* blocks, int numBlocks,
                          GraphBox<double> box, const int* neighbors, const int* rowCount, int capacity, const int* slotOfNode,
                          long long* forceBuffer, int paddedAtoms, GraphStatus* status, cudaStream_t stream) {
    if (numBlocks == 0)
        return;
    dispatchStreamedShape<real>(model.lMax, model.numChannels, [&](auto l, auto shape) {
        launchChained(streamedForcesKernel<real, decltype(l)::value, decltype(shape)>, numBlocks, Threads, plan.sharedBytes, stream, model,
                      tableByKnot, gradA, positions, types, centers, reinterpret_cast<const int4*>(blocks), box, neighbors, rowCount,
                      capacity, slotOfNode, forceBuffer, paddedAtoms, status, plan.slots, plan.stageIntervals);
    });
}

#define GRAPH_INSTANTIATE_STREAMED_FORCES(real)                                                                                            \
    template StreamedScanPlan streamedForcesPlan<real>(const GraphModelParams<real>&, int);                                                \
    template bool configureStreamedForces<real>(const GraphModelParams<real>&, const StreamedScanPlan&);                                   \
    template void launchStreamedForces<real>(const GraphModelParams<real>&, const StreamedScanPlan&, const real*, const real*,             \
                                             const double*, const int*, const int*, const int*, int, GraphBox<double>, const int*,         \
                                             const int*, int, const int*, long long*, int, GraphStatus*, cudaStream_t);
GRAPH_INSTANTIATE_STREAMED_FORCES(float)
GRAPH_INSTANTIATE_STREAMED_FORCES(double)

} // namespace GraphPlugin
