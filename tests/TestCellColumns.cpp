// The CUDA graph build's cell grid and row columns (platforms/cuda/src/CellColumns.h, host and device code), checked on
// the CPU: for every center of random systems (rectangular and triclinic periodic boxes, open clusters, boxes of few
// cells, particles on cell faces and outside the box), every particle within the cut-off (the minimum image by brute
// force over the 27 images) lies in a cell of the row's columns, and no cell is listed twice.  The GPU tests check the
// whole build bitwise against the all-pairs search on fewer systems.
#include "CellColumns.h"
#include <algorithm>
#include <cmath>
#include <gtest/gtest.h>
#include <random>
#include <set>
#include <vector>

using namespace GraphPlugin;

namespace {

struct System {
    GraphBox<double> box{};
    std::vector<double> x; ///< [n * 3], nm
    double cutoff = 0.6;
};

/** The squared distance between i and j, over the 27 nearest images in a periodic box (exact for reduced boxes). */
double distance2(const System& s, int i, int j) {
    double delta[3] = {s.x[3 * j] - s.x[3 * i], s.x[3 * j + 1] - s.x[3 * i + 1], s.x[3 * j + 2] - s.x[3 * i + 2]};
    const int range = s.box.periodic ? 1 : 0;
    if (s.box.periodic) { // near the primary image first (the particles may be boxes apart)
        const double* vectors[3] = {s.box.c, s.box.b, s.box.a};
        for (int k = 0; k < 3; k++) {
            const int d = 2 - k;
            const double shift = std::round(delta[d] / vectors[k][d]);
            for (int e = 0; e < 3; e++)
                delta[e] -= shift * vectors[k][e];
        }
    }
    double best = INFINITY;
    for (int ka = -range; ka <= range; ka++)
        for (int kb = -range; kb <= range; kb++)
            for (int kc = -range; kc <= range; kc++) {
                double r2 = 0;
                for (int d = 0; d < 3; d++) {
                    const double e = delta[d] + ka * s.box.a[d] + kb * s.box.b[d] + kc * s.box.c[d];
                    r2 += e * e;
                }
                best = std::min(best, r2);
            }
    return best;
}

/** The grid that gridSetupKernel makes for the system (maxCells as CudaNeighborGraph sets it). */
GraphGrid<double> gridOf(const System& s) {
    const int n = (int) s.x.size() / 3;
    double extent[3], origin[3] = {0, 0, 0};
    if (s.box.periodic)
        periodicHeights(s.box, extent);
    else
        for (int d = 0; d < 3; d++) {
            double low = INFINITY, high = -INFINITY;
            for (int i = 0; i < n; i++) {
                low = std::min(low, s.x[3 * i + d]);
                high = std::max(high, s.x[3 * i + d]);
            }
            origin[d] = low;
            extent[d] = high - low;
        }
    GraphGrid<double> grid{};
    setGrid(extent, origin, s.cutoff, 2 * n + 125, grid);
    return grid;
}

/** Checks every row of the system; returns the mean candidates a row over the mean neighbours a row. */
double checkRows(const System& s) {
    const int n = (int) s.x.size() / 3;
    const GraphGrid<double> grid = gridOf(s);
    std::vector<int> cellOf(n);
    for (int i = 0; i < n; i++) {
        double u[3];
        int cell[3];
        cellCoordinates(&s.x[3 * i], s.box, grid, u, cell);
        cellOf[i] = (cell[2] * grid.numCells[1] + cell[1]) * grid.numCells[0] + cell[0];
    }
    std::vector<int> cellSize(grid.numCells[0] * grid.numCells[1] * grid.numCells[2], 0);
    for (int c : cellOf)
        cellSize[c]++;
    const bool periodic = s.box.periodic != 0;
    const ColumnGeometry<double> geometry = columnGeometry(s.box, grid, s.cutoff);
    const int columns = columnAxisCount(grid.numCells[1], periodic) * columnAxisCount(grid.numCells[2], periodic);
    EXPECT_EQ(geometry.columns, columns);
    EXPECT_LE(columns, 32);
    long long candidates = 0, neighbors = 0;
    for (int i = 0; i < n; i++) {
        double u[3];
        int cell[3];
        cellCoordinates(&s.x[3 * i], s.box, grid, u, cell);
        std::multiset<int> listed;
        for (int column = 0; column < columns; column++) {
            int first[2], last[2];
            const int parts = columnRanges(column, u, cell, grid, geometry, first, last);
            EXPECT_GE(parts, 0);
            EXPECT_LE(parts, 2);
            for (int k = 0; k < parts; k++) {
                EXPECT_LE(first[k], last[k]) << "center " << i << " column " << column;
                // A run is cells of one (y, z): the same row of the grid.
                EXPECT_EQ(first[k] / grid.numCells[0], last[k] / grid.numCells[0]) << "center " << i << " column " << column;
                for (int c = first[k]; c <= last[k]; c++) {
                    listed.insert(c);
                    candidates += cellSize[c];
                }
            }
        }
        for (int c : listed)
            EXPECT_EQ(listed.count(c), 1u) << "center " << i << ": cell " << c << " listed twice";
        for (int j = 0; j < n; j++) {
            if (j == i || distance2(s, i, j) >= s.cutoff * s.cutoff)
                continue;
            neighbors++;
            if (listed.count(cellOf[j]) == 0) {
                ADD_FAILURE() << "center " << i << " misses neighbour " << j << " (r = " << std::sqrt(distance2(s, i, j)) << " nm, cell "
                              << cellOf[j] << ")";
                return 0;
            }
        }
    }
    return neighbors > 0 ? (double) candidates / neighbors : 0;
}

/** n particles uniform in the box (or, open, in a cube of `side` nm), some moved by whole box vectors. */
System randomSystem(GraphBox<double> box, int n, double side, unsigned seed) {
    System s;
    s.box = box;
    std::mt19937 random(seed);
    std::uniform_real_distribution<double> uniform(0, 1);
    for (int i = 0; i < n; i++) {
        double f[3] = {uniform(random), uniform(random), uniform(random)};
        if (box.periodic && i % 7 == 0) // outside the primary box: the fractional coordinates wrap
            f[i % 3] += (i % 2 ? 1.0 : -2.0);
        for (int d = 0; d < 3; d++)
            s.x.push_back(box.periodic ? f[0] * box.a[d] + f[1] * box.b[d] + f[2] * box.c[d] : side * f[d]);
    }
    return s;
}

} // namespace

