/**
 * Dense-product probe (bench/NOTES.md v17): the medium grade's fitting
 * network products at 100,800 rows (descriptor 1536 -> 240 -> 240 -> 240,
 * tanh, the last two residual), forward with the activation epilogue and
 * input-gradient backward with dE/dz = g act'(z) (times the timestep) formed
 * from its loads, in the 128 x 128 tiles of denseGemmKernel
 * (platforms/cuda/src/DenseLayerKernels.cu: 256 threads, 8 x 8 outputs a
 * thread, two blocks a multiprocessor).  v5 measured these products at
 * 8.55 ms of medium 100,800's evaluation, 34% of the fp32 peak, with the
 * loads of the next k-slice the main stall.  Variants of the same arithmetic:
 *
 *   reg      the plugin's kernel: the next k-slice of TileK prefetched into
 *            registers, stored to shared memory after the products of this one;
 *   async    k-slices copied to shared memory with cp.async (4-byte copies into
 *            the same transposed layout; 16-byte copies for the backward's W
 *            rows), Stages - 1 slices in flight, no register holds a prefetch;
 *
 * each with the blocks of a column tile launched first ("rows": blockIdx.x
 * walks the row tiles, as the plugin does) or the column tiles of a row tile
 * next to each other ("cols": the A rows of a tile are read by all its column
 * tiles while they are in L2).  Every output sums k in order 0..K-1 with fma,
 * so every variant's results are bitwise the plugin kernel's (checked), and
 * rows are checked against double on the host.  Prints ms and the fraction
 * of the fp32 peak (128 FMA a clock a multiprocessor at the boost clock).
 *
 *   nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -o dense_probe dense_probe.cu
 */

#include "probe_common.cuh"

#include <cuda_pipeline.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace {

constexpr int Rows = 128, Cols = 128, Threads = 256, Pad = 4;

/** One product's operands; weights W[numOutputs][numInputs] as the plugin stores them. */
struct Product {
    const float* A;        ///< forward: h [R][K]; backward: dE/d(out) [R][K]
    const float* deriv;    ///< backward: act'(z) [R][K]
    const float* W;        ///< [numOutputs][numInputs]
    const float* bias;     ///< forward [N]
    const float* timestep; ///< residual: [numOutputs]
    float* out;            ///< [R][N]
    float* derivOut;       ///< forward: act'(z) [R][N]
    int R, K, N, ldw, residual;
};

__device__ inline void epilogue(const Product& p, bool forward, int row, int col, float acc) {
    if (forward) {
        const float z = acc + p.bias[col], t = tanhf(z);
        p.derivOut[(size_t) row * p.N + col] = 1 - t * t;
        p.out[(size_t) row * p.N + col] = p.residual ? p.A[(size_t) row * p.K + col] + p.timestep[col] * t : t;
    }
    else
        p.out[(size_t) row * p.N + col] = acc + (p.residual ? p.A[(size_t) row * p.K + col] : 0.0f);
}

/** dE/dz as the plugin forms it (denseOutputGradient): g, times act'(z), times the timestep when residual. */
__device__ inline float outputGradient(const Product& p, float g, float d, int k) {
    float value = g * d;
    if (p.residual)
        value *= p.timestep[k];
    return value;
}

template <bool ColsFastest> __device__ inline void tileOf(int& rowBase, int& colBase) {
    rowBase = (ColsFastest ? blockIdx.y : blockIdx.x) * Rows;
    colBase = (ColsFastest ? blockIdx.x : blockIdx.y) * Cols;
}

/** The 8 x 8 outputs of a thread: rows (x / 4) 64 + ty 4 + x % 4, columns (y / 4) 64 + tx 4 + y % 4. */
__device__ inline void multiplySlice(const float* As, const float* Bs, int tileK, float acc[8][8]) {
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
#pragma unroll 8
    for (int kk = 0; kk < tileK; kk++) {
        float a[8], b[8];
        const float4 a0 = *reinterpret_cast<const float4*>(As + kk * (Rows + Pad) + ty * 4);
        const float4 a1 = *reinterpret_cast<const float4*>(As + kk * (Rows + Pad) + 64 + ty * 4);
        const float4 b0 = *reinterpret_cast<const float4*>(Bs + kk * (Cols + Pad) + tx * 4);
        const float4 b1 = *reinterpret_cast<const float4*>(Bs + kk * (Cols + Pad) + 64 + tx * 4);
        a[0] = a0.x, a[1] = a0.y, a[2] = a0.z, a[3] = a0.w, a[4] = a1.x, a[5] = a1.y, a[6] = a1.z, a[7] = a1.w;
        b[0] = b0.x, b[1] = b0.y, b[2] = b0.z, b[3] = b0.w, b[4] = b1.x, b[5] = b1.y, b[6] = b1.z, b[7] = b1.w;
#pragma unroll
        for (int x = 0; x < 8; x++)
#pragma unroll
            for (int y = 0; y < 8; y++)
                acc[x][y] = fmaf(a[x], b[y], acc[x][y]);
    }
}

