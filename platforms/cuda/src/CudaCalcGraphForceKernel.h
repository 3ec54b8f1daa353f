#ifndef OPENMM_GRAPH_CUDA_CALC_GRAPH_FORCE_KERNEL_H_
#define OPENMM_GRAPH_CUDA_CALC_GRAPH_FORCE_KERNEL_H_

#include "GraphKernels.h"
#include "openmm/cuda/CudaContext.h"

namespace GraphPlugin {

/**
 * GraphForce on the CUDA platform.  This version only registers the kernel
 * and reports that the fused CUDA implementation is not part of this build;
 * the fused device pipeline replaces it (see the project's issue list).
 */
class CudaCalcGraphForceKernel : public CalcGraphForceKernel {
public:
    CudaCalcGraphForceKernel(std::string name, const OpenMM::Platform& platform, OpenMM::CudaContext& cu)
        : CalcGraphForceKernel(name, platform), cu(cu) {}
    void initialize(const OpenMM::System& system, const GraphForce& force) override;
    double execute(OpenMM::ContextImpl& context, bool includeForces, bool includeEnergy) override;
    void getParticleEnergies(OpenMM::ContextImpl& context, std::vector<double>& energies) override;
    void copyParametersToContext(OpenMM::ContextImpl& context, const GraphForce& force) override;

private:
    OpenMM::CudaContext& cu;
};

} // namespace GraphPlugin

#endif
