/**
 * The shared test body of GraphForce, run on every platform.  A platform's test
 * file defines, before including this header:
 *
 *   OpenMM::Platform& testPlatform();                  // the platform under test
 *   std::map<std::string, std::string> testPlatformProperties();
 *   double testForceTolerance();                       // relative force RMS tolerance
 *   double testEnergyTolerance();                      // relative energy tolerance
 *
 * The Reference platform is checked against central finite differences of its
 * own energy; every other platform against the Reference platform.
 */

#include "GraphForce.h"
#include "TestModelBuilder.h"
#include "openmm/Context.h"
#include "openmm/CustomExternalForce.h"
#include "openmm/NonbondedForce.h"
#include "openmm/OpenMMException.h"
#include "openmm/Platform.h"
#include "openmm/State.h"
#include "openmm/System.h"
#include "openmm/VerletIntegrator.h"
#include <algorithm>
#include <cmath>
#include <gtest/gtest.h>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

using namespace GraphPlugin;
using namespace OpenMM;

namespace GraphForceTestBody {

enum class Geometry { Cluster, Cubic, Triclinic };

/** A model and a configuration to test on. */
struct Scenario {
    std::string name;
    GraphTest::ModelOptions model;
    Geometry geometry = Geometry::Cluster;
};

/** Positions (nm), types and box of a test configuration. */
struct Configuration {
    std::vector<Vec3> positions;
    std::vector<int> types;
    Vec3 box[3];
    bool periodic = false;
};

bool isReferencePlatform() {
    return testPlatform().getName() == "Reference";
}

/**
 * Particles on a jittered lattice at about 100 particles/nm^3 (liquid density),
 * filling a cluster of about `n` particles or the given box.
 */
Configuration makeConfiguration(Geometry geometry, int n, int numTypes, unsigned seed) {
    Configuration config;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> uniform(-1.0, 1.0);
    std::uniform_int_distribution<int> type(0, numTypes - 1);
    const double spacing = std::cbrt(1.0 / 100.0); // nm
    int m = (int) std::ceil(std::cbrt((double) n));
    if (geometry == Geometry::Cubic) {
        double side = m * spacing;
        config.box[0] = Vec3(side, 0, 0);
        config.box[1] = Vec3(0, side, 0);
        config.box[2] = Vec3(0, 0, side);
    }
    else if (geometry == Geometry::Triclinic) {
        double side = m * spacing;
        config.box[0] = Vec3(side, 0, 0);
        config.box[1] = Vec3(0.3 * side, side, 0);
        config.box[2] = Vec3(-0.2 * side, 0.4 * side, side);
    }
    else {
        config.box[0] = Vec3(100, 0, 0);
        config.box[1] = Vec3(0, 100, 0);
        config.box[2] = Vec3(0, 0, 100);
    }
    config.periodic = geometry != Geometry::Cluster;
    for (int i = 0; i < m && (int) config.positions.size() < n; i++)
        for (int j = 0; j < m && (int) config.positions.size() < n; j++)
            for (int k = 0; k < m && (int) config.positions.size() < n; k++) {
                // Inside the box, (0, m * spacing) along each axis, so OpenMM never has to wrap a particle.
                Vec3 site((i + 0.5) * spacing + 0.15 * spacing * uniform(rng), (j + 0.5) * spacing + 0.15 * spacing * uniform(rng),
                          (k + 0.5) * spacing + 0.15 * spacing * uniform(rng));
                if (geometry == Geometry::Triclinic)
                    site = config.box[0] * (site[0] / (m * spacing)) + config.box[1] * (site[1] / (m * spacing)) +
                           config.box[2] * (site[2] / (m * spacing));
                config.positions.push_back(site);
                config.types.push_back(type(rng));
            }
    return config;
}

/**
 * The configuration with its particles in a random order: permuted particle i is
 * original particle order[i].
 */
Configuration permuteConfiguration(const Configuration& config, unsigned seed, std::vector<int>& order) {
    order.resize(config.positions.size());
    for (size_t i = 0; i < order.size(); i++)
        order[i] = (int) i;
    std::shuffle(order.begin(), order.end(), std::mt19937(seed));
    Configuration permuted = config;
    for (size_t i = 0; i < order.size(); i++) {
        permuted.positions[i] = config.positions[order[i]];
        permuted.types[i] = config.types[order[i]];
    }
    return permuted;
}

std::unique_ptr<GraphForce> makeForce(const GraphTest::ModelOptions& options) {
    return std::unique_ptr<GraphForce>(GraphForce::fromModelBytes(GraphTest::makeModelBytes(options)));
}

/**
 * Expect `action` to throw an OpenMMException whose message holds every one of `words`; `what` says what must not
 * have been accepted.
 */
template <class Action> void expectRefused(Action action, const std::vector<std::string>& words, const std::string& what) {
    try {
        action();
        ADD_FAILURE() << what << " was accepted";
    }
    catch (const OpenMMException& e) {
        const std::string message = e.what();
        for (const std::string& word : words)
            EXPECT_NE(message.find(word), std::string::npos) << "'" << word << "' missing from: " << message;
    }
}

/**
 * Adds a periodic cut-off NonbondedForce with zero parameters over every particle, in force group 1: it changes no
 * energy, but makes OpenMM's GPU platforms reorder atoms (every 250 steps, moving molecules into the box).
 */
void addReorderingBystander(System& system, double cutoff) {
    NonbondedForce* nonbonded = new NonbondedForce();
    nonbonded->setNonbondedMethod(NonbondedForce::CutoffPeriodic);
    nonbonded->setCutoffDistance(cutoff);
    for (int i = 0; i < system.getNumParticles(); i++)
        nonbonded->addParticle(0.0, 0.1, 0.0);
    nonbonded->setForceGroup(1);
    system.addForce(nonbonded);
}

/** A System holding only a GraphForce over all particles of the configuration. */
System* makeSystem(const Configuration& config, const GraphTest::ModelOptions& options, GraphForce** forceOut = nullptr) {
    System* system = new System();
    for (size_t i = 0; i < config.positions.size(); i++)
        system->addParticle(12.0);
    system->setDefaultPeriodicBoxVectors(config.box[0], config.box[1], config.box[2]);
    GraphForce* force = makeForce(options).release();
    for (size_t i = 0; i < config.positions.size(); i++)
        force->addParticle((int) i, config.types[i]);
    force->setUsesPeriodicBoundaryConditions(config.periodic);
    system->addForce(force);
    if (forceOut)
        *forceOut = force;
    return system;
}

struct Result {
    double energy;
    std::vector<Vec3> forces;
};

Result evaluate(const System& system, const std::vector<Vec3>& positions, Platform& platform,
                const std::map<std::string, std::string>& properties = {}) {
    VerletIntegrator integrator(0.001);
    Context context(system, integrator, platform, properties);
    context.setPositions(positions);
    State state = context.getState(State::Energy | State::Forces);
    return Result{state.getPotentialEnergy(), state.getForces()};
}

Result evaluateOnTestPlatform(const System& system, const std::vector<Vec3>& positions) {
    return evaluate(system, positions, testPlatform(), testPlatformProperties());
}

double forceRms(const std::vector<Vec3>& forces) {
    double sum = 0;
    for (const Vec3& f : forces)
        sum += f.dot(f);
    return std::sqrt(sum / std::max<size_t>(1, forces.size()));
}

/** Relative RMS difference of two force sets (relative to the RMS of `expected`). */
double relativeForceError(const std::vector<Vec3>& actual, const std::vector<Vec3>& expected) {
    double sum = 0;
    for (size_t i = 0; i < actual.size(); i++) {
        Vec3 d = actual[i] - expected[i];
        sum += d.dot(d);
    }
    return std::sqrt(sum / std::max<size_t>(1, actual.size())) / std::max(1e-300, forceRms(expected));
}

/**
 * Energies agree to `relative` times the larger of |expected| and the number
 * of particles (per-particle energies are O(1) kJ/mol and may cancel in the sum,
 * while rounding errors add up per particle).
 */
void expectEnergyNear(double actual, double expected, double relative, size_t numParticles) {
    EXPECT_NEAR(actual, expected, relative * std::max({1.0, std::abs(expected), (double) numParticles}));
}

void expectForcesNear(const std::vector<Vec3>& actual, const std::vector<Vec3>& expected, double relative) {
    ASSERT_EQ(actual.size(), expected.size());
    EXPECT_LE(relativeForceError(actual, expected), relative);
}

/**
 * The check of one platform's forces: on Reference, central finite differences
 * of the energy along every coordinate of a few particles; elsewhere, the
 * Reference platform's energy and forces.
 */
void checkAgainstReference(const System& system, const std::vector<Vec3>& positions) {
    Result result = evaluateOnTestPlatform(system, positions);
    ASSERT_TRUE(std::isfinite(result.energy));
    ASSERT_GT(forceRms(result.forces), 0.0);
    if (!isReferencePlatform()) {
        Result expected = evaluate(system, positions, Platform::getPlatformByName("Reference"));
        expectEnergyNear(result.energy, expected.energy, testEnergyTolerance(), positions.size());
        expectForcesNear(result.forces, expected.forces, testForceTolerance());
        return;
    }
    VerletIntegrator integrator(0.001);
    Context context(system, integrator, testPlatform(), testPlatformProperties());
    const double step = 1e-5; // nm
    double worst = 0, scale = forceRms(result.forces);
    int numChecked = std::min<int>(6, (int) positions.size());
    for (int p = 0; p < numChecked; p++) {
        int i = (int) ((long long) p * positions.size() / numChecked);
        for (int c = 0; c < 3; c++) {
            std::vector<Vec3> displaced = positions;
            displaced[i][c] = positions[i][c] + step;
            context.setPositions(displaced);
            double plus = context.getState(State::Energy).getPotentialEnergy();
            displaced[i][c] = positions[i][c] - step;
            context.setPositions(displaced);
            double minus = context.getState(State::Energy).getPotentialEnergy();
            double numeric = -(plus - minus) / (2 * step);
            worst = std::max(worst, std::abs(numeric - result.forces[i][c]) / scale);
        }
    }
    EXPECT_LT(worst, 1e-6) << "finite differences disagree with the analytic forces";
}

std::vector<Scenario> forceScenarios() {
    std::vector<Scenario> scenarios;
    for (int lMax = 0; lMax <= 2; lMax++)
        for (int lSum = 0; lSum <= 1; lSum++)
            for (int interactions = 0; interactions <= 1; interactions++) {
                Scenario s;
                s.model.lMax = lMax;
                s.model.lSum = lSum == 1;
                s.model.numInteractions = interactions;
                s.model.seed = 10 + lMax * 4 + lSum * 2 + interactions;
                s.name = "L" + std::to_string(lMax) + (lSum ? "Summed" : "PerDegree") + (interactions ? "Interacting" : "");
                s.geometry = Geometry::Cluster;
                scenarios.push_back(s);
            }
    Scenario silu;
    silu.name = "SiluFloat32File";
    silu.model.activation = "silu";
    silu.model.float32 = true;
    silu.model.numTypes = 3;
    scenarios.push_back(silu);
    Scenario cubic;
    cubic.name = "CubicBoxInteracting";
    cubic.model.lMax = 2;
    cubic.model.numInteractions = 1;
    cubic.geometry = Geometry::Cubic;
    scenarios.push_back(cubic);
    Scenario triclinic;
    triclinic.name = "TriclinicBoxPerDegree";
    triclinic.model.lMax = 2;
    triclinic.model.lSum = false;
    triclinic.geometry = Geometry::Triclinic;
    scenarios.push_back(triclinic);
    Scenario angstrom;
    angstrom.name = "AngstromEv";
    angstrom.model.lengthUnit = "angstrom";
    angstrom.model.energyUnit = "eV";
    angstrom.geometry = Geometry::Cubic;
    scenarios.push_back(angstrom);
    return scenarios;
}

void PrintTo(const Scenario& scenario, std::ostream* out) {
    *out << scenario.name;
}

class GraphForceScenarioTest : public ::testing::TestWithParam<Scenario> {};

} // namespace GraphForceTestBody