__device__ inline void finish(const Product& p, bool forward, int rowBase, int colBase, float acc[8][8]) {
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
#pragma unroll
    for (int x = 0; x < 8; x++) {
        const int row = rowBase + (x / 4) * 64 + ty * 4 + x % 4;
        if (row >= p.R)
            continue;
#pragma unroll
        for (int y = 0; y < 8; y++) {
            const int col = colBase + (y / 4) * 64 + tx * 4 + y % 4;
            if (col < p.N)
                epilogue(p, forward, row, col, acc[x][y]);
        }
    }
}

/** The plugin's scheme: next slice into registers during this slice's products, two shared buffers. */
template <bool Forward, int TileK, bool ColsFastest> __global__ void __launch_bounds__(Threads, 2) regKernel(Product p) {
    constexpr int ALoads = TileK * Rows / Threads, BLoads = TileK * Cols / Threads;
    __shared__ __align__(16) float As[2][TileK][Rows + Pad];
    __shared__ __align__(16) float Bs[2][TileK][Cols + Pad];
    int rowBase, colBase;
    tileOf<ColsFastest>(rowBase, colBase);
    const int aK = threadIdx.x % TileK;
    float aNext[ALoads], bNext[BLoads];
    auto load = [&](int k0) {
#pragma unroll
        for (int m = 0; m < ALoads; m++) {
            const int row = rowBase + (threadIdx.x + Threads * m) / TileK, k = k0 + aK;
            float value = 0;
            if (row < p.R && k < p.K) {
                value = p.A[(size_t) row * p.K + k];
                if (!Forward)
                    value = outputGradient(p, value, p.deriv[(size_t) row * p.K + k], k);
            }
            aNext[m] = value;
        }
#pragma unroll
        for (int m = 0; m < BLoads; m++) {
            const int e = threadIdx.x + Threads * m;
            const int kk = Forward ? e % TileK : e / Cols, cc = Forward ? e / TileK : e % Cols, col = colBase + cc, k = k0 + kk;
            bNext[m] = col < p.N && k < p.K ? (Forward ? p.W[(size_t) col * p.ldw + k] : p.W[(size_t) k * p.ldw + col]) : 0.0f;
        }
    };
    auto store = [&](int buffer) {
#pragma unroll
        for (int m = 0; m < ALoads; m++)
            As[buffer][aK][(threadIdx.x + Threads * m) / TileK] = aNext[m];
#pragma unroll
        for (int m = 0; m < BLoads; m++) {
            const int e = threadIdx.x + Threads * m;
            if (Forward)
                Bs[buffer][e % TileK][e / TileK] = bNext[m];
            else
                Bs[buffer][e / Cols][e % Cols] = bNext[m];
        }
    };
    float acc[8][8] = {};
    load(0);
    store(0);
    __syncthreads();
    int buffer = 0;
    for (int k0 = 0; k0 < p.K; k0 += TileK) {
        const bool more = k0 + TileK < p.K;
        if (more)
            load(k0 + TileK);
        multiplySlice(&As[buffer][0][0], &Bs[buffer][0][0], TileK, acc);
        if (more) {
            store(1 - buffer);
            __syncthreads();
            buffer = 1 - buffer;
        }
    }
    finish(p, Forward, rowBase, colBase, acc);
}

/** Shared floats of a stage of asyncKernel: A and B (and act'(z) for the backward), [TileK][128 + Pad] each. */
template <bool Forward, int TileK> __host__ __device__ constexpr int stageFloats() {
    return (Forward ? 2 : 3) * TileK * (Rows + Pad);
}

/**
 * k-slices through shared memory with cp.async, Stages - 1 in flight.  A (and act'(z)) and the forward's W^T are
 * copied 4 bytes at a time into the transposed layout [k][row]; the backward's W rows 16 bytes at a time.  Backward:
 * when a slice has landed each thread turns its own copied values into dE/dz, then a barrier.
 */
