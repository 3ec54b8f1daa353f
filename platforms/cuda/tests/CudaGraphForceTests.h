// CUDA-only tests (after the shared body): bitwise reproducibility, CUDA graph
// capture and replay, and the transparent recomputation when a neighbour row
// outgrows its capacity.
#include <cuda.h>
#include <map>

TEST(CudaGraphForce, PermutedSystemGivesBitwiseIdenticalResults) {
    GraphTest::ModelOptions options;
    options.numInteractions = 1;
    options.lMax = 2;
    Configuration config = makeConfiguration(Geometry::Cubic, 220, 2, 31);
    std::unique_ptr<System> system(makeSystem(config, options));
    Result original = evaluateOnTestPlatform(*system, config.positions);
    std::vector<int> order;
    Configuration permuted = permuteConfiguration(config, 32, order);
    std::unique_ptr<System> permutedSystem(makeSystem(permuted, options));
    Result result = evaluateOnTestPlatform(*permutedSystem, permuted.positions);
    EXPECT_EQ(result.energy, original.energy);
    for (size_t i = 0; i < order.size(); i++)
        for (int c = 0; c < 3; c++)
            ASSERT_EQ(result.forces[i][c], original.forces[order[i]][c]) << "particle " << i;
}

TEST(CudaGraphForce, AtomReorderingGivesBitwiseIdenticalForces) {
    if (std::string(GRAPH_TEST_PRECISION) == "single")
        GTEST_SKIP() << "single precision keeps positions only in fp32, and OpenMM's reordering moves particles by box vectors, "
                        "which rounds them anew; mixed and double precision keep them exactly enough";
    // A cut-off NonbondedForce with zero parameters makes OpenMM reorder its atoms every 250 steps.
    GraphTest::ModelOptions options;
    Configuration config = makeConfiguration(Geometry::Cubic, 220, 2, 33);
    std::unique_ptr<System> system(makeSystem(config, options));
    addReorderingBystander(*system, 0.5);
    VerletIntegrator integrator(0.0005);
    Context context(*system, integrator, testPlatform(), testPlatformProperties());
    context.setPositions(config.positions);
    State before = context.getState(State::Energy | State::Forces, false, 1);
    context.setVelocitiesToTemperature(300, 3);
    integrator.step(600);
    context.setPositions(config.positions);
    State after = context.getState(State::Energy | State::Forces, false, 1);
    EXPECT_EQ(before.getPotentialEnergy(), after.getPotentialEnergy());
    for (size_t i = 0; i < config.positions.size(); i++)
        for (int c = 0; c < 3; c++)
            ASSERT_EQ(before.getForces()[i][c], after.getForces()[i][c]) << "particle " << i;
}

TEST(CudaGraphForce, CrowdedRowsAreRecomputedTransparently) {
    // 160 particles inside a 0.55 nm ball: every row holds about 159 neighbours,
    // more than the first capacity of an open-boundary force.
    GraphTest::ModelOptions options;
    Configuration config;
    std::mt19937 rng(34);
    std::uniform_real_distribution<double> uniform(-0.275, 0.275);
    while (config.positions.size() < 160) {
        Vec3 x(uniform(rng), uniform(rng), uniform(rng));
        if (std::sqrt(x.dot(x)) < 0.275) {
            config.positions.push_back(x);
            config.types.push_back((int) config.positions.size() % 2);
        }
    }
    config.box[0] = Vec3(10, 0, 0);
    config.box[1] = Vec3(0, 10, 0);
    config.box[2] = Vec3(0, 0, 10);
    for (const char* search : {"allpairs", "cells"})
        for (const char* mode : {"false", "true"}) {
            GraphForce* force;
            std::unique_ptr<System> system(makeSystem(config, options, &force));
            force->setProperty("CudaGraph", mode); // "true": the capacity growth re-captures the graph
            force->setProperty("CudaNeighborSearch", search);
            checkAgainstReference(*system, config.positions);
            // The overflow is found as early when the host waits only for the graph build.
            force->setProperty("CheckFinite", "deferred");
            checkAgainstReference(*system, config.positions);
        }
}

/** GraphForce properties to set: key, value. */
using Properties = std::map<std::string, std::string>;

/**
 * A Context of `config` (Verlet, 0.5 fs; velocities at 300 K from `seed`)
 * whose GraphForce has some properties set, for bitwise comparisons of values.
 */
struct PropertyRun {
    GraphForce* force = nullptr;
    std::unique_ptr<System> system;
    VerletIntegrator integrator{0.0005};
    std::unique_ptr<Context> context;
    PropertyRun(const GraphTest::ModelOptions& options, const Configuration& config, const Properties& properties, int seed) {
        system.reset(makeSystem(config, options, &force));
        for (const auto& property : properties)
            force->setProperty(property.first, property.second);
        context.reset(new Context(*system, integrator, testPlatform(), testPlatformProperties()));
        context->setPositions(config.positions);
        context->setVelocitiesToTemperature(300, seed);
    }
    /** Appends the energy and forces, then the energy of an energy-only evaluation. */
    void record(std::vector<Result>& results) {
        State state = context->getState(State::Energy | State::Forces | State::Positions);
        results.push_back({state.getPotentialEnergy(), state.getForces()});
        results.push_back({context->getState(State::Energy).getPotentialEnergy(), {}});
    }
};

/**
 * One trajectory with a property set (e.g. CudaGraph "true": a failed capture
 * throws, and a capture fails if the evaluation synchronises with the host),
 * to be compared bitwise with the trajectory of another value: MD steps
 * (replays), a box change (re-capture), a type change and energy-only
 * evaluations.
 */
std::vector<Result> propertyTrajectory(const GraphTest::ModelOptions& options, const Properties& properties) {
    PropertyRun run(options, makeConfiguration(Geometry::Cubic, 220, 2, 35), properties, 5);
    std::vector<Result> results;
    run.record(results);
    run.integrator.step(25);
    run.record(results);
    Vec3 a, b, c;
    run.context->getState(State::Positions).getPeriodicBoxVectors(a, b, c);
    run.context->setPeriodicBoxVectors(a * 1.02, b * 1.02, c * 1.02);
    run.integrator.step(5);
    run.record(results);
    for (int i = 0; i < run.force->getNumParticles(); i += 4) {
        int particle, type;
        run.force->getParticleParameters(i, particle, type);
        run.force->setParticleParameters(i, particle, 1 - type);
    }
    run.force->updateParametersInContext(*run.context);
    run.integrator.step(5);
    run.record(results);
    return results;
}

/** propertyTrajectory of the tests' model with l_max 2 and numInteractions (0 or 1) interaction blocks. */
std::vector<Result> propertyTrajectory(const Properties& properties, int numInteractions) {
    GraphTest::ModelOptions options;
    options.numInteractions = numInteractions;
    options.lMax = 2;
    return propertyTrajectory(options, properties);
}