using namespace GraphForceTestBody;

TEST_P(GraphForceScenarioTest, ForcesMatchTheirCheck) {
    const Scenario& s = GetParam();
    int n = s.geometry == Geometry::Cluster ? 40 : 220;
    Configuration config = makeConfiguration(s.geometry, n, s.model.numTypes, s.model.seed);
    std::unique_ptr<System> system(makeSystem(config, s.model));
    checkAgainstReference(*system, config.positions);
}

INSTANTIATE_TEST_SUITE_P(Models, GraphForceScenarioTest, ::testing::ValuesIn(forceScenarios()),
                         [](const ::testing::TestParamInfo<Scenario>& info) { return info.param.name; });

TEST(GraphForce, RepeatedEvaluationsAreBitwiseIdentical) {
    GraphTest::ModelOptions options;
    options.numInteractions = 1;
    Configuration config = makeConfiguration(Geometry::Cubic, 220, 2, 3);
    std::unique_ptr<System> system(makeSystem(config, options));
    VerletIntegrator integrator(0.001);
    Context context(*system, integrator, testPlatform(), testPlatformProperties());
    context.setPositions(config.positions);
    State first = context.getState(State::Energy | State::Forces);
    for (int repeat = 0; repeat < 3; repeat++) {
        State again = context.getState(State::Energy | State::Forces);
        EXPECT_EQ(first.getPotentialEnergy(), again.getPotentialEnergy());
        for (size_t i = 0; i < config.positions.size(); i++)
            for (int c = 0; c < 3; c++)
                ASSERT_EQ(first.getForces()[i][c], again.getForces()[i][c]);
    }
}

