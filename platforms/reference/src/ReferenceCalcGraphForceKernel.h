#ifndef OPENMM_GRAPH_REFERENCE_CALC_GRAPH_FORCE_KERNEL_H_
#define OPENMM_GRAPH_REFERENCE_CALC_GRAPH_FORCE_KERNEL_H_

#include "GraphKernels.h"
#include "ReferenceGraphEvaluator.h"
#include "ReferenceMpiDomains.h"
#include "ReferenceNeighborGraph.h"
#include <memory>
#include <vector>

namespace GraphPlugin {

/**
 * GraphForce on the Reference platform (and the CPU platform, which shares its
 * data): the full model in double precision, analytic forces, a fresh
 * canonical graph every evaluation.
 */
class ReferenceCalcGraphForceKernel : public CalcGraphForceKernel {
public:
    ReferenceCalcGraphForceKernel(std::string name, const OpenMM::Platform& platform) : CalcGraphForceKernel(name, platform) {}
    void initialize(const OpenMM::System& system, const GraphForce& force) override;
    double execute(OpenMM::ContextImpl& context, bool includeForces, bool includeEnergy) override;
    void getParticleEnergies(OpenMM::ContextImpl& context, std::vector<double>& energies) override;
    void copyParametersToContext(OpenMM::ContextImpl& context, const GraphForce& force) override;

private:
    /** Gather positions of the force's particles and build the graph (checks the box); returns the box or nullptr. */
    const OpenMM::Vec3* buildGraph(OpenMM::ContextImpl& context);

    std::shared_ptr<const GraphModel> model;
    std::unique_ptr<ReferenceGraphEvaluator> evaluator;
    std::vector<int> particles; ///< [n] System index of each particle of the force
    std::vector<int> types;     ///< [n] model type
    bool periodic = false;
    bool checkFinite = true;
    ReferenceNeighborGraph graph;
    std::unique_ptr<ReferenceMpiDomains> domains; ///< Domains = "mpi"
    std::vector<OpenMM::Vec3> localPositions, localForces;
};

} // namespace GraphPlugin

#endif
