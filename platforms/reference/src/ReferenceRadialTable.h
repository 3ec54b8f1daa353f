#ifndef OPENMM_GRAPH_REFERENCE_RADIAL_TABLE_H_
#define OPENMM_GRAPH_REFERENCE_RADIAL_TABLE_H_

#include "internal/GraphModel.h"
#include "openmm/Vec3.h"
#include <algorithm>
#include <cmath>

namespace GraphPlugin {

/**
 * The quintic Hermite interpolant of docs/model-format.md section 3 for all
 * M channels of one table (a, b, l) at distance r (nm).  Host, double.
 *
 * @param model   the model (tables in 1/nm units after conversion)
 * @param table   radialTable or interactionTable of the model
 * @param value   [M] out: R(r)
 * @param deriv   [M] out: dR/dr in 1/nm
 */
inline void evaluateRadial(const GraphModel& model, const std::vector<double>& table, int a, int b, int l, double r, double* value,
                           double* deriv) {
    const int M = model.numChannels, K = model.radialIntervals;
    const double dr = model.radialDr;
    int q = (int) std::floor((r - model.radialR0) / dr);
    q = std::min(K - 1, std::max(0, q));
    const double t = (r - (model.radialR0 + q * dr)) / dr;
    const double t2 = t * t, t3 = t2 * t, t4 = t3 * t, t5 = t4 * t;
    const double h0 = 1 - 10 * t3 + 15 * t4 - 6 * t5, h5 = 10 * t3 - 15 * t4 + 6 * t5;
    const double h1 = t - 6 * t3 + 8 * t4 - 3 * t5, h4 = -4 * t3 + 7 * t4 - 3 * t5;
    const double h2 = 0.5 * (t2 - 3 * t3 + 3 * t4 - t5), h3 = 0.5 * (t3 - 2 * t4 + t5);
    const double d0 = -30 * t2 + 60 * t3 - 30 * t4, d5 = -d0;
    const double d1 = 1 - 18 * t2 + 32 * t3 - 15 * t4, d4 = -12 * t2 + 28 * t3 - 15 * t4;
    const double d2 = 0.5 * (2 * t - 9 * t2 + 12 * t3 - 5 * t4), d3 = 0.5 * (3 * t2 - 8 * t3 + 5 * t4);
    const double* knot0 = &table[model.tableOffset(a, b, l, q)];
    const double* knot1 = knot0 + 3 * M;
    for (int k = 0; k < M; k++) {
        double p0 = knot0[k], v0 = knot0[M + k] * dr, a0 = knot0[2 * M + k] * dr * dr;
        double p1 = knot1[k], v1 = knot1[M + k] * dr, a1 = knot1[2 * M + k] * dr * dr;
        value[k] = p0 * h0 + v0 * h1 + a0 * h2 + a1 * h3 + v1 * h4 + p1 * h5;
        deriv[k] = (p0 * d0 + v0 * d1 + a0 * d2 + a1 * d3 + v1 * d4 + p1 * d5) / dr;
    }
}

/**
 * Racah-normalised real spherical harmonics of a unit vector u up to degree
 * lMax (section 4), index lm = l*l + m, and their gradients with respect to u
 * taken as polynomials (grad[lm][3]).
 */
inline void evaluateHarmonics(int lMax, const double u[3], double* Y, double (*grad)[3]) {
    const double s3 = std::sqrt(3.0);
    const double x = u[0], y = u[1], z = u[2];
    Y[0] = 1;
    grad[0][0] = grad[0][1] = grad[0][2] = 0;
    if (lMax >= 1) {
        for (int m = 0; m < 3; m++) {
            Y[1 + m] = u[m];
            for (int c = 0; c < 3; c++)
                grad[1 + m][c] = (c == m ? 1.0 : 0.0);
        }
    }
    if (lMax >= 2) {
        Y[4] = s3 * x * y;
        Y[5] = s3 * y * z;
        Y[6] = s3 * z * x;
        Y[7] = 0.5 * s3 * (x * x - y * y);
        Y[8] = 0.5 * (3 * z * z - 1);
        const double g[5][3] = {{s3 * y, s3 * x, 0}, {0, s3 * z, s3 * y}, {s3 * z, 0, s3 * x}, {s3 * x, -s3 * y, 0}, {0, 0, 3 * z}};
        for (int m = 0; m < 5; m++)
            for (int c = 0; c < 3; c++)
                grad[4 + m][c] = g[m][c];
    }
}

/**
 * The geometry of one edge: r (nm), u = d / r, the harmonics Y_lm(u) and their
 * polynomial gradients dY_lm/du.
 */
struct EdgeGeometry {
    double r;
    double u[3];
    double Y[9];
    double grad[9][3];
    EdgeGeometry(const OpenMM::Vec3& d, int lMax) {
        r = std::sqrt(d.dot(d));
        for (int c = 0; c < 3; c++)
            u[c] = d[c] / r;
        evaluateHarmonics(lMax, u, Y, grad);
    }
};

/** The degree l of harmonic index lm. */
inline int degreeOf(int lm) {
    return lm == 0 ? 0 : lm < 4 ? 1 : 2;
}

} // namespace GraphPlugin

#endif
