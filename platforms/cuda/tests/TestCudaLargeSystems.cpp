// CUDA platform tests of systems near the limits of the fixed-point sums, in mixed precision (the words and kernels
// that form them are the same in every precision: each particle's energy is split as a double).  Each needs tens of
// GB of host and device memory and a minute or more, so they run once, not in each precision binary.
#define GRAPH_TEST_PRECISION "mixed"
#include "CudaTestPlatform.h"
#include "GraphForce.h"
#include "TestModelBuilder.h"
#include "openmm/Context.h"
#include "openmm/State.h"
#include "openmm/System.h"
#include "openmm/VerletIntegrator.h"
#include <cmath>
#include <gtest/gtest.h>
#include <memory>
#include <vector>

using namespace GraphPlugin;
using namespace OpenMM;

/**
 * 38,000,000 isolated particles (a simple cubic lattice 1 nm apart, beyond the 0.6 nm cut-off) whose energies are
 * about 9.9e8 kJ/mol each (the energy shift of their type), in a periodic box: a total of 3.76e16 kJ/mol, past the
 * 2^63 / 2^8 = 3.6e16 kJ/mol that the 2^-8 kJ/mol energy word holds.  Before the third word (bench/NOTES.md v67) that
 * word wrapped and the energy came out as about -3.4e16 kJ/mol, unreported.  The energies are floats in [2^29, 2^30)
 * (multiples of 64), so their sum in doubles is exact, and the GraphForce's total must be it (within 1e-12).  It needs, by estimate,
 * 20 GB of device memory (rows of 64 entries) and 15 GB of host memory, and ran in 46 s on an H100 (bench/NOTES.md
 * v67); tests/TestEnergyWords checks the words' arithmetic alone on the CPU.
 */
TEST(CudaLargeSystems, EnergyTotalPastOneWordIsExact) {
    const int side = 337, n = 38000000;
    GraphTest::ModelOptions options;
    options.numTypes = 1;
    options.lMax = 0;
    options.numChannels = 4;
    options.numAxis = 2;
    options.fittingWidths = {8};
    options.lastTypeShift = 9.9e8;
    System system;
    GraphForce* force = GraphForce::fromModelBytes(GraphTest::makeModelBytes(options));
    std::vector<Vec3> positions;
    positions.reserve(n);
    for (int i = 0; i < side && (int) positions.size() < n; i++)
        for (int j = 0; j < side && (int) positions.size() < n; j++)
            for (int k = 0; k < side && (int) positions.size() < n; k++) {
                force->addParticle(system.addParticle(12.0), 0);
                positions.push_back(Vec3(i + 0.5, j + 0.5, k + 0.5));
            }
    ASSERT_EQ(n, (int) positions.size());
    system.setDefaultPeriodicBoxVectors(Vec3(side, 0, 0), Vec3(0, side, 0), Vec3(0, 0, side));
    force->setUsesPeriodicBoundaryConditions(true);
    system.addForce(force);
    VerletIntegrator integrator(0.001);
    Context context(system, integrator, testPlatform(), testPlatformProperties());
    context.setPositions(positions);
    const double energy = context.getState(State::Energy).getPotentialEnergy();
    const std::vector<double> particleEnergies = force->getParticleEnergies(context);
    ASSERT_EQ((size_t) n, particleEnergies.size());
    double exact = 0;
    for (double e : particleEnergies) {
        ASSERT_TRUE(e >= 536870912.0 && e < 1073741824.0) << e; // [2^29, 2^30): a float there is a multiple of 64
        exact += e;
    }
    ASSERT_GT(exact, 3.61e16) << "the total must pass what one word holds";
    EXPECT_NEAR(exact, energy, 1e-12 * exact); // the wrapped word was 7.2e16 kJ/mol off
    // Twice: the words are cleared between evaluations.
    EXPECT_EQ(energy, context.getState(State::Energy).getPotentialEnergy());
}