void expectSameTrajectories(const std::vector<Result>& expected, const std::vector<Result>& found) {
    ASSERT_EQ(expected.size(), found.size());
    for (size_t k = 0; k < expected.size(); k++) {
        EXPECT_EQ(expected[k].energy, found[k].energy) << "record " << k;
        ASSERT_EQ(expected[k].forces.size(), found[k].forces.size());
        for (size_t i = 0; i < expected[k].forces.size(); i++)
            for (int c = 0; c < 3; c++)
                ASSERT_EQ(expected[k].forces[i][c], found[k].forces[i][c]) << "record " << k << ", particle " << i;
    }
    EXPECT_NE(expected[0].energy, expected[2].energy); // the trajectory moved
}

TEST(CudaGraphForce, CapturedGraphGivesBitwiseIdenticalTrajectories) {
    expectSameTrajectories(propertyTrajectory({{"CudaGraph", "false"}}, 1), propertyTrajectory({{"CudaGraph", "true"}}, 1));
}

/**
 * The node stage in chunks (37 rows: six chunks, the last one short, type
 * groups cut across chunks; with an interaction block the node network is
 * recomputed per chunk in the backward pass) gives bitwise the results of one
 * chunk, with and without an interaction block.
 */
TEST(CudaGraphForce, ChunkedNodeStageGivesBitwiseIdenticalTrajectories) {
    for (int interactions = 0; interactions <= 1; interactions++)
        expectSameTrajectories(propertyTrajectory({{"CudaChunkRows", "auto"}}, interactions),
                               propertyTrajectory({{"CudaChunkRows", "37"}}, interactions));
}

/**
 * Rows built from a cell grid and from all pairs are the same graph: bitwise
 * the same trajectories (220 particles: "auto" would take all pairs), with an
 * interaction block.
 */
TEST(CudaGraphForce, CellAndAllPairsSearchesGiveBitwiseIdenticalTrajectories) {
    expectSameTrajectories(propertyTrajectory({{"CudaNeighborSearch", "cells"}}, 1),
                           propertyTrajectory({{"CudaNeighborSearch", "allpairs"}}, 1));
}

/**
 * CheckFinite "deferred" (the host waits only for the graph build) and
 * "false" change no result: bitwise the trajectory of "true", with and
 * without CUDA graphs (whose build event is then a node of the graph).
 */
TEST(CudaGraphForce, DeferredStatusGivesBitwiseIdenticalTrajectories) {
    const std::vector<Result> checked = propertyTrajectory({{"CheckFinite", "true"}}, 1);
    for (const char* check : {"deferred", "false"})
        for (const char* graphs : {"true", "false"}) {
            SCOPED_TRACE(std::string("CheckFinite ") + check + ", CudaGraph " + graphs);
            expectSameTrajectories(checked, propertyTrajectory({{"CheckFinite", check}, {"CudaGraph", graphs}}, 1));
        }
}

/**
 * An energy beyond the fixed-point range (a type whose energy shift is 2e9
 * kJ/mol) is an error in the evaluation that meets it with CheckFinite
 * "true"; with "deferred" the next evaluation throws it, naming the particle
 * and saying that it was found late; with "false" nothing throws.  A clean
 * evaluation before it is never blamed, nor one after the error was
 * reported; a graph-build error is reported in its own evaluation.
 */
TEST(CudaGraphForce, DeferredStatusReportsErrorsAtTheNextEvaluation) {
    GraphTest::ModelOptions options;
    options.lastTypeShift = 2e9;
    Configuration config = makeConfiguration(Geometry::Cubic, 220, 2, 39);
    config.types.assign(config.types.size(), 0);
    for (const char* check : {"true", "deferred", "false"}) {
        SCOPED_TRACE(std::string("CheckFinite ") + check);
        GraphForce* force;
        std::unique_ptr<System> system(makeSystem(config, options, &force));
        force->setProperty("CheckFinite", check);
        VerletIntegrator integrator(0.001);
        Context context(*system, integrator, testPlatform(), testPlatformProperties());
        context.setPositions(config.positions);
        const double clean = context.getState(State::Energy).getPotentialEnergy();
        ASSERT_TRUE(std::isfinite(clean));
        ASSERT_EQ(clean, context.getState(State::Energy).getPotentialEnergy()); // the first evaluation is not blamed
        int particle, type;
        force->getParticleParameters(37, particle, type);
        force->setParticleParameters(37, particle, 1);
        force->updateParametersInContext(context);
        auto evaluate = [&]() { context.getState(State::Energy | State::Forces); };
        // The next evaluation throws for particle 37, saying whether the error was found one evaluation late.
        auto expectError = [&](bool late) {
            try {
                evaluate();
                ADD_FAILURE() << "no error for an energy beyond the fixed-point range";
            }
            catch (const OpenMMException& error) {
                const std::string message = error.what();
                EXPECT_NE(message.find("particle 37"), std::string::npos) << message;
                EXPECT_EQ(message.find("found in the evaluation before this one") != std::string::npos, late) << message;
            }
        };
        if (std::string(check) == "true")
            expectError(false);
        else if (std::string(check) == "deferred") {
            evaluate(); // the bad evaluation itself returns
            expectError(true);
        }
        else {
            evaluate();
            evaluate();
        }
        // Back to a clean state: no evaluation is blamed again for an error already reported.
        force->setParticleParameters(37, particle, 0);
        force->updateParametersInContext(context);
        EXPECT_NO_THROW(evaluate());
        EXPECT_NO_THROW(evaluate());
    }
    // An error of the graph build (two particles at one position) is reported in the evaluation that meets it, and only
    // there, with the deferred check too.
    GraphForce* force;
    options.lastTypeShift = 0;
    std::unique_ptr<System> system(makeSystem(config, options, &force));
    force->setProperty("CheckFinite", "deferred");
    VerletIntegrator integrator(0.001);
    Context context(*system, integrator, testPlatform(), testPlatformProperties());
    std::vector<Vec3> positions = config.positions;
    positions[17] = positions[4];
    context.setPositions(positions);
    try {
        context.getState(State::Energy);
        ADD_FAILURE() << "two particles at one position were accepted";
    }
    catch (const OpenMMException& error) {
        EXPECT_NE(std::string(error.what()).find("same position"), std::string::npos) << error.what();
        EXPECT_EQ(std::string(error.what()).find("before this one"), std::string::npos) << error.what();
    }
    context.setPositions(config.positions);
    EXPECT_NO_THROW(context.getState(State::Energy));
    EXPECT_NO_THROW(context.getState(State::Energy));
}

/**
 * Whether the test device runs the fused network over thread-block clusters
 * (compute capability 9.0 and later): a fused Context with CudaFusedCluster
 * "2" is created, or refused with the reason that the device has none.
 */
bool deviceHasClusters() {
    static const bool has = [] {
        GraphTest::ModelOptions options;
        try {
            // 220 particles: a box of 1.3 nm, more than twice the cut-off.
            PropertyRun run(options, makeConfiguration(Geometry::Cubic, 220, 2, 38),
                            {{"CudaFusedNetwork", "true"}, {"CudaFusedCluster", "2"}}, 3);
            run.context->getState(State::Energy);
            return true;
        }
        catch (const OpenMMException& error) {
            if (std::string(error.what()).find("has no thread-block clusters") == std::string::npos)
                throw;
            return false;
        }
    }();
    return has;
}

