// The graph build's cell grid (launchGridSetup, GraphBuildKernels.cu, linked into this test as a static library)
// against the host's computation of the same grid (setGrid of CellColumns.h over the exact bounding box): bitwise, for
// open systems read by the grid's own block (up to GridBoundsParticles particles) and by blocks of bounds (more, up to
// GridBoundsMaxBlocks blocks and past it, where each thread reads several particles), with the extremes of each axis
// placed in particles that different blocks read; and for a periodic box.  The cell search would give the same rows
// from a wrong bounding box (particles outside the grid fall into its edge cells), only slower: this is what checks it.
#include "CellColumns.h"
#include "CudaRuntimeTest.h"
#include "GraphKernelLaunch.h"
#include <algorithm>
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace GraphPlugin;

namespace {

/** The grid that launchGridSetup must make for `positions` ([n][3] nm) with the open or the periodic `box`. */
GraphGrid<double> hostGrid(const std::vector<double>& positions, const GraphBox<double>& box, double cutoff, int maxCells) {
    const size_t n = positions.size() / 3;
    double extent[3] = {0, 0, 0}, origin[3] = {0, 0, 0};
    if (box.periodic)
        periodicHeights(box, extent);
    else if (n > 0)
        for (int d = 0; d < 3; d++) {
            double low = std::numeric_limits<double>::infinity(), high = -low;
            for (size_t i = 0; i < n; i++) {
                low = std::min(low, positions[3 * i + d]);
                high = std::max(high, positions[3 * i + d]);
            }
            extent[d] = high - low;
            origin[d] = low;
        }
    GraphGrid<double> grid{};
    setGrid(extent, origin, cutoff, maxCells, grid);
    return grid;
}

void expectGridOf(const std::vector<double>& positions, const GraphBox<double>& box, double cutoff) {
    const int n = (int) (positions.size() / 3);
    const int maxCells = 2 * n + 125; // as CudaNeighborGraph
    const int blocks = gridBoundsBlocks(n, box.periodic != 0);
    double *x = nullptr, *bounds = nullptr;
    GraphGrid<double>* grid = nullptr;
    CUDA_OK(cudaMalloc(&x, std::max<size_t>(1, positions.size()) * sizeof(double)));
    CUDA_OK(cudaMalloc(&bounds, (size_t) GridBoundsMaxBlocks * 6 * sizeof(double)));
    CUDA_OK(cudaMalloc(&grid, sizeof(GraphGrid<double>)));
    CUDA_OK(cudaMemcpy(x, positions.data(), positions.size() * sizeof(double), cudaMemcpyHostToDevice));
    // Bounds scratch and grid full of NaN: a block that wrote nothing, or a box not read, would show.
    CUDA_OK(cudaMemset(bounds, 0xff, (size_t) GridBoundsMaxBlocks * 6 * sizeof(double)));
    CUDA_OK(cudaMemset(grid, 0xff, sizeof(GraphGrid<double>)));
    launchGridSetup(x, n, box, cutoff, maxCells, bounds, grid, 0);
    CUDA_OK(cudaGetLastError());
    GraphGrid<double> found{};
    CUDA_OK(cudaMemcpy(&found, grid, sizeof(found), cudaMemcpyDeviceToHost));
    const GraphGrid<double> expected = hostGrid(positions, box, cutoff, maxCells);
    for (int d = 0; d < 3; d++) {
        EXPECT_EQ(expected.numCells[d], found.numCells[d]) << "axis " << d << ", " << blocks << " blocks of bounds";
        EXPECT_EQ(expected.origin[d], found.origin[d]) << "axis " << d << ", " << blocks << " blocks of bounds";
        EXPECT_EQ(expected.cellScale[d], found.cellScale[d]) << "axis " << d << ", " << blocks << " blocks of bounds";
    }
    cudaFree(x);
    cudaFree(bounds);
    cudaFree(grid);
}

} // namespace

TEST(CudaGridSetup, OpenBoundingBoxIsTheHostsForEverySize) {
    if (!haveCudaDevice())
        GTEST_SKIP() << "no CUDA device";
    const GraphBox<double> open{};
    const int limit = GridBoundsMaxBlocks * GridBoundsParticles;
    for (int n : {1, 2, 100, GridBoundsParticles, GridBoundsParticles + 1, 5000, 300001, limit, limit + 1, 3 * limit + 17}) {
        SCOPED_TRACE(std::to_string(n) + " particles");
        std::mt19937 rng(n);
        // A slab: thin along z, long along x, off the origin; then each axis's extremes in particles of different blocks.
        std::uniform_real_distribution<double> x(-3.0, 40.0), y(5.0, 12.0), z(-0.2, 0.3);
        std::vector<double> positions;
        for (int i = 0; i < n; i++) {
            positions.push_back(x(rng));
            positions.push_back(y(rng));
            positions.push_back(z(rng));
        }
        std::uniform_int_distribution<int> particle(0, n - 1);
        const double extremes[6] = {-7.25, 4.5, -0.75, 61.0, 13.5, 1.25};
        for (int k = 0; k < 6; k++)
            positions[3 * particle(rng) + k % 3] = extremes[k];
        expectGridOf(positions, open, 0.6);
    }
    expectGridOf({}, open, 0.6);
}

TEST(CudaGridSetup, PeriodicGridIsTheBoxs) {
    if (!haveCudaDevice())
        GTEST_SKIP() << "no CUDA device";
    const double a[3] = {7.0, 0, 0}, b[3] = {1.5, 6.0, 0}, c[3] = {-1.0, 2.0, 8.5};
    const GraphBox<double> box = boxOfVectors(a, b, c, true);
    std::vector<double> positions;
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> u(0.0, 6.0);
    for (int i = 0; i < 3 * 20000; i++)
        positions.push_back(u(rng));
    expectGridOf(positions, box, 0.6);
}
