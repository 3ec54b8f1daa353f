#include "CudaNeighborGraph.h"
#include "CellColumns.h"
#include "CudaGraphErrors.h"
#include "GraphKernelLaunch.h"
#include "internal/GraphForceImpl.h"
#include "openmm/OpenMMException.h"
#include "openmm/common/ContextSelector.h"
#include <algorithm>
#include <cmath>
#include <sstream>

using namespace GraphPlugin;
using namespace OpenMM;

CudaNeighborSearch GraphPlugin::parseNeighborSearch(const std::string& value) {
    return value == "cells" ? CudaNeighborSearch::Cells : value == "allpairs" ? CudaNeighborSearch::AllPairs : CudaNeighborSearch::Auto;
}

CudaNeighborGraph::CudaNeighborGraph(CudaContext& cu, const std::vector<int>& particles, int numSystemParticles, double cutoff,
                                     bool periodic, int firstCenter, int numCenters, CudaContext* orderContext, CudaNeighborSearch search)
    : cu(cu), particles(particles), n((int) particles.size()), firstCenter(firstCenter), numCenters(numCenters), cutoff(cutoff),
      periodic(periodic), allPairs(search == CudaNeighborSearch::AllPairs || (search == CudaNeighborSearch::Auto && n <= AllPairsLimit)),
      orderContext(orderContext == &cu ? nullptr : orderContext) {
    ContextSelector selector(cu);
    GRAPH_CU_CHECK(cuDeviceGetAttribute(&numMultiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, cu.getDevice()));
    std::vector<int> nodeOfSystemParticle(numSystemParticles, -1);
    for (int i = 0; i < n; i++)
        nodeOfSystemParticle[particles[i]] = i;
    nodeOfParticle.reset(CudaArray::create<int>(cu, std::max(1, numSystemParticles), "graphNodeOfParticle"));
    nodeOfParticle->upload(nodeOfSystemParticle);
    const int n1 = std::max(1, n);
    positionArray.reset(CudaArray::create<double>(cu, 3 * n1, "graphPositions"));
    slotArray.reset(CudaArray::create<int>(cu, n1, "graphSlotOfNode"));
    maxCells = 2 * n + 125; // cells of r_c / 2: about n / 2.7 at 100 nm^-3; sparser systems get thicker cells
    grid.reset(CudaArray::create<GraphGrid<double>>(cu, 1, "graphGrid"));
    if (const int boundsBlocks = gridBoundsBlocks(n, periodic))
        gridBounds.reset(CudaArray::create<double>(cu, 6 * boundsBlocks, "graphGridBounds"));
    cellOfNode.reset(CudaArray::create<uint32_t>(cu, n1, "graphCellOfNode"));
    sortedCells.reset(CudaArray::create<uint32_t>(cu, n1, "graphSortedCells"));
    nodeIds.reset(CudaArray::create<int>(cu, n1, "graphNodeIds"));
    sortedNodes.reset(CudaArray::create<int>(cu, n1, "graphSortedNodes"));
    sortedPositions.reset(CudaArray::create<GraphDouble4>(cu, n1, "graphSortedPositions"));
    cellStart.reset(CudaArray::create<int>(cu, maxCells + 1, "graphCellStart"));
    sortScratchBytes = std::max<size_t>(1, getCellSortScratchBytes(n1, maxCells));
    sortScratch.reset(CudaArray::create<char>(cu, sortScratchBytes, "graphSortScratch"));
    rowCountArray.reset(CudaArray::create<int>(cu, n1, "graphRowCount"));
    if (this->orderContext != nullptr) {
        atomOrder.reset(CudaArray::create<int>(cu, cu.getPaddedNumAtoms(), "graphAtomOrder"));
        setAtomOrder(this->orderContext->getAtomIndex());
        if (cu.getUseMixedPrecision()) {
            correctionCopy.reset(CudaArray::create<float4>(cu, cu.getPaddedNumAtoms(), "graphPosqCorrection"));
            correctionStream.reset(new CudaPeerCopyStream(cu));
        }
    }
    allocateRows(initialCapacity());
}

