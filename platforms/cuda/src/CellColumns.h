#ifndef OPENMM_GRAPH_CELL_COLUMNS_H_
#define OPENMM_GRAPH_CELL_COLUMNS_H_

/**
 * The cell grid of the graph build and the candidate cells of a row, as columns along x.  Host and device (no CUDA
 * headers: tests/TestCellColumns.cpp checks them on the CPU against every pair of random systems).
 *
 * Cells are CellsPerCutoff to a cut-off: each at least r_c / CellsPerCutoff thick (perpendicular to its faces), so the
 * particles within r_c of a center lie in the cells at most CellsPerCutoff away along each axis.  Cells are numbered
 * (z n_y + y) n_x + x, so the cells of one (y, z) at consecutive x are consecutive in the cell-sorted particles: a run
 * of them is one range of positions.  A row's candidates are the (2 CellsPerCutoff + 1)^2 columns (y, z) around the
 * center's cell (at most 25, a lane each), each a run along x cut to the cells that the cut-off sphere reaches: in a
 * rectangular (or open) box a column is skipped when its nearest point in y and z is r_c or more away, and its run
 * covers only the x the sphere spans at that distance.  A periodic run that crosses the box's x faces is two ranges.
 * Half-size cells and the cut take about 2.5 times the sphere's particles as candidates (229 at 100 nm^-3 and r_c 0.6
 * nm), against 7.4 times for 27 whole cells (bench/NOTES.md v34).
 */

#include "GraphDeviceTypes.h"
#include <cmath>

