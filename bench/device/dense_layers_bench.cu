/**
 * The plugin's own dense-layer kernels (platforms/cuda/src/DenseLayerKernels.cu,
 * through launchDenseForward / launchDenseBackward) at the medium grade's
 * shape at 100,800 rows: four type groups of 25,200 rows, descriptor 1536 ->
 * 240 -> 240 -> 240, tanh, the last two layers residual; the 128 x 128 tiles
 * with k-slices through registers (streamedWide 0) and streamed by
 * asynchronous copies (1, where configureDenseLayers allows it; the forward
 * copies W^T from the transposed weights, DenseBatch::weightT).  Prints each
 * product's mean time (CUDA events, 10 launches after 3) and checks that both
 * ways give bitwise the same results.  bench/device/dense_probe.cu times
 * stripped copies of the same schemes; this one times what the plugin runs.
 *
 *   nvcc -O3 -std=c++17 --fmad=true -gencode arch=compute_90,code=sm_90 -Iplatforms/cuda/src \
 *       -o dense_layers_bench bench/device/dense_layers_bench.cu platforms/cuda/src/DenseLayerKernels.cu
 */

#include "GraphKernelLaunch.h"
#include "probe_common.cuh"

#include <cstring>
#include <random>
#include <vector>

using namespace GraphPlugin;

