/**
 * Stage 3 of the CUDA pipeline: the fitting and node networks, forward and
 * input-gradient backward, as tiled matrix products over the rows of a chunk
 * of the type-sorted node list, with the bias, activation and residual update
 * fused into the epilogue and the activation's derivative into the backward
 * product's loads.  Plain FMA arithmetic in `real` (no tensor
 * cores, no TF32); every output element sums over k in a fixed order, so a
 * node's result does not depend on which other nodes share its tile.
 */

#include "GraphKernelLaunch.h"
#include "NetworkDeviceFunctions.cuh"
#include <algorithm>
#include <cuda_pipeline.h>

namespace GraphPlugin {

namespace {

constexpr int SharedPad = 4;

/** The group of a row tile, and of a row. */
template <typename real> __device__ inline int groupOfTile(const DenseBatch<real>& batch, int tile) {
    return groupOf(batch.tileStart, batch.numGroups, tile);
}

template <typename real> __device__ inline int groupOfRow(const DenseBatch<real>& batch, int row) {
    return groupOf(batch.rowStart, batch.numGroups, row);
}

/** The chunk-local index of a row, or the node of the row when mapped (rowNodes != nullptr). */
template <typename real> __device__ inline size_t rowIndex(const DenseBatch<real>& batch, const int* rowNodes, int row) {
    return rowNodes ? (size_t) rowNodes[row] : (size_t) (row - batch.chunkStart);
}

/**
 * Where a block's output tile lies (`tile`: its row tile in the batch,
 * `colTile`: its column tile): the group (type) of its rows, the first row
 * and the group's end, the first column, and the group's weights and
 * timestep; aMap is the row map of A when A is read by node.
 */
template <typename real> struct DenseTileOrigin {
    int group, rowBase, rowEnd, colBase;
    const real* __restrict__ W;
    const real* __restrict__ timestep;
    const int* aMap;
    __device__ DenseTileOrigin(const DenseBatch<real>& batch, int rows, int cols, const int* rowNodes, int aMapped, int tile, int colTile) {
        group = groupOfTile(batch, tile);
        rowBase = batch.rowStart[group] + (tile - batch.tileStart[group]) * rows;
        rowEnd = batch.rowStart[group + 1];
        colBase = colTile * cols;
        W = batch.weight[group];
        timestep = batch.timestep[group];
        aMap = aMapped ? rowNodes : nullptr;
    }
};

/**
 * The epilogue of the dense kernels for output (row, col) of the row's group,
 * from C = acc (see denseGemmKernel); a, o and local are the row's index in A,
 * in out and in the chunk (rowIndex):
 * forward:  z = C + bias; deriv = act'(z) (if deriv); out = act(z) (+ A-source + timestep * act(z) if residual)
 * backward: out = C (+ A-source if residual), times scale[local][col] when scale (DenseBatch::gradScale)
 */
template <typename real, bool Forward>
__device__ inline void storeDenseOutput(const real* __restrict__ bias, const real* __restrict__ timestep, const real* __restrict__ A,
                                        int aStride, int activation, int residual, real* __restrict__ deriv, int derivStride,
                                        const real* __restrict__ scale, int scaleStride, real* __restrict__ out, int outStride, size_t a,
                                        size_t o, size_t local, int col, real acc) {
    if (Forward)
        out[o * outStride + col] =
            denseForwardValue(activation, residual != 0, acc, bias[col], residual ? timestep[col] : real(0),
                              residual ? A[a * aStride + col] : real(0), deriv ? &deriv[local * derivStride + col] : nullptr);
    else {
        const real value = denseInputGradient(residual != 0, acc, residual ? A[a * aStride + col] : real(0));
        out[o * outStride + col] = scale ? value * scale[local * scaleStride + col] : value;
    }
}

/**
 * A thread's outputs in a tile of 16 RPT rows by 16 CPT columns (256 threads, 16 x 16): row x is tile row
 * tileRowOf(x), column y tile column tileColOf(y).  With 8 per thread the rows (and columns) are two runs of 4 that
 * lie 64 apart, so the shared-memory vector reads of a quarter warp are contiguous.
 */
template <int RPT, int Rows = 16 * RPT> __device__ inline int tileRowOf(int x) {
    const int ty = threadIdx.x / 16;
    return RPT == 8 ? (x / 4) * (Rows / 2) + ty * 4 + x % 4 : ty * RPT + x;
}

template <int CPT> __device__ inline int tileColOf(int y) {
    const int tx = threadIdx.x % 16;
    return CPT == 8 ? (y / 4) * 64 + tx * 4 + y % 4 : tx * CPT + y;
}

/**
 * acc[x][y] += sum over the TileK k of a k-slice, k in order, from shared memory: As [TileK][16 RPT + SharedPad]
 * (A transposed) and Bs [TileK][16 CPT + SharedPad].  Fully unrolled: unrolled 8 or 4 deep, the streamed kernel's
 * products took 2.12 ms against 1.98 for the first layer's forward at medium 100,800 (bench/NOTES.md v22).
 */
template <typename real, int RPT, int CPT, int TileK, int Rows = 16 * RPT>
__device__ inline void multiplyTileSlice(const real* As, const real* Bs, real acc[RPT][CPT]) {
    constexpr int StrideA = Rows + SharedPad, StrideB = 16 * CPT + SharedPad;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
#pragma unroll
    for (int kk = 0; kk < TileK; kk++) {
        real a[RPT], b[CPT];
        if constexpr (RPT == 8) {
            loadVector<real, 4>(As + kk * StrideA + ty * 4, a);
            loadVector<real, 4>(As + kk * StrideA + Rows / 2 + ty * 4, a + 4);
        }
        else
            loadVector<real, RPT>(As + kk * StrideA + ty * RPT, a);
        if constexpr (CPT == 8) {
            loadVector<real, 4>(Bs + kk * StrideB + tx * 4, b);
            loadVector<real, 4>(Bs + kk * StrideB + 64 + tx * 4, b + 4);
        }
        else
            loadVector<real, CPT>(Bs + kk * StrideB + tx * CPT, b);
#pragma unroll
        for (int x = 0; x < RPT; x++)
#pragma unroll
            for (int y = 0; y < CPT; y++)
                acc[x][y] = fma(a[x], b[y], acc[x][y]);
    }
}

/**
 * The epilogue of a thread's outputs (storeDenseOutput for each one inside the group's rows and the N columns).  A
 * thread's columns come in runs of 4 consecutive ones (tileColOf); in a backward product with vectorOut
 * (denseEpilogueVectors: every row of the arrays it touches starts 16-byte aligned) a run inside the N columns loads its
 * residual source and gradScale and stores its outputs 16 bytes at a time, with the same arithmetic per element: bitwise
 * the same.  Forward products store one value at a time: with 16-byte runs the first layer's forward took 2.13 ms
 * against 2.03 at medium 100,800, where the backward products gained 0.04-0.09 ms each (bench/NOTES.md v22).
 */
template <typename real, bool Forward, int RPT, int CPT, int Rows = 16 * RPT>
__device__ inline void storeTile(const DenseBatch<real>& batch, const DenseTileOrigin<real>& origin, const int* rowNodes,
                                 const real* __restrict__ A, int aStride, int N, int activation, int residual, real* __restrict__ deriv,
                                 int derivStride, real* __restrict__ out, int outStride, int outMapped, int vectorOut,
                                 const real acc[RPT][CPT]) {
    static_assert(CPT % 4 == 0, "a thread's columns come in runs of 4");
    const real* __restrict__ bias = batch.bias[origin.group];
    const int* outMap = outMapped ? rowNodes : nullptr;
#pragma unroll
    for (int x = 0; x < RPT; x++) {
        const int row = origin.rowBase + tileRowOf<RPT, Rows>(x);
        if (row >= origin.rowEnd)
            continue;
        const size_t a = rowIndex(batch, origin.aMap, row), o = rowIndex(batch, outMap, row), local = row - batch.chunkStart;
        if constexpr (Forward) {
#pragma unroll
            for (int y = 0; y < CPT; y++) {
                const int col = origin.colBase + tileColOf<CPT>(y);
                if (col < N)
                    storeDenseOutput<real, Forward>(bias, origin.timestep, A, aStride, activation, residual, deriv, derivStride, nullptr, 0,
                                                    out, outStride, a, o, local, col, acc[x][y]);
            }
        }
        else
#pragma unroll
            for (int y0 = 0; y0 < CPT; y0 += 4) {
                const int col0 = origin.colBase + tileColOf<CPT>(y0); // the run: col0 .. col0 + 3
                if (vectorOut && col0 + 4 <= N) {
                    real source[4] = {}, value[4];
                    if (residual)
                        loadVector<real, 4>(A + a * aStride + col0, source);
#pragma unroll
                    for (int j = 0; j < 4; j++)
                        value[j] = denseInputGradient(residual != 0, acc[x][y0 + j], source[j]);
                    if (batch.gradScale) {
                        real scale[4];
                        loadVector<real, 4>(batch.gradScale + local * batch.gradScaleStride + col0, scale);
#pragma unroll
                        for (int j = 0; j < 4; j++)
                            value[j] = value[j] * scale[j];
                    }
                    storeVector<real, 4>(out + o * outStride + col0, value);
                }
                else
#pragma unroll
                    for (int j = 0; j < 4; j++)
                        if (col0 + j < N)
                            storeDenseOutput<real, Forward>(bias, origin.timestep, A, aStride, activation, residual, deriv, derivStride,
                                                            batch.gradScale, batch.gradScaleStride, out, outStride, a, o, local, col0 + j,
                                                            acc[x][y0 + j]);
            }
    }
}

/**
 * storeTile of a forward product's Rows x 128 tiles (8 x 8 outputs a thread, Threads = 2 Rows) through shared memory, for
 * residual layers, whose epilogue loads the residual source beside storing the output and act'(z): each half of the tile
 * (Rows / 2 rows) goes to `staging` ([Rows / 2][128 + SharedPad] `real`s of shared memory, free once the products are
 * done), then thread t finishes column t % 128 of rows t / 128, t / 128 + Threads / 128, ..., so that a warp's loads and
 * stores are 32 consecutive values of one row instead of runs of 4 values Rows / 2 apart, and the activation is a
 * compile-time constant.  Each element goes through
 * storeDenseOutput as in storeTile: bitwise the same outputs.  Every thread of the block calls it (block barriers inside).
 */
template <typename real, int Activation, int Rows, int Threads>
__device__ inline void storeTileStaged(const DenseBatch<real>& batch, const DenseTileOrigin<real>& origin, const int* rowNodes,
                                       const real* __restrict__ A, int aStride, int N, real* __restrict__ deriv, int derivStride,
                                       real* __restrict__ out, int outStride, int outMapped, const real acc[8][8], real* staging) {
    constexpr int Half = Rows / 2, Stride = 128 + SharedPad, RowsAtOnce = Threads / 128;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16, c = threadIdx.x % 128, col = origin.colBase + c;
    const real* __restrict__ bias = batch.bias[origin.group];
    const int* outMap = outMapped ? rowNodes : nullptr;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        __syncthreads(); // the stages (or the other half) are free
#pragma unroll
        for (int x = 0; x < 4; x++)
#pragma unroll
            for (int y = 0; y < 8; y++) // tileRowOf<8, Rows>(4 h + x) - Half h, tileColOf<8>(y)
                staging[(ty * 4 + x) * Stride + (y / 4) * 64 + tx * 4 + y % 4] = acc[4 * h + x][y];
        __syncthreads();
        if (col < N)
#pragma unroll 8
            for (int j = 0; j < Half / RowsAtOnce; j++) {
                const int i = RowsAtOnce * j + threadIdx.x / 128, row = origin.rowBase + h * Half + i;
                if (row < origin.rowEnd)
                    storeDenseOutput<real, true>(bias, origin.timestep, A, aStride, Activation, 1, deriv, derivStride, nullptr, 0, out,
                                                 outStride, rowIndex(batch, origin.aMap, row), rowIndex(batch, outMap, row),
                                                 row - batch.chunkStart, col, staging[i * Stride + c]);
            }
    }
}

/**
 * C[row][c] = sum_k A(row, k) * B(k, c), B(k, c) = W[c * ldw + k] (forward,
 * W^T) or W[k * ldw + c] (backward, W), W the weights of the row's group.
 * A tile of 16 * RPT rows by 16 * CPT columns per block of 256 threads (16 x
 * 16), each thread RPT x CPT outputs; with 8 per thread a thread's rows (and
 * columns) are two runs of 4 that lie 64 apart, so the shared-memory vector
 * reads of a quarter warp are contiguous.  The next k-slice is loaded into
 * registers while the current one is multiplied out of shared memory (double
 * buffered).  Every output sums over k in order 0..K-1 whatever the tile, so
 * results do not depend on the launch choice.
 * A(row, k): forward, A[a(row) * aStride + k]; backward, dE/dz of the layer,
 * A[a(row) * aStride + k] * deriv[local(row) * derivStride + k] (act'(z), stored
 * by the forward pass; times the timestep if residual), formed here so that
 * dE/dz never goes to memory.  Epilogue: storeDenseOutput.
 */
template <typename real, bool Forward, int RPT, int CPT>
__global__ void __launch_bounds__(256, RPT == 8 ? 2 : 1)
    denseGemmKernel(DenseBatch<real> batch, const int* __restrict__ rowNodes, const real* __restrict__ A, int aStride, int aMapped, int K,
                    int N, int ldw, int activation, int residual, real* __restrict__ deriv, int derivStride, real* __restrict__ out,
                    int outStride, int outMapped, int vectorOut) {
    constexpr int Rows = 16 * RPT, Cols = 16 * CPT;
    // k-slices of 16; 8 for the 128 x 128 tiles (fewer prefetch registers: two blocks fit on a multiprocessor); 64 for
    // the 16-row tiles of small batches in float, whose time is the chain of k-slice loads.
    constexpr int TileK = RPT == 8 ? 8 : RPT == 1 && sizeof(real) == 4 ? 64 : 16;
    constexpr int ALoads = TileK * Rows / 256, BLoads = TileK * Cols / 256;
    // Padded by 4: 16-byte aligned vector reads in the inner loop, few bank conflicts on the transposed stores.
    __shared__ __align__(16) real As[2][TileK][Rows + SharedPad];
    __shared__ __align__(16) real Bs[2][TileK][Cols + SharedPad];
    const DenseTileOrigin<real> origin(batch, Rows, Cols, rowNodes, aMapped, blockIdx.x, blockIdx.y);
    const int group = origin.group, rowBase = origin.rowBase, rowEnd = origin.rowEnd, colBase = origin.colBase;
    const real* __restrict__ W = origin.W;
    const real* __restrict__ timestep = origin.timestep;
    const int* aMap = origin.aMap;
    // The A rows this thread loads (fixed over k): element e = threadIdx.x + 256 * m, kk = e % TileK, rr = e / TileK,
    // kept as 32-bit row indices (-1: past the group's end) to spare registers.
    const int aK = threadIdx.x % TileK;
    int aIndex[ALoads];
#pragma unroll
    for (int m = 0; m < ALoads; m++) {
        const int row = rowBase + (threadIdx.x + 256 * m) / TileK;
        aIndex[m] = row < rowEnd ? (int) rowIndex(batch, aMap, row) : -1;
    }
    real aNext[ALoads], bNext[BLoads];
    auto load = [&](int k0) {
#pragma unroll
        for (int m = 0; m < ALoads; m++) {
            const int k = k0 + aK;
            real value = 0;
            if (aIndex[m] >= 0 && k < K) {
                value = A[(size_t) aIndex[m] * aStride + k];
                if (!Forward) {
                    const size_t local = rowBase + (threadIdx.x + 256 * m) / TileK - batch.chunkStart;
                    value = denseOutputGradient(activation, residual != 0, value,
                                                activation != GraphIdentity ? deriv[local * derivStride + k] : real(1),
                                                residual ? timestep[k] : real(1));
                }
            }
            aNext[m] = value;
        }
#pragma unroll
        for (int m = 0; m < BLoads; m++) {
            const int e = threadIdx.x + 256 * m;
            int kk, cc;
            if (Forward)
                kk = e % TileK, cc = e / TileK;
            else
                cc = e % Cols, kk = e / Cols;
            const int col = colBase + cc, k = k0 + kk;
            real value = 0;
            if (col < N && k < K)
                value = Forward ? W[(size_t) col * ldw + k] : W[(size_t) k * ldw + col];
            bNext[m] = value;
        }
    };
    auto store = [&](int buffer) {
#pragma unroll
        for (int m = 0; m < ALoads; m++)
            As[buffer][aK][(threadIdx.x + 256 * m) / TileK] = aNext[m];
#pragma unroll
        for (int m = 0; m < BLoads; m++) {
            const int e = threadIdx.x + 256 * m;
            if (Forward)
                Bs[buffer][e % TileK][e / TileK] = bNext[m];
            else
                Bs[buffer][e / Cols][e % Cols] = bNext[m];
        }
    };
    real acc[RPT][CPT] = {};
    load(0);
    store(0);
    __syncthreads();
    int buffer = 0;
    for (int k0 = 0; k0 < K; k0 += TileK) {
        const bool more = k0 + TileK < K;
        if (more)
            load(k0 + TileK);
        multiplyTileSlice<real, RPT, CPT, TileK>(&As[buffer][0][0], &Bs[buffer][0][0], acc);
        if (more) {
            store(1 - buffer);
            __syncthreads();
            buffer = 1 - buffer;
        }
    }
    storeTile<real, Forward, RPT, CPT>(batch, origin, rowNodes, A, aStride, N, activation, residual, deriv, derivStride, out, outStride,
                                       outMapped, vectorOut, acc);
}

/**
 * Copies the first `valid` of V consecutive `real`s from global to shared
 * memory asynchronously and zeroes the rest (V sizeof(real) is 4, 8 or 16
 * bytes; both addresses aligned to it).  With valid = 0, src is not read.
 */
template <typename real, int V> __device__ inline void copyAsync(real* dst, const real* src, int valid) {
    __pipeline_memcpy_async(dst, src, V * sizeof(real), (V - valid) * sizeof(real));
}

/**
 * The dense product of denseGemmKernel (same operands, epilogue and order of
 * the sums: C is bitwise the same) for batches too small to fill the device
 * with 16-row tiles, where the 16-row kernel's time is the chain of k-slice
 * loads.  A tile of 8 rows by 32 columns per block of 128 threads, each
 * thread one row and columns c and c + 16; k is streamed through shared
 * memory in slices of Slice with asynchronous copies, Stages - 1 slices
 * in flight, so the loads of the next slices overlap the products of this
 * one and no register holds a prefetched value.  The copies move 16 bytes at
 * a time when every row and weight stride and base address allows it
 * (`vector`, decided on the host), else one value at a time.  Backward:
 * dE/dz = A act'(z) (times the timestep) is formed in shared memory when a
 * slice has landed.
 */
template <typename real> struct SmallTile {
    static constexpr int Rows = 8, Cols = 32, Threads = 128, Stages = 3;
    static constexpr int Slice = sizeof(real) == 4 ? 64 : 32;
    static constexpr int Vector = 16 / sizeof(real); ///< values per 16-byte copy
    static constexpr int BStride = Slice + Vector;   ///< forward B rows: 16-byte aligned, conflict-free for 16-byte reads
    real a[Stages][Rows][Slice];                     ///< A(row, k) (backward: dE/dz once formed)
    real b[Stages][Cols * BStride];                  ///< forward [Cols][BStride], backward [Slice][Cols]
    real deriv[Stages][Rows][Slice];                 ///< backward: act'(z)
    real timestep[Stages][Slice];                    ///< backward, residual: the timestep
};

template <typename real, bool Forward>
__global__ void __launch_bounds__(SmallTile<real>::Threads)
    denseSmallKernel(DenseBatch<real> batch, const int* __restrict__ rowNodes, const real* __restrict__ A, int aStride, int aMapped, int K,
                     int N, int ldw, int activation, int residual, real* __restrict__ deriv, int derivStride, real* __restrict__ out,
                     int outStride, int outMapped, int vector) {
    using Tile = SmallTile<real>;
    constexpr int Rows = Tile::Rows, Cols = Tile::Cols, Slice = Tile::Slice, Stages = Tile::Stages, Threads = Tile::Threads;
    constexpr int BStride = Tile::BStride;
    __shared__ __align__(16) Tile tile;
    const DenseTileOrigin<real> origin(batch, Rows, Cols, rowNodes, aMapped, blockIdx.x, blockIdx.y);
    const int group = origin.group, rowBase = origin.rowBase, rowEnd = origin.rowEnd, colBase = origin.colBase;
    const real* __restrict__ W = origin.W;
    const real* __restrict__ timestep = origin.timestep;
    const int* aMap = origin.aMap;
    const int numSlices = (K + Slice - 1) / Slice;
    const bool scaleA = !Forward && (activation != GraphIdentity || residual);
    const bool withDeriv = !Forward && activation != GraphIdentity, withTimestep = !Forward && residual;
    // The copies of slice s into stage s % Stages, V values per copy.
    auto issueWith = [&](auto width, int s) {
        constexpr int V = decltype(width)::value, KV = Slice / V;
        const int stage = s % Stages, k0 = s * Slice;
        for (int e = threadIdx.x; e < Rows * KV; e += Threads) {
            const int r = e / KV, kk = (e % KV) * V, row = rowBase + r, k = k0 + kk;
            const int valid = row < rowEnd ? max(0, min(V, K - k)) : 0;
            const size_t a = valid > 0 ? rowIndex(batch, aMap, row) : 0;
            copyAsync<real, V>(&tile.a[stage][r][kk], valid > 0 ? A + a * aStride + k : A, valid);
            if (withDeriv)
                copyAsync<real, V>(&tile.deriv[stage][r][kk],
                                   valid > 0 ? deriv + (size_t) (row - batch.chunkStart) * derivStride + k : deriv, valid);
        }
        if (Forward) // B(k, c) = W[c][k], stored [c][k]: consecutive threads read consecutive k
            for (int e = threadIdx.x; e < Cols * KV; e += Threads) {
                const int cc = e / KV, kk = (e % KV) * V, col = colBase + cc, k = k0 + kk;
                const int valid = col < N ? max(0, min(V, K - k)) : 0;
                copyAsync<real, V>(&tile.b[stage][cc * BStride + kk], valid > 0 ? W + (size_t) col * ldw + k : W, valid);
            }
        else // B(k, c) = W[k][c], stored [k][c]: consecutive threads read consecutive c
            for (int e = threadIdx.x; e < Slice * (Cols / V); e += Threads) {
                const int kk = e / (Cols / V), cc = (e % (Cols / V)) * V, col = colBase + cc, k = k0 + kk;
                const int valid = k < K ? max(0, min(V, N - col)) : 0;
                copyAsync<real, V>(&tile.b[stage][kk * Cols + cc], valid > 0 ? W + (size_t) k * ldw + col : W, valid);
            }
        if (withTimestep)
            for (int e = threadIdx.x; e < KV; e += Threads) {
                const int kk = e * V, valid = max(0, min(V, K - (k0 + kk)));
                copyAsync<real, V>(&tile.timestep[stage][kk], valid > 0 ? timestep + k0 + kk : timestep, valid);
            }
    };
    // Nothing past the last slice; the group is committed anyway, so that the wait below counts slices.
    auto issue = [&](int s) {
        if (s < numSlices) {
            if (vector)
                issueWith(std::integral_constant<int, Tile::Vector>(), s);
            else
                issueWith(std::integral_constant<int, 1>(), s);
        }
        __pipeline_commit();
    };
    const int r = threadIdx.x / 16, c = threadIdx.x % 16;
    real acc0 = 0, acc1 = 0;
    for (int s = 0; s < Stages - 1; s++)
        issue(s);
    for (int s = 0; s < numSlices; s++) {
        __pipeline_wait_prior(Stages - 2); // slice s has landed (this thread's copies) ...
        __syncthreads();                   // ... everyone's; and stage (s - 1) % Stages is free
        issue(s + Stages - 1);
        const int stage = s % Stages;
        if (scaleA) {
            // Each row is scaled by the 16 threads that multiply it (half a warp): a warp barrier is enough.
            for (int kk = c; kk < Slice; kk += 16)
                tile.a[stage][r][kk] =
                    denseOutputGradient(activation, withTimestep, tile.a[stage][r][kk], withDeriv ? tile.deriv[stage][r][kk] : real(1),
                                        withTimestep ? tile.timestep[stage][kk] : real(1));
            __syncwarp();
        }
        const int count = min(Slice, K - s * Slice);
        const real* a = tile.a[stage][r];
        const real* b = tile.b[stage];
        // Four k at a time from 16-byte aligned shared memory, then the rest one by one: k in order.
        int kk = 0;
        for (; kk + 4 <= count; kk += 4) {
            real a4[4], b0[4], b1[4];
            loadVector<real, 4>(a + kk, a4);
            if (Forward) {
                loadVector<real, 4>(b + c * BStride + kk, b0);
                loadVector<real, 4>(b + (c + 16) * BStride + kk, b1);
            }
            else
#pragma unroll
                for (int x = 0; x < 4; x++) {
                    b0[x] = b[(kk + x) * Cols + c];
                    b1[x] = b[(kk + x) * Cols + c + 16];
                }
#pragma unroll
            for (int x = 0; x < 4; x++) {
                acc0 = fma(a4[x], b0[x], acc0);
                acc1 = fma(a4[x], b1[x], acc1);
            }
        }
        for (; kk < count; kk++) {
            const real b0 = Forward ? b[c * BStride + kk] : b[kk * Cols + c];
            const real b1 = Forward ? b[(c + 16) * BStride + kk] : b[kk * Cols + c + 16];
            acc0 = fma(a[kk], b0, acc0);
            acc1 = fma(a[kk], b1, acc1);
        }
    }
    const int row = rowBase + r;
    if (row >= rowEnd)
        return;
    const size_t a = rowIndex(batch, aMap, row), o = rowIndex(batch, outMapped ? rowNodes : nullptr, row), local = row - batch.chunkStart;
    if (colBase + c < N)
        storeDenseOutput<real, Forward>(batch.bias[group], timestep, A, aStride, activation, residual, deriv, derivStride, batch.gradScale,
                                        batch.gradScaleStride, out, outStride, a, o, local, colBase + c, acc0);
    if (colBase + c + 16 < N)
        storeDenseOutput<real, Forward>(batch.bias[group], timestep, A, aStride, activation, residual, deriv, derivStride, batch.gradScale,
                                        batch.gradScaleStride, out, outStride, a, o, local, colBase + c + 16, acc1);
}

/**
 * The 128 x 128 tiles of denseGemmKernel (same operands, epilogue, thread
 * layout and order of the sums: C is bitwise the same), or (TileRows 64) 64 x
 * 128 tiles of 128 threads with the same 8 x 8 outputs a thread, their rows two
 * runs of 4 that lie 32 apart (DenseBatch::streamedHalf), with k-slices of 16
 * streamed through shared memory by asynchronous copies, Stages - 1 slices
 * in flight, instead of prefetched through registers: the register kernel
 * waits on its next slice's loads (v5: 3.7 of 8.6 cycles an instruction at
 * medium 100,800), and its registers hold 8-deep slices at most.  A (and
 * act'(z)) is copied 4 bytes at a time into the transposed layout [k][row].
 * B is stored [k][c], its rows copied 16 bytes at a time (whole vectors
 * only) from the transposed copy DenseBatch::weightT ([K][N]) in the
 * forward, which launchGemm takes only where every group's copy is 16-byte
 * aligned with N % 4 == 0, and from W itself in the backward when
 * `vectorB` (aligned the same way, ldw == N; otherwise 4 bytes at a time).
 * Backward: when a slice has landed each thread turns the A values it copied
 * into dE/dz (denseOutputGradient, as the register kernel does on its loads)
 * before the barrier.  One block per (row tile, column tile), the column
 * tiles of a row tile next to each other (blockIdx.x = tile * colTiles +
 * colTile), so a row tile's A is read from L2 by all its column tiles.
 * Dynamic shared memory of denseStreamedBytes<real, Forward, TileRows>() (over 48 KB:
 * configureDenseLayers sets the attribute).  Staged: NotStaged, the
 * epilogue is storeTile; else it goes through shared memory
 * (storeTileStaged; launchGemm takes it for the forward products of residual
 * layers) with Staged the layer's activation as a compile-time constant.
 */
constexpr int NotStaged = -1;

/**
 * The k-slice and stages of each pass (a forward stage holds two arrays, a backward one three).  At medium 100,800 on an
 * H200 forward slices of 32 k (2.006 against 1.944 ms for the first layer), 4 forward stages (1.945), backward slices of
 * 32 k in 2 stages (1.846 against 1.696) and 4 backward stages (the hidden layers 0.401 against 0.368) were no faster
 * (bench/NOTES.md v36).
 */
constexpr int ForwardTileK = 16, ForwardStages = 3, BackwardTileK = 16, BackwardStages = 3;

template <typename real, bool Forward, int TileRows> struct StreamedTile {
    static constexpr int Rows = TileRows, Cols = 128, Threads = 2 * TileRows, TileK = Forward ? ForwardTileK : BackwardTileK,
                         Stages = Forward ? ForwardStages : BackwardStages;
    static constexpr int StrideA = Rows + SharedPad, StrideB = Cols + SharedPad; ///< of As and Ds rows, of Bs rows
    /// A stage: As [TileK][StrideA], Bs [TileK][StrideB] and, backward, Ds [TileK][StrideA].
    static constexpr int StageSize = TileK * ((Forward ? 1 : 2) * StrideA + StrideB);
};

template <typename real, bool Forward, int Rows> constexpr size_t denseStreamedBytes() {
    using Tile = StreamedTile<real, Forward, Rows>;
    return (size_t) Tile::Stages * Tile::StageSize * sizeof(real) + Tile::Rows * sizeof(int);
}

/**
 * Blocks a multiprocessor that denseStreamedKernel is compiled for: two of the 128 x 128 tiles, four of the forward
 * 64 x 128 tiles (126-128 registers), three of the backward 64 x 128 tiles (149-151 registers: at four, 128 registers,
 * they spilled 20 bytes and ran 7-15% slower than the 128-row tiles on the same share; at three, on an H200 at 10,296
 * medium rows, the hidden layers' backward 0.061 -> 0.055 and 0.058 -> 0.052 ms, and faster than at four at 20,592
 * and 100,800 rows too: bench/NOTES.md v40).  denseStreamedHalfTiles' shares are counted in tiles, not in resident blocks.
 */
template <bool Forward, int TileRows> constexpr int denseStreamedMinBlocks() {
    return Forward || TileRows == 128 ? 256 / TileRows : 3;
}

template <typename real, bool Forward, bool Mapped, int Staged, int TileRows>
__global__ void __launch_bounds__(2 * TileRows, denseStreamedMinBlocks<Forward, TileRows>())
    denseStreamedKernel(DenseBatch<real> batch, const int* __restrict__ rowNodes, const real* __restrict__ A, int aStride, int K, int N,
                        int ldw, int activation, int residual, real* __restrict__ deriv, int derivStride, real* __restrict__ out,
                        int outStride, int outMapped, int vectorB, int vectorOut) {
    using Tile = StreamedTile<real, Forward, TileRows>;
    constexpr int Rows = Tile::Rows, Cols = Tile::Cols, Threads = Tile::Threads, TileK = Tile::TileK, Stages = Tile::Stages,
                  Stride = Tile::StrideA, StrideB = Tile::StrideB;
    constexpr int ALoads = TileK * Rows / Threads, BLoads = TileK * Cols / Threads, StageSize = Tile::StageSize;
    static_assert(!(Forward && Mapped), "the forward pass reads A by row");
    static_assert(Staged == NotStaged || (Forward && !Mapped), "the staged epilogue is for forward products (of residual layers)");
    static_assert(Rows / 2 * StrideB <= Stages * StageSize, "storeTileStaged's half tile fits in the stages");
    extern __shared__ __align__(16) unsigned char streamedShared[];
    real* shared = reinterpret_cast<real*>(streamedShared);
    const int colTiles = (N + Cols - 1) / Cols;
    const DenseTileOrigin<real> origin(batch, Rows, Cols, rowNodes, Mapped ? 1 : 0, blockIdx.x / colTiles, blockIdx.x % colTiles);
    const int rowBase = origin.rowBase, colBase = origin.colBase;
    // B(k, c) = rowsB[k * ldb + c]: the backward's W, or the forward's transposed copy of it ([K][N]).
    const real* __restrict__ rowsB = Forward ? batch.weightT[origin.group] : origin.W;
    const int ldb = Forward ? N : ldw;
    const bool withDeriv = !Forward && activation != GraphIdentity;
    // This thread copies A(row, k0 + aK) (and act'(z)) of tile rows r0 + RowStep m, m < ALoads, as in denseGemmKernel.
    constexpr int RowStep = Threads / TileK;
    const int aK = threadIdx.x % TileK, r0 = threadIdx.x / TileK, numSlices = (K + TileK - 1) / TileK;
    const int rowsHere = min(Rows, origin.rowEnd - rowBase); // tile rows inside the group
    // Whole tiles (every row in the group, every column below N, K a multiple of the slice) copy without checks.
    const bool wholeA = rowsHere == Rows && K % TileK == 0, wholeB = colBase + Cols <= N && K % TileK == 0;
    // act'(z) is read by row; so is A but for the node network's first backward product (Mapped: A by node).  Read by row,
    // a thread's copies are a base address plus multiples of RowStep rows; by node, the rows' indices in A (-1: past the
    // group's end) wait in shared memory after the stages (in registers they would spill).
    int* aIndex = reinterpret_cast<int*>(shared + Stages * StageSize);
    if (Mapped && threadIdx.x < Rows)
        aIndex[threadIdx.x] = threadIdx.x < rowsHere ? (int) rowIndex(batch, origin.aMap, rowBase + threadIdx.x) : -1;
    if (Mapped)
        __syncthreads();
    const size_t firstLocal = (size_t) (rowBase - batch.chunkStart + r0); // this thread's first row in the chunk arrays
    const real* aFirst = Mapped ? A : A + firstLocal * aStride + aK;
    const real* dFirst = withDeriv ? deriv + firstLocal * derivStride + aK : deriv;
    auto As = [&](int stage) { return shared + stage * StageSize; };
    auto Bs = [&](int stage) { return shared + stage * StageSize + TileK * Stride; };
    auto Ds = [&](int stage) { return shared + stage * StageSize + TileK * (Stride + StrideB); };
    auto issue = [&](int s) {
        if (s < numSlices) {
            const int stage = s % Stages, k0 = s * TileK, kA = k0 + aK; // kA: the k of this thread's A copies
            // Each address from the last, opaque to the compiler: otherwise it keeps all eight (or their offsets) live across
            // the products, and they spill.
            // A (or act'(z)) rows of this thread from `first`, `stride` apart, into `target`; whole: every copy valid
            // (compile-time), so no checks or selects; the same copies otherwise.
            auto copyRows = [&](auto whole, real* target, const real* first, int stride, const real* fallback) {
                const real* a = opaque(first) + k0;
#pragma unroll
                for (int m = 0; m < ALoads; m++, a = opaque(a + RowStep * stride)) {
                    const int valid = decltype(whole)::value || (kA < K && r0 + RowStep * m < rowsHere) ? 1 : 0;
                    copyAsync<real, 1>(target + RowStep * m, valid ? a : fallback, valid);
                }
            };
            auto copyTileRows = [&](real* target, const real* first, int stride, const real* fallback) {
                if (wholeA)
                    copyRows(std::true_type(), target, first, stride, fallback);
                else
                    copyRows(std::false_type(), target, first, stride, fallback);
            };
            if (Mapped) {
                real* target = As(stage) + aK * Stride + r0;
#pragma unroll 1
                for (int m = 0; m < ALoads; m++) {
                    const int index = aIndex[r0 + RowStep * m], valid = index >= 0 && kA < K ? 1 : 0;
                    copyAsync<real, 1>(target + RowStep * m, valid ? A + (size_t) index * aStride + kA : A, valid);
                }
            }
            else
                copyTileRows(As(stage) + aK * Stride + r0, aFirst, aStride, A);
            if (withDeriv)
                copyTileRows(Ds(stage) + aK * Stride + r0, dFirst, derivStride, deriv);
            auto copyB = [&](auto whole) {
                constexpr bool Whole = decltype(whole)::value;
                if (Forward || vectorB) { // B(k, c) = rowsB[k][c]: 16 bytes at a time along c; ldb = N, N % V == 0 (launchGemm)
                    constexpr int V = 16 / sizeof(real);
#pragma unroll
                    for (int m = 0; m < BLoads / V; m++) {
                        const int e = threadIdx.x + Threads * m, kk = e / (Cols / V), cc = V * (e % (Cols / V)), col = colBase + cc,
                                  k = k0 + kk;
                        const int valid = Whole || (k < K && col < N) ? V : 0;
                        copyAsync<real, V>(Bs(stage) + kk * StrideB + cc, valid > 0 ? rowsB + (size_t) k * ldb + col : rowsB, valid);
                    }
                }
                else // the backward's unaligned weights (ldw != N or an odd base; the pipeline's products never are): rolled, so
                     // that the compiler does not keep its copies' indices live across the products (they spilled, v21)
#pragma unroll 1
                    for (int m = 0; m < BLoads; m++) {
                        const int e = threadIdx.x + Threads * m, kk = e / Cols, cc = e % Cols, col = colBase + cc, k = k0 + kk;
                        const int valid = Whole || (col < N && k < K) ? 1 : 0;
                        copyAsync<real, 1>(Bs(stage) + kk * StrideB + cc, valid ? origin.W + (size_t) k * ldw + col : origin.W, valid);
                    }
            };
            if (wholeB)
                copyB(std::true_type());
            else
                copyB(std::false_type());
        }
        __pipeline_commit(); // also past the last slice, so that the wait below counts slices
    };
    real acc[8][8] = {};
    for (int s = 0; s < Stages - 1; s++)
        issue(s);
    for (int s = 0; s < numSlices; s++) {
        __pipeline_wait_prior(Stages - 2); // this thread's copies of slice s have landed
        const int stage = s % Stages;
        // dE/dz of the values this thread copied.  Rows past the group's end hold zeros (or whatever this makes of them): a row
        // of A feeds only the same row of the output, and those are never stored.
        const int kA = s * TileK + aK;
        if (!Forward && (withDeriv || residual) && kA < K) {
            const real t = residual ? origin.timestep[kA] : real(1);
            real* a = As(stage) + aK * Stride + r0;
            const real* d = Ds(stage) + aK * Stride + r0;
#pragma unroll
            for (int m = 0; m < ALoads; m++)
                a[RowStep * m] = denseOutputGradient(activation, residual != 0, a[RowStep * m], withDeriv ? d[RowStep * m] : real(1), t);
        }
        __syncthreads(); // everyone's copies (and dE/dz); stage (s - 1) % Stages is free again
        issue(s + Stages - 1);
        multiplyTileSlice<real, 8, 8, TileK, Rows>(As(stage), Bs(stage), acc);
    }
    if constexpr (Staged != NotStaged) // forward products of residual layers (launchGemm)
        storeTileStaged<real, Staged, Rows, Threads>(batch, origin, rowNodes, A, aStride, N, deriv, derivStride, out, outStride, outMapped,
                                                     acc, shared);
    else
        storeTile<real, Forward, 8, 8, Rows>(batch, origin, rowNodes, A, aStride, N, activation, residual, deriv, derivStride, out,
                                             outStride, outMapped, vectorOut, acc);
}

inline bool aligned16(const void* p) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

/** Whether every group has the matrix (DenseBatch::weight or weightT) and each of its rows (ld `real`s apart) starts 16-byte aligned. */
template <typename real> bool rowsAligned16(const DenseBatch<real>& batch, const real* const (&matrices)[MaxBatchedGroups], int ld) {
    bool ok = ld % (16 / sizeof(real)) == 0;
    for (int g = 0; g < batch.numGroups; g++)
        ok = ok && matrices[g] && aligned16(matrices[g]);
    return ok;
}

/**
 * Whether denseSmallKernel may copy 16 bytes at a time: every row of A (and
 * of act'(z)) and of each group's weights starts 16-byte aligned.
 */
template <typename real>
bool smallTileVectorCopies(const DenseBatch<real>& batch, const real* A, int aStride, int ldw, const real* deriv, int derivStride,
                           bool forward, bool withDeriv, bool residual) {
    constexpr int V = SmallTile<real>::Vector;
    bool ok = aligned16(A) && aStride % V == 0 && rowsAligned16(batch, batch.weight, ldw);
    if (!forward && withDeriv)
        ok = ok && aligned16(deriv) && derivStride % V == 0;
    if (!forward && residual)
        for (int g = 0; g < batch.numGroups; g++)
            ok = ok && aligned16(batch.timestep[g]);
    return ok;
}

/**
 * Whether storeTile may load and store the runs of 4 outputs of a backward product 16 bytes at a time: every row of
 * the output, of the residual source and of gradScale starts 16-byte aligned.
 */
template <typename real>
bool denseEpilogueVectors(const DenseBatch<real>& batch, const real* A, int aStride, bool residual, const real* out, int outStride) {
    bool ok = aligned16(out) && outStride % 4 == 0;
    if (residual)
        ok = ok && aligned16(A) && aStride % 4 == 0;
    if (batch.gradScale)
        ok = ok && aligned16(batch.gradScale) && batch.gradScaleStride % 4 == 0;
    return ok;
}

/** Launches denseGemmKernel (denseSmallKernel for 8-row tiles) with the batch's tile. */
template <typename real, bool Forward>
void launchGemm(const DenseBatch<real>& batch, int N, cudaStream_t stream, const int* rowNodes, const real* A, int aStride, bool aMapped,
                int K, int ldw, int activation, bool residual, real* deriv, int derivStride, real* out, int outStride, bool outMapped) {
    dim3 blocks(batch.tileStart[batch.numGroups], (N + denseTileColumns(batch.tileRows) - 1) / denseTileColumns(batch.tileRows));
    const int vectorOut = !Forward && denseEpilogueVectors(batch, A, aStride, residual, out, outStride) ? 1 : 0;
#define GRAPH_GEMM(RPT, CPT)                                                                                                               \
    denseGemmKernel<real, Forward, RPT, CPT><<<blocks, 256, 0, stream>>>(batch, rowNodes, A, aStride, aMapped ? 1 : 0, K, N, ldw,          \
                                                                         activation, residual ? 1 : 0, deriv, derivStride, out, outStride, \
                                                                         outMapped ? 1 : 0, vectorOut)
    if (batch.tileRows == 8) {
        const bool vector =
            smallTileVectorCopies(batch, A, aStride, ldw, deriv, derivStride, Forward, activation != GraphIdentity, residual);
        denseSmallKernel<real, Forward><<<blocks, SmallTile<real>::Threads, 0, stream>>>(
            batch, rowNodes, A, aStride, aMapped ? 1 : 0, K, N, ldw, activation, residual ? 1 : 0, deriv, derivStride, out, outStride,
            outMapped ? 1 : 0, vector ? 1 : 0);
    }
    else if (batch.tileRows == 16)
        GRAPH_GEMM(1, 4);
    else if (batch.tileRows == 32)
        GRAPH_GEMM(2, 4);
    else if constexpr (sizeof(real) == 4) {
        // Both passes streamed where the device has the shared memory: at medium 100,800 the first layer's forward takes
        // 2.07 ms against 2.25 through registers, its backward 2.31 against 3.67 (bench/NOTES.md v18, dense_layers_bench).
        // (A read by node happens only in a backward product; a forward one would take the register kernel.)
        // B's rows 16 bytes at a time, whole vectors only (the kernel copies no partial vector): the backward's W (ldw == N
        // there) or the forward's transposed copy ([K][N]).  At medium 100,800 the copies of W^T by 4 bytes took about 8% of
        // the first layer's forward instructions (bench/NOTES.md v23); compiled out of the forward kernels, their indices no
        // longer hold registers through the products' loop, which now loads the next k's operands ahead (the first layer's
        // forward 1.945 -> 1.757 ms, v36).  Forward products with other weights take the register kernel, whose tiles are
        // bitwise the same; the backward keeps a 4-byte fallback (without it the compiler scheduled its loop worse: 1.696 ->
        // 1.799 ms).
        const bool streamedRows = batch.tileRows == 128 || (batch.tileRows == 64 && batch.streamedHalf);
        const bool vectorB =
            streamedRows && (Forward ? rowsAligned16(batch, batch.weightT, N) : ldw == N && rowsAligned16(batch, batch.weight, ldw));
        if (streamedRows && batch.streamedWide && (vectorB || !Forward) && !(Forward && aMapped)) {
            // The forward products of residual layers (the hidden layers of equal width) finish their tiles through shared
            // memory: at medium 100,800 the 240-wide forward takes 0.445 ms against 0.565 with storeTile; the first layer's
            // forward (2.146 against 2.041) and the backward products (0.476 against 0.471) lose by it (bench/NOTES.md v21, v22).
            auto launchStreamed = [&](auto rows) {
                constexpr int Rows = decltype(rows)::value;
                auto kernel = denseStreamedKernel<real, Forward, false, NotStaged, Rows>;
                if (aMapped)
                    kernel = denseStreamedKernel<real, Forward, !Forward, NotStaged, Rows>;
                else if constexpr (Forward) {
                    if (residual)
                        kernel = activation == GraphTanh   ? denseStreamedKernel<real, true, false, GraphTanh, Rows>
                                 : activation == GraphSilu ? denseStreamedKernel<real, true, false, GraphSilu, Rows>
                                                           : denseStreamedKernel<real, true, false, GraphIdentity, Rows>;
                }
                using Tile = StreamedTile<real, Forward, Rows>;
                const int grid = blocks.x * ((N + Tile::Cols - 1) / Tile::Cols); // its own column tiles (blocks.y: 64 x 64 ones at 64 rows)
                kernel<<<grid, Tile::Threads, denseStreamedBytes<real, Forward, Rows>(), stream>>>(
                    batch, rowNodes, A, aStride, K, N, ldw, activation, residual ? 1 : 0, deriv, derivStride, out, outStride,
                    outMapped ? 1 : 0, vectorB ? 1 : 0, vectorOut);
            };
            if (batch.tileRows == 64)
                launchStreamed(std::integral_constant<int, 64>());
            else
                launchStreamed(std::integral_constant<int, 128>());
        }
        else if (batch.tileRows == 128)
            GRAPH_GEMM(8, 8);
        else
            GRAPH_GEMM(4, 4);
    }
    else
        GRAPH_GEMM(4, 4);
#undef GRAPH_GEMM
}

/**
 * E_i = w . h_i + b + shift per row (a warp per row, fixed butterfly);
 * particleEnergy[node] = E_i; gradHidden[local] = w when gradHidden; when
 * status, E_i is added to the evaluation's fixed-point energy (or reported
 * when not finite).
 */
template <typename real>
__global__ void energyOutputKernel(DenseBatch<real> batch, const int* __restrict__ rowNodes, const real* __restrict__ hidden, int stride,
                                   int width, real* __restrict__ particleEnergy, real* __restrict__ gradHidden, GraphStatus* status) {
    const int lane = threadIdx.x & 31;
    const int firstRow = batch.rowStart[0], lastRow = batch.rowStart[batch.numGroups];
    for (int row = firstRow + ((blockIdx.x * blockDim.x + threadIdx.x) >> 5); row < lastRow; row += (gridDim.x * blockDim.x) >> 5) {
        const int group = groupOfRow(batch, row);
        const real* __restrict__ weight = batch.weight[group];
        const size_t local = row - batch.chunkStart;
        const real sum = warpDot(weight, hidden + local * stride, width, lane);
        if (gradHidden)
            for (int k = lane; k < width; k += 32)
                gradHidden[local * stride + k] = weight[k];
        if (lane == 0) {
            const int node = rowNodes[row];
            const real energy = sum + batch.bias[group][0] + batch.energyShift[group];
            particleEnergy[node] = energy;
            if (status)
                addParticleEnergy(status, node, energy);
        }
    }
}

} // namespace