TEST(GraphForce, TranslationAndRotationLeaveEnergyUnchanged) {
    GraphTest::ModelOptions options;
    options.lMax = 2;
    options.numInteractions = 1;
    Configuration config = makeConfiguration(Geometry::Cluster, 50, 2, 4);
    std::unique_ptr<System> system(makeSystem(config, options));
    Result original = evaluateOnTestPlatform(*system, config.positions);
    // Rotation about a random axis, then a translation.
    double angle = 0.7, axis[3] = {0.3, -0.5, 0.8};
    double norm = std::sqrt(axis[0] * axis[0] + axis[1] * axis[1] + axis[2] * axis[2]);
    for (double& a : axis)
        a /= norm;
    double c = std::cos(angle), s = std::sin(angle);
    double R[3][3];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            R[i][j] = (i == j ? c : 0) + (1 - c) * axis[i] * axis[j];
    R[0][1] -= s * axis[2];
    R[0][2] += s * axis[1];
    R[1][0] += s * axis[2];
    R[1][2] -= s * axis[0];
    R[2][0] -= s * axis[1];
    R[2][1] += s * axis[0];
    auto rotate = [&](const Vec3& v) {
        return Vec3(R[0][0] * v[0] + R[0][1] * v[1] + R[0][2] * v[2], R[1][0] * v[0] + R[1][1] * v[1] + R[1][2] * v[2],
                    R[2][0] * v[0] + R[2][1] * v[1] + R[2][2] * v[2]);
    };
    std::vector<Vec3> moved(config.positions.size());
    std::vector<Vec3> rotatedForces(config.positions.size());
    for (size_t i = 0; i < moved.size(); i++) {
        moved[i] = rotate(config.positions[i]) + Vec3(1.3, -2.1, 0.7);
        rotatedForces[i] = rotate(original.forces[i]);
    }
    Result result = evaluateOnTestPlatform(*system, moved);
    expectEnergyNear(result.energy, original.energy, 1e-10 + testEnergyTolerance(), config.positions.size());
    expectForcesNear(result.forces, rotatedForces, 1e-9 + testForceTolerance());
}

