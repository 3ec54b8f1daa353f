// GraphForce on a CUDA Context spanning two GPUs (DeviceIndex "0,1") against
// one GPU: forces bitwise equal, energy to 1e-12 (1e-6 in single precision,
// where OpenMM's energy buffers are float) and per-particle energies to 1e-12,
// through OpenMM's atom reordering (a cut-off NonbondedForce in another force
// group makes OpenMM reorder the first context), in every precision, with and
// without an interaction block.  Skipped (and reported so by ctest) on a
// machine with fewer than two GPUs; on one with two, any error fails it.
#include "GraphForce.h"
#include "TestModelBuilder.h"
#include "openmm/Context.h"
#include "openmm/NonbondedForce.h"
#include "openmm/OpenMMException.h"
#include "openmm/Platform.h"
#include "openmm/State.h"
#include "openmm/System.h"
#include "openmm/VerletIntegrator.h"
#include <cmath>
#include <cuda.h>
#include <gtest/gtest.h>
#include <memory>
#include <random>

using namespace GraphPlugin;
using namespace OpenMM;

namespace {

Platform& cudaPlatform() {
    static bool loaded = [] {
        Platform::loadPluginsFromDirectory(Platform::getDefaultPluginsDirectory());
        Platform::loadPluginsFromDirectory(GRAPH_PLUGIN_DIR);
        return true;
    }();
    (void) loaded;
    return Platform::getPlatformByName("CUDA");
}

/** 600 particles on a jittered lattice in a periodic cube, two types; the GraphForce in group 0, a zero NonbondedForce in group 1. */
System* makeSystem(int numInteractions, std::vector<Vec3>& positions) {
    const int side = 9, n = 600;
    const double spacing = 0.215, width = side * spacing;
    std::mt19937 rng(17);
    std::uniform_real_distribution<double> jitter(-0.03, 0.03);
    System* system = new System();
    system->setDefaultPeriodicBoxVectors(Vec3(width, 0, 0), Vec3(0, width, 0), Vec3(0, 0, width));
    GraphTest::ModelOptions options;
    options.numInteractions = numInteractions;
    options.lMax = 2;
    GraphForce* force = GraphForce::fromModelBytes(GraphTest::makeModelBytes(options));
    force->setUsesPeriodicBoundaryConditions(true);
    NonbondedForce* nonbonded = new NonbondedForce();
    nonbonded->setNonbondedMethod(NonbondedForce::CutoffPeriodic);
    nonbonded->setCutoffDistance(0.5);
    nonbonded->setForceGroup(1);
    positions.clear();
    for (int i = 0; i < n; i++) {
        system->addParticle(12.0);
        force->addParticle(i, (i * 7) % 2);
        nonbonded->addParticle(0.0, 0.1, 0.0);
        positions.push_back(Vec3((i % side + 0.5) * spacing + jitter(rng), ((i / side) % side + 0.5) * spacing + jitter(rng),
                                 (i / (side * side) + 0.5) * spacing + jitter(rng)));
    }
    system->addForce(force);
    system->addForce(nonbonded);
    return system;
}

void expectSameGraphForces(Context& one, Context& two, const std::string& where) {
    State a = one.getState(State::Energy | State::Forces, false, 1 << 0);
    State b = two.getState(State::Energy | State::Forces, false, 1 << 0);
    // In single precision OpenMM's energy buffers are float: the devices' partial sums round there (mixed, double: 1e-12).
    const bool single = one.getPlatform().getPropertyValue(one, "Precision") == "single";
    EXPECT_NEAR(a.getPotentialEnergy(), b.getPotentialEnergy(), (single ? 1e-6 : 1e-12) * std::fabs(a.getPotentialEnergy())) << where;
    for (size_t i = 0; i < a.getForces().size(); i++)
        for (int c = 0; c < 3; c++)
            ASSERT_EQ(a.getForces()[i][c], b.getForces()[i][c]) << where << ", particle " << i;
    const GraphForce& force = dynamic_cast<const GraphForce&>(one.getSystem().getForce(0));
    std::vector<double> ea = force.getParticleEnergies(one), eb = force.getParticleEnergies(two);
    ASSERT_EQ(ea.size(), eb.size());
    for (size_t i = 0; i < ea.size(); i++)
        ASSERT_NEAR(ea[i], eb[i], 1e-12 * std::fabs(ea[i]) + 1e-15) << where << ", particle energy " << i;
}

} // namespace