TEST(CellColumns, RectangularBoxAtLiquidDensity) {
    const double L = 2.5, a[3] = {L, 0, 0}, b[3] = {0, L, 0}, c[3] = {0, 0, L};
    const System s = randomSystem(boxOfVectors(a, b, c, true), 1562, 0, 1); // 100 nm^-3
    const double ratio = checkRows(s);
    // About 2.5 times the sphere's particles (27 whole cells: 6.4 or more); the run-to-run spread is small.
    EXPECT_GT(ratio, 1.0);
    EXPECT_LT(ratio, 3.2);
}

TEST(CellColumns, RectangularBoxesOfFewCellsAlongSomeAxes) {
    // 2.1 r_c gives 4 cells (fewer than the 5 columns): every cell of that axis, once.
    const double sizes[][3] = {{1.26, 3.0, 3.0}, {3.0, 1.26, 3.0}, {3.0, 3.0, 1.26}, {1.26, 1.26, 1.26}, {1.5, 1.55, 1.8}};
    unsigned seed = 10;
    for (const auto& size : sizes) {
        const double a[3] = {size[0], 0, 0}, b[3] = {0, size[1], 0}, c[3] = {0, 0, size[2]};
        checkRows(randomSystem(boxOfVectors(a, b, c, true), 700, 0, seed++));
    }
}