/** CudaFusedCluster values to test: 1 everywhere, and clusters of 8 and 16 blocks where the device has them (2: deviceHasClusters). */
std::vector<std::string> testedClusterSizes() {
    if (deviceHasClusters())
        return {"1", "8", "16"};
    return {"1"};
}

/**
 * The fitting network fused into one kernel per tile of rows gives bitwise
 * the trajectory of a kernel per layer (220 particles: tiles of 4 rows;
 * widths 16 and 16, the second layer residual; the type change moves rows
 * between the tiles of the two types), and so does each cluster size (a
 * slice of 4 columns a block: in clusters of 8 and 16, blocks without any
 * columns).
 */
TEST(CudaGraphForce, FusedNetworkGivesBitwiseIdenticalTrajectories) {
    const std::vector<Result> layered = propertyTrajectory({{"CudaFusedNetwork", "false"}}, 0);
    for (const std::string& cluster : testedClusterSizes()) {
        SCOPED_TRACE("CudaFusedCluster " + cluster);
        expectSameTrajectories(layered, propertyTrajectory({{"CudaFusedNetwork", "true"}, {"CudaFusedCluster", cluster}}, 0));
    }
    // Every tile size the property allows, one block per tile (4, 8, 16 rows: partial tiles) and, where the device has
    // clusters, clusters of 8 blocks (16, 32, 64 rows).
    // With the second layer's W^T resident in shared memory ("true") and streamed ("false"; "auto" chooses by the waves).
    for (const char* rows : {"4", "8", "16"})
        for (const char* resident : {"true", "false"}) {
            SCOPED_TRACE(std::string("CudaFusedTileRows ") + rows + ", CudaFusedResidentWeights " + resident);
            expectSameTrajectories(
                layered,
                propertyTrajectory({{"CudaFusedNetwork", "true"}, {"CudaFusedTileRows", rows}, {"CudaFusedResidentWeights", resident}}, 0));
        }
    if (deviceHasClusters())
        for (const char* rows : {"16", "32", "64"}) {
            SCOPED_TRACE(std::string("CudaFusedCluster 8, CudaFusedTileRows ") + rows);
            expectSameTrajectories(
                layered, propertyTrajectory({{"CudaFusedNetwork", "true"}, {"CudaFusedCluster", "8"}, {"CudaFusedTileRows", rows}}, 0));
        }
}

/**
 * Energy and forces with one property set, at `config` and after `steps` MD
 * steps from it (each followed by an energy-only evaluation): for bitwise
 * comparisons of launch choices on any model.
 */
std::vector<Result> propertyResults(const GraphTest::ModelOptions& options, const Configuration& config, const Properties& properties,
                                    int steps) {
    PropertyRun run(options, config, properties, 7);
    std::vector<Result> results;
    run.record(results);
    run.integrator.step(steps);
    run.record(results);
    return results;
}

/**
 * Rows from the cell grid and from all pairs are the same graph for larger systems, in a cubic box, a triclinic one and
 * an open cluster (cells beyond the grid's edges skipped): bitwise the same trajectories.  Cells are half a cut-off
 * (CellColumns.h): 216 particles give 4 along each axis (fewer than a row's 5 columns: every cell of the axis once),
 * 1,000 give 7 and 2,000 give 9 (the columns a part of the box, cut to the cut-off sphere and wrapped across its faces,
 * so a wrong offset, cut or wrap would show).  Then 1,000 particles with cut-offs of 0.35, 0.45 and 0.8 nm (about 18,
 * 38 and 200 neighbours a row): rows of every length that the cell search sorts differently (in registers, one, two
 * or four entries a lane, and by rank beyond 128), against the all-pairs search's rank sort.
 */
TEST(CudaGraphForce, CellSearchOfLargerSystemsMatchesAllPairs) {
    GraphTest::ModelOptions options;
    options.lMax = 2;
    options.numInteractions = 1;
    for (int n : {216, 1000, 2000})
        for (Geometry geometry : {Geometry::Cubic, Geometry::Triclinic, Geometry::Cluster}) {
            SCOPED_TRACE(std::to_string(n) + " particles, " +
                         (geometry == Geometry::Cubic       ? "cubic"
                          : geometry == Geometry::Triclinic ? "triclinic"
                                                            : "cluster"));
            const Configuration config = makeConfiguration(geometry, n, 2, 44);
            expectSameTrajectories(propertyResults(options, config, {{"CudaNeighborSearch", "cells"}}, 10),
                                   propertyResults(options, config, {{"CudaNeighborSearch", "allpairs"}}, 10));
        }
    const Configuration config = makeConfiguration(Geometry::Cubic, 1000, 2, 45);
    for (double cutoff : {0.35, 0.45, 0.8}) {
        SCOPED_TRACE("cut-off " + std::to_string(cutoff) + " nm");
        options.cutoff = cutoff;
        expectSameTrajectories(propertyResults(options, config, {{"CudaNeighborSearch", "cells"}}, 10),
                               propertyResults(options, config, {{"CudaNeighborSearch", "allpairs"}}, 10));
    }
}

/**
 * The fused-network tests' wider models: three types, l_max 1, M_axis 8, no
 * l-sum (a descriptor of 2 x 8 x numChannels entries), SiLU, the given
 * channels and hidden widths.
 */
GraphTest::ModelOptions wideFusedModel(int numChannels, const std::vector<int>& fittingWidths) {
    GraphTest::ModelOptions options;
    options.numTypes = 3;
    options.lMax = 1;
    options.numChannels = numChannels;
    options.numAxis = 8;
    options.lSum = false;
    options.fittingWidths = fittingWidths;
    options.activation = "silu";
    return options;
}

/**
 * The fused network over clusters of 8 and 16 blocks, bitwise against a
 * kernel per layer, on a model whose slices are not all whole vectors:
 * three types, no l-sum (a 256-entry descriptor), SiLU, hidden widths 120,
 * 120 (residual) and 40, 1,500 particles (partial tiles); slices of 32, 16
 * and 8 columns (8 blocks, fp32; 6 in fp64) and 16, 8 and 4 (16 blocks), so
 * 16 and 32 threads a row and blocks without columns of the last layer.
 * Skipped where the device has no clusters.
 */
TEST(CudaGraphForce, ClusterFusedNetworkGivesBitwiseIdenticalResults) {
    if (!deviceHasClusters())
        GTEST_SKIP() << "the device has no thread-block clusters";
    const GraphTest::ModelOptions options = wideFusedModel(16, {120, 120, 40});
    Configuration config = makeConfiguration(Geometry::Cubic, 1500, 3, 41);
    const std::vector<Result> layered = propertyResults(options, config, {{"CudaFusedNetwork", "false"}}, 5);
    for (const char* cluster : {"8", "16"}) {
        SCOPED_TRACE(std::string("CudaFusedCluster ") + cluster);
        expectSameTrajectories(layered, propertyResults(options, config, {{"CudaFusedNetwork", "true"}, {"CudaFusedCluster", cluster}}, 5));
    }
}

