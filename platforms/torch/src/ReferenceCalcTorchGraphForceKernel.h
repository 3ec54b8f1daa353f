#ifndef OPENMM_GRAPH_REFERENCE_CALC_TORCH_GRAPH_FORCE_KERNEL_H_
#define OPENMM_GRAPH_REFERENCE_CALC_TORCH_GRAPH_FORCE_KERNEL_H_

#include "GraphKernels.h"
#include "ReferenceMpiDomains.h"
#include "ReferenceNeighborGraph.h"
#include "TorchModelRunner.h"
#include <memory>
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
 *
 * With the property Domains = "mpi" (TorchScript models): every MPI rank
 * hands the module its own slab of particles (the split of the native path,
 * ReferenceMpiDomains) followed by the ghosts its rows reach, with n_owned and
 * the communicate handle of an MPI engine, so a module with message passing
 * fills its ghosts' node features through openmmgraph::communicate; forces
 * are summed over the ranks in fixed point and the energy in rank order.
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
    /** One evaluation of this rank's domain (Domains = "mpi"): the summed energy (kJ/mol); forces added, summed over the ranks. */
    double evaluateDomain(OpenMM::ContextImpl& context, std::vector<OpenMM::Vec3>* forces);
    /**
     * Run the model on a graph (model units) and add its forces: energies [rows] (model units); forces, when
     * not null, get -dE/dx of the graph's particles through `local` (local index -> force index).
     */
    torch::Tensor runGraph(const std::vector<int>& local, const std::vector<int64_t>& rowOffsets, const std::vector<int>& neighbors,
                           const std::vector<OpenMM::Vec3>& edgeVectors, const OpenMM::Vec3* box, int64_t communicator,
                           std::vector<OpenMM::Vec3>* forces);

    std::shared_ptr<const GraphModel> model;
    std::unique_ptr<TorchModelRunner> runner;
    torch::Dtype dtype = torch::kFloat64;
    std::vector<int> particles; ///< [n] System index of each particle of the force
    std::vector<int64_t> types; ///< [n] model type
    bool periodic = false;
    bool checkFinite = true;
    ReferenceNeighborGraph graph;
    std::unique_ptr<ReferenceMpiDomains> domains; ///< Domains = "mpi"
    std::vector<OpenMM::Vec3> localPositions, localForces;
};

} // namespace GraphPlugin

#endif