void CudaNeighborGraph::enqueue(cudaStream_t stream, const GraphBox<double>& box, GraphStatus* status) {
    if (!neighbors || !rowEntries)
        throw OpenMMException("GraphForce: the neighbour rows could not be allocated after an earlier failure (see its message); "
                              "free device memory, then reinitialize the Context");
    double* x = positions();
    const float4* correction = (const float4*) correctionPointer();
    const int* atomIndex = (const int*) atomIndexPointer();
    const int* nodeOfSystemParticle = reinterpret_cast<const int*>(nodeOfParticle->getDevicePointer());
    if (cu.getUseDoublePrecision())
        launchGatherPositions<GraphDouble4>((const GraphDouble4*) cu.getPosq().getDevicePointer(), nullptr, atomIndex, cu.getNumAtoms(),
                                            nodeOfSystemParticle, x, slotOfNode(), status, stream);
    else
        launchGatherPositions<float4>((const float4*) cu.getPosq().getDevicePointer(), correction, atomIndex, cu.getNumAtoms(),
                                      nodeOfSystemParticle, x, slotOfNode(), status, stream);
    if (allPairs) {
        launchBuildRowsAllPairs(x, n, firstCenter, numCenters, box, cutoff, rowCapacity, buildScratchRows,
                                reinterpret_cast<uint64_t*>(rowEntries->getDevicePointer()),
                                reinterpret_cast<int*>(neighbors->getDevicePointer()),
                                reinterpret_cast<int*>(rowCountArray->getDevicePointer()), status, stream);
        GRAPH_CUDA_CHECK(cudaGetLastError());
        return;
    }
    GraphGrid<double>* cells = reinterpret_cast<GraphGrid<double>*>(grid->getDevicePointer());
    launchGridSetup(x, n, box, cutoff, maxCells, gridBounds ? reinterpret_cast<double*>(gridBounds->getDevicePointer()) : nullptr, cells,
                    stream);
    launchCellSort(x, n, box, cells, maxCells, reinterpret_cast<uint32_t*>(cellOfNode->getDevicePointer()),
                   reinterpret_cast<uint32_t*>(sortedCells->getDevicePointer()), reinterpret_cast<int*>(nodeIds->getDevicePointer()),
                   reinterpret_cast<int*>(sortedNodes->getDevicePointer()),
                   reinterpret_cast<GraphDouble4*>(sortedPositions->getDevicePointer()),
                   reinterpret_cast<int*>(cellStart->getDevicePointer()), reinterpret_cast<char*>(sortScratch->getDevicePointer()),
                   sortScratchBytes, stream);
    launchBuildRows(n, firstCenter, numCenters, box, cells, reinterpret_cast<const GraphDouble4*>(sortedPositions->getDevicePointer()),
                    reinterpret_cast<const int*>(cellStart->getDevicePointer()), cutoff, rowCapacity, buildScratchRows,
                    reinterpret_cast<uint64_t*>(rowEntries->getDevicePointer()), reinterpret_cast<int*>(neighbors->getDevicePointer()),
                    reinterpret_cast<int*>(rowCountArray->getDevicePointer()), status, stream);
    GRAPH_CUDA_CHECK(cudaGetLastError());
}

void CudaNeighborGraph::enqueueCorrectionCopy(cudaStream_t stream) {
    if (!correctionCopy)
        return;
    // posqCorrection of the first context (this device's own is never written), outside any captured graph.  After
    // OpenMM's copy of posq to this device (enqueued on `stream` before; it waited for the first device's integration,
    // which wrote posqCorrection too), and off the legacy stream, so that it never waits for the first device's
    // evaluation (CudaPeerCopyStream).
    correctionStream->begin((CUstream) stream);
    correctionStream->copy(correctionCopy->getDevicePointer(), orderContext->getPosqCorrection().getDevicePointer(),
                           orderContext->getContext(), correctionCopy->getSize() * sizeof(float4));
    correctionStream->end((CUstream) stream);
}

void CudaNeighborGraph::grow(int maxRowCount) {
    ContextSelector selector(cu);
    allocateRows(std::min(std::max(1, n - 1), (int) (maxRowCount * 1.25) + 32));
}

void CudaNeighborGraph::setAtomOrder(const std::vector<int>& atomIndex) {
    if (!atomOrder)
        return;
    ContextSelector selector(cu);
    std::vector<int> order(atomIndex);
    order.resize(atomOrder->getSize(), 0);
    atomOrder->upload(order);
}

void CudaNeighborGraph::checkBox(CudaContext& cu, double cutoff, bool periodic) {
    if (!periodic)
        return;
    Vec3 a, b, c;
    cu.getPeriodicBoxVectors(a, b, c);
    GraphForceImpl::checkCutoffFitsBox(cutoff, a, b, c);
}

GraphBox<double> CudaNeighborGraph::currentBox() const {
    Vec3 v[3];
    cu.getPeriodicBoxVectors(v[0], v[1], v[2]);
    const double a[3] = {v[0][0], v[0][1], v[0][2]}, b[3] = {v[1][0], v[1][1], v[1][2]}, c[3] = {v[2][0], v[2][1], v[2][2]};
    return boxOfVectors(a, b, c, periodic);
}

