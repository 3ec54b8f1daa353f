/**
 * Would a chunk pipeline that runs the edge scans of some rows while the dense layers of others run pay?
 * (bench/NOTES.md v26.)
 *
 * At medium 100,800 the plugin runs its kernels one after another: the moments (3.8 ms, at 82-88% of the L2's
 * throughput), the dense layers (5.3 ms, bound by the FMA pipes) and the force scan (4.2 ms, L2) over all rows.  The
 * force of center i needs only dE/dA_i (no interaction block), so rows could go through moments, network and force
 * scan in chunks, and the chunks on different streams would overlap a scan with a network.  This probe measures what
 * that could give, with stand-ins: the moments-like row scan of table_l1_probe.cu (synthetic medium rows, rows in
 * center-type order, table_probe_common.cuh) for both scans, and cuBLAS SGEMM (FP32, no TF32) for the medium
 * fitting network's six products (forward 1536 -> 240 -> 240 -> 240, backward the transposes; no activations).
 *
 *   scan, dense          each over all rows, alone (one stream)
 *   scan || dense        the two at once on two streams, no dependencies: the most overlap there is
 *   serial K             scan(all), dense(all), scan(all) as K chunks each, one stream: the plugin's order
 *   chunks K / S         chunk c through scan, dense, scan on stream c % S (S = 2 or 3 streams)
 *   priority K           scans on one stream and the dense products on another of higher priority, each chunk's dense
 *                        after its first scan and its second scan after its dense (events)
 *
 * Prints the mean ms of 10 runs each.  Builds with -lcublas.
 *
 *   nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -o overlap_probe overlap_probe.cu -lcublas
 *   overlap_probe [n [runs]]
 */

#include "table_probe_common.cuh"

#include <cublas_v2.h>
#include <vector>

namespace {

using namespace table_probe;

#define CUBLAS_CHECK(call)                                                                                                                 \
    do {                                                                                                                                   \
        cublasStatus_t status_ = (call);                                                                                                   \
        if (status_ != CUBLAS_STATUS_SUCCESS) {                                                                                            \
            std::fprintf(stderr, "%s:%d: cuBLAS status %d\n", __FILE__, __LINE__, (int) status_);                                        \
            std::exit(1);                                                                                                                  \
        }                                                                                                                                  \
    } while (0)

/** The medium grade's fitting network: descriptor 3 x 64 x 8, three hidden layers of 240. */
constexpr int Descriptor = NL * M * 8, Width = 240;

/** Device buffers of the stand-ins, rows in the type-sorted order (row w of every [n][...] array is order[w]'s). */
struct Buffers {
    const float4* geo;
    const int *ntype, *types, *order;
    const float* table;
    float *A, *B;           ///< the two scans' outputs [n][H][M]
    float *X, *dX;          ///< network input and its gradient [n][Descriptor]
    float *Z[3], *dZ[2];    ///< activations [n][Width] and the gradients of the first two
    float *W1, *W2, *W3;    ///< [Descriptor][Width], [Width][Width] x 2
};

void scan(const Buffers& b, float* out, int first, int count, cudaStream_t stream) {
    scanRows<<<(count + Warps - 1) / Warps, 32 * Warps, 0, stream>>>(b.geo, b.ntype, b.types, b.order + first, b.table, out, count);
}

/** Row-major C (m x n) = A (m x k) B (k x n), or with `transposeB` A (m x k) B^T for B (n x k). */
void gemm(cublasHandle_t handle, const float* A, const float* B, float* C, int m, int n, int k, bool transposeB) {
    const float one = 1, zero = 0;
    // Column-major: C^T (n x m) = op(B)^T A^T.
    CUBLAS_CHECK(cublasSgemm(handle, transposeB ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, B, transposeB ? k : n, A, k, &zero,
                             C, n));
}

/** The six products of rows [first, first + count). */
void dense(const Buffers& b, cublasHandle_t handle, int first, int count) {
    const size_t r = first;
    gemm(handle, b.X + r * Descriptor, b.W1, b.Z[0] + r * Width, count, Width, Descriptor, false);
    gemm(handle, b.Z[0] + r * Width, b.W2, b.Z[1] + r * Width, count, Width, Width, false);
    gemm(handle, b.Z[1] + r * Width, b.W3, b.Z[2] + r * Width, count, Width, Width, false);
    gemm(handle, b.Z[2] + r * Width, b.W3, b.dZ[1] + r * Width, count, Width, Width, true);
    gemm(handle, b.dZ[1] + r * Width, b.W2, b.dZ[0] + r * Width, count, Width, Width, true);
    gemm(handle, b.dZ[0] + r * Width, b.W1, b.dX + r * Descriptor, count, Descriptor, Width, true);
}

float* randomFloats(size_t count, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uniform(-0.1f, 0.1f);
    std::vector<float> values(count);
    for (float& x : values)
        x = uniform(rng);
    return uploadFloats(values);
}

} // namespace

