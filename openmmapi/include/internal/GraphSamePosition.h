#ifndef OPENMM_GRAPH_SAME_POSITION_H_
#define OPENMM_GRAPH_SAME_POSITION_H_

/**
 * When two particles count as "at the same position" (docs/model-format.md section 2: a pair at distance 0 is an
 * error naming both), shared by every platform's graph build (host and device; no CUDA headers needed).
 *
 * Distance 0 is taken up to the rounding of the coordinates: a pair counts as coincident when its minimum-image
 * distance r (nm) has r^2 <= SamePositionTolerance^2 (r_c^2 + m_i^2 + m_j^2), m = max_d |x[d]| (only squares, so a
 * device needs no square root).  Two particles one box vector
 * apart are then caught although the image subtraction leaves a rounding residue (2e-16 nm in double precision,
 * about 1e-7 nm from single-precision positions) that an exact test of r = 0 would take for a real pair, and
 * evaluate the model at r ~ 1e-16 with a meaningless direction (forces of 1e14 kJ/mol/nm).  The tolerance is far
 * below any physical distance (6e-7 nm for r_c = 0.6 nm near the origin, 1.4e-5 nm at 10 nm from it).
 */
#ifdef __CUDACC__
#define GRAPH_SAME_POSITION_HOST_DEVICE __host__ __device__
#else
#define GRAPH_SAME_POSITION_HOST_DEVICE
#endif

namespace GraphPlugin {

/** Relative tolerance of the same-position test (see above). */
constexpr double SamePositionTolerance = 1e-6;

/** max_d |x[d]| of a position [3]. */
template <typename real> GRAPH_SAME_POSITION_HOST_DEVICE inline real largestMagnitude(const real* x) {
    real largest = 0;
    for (int d = 0; d < 3; d++) {
        const real magnitude = x[d] < 0 ? -x[d] : x[d];
        largest = magnitude > largest ? magnitude : largest;
    }
    return largest;
}

/**
 * Whether a pair at squared minimum-image distance r2 (nm^2) counts as two particles at the same position; xi and
 * xj are the particles' coordinates (nm, [3], as stored: the residue scales with them), cutoff2 r_c^2 (nm^2).
 */
template <typename real> GRAPH_SAME_POSITION_HOST_DEVICE inline bool isSamePosition(real r2, const real* xi, const real* xj, real cutoff2) {
    const real mi = largestMagnitude(xi), mj = largestMagnitude(xj);
    const real tolerance2 = (real) (SamePositionTolerance * SamePositionTolerance);
    return r2 <= tolerance2 * (cutoff2 + mi * mi + mj * mj);
}

} // namespace GraphPlugin

#endif
