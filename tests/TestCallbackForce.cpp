// CallbackForce on the host platforms: a harmonic restraint written as a C
// callback that adds its forces in place matches the same restraint as a
// CustomExternalForce (the PySAGES-style use: a bias added inside the force
// evaluation, its energy reported through OpenMM).
#include "CallbackForce.h"
#include "OpenMMGraphDLPack.h"
#include "openmm/Context.h"
#include "openmm/CustomExternalForce.h"
#include "openmm/HarmonicBondForce.h"
#include "openmm/OpenMMException.h"
#include "openmm/Platform.h"
#include "openmm/State.h"
#include "openmm/System.h"
#include "openmm/VerletIntegrator.h"
#include <gtest/gtest.h>
#include <cmath>
#include <vector>

using namespace GraphPlugin;
using namespace OpenMM;

namespace {

const double SpringConstant = 250.0;          // kJ/mol/nm^2
const double Center[3] = {0.5, 0.25, -0.125}; // nm

struct CallCounter {
    int calls = 0;
};

/** E = k/2 sum_i |x_i - c|^2 over the first two particles, forces added in place (host layout [n][3] float64). */
int harmonicRestraint(void* userData, const DLTensor* positions, DLTensor* forces, const DLTensor* box, const DLTensor* atomOrder,
                      uintptr_t stream, double* energy) {
    auto* counter = static_cast<CallCounter*>(userData);
    counter->calls++;
    if (positions->device.device_type != kDLCPU || positions->dtype.code != kDLFloat || positions->dtype.bits != 64 ||
        positions->ndim != 2 || positions->shape[1] != 3 || stream != 0 || box->shape[0] != 3 || atomOrder->ndim != 1)
        return 7; // not the host layout the header promises
    const double* x = static_cast<const double*>(positions->data);
    double* f = forces ? static_cast<double*>(forces->data) : nullptr;
    *energy = 0;
    for (int i = 0; i < 2; i++)
        for (int c = 0; c < 3; c++) {
            double d = x[3 * i + c] - Center[c];
            *energy += 0.5 * SpringConstant * d * d;
            if (f != nullptr)
                f[3 * i + c] -= SpringConstant * d;
        }
    return 0;
}

int failingCallback(void*, const DLTensor*, DLTensor*, const DLTensor*, const DLTensor*, uintptr_t, double*) {
    return 3;
}

Platform& platform(const std::string& name) {
    static bool loaded = (Platform::loadPluginsFromDirectory(GRAPH_OPENMM_PLUGIN_DIR), true);
    (void) loaded;
    return Platform::getPlatformByName(name);
}

System* makeSystem() {
    System* system = new System();
    for (int i = 0; i < 3; i++)
        system->addParticle(10.0);
    HarmonicBondForce* bond = new HarmonicBondForce(); // something else in the System, so forces add up
    bond->addBond(0, 2, 0.2, 100.0);
    system->addForce(bond);
    return system;
}

class CallbackForceTest : public ::testing::TestWithParam<std::string> {};

} // namespace

TEST_P(CallbackForceTest, HarmonicBiasMatchesCustomExternalForce) {
    std::vector<Vec3> positions = {Vec3(0.1, 0.2, 0.3), Vec3(0.9, -0.4, 0.2), Vec3(0.25, 0.1, 0.05)};
    // The bias through the callback.
    System* withCallback = makeSystem();
    CallCounter counter;
    void* force = nullptr;
    ASSERT_EQ(ommgraph_callback_force_create(harmonicRestraint, &counter, &force), OMMGRAPH_OK) << ommgraph_last_error();
    withCallback->addForce(static_cast<Force*>(force));
    // The same bias as a CustomExternalForce.
    System* withCustom = makeSystem();
    CustomExternalForce* custom = new CustomExternalForce("0.5*k*((x-x0)^2+(y-y0)^2+(z-z0)^2)");
    custom->addGlobalParameter("k", SpringConstant);
    custom->addGlobalParameter("x0", Center[0]);
    custom->addGlobalParameter("y0", Center[1]);
    custom->addGlobalParameter("z0", Center[2]);
    custom->addParticle(0);
    custom->addParticle(1);
    withCustom->addForce(custom);
    VerletIntegrator integratorA(0.001), integratorB(0.001);
    Context contextA(*withCallback, integratorA, platform(GetParam()));
    Context contextB(*withCustom, integratorB, platform(GetParam()));
    for (Context* context : {&contextA, &contextB})
        context->setPositions(positions);
    State a = contextA.getState(State::Energy | State::Forces);
    State b = contextB.getState(State::Energy | State::Forces);
    EXPECT_NEAR(a.getPotentialEnergy(), b.getPotentialEnergy(), 1e-9 * std::abs(b.getPotentialEnergy()));
    for (int i = 0; i < 3; i++)
        for (int c = 0; c < 3; c++)
            EXPECT_NEAR(a.getForces()[i][c], b.getForces()[i][c], 1e-9 * SpringConstant);
    EXPECT_GT(counter.calls, 0);
    // Dynamics with the bias: the same trajectory as with the CustomExternalForce.
    integratorA.step(20);
    integratorB.step(20);
    std::vector<Vec3> xa = contextA.getState(State::Positions).getPositions(), xb = contextB.getState(State::Positions).getPositions();
    for (int i = 0; i < 3; i++)
        for (int c = 0; c < 3; c++)
            EXPECT_NEAR(xa[i][c], xb[i][c], 1e-9);
    delete withCallback;
    delete withCustom;
}