int main(int argc, char** argv) {
    const int n = argc > 1 ? std::atoi(argv[1]) : 100800;
    const int runs = argc > 2 ? std::atoi(argv[2]) : 10;
    const Rows rows(n);
    std::vector<int> order;
    for (int ti = 0; ti < T; ti++)
        for (int i = 0; i < n; i++)
            if (rows.types[i] == ti)
                order.push_back(i);
    Buffers b;
    b.geo = upload(rows.geo);
    b.ntype = upload(rows.ntype);
    b.types = upload(rows.types);
    b.order = upload(order);
    b.table = upload(rows.table);
    b.A = deviceZeros((size_t) n * H * M);
    b.B = deviceZeros((size_t) n * H * M);
    b.X = randomFloats((size_t) n * Descriptor, 1);
    b.dX = deviceZeros((size_t) n * Descriptor);
    for (float*& z : b.Z)
        z = deviceZeros((size_t) n * Width);
    for (float*& dz : b.dZ)
        dz = deviceZeros((size_t) n * Width);
    b.W1 = randomFloats((size_t) Descriptor * Width, 2);
    b.W2 = randomFloats((size_t) Width * Width, 3);
    b.W3 = randomFloats((size_t) Width * Width, 4);

    int least = 0, greatest = 0;
    CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    constexpr int MaxStreams = 3;
    cudaStream_t streams[MaxStreams], high;
    cublasHandle_t handles[MaxStreams], highHandle;
    for (int s = 0; s < MaxStreams; s++) {
        CHECK(cudaStreamCreate(&streams[s]));
        CUBLAS_CHECK(cublasCreate(&handles[s]));
        CUBLAS_CHECK(cublasSetMathMode(handles[s], CUBLAS_PEDANTIC_MATH)); // FP32 products, never TF32
        CUBLAS_CHECK(cublasSetStream(handles[s], streams[s]));
    }
    CHECK(cudaStreamCreateWithPriority(&high, cudaStreamDefault, greatest));
    CUBLAS_CHECK(cublasCreate(&highHandle));
    CUBLAS_CHECK(cublasSetMathMode(highHandle, CUBLAS_PEDANTIC_MATH));
    CUBLAS_CHECK(cublasSetStream(highHandle, high));
    std::vector<cudaEvent_t> events(64);
    for (cudaEvent_t& e : events)
        CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));

    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    const double flops = 2.0 * 2 * n * ((double) Descriptor * Width + 2.0 * Width * Width);
    std::printf("%s, %d SMs; n = %d rows of %d edges; network %d -> %d x 3, %.1f GFLOP an evaluation\n", prop.name,
                prop.multiProcessorCount, n, E, Descriptor, Width, flops / 1e9);
    // Every stream is a blocking stream: the timer's events on the legacy default stream wait for all of them.
    const float scanMs = timeIt([&] { scan(b, b.A, 0, n, streams[0]); }, runs);
    const float denseMs = timeIt([&] { dense(b, handles[0], 0, n); }, runs);
    std::printf("%-22s %8.3f ms\n%-22s %8.3f ms  (%.1f TFLOP/s)\n", "scan", scanMs, "dense", denseMs, flops / denseMs / 1e9);
    const float serialSum = 2 * scanMs + denseMs;
    std::printf("%-22s %8.3f ms  (scan, dense, scan)\n", "sum", serialSum);
    const float both = timeIt(
        [&] {
            scan(b, b.A, 0, n, streams[0]);
            dense(b, handles[1], 0, n);
        },
        runs);
    std::printf("%-22s %8.3f ms  (against %.3f in turn)\n", "scan || dense", both, scanMs + denseMs);

    for (int K : {1, 2, 4, 8, 16}) {
        auto bounds = [&](int c, int& first, int& count) {
            first = (int) ((long long) n * c / K);
            count = (int) ((long long) n * (c + 1) / K) - first;
        };
        const float serial = timeIt(
            [&] {
                int first, count;
                for (int c = 0; c < K; c++) {
                    bounds(c, first, count);
                    scan(b, b.A, first, count, streams[0]);
                }
                for (int c = 0; c < K; c++) {
                    bounds(c, first, count);
                    dense(b, handles[0], first, count);
                }
                for (int c = 0; c < K; c++) {
                    bounds(c, first, count);
                    scan(b, b.B, first, count, streams[0]);
                }
            },
            runs);
        std::printf("serial %-15d %8.3f ms\n", K, serial);
        if (K == 1)
            continue;
        for (int S : {2, 3}) {
            const float chunked = timeIt(
                [&] {
                    int first, count;
                    for (int c = 0; c < K; c++) {
                        bounds(c, first, count);
                        scan(b, b.A, first, count, streams[c % S]);
                        dense(b, handles[c % S], first, count);
                        scan(b, b.B, first, count, streams[c % S]);
                    }
                },
                runs);
            std::printf("chunks %-3d / %d streams  %8.3f ms  (%.2fx serial)\n", K, S, chunked, serial / chunked);
        }
        if (2 * K > (int) events.size())
            continue;
        const float prioritized = timeIt(
            [&] {
                int first, count;
                // Scans on streams[0] in the order moments(0), moments(1), forces(0), moments(2), forces(1), ...; the
                // products on the high-priority stream.
                for (int c = 0; c <= K; c++) {
                    if (c < K) {
                        bounds(c, first, count);
                        scan(b, b.A, first, count, streams[0]);
                        CHECK(cudaEventRecord(events[2 * c], streams[0]));
                        CHECK(cudaStreamWaitEvent(high, events[2 * c]));
                        dense(b, highHandle, first, count);
                        CHECK(cudaEventRecord(events[2 * c + 1], high));
                    }
                    if (c > 0) {
                        bounds(c - 1, first, count);
                        CHECK(cudaStreamWaitEvent(streams[0], events[2 * (c - 1) + 1]));
                        scan(b, b.B, first, count, streams[0]);
                    }
                }
            },
            runs);
        std::printf("priority %-13d %8.3f ms  (%.2fx serial)\n", K, prioritized, serial / prioritized);
    }
    return 0;
}