template <bool Forward, int TileK, int Stages, bool ColsFastest> __global__ void __launch_bounds__(Threads, 2) asyncKernel(Product p) {
    constexpr int ALoads = TileK * Rows / Threads, BLoads = TileK * Cols / Threads, Stage = stageFloats<Forward, TileK>();
    extern __shared__ __align__(16) float shared[];
    int rowBase, colBase;
    tileOf<ColsFastest>(rowBase, colBase);
    const int aK = threadIdx.x % TileK, numSlices = (p.K + TileK - 1) / TileK;
    auto As = [&](int stage) { return shared + stage * Stage; };
    auto Bs = [&](int stage) { return shared + stage * Stage + TileK * (Rows + Pad); };
    auto Ds = [&](int stage) { return shared + stage * Stage + 2 * TileK * (Rows + Pad); };
    auto issue = [&](int s) {
        if (s < numSlices) {
            const int stage = s % Stages, k0 = s * TileK;
#pragma unroll
            for (int m = 0; m < ALoads; m++) {
                const int r = (threadIdx.x + Threads * m) / TileK, row = rowBase + r, k = k0 + aK;
                const bool valid = row < p.R && k < p.K;
                const size_t at = valid ? (size_t) row * p.K + k : 0;
                __pipeline_memcpy_async(As(stage) + aK * (Rows + Pad) + r, p.A + at, 4, valid ? 0 : 4);
                if (!Forward)
                    __pipeline_memcpy_async(Ds(stage) + aK * (Rows + Pad) + r, p.deriv + at, 4, valid ? 0 : 4);
            }
            if (Forward)
#pragma unroll
                for (int m = 0; m < BLoads; m++) {
                    const int e = threadIdx.x + Threads * m, kk = e % TileK, cc = e / TileK, col = colBase + cc, k = k0 + kk;
                    const bool valid = col < p.N && k < p.K;
                    __pipeline_memcpy_async(Bs(stage) + kk * (Cols + Pad) + cc, p.W + (valid ? (size_t) col * p.ldw + k : 0), 4,
                                            valid ? 0 : 4);
                }
            else
#pragma unroll
                for (int m = 0; m < BLoads / 4; m++) { // N % 4 == 0 and ldw % 4 == 0 here (checked on the host)
                    const int e = threadIdx.x + Threads * m, kk = e / (Cols / 4), cc = 4 * (e % (Cols / 4)), col = colBase + cc,
                              k = k0 + kk;
                    const bool valid = col < p.N && k < p.K;
                    __pipeline_memcpy_async(Bs(stage) + kk * (Cols + Pad) + cc, p.W + (valid ? (size_t) k * p.ldw + col : 0), 16,
                                            valid ? 0 : 16);
                }
        }
        __pipeline_commit();
    };
    float acc[8][8] = {};
    for (int s = 0; s < Stages - 1; s++)
        issue(s);
    for (int s = 0; s < numSlices; s++) {
        __pipeline_wait_prior(Stages - 2);
        const int stage = s % Stages;
        if (!Forward) {
#pragma unroll
            for (int m = 0; m < ALoads; m++) {
                const int r = (threadIdx.x + Threads * m) / TileK, k = s * TileK + aK;
                float* a = As(stage) + aK * (Rows + Pad) + r;
                if (k < p.K)
                    *a = outputGradient(p, *a, Ds(stage)[aK * (Rows + Pad) + r], k);
            }
        }
        __syncthreads(); // slice s landed everywhere (and is dE/dz); stage (s - 1) % Stages is free
        issue(s + Stages - 1);
        multiplySlice(As(stage), Bs(stage), TileK, acc);
    }
    finish(p, Forward, rowBase, colBase, acc);
}

struct Variant {
    const char* name;
    void (*forward)(Product);
    void (*backward)(Product);
    int forwardShared, backwardShared, colsFastest;
};

template <int TileK, bool C> Variant regVariant(const char* name) {
    return {name, regKernel<true, TileK, C>, regKernel<false, TileK, C>, 0, 0, C};
}
template <int TileK, int S, bool C> Variant asyncVariant(const char* name) {
    return {name,
            asyncKernel<true, TileK, S, C>,
            asyncKernel<false, TileK, S, C>,
            S * stageFloats<true, TileK>() * 4,
            S * stageFloats<false, TileK>() * 4,
            C};
}

} // namespace

