#ifndef OPENMM_GRAPH_REFERENCE_CALC_TORCH_GRAPH_FORCE_KERNEL_H_
#define OPENMM_GRAPH_REFERENCE_CALC_TORCH_GRAPH_FORCE_KERNEL_H_

#include "GraphKernels.h"
#include "ReferenceNeighborGraph.h"
#include <memory>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/script.h>
#include <vector>

namespace GraphPlugin {

/**
 * A GraphForce with a PyTorch model (docs/torch-models.md) on the Reference
 * and CPU platforms: builds the compact canonical graph in double precision
 * on the host (ReferenceNeighborGraph, the native path's own), hands it to the
 * model as CPU tensors in the model's units and dtype (one domain: every
 * particle owned, no ghosts, communicator 0), and adds the forces from
 * dE/d edge_vectors and dE/d positions to OpenMM's.  A TorchScript module
 * returns energies and the gradients come by autograd; an AOTInductor package
 * (.pt2) returns the energies and both gradients itself.
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

    /** Run the model: energies [n] and (when wanted) dE/d edge_vectors [E, 3] and dE/d positions [n, 3] (undefined if unused). */
    void run(const std::vector<torch::Tensor>& inputs, int n, bool wantGradients, torch::Tensor& energies, torch::Tensor& gradEdges,
             torch::Tensor& gradPositions);

    std::shared_ptr<const GraphModel> model;
    torch::jit::Module module;                                         ///< TorchScript models
    std::unique_ptr<torch::inductor::AOTIModelPackageLoader> package; ///< AOTInductor models
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
