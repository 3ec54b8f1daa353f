#ifndef OPENMM_GRAPH_DEVICE_FUNCTIONS_CUH_
#define OPENMM_GRAPH_DEVICE_FUNCTIONS_CUH_

/**
 * Device helpers shared by the stages of the CUDA pipeline: minimum image,
 * the quintic Hermite tables, real spherical harmonics, fixed point, and
 * deterministic warp reductions.
 */

#include "GraphDeviceTypes.h"
#include <cstdint>
#include <cuda_runtime.h>

namespace GraphPlugin {

/** Channels each lane of a warp handles in the edge scans (M <= 32 * MaxChannelsPerLane). */
constexpr int MaxChannelsPerLane = 4;
/** (L+1)^2 for L <= 2. */
constexpr int MaxHarmonics = 9;

/** OpenMM's fixed-point scale for forces (realToFixedPoint): 2^32 units per kJ/mol/nm. */
constexpr double FixedPointScale = 4294967296.0;
/** Largest magnitude representable after scaling, with headroom for sums (kJ/mol/nm). */
constexpr double FixedPointLimit = 1.0e9;

/**
 * One contribution in fixed point, rounded to nearest (OpenMM's own realToFixedPoint truncates).  Rounding keeps the
 * error of a particle's sum of k contributions unbiased (about 0.3 sqrt(k) units of 2^-32 kJ/mol/nm rather than up to
 * k/2), and rn(-x) = -rn(x), so the two ends of an edge still get exactly opposite contributions.
 */
__device__ inline long long realToFixedPoint(double x) {
    return __double2ll_rn(x * FixedPointScale);
}

/**
 * d (nm) reduced to its minimum image in OpenMM's reduced triclinic box.  The image counts come from products with the
 * box's inverse heights rather than divisions (three double divisions per pair were a visible part of the row build):
 * the two can differ only where a component is within rounding of half the box's height, and such a pair is beyond the
 * cut-off (less than half the smallest height, checked on the host) in either image, so the graph and every accepted
 * edge vector are the same.
 */
template <typename real> __device__ inline void minimumImage(real d[3], const GraphBox<real>& box) {
    if (!box.periodic)
        return;
    real s = floor(d[2] * box.inverse[2] + real(0.5));
    d[0] -= s * box.c[0];
    d[1] -= s * box.c[1];
    d[2] -= s * box.c[2];
    s = floor(d[1] * box.inverse[1] + real(0.5));
    d[0] -= s * box.b[0];
    d[1] -= s * box.b[1];
    s = floor(d[0] * box.inverse[0] + real(0.5));
    d[0] -= s * box.a[0];
}

/**
 * The edge (i, j): d = x_j - x_i (minimum image) in double, then r and u
 * rounded to `real`: the same for any image OpenMM keeps the particles in.
 */
template <typename real>
__device__ inline real edgeGeometry(const double* positions, int i, int j, const GraphBox<double>& box, real u[3]) {
    double d[3] = {positions[3 * j] - positions[3 * i], positions[3 * j + 1] - positions[3 * i + 1],
                   positions[3 * j + 2] - positions[3 * i + 2]};
    minimumImage(d, box);
    const double r = sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
    for (int c = 0; c < 3; c++)
        u[c] = (real) (d[c] / r);
    return (real) r;
}

/** The canonical sort key of an edge: r^2 / r_c^2 in 32-bit fixed point (r < r_c). */
template <typename real> __device__ inline uint32_t distanceKey(real r2, real invCutoff2) {
    double x = (double) r2 * (double) invCutoff2;
    return (uint32_t) fmin(x * 4294967295.0, 4294967295.0);
}

/**
 * Racah-normalised real spherical harmonics (index lm = l*l + m) and their
 * polynomial gradients with respect to u.
 */
template <typename real> __device__ inline void harmonics(int lMax, const real u[3], real Y[MaxHarmonics], real grad[MaxHarmonics][3]) {
    const real s3 = real(1.7320508075688772);
    Y[0] = 1;
    grad[0][0] = grad[0][1] = grad[0][2] = 0;
    if (lMax >= 1)
        for (int m = 0; m < 3; m++) {
            Y[1 + m] = u[m];
            for (int c = 0; c < 3; c++)
                grad[1 + m][c] = (c == m ? real(1) : real(0));
        }
    if (lMax >= 2) {
        const real x = u[0], y = u[1], z = u[2];
        Y[4] = s3 * x * y;
        Y[5] = s3 * y * z;
        Y[6] = s3 * z * x;
        Y[7] = real(0.5) * s3 * (x * x - y * y);
        Y[8] = real(0.5) * (3 * z * z - 1);
        grad[4][0] = s3 * y, grad[4][1] = s3 * x, grad[4][2] = 0;
        grad[5][0] = 0, grad[5][1] = s3 * z, grad[5][2] = s3 * y;
        grad[6][0] = s3 * z, grad[6][1] = 0, grad[6][2] = s3 * x;
        grad[7][0] = s3 * x, grad[7][1] = -s3 * y, grad[7][2] = 0;
        grad[8][0] = 0, grad[8][1] = 0, grad[8][2] = 3 * z;
    }
}

/**
 * `p`, opaque to the compiler, for loads at 32-bit offsets from it: left to
 * itself the compiler folds a table index into every load's address and
 * recomputes it in 64 bits for each (about 45 instructions per six loads).
 */
template <typename T> __device__ inline const T* opaque(const T* p) {
    asm("" : "+l"(p));
    return p;
}

/**
 * The first knot of interval `interval` of table (a, b, l) in a [T][T][L+1][K+1][3][M] table; table (a, b, l + 1) follows
 * tableStride(model) elements later.
 */
template <typename real>
__device__ inline const real* tableKnot(const real* table, const GraphModelParams<real>& model, int a, int b, int l, int interval) {
    return table +
           ((((size_t) a * model.numTypes + b) * (model.lMax + 1) + l) * (model.radialIntervals + 1) + interval) * 3 * model.numChannels;
}

/** The elements from table (a, b, l) to table (a, b, l + 1) of a [T][T][L+1][K+1][3][M] table (an int: at most 2^31 / 4 KB). */
template <typename real> __device__ inline int tableStride(const GraphModelParams<real>& model) {
    return (model.radialIntervals + 1) * 3 * model.numChannels;
}

/**
 * out[x] = p[x], x < W, by vector loads: a float4 for W = 4 floats, a float2 for W = 2 floats, double2 pairs for an even
 * W of doubles (p aligned to the vector), else W loads.  Any memory space (shared memory in the products and the force
 * scan, global memory in the dense epilogue); loadChannels is the read-only global form.
 */
template <typename real, int W> __device__ inline void loadVector(const real* p, real out[W]) {
    if constexpr (sizeof(real) == 4 && W == 4) {
        const float4 v = *reinterpret_cast<const float4*>(p);
        out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
    }
    else if constexpr (sizeof(real) == 4 && W == 2) {
        const float2 v = *reinterpret_cast<const float2*>(p);
        out[0] = v.x, out[1] = v.y;
    }
    else if constexpr (sizeof(real) == 8 && W % 2 == 0) {
#pragma unroll
        for (int x = 0; x < W; x += 2) {
            const double2 v = *reinterpret_cast<const double2*>(p + x);
            out[x] = v.x, out[x + 1] = v.y;
        }
    }
    else {
#pragma unroll
        for (int x = 0; x < W; x++)
            out[x] = p[x];
    }
}

/** p[x] = v[x], x < W, by vector stores: the layout of loadVector (p aligned to the vector). */
template <typename real, int W> __device__ inline void storeVector(real* p, const real v[W]) {
    if constexpr (sizeof(real) == 4 && W == 4)
        *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
    else if constexpr (sizeof(real) == 4 && W == 2)
        *reinterpret_cast<float2*>(p) = make_float2(v[0], v[1]);
    else if constexpr (sizeof(real) == 8 && W % 2 == 0) {
#pragma unroll
        for (int x = 0; x < W; x += 2)
            *reinterpret_cast<double2*>(p + x) = make_double2(v[x], v[x + 1]);
    }
    else {
#pragma unroll
        for (int x = 0; x < W; x++)
            p[x] = v[x];
    }
}

/** out[v] = p[v], v < V: one 16-byte load for float4 and double2 (p aligned to it), else V loads; read-only global memory. */
template <typename real, int V> __device__ inline void loadChannels(const real* p, real (&out)[V]) {
    if constexpr (V == 4 && sizeof(real) == 4) {
        const float4 x = __ldg(reinterpret_cast<const float4*>(p));
        out[0] = x.x, out[1] = x.y, out[2] = x.z, out[3] = x.w;
    }
    else if constexpr (V == 2 && sizeof(real) == 8) {
        const double2 x = __ldg(reinterpret_cast<const double2*>(p));
        out[0] = x.x, out[1] = x.y;
    }
    else {
#pragma unroll
        for (int v = 0; v < V; v++)
            out[v] = __ldg(p + v);
    }
}

/**
 * Which of interval q's two knots is the even one: 0 the first (lower), 1 the second.  Slots 0-2 of a table lookup
 * hold the even knot's values (HermiteBasis, channelsFromKnots): the one place the parity order is defined.
 */
__device__ inline int knotParity(int interval) {
    return interval & 1;
}

/**
 * R (knotValue, with HermiteBasis::value) and dR/dr (knotSlope, with HermiteBasis::slope) of channel v from the six
 * table values `knot` of an edge's interval in parity order (slots 0-2: f, f', f'' of the even knot, 3-5: of the odd
 * one), in the difference form: the knots' f enter as the even knot's f plus (f_odd - f_even) times the odd knot's
 * coefficient, which is the plain sum since the two f coefficients add up to 1 in R (h0 + h5 = 1) and to 0 in dR/dr.
 * The plain sum f_even c[0] + f_odd c[3] + ... forms two products of about |f| that cancel to about |f'| dr, so their
 * rounding errors (of |f|) grew by |f| / (|f'| dr) relative to the result, most in dR/dr: in fp32 that was the largest
 * force error of the pipeline (the silicon model's tables alone: a relative force RMS error of 1.7e-5 against 1.2e-6
 * in this form; bench/NOTES.md v47).  f_odd - f_even of two fp32 knots is exact where they are within a factor of two
 * of each other (Sterbenz).  Every table lookup sums through these two, in this order (the row and streamed scans
 * give bitwise the same values).
 */
template <typename real, int V> __device__ inline real knotValue(const real (&knot)[6][V], int v, const real* c) {
    return knot[0][v] + (knot[3][v] - knot[0][v]) * c[3] + knot[1][v] * c[1] + knot[2][v] * c[2] + knot[4][v] * c[4] + knot[5][v] * c[5];
}

/** dR/dr of channel v in the difference form of knotValue (c: HermiteBasis::slope, whose slots 0 and 3 cancel). */
template <typename real, int V> __device__ inline real knotSlope(const real (&knot)[6][V], int v, const real* c) {
    return (knot[3][v] - knot[0][v]) * c[3] + knot[1][v] * c[1] + knot[2][v] * c[2] + knot[4][v] * c[4] + knot[5][v] * c[5];
}

/**
 * R (and dR/dr, Deriv) of channels k0 .. k0 + V - 1 of table (ti, tj, l) at an edge: `knots` points at the first knot
 * of the edge's interval in table (ti, tj, 0) (tableKnot; global memory, read-only for the kernel's lifetime);
 * evenKnot, value[6] and slope[6] are the edge's HermiteBasis (slope only when Deriv).  The six values of a channel are
 * read in the basis's parity order and summed by knotValue and knotSlope.  Every row-scan table lookup goes through it.
 */
template <typename real, int V, bool Deriv>
__device__ inline void channelsFromKnots(const real* knots, int l, int k0, const GraphModelParams<real>& model, int evenKnot,
                                         const real value[6], const real* slope, real (&R)[V], real (&dRdr)[V]) {
    const int M = model.numChannels, knotSize = 3 * M;
    const real* p = opaque(knots + l * tableStride(model) + k0);
    const real* even = p + evenKnot * knotSize;
    const real* odd = p + (1 - evenKnot) * knotSize;
    real knot[6][V];
#pragma unroll
    for (int c = 0; c < 3; c++) {
        loadChannels<real, V>(even + c * M, knot[c]);
        loadChannels<real, V>(odd + c * M, knot[c + 3]);
    }
#pragma unroll
    for (int v = 0; v < V; v++) {
        R[v] = knotValue<real, V>(knot, v, value);
        if (Deriv)
            dRdr[v] = knotSlope<real, V>(knot, v, slope);
    }
}

/** The table interval q of distance r (nm): floor((r - r_0) / dr) clamped to [0, K - 1] (docs/model-format.md section 3). */
template <typename real> __device__ inline int knotInterval(real r, const GraphModelParams<real>& model) {
    return min(model.radialIntervals - 1, max(0, (int) floor((r - model.radialR0) * model.invDr)));
}

/**
 * The quintic Hermite interpolant at an edge's position in its table interval (docs/model-format.md section 3), as
 * coefficients of the six table values it reads: R = sum_s knot_s value[s] and dR/dr = sum_s knot_s slope[s], with the
 * knots' f' and f'' (stored per nm and per nm^2) scaled into the coefficients, so that a channel's R is five fma after
 * the knots' difference (knotValue; slots 0 of value and slope are implied by slots 3 there).  The values are read in parity order: slots
 * 0-2 hold (f, f', f'') of the interval's even knot, slots 3-5 of its odd one, so that lanes reading the edges of neighbouring intervals at
 * once read their shared knot in one instruction (bench/knot_sharing.py): the order knotParity(interval) gives.
 */
template <typename real> struct HermiteBasis {
    real value[6], slope[6]; ///< per slot, in parity order
    int interval;
    __device__ HermiteBasis(real r, const GraphModelParams<real>& model) {
        const int q = knotInterval(r, model);
        interval = q;
        const int evenKnot = knotParity(q);
        const real dr = model.radialDr, invDr = model.invDr;
        const real t = (r - (model.radialR0 + q * dr)) * invDr;
        const real t2 = t * t, t3 = t2 * t, t4 = t3 * t, t5 = t4 * t;
        // The coefficients of (f, f', f'') of the interval's first knot and of its second: the basis at t times 1, dr and
        // dr^2 for R, its t-derivative times 1 / dr, 1 and dr for dR/dr (= dR/dt / dr).
        const real d0 = -30 * t2 + 60 * t3 - 30 * t4;
        const real firstValue[3] = {1 - 10 * t3 + 15 * t4 - 6 * t5, (t - 6 * t3 + 8 * t4 - 3 * t5) * dr,
                                    real(0.5) * (t2 - 3 * t3 + 3 * t4 - t5) * dr * dr};
        const real secondValue[3] = {10 * t3 - 15 * t4 + 6 * t5, (-4 * t3 + 7 * t4 - 3 * t5) * dr,
                                     real(0.5) * (t3 - 2 * t4 + t5) * dr * dr};
        const real firstSlope[3] = {d0 * invDr, 1 - 18 * t2 + 32 * t3 - 15 * t4, real(0.5) * (2 * t - 9 * t2 + 12 * t3 - 5 * t4) * dr};
        const real secondSlope[3] = {-d0 * invDr, -12 * t2 + 28 * t3 - 15 * t4, real(0.5) * (3 * t2 - 8 * t3 + 5 * t4) * dr};
        // Slots 0-2: the even knot's, 3-5: the odd knot's (selects with constant indices: no local memory).
#pragma unroll
        for (int c = 0; c < 3; c++) {
            value[c] = evenKnot ? secondValue[c] : firstValue[c];
            value[c + 3] = evenKnot ? firstValue[c] : secondValue[c];
            slope[c] = evenKnot ? secondSlope[c] : firstSlope[c];
            slope[c + 3] = evenKnot ? firstSlope[c] : secondSlope[c];
        }
    }
    /** R and dR/dr of channel k of table (a, b, l). */
    __device__ void evaluate(const real* table, const GraphModelParams<real>& model, int a, int b, int l, int k, real& R,
                             real& dRdr) const {
        real one[1], oneDeriv[1];
        channelsFromKnots<real, 1, true>(tableKnot(table, model, a, b, 0, interval), l, k, model, knotParity(interval), value, slope, one,
                                         oneDeriv);
        R = one[0];
        dRdr = oneDeriv[0];
    }
};

/** Sum over the 32 lanes of a warp in a fixed butterfly order (bitwise reproducible). */
template <typename real> __device__ inline real warpSum(real x) {
    for (int offset = 16; offset > 0; offset >>= 1)
        x += __shfl_xor_sync(0xffffffff, x, offset);
    return x;
}

/** The degree l of harmonic index lm. */
__device__ inline int degreeOf(int lm) {
    return lm == 0 ? 0 : lm < 4 ? 1 : 2;
}

/** Record the first error of an evaluation (later ones are dropped). */
__device__ inline void reportError(GraphStatus* status, int code, int particle0, int particle1, double value) {
    if (atomicCAS(&status->errorCode, (int) GraphErrorNone, code) == (int) GraphErrorNone) {
        status->errorParticle[0] = particle0;
        status->errorParticle[1] = particle1;
        status->errorValue = value;
    }
}

} // namespace GraphPlugin

#endif