TEST(GraphForce, PermutingSystemParticlesPermutesForces) {
    GraphTest::ModelOptions options;
    options.numInteractions = 1;
    Configuration config = makeConfiguration(Geometry::Cubic, 220, 2, 5);
    std::unique_ptr<System> system(makeSystem(config, options));
    Result original = evaluateOnTestPlatform(*system, config.positions);
    std::vector<int> order;
    Configuration permuted = permuteConfiguration(config, 7, order);
    std::unique_ptr<System> permutedSystem(makeSystem(permuted, options));
    Result result = evaluateOnTestPlatform(*permutedSystem, permuted.positions);
    std::vector<Vec3> expected(order.size());
    for (size_t i = 0; i < order.size(); i++)
        expected[i] = original.forces[order[i]];
    expectEnergyNear(result.energy, original.energy, 1e-12 + testEnergyTolerance(), config.positions.size());
    expectForcesNear(result.forces, expected, 1e-12 + testForceTolerance());
}

TEST(GraphForce, PeriodicImagesGiveTheSameResult) {
    GraphTest::ModelOptions options;
    options.lMax = 2;
    for (Geometry geometry : {Geometry::Cubic, Geometry::Triclinic}) {
        Configuration config = makeConfiguration(geometry, 220, 2, 6);
        std::unique_ptr<System> system(makeSystem(config, options));
        Result original = evaluateOnTestPlatform(*system, config.positions);
        std::vector<Vec3> shifted = config.positions;
        std::mt19937 rng(8);
        std::uniform_int_distribution<int> image(-2, 2);
        for (Vec3& x : shifted)
            x += config.box[0] * image(rng) + config.box[1] * image(rng) + config.box[2] * image(rng);
        Result result = evaluateOnTestPlatform(*system, shifted);
        expectEnergyNear(result.energy, original.energy, 1e-10 + testEnergyTolerance(), config.positions.size());
        expectForcesNear(result.forces, original.forces, 1e-9 + testForceTolerance());
    }
}

TEST(GraphForce, LargeTriclinicBoxMatchesNoBox) {
    GraphTest::ModelOptions options;
    options.numInteractions = 1;
    Configuration config = makeConfiguration(Geometry::Cluster, 60, 2, 9);
    std::unique_ptr<System> open(makeSystem(config, options));
    Configuration boxed = config;
    boxed.periodic = true;
    boxed.box[0] = Vec3(30, 0, 0);
    boxed.box[1] = Vec3(10, 30, 0);
    boxed.box[2] = Vec3(-12, 9, 30);
    std::unique_ptr<System> periodic(makeSystem(boxed, options));
    Result a = evaluateOnTestPlatform(*open, config.positions);
    Result b = evaluateOnTestPlatform(*periodic, config.positions);
    expectEnergyNear(b.energy, a.energy, 1e-12 + testEnergyTolerance(), config.positions.size());
    expectForcesNear(b.forces, a.forces, 1e-12 + testForceTolerance());
}

TEST(GraphForce, UnitsOfTheFileDoNotChangeTheResult) {
    Configuration config = makeConfiguration(Geometry::Cubic, 220, 2, 11);
    GraphTest::ModelOptions nm;
    nm.numInteractions = 1;
    std::unique_ptr<System> reference(makeSystem(config, nm));
    Result expected = evaluateOnTestPlatform(*reference, config.positions);
    for (auto units : std::vector<std::pair<std::string, std::string>>{{"angstrom", "eV"}, {"bohr", "hartree"}, {"nm", "kcal/mol"}}) {
        GraphTest::ModelOptions options = nm;
        options.lengthUnit = units.first;
        options.energyUnit = units.second;
        std::unique_ptr<System> system(makeSystem(config, options));
        Result result = evaluateOnTestPlatform(*system, config.positions);
        expectEnergyNear(result.energy, expected.energy, 1e-10 + testEnergyTolerance(), config.positions.size());
        expectForcesNear(result.forces, expected.forces, 1e-9 + testForceTolerance());
    }
}