int main(int argc, char** argv) {
    // --once: each product launched once, no warm-up (for Nsight Compute: variant v's products are launches 10 v .. 10 v + 9,
    // its first-layer backward 10 v + 3).
    const bool once = argc > 1 && std::strcmp(argv[1], "--once") == 0;
    const int warmUps = once ? 0 : 3, timed = once ? 1 : 10;
    constexpr int R = 100800, D = 1536, H = 240, Layers = 3;
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    auto randomVector = [&](size_t n, float scale) {
        std::vector<float> v(n);
        for (float& x : v)
            x = scale * uniform(rng);
        return v;
    };
    const int width[Layers + 1] = {D, H, H, H};
    std::vector<std::vector<float>> W(Layers), bias(Layers), timestep(Layers);
    float *dW[Layers], *dBias[Layers], *dTimestep[Layers], *h[Layers + 1], *deriv[Layers], *g[Layers + 1];
    for (int l = 0; l < Layers; l++) {
        W[l] = randomVector((size_t) width[l + 1] * width[l], 1.0f / std::sqrt((float) width[l]));
        bias[l] = randomVector(width[l + 1], 0.1f);
        timestep[l] = randomVector(width[l + 1], 0.05f);
        for (float& t : timestep[l])
            t += 0.1f;
        dW[l] = uploadFloats(W[l]);
        dBias[l] = uploadFloats(bias[l]);
        dTimestep[l] = uploadFloats(timestep[l]);
        deriv[l] = deviceZeros((size_t) R * width[l + 1]);
    }
    const std::vector<float> input = randomVector((size_t) R * D, 1.0f), outputWeight = randomVector(H, 1.0f);
    h[0] = uploadFloats(input);
    for (int l = 1; l <= Layers; l++)
        h[l] = deviceZeros((size_t) R * width[l]);
    for (int l = 0; l < Layers; l++)
        g[l] = deviceZeros((size_t) R * width[l]);
    { // g[Layers] = the output weights on every row
        std::vector<float> top((size_t) R * H);
        for (int r = 0; r < R; r++)
            std::copy(outputWeight.begin(), outputWeight.end(), top.begin() + (size_t) r * H);
        g[Layers] = uploadFloats(top);
    }

    std::vector<Variant> variants = {
        regVariant<8, false>("reg  k8  rows (the plugin)"),
        regVariant<8, true>("reg  k8  cols"),
        regVariant<16, true>("reg  k16 cols"),
        asyncVariant<8, 4, false>("async k8  s4 rows"),
        asyncVariant<8, 4, true>("async k8  s4 cols"),
        asyncVariant<16, 3, true>("async k16 s3 cols"),
        asyncVariant<16, 4, false>("async k16 s4 rows"),
        asyncVariant<16, 4, true>("async k16 s4 cols"),
        asyncVariant<32, 3, true>("async k32 s3 cols"),
    };
    for (const Variant& v : variants) {
        CHECK(cudaFuncSetAttribute(v.forward, cudaFuncAttributeMaxDynamicSharedMemorySize, std::max(v.forwardShared, 1)));
        CHECK(cudaFuncSetAttribute(v.backward, cudaFuncAttributeMaxDynamicSharedMemorySize, std::max(v.backwardShared, 1)));
    }
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    int clockKHz = 0;
    CHECK(cudaDeviceGetAttribute(&clockKHz, cudaDevAttrClockRate, 0));
    const double peak = 2.0 * 128 * prop.multiProcessorCount * clockKHz * 1e3; // FLOP/s
    std::printf("%s, %d SMs, %.2f GHz: fp32 peak %.1f TFLOP/s; %d rows, widths %d %d %d %d\n", prop.name, prop.multiProcessorCount,
                clockKHz / 1e6, peak / 1e12, R, D, H, H, H);

    // The products of one evaluation: forward layers 0..2, backward layers 2..0.
    auto product = [&](bool forward, int l) {
        Product p{};
        p.W = dW[l], p.bias = dBias[l], p.timestep = dTimestep[l], p.R = R, p.ldw = width[l], p.residual = width[l] == width[l + 1];
        if (forward)
            p.A = h[l], p.out = h[l + 1], p.derivOut = deriv[l], p.K = width[l], p.N = width[l + 1];
        else
            p.A = g[l + 1], p.deriv = deriv[l], p.out = g[l], p.K = width[l + 1], p.N = width[l];
        return p;
    };
    auto launch = [&](const Variant& v, bool forward, int l, cudaStream_t stream) {
        const Product p = product(forward, l);
        const int rowTiles = (R + Rows - 1) / Rows, colTiles = (p.N + Cols - 1) / Cols;
        const dim3 grid = v.colsFastest ? dim3(colTiles, rowTiles) : dim3(rowTiles, colTiles);
        (forward ? v.forward : v.backward)<<<grid, Threads, forward ? v.forwardShared : v.backwardShared, stream>>>(p);
    };
    const double flops[2] = {2.0 * R * D * H, 2.0 * R * H * H}; // layer 0, layers 1 and 2 (each direction)
    std::vector<float> reference0, reference1; // the first variant's (the plugin's scheme) g[0] and h[3], for the bitwise check
    bool allBitwise = true;
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    std::printf("%-28s %9s %9s %9s %9s %9s  %s\n", "variant", "fwd0 ms", "fwd12 ms", "bwd12 ms", "bwd0 ms", "total ms", "of fp32 peak");
    for (const Variant& v : variants) {
        float ms[4] = {};
        // Per product: 3 launches of warm-up, then 10 timed (--once: one).
        for (int which = 0; which < 4; which++) {
            const bool forward = which < 2;
            const int l = which == 0 || which == 3 ? 0 : 1;
            for (int i = 0; i < warmUps; i++)
                launch(v, forward, l, 0);
            CHECK(cudaEventRecord(start));
            for (int i = 0; i < timed; i++)
                launch(v, forward, l, 0);
            CHECK(cudaEventRecord(stop));
            CHECK(cudaEventSynchronize(stop));
            CHECK(cudaEventElapsedTime(&ms[which], start, stop));
            ms[which] /= timed;
        }
        CHECK(cudaGetLastError());
        // One whole evaluation in order, for the results.
        for (int l = 0; l < Layers; l++)
            launch(v, true, l, 0);
        for (int l = Layers - 1; l >= 0; l--)
            launch(v, false, l, 0);
        CHECK(cudaDeviceSynchronize());
        std::vector<float> g0((size_t) R * D), h3((size_t) R * H);
        CHECK(cudaMemcpy(g0.data(), g[0], g0.size() * 4, cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpy(h3.data(), h[Layers], h3.size() * 4, cudaMemcpyDeviceToHost));
        bool bitwise = true;
        if (reference0.empty())
            reference0 = g0, reference1 = h3;
        else
            bitwise = std::memcmp(g0.data(), reference0.data(), g0.size() * 4) == 0 &&
                      std::memcmp(h3.data(), reference1.data(), h3.size() * 4) == 0;
        allBitwise = allBitwise && bitwise;
        const double total = ms[0] + 2 * ms[1] + 2 * ms[2] + ms[3];
        const double work = 2 * (flops[0] + 2 * flops[1]);
        std::printf("%-28s %9.3f %9.3f %9.3f %9.3f %9.3f  %5.1f%%  %s\n", v.name, ms[0], ms[1], ms[2], ms[3], total,
                    100 * work / (total * 1e-3) / peak, bitwise ? "bitwise the first variant's" : "DIFFERS from the first variant's");
    }
    // Rows against double on the host (the last variant's results equal the plugin's when bitwise).
    double worstH = 0, largestH = 0, worstG = 0, largestG = 0;
    for (int r : {0, 1, 12345, R - 1}) {
        const ReferenceRow row = referenceNetwork(
            {D, H, H, H}, [&](int l, int k, int c) { return W[l][(size_t) c * width[l] + k]; }, bias, timestep, outputWeight,
            input.data() + (size_t) r * D);
        const std::vector<double>&hLast = row.last, &gg = row.gradient;
        for (int c = 0; c < H; c++) {
            worstH = std::max(worstH, std::fabs(hLast[c] - reference1[(size_t) r * H + c]));
            largestH = std::max(largestH, std::fabs(hLast[c]));
        }
        for (int k = 0; k < D; k++) {
            worstG = std::max(worstG, std::fabs(gg[k] - reference0[(size_t) r * D + k]));
            largestG = std::max(largestG, std::fabs(gg[k]));
        }
    }
    std::printf("against double (4 rows): h3 max |diff| / max |h3| %.2e, dE/dh0 max |diff| / max |g| %.2e\n", worstH / largestH,
                worstG / largestG);
    const bool ok = allBitwise && worstH / largestH < 1e-4 && worstG / largestG < 1e-4;
    std::printf(ok ? "results agree\n" : "RESULTS DIFFER\n");
    return ok ? 0 : 1;
}
