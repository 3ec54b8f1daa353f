// The shared GraphForce tests on the Reference platform (checked against finite differences).
#include "openmm/Platform.h"
#include <map>
#include <string>

extern "C" void registerGraphReferenceKernelFactories();

OpenMM::Platform& testPlatform() {
    static bool registered = (registerGraphReferenceKernelFactories(), true);
    (void) registered;
    return OpenMM::Platform::getPlatformByName("Reference");
}
std::map<std::string, std::string> testPlatformProperties() {
    return {};
}
double testForceTolerance() {
    return 0.0;
}
double testEnergyTolerance() {
    return 0.0;
}

#include "GraphForceTests.h"
