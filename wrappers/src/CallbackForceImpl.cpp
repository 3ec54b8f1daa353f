#include "CallbackForceImpl.h"
#include "DLPackError.h"
#include "ManagedView.h"
#include "StateViewProvider.h"
#include "openmm/OpenMMException.h"
#include <cmath>

using namespace GraphPlugin;
using namespace OpenMM;

namespace {

/** A borrowed DLTensor of a view (shape and strides stored beside it). */
struct BorrowedTensor {
    DLTensor tensor{};
    int64_t shape[OMMGRAPH_VIEW_MAX_DIMS] = {};
    int64_t strides[OMMGRAPH_VIEW_MAX_DIMS] = {};
    explicit BorrowedTensor(const StateView& view) {
        tensor = dlTensorOf(view.layout, shape, strides); // after shape and strides are initialized
    }
};

} // namespace

void CallbackForceImpl::initialize(ContextImpl& context) {
    if (owner.getFunction() == nullptr)
        throw OpenMMException("CallbackForce: no function was set; call setFunction() before creating the Context");
    try {
        StateViewProvider::forContext(context);
    }
    catch (const DLPackError& e) {
        throw OpenMMException(std::string("CallbackForce: ") + e.what());
    }
}

double CallbackForceImpl::calcForcesAndEnergy(ContextImpl& context, bool includeForces, bool includeEnergy, int groups) {
    // Before the group test: a nested evaluation of any group would clear and refill the force buffer that the outer
    // one is filling (its forces doubled), and one of the callback's own group would recurse without end.
    if (inCall) {
        reentered = true; // the outer evaluation fails too, even if the callback catches this: its buffer was refilled
        throw OpenMMException("CallbackForce: the callback function evaluated its own Context (getState with energy or forces, or a "
                              "step) while the Context was evaluating it; compute what it needs from the views it is given, or "
                              "use another Context");
    }
    if ((groups & (1 << owner.getForceGroup())) == 0)
        return 0.0;
    const CallbackForce::Function function = owner.getFunction();
    if (function == nullptr)
        throw OpenMMException("CallbackForce: the function was cleared after the Context was created; set one again (or "
                              "reinitialize the Context)");
    struct InCall {
        bool& flag;
        explicit InCall(bool& flag) : flag(flag) {
            flag = true;
        }
        ~InCall() {
            flag = false;
        }
    } guard(inCall);
    reentered = false;
    double energy = 0.0;
    int status;
    try {
        std::unique_ptr<StateViewProvider> provider = StateViewProvider::forContext(context);
        StateView positions = provider->describe(OMMGRAPH_VIEW_POSITIONS);
        StateView forces = provider->describe(OMMGRAPH_VIEW_FORCES);
        StateView box = provider->describe(OMMGRAPH_VIEW_BOX);
        StateView order = provider->describe(OMMGRAPH_VIEW_ATOM_ORDER);
        BorrowedTensor positionsTensor(positions), forcesTensor(forces), boxTensor(box), orderTensor(order);
        status = function(owner.getUserData(), &positionsTensor.tensor, includeForces ? &forcesTensor.tensor : nullptr, &boxTensor.tensor,
                          &orderTensor.tensor, provider->stream(), &energy);
    }
    catch (const DLPackError& e) {
        throw OpenMMException(std::string("CallbackForce: ") + e.what());
    }
    if (reentered)
        throw OpenMMException("CallbackForce: the callback function evaluated its own Context while the Context was evaluating it "
                              "(refused, and the forces of this evaluation are lost); compute what it needs from the views it is "
                              "given, or use another Context");
    if (status != 0)
        throw OpenMMException("CallbackForce: the callback function reported failure (status " + std::to_string(status) +
                              "); see its own output for the reason");
    if (!std::isfinite(energy))
        throw OpenMMException("CallbackForce: the callback function returned a non-finite energy (" + std::to_string(energy) + ")");
    return energy;
}
