/**
 * The open-boundary grid set-up of the graph build (launchGridSetup, platforms/cuda/src/GraphBuildKernels.cu) against
 * the kernel it replaced in v67, in the same run: before, one block of 256 threads read every particle's position for
 * the bounding box; now blocks of bounds (one a GridBoundsParticles particles, up to GridBoundsMaxBlocks) and one
 * block that combines their boxes.  Per size: the mean time of a set-up (200 back to back on one stream, CUDA events),
 * and whether both made the same grid (bitwise).  Open clusters of random positions at liquid density (100 nm^-3).
 *
 * Build and run on a GPU machine (sm_90), from the repository root:
 *   nvcc -O3 -std=c++17 -arch=sm_90 -Iplatforms/cuda/src -Iopenmmapi/include -o /tmp/grid_bounds_probe \
 *       bench/device/grid_bounds_probe.cu platforms/cuda/src/GraphBuildKernels.cu && /tmp/grid_bounds_probe
 */

#include "CellColumns.h"
#include "GraphKernelLaunch.h"
#include "probe_common.cuh"
#include <cstring>
#include <random>

using namespace GraphPlugin;

namespace {

/** The set-up before v67 (GraphBuildKernels.cu at 680d9fc): one block reads every position. */
__global__ void oneBlockGridSetup(const double* __restrict__ positions, int n, double cutoff, int maxCells, GraphGrid<double>* grid) {
    __shared__ double low[3][256], high[3][256];
    double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        for (int d = 0; d < 3; d++) {
            lo[d] = min(lo[d], positions[3 * i + d]);
            hi[d] = max(hi[d], positions[3 * i + d]);
        }
    for (int d = 0; d < 3; d++) {
        low[d][threadIdx.x] = lo[d];
        high[d][threadIdx.x] = hi[d];
    }
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride)
            for (int d = 0; d < 3; d++) {
                low[d][threadIdx.x] = min(low[d][threadIdx.x], low[d][threadIdx.x + stride]);
                high[d][threadIdx.x] = max(high[d][threadIdx.x], high[d][threadIdx.x + stride]);
            }
        __syncthreads();
    }
    if (threadIdx.x != 0)
        return;
    double extent[3], origin[3];
    for (int d = 0; d < 3; d++) {
        extent[d] = n > 0 ? high[d][0] - low[d][0] : 0.0;
        origin[d] = n > 0 ? low[d][0] : 0.0;
    }
    setGrid(extent, origin, cutoff, maxCells, *grid);
}

template <class Launch> double meanMicroseconds(Launch launch, int repeats) {
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    launch();
    CHECK(cudaEventRecord(start));
    for (int r = 0; r < repeats; r++)
        launch();
    CHECK(cudaEventRecord(stop));
    CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    return 1000.0 * ms / repeats;
}

} // namespace

int main() {
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("%s\n%10s %8s %12s %12s %8s %s\n", prop.name, "particles", "blocks", "before (us)", "now (us)", "ratio", "same grid");
    GraphBox<double> open;
    std::memset(&open, 0, sizeof(open));
    for (int n : {512, 10296, 100800, 1000000, 10000000, 67100000}) {
        const double side = std::cbrt(n / 100.0);
        std::mt19937 rng(n);
        std::uniform_real_distribution<double> u(0.0, side);
        std::vector<double> positions(3 * (size_t) n);
        for (double& x : positions)
            x = u(rng);
        double* x = upload(positions);
        double* bounds;
        GraphGrid<double>*before, *now;
        CHECK(cudaMalloc(&bounds, (size_t) GridBoundsMaxBlocks * 6 * sizeof(double)));
        CHECK(cudaMalloc(&before, sizeof(GraphGrid<double>)));
        CHECK(cudaMalloc(&now, sizeof(GraphGrid<double>)));
        const int maxCells = 2 * n + 125;
        const double old = meanMicroseconds([&] { oneBlockGridSetup<<<1, 256>>>(x, n, 0.6, maxCells, before); }, 200);
        const double fresh = meanMicroseconds([&] { launchGridSetup(x, n, open, 0.6, maxCells, bounds, now, 0); }, 200);
        CHECK(cudaGetLastError());
        GraphGrid<double> a, b;
        CHECK(cudaMemcpy(&a, before, sizeof(a), cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpy(&b, now, sizeof(b), cudaMemcpyDeviceToHost));
        std::printf("%10d %8d %12.2f %12.2f %8.1f %s\n", n, gridBoundsBlocks(n, false), old, fresh, old / fresh,
                    std::memcmp(&a, &b, sizeof(a)) == 0 ? "yes" : "NO");
        CHECK(cudaFree(x));
        CHECK(cudaFree(bounds));
        CHECK(cudaFree(before));
        CHECK(cudaFree(now));
    }
    return 0;
}