TEST(GraphForce, OnlyTheAddedParticlesTakePart) {
    GraphTest::ModelOptions options;
    options.numInteractions = 1;
    Configuration config = makeConfiguration(Geometry::Cubic, 220, 2, 12);
    // The force covers the even particles; the odd ones are classical bystanders.
    System system;
    Configuration subset = config;
    subset.positions.clear();
    subset.types.clear();
    for (size_t i = 0; i < config.positions.size(); i++)
        system.addParticle(12.0);
    system.setDefaultPeriodicBoxVectors(config.box[0], config.box[1], config.box[2]);
    GraphForce* force = makeForce(options).release();
    for (size_t i = 0; i < config.positions.size(); i += 2) {
        force->addParticle((int) i, config.types[i]);
        subset.positions.push_back(config.positions[i]);
        subset.types.push_back(config.types[i]);
    }
    force->setUsesPeriodicBoundaryConditions(true);
    system.addForce(force);
    Result result = evaluateOnTestPlatform(system, config.positions);
    std::unique_ptr<System> alone(makeSystem(subset, options));
    Result expected = evaluateOnTestPlatform(*alone, subset.positions);
    expectEnergyNear(result.energy, expected.energy, 1e-12 + testEnergyTolerance(), config.positions.size());
    for (size_t i = 0; i < config.positions.size(); i++) {
        if (i % 2 == 1) {
            EXPECT_EQ(result.forces[i], Vec3(0, 0, 0));
            continue;
        }
        Vec3 d = result.forces[i] - expected.forces[i / 2];
        EXPECT_LE(std::sqrt(d.dot(d)), (1e-10 + testForceTolerance()) * forceRms(expected.forces) * 10);
    }
}

TEST(GraphForce, NonPeriodicForceInAPeriodicSystemKeepsItsParticlesTogether) {
    // An ML region without periodic boundary conditions in periodic classical surroundings (a cut-off NonbondedForce,
    // which makes OpenMM's CUDA platform move molecules into the box when it reorders atoms).  The region straddles
    // the box's corner: were its particles moved into the box one by one, its plain distances would change.  The
    // GraphForce's energy must stay that of the region alone, through reorderings.
    GraphTest::ModelOptions options;
    options.numInteractions = 1;
    Configuration region = makeConfiguration(Geometry::Cluster, 40, 2, 41);
    for (Vec3& x : region.positions)
        x -= Vec3(0.4, 0.45, 0.35);
    std::unique_ptr<System> alone(makeSystem(region, options));
    Configuration config = region;
    config.box[0] = Vec3(3, 0, 0);
    config.box[1] = Vec3(0, 3, 0);
    config.box[2] = Vec3(0, 0, 3);
    GraphForce* force;
    std::unique_ptr<System> system(makeSystem(config, options, &force));
    addReorderingBystander(*system, 0.9);
    VerletIntegrator integrator(1e-5);
    Context context(*system, integrator, testPlatform(), testPlatformProperties());
    context.setPositions(config.positions);
    for (int round = 0; round < 2; round++) {
        State state = context.getState(State::Energy | State::Forces | State::Positions, false, 1 << 0);
        Result expected = evaluateOnTestPlatform(*alone, state.getPositions());
        expectEnergyNear(state.getPotentialEnergy(), expected.energy, 1e-10 + testEnergyTolerance(), config.positions.size());
        expectForcesNear(state.getForces(), expected.forces, 1e-9 + testForceTolerance());
        integrator.step(260); // past OpenMM's reordering interval of 250 steps
    }
}

TEST(GraphForce, ParticleEnergiesSumToTheEnergy) {
    GraphTest::ModelOptions options;
    options.numInteractions = 1;
    Configuration config = makeConfiguration(Geometry::Cubic, 220, 2, 13);
    GraphForce* force;
    std::unique_ptr<System> system(makeSystem(config, options, &force));
    VerletIntegrator integrator(0.001);
    Context context(*system, integrator, testPlatform(), testPlatformProperties());
    context.setPositions(config.positions);
    double energy = context.getState(State::Energy).getPotentialEnergy();
    std::vector<double> perParticle = force->getParticleEnergies(context);
    ASSERT_EQ(perParticle.size(), config.positions.size());
    double sum = 0;
    for (double e : perParticle)
        sum += e;
    expectEnergyNear(sum, energy, 1e-12 + testEnergyTolerance(), config.positions.size());
    EXPECT_NE(perParticle[0], perParticle[1]);
}