namespace GraphPlugin {

/** Cells a cut-off: 2 gives cells of at least r_c / 2 and at most 25 columns a row (a lane each). */
constexpr int CellsPerCutoff = 2;
/** Columns along y and z for an axis of many cells: offsets -CellsPerCutoff ... CellsPerCutoff. */
constexpr int ColumnSpan = 2 * CellsPerCutoff + 1;
static_assert(ColumnSpan * ColumnSpan <= 32, "a row's columns are a lane each");
/** Cell units (a cell's thickness is 1) by which the cut of a column errs on the wide side, for rounding. */
constexpr double ColumnMargin = 1e-6;

/**
 * The box of the vectors a, b, c (nm, OpenMM's reduced triclinic form: a along x, b in the xy plane) with the inverses
 * that the minimum image uses; `periodic` false: open boundaries (the vectors are then not used).
 */
template <typename real>
GRAPH_HOST_DEVICE inline GraphBox<real> boxOfVectors(const real a[3], const real b[3], const real c[3], bool periodic) {
    GraphBox<real> box;
    for (int d = 0; d < 3; d++) {
        box.a[d] = a[d];
        box.b[d] = b[d];
        box.c[d] = c[d];
    }
    box.inverse[0] = 1 / a[0];
    box.inverse[1] = 1 / b[1];
    box.inverse[2] = 1 / c[2];
    box.periodic = periodic ? 1 : 0;
    return box;
}

/** The heights (nm) of the periodic box (OpenMM's reduced form) perpendicular to its pairs of faces. */
template <typename real> GRAPH_HOST_DEVICE inline void periodicHeights(const GraphBox<real>& box, real extent[3]) {
    const real *a = box.a, *b = box.b, *c = box.c;
    const real volume = a[0] * b[1] * c[2];
    const real bc[3] = {b[1] * c[2] - b[2] * c[1], b[2] * c[0] - b[0] * c[2], b[0] * c[1] - b[1] * c[0]};
    const real ca[3] = {c[1] * a[2] - c[2] * a[1], c[2] * a[0] - c[0] * a[2], c[0] * a[1] - c[1] * a[0]};
    extent[0] = volume / sqrt(bc[0] * bc[0] + bc[1] * bc[1] + bc[2] * bc[2]);
    extent[1] = volume / sqrt(ca[0] * ca[0] + ca[1] * ca[1] + ca[2] * ca[2]);
    extent[2] = c[2];
}

/**
 * The grid over an extent (nm: the periodic heights, or the open bounding box from `origin`): cells of at least
 * r_c / CellsPerCutoff (a hair thicker where the extent is a multiple of that), at most 2^20 along an axis, and the
 * longest axis halved until there are at most maxCells (thicker cells: more candidates, the same rows).
 */
template <typename real>
GRAPH_HOST_DEVICE inline void setGrid(const real extent[3], const real origin[3], real cutoff, int maxCells, GraphGrid<real>& grid) {
    int cells[3];
    for (int d = 0; d < 3; d++) {
        const real count = floor(extent[d] * CellsPerCutoff / cutoff * real(1 - 1e-12));
        cells[d] = count < 1 ? 1 : (count > real(1 << 20) ? 1 << 20 : (int) count);
    }
    while ((long long) cells[0] * cells[1] * cells[2] > maxCells) {
        const int largest = cells[0] >= cells[1] && cells[0] >= cells[2] ? 0 : (cells[1] >= cells[2] ? 1 : 2);
        cells[largest] = cells[largest] / 2 > 1 ? cells[largest] / 2 : 1;
    }
    for (int d = 0; d < 3; d++) {
        grid.numCells[d] = cells[d];
        grid.origin[d] = origin[d];
        grid.cellScale[d] = extent[d] > 0 ? cells[d] / extent[d] : real(0);
    }
}

/** Fractional coordinates of x in the box, wrapped into [0, 1). */
template <typename real> GRAPH_HOST_DEVICE inline void fractional(const real x[3], const GraphBox<real>& box, real s[3]) {
    real sc = x[2] * box.inverse[2];
    real sb = (x[1] - sc * box.c[1]) * box.inverse[1];
    real sa = (x[0] - sb * box.b[0] - sc * box.c[0]) * box.inverse[0];
    s[0] = sa - floor(sa);
    s[1] = sb - floor(sb);
    s[2] = sc - floor(sc);
}

/**
 * The position x (nm) in cell units u (cell k spans [k, k + 1) along each axis; periodic: fractional coordinates times
 * the cells) and its cell (u rounded down, clamped to the grid; any u, NaN included, gives a cell of the grid).
 */
template <typename real>
GRAPH_HOST_DEVICE inline void cellCoordinates(const real x[3], const GraphBox<real>& box, const GraphGrid<real>& grid, real u[3],
                                              int cell[3]) {
    if (box.periodic) {
        real s[3];
        fractional(x, box, s);
        for (int d = 0; d < 3; d++)
            u[d] = s[d] * grid.numCells[d];
    }
    else
        for (int d = 0; d < 3; d++)
            u[d] = (x[d] - grid.origin[d]) * grid.cellScale[d];
    for (int d = 0; d < 3; d++) // clamped in floating point: a non-finite u gives a cell of the grid too
        cell[d] = (int) fmin(fmax(floor(u[d]), real(0)), (real) (grid.numCells[d] - 1));
}

/** Column offsets along y or z: ColumnSpan, or every cell (as absolute cells) along a periodic axis of fewer. */
GRAPH_HOST_DEVICE inline int columnAxisCount(int numCells, bool periodic) {
    return periodic && numCells < ColumnSpan ? numCells : ColumnSpan;
}

/** What the columns of every row of one grid share (columnGeometry), worked out once a grid, not once a row. */
template <typename real> struct ColumnGeometry {
    bool periodic;
    bool cut;      ///< whether columns are cut to the cut-off sphere: open boxes and rectangular periodic ones
    int countY;    ///< columns along y (columnAxisCount)
    int columns;   ///< columns a row: countY times those along z
    real width[3]; ///< with cut: a cell's width (nm) along each axis, where distances in cell units are distances in nm
    real cutoff2;  ///< nm^2
};

/** The columns' geometry of a grid in the box; cutoff in nm.  In a triclinic box the runs are the whole +-CellsPerCutoff. */
template <typename real>
GRAPH_HOST_DEVICE inline ColumnGeometry<real> columnGeometry(const GraphBox<real>& box, const GraphGrid<real>& grid, real cutoff) {
    ColumnGeometry<real> g;
    g.periodic = box.periodic != 0;
    g.cut = !g.periodic || (box.b[0] == 0 && box.c[0] == 0 && box.c[1] == 0);
    const int* n = grid.numCells;
    for (int d = 0; d < 3; d++)
        g.width[d] = g.periodic ? (d == 0   ? box.a[0]
                                   : d == 1 ? box.b[1]
                                            : box.c[2]) /
                                      n[d]
                                : (grid.cellScale[d] > 0 ? 1 / grid.cellScale[d] : real(0));
    g.countY = columnAxisCount(n[1], g.periodic);
    g.columns = g.countY * columnAxisCount(n[2], g.periodic);
    g.cutoff2 = cutoff * cutoff;
    return g;
}

/**
 * The x-run of cells of a row's column `column` (0 <= column < geometry.columns), as up to two ranges of linear cell
 * indices [first[k], last[k]]; returns how many (0: the column is empty or out of an open box).  u and cell: the
 * center's (cellCoordinates); geometry: columnGeometry of the box, the grid and the cut-off.
 */
template <typename real>
GRAPH_HOST_DEVICE inline int columnRanges(int column, const real u[3], const int cell[3], const GraphGrid<real>& grid,
                                          const ColumnGeometry<real>& geometry, int first[2], int last[2]) {
    const bool periodic = geometry.periodic, cut = geometry.cut;
    const int* n = grid.numCells;
    const real* width = geometry.width;
    const int countY = geometry.countY;
    const int o[2] = {column % countY, column / countY};
    int c[3] = {0, 0, 0};
    real gap2 = 0; // squared distance (nm^2) in y and z from the center to the column, less the margin
    for (int k = 0; k < 2; k++) {
        const int d = k + 1;
        if (periodic && n[d] < ColumnSpan) {
            c[d] = o[k]; // every cell of the axis once; no cut along it
            continue;
        }
        const int offset = o[k] - CellsPerCutoff;
        c[d] = cell[d] + offset;
        if (!periodic && (c[d] < 0 || c[d] >= n[d]))
            return 0;
        real gap = offset > 0 ? (real) c[d] - u[d] : offset < 0 ? u[d] - (real) (c[d] + 1) : real(0);
        gap = gap - (real) ColumnMargin;
        if (gap > 0)
            gap2 += gap * width[d] * gap * width[d];
        if (periodic)
            c[d] = (c[d] + n[d]) % n[d];
    }
    const real cutoff2 = geometry.cutoff2;
    if (cut && gap2 >= cutoff2)
        return 0;
    const int row = (c[2] * n[1] + c[1]) * n[0];
    if (periodic && n[0] < ColumnSpan) {
        first[0] = row;
        last[0] = row + n[0] - 1;
        return 1;
    }
    int low = cell[0] - CellsPerCutoff, high = cell[0] + CellsPerCutoff;
    if (cut && width[0] > 0) {
        // Kept within [cell - CellsPerCutoff, cell] and [cell, cell + CellsPerCutoff] in floating point, so that a
        // non-finite position (reported by the gather; its row is never used) still gives cells of the grid.
        const real span = sqrt(cutoff2 - gap2) / width[0] + (real) ColumnMargin;
        low = (int) fmin(fmax(floor(u[0] - span), (real) low), (real) cell[0]);
        high = (int) fmax(fmin(floor(u[0] + span), (real) high), (real) cell[0]);
    }
    if (!periodic) {
        low = low < 0 ? 0 : low;
        high = high > n[0] - 1 ? n[0] - 1 : high;
        first[0] = row + low;
        last[0] = row + high;
        return 1;
    }
    if (low < 0) {
        first[0] = row + low + n[0];
        last[0] = row + n[0] - 1;
        first[1] = row;
        last[1] = row + high;
        return 2;
    }
    if (high >= n[0]) {
        first[0] = row + low;
        last[0] = row + n[0] - 1;
        first[1] = row;
        last[1] = row + high - n[0];
        return 2;
    }
    first[0] = row + low;
    last[0] = row + high;
    return 1;
}

} // namespace GraphPlugin

#endif // OPENMM_GRAPH_CELL_COLUMNS_H_
