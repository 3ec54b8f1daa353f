#include "CallbackForce.h"
#include "CallbackForceImpl.h"

using namespace GraphPlugin;

CallbackForce::CallbackForce() : function(nullptr), userData(nullptr), periodic(false) {
}

void CallbackForce::setFunction(Function function, void* userData) {
    this->function = function;
    this->userData = userData;
}

void CallbackForce::setFunctionAddress(unsigned long long function, unsigned long long userData) {
    setFunction(reinterpret_cast<Function>(static_cast<uintptr_t>(function)), reinterpret_cast<void*>(static_cast<uintptr_t>(userData)));
}

void CallbackForce::setUsesPeriodicBoundaryConditions(bool periodic) {
    this->periodic = periodic;
}

bool CallbackForce::usesPeriodicBoundaryConditions() const {
    return periodic;
}

OpenMM::ForceImpl* CallbackForce::createImpl() const {
    return new CallbackForceImpl(*this);
}