/**
 * The fused network of wider models, bitwise against a kernel per layer, in
 * one block per tile (wideFusedModel with 32 channels: a 512-entry
 * descriptor, four columns per thread in the last backward product),
 * 1,500 particles (the last tile of each
 * type partial); hidden widths 200, 200 (residual) and 40 (two columns per
 * thread, padded rows: tiles of 16 rows on a device of 94 to 187
 * multiprocessors, such as an H200, in single and mixed precision), then
 * 600 and 40 (eight columns per thread: tiles of 8 rows there), then 30, 30
 * (residual) and 7: sums over 30 and 7 inputs end in a partial k-group of
 * the streamed weights (FusedProduct.cuh: groups of 4 floats or 2 doubles).
 * Each with CudaFusedResidentWeights "auto" and "false", and 30, 30, 7 with
 * "true" (the resident layers' transposed backward product).
 */
TEST(CudaGraphForce, FusedNetworkOfWideModelGivesBitwiseIdenticalResults) {
    for (const std::vector<int>& widths : {std::vector<int>{200, 200, 40}, std::vector<int>{600, 40}, std::vector<int>{30, 30, 7}}) {
        SCOPED_TRACE("hidden widths " + std::to_string(widths[0]) + ", " + std::to_string(widths[1]) + "...");
        const GraphTest::ModelOptions options = wideFusedModel(32, widths);
        Configuration config = makeConfiguration(Geometry::Cubic, 1500, 3, 36);
        std::vector<Result> layered = propertyResults(options, config, {{"CudaFusedNetwork", "false"}}, 5);
        std::vector<Result> fused = propertyResults(options, config, {{"CudaFusedNetwork", "true"}}, 5);
        expectSameTrajectories(layered, fused);
        // The last layers' W^T resident where "auto" keeps them (on an H200, 200, 200, 40 in single and mixed precision:
        // 96 tiles of 16 rows, one wave, and room for the last layer; 600, 40 takes 190 tiles of 8 rows, more than a
        // wave, so it streams), streamed ("false"), and both layers of 30, 30, 7 resident ("true": partial k-groups and
        // outputs that are not whole vectors, in every precision).
        {
            SCOPED_TRACE("CudaFusedResidentWeights false");
            expectSameTrajectories(
                layered, propertyResults(options, config, {{"CudaFusedNetwork", "true"}, {"CudaFusedResidentWeights", "false"}}, 5));
        }
        if (widths[0] == 30) {
            SCOPED_TRACE("CudaFusedResidentWeights true");
            expectSameTrajectories(
                layered, propertyResults(options, config, {{"CudaFusedNetwork", "true"}, {"CudaFusedResidentWeights", "true"}}, 5));
        }
        // And both agree with the Reference platform.
        std::unique_ptr<System> system(makeSystem(config, options));
        Result expected = evaluate(*system, config.positions, Platform::getPlatformByName("Reference"));
        expectEnergyNear(fused[0].energy, expected.energy, testEnergyTolerance(), config.positions.size());
        expectForcesNear(fused[0].forces, expected.forces, testForceTolerance());
    }
}

/**
 * The edge scans' lane mappings (EdgeScanKernels.cu, EdgeShape) against the
 * Reference platform: 16-byte vectors in groups of 4, 8, 16 and 32 lanes,
 * groups with idle lanes, two vectors per lane (doubles beyond 64 channels)
 * and a lane per channel (counts that are not a multiple of the vector; one,
 * two and four channels per lane), with l_max 0 to 2 and the interaction
 * block (weighted moments, both tables in the force scan).
 */
TEST(CudaGraphForce, EdgeScanShapesMatchReference) {
    const std::vector<int> channels = {5, 12, 20, 36, 45, 64, 99, 100, 128};
    for (size_t c = 0; c < channels.size(); c++) {
        GraphTest::ModelOptions options;
        options.numChannels = channels[c];
        options.lMax = c % 3;
        options.numInteractions = c % 2;
        options.intervals = 40;
        Configuration config = makeConfiguration(Geometry::Cubic, 150, 2, 40 + (unsigned) c);
        std::unique_ptr<System> system(makeSystem(config, options));
        SCOPED_TRACE("channels " + std::to_string(channels[c]) + ", l_max " + std::to_string(options.lMax));
        checkAgainstReference(*system, config.positions);
    }
}

/** A model shape of the streamed scans' tests: three types, its channels, l_max, interaction blocks and table intervals. */
struct StreamedShape {
    int channels, lMax, interactions, intervals;

    GraphTest::ModelOptions options() const {
        GraphTest::ModelOptions options;
        options.numTypes = 3;
        options.numChannels = channels;
        options.lMax = lMax;
        options.numInteractions = interactions;
        options.intervals = intervals;
        return options;
    }

    std::string name() const {
        return "channels " + std::to_string(channels) + ", l_max " + std::to_string(lMax) + ", interactions " +
               std::to_string(interactions) + ", intervals " + std::to_string(intervals);
    }
};

/**
 * The streamed moments scan (CudaMomentsScan "streamed", StreamedMomentsKernels.cu) against the Reference platform
 * across its shapes: lane groups of 4, 8, 16 and 32 (16, 32, 36, 64 and 128 channels in single and mixed precision;
 * 8 to 64 and two vectors a lane in double), 1 to 4 centers a group (l_max 0 to 2), the interaction block (weighted
 * moments from its own table), three types over 700 particles (every type's last block partial), and tables of 40 to
 * 400 intervals (the ring of knots wraps many times a block).  Each center's sums have one order, so the results are
 * bitwise the same when evaluated again and when the System's particles are permuted (the blocks then hold other
 * centers).
 */
TEST(CudaGraphForce, StreamedMomentsScanMatchesReference) {
    const std::vector<StreamedShape> shapes = {{16, 0, 0, 40},  {32, 1, 1, 400}, {36, 1, 0, 100},
                                               {64, 2, 0, 400}, {64, 2, 1, 40},  {128, 2, 1, 400}};
    for (size_t s = 0; s < shapes.size(); s++) {
        const GraphTest::ModelOptions options = shapes[s].options();
        SCOPED_TRACE(shapes[s].name());
        Configuration config = makeConfiguration(Geometry::Cubic, 700, 3, 50 + (unsigned) s);
        GraphForce* force;
        std::unique_ptr<System> system(makeSystem(config, options, &force));
        force->setProperty("CudaMomentsScan", "streamed");
        checkAgainstReference(*system, config.positions);
        const Result first = evaluateOnTestPlatform(*system, config.positions), again = evaluateOnTestPlatform(*system, config.positions);
        EXPECT_EQ(first.energy, again.energy);
        for (size_t i = 0; i < first.forces.size(); i++)
            for (int c = 0; c < 3; c++)
                ASSERT_EQ(first.forces[i][c], again.forces[i][c]) << "particle " << i;
        std::vector<int> order;
        Configuration permuted = permuteConfiguration(config, 9, order);
        GraphForce* permutedForce;
        std::unique_ptr<System> permutedSystem(makeSystem(permuted, options, &permutedForce));
        permutedForce->setProperty("CudaMomentsScan", "streamed");
        const Result result = evaluateOnTestPlatform(*permutedSystem, permuted.positions);
        EXPECT_EQ(result.energy, first.energy);
        for (size_t i = 0; i < order.size(); i++)
            for (int c = 0; c < 3; c++)
                ASSERT_EQ(result.forces[i][c], first.forces[order[i]][c]) << "particle " << i;
    }
}