std::string CudaNeighborGraph::errorMessage(const GraphStatus& s) const {
    if (s.errorCode == GraphErrorNone)
        return "";
    auto name = [&](int node) { return node >= 0 && node < n ? std::to_string(particles[node]) : std::to_string(node); };
    std::stringstream message;
    message << "GraphForce: ";
    switch (s.errorCode) {
    case GraphErrorSamePosition:
        message << "System particles " << name(s.errorParticle[0]) << " and " << name(s.errorParticle[1])
                << " are at the same position; the model is undefined at zero distance";
        break;
    case GraphErrorNonFinitePosition:
        message << "the position of System particle " << name(s.errorParticle[0]) << " is not finite";
        break;
    case GraphErrorNonFiniteEnergy:
        message << "the energy of System particle " << name(s.errorParticle[0]) << " is not finite or beyond 1e9 kJ/mol (" << s.errorValue
                << "); check the positions and the model";
        break;
    case GraphErrorForceOutOfRange:
        message << "a force contribution between System particles " << name(s.errorParticle[0]) << " and " << name(s.errorParticle[1])
                << " is not finite or beyond the fixed-point range (" << s.errorValue << " kJ/mol/nm); check the positions and the model";
        break;
    case GraphErrorEdgeOrder:
        message << "the streamed moments scan met the edge from System particle " << name(s.errorParticle[0]) << " to System particle "
                << name(s.errorParticle[1]) << " (table interval " << s.errorValue
                << ") after an edge two or more intervals farther out, which its ring of knots cannot serve; set the GraphForce "
                   "property CudaMomentsScan to \"rows\" and report the model and positions";
        break;
    default:
        message << "unknown device error " << s.errorCode;
    }
    return message.str();
}

CUdeviceptr CudaNeighborGraph::atomIndexPointer() const {
    return atomOrder ? atomOrder->getDevicePointer() : cu.getAtomIndexArray().getDevicePointer();
}

CUdeviceptr CudaNeighborGraph::correctionPointer() const {
    if (!cu.getUseMixedPrecision())
        return 0;
    return correctionCopy ? correctionCopy->getDevicePointer() : cu.getPosqCorrection().getDevicePointer();
}

void CudaNeighborGraph::allocateRows(int newCapacity) {
    // The row build's scratch: one row per warp that can be resident (64 per multiprocessor), reused row after row.
    const int scratchRows = std::max(1, std::min(n, 64 * numMultiprocessors));
    auto allocate = [&](int capacity) {
        rowEntries.reset(); // the old arrays go first: their memory may be what the new ones need
        neighbors.reset();
        rowEntries.reset(CudaArray::create<uint64_t>(cu, (size_t) scratchRows * capacity, "graphRowEntries"));
        neighbors.reset(CudaArray::create<int>(cu, (size_t) std::max(1, n) * capacity, "graphNeighbors"));
    };
    const int oldCapacity = neighbors ? rowCapacity : 0;
    try {
        allocate(newCapacity);
    }
    catch (const std::exception& error) {
        // Put arrays of the old capacity back, so that the Context stays usable (its next evaluation that needs the
        // larger rows fails again with this message); if even that fails, enqueue() refuses to run.
        rowEntries.reset();
        neighbors.reset();
        if (oldCapacity > 0) {
            try {
                allocate(oldCapacity);
            }
            catch (const std::exception&) {
                rowEntries.reset();
                neighbors.reset();
            }
        }
        throw OpenMMException("GraphForce: cannot allocate neighbour rows of " + std::to_string(newCapacity) + " entries for " +
                              std::to_string(n) + " particles (" + std::to_string((size_t) std::max(1, n) * newCapacity * 4 / 1000000) +
                              " MB): " + error.what() +
                              "; a row this crowded needs more device memory (check the positions for particles far too close)");
    }
    rowCapacity = newCapacity;
    buildScratchRows = scratchRows;
}

int CudaNeighborGraph::initialCapacity() const {
    double expected = 64;
    if (periodic) {
        Vec3 a, b, c;
        cu.getPeriodicBoxVectors(a, b, c);
        const double density = n / (a[0] * b[1] * c[2]);
        expected = 1.25 * density * 4.0 / 3.0 * 3.141592653589793 * std::pow(cutoff, 3) + 32;
    }
    // A first guess only (rows grow on overflow): at most 1024 neighbours, whatever the default box says.
    expected = std::min(expected, 1024.0);
    const int capacity = ((int) expected + 31) / 32 * 32;
    return std::max(1, std::min(capacity, std::max(1, n - 1)));
}
