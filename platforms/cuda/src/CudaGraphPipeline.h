#ifndef OPENMM_GRAPH_CUDA_GRAPH_PIPELINE_H_
#define OPENMM_GRAPH_CUDA_GRAPH_PIPELINE_H_

#include "CudaGraphExchange.h"
#include "CudaNeighborGraph.h"
#include "GraphDeviceTypes.h"
#include "internal/GraphModel.h"
#include "openmm/cuda/CudaArray.h"
#include "openmm/cuda/CudaContext.h"
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace GraphPlugin {

/** The GraphForce property CudaGraph: "false", "auto" (capture, fall back to plain launches) or "true" (capture or fail). */
enum class CudaGraphMode { Off, Auto, Required };

/**
 * The GraphForce property CudaFusedNetwork: "false" (a kernel per layer),
 * "auto" (the fused kernel for batches too small to fill the device, where
 * it applies) or "true" (the fused kernel, or an error that says why not).
 */
enum class CudaFusedNetwork { Off, Auto, Required };

/**
 * The GraphForce property CudaFusedResidentWeights: "false" (every product
 * of the one-block fused kernel streams its weights), "auto" (the last
 * layers' W^T stays in shared memory where the tiles run in one wave) or
 * "true" (wherever a layer fits, or an error that says why not).
 */
enum class CudaResidentWeights { Off, Auto, Required };

/**
 * The GraphForce property CheckFinite on the CUDA platform: when finish()
 * learns of errors.  Current ("true"): it waits for the whole evaluation and
 * reports its errors before OpenMM uses its forces.  Deferred ("deferred"):
 * it waits only for the graph build (row overflow, coincident or non-finite
 * positions) and reports the errors of the rest of the evaluation (non-finite
 * energy, forces beyond the fixed-point range) at the next evaluation's
 * finish(), so the host's work of the step overlaps the device's.  Off
 * ("false"): as Deferred without the rest's errors.
 */
enum class CudaStatusCheck { Current, Deferred, Off };

/**
 * The GraphForce property CudaMomentsScan: the row scan (Rows), the streamed
 * scan (Streamed, or an error where it cannot run), the row scan inside the
 * fused network (Fused, or an error where it cannot run; bitwise the results
 * of Rows), or the pipeline's choice (Auto: docs/cuda-platform.md).
 */
enum class CudaMomentsScan { Auto, Rows, Streamed, Fused };

/**
 * The GraphForce property CudaForceScan: the row scan (Rows), the streamed
 * scan (Streamed, or an error where it cannot run: needs a model without an
 * interaction block), or the pipeline's choice (Auto: the row scan, which was
 * faster on an H200; docs/cuda-platform.md).  The forces are bitwise the same
 * either way.
 */
enum class CudaForceScan { Auto, Rows, Streamed };

/**
 * The GraphForce properties that choose how the CUDA pipeline runs; none
 * changes a result except CudaMomentsScan, whose streamed scan rounds the
 * moments differently (its other scans, and CudaForceScan's, give bitwise the
 * same results).
 */
struct CudaGraphOptions {
    CudaGraphMode graphMode = CudaGraphMode::Auto;          ///< CudaGraph
    int maxChunkRows = 0;                                   ///< CudaChunkRows: the most rows per chunk of the node stage, 0 for automatic
    CudaNeighborSearch search = CudaNeighborSearch::Auto;   ///< CudaNeighborSearch
    CudaFusedNetwork fusedNetwork = CudaFusedNetwork::Auto; ///< CudaFusedNetwork
    int fusedCluster = 0;                                   ///< CudaFusedCluster: blocks per tile of the fused network, 0 for automatic
    int fusedTileRows = 0;                                  ///< CudaFusedTileRows: rows per tile of the fused network, 0 for automatic
    CudaResidentWeights fusedResident = CudaResidentWeights::Auto; ///< CudaFusedResidentWeights
    CudaMomentsScan momentsScan = CudaMomentsScan::Auto;           ///< CudaMomentsScan
    CudaForceScan forceScan = CudaForceScan::Auto;                 ///< CudaForceScan
    /** CheckFinite (treated as Current wherever the domain is not the whole system on one device) */
    CudaStatusCheck statusCheck = CudaStatusCheck::Current;
};

/**
 * The share of one device when a Context spans several GPUs: the pipeline
 * evaluates the energies of the centers [firstCenter, firstCenter +
 * numCenters) (force order; their rows reach every particle) and adds their
 * forces to its own context's buffer, which OpenMM sums over devices.  On a
 * device other than the first, OpenMM keeps posq in the first context's atom
 * order but not that context's order array or (mixed precision)
 * posqCorrection: orderContext is then the first context, whose correction is
 * copied at each evaluation and whose order setAtomOrder() passes on.
 */
struct CudaGraphDomain {
    int firstCenter = 0;
    int numCenters = -1; ///< -1: every particle of the force
    OpenMM::CudaContext* orderContext = nullptr;
    /**
     * Domains = "mpi": forces go to a private buffer in force order and the
     * energy stays in the status record (not OpenMM's buffers), for the caller
     * to sum over the ranks (readRankResult, addRankForces).
     */
    bool rankSums = false;
    /**
     * A model with an interaction block split over the devices of one Context: the exchange of node features
     * and their gradients between the domains (CudaPeerExchange between devices, CudaMpiExchange between MPI ranks), and this
     * domain's index in it.  CUDA graphs
     * are not captured then ("true" is an error).
     */
    CudaGraphExchange* exchange = nullptr;
    int domainIndex = 0;
};

/**
 * The whole evaluation of a GraphForce on the CUDA platform, for one
 * precision (`real` = float for single and mixed, double for double).
 * initialize-time work (allocation, uploads) happens in the constructor and
 * setTypes(); enqueue() only launches kernels on OpenMM's current stream.
 * Device memory is owned here (CudaArray of OpenMM's context).
 */
class CudaGraphPipelineBase {
public:
    virtual ~CudaGraphPipelineBase() {}
    /**
     * Enqueue one evaluation: graph, energy (added to OpenMM's energy buffer
     * when addEnergy) and, when includeForces, forces into OpenMM's force
     * buffer.  The status of the evaluation is copied asynchronously to
     * pinned host memory; finish() reads it.  Nothing here waits for the
     * device; with CudaGraph on, the whole evaluation is one graph launch
     * (captured again when the box, the capacity or OpenMM's buffers change).
     */
    virtual void enqueue(bool includeForces, bool addEnergy) = 0;
    /**
     * Read the status of the last enqueue() (waiting for it if the device is
     * not done; with CudaStatusCheck Deferred or Off only for its graph build)
     * and act on it: throws an OpenMMException for an error (Deferred: also
     * for one of the evaluation before), returns false when a neighbour row
     * overflowed (capacity has then grown and the caller must recompute).
     * Returns true at once when nothing is pending.
     * Called from OpenMM's finishComputation (a ForcePostComputation), the
     * point where OpenMM reads its own neighbour-list count.
     */
    virtual bool finish() = 0;
    /** As finish(), but an error is returned in `error` (empty if none) instead of thrown (Domains = "mpi": every rank must hear of it). */
    virtual bool finish(std::string& error) = 0;
    /**
     * CudaGraphDomain::rankSums, after finish(): this evaluation's energy (the
     * words of GraphStatus::energyTop/High/Low) and, when forces is not null,
     * its forces ([3][n] in force order, 64-bit fixed point, 2^-32 kJ/mol/nm;
     * a copy to the host that synchronises).
     */
    virtual void readRankResult(std::vector<int64_t>* forces, int64_t energyWords[3]) = 0;
    /** CudaGraphDomain::rankSums: add forces ([3][n] force order, fixed point, host) to OpenMM's force buffer. */
    virtual void addRankForces(const std::vector<int64_t>& forces) = 0;
    /** Set the model type of every particle (force order). */
    virtual void setTypes(const std::vector<int>& types) = 0;
    /** Download the last per-particle energies (kJ/mol, force order; only the domain's centers are set); synchronises. */
    virtual void downloadParticleEnergies(std::vector<double>& energies) = 0;
    /**
     * With an orderContext: OpenMM's atom order ([paddedNumAtoms] atom of each
     * slot, from the first context's getAtomIndex()), uploaded to this device;
     * call after every reordering of the first context.  Synchronises.
     */
    virtual void setAtomOrder(const std::vector<int>& atomIndex) = 0;
};

/**
 * How the centers are shared out (devices of a Context, MPI ranks): domain d of
 * numDomains evaluates [first[d], first[d] + count[d]) = [d * n / numDomains,
 * (d + 1) * n / numDomains) of the force's n particles.
 */
inline void centerShares(int n, int numDomains, std::vector<int>& first, std::vector<int>& count) {
    first.resize(numDomains);
    count.resize(numDomains);
    for (int d = 0; d < numDomains; d++) {
        first[d] = (int) ((long long) d * n / numDomains);
        count[d] = (int) ((long long) (d + 1) * n / numDomains) - first[d];
    }
}

/**
 * Creates the pipeline for the CudaContext's precision.
 *
 * @param particles  [n] System index of each particle of the force
 * @param types      [n] model type of each particle
 * @param periodic   whether the force uses the periodic box
 * @param options    the GraphForce's CUDA properties
 * @param domain     this device's share (all centers by default); a model with an interaction block needs domain.exchange to be split
 */
std::unique_ptr<CudaGraphPipelineBase> createCudaGraphPipeline(OpenMM::CudaContext& cu, std::shared_ptr<const GraphModel> model,
                                                               const std::vector<int>& particles, const std::vector<int>& types,
                                                               bool periodic, int numSystemParticles, const CudaGraphOptions& options,
                                                               const CudaGraphDomain& domain = CudaGraphDomain());

} // namespace GraphPlugin

#endif
