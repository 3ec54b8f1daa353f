// The CUDA platform for the shared test bodies, at the precision named by
// GRAPH_TEST_PRECISION ("single", "mixed" or "double"); checked against the
// Reference platform.  OpenMM's CUDA platform is loaded from
// OPENMM_PLUGIN_DIR (set by ctest) or OpenMM's default plugin folder.
#include "openmm/Platform.h"
#include <cstring>
#include <map>
#include <string>

extern "C" void registerGraphReferenceKernelFactories();
extern "C" void registerGraphCudaKernelFactories();

OpenMM::Platform& testPlatform() {
    static bool loaded = [] {
        OpenMM::Platform::loadPluginsFromDirectory(OpenMM::Platform::getDefaultPluginsDirectory());
        registerGraphReferenceKernelFactories();
        registerGraphCudaKernelFactories();
        return true;
    }();
    (void) loaded;
    return OpenMM::Platform::getPlatformByName("CUDA");
}
std::map<std::string, std::string> testPlatformProperties() {
    return {{"Precision", GRAPH_TEST_PRECISION}};
}
double testForceTolerance() {
    return std::strcmp(GRAPH_TEST_PRECISION, "double") == 0 ? 1e-8 : 5e-5;
}
double testEnergyTolerance() {
    return std::strcmp(GRAPH_TEST_PRECISION, "double") == 0 ? 1e-8 : 2e-6;
}