template <typename real> int configureDenseLayers() {
    if constexpr (sizeof(real) != 4)
        return 0; // 128 x 128 tiles are float only
    else {
        int device = 0, perBlock = 0, perMultiprocessor = 0;
        if (cudaGetDevice(&device) != cudaSuccess ||
            cudaDeviceGetAttribute(&perBlock, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess ||
            cudaDeviceGetAttribute(&perMultiprocessor, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device) != cudaSuccess) {
            cudaGetLastError();
            return 0;
        }
        // The larger of the two passes' stages, two blocks a multiprocessor (1 KB of each block's shared memory is the system's).
        const size_t bytes = std::max(denseStreamedBytes<real, false, 128>(), denseStreamedBytes<real, true, 128>());
        if ((size_t) perBlock < bytes || (size_t) perMultiprocessor < 2 * (bytes + 1024))
            return 0;
        auto allow = [](auto rows) {
            constexpr int Rows = decltype(rows)::value;
            const size_t forward = denseStreamedBytes<real, true, Rows>(), backward = denseStreamedBytes<real, false, Rows>();
            auto set = [](auto kernel, size_t size) {
                return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int) size) == cudaSuccess;
            };
            return set(denseStreamedKernel<real, true, false, NotStaged, Rows>, forward) &&
                   set(denseStreamedKernel<real, true, false, GraphTanh, Rows>, forward) &&
                   set(denseStreamedKernel<real, true, false, GraphSilu, Rows>, forward) &&
                   set(denseStreamedKernel<real, true, false, GraphIdentity, Rows>, forward) &&
                   set(denseStreamedKernel<real, false, false, NotStaged, Rows>, backward) &&
                   set(denseStreamedKernel<real, false, true, NotStaged, Rows>, backward);
        };
        const bool ok = allow(std::integral_constant<int, 128>()) && allow(std::integral_constant<int, 64>());
        // The 64 x 128 tiles where four blocks fit a multiprocessor (as denseStreamedHalfTiles assumes).
        const size_t halfBytes = std::max(denseStreamedBytes<real, false, 64>(), denseStreamedBytes<real, true, 64>());
        const bool half = (size_t) perMultiprocessor >= 4 * (halfBytes + 1024);
        cudaGetLastError(); // reported by the return value, not left for the next launch's check
        return ok ? (half ? 2 : 1) : 0;
    }
}