TEST(CellColumns, BoxAMultipleOfHalfTheCutoff) {
    // Particles on the faces of the cells: a lattice of spacing r_c / 4 in a box of 10 half cut-offs.
    const double L = 3.0, a[3] = {L, 0, 0}, b[3] = {0, L, 0}, c[3] = {0, 0, L};
    System s;
    s.box = boxOfVectors(a, b, c, true);
    for (int i = 0; i < 20; i++)
        for (int j = 0; j < 20; j++)
            for (int k = 0; k < 20; k += 3) {
                s.x.push_back(i * 0.15);
                s.x.push_back(j * 0.15);
                s.x.push_back(k * 0.15);
            }
    checkRows(s);
}

TEST(CellColumns, TriclinicBoxes) {
    const double a[3] = {3.0, 0, 0}, b[3] = {1.1, 2.8, 0}, c[3] = {-1.2, 1.3, 2.6};
    checkRows(randomSystem(boxOfVectors(a, b, c, true), 1500, 0, 3));
    const double a2[3] = {1.4, 0, 0}, b2[3] = {0.6, 1.35, 0}, c2[3] = {0.5, -0.6, 1.3};
    checkRows(randomSystem(boxOfVectors(a2, b2, c2, true), 400, 0, 4));
}

TEST(CellColumns, OpenClusters) {
    GraphBox<double> open{};
    checkRows(randomSystem(open, 1500, 2.5, 5));
    checkRows(randomSystem(open, 300, 0.4, 6)); // one cell along every axis
    // A sparse spread: thicker cells, as the grid is capped at 2 n + 125 cells.
    checkRows(randomSystem(open, 400, 12.0, 7));
    // A flat slab: one cell thick along z.
    System slab = randomSystem(open, 1000, 4.0, 8);
    for (int i = 0; i < 1000; i++)
        slab.x[3 * i + 2] *= 0.05;
    checkRows(slab);
}

TEST(CellColumns, NonFiniteCentersGiveCellsOfTheGrid) {
    // The gather reports a non-finite position and the evaluation throws, but the row kernel runs first: its ranges
    // must still be cells of the grid (no read outside cellStart).
    const double L = 3.0, a[3] = {L, 0, 0}, b[3] = {0, L, 0}, c[3] = {0, 0, L};
    GraphBox<double> open{};
    for (const GraphBox<double>& box : {boxOfVectors(a, b, c, true), open}) {
        System s = randomSystem(box, 500, 3.0, 9);
        const GraphGrid<double> grid = gridOf(s);
        const int cells = grid.numCells[0] * grid.numCells[1] * grid.numCells[2];
        const bool periodic = box.periodic != 0;
        const ColumnGeometry<double> geometry = columnGeometry(box, grid, s.cutoff);
        const int columns = columnAxisCount(grid.numCells[1], periodic) * columnAxisCount(grid.numCells[2], periodic);
        const double bad[] = {NAN, INFINITY, -INFINITY, 1e300, -1e300};
        for (double value : bad)
            for (int d = 0; d < 3; d++) {
                double x[3] = {1.0, 1.5, 2.0};
                x[d] = value;
                double u[3];
                int cell[3];
                cellCoordinates(x, box, grid, u, cell);
                for (int e = 0; e < 3; e++) {
                    EXPECT_GE(cell[e], 0);
                    EXPECT_LT(cell[e], grid.numCells[e]);
                }
                for (int column = 0; column < columns; column++) {
                    int first[2], last[2];
                    const int parts = columnRanges(column, u, cell, grid, geometry, first, last);
                    for (int k = 0; k < parts; k++) {
                        EXPECT_GE(first[k], 0) << value;
                        EXPECT_LE(first[k], last[k]) << value;
                        EXPECT_LT(last[k], cells) << value;
                    }
                }
            }
    }
}