TEST(GraphForce, UpdateParametersInContextChangesTypes) {
    GraphTest::ModelOptions options;
    Configuration config = makeConfiguration(Geometry::Cubic, 220, 2, 14);
    GraphForce* force;
    std::unique_ptr<System> system(makeSystem(config, options, &force));
    VerletIntegrator integrator(0.001);
    Context context(*system, integrator, testPlatform(), testPlatformProperties());
    context.setPositions(config.positions);
    double before = context.getState(State::Energy).getPotentialEnergy();
    for (int i = 0; i < force->getNumParticles(); i += 3) {
        config.types[i] = 1 - config.types[i];
        force->setParticleParameters(i, i, config.types[i]);
    }
    force->updateParametersInContext(context);
    double after = context.getState(State::Energy).getPotentialEnergy();
    EXPECT_NE(before, after);
    std::unique_ptr<System> fresh(makeSystem(config, options));
    expectEnergyNear(after, evaluateOnTestPlatform(*fresh, config.positions).energy, 1e-12 + testEnergyTolerance(), config.positions.size());
    // The particle set itself cannot change this way.
    force->setParticleParameters(0, 1, 0);
    EXPECT_THROW(force->updateParametersInContext(context), OpenMMException);
}

TEST(GraphForce, UpdateParametersInContextRefusesOtherChanges) {
    // Periodicity and properties are read when the Context is created: a later change would be silently ignored.
    GraphTest::ModelOptions options;
    Configuration config = makeConfiguration(Geometry::Cubic, 220, 2, 29);
    GraphForce* force;
    std::unique_ptr<System> system(makeSystem(config, options, &force));
    VerletIntegrator integrator(0.001);
    Context context(*system, integrator, testPlatform(), testPlatformProperties());
    context.setPositions(config.positions);
    force->updateParametersInContext(context); // nothing changed: accepted
    force->setUsesPeriodicBoundaryConditions(false);
    expectRefused([&] { force->updateParametersInContext(context); }, {"usesPeriodicBoundaryConditions changed from true to false"},
                  "a change of periodicity");
    force->setUsesPeriodicBoundaryConditions(true);
    force->setProperty("CheckFinite", "false");
    expectRefused([&] { force->updateParametersInContext(context); }, {"property CheckFinite changed from \"true\" to \"false\""},
                  "a change of a property");
}

TEST(GraphForce, NonFiniteParticleEnergiesAreRejected) {
    // Radial functions of 1e200 overflow the invariants: E_i is not finite for some particles.
    GraphTest::ModelOptions options;
    options.radialScale = 1e200;
    Configuration config = makeConfiguration(Geometry::Cubic, 220, 2, 30);
    for (const std::string& checkFinite : {"false", "true"}) {
        GraphForce* force;
        std::unique_ptr<System> system(makeSystem(config, options, &force));
        force->setProperty("CheckFinite", checkFinite);
        VerletIntegrator integrator(0.001);
        Context context(*system, integrator, testPlatform(), testPlatformProperties());
        context.setPositions(config.positions);
        if (checkFinite == "false") {
            std::vector<double> energies = force->getParticleEnergies(context);
            ASSERT_TRUE(std::any_of(energies.begin(), energies.end(), [](double e) { return !std::isfinite(e); }))
                << "the model did not overflow: the test needs larger radial functions";
            continue;
        }
        expectRefused([&] { force->getParticleEnergies(context); }, {"is not finite"},
                      "non-finite particle energies with CheckFinite true");
    }
}

TEST(GraphForce, ForceGroupsSelectTheForce) {
    GraphTest::ModelOptions options;
    Configuration config = makeConfiguration(Geometry::Cubic, 220, 2, 15);
    GraphForce* force;
    std::unique_ptr<System> system(makeSystem(config, options, &force));
    force->setForceGroup(3);
    VerletIntegrator integrator(0.001);
    Context context(*system, integrator, testPlatform(), testPlatformProperties());
    context.setPositions(config.positions);
    double all = context.getState(State::Energy).getPotentialEnergy();
    EXPECT_NE(all, 0.0);
    EXPECT_EQ(context.getState(State::Energy, false, 1 << 3).getPotentialEnergy(), all);
    EXPECT_EQ(context.getState(State::Energy, false, 1 << 2).getPotentialEnergy(), 0.0);
}

TEST(GraphForce, ShortNveRunConservesEnergy) {
    GraphTest::ModelOptions options;
    options.numInteractions = 1;
    Configuration config = makeConfiguration(Geometry::Cubic, 220, 2, 16);
    std::unique_ptr<System> system(makeSystem(config, options));
    VerletIntegrator integrator(0.0005);
    Context context(*system, integrator, testPlatform(), testPlatformProperties());
    context.setPositions(config.positions);
    context.setVelocitiesToTemperature(300.0, 1);
    State start = context.getState(State::Energy);
    double initial = start.getPotentialEnergy() + start.getKineticEnergy();
    double worst = 0;
    for (int block = 0; block < 20; block++) {
        integrator.step(10);
        State state = context.getState(State::Energy);
        worst = std::max(worst, std::abs(state.getPotentialEnergy() + state.getKineticEnergy() - initial));
    }
    // Drift well below the kinetic energy's thermal scale (n kT = 220 * 2.49 kJ/mol).
    EXPECT_LT(worst, 1e-3 * start.getKineticEnergy());
}

