#ifndef OPENMM_GRAPH_KERNELS_H_
#define OPENMM_GRAPH_KERNELS_H_

#include "GraphForce.h"
#include "openmm/KernelImpl.h"
#include "openmm/OpenMMException.h"
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

protected:
    /**
     * The force's particle types for updateParametersInContext, checked: the
     * particles (their number and System indices, `particles`) must be those
     * the kernel was initialized with, and every type in range; otherwise an
     * OpenMMException that names the particle.
     */
    static std::vector<int> updatedTypes(const GraphForce& force, const std::vector<int>& particles) {
        const std::string where = "GraphForce: updateParametersInContext: ";
        const std::string only = "; only types can change (reinitialize the Context to change the particles)";
        if (force.getNumParticles() != (int) particles.size())
            throw OpenMM::OpenMMException(where + "the number of particles changed from " + std::to_string(particles.size()) + " to " +
                                          std::to_string(force.getNumParticles()) + only);
        std::vector<int> types(particles.size());
        for (int i = 0; i < force.getNumParticles(); i++) {
            int particle;
            force.getParticleParameters(i, particle, types[i]);
            if (particle != particles[i])
                throw OpenMM::OpenMMException(where + "particle " + std::to_string(i) + " changed from System particle " +
                                              std::to_string(particles[i]) + " to " + std::to_string(particle) + only);
            if (types[i] < 0 || types[i] >= force.getNumTypes())
                throw OpenMM::OpenMMException(where + "particle " + std::to_string(i) + " has type " + std::to_string(types[i]) +
                                              ", out of range: the model has " + std::to_string(force.getNumTypes()) + " types");
        }
        return types;
    }
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
