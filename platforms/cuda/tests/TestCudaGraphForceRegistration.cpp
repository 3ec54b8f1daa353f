// The CUDA plugin loads next to OpenMM's CUDA platform and registers the
// GraphForce kernel there.  Needs a CUDA GPU and driver (label "gpu").
#include "GraphForce.h"
#include "TestModelBuilder.h"
#include "openmm/Context.h"
#include "openmm/OpenMMException.h"
#include "openmm/Platform.h"
#include "openmm/System.h"
#include "openmm/VerletIntegrator.h"
#include <gtest/gtest.h>

using namespace GraphPlugin;
using namespace OpenMM;

extern "C" void registerGraphCudaKernelFactories();

TEST(CudaGraphForce, PluginRegistersWithTheCudaPlatform) {
    Platform::loadPluginsFromDirectory(Platform::getDefaultPluginsDirectory());
    for (const std::string& failure : Platform::getPluginLoadFailures())
        std::printf("OpenMM plugin load failure: %s\n", failure.c_str());
    Platform& cuda = Platform::getPlatformByName("CUDA");
    registerGraphCudaKernelFactories();
    EXPECT_TRUE(cuda.supportsKernels({"CalcGraphForce"}));

    // This build has no CUDA kernels yet: a Context says so clearly.
    System system;
    system.addParticle(1.0);
    GraphForce* force = GraphForce::fromModelBytes(GraphTest::makeModelBytes(GraphTest::ModelOptions()));
    force->addParticle(0, 0);
    system.addForce(force);
    VerletIntegrator integrator(0.001);
    try {
        Context context(system, integrator, cuda);
        FAIL() << "expected the CUDA platform to report that it has no GraphForce implementation";
    }
    catch (const OpenMMException& e) {
        EXPECT_NE(std::string(e.what()).find("no CUDA implementation"), std::string::npos) << e.what();
    }
}
