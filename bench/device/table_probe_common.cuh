/**
 * What the edge-scan probes (table_probe.cu, table_l1_probe.cu, overlap_probe.cu) share: the medium grade's shape, the
 * quintic Hermite basis and harmonics as the plugin computed them in session 15, the synthetic rows, a row scan (a warp a
 * row, moments of all degrees) and a kernel timer.
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

constexpr int Warps = 8;

/** R of this lane's two channels at degree l from the knots at `p` (the interval's first knot, degree 0, channel 2 lane). */
__device__ inline float2 radial(const float* p, int l, const float h[6]) {
    p += (size_t) l * KN * 3 * M;
    float2 k[6];
#pragma unroll
    for (int c = 0; c < 6; c++)
        k[c] = __ldg(reinterpret_cast<const float2*>(p + c * M));
    return make_float2(k[0].x * h[0] + k[1].x * h[1] + k[2].x * h[2] + k[5].x * h[3] + k[4].x * h[4] + k[3].x * h[5],
                       k[0].y * h[0] + k[1].y * h[1] + k[2].y * h[2] + k[5].y * h[3] + k[4].y * h[4] + k[3].y * h[5]);
}

/** The table's first knot of interval q, degree 0, for types (ti, tj), at this lane's channels. */
__device__ inline const float* knots(const float* table, int ti, int tj, int q, int lane) {
    return table + ((size_t) ((ti * T + tj) * NL) * KN + q) * 3 * M + 2 * lane;
}

/** Edges [first, last) of row i into acc[lm][2] for every degree. */
__device__ inline void scanAllDegrees(const float4* geo, const int* ntype, const float* table, int ti, int i, int first, int last,
                                      int lane, float (&acc)[H][2]) {
#pragma unroll 2
    for (int e = first; e < last; e++) {
        int q;
        float h[6], Y[H];
        edgeBasis(geo, i, e, q, h, Y);
        const float* p = knots(table, ti, ntype[(size_t) i * E + e], q, lane);
#pragma unroll
        for (int l = 0; l < NL; l++) {
            const float2 R = radial(p, l, h);
#pragma unroll
            for (int lm = l * l; lm < (l + 1) * (l + 1); lm++) {
                acc[lm][0] += R.x * Y[lm];
                acc[lm][1] += R.y * Y[lm];
            }
        }
    }
}

/** A center's moments [H][M] at `out`, this lane's two channels. */
__device__ inline void storeMoments(float* out, int lane, const float (&acc)[H][2]) {
#pragma unroll
    for (int lm = 0; lm < H; lm++)
        *reinterpret_cast<float2*>(out + lm * M + 2 * lane) = make_float2(acc[lm][0], acc[lm][1]);
}

/**
 * A warp per row, Warps a block, moments into A [n][H][M]: row w is particle w (order = nullptr; table_l1_probe.cu's l2)
 * or order[w] (its sorted; overlap_probe.cu's scans, with order a chunk of the type-sorted rows).
 */
__global__ void __launch_bounds__(32 * Warps) scanRows(const float4* __restrict__ geo, const int* __restrict__ ntype,
                                                       const int* __restrict__ types, const int* __restrict__ order,
                                                       const float* __restrict__ table, float* __restrict__ A, int n) {
    const int lane = threadIdx.x & 31, w = blockIdx.x * Warps + (threadIdx.x >> 5);
    if (w >= n)
        return;
    const int i = order ? order[w] : w, ti = types[i];
    float acc[H][2] = {};
    scanAllDegrees(geo, ntype, table, ti, i, 0, E, lane, acc);
    storeMoments(A + (size_t) i * H * M, lane, acc);
}

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
