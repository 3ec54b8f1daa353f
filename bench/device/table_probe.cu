/**
 * Table-stationary edge scan probe (bench/NOTES.md v16): can the moments
 * scan of the medium grade at 100,800 particles read its radial table from
 * shared memory instead of L2, and how fast is it then?
 *
 * Synthetic data of the medium grade's shape (T = 4 types, L = 2: 3 l and 9
 * harmonics, M = 64 channels, 400 intervals: 401 knots of 3 values, float),
 * 100,800 centers with 85 neighbours each, every row sorted by distance as
 * the canonical graph's are.  Per edge: a float4 (r nm, unit vector) and the
 * neighbour's type.  Both kernels compute, for every center i,
 *
 *     A[i][lm][k] = sum over the row of R_l,k^(ti,tj)(r) Y_lm(u)
 *
 * with R from the quintic Hermite table (two knots, value and two
 * derivatives, as the plugin computed it in session 15), in a different
 * order of summation:
 *
 *   l2          a warp per row, 2 channels a lane: the table rows (4,608
 *               bytes an edge) come from L2, as in today's momentsKernel;
 *   stationary  a block per (center type, 4 channels, half of that type's
 *               centers): 128 blocks, each with the 4 channels of all four
 *               neighbour types' tables in shared memory (230,976 bytes), a
 *               warp per row, LPE lanes per edge (1 or 2: 4 / LPE channels a
 *               lane), the lanes' sums added with shuffles at the row's end.
 *
 * Prints each kernel's mean time over 10 runs (after a warm-up) and the
 * largest difference between the two results relative to the largest |A|
 * (summation order only: about 1e-6 expected).
 *
 *   nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -o table_probe table_probe.cu
 */

#include "table_probe_common.cuh"

#include <vector>

