/**
 * Small-system fitting-network probe (bench/NOTES.md v16): the small grade's
 * network (descriptor 256 -> 128 -> 128 -> 128, tanh, the last two residual
 * with a timestep, linear energy output) with its input-gradient backward,
 * for 512 rows, split over 128 blocks as 2D tiles (16 row groups of 32 rows
 * x 8 column groups) instead of today's one block per 4 rows that streams
 * every weight (fusedFittingKernel, 32.9 us at small 512 on an H200, v16).
 * Each block's weight slice is at most 16 KB and its rows' inputs at most
 * 32 KB a product, so no block takes in more than about 50 KB a product.
 *
 * Six phases (three forward products with their activation, three backward
 * products of dE/dz with W^T; the energy with the first backward one), run
 *
 *   grid      as one cooperative kernel, grid.sync() between the phases;
 *   graph     as six kernels, one per phase, replayed as a CUDA graph (what
 *             the per-layer path does, without its other kernels).
 *
 * Each output sums k in order 0..K-1 with fma in both, so their results are
 * bitwise equal (checked), and the first rows are checked against double on
 * the host.  Prints the mean time of 200 evaluations of each.
 *
 *   nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -o network_probe network_probe.cu
 */

#include "probe_common.cuh"

#include <cooperative_groups.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

namespace cg = cooperative_groups;

