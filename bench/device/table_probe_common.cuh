/**
 * What the two edge-scan probes (table_probe.cu, table_l1_probe.cu) share: the medium grade's shape, the quintic
 * Hermite basis and harmonics as the plugin computed them in session 15, the synthetic rows, and a kernel timer.
 */

#ifndef TABLE_PROBE_COMMON_CUH
#define TABLE_PROBE_COMMON_CUH

#include "probe_common.cuh"

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>
#include <vector>

namespace table_probe {

/** Types, degrees (L + 1), harmonics, channels, intervals and knots of the table, neighbours a row. */
constexpr int T = 4, NL = 3, H = 9, M = 64, KI = 400, KN = KI + 1, E = 85;
constexpr float R0 = 0.05f, RC = 0.6f, DR = (RC - R0) / KI;

/** The knot interval q of r and the quintic Hermite weights of p0, v0, a0, a1, v1, p1 (derivatives scaled by DR). */
__device__ inline void basis(float r, int& q, float h[6]) {
    const float x = (r - R0) * (1.0f / DR);
    q = min(KI - 1, max(0, (int) floorf(x)));
    const float t = x - q, t2 = t * t, t3 = t2 * t, t4 = t3 * t, t5 = t4 * t;
    h[0] = 1 - 10 * t3 + 15 * t4 - 6 * t5;
    h[1] = (t - 6 * t3 + 8 * t4 - 3 * t5) * DR;
    h[2] = 0.5f * (t2 - 3 * t3 + 3 * t4 - t5) * DR * DR;
    h[3] = 0.5f * (t3 - 2 * t4 + t5) * DR * DR;
    h[4] = (-4 * t3 + 7 * t4 - 3 * t5) * DR;
    h[5] = 10 * t3 - 15 * t4 + 6 * t5;
}

/** Real harmonics up to l = 2 (up to constant factors, which do not change the work). */
__device__ inline void harmonics(float x, float y, float z, float Y[H]) {
    Y[0] = 1;
    Y[1] = y, Y[2] = z, Y[3] = x;
    Y[4] = x * y, Y[5] = y * z, Y[6] = 3 * z * z - 1, Y[7] = x * z, Y[8] = x * x - y * y;
}

/** Edge e of center i's row (geo as Rows holds it): its knot interval q and Hermite weights h, and its harmonics Y. */
__device__ inline void edgeBasis(const float4* geo, int i, int e, int& q, float h[6], float Y[H]) {
    const float4 g = geo[(size_t) i * E + e];
    basis(g.x, q, h);
    harmonics(g.y, g.z, g.w, Y);
}

/**
 * n centers of random types, each with E neighbours: r uniform in the shell's volume, directions uniform, sorted by r
 * (geo[i * E + e] = (r, u), ntype the neighbour's type); then the table [T][T][NL][KN][3][M] of uniform values in
 * [-1, 1).  Both from one generator (seed 7), so both probes see the same data.
 */
struct Rows {
    std::vector<int> types, ntype;
    std::vector<float4> geo;
    std::vector<float> table;
    explicit Rows(int n) : types(n), ntype((size_t) n * E), geo((size_t) n * E), table((size_t) T * T * NL * KN * 3 * M) {
        std::mt19937 rng(7);
        std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
        for (int& t : types)
            t = (int) (rng() % T);
        const float lo = (R0 + 0.01f) * (R0 + 0.01f) * (R0 + 0.01f), hi = RC * RC * RC;
        for (int i = 0; i < n; i++) {
            std::vector<std::pair<float4, int>> row(E);
            for (auto& [g, tj] : row) {
                const float r = std::cbrt(lo + (hi - lo) * uniform(rng));
                const float z = 2 * uniform(rng) - 1, phi = 6.2831853f * uniform(rng), xy = std::sqrt(std::max(0.0f, 1 - z * z));
                g = make_float4(r, xy * std::cos(phi), xy * std::sin(phi), z);
                tj = types[rng() % n];
            }
            std::sort(row.begin(), row.end(), [](const auto& a, const auto& b) { return a.first.x < b.first.x; });
            for (int e = 0; e < E; e++) {
                geo[(size_t) i * E + e] = row[e].first;
                ntype[(size_t) i * E + e] = row[e].second;
            }
        }
        for (float& x : table)
            x = 2 * uniform(rng) - 1;
    }
};

/** Mean ms of `runs` launches of f (after one warm-up). */
template <typename F> float timeIt(F f, int runs = 10) {
    f();
    CHECK(cudaDeviceSynchronize());
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    CHECK(cudaEventRecord(start));
    for (int r = 0; r < runs; r++)
        f();
    CHECK(cudaEventRecord(stop));
    CHECK(cudaEventSynchronize(stop));
    CHECK(cudaGetLastError());
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    return ms / runs;
}

} // namespace table_probe

#endif
