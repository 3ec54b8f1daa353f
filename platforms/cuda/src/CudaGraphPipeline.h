#ifndef OPENMM_GRAPH_CUDA_GRAPH_PIPELINE_H_
#define OPENMM_GRAPH_CUDA_GRAPH_PIPELINE_H_

#include "GraphDeviceTypes.h"
#include "internal/GraphModel.h"
#include "openmm/cuda/CudaArray.h"
#include "openmm/cuda/CudaContext.h"
#include <memory>
#include <vector>

namespace GraphPlugin {

/**
 * The whole evaluation of a GraphForce on the CUDA platform, for one
 * precision (`real` = float for single and mixed, double for double).
 * initialize-time work (allocation, uploads) happens in the constructor and
 * setTypes(); enqueue() only launches kernels on OpenMM's current stream.
 * Device memory is owned here (CudaArray of OpenMM's context).
 */
class CudaGraphPipelineBase {
public:
    virtual ~CudaGraphPipelineBase() {
    }
    /**
     * Enqueue one evaluation: graph, energy (added to OpenMM's energy buffer
     * when addEnergy) and, when includeForces, forces into OpenMM's force
     * buffer.  The status of the evaluation is copied asynchronously to
     * pinned host memory; finish() waits for it.
     */
    virtual void enqueue(bool includeForces, bool addEnergy) = 0;
    /**
     * Wait for the status of the last enqueue() and act on it: throws an
     * OpenMMException for an error, returns false when a neighbour row
     * overflowed (capacity has then grown and the caller must recompute).
     */
    virtual bool finish() = 0;
    /** Set the model type of every particle (force order). */
    virtual void setTypes(const std::vector<int>& types) = 0;
    /** Download the last per-particle energies (kJ/mol, force order); synchronises. */
    virtual void downloadParticleEnergies(std::vector<double>& energies) = 0;
};

/**
 * Creates the pipeline for the CudaContext's precision.
 *
 * @param particles  [n] System index of each particle of the force
 * @param types      [n] model type of each particle
 * @param periodic   whether the force uses the periodic box
 */
std::unique_ptr<CudaGraphPipelineBase> createCudaGraphPipeline(OpenMM::CudaContext& cu, std::shared_ptr<const GraphModel> model,
                                                               const std::vector<int>& particles, const std::vector<int>& types,
                                                               bool periodic, int numSystemParticles);

} // namespace GraphPlugin

#endif
