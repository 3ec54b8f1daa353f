#ifndef OPENMM_GRAPH_REFERENCE_CALC_TORCH_GRAPH_FORCE_KERNEL_H_
#define OPENMM_GRAPH_REFERENCE_CALC_TORCH_GRAPH_FORCE_KERNEL_H_

#include "GraphKernels.h"
#include "ReferenceNeighborGraph.h"
#include <memory>
#include <torch/csrc/autograd/autograd.h>
#include <torch/script.h>
#include <vector>

namespace GraphPlugin {

/**
 * A GraphForce with a TorchScript model (docs/torch-models.md) on the
 * Reference and CPU platforms: builds the compact canonical graph in double
 * precision on the host (ReferenceNeighborGraph, the native path's own),
 * hands it to the module as CPU tensors in the model's units and dtype (one
 * domain: every particle owned, no ghosts, communicator 0), and adds the
 * forces from autograd (dE/d edge_vectors, and dE/d positions for modules
 * that use them) to OpenMM's.
 */
class ReferenceCalcTorchGraphForceKernel : public CalcTorchGraphForceKernel {
public:
    ReferenceCalcTorchGraphForceKernel(std::string name, const OpenMM::Platform& platform) : CalcTorchGraphForceKernel(name, platform) {}
    void initialize(const OpenMM::System& system, const GraphForce& force) override;
    double execute(OpenMM::ContextImpl& context, bool includeForces, bool includeEnergy) override;
    void getParticleEnergies(OpenMM::ContextImpl& context, std::vector<double>& energies) override;
    void copyParametersToContext(OpenMM::ContextImpl& context, const GraphForce& force) override;

private:
    /**
     * One evaluation: energies of the particles (kJ/mol, [n]) and, when forces
     * is not null, the forces (kJ/mol/nm, force order) added to it.
     */
    torch::Tensor evaluate(OpenMM::ContextImpl& context, std::vector<OpenMM::Vec3>* forces);

    std::shared_ptr<const GraphModel> model;
    torch::jit::Module module;
    torch::Dtype dtype = torch::kFloat64;
    std::vector<int> particles; ///< [n] System index of each particle of the force
    std::vector<int64_t> types; ///< [n] model type
    bool periodic = false;
    bool checkFinite = true;
    ReferenceNeighborGraph graph;
    std::vector<OpenMM::Vec3> localPositions, localForces;
};

} // namespace GraphPlugin

#endif
