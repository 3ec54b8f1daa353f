// The CUDA platform for the shared test bodies, at the precision named by
// GRAPH_TEST_PRECISION ("single", "mixed" or "double"); checked against the
// Reference platform.  Plugins are loaded the way an application loads them:
// OpenMM's own from OPENMM_PLUGIN_DIR (set by ctest) or its default folder,
// then openmm-graph's from the build tree (GRAPH_PLUGIN_DIR).
#include "openmm/OpenMMException.h"
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
    try {
        return OpenMM::Platform::getPlatformByName("CUDA");
    }
    catch (const OpenMM::OpenMMException& e) {
        // Say where the plugins were looked for and why any failed to load: a build carried to another machine keeps
        // the OPENMM_PLUGIN_DIR that ctest was configured with (tests/CMakeLists.txt), which may not exist there.
        std::string message = std::string(e.what()) + " (OpenMM's plugins loaded from \"" + OpenMM::Platform::getDefaultPluginsDirectory() +
                              "\", openmm-graph's from \"" GRAPH_PLUGIN_DIR "\"";
        for (const std::string& failure : OpenMM::Platform::getPluginLoadFailures())
            message += "; " + failure;
        throw OpenMM::OpenMMException(message + ")");
    }
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