TEST_P(CallbackForceTest, FailuresAreReported) {
    System* system = makeSystem();
    CallbackForce* force = new CallbackForce();
    system->addForce(force);
    VerletIntegrator integrator(0.001);
    EXPECT_THROW(Context(*system, integrator, platform(GetParam())), OpenMMException); // no function set
    force->setFunction(reinterpret_cast<CallbackForce::Function>(failingCallback), nullptr);
    Context context(*system, integrator, platform(GetParam()));
    context.setPositions(std::vector<Vec3>(3, Vec3()));
    try {
        context.getState(State::Forces);
        FAIL() << "a failing callback was not reported";
    }
    catch (const OpenMMException& e) {
        EXPECT_NE(std::string(e.what()).find("status 3"), std::string::npos) << e.what();
    }
    delete system;
}

TEST_P(CallbackForceTest, ComputeForcesIsGetStateWithoutTheCopy) {
    // The bond (group 0) and the callback's restraint (group 2): ommgraph_compute_forces gives getState's energy for
    // each mask, and leaves getState's forces in the FORCES view.
    System* system = makeSystem();
    CallCounter counter;
    void* force = nullptr;
    ASSERT_EQ(ommgraph_callback_force_create(harmonicRestraint, &counter, &force), OMMGRAPH_OK) << ommgraph_last_error();
    static_cast<Force*>(force)->setForceGroup(2);
    system->addForce(static_cast<Force*>(force));
    VerletIntegrator integrator(0.001);
    Context context(*system, integrator, platform(GetParam()));
    const std::vector<Vec3> positions = {Vec3(0.1, 0.2, 0.3), Vec3(0.9, -0.4, 0.2), Vec3(0.25, 0.1, 0.05)};
    std::vector<Vec3> moved = positions;
    for (Vec3& x : moved)
        x += Vec3(0.01, -0.02, 0.015);
    for (int groups : {-1, 1 << 0, 1 << 2, 1 << 5}) {
        context.setPositions(positions);
        State state = context.getState(State::Energy | State::Forces, false, groups);
        context.setPositions(moved);
        context.getState(State::Forces); // the buffer now holds other forces
        context.setPositions(positions);
        double energy = -1.0;
        ASSERT_EQ(ommgraph_compute_forces(&context, groups, &energy), OMMGRAPH_OK) << ommgraph_last_error();
        EXPECT_EQ(energy, state.getPotentialEnergy()) << "groups " << groups;
        DLManagedTensor* view = nullptr;
        ASSERT_EQ(ommgraph_view_legacy(&context, OMMGRAPH_VIEW_FORCES, 0, nullptr, nullptr, &view), OMMGRAPH_OK);
        const double* f = static_cast<const double*>(view->dl_tensor.data);
        for (int i = 0; i < 3; i++)
            for (int c = 0; c < 3; c++)
                EXPECT_EQ(f[3 * i + c], state.getForces()[i][c]) << "groups " << groups << ", particle " << i;
        view->deleter(view);
    }
    EXPECT_EQ(ommgraph_compute_forces(&context, -1, nullptr), OMMGRAPH_OK) << ommgraph_last_error(); // the energy is optional
    EXPECT_EQ(ommgraph_compute_forces(nullptr, -1, nullptr), OMMGRAPH_ERROR_ARGUMENT);
    EXPECT_NE(std::string(ommgraph_last_error()).find("NULL"), std::string::npos) << ommgraph_last_error();
    delete system;
}

TEST_P(CallbackForceTest, ComputeForcesReturnsFailuresAsStatus) {
    System* system = makeSystem();
    CallbackForce* force = new CallbackForce();
    force->setFunction(reinterpret_cast<CallbackForce::Function>(failingCallback), nullptr);
    system->addForce(force);
    VerletIntegrator integrator(0.001);
    Context context(*system, integrator, platform(GetParam()));
    context.setPositions(std::vector<Vec3>(3, Vec3()));
    double energy = 42.0;
    EXPECT_EQ(ommgraph_compute_forces(&context, -1, &energy), OMMGRAPH_ERROR_RUNTIME);
    EXPECT_EQ(energy, 42.0); // left unchanged
    std::string message = ommgraph_last_error();
    EXPECT_NE(message.find("ommgraph_compute_forces"), std::string::npos) << message;
    EXPECT_NE(message.find("status 3"), std::string::npos) << message;
    delete system;
}

INSTANTIATE_TEST_SUITE_P(HostPlatforms, CallbackForceTest, ::testing::Values("Reference", "CPU"));