namespace {

using namespace table_probe;

constexpr int SliceChannels = 4, Slices = M / SliceChannels;
/** One center type's 4-channel slice of the four neighbour types' tables: [tj][l][knot][3][4] floats. */
constexpr int SliceFloats = T * NL * KN * 3 * SliceChannels;

/** Knot values [p0 v0 a0 | p1 v1 a1] (stored per knot as value, first, second derivative) combined with the weights. */
__device__ inline float combine(float p0, float v0, float a0, float p1, float v1, float a1, const float h[6]) {
    return p0 * h[0] + v0 * h[1] + a0 * h[2] + a1 * h[3] + v1 * h[4] + p1 * h[5];
}

/** Edge e of center i's row: returns the neighbour's type; q and h the knot interval and weights, Y the harmonics. */
__device__ inline int edgeTerms(const float4* geo, const int* ntype, int i, int e, int& q, float h[6], float Y[H]) {
    edgeBasis(geo, i, e, q, h, Y);
    return ntype[(size_t) i * E + e];
}

/** acc[lm][v] += R[v] Y[lm] for the harmonics of degree l. */
template <int V> __device__ inline void addTerms(float (&acc)[H][V], const float (&R)[V], const float Y[H], int l) {
#pragma unroll
    for (int lm = l * l; lm < (l + 1) * (l + 1); lm++)
#pragma unroll
        for (int v = 0; v < V; v++)
            acc[lm][v] += R[v] * Y[lm];
}

/** Today's way: a warp per row, lane = channels 2 lane, 2 lane + 1; the table [T][T][NL][KN][3][M] read from global memory (L2). */
__global__ void __launch_bounds__(256) scanL2(const float4* __restrict__ geo, const int* __restrict__ ntype, const int* __restrict__ types,
                                              const float* __restrict__ table, float* __restrict__ A, int n) {
    const int lane = threadIdx.x & 31, i = blockIdx.x * 8 + (threadIdx.x >> 5);
    if (i >= n)
        return;
    const int ti = types[i];
    float acc[H][2] = {};
#pragma unroll 2
    for (int e = 0; e < E; e++) {
        int q;
        float h[6], Y[H];
        const int tj = edgeTerms(geo, ntype, i, e, q, h, Y);
        const float* base = table + ((size_t) ((ti * T + tj) * NL) * KN + q) * 3 * M + 2 * lane;
#pragma unroll
        for (int l = 0; l < NL; l++) {
            const float* p = base + (size_t) l * KN * 3 * M;
            float2 k[6];
#pragma unroll
            for (int c = 0; c < 6; c++)
                k[c] = __ldg(reinterpret_cast<const float2*>(p + c * M));
            const float R[2] = {combine(k[0].x, k[1].x, k[2].x, k[3].x, k[4].x, k[5].x, h),
                                combine(k[0].y, k[1].y, k[2].y, k[3].y, k[4].y, k[5].y, h)};
            addTerms(acc, R, Y, l);
        }
    }
#pragma unroll
    for (int lm = 0; lm < H; lm++)
        *reinterpret_cast<float2*>(A + ((size_t) i * H + lm) * M + 2 * lane) = make_float2(acc[lm][0], acc[lm][1]);
}

/**
 * The table-stationary way.  Block b: center type b / 32, slice (b / 2) % 16 (channels 4 s .. 4 s + 3), half b % 2 of
 * that type's centers (centersOfType[ti] from typeStart[ti], every other one).  LPE lanes per edge, CPL = 4 / LPE
 * channels a lane; 32 / LPE edges of the row at a time, in row order (so the lanes' knots rise along the warp).
 */
template <int LPE, int WPB>
__global__ void __launch_bounds__(32 * WPB)
    scanStationary(const float4* __restrict__ geo, const int* __restrict__ ntype, const int* __restrict__ centersOfType,
                   const int* __restrict__ typeStart, const float* __restrict__ table, float* __restrict__ A) {
    constexpr int CPL = SliceChannels / LPE, Slots = 32 / LPE;
    extern __shared__ __align__(16) float slice[]; // [tj][l][knot][3][4]
    const int ti = blockIdx.x / (2 * Slices), s = (blockIdx.x / 2) % Slices, half = blockIdx.x % 2;
    for (int x = threadIdx.x; x < SliceFloats; x += blockDim.x) {
        const int c = x % SliceChannels, rest = x / SliceChannels; // rest = ((tj NL + l) KN + knot) 3 + v
        const int v = rest % 3, knot = (rest / 3) % KN, l = (rest / (3 * KN)) % NL, tj = rest / (3 * KN * NL);
        slice[x] = table[((((size_t) (ti * T + tj) * NL + l) * KN + knot) * 3 + v) * M + s * SliceChannels + c];
    }
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, slot = lane / LPE, part = lane % LPE;
    const int first = typeStart[ti], count = typeStart[ti + 1] - first;
    for (int w = 2 * warp + half; w < count; w += 2 * WPB) {
        const int i = centersOfType[first + w];
        float acc[H][CPL] = {};
        for (int e = slot; e < E; e += Slots) { // lanes past the row's last edge idle; the warp meets again at the shuffles
            int q;
            float h[6], Y[H];
            const int tj = edgeTerms(geo, ntype, i, e, q, h, Y);
            const float* base = slice + ((tj * NL) * KN + q) * 3 * SliceChannels + part * CPL;
#pragma unroll
            for (int l = 0; l < NL; l++) {
                const float* p = base + l * KN * 3 * SliceChannels;
                float k[6][CPL];
#pragma unroll
                for (int c = 0; c < 6; c++) {
                    if constexpr (CPL == 4) {
                        const float4 x = *reinterpret_cast<const float4*>(p + c * SliceChannels);
                        k[c][0] = x.x, k[c][1] = x.y, k[c][2] = x.z, k[c][3] = x.w;
                    }
                    else {
                        const float2 x = *reinterpret_cast<const float2*>(p + c * SliceChannels);
                        k[c][0] = x.x, k[c][1] = x.y;
                    }
                }
                float R[CPL];
#pragma unroll
                for (int v = 0; v < CPL; v++)
                    R[v] = combine(k[0][v], k[1][v], k[2][v], k[3][v], k[4][v], k[5][v], h);
                addTerms(acc, R, Y, l);
            }
        }
#pragma unroll
        for (int offset = LPE; offset < 32; offset *= 2)
#pragma unroll
            for (int lm = 0; lm < H; lm++)
#pragma unroll
                for (int v = 0; v < CPL; v++)
                    acc[lm][v] += __shfl_xor_sync(0xffffffff, acc[lm][v], offset);
        if (slot == 0)
#pragma unroll
            for (int lm = 0; lm < H; lm++)
#pragma unroll
                for (int v = 0; v < CPL; v++)
                    A[((size_t) i * H + lm) * M + s * SliceChannels + part * CPL + v] = acc[lm][v];
    }
}

} // namespace

