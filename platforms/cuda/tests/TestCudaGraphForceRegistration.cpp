// The CUDA plugin loads next to OpenMM's CUDA platform and registers the
// GraphForce kernel there.  Needs a CUDA GPU and driver (label "gpu").
#include "GraphForce.h"
#include "openmm/Context.h"
#include "openmm/OpenMMException.h"
#include "openmm/Platform.h"
#include "openmm/System.h"
#include "openmm/VerletIntegrator.h"
#include <gtest/gtest.h>

using namespace GraphPlugin;
using namespace OpenMM;

TEST(CudaGraphForce, PluginRegistersWithTheCudaPlatform) {
    Platform::loadPluginsFromDirectory(Platform::getDefaultPluginsDirectory());
    Platform::loadPluginsFromDirectory(GRAPH_PLUGIN_DIR);
    for (const std::string& failure : Platform::getPluginLoadFailures())
        std::printf("OpenMM plugin load failure: %s\n", failure.c_str());
    Platform& cuda = Platform::getPlatformByName("CUDA");
    EXPECT_TRUE(cuda.supportsKernels({"CalcGraphForce"}));
}
