// The CUDA platform for the shared test bodies, at the precision named by
// GRAPH_TEST_PRECISION ("single", "mixed" or "double"); checked against the
// Reference platform.  Plugins are loaded the way an application loads them:
// OpenMM's own from OPENMM_PLUGIN_DIR (set by ctest) or its default folder,
// then openmm-graph's from the build tree (GRAPH_PLUGIN_DIR).
#include "openmm/Platform.h"
#include <cstring>
#include <map>
#include <string>


OpenMM::Platform& testPlatform() {
    static bool loaded = [] {
        OpenMM::Platform::loadPluginsFromDirectory(OpenMM::Platform::getDefaultPluginsDirectory());
        OpenMM::Platform::loadPluginsFromDirectory(GRAPH_PLUGIN_DIR);
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
