#ifndef OPENMM_GRAPH_DEVICE_TYPES_H_
#define OPENMM_GRAPH_DEVICE_TYPES_H_

/**
 * Plain structs shared by the host launcher and the device kernels of the CUDA
 * platform.  No CUDA headers: the host side includes this from .cpp files.
 * `real` is float (single and mixed precision) or double (double precision).
 */

#include <cstdint>

namespace GraphPlugin {

/** OpenMM's posq element in double precision (x, y, z in nm, w the charge); layout of CUDA's double4. */
struct alignas(16) GraphDouble4 {
    double x, y, z, w;
};

/** The periodic box (OpenMM's reduced triclinic form), nm; passed by value to kernels each step. */
template <typename real> struct GraphBox {
    real a[3], b[3], c[3];
    real inverse[3]; ///< 1 / a[0], 1 / b[1], 1 / c[2] (nm^-1): the minimum image multiplies by them
    int periodic;    ///< 0: open boundaries
};

/**
 * The cell grid of one evaluation, computed on the device (device memory).
 * Periodic: cells in fractional coordinates; open: Cartesian cells over the
 * bounding box.  Every cell is at least half a cut-off thick (CellColumns.h).
 */
template <typename real> struct GraphGrid {
    int numCells[3];
    real origin[3];    ///< open boundaries: lower corner of the bounding box (nm)
    real cellScale[3]; ///< open boundaries: cells per nm along each axis
};

/**
 * Errors found on the device during an evaluation (device memory, copied to
 * pinned host memory once per evaluation).
 */
struct GraphStatus {
    int maxRowCount;      ///< the longest neighbour row seen (for capacity growth)
    int errorCode;        ///< GraphErrorCode
    int errorParticle[2]; ///< force-local indices of the particles concerned
    double errorValue;
    /**
     * The energy of the evaluation in two 64-bit fixed-point parts (kJ/mol):
     * E = energyHigh / 2^8 + energyLow / 2^40.  Integer sums are order
     * independent, so the energy is bitwise reproducible under any particle
     * order; the split keeps 2^-40 kJ/mol resolution and room for 3e7
     * particles of up to 1e9 kJ/mol each (one 2^32-scaled word overflows
     * past 2.1e9 kJ/mol in total, about 5 million silicon atoms).
     */
    long long energyHigh, energyLow;
    long long edgeCount; ///< PyTorch models on CUDA: the edges of the graph (for the edge capacity of the model's tensors)
};

#ifdef __CUDACC__
#define GRAPH_HOST_DEVICE __host__ __device__
#else
#define GRAPH_HOST_DEVICE
#endif

/** Units of GraphStatus::energyHigh and energyLow: 2^8 and 2^40 per kJ/mol. */
constexpr double EnergyHighScale = 256.0, EnergyLowScale = 1099511627776.0;

/** The energy (kJ/mol) that the two fixed-point words of GraphStatus hold. */
GRAPH_HOST_DEVICE inline double energyOfWords(long long high, long long low) {
    return (double) high * (1.0 / EnergyHighScale) + (double) low * (1.0 / EnergyLowScale);
}

enum GraphErrorCode : int {
    GraphErrorNone = 0,
    GraphErrorSamePosition = 1,
    GraphErrorNonFinitePosition = 2,
    GraphErrorNonFiniteEnergy = 3,
    GraphErrorForceOutOfRange = 4,
    GraphErrorEdgeOrder = 5, ///< the streamed moments scan met an edge out of the order its ring relies on
};

/**
 * The model on the device: sizes and device pointers (tables in `real`).
 * Tables: [T][T][L+1][K+1][3][M] as in GraphModel, units nm.
 */
template <typename real> struct GraphModelParams {
    int numTypes, lMax, numChannels, numAxis, descriptorLSum, numInteractions, radialIntervals;
    int descriptorSize;
    real cutoff, cutoff2, radialR0, radialDr, invDr, invNorm;
    const real* radialTable;
    const real* interactionTable;
};

} // namespace GraphPlugin

#endif
