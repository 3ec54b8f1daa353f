/**
 * Can the L1 cache serve the edge scans' table reads if every multiprocessor
 * works on one slice of the radial table at a time?  (bench/NOTES.md v25.)
 *
 * The moments scan of the medium grade at 100,800 particles reads, per edge,
 * two knots of the quintic Hermite table for each of 3 degrees and 64
 * channels (4,608 bytes) from [T][T][NL][KN][3][M] (14.8 MB in all).  The
 * plugin's scans visit rows in particle order, so every multiprocessor's L1
 * sees the whole table at once and hits 1.75% of the time (v8); the scans run
 * at the L2's throughput.  If instead all multiprocessors work on the same
 * (center type, neighbour type) pair at a time, the slice in use is 924 KB;
 * with the degree too, 308 KB, and an LRU simulation of a 124-200 KB L1 (the
 * radial distribution weights the outer knots) gives 23-36% and 65-93% hits.
 * This probe measures it on synthetic rows of that shape (table_probe.cu's),
 * a warp per work item, 8 warps a block; each kernel computes the same
 * moments, summed differently:
 *
 *   l2       a warp per row, rows in particle order (random types): the
 *            plugin's order, table_probe.cu's l2 kernel;
 *   sorted   the same, rows in center-type order;
 *   pair     a warp per (row, neighbour type): each row sorted by (neighbour
 *            type, r), the work items in (center type, neighbour type, row)
 *            order; each item writes its partial moments to its own
 *            [T][n][H][M] plane (4 times the output bytes);
 *   pair-l   a warp per (row, neighbour type, degree), items in (center type,
 *            neighbour type, degree, row) order; each item evaluates its edges'
 *            basis and harmonics again (the fixed work of an edge, 3 times).
 *
 * Prints each kernel's mean time over 10 runs and its largest difference from
 * l2 (the partial planes summed on the host) relative to max |A|.  Nsight
 * Compute's L1 hit rate and L2 bytes per kernel come from table-l1-probe.sh.
 *
 *   nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -o table_l1_probe table_l1_probe.cu
 *   table_l1_probe [n [runs [shared bytes a block]]]
 */

#include "table_probe_common.cuh"

#include <vector>

namespace {

using namespace table_probe;

/**
 * pair: item w = (row i, neighbour type tj) (items[w] = i * T + tj); the row's edges of type tj are
 * [segment[i * (T + 1) + tj], segment[i * (T + 1) + tj + 1]) of rows sorted by (type, r).  Partial moments into plane tj
 * of Ap [T][n][H][M].
 */
__global__ void __launch_bounds__(32 * Warps) scanPairs(const float4* __restrict__ geo, const int* __restrict__ ntype,
                                                        const int* __restrict__ types, const int* __restrict__ items,
                                                        const int* __restrict__ segment, const float* __restrict__ table,
                                                        float* __restrict__ Ap, int n) {
    const int lane = threadIdx.x & 31, w = blockIdx.x * Warps + (threadIdx.x >> 5);
    if (w >= n * T)
        return;
    const int i = items[w] / T, tj = items[w] % T, ti = types[i];
    float acc[H][2] = {};
    scanAllDegrees(geo, ntype, table, ti, i, segment[i * (T + 1) + tj], segment[i * (T + 1) + tj + 1], lane, acc);
    storeMoments(Ap + ((size_t) tj * n + i) * H * M, lane, acc);
}

/** pair-l: item w = (row i, neighbour type tj, degree l) (items[w] = (i * T + tj) * NL + l), moments of degree l only. */
__global__ void __launch_bounds__(32 * Warps) scanPairDegrees(const float4* __restrict__ geo, const int* __restrict__ ntype,
                                                              const int* __restrict__ types, const int* __restrict__ items,
                                                              const int* __restrict__ segment, const float* __restrict__ table,
                                                              float* __restrict__ Ap, int n) {
    const int lane = threadIdx.x & 31, w = blockIdx.x * Warps + (threadIdx.x >> 5);
    if (w >= n * T * NL)
        return;
    const int l = items[w] % NL, tj = (items[w] / NL) % T, i = items[w] / (NL * T), ti = types[i];
    const int first = segment[i * (T + 1) + tj], last = segment[i * (T + 1) + tj + 1];
    float acc[5][2] = {};
#pragma unroll 2
    for (int e = first; e < last; e++) {
        int q;
        float h[6], Y[H];
        edgeBasis(geo, i, e, q, h, Y);
        const float2 R = radial(knots(table, ti, tj, q, lane), l, h);
#pragma unroll
        for (int m = 0; m < 5; m++)
            if (m < 2 * l + 1) { // Y[l * l + m] with constant indices (a computed one puts Y in local memory)
                const float y = l == 0 ? Y[m] : l == 1 ? Y[1 + m] : Y[4 + m];
                acc[m][0] += R.x * y;
                acc[m][1] += R.y * y;
            }
    }
#pragma unroll
    for (int m = 0; m < 5; m++)
        if (m < 2 * l + 1)
            *reinterpret_cast<float2*>(Ap + (((size_t) tj * n + i) * H + l * l + m) * M + 2 * lane) = make_float2(acc[m][0], acc[m][1]);
}

} // namespace

