#ifndef OPENMM_GRAPH_CUDA_NEIGHBOR_GRAPH_H_
#define OPENMM_GRAPH_CUDA_NEIGHBOR_GRAPH_H_

#include "CudaPeerCopyStream.h"
#include "GraphDeviceTypes.h"
#include "openmm/cuda/CudaArray.h"
#include "openmm/cuda/CudaContext.h"
#include <memory>
#include <string>
#include <vector>

namespace GraphPlugin {

/**
 * How the rows find their candidates (the GraphForce property
 * CudaNeighborSearch): a cell grid at least half a cut-off thick (Cells, CellColumns.h), every
 * particle (AllPairs, O(n^2)), or AllPairs up to AllPairsLimit particles and
 * Cells beyond (Auto).  The rows are bitwise the same either way.
 */
enum class CudaNeighborSearch { Auto, Cells, AllPairs };

/** The value of the CudaNeighborSearch property ("auto", "cells" or "allpairs", validated by GraphForce::setProperty). */
CudaNeighborSearch parseNeighborSearch(const std::string& value);

/**
 * Stage 1 of the CUDA pipeline, shared by the native GraphForce
 * (CudaGraphPipeline) and PyTorch models on the CUDA platform: the compact
 * canonical neighbour graph of a force's particles, built on the device from
 * OpenMM's posq at every evaluation.
 *
 * Device arrays (force order, the order of addParticle):
 *   positions  [n][3] double, nm (posq plus posqCorrection in mixed precision)
 *   slotOfNode [n] int, each particle's slot in OpenMM's (reordered) arrays
 *   rows       [n][capacity] int, neighbours of the centers [firstCenter, firstCenter + numCenters),
 *              sorted by fixed-point r^2 / r_c^2 and then index; rowCount [n] int their lengths
 * A row longer than the capacity raises GraphStatus::maxRowCount above it; the
 * owner then calls grow() and has OpenMM recompute (nothing is read back
 * during an evaluation).
 */
class CudaNeighborGraph {
public:
    /**
     * @param particles          [n] System index of each particle of the force
     * @param numSystemParticles particles of the System
     * @param cutoff             nm
     * @param firstCenter, numCenters the centers whose rows are built (a device's or rank's share)
     * @param orderContext       the first context of a multi-device Context when `cu` is another one (its atom order and
     *                           posqCorrection are used), else nullptr
     * @param search             how rows find their candidates
     */
    CudaNeighborGraph(OpenMM::CudaContext& cu, const std::vector<int>& particles, int numSystemParticles, double cutoff, bool periodic,
                      int firstCenter, int numCenters, OpenMM::CudaContext* orderContext,
                      CudaNeighborSearch search = CudaNeighborSearch::Auto);
    /**
     * Enqueue the build on `stream` (no host synchronisation; can be captured into a CUDA graph).  Errors (non-finite
     * positions, two particles at the same position) and the longest row go into `status` (device).
     */
    void enqueue(cudaStream_t stream, const GraphBox<double>& box, GraphStatus* status);
    /** Multi-device only, before enqueue() and outside a captured graph: copy the first context's posqCorrection. */
    void enqueueCorrectionCopy(cudaStream_t stream);
    /** After an evaluation whose longest row was maxRowCount > capacity(): reallocate the rows with room to spare. */
    void grow(int maxRowCount);
    /** With an orderContext: its atom order ([paddedNumAtoms], getAtomIndex()), after each reordering.  Synchronises. */
    void setAtomOrder(const std::vector<int>& atomIndex);
    /**
     * Throws an OpenMMException when the cut-off (nm) is more than half the smallest height of the context's periodic
     * box (checked before every evaluation: a barostat may shrink the box).
     */
    static void checkBox(OpenMM::CudaContext& cu, double cutoff, bool periodic);
    /** The box of the context in the form of the kernels (periodic or not). */
    GraphBox<double> currentBox() const;
    /** The error of a status record, as the sentence of an OpenMMException (empty if none); particles named by System index. */
    std::string errorMessage(const GraphStatus& status) const;

    int capacity() const {
        return rowCapacity;
    }
    double* positions() const {
        return reinterpret_cast<double*>(positionArray->getDevicePointer());
    }
    int* slotOfNode() const {
        return reinterpret_cast<int*>(slotArray->getDevicePointer());
    }
    const int* rows() const { // null only after a failed growth, which enqueue() reports
        return neighbors ? reinterpret_cast<const int*>(neighbors->getDevicePointer()) : nullptr;
    }
    const int* rowCount() const {
        return reinterpret_cast<const int*>(rowCountArray->getDevicePointer());
    }
    /** OpenMM's atom order on this device: its own, or the copy of the first context's. */
    CUdeviceptr atomIndexPointer() const;
    /** posqCorrection in mixed precision (this device's own, or the copy of the first context's), else 0. */
    CUdeviceptr correctionPointer() const;

private:
    void allocateRows(int newCapacity);
    int initialCapacity() const;

    OpenMM::CudaContext& cu;
    std::vector<int> particles;
    int n, firstCenter, numCenters;
    double cutoff;
    bool periodic;
    bool allPairs; ///< every particle is a candidate of every row (launchBuildRowsAllPairs)
    int rowCapacity = 1, maxCells = 1, buildScratchRows = 1, numMultiprocessors = 1;
    size_t sortScratchBytes = 1;
    OpenMM::CudaContext* orderContext;
    std::unique_ptr<OpenMM::CudaArray> nodeOfParticle, positionArray, slotArray, grid, cellOfNode, sortedCells, nodeIds, sortedNodes,
        cellStart, sortScratch, rowCountArray, neighbors;
    std::unique_ptr<OpenMM::CudaArray> rowEntries; ///< [buildScratchRows * rowCapacity] uint64: rows while they are collected
    std::unique_ptr<OpenMM::CudaArray> sortedPositions;           ///< [n] GraphDouble4: the positions in cell order (launchCellSort)
    std::unique_ptr<OpenMM::CudaArray> gridBounds; ///< open boundaries, more than one block of them: [blocks][6] double (launchGridSetup)
    std::unique_ptr<OpenMM::CudaArray> atomOrder, correctionCopy; ///< with orderContext: its atom order and posqCorrection here
    std::unique_ptr<CudaPeerCopyStream> correctionStream;         ///< with correctionCopy: the copy's stream
};

} // namespace GraphPlugin

#endif