int chooseDenseTileRows(int rows, int numOutputs, int numMultiprocessors, bool allowWide) {
    for (int tileRows : DenseTileRowChoices) {
        if (tileRows == 128 && !allowWide)
            continue;
        const int columnTiles = (numOutputs + denseTileColumns(tileRows) - 1) / denseTileColumns(tileRows);
        const long long blocks = (long long) ((rows + tileRows - 1) / tileRows) * columnTiles;
        if (2 * blocks >= (long long) denseTileBlocksPerTwoMultiprocessors(tileRows, allowWide) * numMultiprocessors)
            return tileRows;
    }
    return DenseTileRowChoices[4];
}

template <typename real> int rowsOf(const DenseBatch<real>& batch) {
    return batch.rowStart[batch.numGroups] - batch.rowStart[0];
}

template <typename real>
void launchDenseForward(const DenseBatch<real>& batch, const int* rowNodes, const real* input, int inStride, int numInputs, int numOutputs,
                        int activation, bool residual, real* derivative, real* output, int outStride, bool outputByNode,
                        cudaStream_t stream) {
    if (batch.tileStart[batch.numGroups] == 0)
        return;
    launchGemm<real, true>(batch, numOutputs, stream, rowNodes, input, inStride, false, numInputs, numInputs, activation, residual,
                           derivative, outStride, output, outStride, outputByNode);
}

