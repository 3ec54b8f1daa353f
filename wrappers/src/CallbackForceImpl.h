#ifndef OPENMM_GRAPH_CALLBACK_FORCE_IMPL_H_
#define OPENMM_GRAPH_CALLBACK_FORCE_IMPL_H_

#include "CallbackForce.h"
#include "openmm/internal/ForceImpl.h"
#include <map>
#include <string>
#include <vector>

namespace GraphPlugin {

/**
 * Calls the CallbackForce's function with borrowed views of the Context's
 * state (through the platform's StateViewProvider); needs no platform kernel.
 */
class CallbackForceImpl : public OpenMM::ForceImpl {
public:
    explicit CallbackForceImpl(const CallbackForce& owner) : owner(owner) {
    }
    void initialize(OpenMM::ContextImpl& context) override;
    const CallbackForce& getOwner() const override {
        return owner;
    }
    void updateContextState(OpenMM::ContextImpl& context, bool& forcesInvalid) override {
    }
    double calcForcesAndEnergy(OpenMM::ContextImpl& context, bool includeForces, bool includeEnergy, int groups) override;
    std::map<std::string, double> getDefaultParameters() override {
        return {};
    }
    std::vector<std::string> getKernelNames() override {
        return {};
    }

private:
    const CallbackForce& owner;
    /** Whether the function is running: an evaluation of the Context from inside it is refused (it would reuse the force buffer being
     * filled). */
    bool inCall = false;
    /** Whether the function tried that during the current call (the call then fails, whatever it returns). */
    bool reentered = false;
};

} // namespace GraphPlugin

#endif