int main(int argc, char** argv) {
    // --once: each product launched once, no warm-up (for Nsight Compute: the register scheme's products are launches 0-11 in
    // the order fwd0 bwd0 fwd1 bwd1 fwd2 bwd2 and then one evaluation; the streamed scheme's 12-23).
    const bool once = argc > 1 && std::strcmp(argv[1], "--once") == 0;
    const int warmUps = once ? 0 : 3, timed = once ? 1 : 10;
    // -DDENSE_BENCH_GROUP_ROWS=N: N rows a group instead of 25,200 (medium 10,296: 2,574); -DDENSE_BENCH_TILE_ROWS=T: tiles of
    // T rows whatever chooseDenseTileRows would take (to compare launch choices at one shape; T = 64 takes the streamed
    // 64 x 128 tiles in the streamed scheme where configureDenseLayers gives 2, else the chooser's 128 x 128 tiles stay, as
    // in the pipeline, or become 64 x 128 where denseStreamedHalfTiles says so).
    // -DDENSE_BENCH_INPUTS=D -DDENSE_BENCH_WIDTH=H: another network (the large grade: 6144 -> 256 -> 256 -> 256).
    // -DDENSE_BENCH_GROUPS=G: G type groups instead of 4 (the small grade: 2 of 5,148 rows, 256 -> 128 -> 128 -> 128).
#ifndef DENSE_BENCH_GROUPS
#define DENSE_BENCH_GROUPS 4
#endif
#ifndef DENSE_BENCH_GROUP_ROWS
#define DENSE_BENCH_GROUP_ROWS 25200
#endif
#ifndef DENSE_BENCH_INPUTS
#define DENSE_BENCH_INPUTS 1536
#endif
#ifndef DENSE_BENCH_WIDTH
#define DENSE_BENCH_WIDTH 240
#endif
    constexpr int Groups = DENSE_BENCH_GROUPS, GroupRows = DENSE_BENCH_GROUP_ROWS, R = Groups * GroupRows, D = DENSE_BENCH_INPUTS,
                  H = DENSE_BENCH_WIDTH, Layers = 3;
    const int width[Layers + 1] = {D, H, H, H};
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    auto upload = [&](size_t n, float scale, float offset = 0) { // offset + scale x uniform(-1, 1)
        std::vector<float> v(n);
        for (float& x : v)
            x = offset + scale * uniform(rng);
        return uploadFloats(v);
    };
    // W [out][in] and, as the pipeline uploads it in float, its transpose [in][out] (DenseBatch::weightT).
    float *W[Layers][Groups], *WT[Layers][Groups], *bias[Layers][Groups], *timestep[Layers][Groups];
    for (int l = 0; l < Layers; l++)
        for (int g = 0; g < Groups; g++) {
            std::vector<float> w((size_t) width[l + 1] * width[l]);
            for (float& x : w)
                x = 1.0f / std::sqrt((float) width[l]) * uniform(rng); // as upload(..., 1 / sqrt(K)) drew them before
            W[l][g] = uploadFloats(w);
            WT[l][g] = uploadFloats(transposedWeights(w, width[l], width[l + 1]));
            bias[l][g] = upload(width[l + 1], 0.1f);
            timestep[l][g] = upload(width[l + 1], 0.05f, 0.1f);
        }
    float *h[Layers + 1], *deriv[Layers], *grad[Layers + 1];
    h[0] = upload((size_t) R * D, 1.0f);
    for (int l = 0; l < Layers; l++) {
        h[l + 1] = deviceZeros((size_t) R * width[l + 1]);
        deriv[l] = deviceZeros((size_t) R * width[l + 1]);
        grad[l] = deviceZeros((size_t) R * width[l]);
    }
    grad[Layers] = upload((size_t) R * H, 1.0f);
    int* rowNodes; // the identity (the outputs are not written by node here)
    {
        std::vector<int> nodes(R);
        for (int i = 0; i < R; i++)
            nodes[i] = i;
        CHECK(cudaMalloc(&rowNodes, R * sizeof(int)));
        CHECK(cudaMemcpy(rowNodes, nodes.data(), R * sizeof(int), cudaMemcpyHostToDevice));
    }
    const int streamable = configureDenseLayers<float>(); // 2: the streamed 64 x 128 tiles too
    int numMultiprocessors = 0;
    CHECK(cudaDeviceGetAttribute(&numMultiprocessors, cudaDevAttrMultiProcessorCount, 0));
    auto batchOf = [&](int l, int columns, bool streamed, bool forward) {
        DenseBatch<float> b{};
        b.numGroups = Groups;
        b.chunkStart = 0;
        for (int g = 0; g <= Groups; g++)
            b.rowStart[g] = g * GroupRows;
#ifdef DENSE_BENCH_TILE_ROWS
        (void) forward;
        b.tileRows = DENSE_BENCH_TILE_ROWS;
        b.streamedWide = streamed ? 1 : 0;
        b.streamedHalf = streamed && streamable == 2 && b.tileRows == 64 ? 1 : 0;
        setDenseTileStarts(b);
#else
        chooseDenseTiles(b, columns, numMultiprocessors, streamed ? streamable : 0, forward); // as the pipeline chooses
#endif
        for (int g = 0; g < Groups; g++) {
            b.weight[g] = W[l][g];
            b.weightT[g] = WT[l][g];
            b.bias[g] = bias[l][g];
            b.timestep[g] = width[l] == width[l + 1] ? timestep[l][g] : nullptr;
        }
        return b;
    };
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    // the tiles the streamed scheme launches (the register scheme takes chooseDenseTileRows's rows)
    std::printf("%s: configureDenseLayers<float>() %d; %d rows in %d groups; streamed tile rows: forward %d %d, backward %d %d "
                "(layers 0 1)\n",
                prop.name, streamable, R, Groups, batchOf(0, width[1], true, true).tileRows, batchOf(1, width[2], true, true).tileRows,
                batchOf(0, width[0], true, false).tileRows, batchOf(1, width[1], true, false).tileRows);
    auto forward = [&](int l, bool streamed) {
        launchDenseForward<float>(batchOf(l, width[l + 1], streamed, true), rowNodes, h[l], width[l], width[l], width[l + 1], GraphTanh,
                                  width[l] == width[l + 1], deriv[l], h[l + 1], width[l + 1], false, 0);
    };
    // As the pipeline does: the product above a plain layer (layer 1's, above layer 0) multiplies its output by that
    // layer's act'(z) (DenseBatch::gradScale), and the plain layer's product takes it as dE/dz (GraphIdentity).  Built with
    // -DDENSE_BENCH_NO_GRAD_SCALE, layer 0's product forms dE/dz from act'(z) itself (as before session 21, and as a
    // DenseLayerKernels.cu without gradScale needs).
#ifdef DENSE_BENCH_NO_GRAD_SCALE
    constexpr bool gradScale = false;
#else
    constexpr bool gradScale = true;
#endif
    auto backward = [&](int l, bool streamed) {
        DenseBatch<float> b = batchOf(l, width[l], streamed, false);
        if (gradScale && l == 1) {
            b.gradScale = deriv[0];
            b.gradScaleStride = width[1];
        }
        launchDenseBackward<float>(b, rowNodes, grad[l + 1], width[l + 1], false, deriv[l], width[l + 1], width[l], width[l + 1],
                                   gradScale && l == 0 ? GraphIdentity : GraphTanh, width[l] == width[l + 1], grad[l], width[l], 0);
    };
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    auto timeIt = [&](auto run) {
        for (int i = 0; i < warmUps; i++)
            run();
        CHECK(cudaEventRecord(start));
        for (int i = 0; i < timed; i++)
            run();
        CHECK(cudaEventRecord(stop));
        CHECK(cudaEventSynchronize(stop));
        float ms;
        CHECK(cudaEventElapsedTime(&ms, start, stop));
        return ms / timed;
    };
    std::vector<float> results[2];
    for (int streamed = 0; streamed <= (streamable ? 1 : 0); streamed++) {
        float ms[2][Layers];
        double total = 0;
        for (int l = 0; l < Layers; l++) {
            ms[0][l] = timeIt([&] { forward(l, streamed); });
            ms[1][l] = timeIt([&] { backward(l, streamed); });
            total += ms[0][l] + ms[1][l];
        }
        CHECK(cudaGetLastError());
        std::printf("%s: forward %.3f %.3f %.3f ms, backward %.3f %.3f %.3f ms (layers 0 1 2), all %.3f ms\n",
                    streamed ? "streamed (cp.async)" : "registers", ms[0][0], ms[0][1], ms[0][2], ms[1][0], ms[1][1], ms[1][2], total);
        // One pass in order for the results: g[0] depends on every product.
        for (int l = 0; l < Layers; l++)
            forward(l, streamed);
        for (int l = Layers - 1; l >= 0; l--)
            backward(l, streamed);
        CHECK(cudaDeviceSynchronize());
        results[streamed].resize((size_t) R * D);
        CHECK(cudaMemcpy(results[streamed].data(), grad[0], results[streamed].size() * sizeof(float), cudaMemcpyDeviceToHost));
    }
    if (streamable) {
        const bool same = std::memcmp(results[0].data(), results[1].data(), results[0].size() * sizeof(float)) == 0;
        std::printf("dE/dh0 of both ways bitwise equal: %s\n", same ? "yes" : "NO");
        return same ? 0 : 1;
    }
    return 0;
}