int deviceCount() {
    int count = 0;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGetCount(&count) != CUDA_SUCCESS)
        return 0;
    return count;
}

TEST(CudaGraphForceMultiDevice, TwoGpusGiveTheForcesOfOne) {
    if (deviceCount() < 2)
        GTEST_SKIP() << "needs two CUDA devices, found " << deviceCount();
    for (const char* precision : {"single", "mixed", "double"})
        for (int interactions = 0; interactions <= 1; interactions++) {
            const std::string where = std::string(precision) + ", interactions " + std::to_string(interactions);
            std::vector<Vec3> positions;
            std::unique_ptr<System> system(makeSystem(interactions, positions));
            VerletIntegrator integrator1(0.0005), integrator2(0.0005);
            Context one(*system, integrator1, cudaPlatform(), {{"Precision", precision}, {"DeviceIndex", "0"}});
            std::unique_ptr<Context> two(
                new Context(*system, integrator2, cudaPlatform(), {{"Precision", precision}, {"DeviceIndex", "0,1"}}));
            ASSERT_EQ("0,1", cudaPlatform().getPropertyValue(*two, "DeviceIndex")) << where;
            one.setPositions(positions);
            two->setPositions(positions);
            expectSameGraphForces(one, *two, where + ", initial positions");
            if (std::string(precision) == "single")
                continue; // fp32 positions are rounded anew when OpenMM moves a particle by a box vector
            // 300 steps on two GPUs (OpenMM reorders the first context at step 250), then the same positions on one.
            two->setVelocitiesToTemperature(300, 5);
            integrator2.step(300);
            one.setPositions(two->getState(State::Positions).getPositions());
            expectSameGraphForces(one, *two, where + ", after 300 steps");
        }
}

TEST(CudaGraphForceMultiDevice, AnErrorOnOneDeviceIsAnExceptionAndNothingIsLost) {
    if (deviceCount() < 2)
        GTEST_SKIP() << "needs two CUDA devices, found " << deviceCount();
    for (int interactions = 0; interactions <= 1; interactions++) {
        const std::string where = "interactions " + std::to_string(interactions);
        std::vector<Vec3> positions;
        std::unique_ptr<System> system(makeSystem(interactions, positions));
        VerletIntegrator integrator1(0.0005), integrator2(0.0005);
        Context one(*system, integrator1, cudaPlatform(), {{"Precision", "mixed"}, {"DeviceIndex", "0"}});
        Context two(*system, integrator2, cudaPlatform(), {{"Precision", "mixed"}, {"DeviceIndex", "0,1"}});
        // Particles 598 and 599 (the second device's share) at the same position: the error names them, on every evaluation.
        std::vector<Vec3> bad = positions;
        bad[599] = bad[598];
        two.setPositions(bad);
        for (int attempt = 0; attempt < 2; attempt++) {
            try {
                two.getState(State::Forces, false, 1 << 0);
                FAIL() << where << ": no error for two particles at the same position";
            }
            catch (const OpenMMException& error) {
                EXPECT_NE(std::string(error.what()).find("same position"), std::string::npos) << where << ": " << error.what();
            }
        }
        // The Context still works once the positions are fixed.
        one.setPositions(positions);
        two.setPositions(positions);
        expectSameGraphForces(one, two, where + ", after the error");
    }
}

TEST(CudaGraphForceMultiDevice, RequiredCudaGraphWithASplitInteractionBlockIsAClearError) {
    if (deviceCount() < 2)
        GTEST_SKIP() << "needs two CUDA devices, found " << deviceCount();
    std::vector<Vec3> positions;
    std::unique_ptr<System> system(makeSystem(1, positions));
    dynamic_cast<GraphForce&>(system->getForce(0)).setProperty("CudaGraph", "true");
    VerletIntegrator integrator(0.0005);
    try {
        Context two(*system, integrator, cudaPlatform(), {{"DeviceIndex", "0,1"}});
        FAIL() << "a Context was created";
    }
    catch (const OpenMMException& error) {
        EXPECT_NE(std::string(error.what()).find("CudaGraph"), std::string::npos) << error.what();
    }
}
