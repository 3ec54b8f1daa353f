#ifndef OPENMM_GRAPH_EDGE_SHAPE_CUH_
#define OPENMM_GRAPH_EDGE_SHAPE_CUH_

/**
 * How the edge scans (EdgeScanKernels.cu, StreamedMomentsKernels.cu) spread a
 * model's channels over a warp's lanes, and the host dispatch from the model's
 * shape (l_max, M) to the compile-time shapes their kernels are built for.
 */

#include <type_traits>

namespace GraphPlugin {

/**
 * How a warp of an edge scan splits its work (chosen from the model's shape
 * alone, dispatchEdgeShape, so that the sums do not depend on the system or the
 * device): groups of LPE lanes, each group one edge at a time (32 / LPE edges
 * at once); lane s of a group holds channels k = (s + LPE x) V + v, x < XPL,
 * v < V, read V at a time (16-byte vectors where M is a multiple of V).
 * V = 1, LPE = 32 is a lane per channel (M not a multiple of the vector).
 */
template <int V_, int LPE_, int XPL_> struct EdgeShape {
    static constexpr int V = V_, LPE = LPE_, XPL = XPL_, Groups = 32 / LPE_, Channels = V_ * XPL_;
    static_assert(LPE_ >= 4 && LPE_ <= 32 && (LPE_ & (LPE_ - 1)) == 0, "a group is 4, 8, 16 or 32 lanes");
};

/** withL(std::integral_constant<int, L>()) for l_max = L (0, 1 or 2). */
template <typename WithL> void dispatchLMax(int lMax, WithL withL) {
    if (lMax == 0)
        withL(std::integral_constant<int, 0>());
    else if (lMax == 1)
        withL(std::integral_constant<int, 1>());
    else
        withL(std::integral_constant<int, 2>());
}

/**
 * body(l, shape) with l_max and the EdgeShape of the edge scans for M
 * channels of `real`: 16-byte vectors (4 floats, 2 doubles) where M is a
 * multiple of them, in groups of the fewest lanes (4 to 32) that cover M with
 * one vector each (two for doubles beyond 64 channels); otherwise a lane per
 * channel (V = 1, LPE = 32).  A function of the model's shape alone.
 */
template <typename real, typename Body> void dispatchEdgeShape(int lMax, int numChannels, Body body) {
    constexpr int VV = 16 / sizeof(real);
    dispatchLMax(lMax, [&](auto lTag) {
        using L = decltype(lTag);
        if (numChannels % VV == 0) {
            const int vectors = numChannels / VV;
            if (vectors <= 4)
                body(L(), EdgeShape<VV, 4, 1>());
            else if (vectors <= 8)
                body(L(), EdgeShape<VV, 8, 1>());
            else if (vectors <= 16)
                body(L(), EdgeShape<VV, 16, 1>());
            else if (vectors <= 32 || sizeof(real) == 4) // at most 128 channels: 32 float4
                body(L(), EdgeShape<VV, 32, 1>());
            else if constexpr (sizeof(real) == 8)
                body(L(), EdgeShape<VV, 32, 2>());
        }
        else if (numChannels <= 32)
            body(L(), EdgeShape<1, 32, 1>());
        else if (numChannels <= 64)
            body(L(), EdgeShape<1, 32, 2>());
        else
            body(L(), EdgeShape<1, 32, 4>());
    });
}

} // namespace GraphPlugin

#endif