namespace {

constexpr int N = 512, L = 3, Threads = 256, Blocks = 128, RowTile = 32, RowGroups = N / RowTile, ColumnGroups = Blocks / RowGroups;
/** The widths: descriptor 256, then 128, 128, 128. */
__host__ __device__ constexpr int width(int l) {
    return l == 0 ? 256 : 128;
}
constexpr int Phases = 2 * L;
/** Shared floats: a row tile's inputs transposed, at most 256 x (32 + 4 padding), and a weight slice of at most 128 x 32 or 256 x 16. */
constexpr int SharedFloats = 256 * (RowTile + 4) + 4096;

/** Device arrays, all [rows][width] row-major; weights [K][C]. */
struct Net {
    const float* W[L];
    const float* bias[L];
    const float* timestep[L];  ///< residual layers (K == C): h + timestep * tanh(z)
    const float* outputWeight; ///< [width(L)]
    float* h[L + 1];           ///< h[0] the input (descriptor), h[l + 1] layer l's output
    float* deriv[L];           ///< d h[l + 1] / d z of layer l
    float* g[L];               ///< g[l] = dE/dh[l] (g[L] is outputWeight, broadcast)
    float* energy;             ///< [N]
};

__device__ inline bool residual(int l) {
    return width(l) == width(l + 1);
}

/**
 * Phase P of the evaluation for block b.  Forward P = l < L: h[l + 1] = act(h[l] W_l + b_l).  Backward P = 2 L - 1 - l:
 * g[l] = (g[l + 1] * deriv[l]) W_l^T (+ g[l + 1] if residual); the first backward phase also writes the energies.
 *
 * Every global load of the phase is issued before the first store into shared memory (v16's first version of this
 * probe loaded and stored one element at a time, so a thread waited for up to 24 dependent L2 round trips a phase: the
 * compiler may not move a generic-pointer load past a shared store).  The inputs are kept transposed, AT[k][row], so a
 * thread reads its R rows of one k with one vector load.
 */
template <int P> __device__ void phase(const Net& net, int b, float* shared) {
    constexpr bool forward = P < L;
    constexpr int l = forward ? P : 2 * L - 1 - P;
    constexpr int K = forward ? width(l) : width(l + 1); // the product's sum
    constexpr int C = forward ? width(l + 1) : width(l); // its outputs a row
    constexpr int CT = C / ColumnGroups, R = RowTile * CT / Threads, SA = RowTile + 4;
    constexpr int ALoads = RowTile * K / 4 / Threads, BLoads = K * CT / 4 / Threads;
    static_assert(R == 2 || R == 4, "a thread's rows are one float2 or float4");
    static_assert(ALoads * 4 * Threads == RowTile * K && BLoads * 4 * Threads == K * CT, "whole float4s per thread");
    const int rowGroup = b / ColumnGroups, c0 = (b % ColumnGroups) * CT, r0 = rowGroup * RowTile;
    float* AT = shared;           // [K][SA]
    float* B = shared + 256 * SA; // [K][CT]
    float4 a[ALoads], d[forward ? 1 : ALoads], w[BLoads];
#pragma unroll
    for (int i = 0; i < ALoads; i++) {
        const int e = threadIdx.x + i * Threads, r = e / (K / 4), k = 4 * (e % (K / 4));
        if (forward)
            a[i] = *reinterpret_cast<const float4*>(net.h[l] + (size_t) (r0 + r) * K + k);
        else {
            d[i] = *reinterpret_cast<const float4*>(net.deriv[l] + (size_t) (r0 + r) * K + k);
            a[i] = l + 1 == L ? __ldg(reinterpret_cast<const float4*>(net.outputWeight + k))
                              : *reinterpret_cast<const float4*>(net.g[l + 1] + (size_t) (r0 + r) * K + k);
        }
    }
#pragma unroll
    for (int i = 0; i < BLoads; i++) {
        const int e = threadIdx.x + i * Threads;
        if (forward) { // W_l[k][c0 + 4 j4 ...]
            const int k = e / (CT / 4), j4 = e % (CT / 4);
            w[i] = __ldg(reinterpret_cast<const float4*>(net.W[l] + (size_t) k * C + c0 + 4 * j4));
        }
        else { // W_l^T[n][c0 + j] = W_l[c0 + j][n], four n at a time
            const int j = e / (K / 4), n = 4 * (e % (K / 4));
            w[i] = __ldg(reinterpret_cast<const float4*>(net.W[l] + (size_t) (c0 + j) * K + n));
        }
    }
    if (!forward && l + 1 == L && b % ColumnGroups == 0 && threadIdx.x < RowTile) { // energies of the row tile
        const int r = r0 + threadIdx.x;
        float e = 0;
        for (int c = 0; c < width(L); c++)
            e = fmaf(net.h[L][(size_t) r * width(L) + c], net.outputWeight[c], e);
        net.energy[r] = e;
    }
#pragma unroll
    for (int i = 0; i < ALoads; i++) {
        const int e = threadIdx.x + i * Threads, r = e / (K / 4), k = 4 * (e % (K / 4));
        float4 v = a[i];
        if (!forward)
            v = make_float4(v.x * d[i].x, v.y * d[i].y, v.z * d[i].z, v.w * d[i].w);
        AT[(k + 0) * SA + r] = v.x;
        AT[(k + 1) * SA + r] = v.y;
        AT[(k + 2) * SA + r] = v.z;
        AT[(k + 3) * SA + r] = v.w;
    }
#pragma unroll
    for (int i = 0; i < BLoads; i++) {
        const int e = threadIdx.x + i * Threads;
        if (forward) {
            const int k = e / (CT / 4), j4 = e % (CT / 4);
            *reinterpret_cast<float4*>(B + k * CT + 4 * j4) = w[i];
        }
        else {
            const int j = e / (K / 4), n = 4 * (e % (K / 4));
            B[(n + 0) * CT + j] = w[i].x;
            B[(n + 1) * CT + j] = w[i].y;
            B[(n + 2) * CT + j] = w[i].z;
            B[(n + 3) * CT + j] = w[i].w;
        }
    }
    __syncthreads();
    const int j = threadIdx.x % CT, rq = threadIdx.x / CT; // rows R rq .. R rq + R - 1, column c0 + j
    float acc[R] = {};
#pragma unroll 8
    for (int k = 0; k < K; k++) {
        const float wk = B[k * CT + j];
        float x[R];
        if constexpr (R == 2) {
            const float2 v = *reinterpret_cast<const float2*>(AT + k * SA + R * rq);
            x[0] = v.x, x[1] = v.y;
        }
        else {
            const float4 v = *reinterpret_cast<const float4*>(AT + k * SA + R * rq);
            x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
        }
#pragma unroll
        for (int x_ = 0; x_ < R; x_++)
            acc[x_] = fmaf(x[x_], wk, acc[x_]);
    }
#pragma unroll
    for (int x = 0; x < R; x++) {
        const int row = r0 + R * rq + x, c = c0 + j;
        const float sum = acc[x];
        if (forward) {
            const float z = sum + net.bias[l][c], t = tanhf(z);
            const float ts = residual(l) ? net.timestep[l][c] : 1.0f;
            net.h[l + 1][(size_t) row * C + c] = residual(l) ? __fmaf_rn(ts, t, net.h[l][(size_t) row * K + c]) : t;
            net.deriv[l][(size_t) row * C + c] = ts * __fmaf_rn(-t, t, 1.0f);
        }
        else {
            const float carry = residual(l) ? (l + 1 == L ? net.outputWeight[c] : net.g[l + 1][(size_t) row * K + c]) : 0.0f;
            net.g[l][(size_t) row * C + c] = sum + carry;
        }
    }
    __syncthreads(); // the block's shared memory is reused by its next phase
}

/** Phase p (a run-time index) by its compile-time version. */
template <int... P> __device__ inline void phaseOf(const Net& net, int p, int b, float* shared, std::integer_sequence<int, P...>) {
    ((p == P ? phase<P>(net, b, shared) : void()), ...);
}

__device__ inline void phase(const Net& net, int p, int b, float* shared) {
    phaseOf(net, p, b, shared, std::make_integer_sequence<int, Phases>());
}

/** The grid kernel's fixed cost: its five grid syncs and nothing else. */
__global__ void __launch_bounds__(Threads) syncOnlyKernel() {
    cg::grid_group grid = cg::this_grid();
    for (int p = 0; p + 1 < Phases; p++) {
        __threadfence();
        grid.sync();
    }
}

/** The graph's fixed cost: one empty kernel a phase. */
__global__ void __launch_bounds__(Threads) emptyKernel() {}

__global__ void __launch_bounds__(Threads) gridKernel(Net net) {
    extern __shared__ __align__(16) float shared[];
    cg::grid_group grid = cg::this_grid();
    for (int p = 0; p < Phases; p++) {
        phase(net, p, blockIdx.x, shared);
        if (p + 1 < Phases) {
            __threadfence();
            grid.sync();
        }
    }
}

__global__ void __launch_bounds__(Threads) phaseKernel(Net net, int p) {
    extern __shared__ __align__(16) float shared[];
    phase(net, p, blockIdx.x, shared);
}

} // namespace

