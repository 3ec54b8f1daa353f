#ifndef OPENMM_GRAPH_CUDA_CALC_GRAPH_FORCE_KERNEL_H_
#define OPENMM_GRAPH_CUDA_CALC_GRAPH_FORCE_KERNEL_H_

#include "CudaGraphPipeline.h"
#include "CudaMpiExchange.h"
#include "GraphKernels.h"
#include "ReferenceMpiDomains.h"
#include "openmm/cuda/CudaContext.h"
#include <memory>
#include <vector>

namespace GraphPlugin {

/**
 * GraphForce on the CUDA platform: the canonical graph built on the device
 * from OpenMM's posq, edge scans, the networks, and forces added in 64-bit
 * fixed point to OpenMM's force buffer (see CudaGraphPipeline).  fp32
 * arithmetic in single and mixed precision, fp64 in double precision.
 *
 * With the property Domains = "mpi": every MPI rank runs a Context for the
 * whole System and evaluates the centers [rank * n / size, (rank + 1) * n /
 * size); the fixed-point forces and energy words of the ranks are summed with
 * MPI (staged through host memory) and added to OpenMM's buffers, so every
 * rank gets bitwise the same values, the same as one process.  A step then
 * waits for the device once, for the sum; with an interaction block also twice
 * per exchange of node features and dE/dB between the ranks (CudaMpiExchange).
 */
class CudaCalcGraphForceKernel : public CalcGraphForceKernel {
public:
    /**
     * @param cu           the context this kernel runs on
     * @param domainIndex  with several GPUs: this device's share of the centers, [domainIndex * n / numDomains,
     *                     (domainIndex + 1) * n / numDomains) of the force's particles (CudaParallelCalcGraphForceKernel)
     * @param orderContext the first context of a multi-device Context (its atom order and posqCorrection), or nullptr
     * @param exchange     with several GPUs and a model with an interaction block: the exchange of node features between
     *                     the devices (not owned), or nullptr
     */
    CudaCalcGraphForceKernel(std::string name, const OpenMM::Platform& platform, OpenMM::CudaContext& cu, int domainIndex = 0,
                             int numDomains = 1, OpenMM::CudaContext* orderContext = nullptr, CudaGraphExchange* exchange = nullptr)
        : CalcGraphForceKernel(name, platform), cu(cu), domainIndex(domainIndex), numDomains(numDomains), orderContext(orderContext),
          exchange(exchange) {}
    ~CudaCalcGraphForceKernel();
    void initialize(const OpenMM::System& system, const GraphForce& force) override;
    double execute(OpenMM::ContextImpl& context, bool includeForces, bool includeEnergy) override;
    void getParticleEnergies(OpenMM::ContextImpl& context, std::vector<double>& energies) override;
    void copyParametersToContext(OpenMM::ContextImpl& context, const GraphForce& force) override;
    /** The centers this kernel evaluates, [first, first + count) of the force's particles. */
    int getFirstCenter() const {
        return firstCenter;
    }
    int getNumCenters() const {
        return numCenters;
    }
    /** Pass on the first context's atom order (multi-device Contexts, after each reordering). */
    void setAtomOrder(const std::vector<int>& atomIndex) {
        pipeline->setAtomOrder(atomIndex);
    }

private:
    /** Shared by the kernel and its StatusCheck (owned by the CudaContext, which may outlive the kernel). */
    struct PostComputationState {
        CudaGraphPipelineBase* pipeline = nullptr;
    };
    /** Reads the status of the evaluation in OpenMM's finishComputation; asks for a recomputation after an overflow. */
    class StatusCheck : public OpenMM::ComputeContext::ForcePostComputation {
    public:
        StatusCheck(std::shared_ptr<PostComputationState> state, OpenMM::CudaContext& cu) : state(state), cu(cu) {}
        double computeForceAndEnergy(bool includeForces, bool includeEnergy, int groups) override;

    private:
        std::shared_ptr<PostComputationState> state;
        OpenMM::CudaContext& cu;
    };
    /**
     * Domains = "mpi": one evaluation of this rank's centers, repeated (on every
     * rank together) while any rank's rows overflow; an error on any rank is an
     * OpenMMException on every rank.  Returns the energy summed over the ranks
     * (kJ/mol); with includeForces the summed forces are added to OpenMM's buffer.
     */
    double executeRanks(bool includeForces);
    /** Where this rank fails on purpose (OMMGRAPH_MPI_TEST_FAILURE, the tests of the agreement in docs/mpi.md). */
    enum class InjectedFailure { None, Evaluation, Exchange, Result };
    InjectedFailure injectedFailure = InjectedFailure::None;
    long long injectedFailures = 0; ///< evaluations left to fail (0: every one)

    OpenMM::CudaContext& cu;
    int domainIndex, numDomains, firstCenter = 0, numCenters = 0;
    OpenMM::CudaContext* orderContext;
    CudaGraphExchange* exchange;
    std::unique_ptr<CudaMpiExchange> ownedExchange; ///< Domains = "mpi" with an interaction block
    std::shared_ptr<const GraphModel> model;
    std::vector<int> particles, types;
    bool periodic = false;
    std::unique_ptr<CudaGraphPipelineBase> pipeline;
    std::unique_ptr<ReferenceMpiDomains> domains; ///< Domains = "mpi"
    std::shared_ptr<PostComputationState> postComputation;
};

} // namespace GraphPlugin

#endif