TEST(GraphForce, CutoffLargerThanHalfTheBoxIsRejected) {
    GraphTest::ModelOptions options;
    Configuration config = makeConfiguration(Geometry::Cubic, 220, 2, 17);
    std::unique_ptr<System> system(makeSystem(config, options));
    system->setDefaultPeriodicBoxVectors(Vec3(1.1, 0, 0), Vec3(0, 1.3, 0), Vec3(0, 0, 1.3));
    VerletIntegrator integrator(0.001);
    expectRefused([&] { Context context(*system, integrator, testPlatform(), testPlatformProperties()); }, {"cut-off"},
                  "a box smaller than twice the cut-off");
    // A box that shrinks later (e.g. under a barostat) is caught at the next step.
    system->setDefaultPeriodicBoxVectors(config.box[0], config.box[1], config.box[2]);
    Context context(*system, integrator, testPlatform(), testPlatformProperties());
    context.setPositions(config.positions);
    context.setPeriodicBoxVectors(Vec3(1.1, 0, 0), Vec3(0, 1.3, 0), Vec3(0, 0, 1.3));
    EXPECT_THROW(context.getState(State::Forces), OpenMMException);
}

TEST(GraphForce, NonFiniteBoxIsRejected) {
    // OpenMM accepts NaN and +inf box components.  A NaN box failed every comparison of the cut-off check, and an
    // infinite one dropped every pair: the energy of isolated particles and zero forces, with no error.
    GraphTest::ModelOptions options;
    Configuration config = makeConfiguration(Geometry::Cubic, 220, 2, 19);
    std::unique_ptr<System> system(makeSystem(config, options));
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
    const double length = config.box[0][0];
    struct Case {
        Vec3 a, b, c;
        std::string vector;
    };
    const std::vector<Case> cases = {{Vec3(nan, 0, 0), config.box[1], config.box[2], "a"},
                                     {Vec3(inf, 0, 0), config.box[1], config.box[2], "a"},
                                     {config.box[0], Vec3(nan, length, 0), config.box[2], "b"},
                                     {config.box[0], config.box[1], Vec3(0, 0, inf), "c"}};
    for (const Case& bad : cases) {
        system->setDefaultPeriodicBoxVectors(bad.a, bad.b, bad.c);
        VerletIntegrator integrator(0.001);
        expectRefused([&] { Context context(*system, integrator, testPlatform(), testPlatformProperties()); },
                      {"box vector " + bad.vector, "not finite"}, "a non-finite default box");
    }
    system->setDefaultPeriodicBoxVectors(config.box[0], config.box[1], config.box[2]);
    VerletIntegrator integrator(0.001);
    Context context(*system, integrator, testPlatform(), testPlatformProperties());
    context.setPositions(config.positions);
    const double energy = context.getState(State::Energy).getPotentialEnergy();
    for (const Case& bad : cases) {
        // OpenMM's CUDA platform refuses an off-diagonal NaN itself, in setPeriodicBoxVectors: a NaN is not 0, so it
        // takes the box for a triclinic one in a rectangular Context ("The box shape has changed from rectangular to
        // triclinic"). That is a refusal too; the other platforms and components come to the GraphForce's check.
        const bool offDiagonal = bad.b[0] != 0 || bad.c[0] != 0 || bad.c[1] != 0 || bad.a[1] != 0 || bad.a[2] != 0 || bad.b[2] != 0;
        try {
            context.setPeriodicBoxVectors(bad.a, bad.b, bad.c);
        }
        catch (const OpenMMException& e) {
            EXPECT_TRUE(offDiagonal) << "box vector " << bad.vector << " refused by OpenMM itself: " << e.what();
            EXPECT_NE(std::string(e.what()).find("triclinic"), std::string::npos) << e.what();
            continue;
        }
        expectRefused([&] { context.getState(State::Forces | State::Energy); }, {"box vector " + bad.vector, "not finite"},
                      "a non-finite box set on the Context");
    }
    // Nothing the user had is lost: a finite box gives the energy of before.
    context.setPeriodicBoxVectors(config.box[0], config.box[1], config.box[2]);
    EXPECT_EQ(context.getState(State::Energy).getPotentialEnergy(), energy);
}