/** Creating a Context of `system` on the test platform is an OpenMMException whose message holds every one of `parts`. */
void expectContextRefused(const System& system, const std::vector<std::string>& parts) {
    VerletIntegrator integrator(0.001);
    try {
        Context context(system, integrator, testPlatform(), testPlatformProperties());
        ADD_FAILURE() << "no exception, expected one saying \"" << parts.back() << "\"";
    }
    catch (const OpenMMException& error) {
        const std::string what = error.what();
        for (const std::string& part : parts)
            EXPECT_NE(what.find(part), std::string::npos) << what;
    }
}

/** CudaMomentsScan "streamed" where the scan cannot run (5 channels: not whole 16-byte vectors) is an error that says why. */
TEST(CudaGraphForce, StreamedMomentsScanThatCannotRunIsExplained) {
    GraphTest::ModelOptions options;
    options.numChannels = 5;
    Configuration config = makeConfiguration(Geometry::Cubic, 220, 2, 38);
    GraphForce* force;
    std::unique_ptr<System> system(makeSystem(config, options, &force));
    force->setProperty("CudaMomentsScan", "streamed");
    expectContextRefused(*system, {"CudaMomentsScan is \"streamed\"", "5 channels"});
    VerletIntegrator integrator(0.001);
    force->setProperty("CudaMomentsScan", "auto");
    Context context(*system, integrator, testPlatform(), testPlatformProperties());
    context.setPositions(config.positions);
    EXPECT_TRUE(std::isfinite(context.getState(State::Energy).getPotentialEnergy()));
}

/**
 * The fused network that scans its tiles' moments itself (CudaMomentsScan "fused": fp32, tiles of 4 rows, l_max at most
 * 1, 20 to 32 channels in the scans' 8-lane groups; the small grade's shape) gives bitwise the trajectories of the
 * moments kernel and the per-layer network: l_max 0 and 1, l-summed and per degree, 32 channels and fewer (20 and 24:
 * the groups' last lanes idle), the last layers' weights resident and streamed.  (The fused network after the moments
 * kernel, "rows", is compared with the per-layer network in FusedNetworkGivesBitwiseIdenticalTrajectories.)  In double
 * precision "fused" is refused: the scan is fp32 only.
 */
TEST(CudaGraphForce, FusedMomentScanGivesBitwiseIdenticalTrajectories) {
    const bool doublePrecision = std::string(GRAPH_TEST_PRECISION) == "double";
    struct Shape {
        int channels, axis, lMax;
        bool lSum;
    };
    for (const Shape& shape : {Shape{32, 8, 1, true}, Shape{20, 4, 1, false}, Shape{24, 6, 0, true}, Shape{32, 8, 0, false}}) {
        GraphTest::ModelOptions options;
        options.numChannels = shape.channels;
        options.numAxis = shape.axis;
        options.lMax = shape.lMax;
        options.lSum = shape.lSum;
        options.fittingWidths = {128, 128, 128}; // the small grade's
        options.intervals = 80;
        SCOPED_TRACE("M " + std::to_string(shape.channels) + ", M_axis " + std::to_string(shape.axis) + ", l_max " +
                     std::to_string(shape.lMax) + (shape.lSum ? ", l-summed" : ", per degree"));
        if (doublePrecision) {
            GraphForce* force;
            std::unique_ptr<System> system(makeSystem(makeConfiguration(Geometry::Cubic, 220, 2, 35), options, &force));
            force->setProperty("CudaFusedNetwork", "true");
            force->setProperty("CudaFusedTileRows", "4");
            force->setProperty("CudaFusedResidentWeights", "false"); // a 128 x 128 layer's resident copy does not fit in double
            force->setProperty("CudaMomentsScan", "fused");
            expectContextRefused(*system, {"CudaMomentsScan is \"fused\"", "single and mixed precision"});
            continue;
        }
        const std::vector<Result> layered = propertyTrajectory(options, {{"CudaFusedNetwork", "false"}, {"CudaMomentsScan", "rows"}});
        for (const char* resident : {"true", "false"}) {
            SCOPED_TRACE(std::string("CudaFusedResidentWeights ") + resident);
            expectSameTrajectories(layered, propertyTrajectory(options, {{"CudaFusedNetwork", "true"},
                                                                         {"CudaFusedTileRows", "4"},
                                                                         {"CudaFusedResidentWeights", resident},
                                                                         {"CudaMomentsScan", "fused"}}));
        }
    }
}

/**
 * CudaMomentsScan "fused" where the fused network cannot scan the moments is an error that says why: l_max 2, 16
 * channels, tiles of 8 rows, the network not fused; and in double precision, any model.
 */
TEST(CudaGraphForce, FusedMomentScanThatCannotRunIsExplained) {
    const bool doublePrecision = std::string(GRAPH_TEST_PRECISION) == "double";
    struct Case {
        int channels, lMax;
        Properties properties;
        std::string why;
    };
    const Properties fused = {{"CudaFusedNetwork", "true"}, {"CudaMomentsScan", "fused"}};
    auto with = [&](const std::string& key, const std::string& value) {
        Properties properties = fused;
        properties[key] = value;
        return properties;
    };
    const std::vector<Case> cases = {{32, 2, fused, "l_max 2"},
                                     {16, 1, fused, "16 channels"},
                                     {32, 1, with("CudaFusedTileRows", "8"), "8 rows"},
                                     {32, 1, with("CudaFusedNetwork", "false"), "a kernel per layer"}};
    for (const Case& test : cases) {
        GraphTest::ModelOptions options;
        options.numChannels = test.channels;
        options.numAxis = 8;
        options.lMax = test.lMax;
        options.fittingWidths = {128, 128};
        SCOPED_TRACE(test.why);
        Configuration config = makeConfiguration(Geometry::Cubic, 220, 2, 38);
        GraphForce* force;
        std::unique_ptr<System> system(makeSystem(config, options, &force));
        for (const auto& property : test.properties)
            force->setProperty(property.first, property.second);
        const bool perLayer = test.properties.at("CudaFusedNetwork") == "false";
        expectContextRefused(*system,
                             {"CudaMomentsScan is \"fused\"", doublePrecision && !perLayer ? "single and mixed precision" : test.why});
        force->setProperty("CudaMomentsScan", "auto");
        VerletIntegrator integrator(0.001);
        Context context(*system, integrator, testPlatform(), testPlatformProperties());
        context.setPositions(config.positions);
        EXPECT_TRUE(std::isfinite(context.getState(State::Energy).getPotentialEnergy()));
    }
}

