#ifndef OPENMM_GRAPH_DEVICE_TYPES_H_
#define OPENMM_GRAPH_DEVICE_TYPES_H_

/**
 * Plain structs shared by the host launcher and the device kernels of the CUDA
 * platform.  No CUDA headers: the host side includes this from .cpp files.
 * `real` is float (single and mixed precision) or double (double precision).
 */

#include <cstdint>
#include <math.h>

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
     * The energy of the evaluation in 64-bit fixed-point words (kJ/mol), sums
     * over the particles of energyWordsOf(E_i): E = energyHigh / 2^8 +
     * energyLow / 2^40.  Integer sums are order independent, so the energy is
     * bitwise reproducible under any particle order; the split keeps 2^-40
     * kJ/mol resolution (one 2^32-scaled word would overflow past 2.1e9
     * kJ/mol in total, about 5 million silicon atoms).  energyHigh wraps past
     * 2^63 / 2^8 = 3.6e16 kJ/mol (36 million particles near the 1e9 kJ/mol
     * limit of each); energyTop, the sum of the particles' high words
     * rounded down to multiples of 2^32 (in units of 2^32), never wraps, and
     * with it energyOfWords gives the total exactly in every case
     * (bench/NOTES.md v67).
     */
    long long energyHigh, energyLow, energyTop;
    long long edgeCount; ///< PyTorch models on CUDA: the edges of the graph (for the edge capacity of the model's tensors)
};

#ifdef __CUDACC__
#define GRAPH_HOST_DEVICE __host__ __device__
#else
#define GRAPH_HOST_DEVICE
#endif

/** Units of GraphStatus::energyHigh and energyLow: 2^8 and 2^40 per kJ/mol; energyTop counts 2^32 units of energyHigh. */
constexpr double EnergyHighScale = 256.0, EnergyLowScale = 1099511627776.0, EnergyTopUnit = 4294967296.0;

/** One particle's share of the fixed-point energy words of GraphStatus (atomically added to them). */
struct GraphEnergyWords {
    long long high; ///< floor(E 2^8): |high| < 2^38 for |E| < 1e9 kJ/mol
    long long low;  ///< (E - high / 2^8) 2^40 rounded to nearest, in [0, 2^32]
    long long top;  ///< floor(high / 2^32), in [-64, 63]
};

/** The fixed-point words of a particle energy `e` (kJ/mol, finite, |e| < 1e9; the caller checks). */
GRAPH_HOST_DEVICE inline GraphEnergyWords energyWordsOf(double e) {
    const double high = floor(e * EnergyHighScale); // an integer below 2^38 in magnitude: exact in a double
    GraphEnergyWords words;
    words.high = (long long) high;
    words.low = llrint((e - high * (1.0 / EnergyHighScale)) * EnergyLowScale);
    words.top = (long long) floor(high * (1.0 / EnergyTopUnit)); // a division by a power of two: exact
    return words;
}

/**
 * The energy (kJ/mol) of the sums of energyWordsOf over the particles (GraphStatus's words, or their sums over ranks).
 * high holds the total T of the high words modulo 2^64; high - top 2^32 (modulo 2^64) is the sum of the particles' high
 * words less their multiples of 2^32, exact below 2^32 particles: T = carried 2^32 + rest, with rest in [0, 2^32).
 * Where T fits a signed 64-bit word (|E| below 3.6e16 kJ/mol) high is T and the energy is computed from it as it always
 * was, bitwise; beyond, from carried and rest (rounded once to a double, not wrapped).
 */
GRAPH_HOST_DEVICE inline double energyOfWords(long long top, long long high, long long low) {
    const unsigned long long bottom = (unsigned long long) high - ((unsigned long long) top << 32);
    const long long carried = top + (long long) (bottom >> 32);
    const double lowPart = (double) low * (1.0 / EnergyLowScale);
    if (carried >= -2147483648LL && carried < 2147483648LL)
        return (double) high * (1.0 / EnergyHighScale) + lowPart;
    return ((double) carried * EnergyTopUnit + (double) (bottom & 0xffffffffULL)) * (1.0 / EnergyHighScale) + lowPart;
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
