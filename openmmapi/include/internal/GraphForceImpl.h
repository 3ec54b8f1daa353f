#ifndef OPENMM_GRAPH_FORCE_IMPL_H_
#define OPENMM_GRAPH_FORCE_IMPL_H_

#include "GraphForce.h"
#include "openmm/Kernel.h"
#include "openmm/internal/ForceImpl.h"
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace GraphPlugin {

/**
 * The internal implementation of GraphForce: validates the force against the
 * System once, at Context creation, and dispatches to the platform's kernel.
 */
class GraphForceImpl : public OpenMM::ForceImpl {
public:
    explicit GraphForceImpl(const GraphForce& owner);
    void initialize(OpenMM::ContextImpl& context) override;
    const GraphForce& getOwner() const override {
        return owner;
    }
    void updateContextState(OpenMM::ContextImpl& context, bool& forcesInvalid) override {}
    double calcForcesAndEnergy(OpenMM::ContextImpl& context, bool includeForces, bool includeEnergy, int groups) override;
    std::map<std::string, double> getDefaultParameters() override {
        return {};
    }
    std::vector<std::string> getKernelNames() override;
    void updateParametersInContext(OpenMM::ContextImpl& context);
    std::vector<double> getParticleEnergies(OpenMM::ContextImpl& context);
    /**
     * Check a force against a System (particle indices in range and unique,
     * types in range, box large enough for the cut-off).  Throws an
     * OpenMMException that says what is wrong and how to fix it.
     */
    static void validate(const GraphForce& force, const OpenMM::System& system);

private:
    const GraphForce& owner;
    OpenMM::Kernel kernel;
};

} // namespace GraphPlugin

#endif