/**
 * The streamed force scan (CudaForceScan "streamed", StreamedForcesKernels.cu) across its shapes: lane groups of 4, 8,
 * 16 and 32 (16 to 128 channels in single and mixed precision; 8 to 64 and two vectors a lane in double), groups with
 * idle lanes (36 channels), one or two centers a group (l_max 0 to 2), three types over 700 particles (every type's
 * last block partial) and tables of 40 to 400 intervals (the ring wraps many times a block).  Each edge's force is
 * computed as the row scan computes it and goes into the fixed-point buffer on its own, so the forces are bitwise those
 * of CudaForceScan "rows" (the energy does not involve the force scan), with the moments of either moments scan (the
 * streamed one shares the table laid out by knot); and
 * they agree with the Reference platform.
 */
TEST(CudaGraphForce, StreamedForceScanGivesTheRowScansForces) {
    const std::vector<StreamedShape> shapes = {{16, 0, 0, 40}, {32, 1, 0, 400}, {36, 1, 0, 100}, {64, 2, 0, 400}, {128, 2, 0, 40}};
    for (size_t s = 0; s < shapes.size(); s++) {
        const GraphTest::ModelOptions options = shapes[s].options();
        for (const std::string moments : {"rows", "streamed"}) {
            SCOPED_TRACE(shapes[s].name() + ", CudaMomentsScan " + moments);
            Configuration config = makeConfiguration(Geometry::Cubic, 700, 3, 70 + (unsigned) s);
            GraphForce* force;
            std::unique_ptr<System> system(makeSystem(config, options, &force));
            force->setProperty("CudaMomentsScan", moments);
            force->setProperty("CudaForceScan", "rows");
            const Result rows = evaluateOnTestPlatform(*system, config.positions);
            force->setProperty("CudaForceScan", "streamed");
            const Result streamed = evaluateOnTestPlatform(*system, config.positions);
            EXPECT_EQ(streamed.energy, rows.energy);
            for (size_t i = 0; i < rows.forces.size(); i++)
                for (int c = 0; c < 3; c++)
                    ASSERT_EQ(streamed.forces[i][c], rows.forces[i][c]) << "particle " << i << ", component " << c;
            if (moments == "rows")
                checkAgainstReference(*system, config.positions);
        }
    }
}

/**
 * CudaForceScan "streamed" where the scan cannot run is an error that says why: a model with an interaction block (its
 * force terms need a second table), 5 channels (not whole 16-byte vectors) and 12 types of 128 channels at l_max 2
 * (four knots of the table, 216 KB in single precision, do not fit beside the windows).  "auto" then runs.
 */
TEST(CudaGraphForce, StreamedForceScanThatCannotRunIsExplained) {
    struct Case {
        int channels, interactions, types, lMax;
        std::string expected;
    };
    for (const Case& test :
         {Case{32, 1, 2, 1, "interaction block"}, Case{5, 0, 2, 1, "5 channels"}, Case{128, 0, 12, 2, "KB of shared memory a block"}}) {
        SCOPED_TRACE(test.expected);
        GraphTest::ModelOptions options;
        options.numChannels = test.channels;
        options.numInteractions = test.interactions;
        options.numTypes = test.types;
        options.lMax = test.lMax;
        Configuration config = makeConfiguration(Geometry::Cubic, 220, test.types, 39);
        GraphForce* force;
        std::unique_ptr<System> system(makeSystem(config, options, &force));
        force->setProperty("CudaForceScan", "streamed");
        expectContextRefused(*system, {"CudaForceScan is \"streamed\"", test.expected});
        force->setProperty("CudaForceScan", "auto");
        VerletIntegrator integrator(0.001);
        Context context(*system, integrator, testPlatform(), testPlatformProperties());
        context.setPositions(config.positions);
        EXPECT_TRUE(std::isfinite(context.getState(State::Energy).getPotentialEnergy()));
    }
}

/** The multiprocessors of the test platform's device (CUDA driver API), 0 if they cannot be counted. */
int testDeviceMultiprocessors() {
    System system;
    system.addParticle(1.0);
    VerletIntegrator integrator(0.001);
    Context context(system, integrator, testPlatform(), testPlatformProperties());
    const int index = std::stoi(testPlatform().getPropertyValue(context, "DeviceIndex"));
    CUdevice device;
    int count = 0;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&device, index) != CUDA_SUCCESS ||
        cuDeviceGetAttribute(&count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device) != CUDA_SUCCESS)
        return 0;
    return count;
}

/**
 * CudaMomentsScan "auto" takes the streamed scan for lane groups of 16 or 32 (more than 32 channels) in single and
 * mixed precision where the centers fill at least StreamedScanPlan::MinWaves (2) waves of its blocks, one block a
 * multiprocessor, and the row scan otherwise (docs/cuda-platform.md): its energy and forces are bitwise those of the
 * scan it should take.  300 particles are too few for any device (the medium grade's shape, 64 channels and l_max 2,
 * takes 60 centers a block in fp32); 2 x 60 x the multiprocessors + 1,000 are enough (16,840 on an H200).  The two scans add each center's
 * terms in different orders, so in single and mixed precision their results differ in the last bits (checked, so that the comparison can
 * tell them apart); in double precision the difference (about 1e-16 relative) is below the forces' 64-bit fixed point and the energy's
 * rounding, and the two gave bitwise the same results on an H200 (bench/NOTES.md v30), so there only "auto" against "rows" is checked.
 */
TEST(CudaGraphForce, MomentsScanAutoFollowsTheModelShapeAndSize) {
    const bool doublePrecision = std::string(GRAPH_TEST_PRECISION) == "double";
    const int multiprocessors = testDeviceMultiprocessors();
    ASSERT_GT(multiprocessors, 0) << "the CUDA driver did not report the device's multiprocessors";
    struct Case {
        int channels, particles;
    };
    const int enough = 2 * multiprocessors * 60 + 1000; // two waves of the medium shape's 60-center blocks, with a margin
    for (const Case& test : {Case{64, 300}, Case{32, 300}, Case{64, enough}}) {
        const bool enoughCenters = test.particles >= enough;
        GraphTest::ModelOptions options;
        options.numTypes = 2;
        options.numChannels = test.channels;
        options.lMax = 2;
        options.intervals = 200;
        SCOPED_TRACE("channels " + std::to_string(test.channels) + ", particles " + std::to_string(test.particles));
        Configuration config = makeConfiguration(Geometry::Cubic, test.particles, 2, 61);
        GraphForce* force;
        std::unique_ptr<System> system(makeSystem(config, options, &force));
        std::map<std::string, Result> results;
        for (const std::string scan : {"auto", "rows", "streamed"}) {
            force->setProperty("CudaMomentsScan", scan);
            results[scan] = evaluateOnTestPlatform(*system, config.positions);
        }
        const bool streamedExpected = test.channels > 32 && !doublePrecision && enoughCenters;
        const Result& expected = results[streamedExpected ? "streamed" : "rows"];
        const Result& rows = results["rows"];
        const Result& streamed = results["streamed"];
        bool differ = rows.energy != streamed.energy;
        for (size_t i = 0; i < rows.forces.size(); i++)
            for (int c = 0; c < 3; c++)
                differ = differ || rows.forces[i][c] != streamed.forces[i][c];
        if (!doublePrecision)
            EXPECT_TRUE(differ) << "the row and streamed scans gave bitwise the same results: the comparison cannot tell them apart";
        EXPECT_EQ(results["auto"].energy, expected.energy);
        for (size_t i = 0; i < expected.forces.size(); i++)
            for (int c = 0; c < 3; c++)
                ASSERT_EQ(results["auto"].forces[i][c], expected.forces[i][c]) << "particle " << i;
    }
}