int main(int argc, char** argv) {
    const int n = argc > 1 ? std::atoi(argv[1]) : 100800;
    const int runs = argc > 2 ? std::atoi(argv[2]) : 10; // 1 under Nsight Compute
    // Dynamic shared memory a block asks for and leaves unused: it takes that much from each multiprocessor's L1 (the
    // plugin's moments kernel holds about 115 KB a multiprocessor).
    const int smem = argc > 3 ? std::atoi(argv[3]) : 0;
    // table_probe.cu's rows and table, and the same rows sorted by (neighbour type, r) with each type's segment.
    const Rows rows(n);
    const std::vector<int>&types = rows.types, &ntype = rows.ntype;
    const std::vector<float4>& geo = rows.geo;
    const std::vector<float>& table = rows.table;
    std::vector<float4> geoByType(geo.size());
    std::vector<int> ntypeByType(ntype.size()), segment((size_t) n * (T + 1));
    for (int i = 0; i < n; i++) {
        std::vector<std::pair<float4, int>> row(E);
        for (int e = 0; e < E; e++)
            row[e] = {geo[(size_t) i * E + e], ntype[(size_t) i * E + e]};
        std::stable_sort(row.begin(), row.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
        for (int e = 0; e < E; e++) {
            geoByType[(size_t) i * E + e] = row[e].first;
            ntypeByType[(size_t) i * E + e] = row[e].second;
        }
        for (int t = 0, e = 0; t <= T; t++) {
            while (e < E && row[e].second < t)
                e++;
            segment[(size_t) i * (T + 1) + t] = e;
        }
    }
    std::vector<int> order, pairItems, degreeItems;
    for (int ti = 0; ti < T; ti++) {
        std::vector<int> rows;
        for (int i = 0; i < n; i++)
            if (types[i] == ti)
                rows.push_back(i);
        order.insert(order.end(), rows.begin(), rows.end());
        for (int tj = 0; tj < T; tj++) {
            for (int i : rows)
                pairItems.push_back(i * T + tj);
            for (int l = 0; l < NL; l++)
                for (int i : rows)
                    degreeItems.push_back((i * T + tj) * NL + l);
        }
    }

    const float4 *dGeo = upload(geo), *dGeoByType = upload(geoByType);
    const int *dNtype = upload(ntype), *dNtypeByType = upload(ntypeByType), *dSegment = upload(segment), *dTypes = upload(types);
    const int *dOrder = upload(order), *dPairs = upload(pairItems), *dDegrees = upload(degreeItems);
    const float* dTable = upload(table);
    float* dA = deviceZeros((size_t) n * H * M);
    float* dAp = deviceZeros((size_t) T * n * H * M);

    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("%s, %d SMs, L2 %d bytes; n = %d, %lld edges, table %zu bytes; %d bytes of shared memory a block\n", prop.name,
                prop.multiProcessorCount, prop.l2CacheSize, n, (long long) n * E, table.size() * sizeof(float), smem);
    const double tableBytes = (double) n * E * NL * 6 * M * sizeof(float);
    const int threads = 32 * Warps;

    const float l2 = timeIt([&] { scanRows<<<(n + Warps - 1) / Warps, threads, smem>>>(dGeo, dNtype, dTypes, nullptr, dTable, dA, n); }, runs);
    std::vector<float> reference((size_t) n * H * M), result(reference.size()), planes((size_t) T * n * H * M);
    CHECK(cudaMemcpy(reference.data(), dA, reference.size() * sizeof(float), cudaMemcpyDeviceToHost));
    float largest = 0;
    for (float x : reference)
        largest = std::max(largest, std::fabs(x));
    std::printf("%-8s %8.3f ms  (table rows %.2f GB: %.2f TB/s)\n", "l2", l2, tableBytes / 1e9, tableBytes / l2 / 1e9);

    bool ok = true;
    auto report = [&](const char* name, float ms, bool partial) {
        if (partial) {
            CHECK(cudaMemcpy(planes.data(), dAp, planes.size() * sizeof(float), cudaMemcpyDeviceToHost));
            for (size_t x = 0; x < result.size(); x++) {
                float sum = 0;
                for (int t = 0; t < T; t++)
                    sum += planes[(size_t) t * result.size() + x];
                result[x] = sum;
            }
        }
        else
            CHECK(cudaMemcpy(result.data(), dA, result.size() * sizeof(float), cudaMemcpyDeviceToHost));
        float worst = 0;
        for (size_t x = 0; x < result.size(); x++)
            worst = std::max(worst, std::fabs(result[x] - reference[x]));
        std::printf("%-8s %8.3f ms  (%.2fx l2; max |difference| / max |A| = %.2e)\n", name, ms, l2 / ms, worst / largest);
        ok &= worst / largest < 1e-4f;
    };
    CHECK(cudaMemset(dA, 0, (size_t) n * H * M * sizeof(float)));
    report("sorted", timeIt([&] { scanRows<<<(n + Warps - 1) / Warps, threads, smem>>>(dGeo, dNtype, dTypes, dOrder, dTable, dA, n); }, runs),
           false);
    report("pair",
           timeIt([&] { scanPairs<<<(n * T + Warps - 1) / Warps, threads, smem>>>(dGeoByType, dNtypeByType, dTypes, dPairs, dSegment, dTable, dAp, n); },
                  runs),
           true);
    CHECK(cudaMemset(dAp, 0, (size_t) T * n * H * M * sizeof(float)));
    report("pair-l",
           timeIt(
               [&] {
                   scanPairDegrees<<<(n * T * NL + Warps - 1) / Warps, threads, smem>>>(dGeoByType, dNtypeByType, dTypes, dDegrees, dSegment,
                                                                                 dTable, dAp, n);
               },
               runs),
           true);
    std::printf(ok ? "results agree\n" : "RESULTS DIFFER\n");
    return ok ? 0 : 1;
}