int main(int argc, char** argv) {
    const int warmUp = argc > 1 ? std::atoi(argv[1]) : 20000; // evaluations before each timing (few under a profiler)
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<std::vector<float>> W(L), bias(L), timestep(L);
    for (int l = 0; l < L; l++) {
        const float scale = 1.0f / std::sqrt((float) width(l));
        W[l].resize((size_t) width(l) * width(l + 1));
        for (float& x : W[l])
            x = scale * uniform(rng);
        bias[l].resize(width(l + 1));
        timestep[l].resize(width(l + 1));
        for (int c = 0; c < width(l + 1); c++)
            bias[l][c] = 0.1f * uniform(rng), timestep[l][c] = 0.1f + 0.05f * uniform(rng);
    }
    std::vector<float> wOut(width(L)), input((size_t) N * width(0));
    for (float& x : wOut)
        x = uniform(rng);
    for (float& x : input)
        x = uniform(rng);

    Net nets[2];
    for (Net& net : nets) {
        for (int l = 0; l < L; l++) {
            net.W[l] = uploadFloats(W[l]);
            net.bias[l] = uploadFloats(bias[l]);
            net.timestep[l] = uploadFloats(timestep[l]);
            net.deriv[l] = deviceZeros((size_t) N * width(l + 1));
            net.g[l] = deviceZeros((size_t) N * width(l));
        }
        net.outputWeight = uploadFloats(wOut);
        net.h[0] = uploadFloats(input);
        for (int l = 1; l <= L; l++)
            net.h[l] = deviceZeros((size_t) N * width(l));
        net.energy = deviceZeros(N);
    }

    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    const size_t sharedBytes = SharedFloats * sizeof(float);
    CHECK(cudaFuncSetAttribute(gridKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int) sharedBytes));
    CHECK(cudaFuncSetAttribute(phaseKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int) sharedBytes));
    int perSM = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSM, gridKernel, Threads, sharedBytes));
    std::printf(
        "%s, %d SMs, cooperative launch %d, %d blocks of the grid kernel fit per SM; %d rows, %d blocks of %d threads, %zu shared bytes\n",
        prop.name, prop.multiProcessorCount, prop.cooperativeLaunch, perSM, N, Blocks, Threads, sharedBytes);
    if (!prop.cooperativeLaunch || perSM * prop.multiProcessorCount < Blocks) {
        std::printf("the grid kernel cannot be co-resident here\n");
        return 1;
    }

    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream));
    auto runGrid = [&] {
        void* args[] = {&nets[0]};
        CHECK(cudaLaunchCooperativeKernel((void*) gridKernel, Blocks, Threads, args, sharedBytes, stream));
    };
    cudaGraph_t graph;
    cudaGraphExec_t graphExec;
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int p = 0; p < Phases; p++)
        phaseKernel<<<Blocks, Threads, sharedBytes, stream>>>(nets[1], p);
    CHECK(cudaStreamEndCapture(stream, &graph));
    CHECK(cudaGraphInstantiate(&graphExec, graph, 0));
    auto runGraph = [&] { CHECK(cudaGraphLaunch(graphExec, stream)); };

    auto timeIt = [&](auto run) {
        // Warm up for about 300 ms of back-to-back work, so the clocks have left their idle state (a few ms of launches
        // measured 5 us a phase for a phase whose loads and arithmetic need about 1.5 us).
        for (int i = 0; i < warmUp; i++)
            run();
        CHECK(cudaStreamSynchronize(stream));
        cudaEvent_t start, stop;
        CHECK(cudaEventCreate(&start));
        CHECK(cudaEventCreate(&stop));
        const int runs = 200;
        CHECK(cudaEventRecord(start, stream));
        for (int i = 0; i < runs; i++)
            run();
        CHECK(cudaEventRecord(stop, stream));
        CHECK(cudaEventSynchronize(stop));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, start, stop));
        return 1000.0f * ms / runs;
    };
    const float gridUs = timeIt(runGrid), graphUs = timeIt(runGraph);
    std::printf("grid   (one cooperative kernel, 5 grid syncs)  %7.2f us an evaluation (back to back, launch included)\n", gridUs);
    std::printf("graph  (six kernels in a CUDA graph)           %7.2f us an evaluation\n", graphUs);
    // The fixed costs: the grid kernel's launch and five syncs with no work; six empty kernels in a CUDA graph.
    cudaGraph_t emptyGraph;
    cudaGraphExec_t emptyExec;
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int p = 0; p < Phases; p++)
        emptyKernel<<<Blocks, Threads, 0, stream>>>();
    CHECK(cudaStreamEndCapture(stream, &emptyGraph));
    CHECK(cudaGraphInstantiate(&emptyExec, emptyGraph, 0));
    const float syncUs = timeIt([&] { CHECK(cudaLaunchCooperativeKernel((void*) syncOnlyKernel, Blocks, Threads, nullptr, 0, stream)); });
    const float emptyUs = timeIt([&] { CHECK(cudaGraphLaunch(emptyExec, stream)); });
    std::printf("fixed: grid kernel with 5 syncs and no work %7.2f us; six empty kernels in a graph %7.2f us\n", syncUs, emptyUs);
    // Each phase alone (its kernel in a graph of its own would need six graphs; plain back-to-back launches instead).
    for (int p = 0; p < Phases; p++) {
        const float us = timeIt([&] { phaseKernel<<<Blocks, Threads, sharedBytes, stream>>>(nets[1], p); });
        std::printf("  phase %d (%s, layer %d) alone: %6.2f us a launch, back to back\n", p, p < L ? "forward" : "backward",
                    p < L ? p : 2 * L - 1 - p, us);
    }
    CHECK(cudaStreamSynchronize(stream));
    CHECK(cudaGetLastError());

    // The two ways bitwise equal, and the first rows against double on the host.
    std::vector<float> e[2], g0[2];
    for (int v = 0; v < 2; v++) {
        e[v].resize(N);
        g0[v].resize((size_t) N * width(0));
        CHECK(cudaMemcpy(e[v].data(), nets[v].energy, N * sizeof(float), cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpy(g0[v].data(), nets[v].g[0], g0[v].size() * sizeof(float), cudaMemcpyDeviceToHost));
    }
    const bool bitwise = std::memcmp(e[0].data(), e[1].data(), N * sizeof(float)) == 0 &&
                         std::memcmp(g0[0].data(), g0[1].data(), g0[0].size() * sizeof(float)) == 0;
    double worstE = 0, largestE = 0, worstG = 0, largestG = 0; // errors relative to the largest value (an energy can be near 0)
    for (int r = 0; r < 8; r++) {
        const ReferenceRow row = referenceNetwork(
            {width(0), width(1), width(2), width(3)}, [&](int l, int k, int c) { return W[l][(size_t) k * width(l + 1) + c]; }, bias,
            timestep, wOut, input.data() + (size_t) r * width(0));
        const double energy = row.energy;
        const std::vector<double>& grad = row.gradient;
        worstE = std::max(worstE, std::fabs(energy - e[0][r]));
        largestE = std::max(largestE, std::fabs(energy));
        for (int k = 0; k < width(0); k++) {
            worstG = std::max(worstG, std::fabs(grad[k] - g0[0][(size_t) r * width(0) + k]));
            largestG = std::max(largestG, std::fabs(grad[k]));
        }
    }
    std::printf("grid and graph results bitwise equal: %s; against double (8 rows): energy max |diff| / max |E| %.2e, dE/dh0 max |diff| / "
                "max |g| %.2e\n",
                bitwise ? "yes" : "NO", worstE / largestE, worstG / largestG);
    const bool ok = bitwise && worstE / largestE < 1e-4 && worstG / largestG < 1e-4;
    std::printf(ok ? "results agree\n" : "RESULTS DIFFER\n");
    return ok ? 0 : 1;
}