int main(int argc, char** argv) {
    const int n = argc > 1 ? std::atoi(argv[1]) : 100800;
    const Rows rows(n);
    const std::vector<int>&types = rows.types, &ntype = rows.ntype;
    const std::vector<float4>& geo = rows.geo;
    const std::vector<float>& table = rows.table;
    std::vector<int> typeStart(T + 1, 0), centersOfType;
    for (int t = 0; t < T; t++) {
        typeStart[t] = (int) centersOfType.size();
        for (int i = 0; i < n; i++)
            if (types[i] == t)
                centersOfType.push_back(i);
    }
    typeStart[T] = n;

    float4* dGeo;
    int *dNtype, *dTypes, *dCenters, *dTypeStart;
    float *dTable, *dA1, *dA2;
    CHECK(cudaMalloc(&dGeo, geo.size() * sizeof(float4)));
    CHECK(cudaMalloc(&dNtype, ntype.size() * sizeof(int)));
    CHECK(cudaMalloc(&dTypes, n * sizeof(int)));
    CHECK(cudaMalloc(&dCenters, n * sizeof(int)));
    CHECK(cudaMalloc(&dTypeStart, (T + 1) * sizeof(int)));
    CHECK(cudaMalloc(&dTable, table.size() * sizeof(float)));
    CHECK(cudaMalloc(&dA1, (size_t) n * H * M * sizeof(float)));
    CHECK(cudaMalloc(&dA2, (size_t) n * H * M * sizeof(float)));
    CHECK(cudaMemcpy(dGeo, geo.data(), geo.size() * sizeof(float4), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dNtype, ntype.data(), ntype.size() * sizeof(int), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dTypes, types.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dCenters, centersOfType.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dTypeStart, typeStart.data(), (T + 1) * sizeof(int), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dTable, table.data(), table.size() * sizeof(float), cudaMemcpyHostToDevice));

    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    const size_t sliceBytes = SliceFloats * sizeof(float);
    std::printf("%s, %d SMs, opt-in shared memory %zu bytes; slice %zu bytes; n = %d, %lld edges\n", prop.name, prop.multiProcessorCount,
                (size_t) prop.sharedMemPerBlockOptin, sliceBytes, n, (long long) n * E);
    const double tableBytes = (double) n * E * NL * 6 * M * sizeof(float);

    const float l2 = timeIt([&] { scanL2<<<(n + 7) / 8, 256>>>(dGeo, dNtype, dTypes, dTable, dA1, n); });
    std::printf("l2                    %8.3f ms  (table rows %.2f GB: %.2f TB/s)\n", l2, tableBytes / 1e9, tableBytes / l2 / 1e9);
    std::vector<float> a1((size_t) n * H * M), a2(a1.size());
    CHECK(cudaMemcpy(a1.data(), dA1, a1.size() * sizeof(float), cudaMemcpyDeviceToHost));
    float largest = 0;
    for (float x : a1)
        largest = std::max(largest, std::fabs(x));
    // The l2 kernel against the same sums in double on the host, for the first 64 centers.
    double hostWorst = 0;
    for (int i = 0; i < std::min(n, 64); i++) {
        double acc[H][M] = {};
        for (int e = 0; e < E; e++) {
            const float4 g = geo[(size_t) i * E + e];
            const int tj = ntype[(size_t) i * E + e];
            const double x = (g.x - R0) / DR;
            const int q = std::min(KI - 1, std::max(0, (int) std::floor(x)));
            const double t = x - q, t2 = t * t, t3 = t2 * t, t4 = t3 * t, t5 = t4 * t, dr = DR;
            const double h[6] = {
                1 - 10 * t3 + 15 * t4 - 6 * t5,     (t - 6 * t3 + 8 * t4 - 3 * t5) * dr, 0.5 * (t2 - 3 * t3 + 3 * t4 - t5) * dr * dr,
                0.5 * (t3 - 2 * t4 + t5) * dr * dr, (-4 * t3 + 7 * t4 - 3 * t5) * dr,    10 * t3 - 15 * t4 + 6 * t5};
            const double Y[H] = {1,
                                 g.z,
                                 g.w,
                                 g.y,
                                 (double) g.y * g.z,
                                 (double) g.z * g.w,
                                 3.0 * g.w * g.w - 1,
                                 (double) g.y * g.w,
                                 (double) g.y * g.y - (double) g.z * g.z};
            for (int l = 0; l < NL; l++)
                for (int k = 0; k < M; k++) {
                    const float* p = &table[((((size_t) types[i] * T + tj) * NL + l) * KN + q) * 3 * M + k];
                    const double R = p[0] * h[0] + p[M] * h[1] + p[2 * M] * h[2] + p[5 * M] * h[3] + p[4 * M] * h[4] + p[3 * M] * h[5];
                    for (int lm = l * l; lm < (l + 1) * (l + 1); lm++)
                        acc[lm][k] += R * Y[lm];
                }
        }
        for (int lm = 0; lm < H; lm++)
            for (int k = 0; k < M; k++)
                hostWorst = std::max(hostWorst, std::fabs(acc[lm][k] - a1[((size_t) i * H + lm) * M + k]));
    }
    std::printf("l2 against double on the host (64 centers): max |difference| / max |A| = %.2e\n", hostWorst / largest);
    bool ok = hostWorst / largest < 1e-4;

    auto stationary = [&](auto kernel, const char* name, int threads) {
        CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int) sliceBytes));
        CHECK(cudaMemset(dA2, 0, a2.size() * sizeof(float)));
        const float ms = timeIt([&] { kernel<<<T * Slices * 2, threads, sliceBytes>>>(dGeo, dNtype, dCenters, dTypeStart, dTable, dA2); });
        CHECK(cudaMemcpy(a2.data(), dA2, a2.size() * sizeof(float), cudaMemcpyDeviceToHost));
        float worst = 0;
        for (size_t x = 0; x < a1.size(); x++)
            worst = std::max(worst, std::fabs(a1[x] - a2[x]));
        std::printf("%-21s %8.3f ms  (%.2fx l2; max |difference| / max |A| = %.2e)\n", name, ms, l2 / ms, worst / largest);
        return worst / largest < 1e-4f;
    };
    ok &= stationary(scanStationary<1, 16>, "stationary 1 lane, 16w", 512);
    ok &= stationary(scanStationary<2, 16>, "stationary 2 lanes, 16w", 512);
    ok &= stationary(scanStationary<1, 32>, "stationary 1 lane, 32w", 1024);
    ok &= stationary(scanStationary<2, 32>, "stationary 2 lanes, 32w", 1024);
    std::printf(ok ? "results agree\n" : "RESULTS DIFFER\n");
    return ok ? 0 : 1;
}