template <typename real>
void launchDenseBackward(const DenseBatch<real>& batch, const int* rowNodes, const real* gradOutput, int gradStride, bool gradByNode,
                         const real* derivative, int derivStride, int numInputs, int numOutputs, int activation, bool residual,
                         real* gradInput, int inStride, cudaStream_t stream) {
    if (batch.tileStart[batch.numGroups] == 0)
        return;
    launchGemm<real, false>(batch, numInputs, stream, rowNodes, gradOutput, gradStride, gradByNode, numOutputs, numInputs, activation,
                            residual, const_cast<real*>(derivative), derivStride, gradInput, inStride, false);
}

template <typename real>
void launchEnergyOutput(const DenseBatch<real>& batch, const int* rowNodes, const real* hidden, int stride, int width, real* particleEnergy,
                        real* gradHidden, GraphStatus* status, cudaStream_t stream) {
    const int rows = rowsOf(batch);
    if (rows == 0)
        return;
    const int warpsPerBlock = 4;
    const int blocks = (int) std::min<size_t>(((size_t) rows + warpsPerBlock - 1) / warpsPerBlock, 65535 * 8);
    energyOutputKernel<real>
        <<<blocks, 32 * warpsPerBlock, 0, stream>>>(batch, rowNodes, hidden, stride, width, particleEnergy, gradHidden, status);
}

#define GRAPH_INSTANTIATE_DENSE(real)                                                                                                      \
    template int configureDenseLayers<real>();                                                                                             \
    template void launchDenseForward<real>(const DenseBatch<real>&, const int*, const real*, int, int, int, int, bool, real*, real*, int,  \
                                           bool, cudaStream_t);                                                                            \
    template void launchDenseBackward<real>(const DenseBatch<real>&, const int*, const real*, int, bool, const real*, int, int, int, int,  \
                                            bool, real*, int, cudaStream_t);                                                               \
    template void launchEnergyOutput<real>(const DenseBatch<real>&, const int*, const real*, int, int, real*, real*, GraphStatus*,         \
                                           cudaStream_t);
GRAPH_INSTANTIATE_DENSE(float)
GRAPH_INSTANTIATE_DENSE(double)

} // namespace GraphPlugin
