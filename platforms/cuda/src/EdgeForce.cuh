#ifndef OPENMM_GRAPH_EDGE_FORCE_CUH_
#define OPENMM_GRAPH_EDGE_FORCE_CUH_

/**
 * The force of one edge from a lane group's shares of S_lm and P_lm, into OpenMM's buffer in 64-bit fixed point: the
 * end of every force scan's per-edge work (the row scan, EdgeScanKernels.cu; the streamed scan,
 * StreamedForcesKernels.cu), so that both give each edge bitwise the same force.
 */

#include "NetworkDeviceFunctions.cuh"

namespace GraphPlugin {

/**
 * Sum each of V values over the LPE lanes of a group (aligned, a power of
 * two >= V) and leave the total of value q in the group's lanes whose top
 * log2(V) bits (of their index s in the group) are q: a reduce-scatter
 * butterfly, V - 1 + log2(LPE / V) shuffles instead of V log2(LPE).  A fixed
 * order: bitwise reproducible.  `mask`: the lanes that call it (the whole
 * warp, or the group alone where groups run apart).
 */
template <typename real, int V, int LPE> __device__ inline real groupReduceScatter(real v[V], int sub, unsigned mask = 0xffffffffu) {
    constexpr int steps = V == 1 ? 0 : V == 2 ? 1 : V == 4 ? 2 : V == 8 ? 3 : V == 16 ? 4 : 5;
    static_assert(LPE >= V, "a group reduces at most as many values as it has lanes");
#pragma unroll
    for (int step = 0; step < steps; step++) {
        const int width = V >> (step + 1), offset = (LPE / 2) >> step;
        const bool upper = (sub & offset) != 0;
#pragma unroll
        for (int t = 0; t < V / 2; t++)
            if (t < width) {
                const real send = upper ? v[t] : v[t + width];
                const real keep = upper ? v[t + width] : v[t];
                v[t] = keep + __shfl_xor_sync(mask, send, offset);
            }
    }
    real x = v[0];
#pragma unroll
    for (int offset = (LPE / 2) >> steps; offset > 0; offset >>= 1)
        x += __shfl_xor_sync(mask, x, offset);
    return x;
}

/**
 * The component of dE/dd that lane `sub` of a group of LPE lanes finishes in edgeForce (lanes 0, LPE/4, LPE/2: x, y, z),
 * and whether it finishes one.
 */
template <int LPE> __device__ inline int forceComponent(int sub) {
    return sub / (LPE / 4);
}
template <int LPE> __device__ inline bool forceOwner(int sub) {
    return sub % (LPE / 4) == 0 && forceComponent<LPE>(sub) < 3;
}

/**
 * The force of edge (i, j) from this lane's share of S_lm and P_lm (its
 * channels): the lane contracts them with the edge's harmonics and their
 * gradients into its share of dE/dd = (1/n_norm) sum_lm [ P_lm Y_lm u + S_lm
 * (dY/du - u (u . dY/du)) / r ] (linear in S and P), one reduce-scatter over
 * the lane's group of LPE sums the three components (fixed order), and the
 * owner lane of each component adds -dE/dd to j in OpenMM's buffer and dE/dd
 * to forceI (this lane's component of F_i, fixed point), reporting a value
 * beyond the fixed-point range.  slotJ: j's slot in the buffer, slotOfNode[j]
 * (the row scan stages it with the edge, EdgeStage::slotJ, so that the
 * atomics do not wait for it).  Called by the lanes of `mask` (all 32, or
 * the group's); a group whose edge is not `valid` (past its batch) adds
 * nothing.
 */
template <typename real, int LMAX, int LPE>
__device__ inline void edgeForce(const real* S, const real* P, const real u[3], real invR, bool valid, int sub, int i, int j, int slotJ,
                                 const GraphModelParams<real>& model, GraphStatus* status, long long* forceBuffer, int paddedAtoms,
                                 long long& forceI, unsigned mask = 0xffffffffu) {
    constexpr int H = (LMAX + 1) * (LMAX + 1);
    real Y[MaxHarmonics], grad[MaxHarmonics][3];
    harmonics(LMAX, u, Y, grad);
    real p = 0, s[3] = {0, 0, 0};
#pragma unroll
    for (int lm = 0; lm < H; lm++) {
        p += P[lm] * Y[lm];
#pragma unroll
        for (int c = 0; c < 3; c++)
            s[c] += S[lm] * grad[lm][c];
    }
    const real uDotS = u[0] * s[0] + u[1] * s[1] + u[2] * s[2];
    real g[4];
#pragma unroll
    for (int c = 0; c < 3; c++)
        g[c] = valid ? p * u[c] + (s[c] - u[c] * uDotS) * invR : real(0); // an invalid slot's staged values may be anything
    g[3] = 0;
    const real total = groupReduceScatter<real, 4, LPE>(g, sub, mask);
    if (valid && forceOwner<LPE>(sub)) {
        const real gc = total * model.invNorm;
        if (!(fabs((double) gc) < FixedPointLimit))
            reportError(status, GraphErrorForceOutOfRange, i, j, (double) gc);
        forceI += realToFixedPoint((double) gc);
        atomicAdd((unsigned long long*) &forceBuffer[slotJ + forceComponent<LPE>(sub) * paddedAtoms],
                  (unsigned long long) realToFixedPoint(-(double) gc));
    }
}

} // namespace GraphPlugin

#endif