/**
 * The per-layer path's invariant kernels (EdgeScanKernels.cu) across shapes, against the Reference platform, and
 * bitwise against the fused kernel where the network can be fused.  The backward takes invariantsBackwardAxisKernel
 * for M a multiple of 4 and M_axis 4, 8 or 16 within 48 KB of shared memory (64 x 8, 16 x 8, 32 x 8 l-summed, 8 x 4
 * with l_max 0, 128 x 16 with the interaction block in single and mixed precision; the trajectory tests' default
 * model, 8 x 4 l-summed with l_max 2, bitwise against the fused kernel in
 * FusedNetworkGivesBitwiseIdenticalTrajectories) and invariantsBackwardKernel otherwise: moments staged by 16-byte
 * vectors and one by one (M a multiple of 4 or not), the descriptor gradient staged by vectors or one by one (M_axis a
 * multiple of 4 or not) with rows an odd number of reals apart (M_axis even: padded; odd: as is), or read from global
 * memory where a block would need more than 48 KB of shared memory (M 128, M_axis 40, l_max 2 per degree; the large
 * grade's M_axis 16 too in double precision), M_axis = M, per degree and l-summed, l_max 0 to 2, and the interaction
 * block (X != A, sums added to earlier ones).  16 x 8 per degree is the padded gradient compared bitwise in double
 * precision too, where the fused kernel refuses the medium-shaped model.
 */
TEST(CudaGraphForce, InvariantShapesMatchReference) {
    struct Shape {
        int channels, axis, lMax;
        bool lSum;
        int interactions;
    };
    const std::vector<Shape> shapes = {{64, 8, 2, false, 0},   {16, 8, 2, false, 0},   {45, 7, 2, false, 0},
                                       {12, 12, 0, true, 0},   {32, 8, 1, true, 0},    {20, 6, 1, false, 1},
                                       {128, 16, 2, false, 1}, {128, 40, 2, false, 1}, {8, 4, 0, false, 0}};
    for (size_t s = 0; s < shapes.size(); s++) {
        const Shape& shape = shapes[s];
        GraphTest::ModelOptions options;
        options.numChannels = shape.channels;
        options.numAxis = shape.axis;
        options.lMax = shape.lMax;
        options.lSum = shape.lSum;
        options.numInteractions = shape.interactions;
        options.intervals = 40;
        options.seed = 60 + (unsigned) s;
        SCOPED_TRACE("M " + std::to_string(shape.channels) + ", M_axis " + std::to_string(shape.axis) + ", l_max " +
                     std::to_string(shape.lMax) + (shape.lSum ? ", l-summed" : ", per degree") +
                     (shape.interactions ? ", interaction block" : ""));
        Configuration config = makeConfiguration(Geometry::Cubic, 150, 2, 50 + (unsigned) s);
        GraphForce* force;
        std::unique_ptr<System> system(makeSystem(config, options, &force));
        force->setProperty("CudaFusedNetwork", "false");
        checkAgainstReference(*system, config.positions);
        if (shape.interactions != 0)
            continue;
        // The fused kernel takes every one of these models but the medium-shaped one (64 channels) in double precision,
        // where a tile of 4 rows needs 260 KB of shared memory, more than a block has on the devices we know.
        std::vector<Result> fused;
        try {
            fused = propertyResults(options, config, {{"CudaFusedNetwork", "true"}}, 3);
        }
        catch (const OpenMMException& error) {
            const bool expected = std::string(GRAPH_TEST_PRECISION) == "double" && shape.channels == 64 &&
                                  std::string(error.what()).find("rows needs") != std::string::npos;
            ASSERT_TRUE(expected) << error.what();
            continue;
        }
        expectSameTrajectories(propertyResults(options, config, {{"CudaFusedNetwork", "false"}}, 3), fused);
    }
}

/**
 * The one-block-per-row kernels (the invariants and their backward) launch at most 65,535 blocks and take the rows
 * beyond in a loop (rowBlocks, EdgeScanKernels.cu); no other test has that many rows.  70,000 particles in one chunk
 * (CudaChunkRows "auto") give 4,465 blocks a second row: bitwise the results of chunks of 4,096 rows, where every block
 * has one.  Shapes: 16 x 8 per degree with l_max 2 (invariantsBackwardAxisKernel) and 12 x 6 with the interaction block
 * (invariantsBackwardKernel, X != A and sums added to earlier ones); a cut-off of 0.3 nm (about 11 neighbours a row)
 * keeps the systems quick.
 */
TEST(CudaGraphForce, RowLoopsBeyondTheGridGiveBitwiseIdenticalResults) {
    struct Shape {
        int channels, axis, lMax, interactions;
    };
    for (const Shape& shape : {Shape{16, 8, 2, 0}, Shape{12, 6, 1, 1}}) {
        GraphTest::ModelOptions options;
        options.numChannels = shape.channels;
        options.numAxis = shape.axis;
        options.lMax = shape.lMax;
        options.lSum = false;
        options.numInteractions = shape.interactions;
        options.cutoff = 0.3;
        options.intervals = 40;
        SCOPED_TRACE("M " + std::to_string(shape.channels) + ", M_axis " + std::to_string(shape.axis) +
                     (shape.interactions ? ", interaction block" : ""));
        const Configuration config = makeConfiguration(Geometry::Cubic, 70000, 2, 90);
        expectSameTrajectories(propertyResults(options, config, {{"CudaChunkRows", "4096"}}, 2),
                               propertyResults(options, config, {{"CudaChunkRows", "auto"}}, 2));
    }
}

/** CudaFusedNetwork "true" where the network cannot be fused is an error that says why; "auto" falls back. */
/**
 * A Context of `options`' model (220 particles) with CudaFusedNetwork "true", `properties` and `strict` = "true" is refused
 * with an error that contains `reason`; with `strict` = "auto" the same model runs.
 */
void expectRefusedUnlessAuto(const GraphTest::ModelOptions& options, Properties properties, const std::string& strict,
                             const std::string& reason) {
    Configuration config = makeConfiguration(Geometry::Cubic, 220, 2, 37);
    GraphForce* force;
    std::unique_ptr<System> system(makeSystem(config, options, &force));
    properties["CudaFusedNetwork"] = "true";
    properties[strict] = "true";
    for (const auto& property : properties)
        force->setProperty(property.first, property.second);
    VerletIntegrator integrator(0.001);
    try {
        Context context(*system, integrator, testPlatform(), testPlatformProperties());
        ADD_FAILURE() << "no exception for " << reason;
    }
    catch (const OpenMMException& error) {
        EXPECT_NE(std::string(error.what()).find(reason), std::string::npos) << error.what();
    }
    force->setProperty(strict, "auto");
    Context context(*system, integrator, testPlatform(), testPlatformProperties());
    context.setPositions(config.positions);
    EXPECT_TRUE(std::isfinite(context.getState(State::Energy).getPotentialEnergy()));
}

