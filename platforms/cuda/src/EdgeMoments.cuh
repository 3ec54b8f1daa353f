/**
 * The moments' edge scan, shared by the moments kernel (EdgeScanKernels.cu,
 * one block per center) and the fused network (FusedNetworkKernels.cu, which
 * scans its tile's rows itself where it can): a row in MomentChunks
 * contiguous chunks, each summed by one warp in canonical order (its lane
 * groups, EdgeShape, over the staged edges) and reduced over the groups in a
 * fixed butterfly, then the chunks added in chunk order.  Whoever runs the
 * chunks, the sums are the same operations in the same order, so the moments
 * are bitwise the same.
 */

#ifndef OPENMM_GRAPH_EDGE_MOMENTS_CUH_
#define OPENMM_GRAPH_EDGE_MOMENTS_CUH_

#include "EdgeShape.cuh"
#include "GraphDeviceFunctions.cuh"

namespace GraphPlugin {

constexpr int MomentChunks = 4; ///< chunks of a row in the moments (the moments kernel's warps)

/**
 * The edges [first, last) of a row that warp `warp` of `numWarps` handles: a
 * contiguous chunk, so each warp sums its chunk in canonical order and the
 * block adds the chunks in warp order (deterministic for a given row).
 */
__device__ inline void rowChunk(int count, int warp, int numWarps, int& first, int& last) {
    const int chunk = (count + numWarps - 1) / numWarps;
    first = min(count, warp * chunk);
    last = min(count, first + chunk);
}

/**
 * The per-edge quantities that every lane of a warp needs, computed once per
 * edge (lane e of the warp for edge e of a batch) instead of once per lane:
 * neighbour, its type, the table interval and the coefficients of its knots'
 * values (HermiteBasis: value; Full, for the forces: and slope), the
 * harmonics, the unit vector and 1 / distance (Full: and the neighbour's slot
 * in OpenMM's force buffer, loaded with its position rather than after the
 * edge's sums, where its round trip held up the force's atomics).  One per
 * warp in shared memory; a batch holds E edges.
 */
template <typename real, int H, bool Full> struct EdgeStage {
    static constexpr int E = sizeof(real) == 4 ? 32 : 16;
    int j[E], tj[E], interval[E];
    int slotJ[Full ? E : 4]; ///< Full: slotOfNode[j] (4 unused ints otherwise: the size stays a multiple of 16 bytes)
    real value[6][E];
    real slope[Full ? 6 : 1][E];
    real Y[H][E];
    real u[Full ? 3 : 1][E];
    real invR[E]; ///< 1 / r (the division once per edge, not once per lane)

    /** Lane `slot` stages edge (i, j); slotOfNode: OpenMM's force-buffer slot of each node (Full only). */
    __device__ void fill(int slot, int LMAX, const GraphModelParams<real>& model, const double* positions, const int* types, int i, int jj,
                         const GraphBox<double>& box, const int* slotOfNode) {
        if (Full)
            slotJ[slot] = slotOfNode[jj];
        real uu[3], YY[MaxHarmonics], gg[MaxHarmonics][3];
        const real rr = edgeGeometry(positions, i, jj, box, uu);
        harmonics(LMAX, uu, YY, gg);
        const HermiteBasis<real> basis(rr, model);
        j[slot] = jj;
        tj[slot] = types[jj];
        interval[slot] = basis.interval;
        for (int x = 0; x < 6; x++) {
            value[x][slot] = basis.value[x];
            if (Full)
                slope[x][slot] = basis.slope[x];
        }
        for (int lm = 0; lm < H; lm++)
            Y[lm][slot] = YY[lm];
        if (Full)
            for (int c = 0; c < 3; c++)
                u[c][slot] = uu[c];
        invR[slot] = real(1) / rr;
    }
};

template <typename real, int LMAX, bool Full> constexpr size_t stageBytes() {
    return sizeof(EdgeStage<real, (LMAX + 1) * (LMAX + 1), Full>);
}

/**
 * Walk the edges [first, last) of center i's row in canonical order, a batch
 * at a time: the warp's lanes stage the batch, then the lanes of group g of
 * Groups call body(q, valid) for q = g, g + Groups, ... over the staged
 * edges, every lane the same number of times (valid false past the batch's
 * end: the lane still joins the warp's shuffles).  slotOfNode: for a Full
 * stage (the forces), OpenMM's force-buffer slot of each node.
 */
template <int LMAX, int Groups, typename real, typename Stage, typename Body>
__device__ inline void forEachStagedEdge(Stage* stage, int lane, const GraphModelParams<real>& model, const double* positions,
                                         const int* types, int i, const int* neighbors, int capacity, const GraphBox<double>& box,
                                         int first, int last, Body body, const int* slotOfNode = nullptr) {
    const int group = lane / (32 / Groups);
    for (int base = first; base < last; base += Stage::E) {
        const int count = min(Stage::E, last - base);
        if (lane < count)
            stage->fill(lane, LMAX, model, positions, types, i, neighbors[(size_t) i * capacity + base + lane], box, slotOfNode);
        __syncwarp();
        for (int q0 = 0; q0 < count; q0 += Groups)
            body(q0 + group, q0 + group < count);
        __syncwarp();
    }
}

/**
 * Adds staged edge q's terms to its center's moments acc[lm][c] (this lane's
 * channels, EdgeShape): R_l,k(r) (times nodeWeights[j][k] when given) Y_lm,
 * R from `table` for center type ti.  The per-edge body of momentsKernel.
 */
template <typename real, int LMAX, typename Shape, typename Stage>
__device__ inline void addEdgeMoments(const Stage* stage, int q, int sub, const GraphModelParams<real>& model, const real* table, int ti,
                                      const real* nodeWeights, real (&acc)[(LMAX + 1) * (LMAX + 1)][Shape::Channels]) {
    constexpr int H = (LMAX + 1) * (LMAX + 1), V = Shape::V;
    const int M = model.numChannels;
    const int j = stage->j[q], tj = stage->tj[q], interval = stage->interval[q];
    real coefficient[6], Y[H];
#pragma unroll
    for (int x = 0; x < 6; x++)
        coefficient[x] = stage->value[x][q];
#pragma unroll
    for (int lm = 0; lm < H; lm++)
        Y[lm] = stage->Y[lm][q];
    const real* knots = tableKnot(table, model, ti, tj, 0, interval);
#pragma unroll
    for (int x = 0; x < Shape::XPL; x++) {
        const int k0 = (sub + Shape::LPE * x) * V;
        if (k0 < M) { // M is a multiple of V
            real weight[V];
            if (nodeWeights)
                loadChannels<real, V>(nodeWeights + (size_t) j * M + k0, weight);
            else
#pragma unroll
                for (int v = 0; v < V; v++)
                    weight[v] = 1;
#pragma unroll
            for (int l = 0; l <= LMAX; l++) {
                real value[V], unused[V];
                channelsFromKnots<real, V, false>(knots, l, k0, model, knotParity(interval), coefficient, nullptr, value, unused);
#pragma unroll
                for (int v = 0; v < V; v++) {
                    value[v] *= weight[v];
#pragma unroll
                    for (int lm = l * l; lm < (l + 1) * (l + 1); lm++)
                        acc[lm][x * V + v] += value[v] * Y[lm];
                }
            }
        }
    }
}

/**
 * Chunk `chunk` of MomentChunks of center i's row, summed by the calling warp into acc[lm][c] (this lane's channels,
 * EdgeShape; after the butterfly every lane holds the chunk's sums of the channels it handles): the body of
 * momentsKernel for one warp.  `stage`: the warp's EdgeStage in shared memory.
 */
template <typename real, int LMAX, typename Shape>
__device__ inline void chunkMoments(EdgeStage<real, (LMAX + 1) * (LMAX + 1), false>* stage, int lane, const GraphModelParams<real>& model,
                                    const real* table, const real* nodeWeights, const double* positions, const int* types,
                                    const int* neighbors, int capacity, const GraphBox<double>& box, int i, int count, int chunk,
                                    real (&acc)[(LMAX + 1) * (LMAX + 1)][Shape::Channels]) {
    constexpr int H = (LMAX + 1) * (LMAX + 1), C = Shape::Channels;
    const int sub = lane % Shape::LPE, ti = types[i];
#pragma unroll
    for (int lm = 0; lm < H; lm++)
#pragma unroll
        for (int c = 0; c < C; c++)
            acc[lm][c] = 0;
    int first, last;
    rowChunk(count, chunk, MomentChunks, first, last);
    forEachStagedEdge<LMAX, Shape::Groups>(stage, lane, model, positions, types, i, neighbors, capacity, box, first, last,
                                           [&](int q, bool valid) {
                                               if (valid)
                                                   addEdgeMoments<real, LMAX, Shape>(stage, q, sub, model, table, ti, nodeWeights, acc);
                                           });
#pragma unroll
    for (int lm = 0; lm < H; lm++)
#pragma unroll
        for (int c = 0; c < C; c++)
#pragma unroll
            for (int offset = Shape::LPE; offset < 32; offset *= 2)
                acc[lm][c] += __shfl_xor_sync(0xffffffff, acc[lm][c], offset);
}

/** The first group's lanes store a chunk's sums (chunkMoments) into partial, [H][M] (shared memory). */
template <typename real, int LMAX, typename Shape>
__device__ inline void storeChunkMoments(const real (&acc)[(LMAX + 1) * (LMAX + 1)][Shape::Channels], int lane, int M, real* partial) {
    constexpr int H = (LMAX + 1) * (LMAX + 1), V = Shape::V;
    const int sub = lane % Shape::LPE;
    if (lane < Shape::LPE)
#pragma unroll
        for (int x = 0; x < Shape::XPL; x++) {
            const int k0 = (sub + Shape::LPE * x) * V;
            if (k0 < M)
#pragma unroll
                for (int lm = 0; lm < H; lm++)
#pragma unroll
                    for (int v = 0; v < V; v++)
                        partial[lm * M + k0 + v] = acc[lm][x * V + v];
        }
}

} // namespace GraphPlugin

#endif
