#ifndef OPENMM_GRAPH_KERNELS_H_
#define OPENMM_GRAPH_KERNELS_H_

#include "GraphForce.h"
#include "openmm/KernelImpl.h"
#include "openmm/Platform.h"
#include "openmm/System.h"
#include <string>
#include <vector>

namespace GraphPlugin {

/**
 * The kernel that evaluates a GraphForce on one platform.
 */
class CalcGraphForceKernel : public OpenMM::KernelImpl {
public:
    static std::string Name() {
        return "CalcGraphForce";
    }
    CalcGraphForceKernel(std::string name, const OpenMM::Platform& platform) : OpenMM::KernelImpl(name, platform) {}
    /**
     * Prepare the kernel for a validated force (GraphForceImpl has already
     * checked particle indices and types).
     */
    virtual void initialize(const OpenMM::System& system, const GraphForce& force) = 0;
    /**
     * Add the forces of the model to the Context's forces and return its
     * energy in kJ/mol.
     */
    virtual double execute(OpenMM::ContextImpl& context, bool includeForces, bool includeEnergy) = 0;
    /**
     * Evaluate the per-particle energies (kJ/mol, in the order of the force's
     * particles) on the Context's current positions, without touching its forces.
     */
    virtual void getParticleEnergies(OpenMM::ContextImpl& context, std::vector<double>& energies) = 0;
    /**
     * Copy new particle types from the force (same particles as at initialize).
     */
    virtual void copyParametersToContext(OpenMM::ContextImpl& context, const GraphForce& force) = 0;
};

/**
 * The same kernel for a TorchScript model (docs/torch-models.md), provided by
 * the LibTorch plugin (libOpenMMGraphTorch) under its own name, so that a
 * platform without it says so instead of running the native kernel.
 */
class CalcTorchGraphForceKernel : public CalcGraphForceKernel {
public:
    static std::string Name() {
        return "CalcTorchGraphForce";
    }
    CalcTorchGraphForceKernel(std::string name, const OpenMM::Platform& platform) : CalcGraphForceKernel(name, platform) {}
};

} // namespace GraphPlugin

#endif