TEST(CudaGraphForce, FusedNetworkThatCannotBeFusedIsExplained) {
    auto expectRefused = [](const GraphTest::ModelOptions& options, const Properties& properties, const std::string& reason) {
        expectRefusedUnlessAuto(options, properties, "CudaFusedNetwork", reason);
    };
    GraphTest::ModelOptions interaction;
    interaction.numInteractions = 1;
    expectRefused(interaction, {}, "interaction block");
    expectRefused(GraphTest::ModelOptions(), {{"CudaChunkRows", "37"}}, "chunks");
    GraphTest::ModelOptions wide;
    wide.fittingWidths = {16, 2100};
    expectRefused(wide, {}, "2100 entries");
    // A cluster whose blocks would each hold more than 128 columns of a layer (1,100 units over 8 blocks: 138).
    GraphTest::ModelOptions wideCluster;
    wideCluster.fittingWidths = {1100};
    expectRefused(wideCluster, {{"CudaFusedCluster", "8"}},
                  deviceHasClusters() ? "columns of a layer of 1100" : "has no thread-block clusters");
    // Tile sizes that one block per tile does not take, and 16-row tiles of layers wider than 512 units.
    expectRefused(GraphTest::ModelOptions(), {{"CudaFusedTileRows", "32"}}, "does not take (4, 8 or 16 rows)");
    GraphTest::ModelOptions wideRows;
    wideRows.fittingWidths = {600};
    expectRefused(wideRows, {{"CudaFusedTileRows", "16"}}, "at most 512 entries");
    // A cluster's tiles are 16 rows or more (slices of 4 columns in clusters of 8: up to 64).
    if (deviceHasClusters())
        expectRefused(GraphTest::ModelOptions(), {{"CudaFusedCluster", "8"}, {"CudaFusedTileRows", "4"}}, "takes tiles of 16 to 64 rows");
}

/**
 * CudaFusedResidentWeights "true" where no layer can stay resident is an error that says why (a network of one hidden
 * layer, whose weights always stream; clusters, whose blocks keep their slices anyway), and "auto" runs the same model.
 */
TEST(CudaGraphForce, ResidentWeightsThatCannotBeKeptAreExplained) {
    auto expectRefused = [](const GraphTest::ModelOptions& options, const Properties& properties, const std::string& reason) {
        expectRefusedUnlessAuto(options, properties, "CudaFusedResidentWeights", reason);
    };
    GraphTest::ModelOptions oneLayer;
    oneLayer.fittingWidths = {16};
    expectRefused(oneLayer, {}, "one hidden layer");
    if (deviceHasClusters())
        expectRefused(GraphTest::ModelOptions(), {{"CudaFusedCluster", "8"}}, "runs over clusters of 8 blocks");
}

TEST(CudaGraphForce, BadCudaGraphPropertyIsRejected) {
    GraphTest::ModelOptions options;
    std::unique_ptr<GraphForce> force(makeForce(options));
    EXPECT_THROW(force->setProperty("CudaGraph", "yes"), OpenMMException);
    for (const char* bad : {"0", "-5", "12rows", "", "1e6", "99999999999"})
        EXPECT_THROW(force->setProperty("CudaChunkRows", bad), OpenMMException) << bad;
    force->setProperty("CudaChunkRows", "4096");
    EXPECT_EQ("4096", force->getProperty("CudaChunkRows"));
    EXPECT_THROW(force->setProperty("CudaNeighborSearch", "grid"), OpenMMException);
    EXPECT_THROW(force->setProperty("CudaFusedNetwork", "yes"), OpenMMException);
    for (const char* bad : {"0", "3", "32", "", "eight"})
        EXPECT_THROW(force->setProperty("CudaFusedCluster", bad), OpenMMException) << bad;
    force->setProperty("CudaFusedCluster", "16");
    EXPECT_EQ("16", force->getProperty("CudaFusedCluster"));
    for (const char* bad : {"0", "2", "12", "128", "", "auto4"})
        EXPECT_THROW(force->setProperty("CudaFusedTileRows", bad), OpenMMException) << bad;
    force->setProperty("CudaFusedTileRows", "64");
    EXPECT_EQ("64", force->getProperty("CudaFusedTileRows"));
    for (const char* bad : {"", "stream", "Rows", "true", "Fused"})
        EXPECT_THROW(force->setProperty("CudaMomentsScan", bad), OpenMMException) << bad;
    EXPECT_EQ("auto", force->getProperty("CudaMomentsScan"));
    force->setProperty("CudaMomentsScan", "streamed");
    EXPECT_EQ("streamed", force->getProperty("CudaMomentsScan"));
    force->setProperty("CudaMomentsScan", "fused");
    EXPECT_EQ("fused", force->getProperty("CudaMomentsScan"));
    for (const char* bad : {"", "stream", "Rows", "pairs"})
        EXPECT_THROW(force->setProperty("CudaForceScan", bad), OpenMMException) << bad;
    EXPECT_EQ("auto", force->getProperty("CudaForceScan"));
    force->setProperty("CudaForceScan", "streamed");
    EXPECT_EQ("streamed", force->getProperty("CudaForceScan"));
}

/**
 * A radial table past 2 GiB on the device, in the platform's precision (2 types, l_max 2, 128 channels and as many
 * intervals as that takes: 131,073 knots in fp32, 65,537 in fp64), against the Reference platform.  OpenMM 8.6.1's
 * CudaArray::upload multiplies elements by their size in int, and the plugin's model uploads went through it: a table
 * of 2 to 4 GiB failed to upload, one of 4 to 6 GiB was copied in part (bench/NOTES.md v66).  Needs about 20 GB of host
 * memory and 5 GB of device memory.
 */
TEST(CudaGraphForce, TablesPastTwoGibibytesAreUploadedWhole) {
    GraphTest::ModelOptions options;
    options.lMax = 2;
    options.numChannels = 128;
    options.numAxis = 2;
    options.fittingWidths = {8};
    options.float32 = true; // the file's bytes: half the table's doubles
    const size_t realSize = std::string(GRAPH_TEST_PRECISION) == "double" ? 8 : 4;
    const size_t knotBytes = (size_t) options.numTypes * options.numTypes * (options.lMax + 1) * 3 * options.numChannels * realSize;
    options.intervals = (int) (((size_t) 9 << 28) / knotBytes); // 2.25 GiB of knots
    ASSERT_GT((options.intervals + 1) * knotBytes, (size_t) 1 << 31);
    // An open cluster: 40 particles at liquid density fill a periodic box too small for the 0.6 nm cut-off.
    Configuration config = makeConfiguration(Geometry::Cluster, 40, options.numTypes, 11);
    std::unique_ptr<System> system(makeSystem(config, options));
    checkAgainstReference(*system, config.positions);
}