TEST(GraphForce, CutoffRoundedAboveHalfTheBoxIsAccepted) {
    // A model written in angstrom with r_c = 6 has r_c = 6 * 0.1 = 0.6000000000000001 nm after the unit conversion; a
    // box of exactly twice the cut-off must still be accepted, and give the energy of the same model with r_c exactly
    // half the box (the tables differ by the rounding of their grid only).  A cut-off clearly beyond is still refused.
    Configuration config = makeConfiguration(Geometry::Cubic, 220, 2, 27);
    const double half = 0.5 * config.box[0][0];
    auto energyWithCutoff = [&](double cutoff) {
        GraphTest::ModelOptions options;
        options.cutoff = cutoff;
        std::unique_ptr<System> system(makeSystem(config, options));
        VerletIntegrator integrator(0.001);
        Context context(*system, integrator, testPlatform(), testPlatformProperties());
        context.setPositions(config.positions);
        return context.getState(State::Energy).getPotentialEnergy();
    };
    const double exact = energyWithCutoff(half);
    const double rounded = energyWithCutoff(std::nextafter(half, 1.0 + half));
    EXPECT_TRUE(std::isfinite(rounded));
    EXPECT_NEAR(rounded, exact, 1e-6 * std::abs(exact));
    expectRefused([&] { energyWithCutoff(half * (1 + 1e-9)); }, {"larger than half the smallest height"}, "a cut-off beyond half the box");
}

TEST(GraphForce, ParticlesAtTheSamePositionAreRejected) {
    GraphTest::ModelOptions options;
    Configuration config = makeConfiguration(Geometry::Cluster, 30, 2, 18);
    std::unique_ptr<System> system(makeSystem(config, options));
    std::vector<Vec3> positions = config.positions;
    positions[17] = positions[4];
    VerletIntegrator integrator(0.001);
    Context context(*system, integrator, testPlatform(), testPlatformProperties());
    context.setPositions(positions);
    expectRefused([&] { context.getState(State::Forces); }, {"System particles ", "4", "17", "same position"},
                  "two particles at one position");
}

TEST(GraphForce, ParticlesAtTheSamePositionThroughAnImageAreRejected) {
    // Particle 17 one box vector from particle k: the minimum image leaves a rounding residue (about 1e-16 nm), which
    // must count as distance zero, not as a pair at r ~ 1e-16 with a meaningless direction (GraphSamePosition.h).
    GraphTest::ModelOptions options;
    Configuration config = makeConfiguration(Geometry::Cubic, 220, 2, 28);
    std::unique_ptr<System> system(makeSystem(config, options));
    const Vec3 a = config.box[0];
    int k = -1;
    for (int candidate = 0; candidate < 17 && k < 0; candidate++) {
        const double x = config.positions[candidate][0], moved = x + a[0];
        double d = moved - x;
        d -= a[0] * std::floor(d / a[0] + 0.5);
        if (d != 0)
            k = candidate;
    }
    ASSERT_GE(k, 0) << "no particle whose image leaves a residue";
    std::vector<Vec3> positions = config.positions;
    positions[17] = positions[k] + a;
    VerletIntegrator integrator(0.001);
    Context context(*system, integrator, testPlatform(), testPlatformProperties());
    context.setPositions(positions);
    expectRefused([&] { context.getState(State::Forces | State::Energy); }, {"System particles ", std::to_string(k), "17", "same position"},
                  "two particles at one position (through an image)");
}

TEST(GraphForce, NonFinitePositionsAreRejected) {
    GraphTest::ModelOptions options;
    Configuration config = makeConfiguration(Geometry::Cluster, 30, 2, 19);
    std::unique_ptr<System> system(makeSystem(config, options));
    std::vector<Vec3> positions = config.positions;
    positions[5][1] = std::nan("");
    VerletIntegrator integrator(0.001);
    Context context(*system, integrator, testPlatform(), testPlatformProperties());
    context.setPositions(positions);
    expectRefused([&] { context.getState(State::Forces | State::Energy); }, {"System particle 5", "not finite"}, "a NaN position");
}

TEST(GraphForce, BadParticlesAreRejectedAtContextCreation) {
    GraphTest::ModelOptions options;
    Configuration config = makeConfiguration(Geometry::Cluster, 10, 2, 20);
    VerletIntegrator integrator(0.001);
    {
        GraphForce* force;
        std::unique_ptr<System> system(makeSystem(config, options, &force));
        force->addParticle(10, 0); // the System has particles 0..9
        EXPECT_THROW(Context(*system, integrator, testPlatform(), testPlatformProperties()), OpenMMException);
    }
    {
        GraphForce* force;
        std::unique_ptr<System> system(makeSystem(config, options, &force));
        force->addParticle(3, 0); // particle 3 is already in the force
        EXPECT_THROW(Context(*system, integrator, testPlatform(), testPlatformProperties()), OpenMMException);
    }
    std::unique_ptr<GraphForce> force = makeForce(options);
    EXPECT_THROW(force->addParticle(0, 2), OpenMMException); // the model has types 0 and 1
    EXPECT_THROW(force->addParticle(0, -1), OpenMMException);
    EXPECT_THROW(force->addParticle(-1, 0), OpenMMException);
}
