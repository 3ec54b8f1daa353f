/**
 * The DLPack C API (wrappers/include/OpenMMGraphDLPack.h) on the CUDA
 * platform, in each precision: layouts of OpenMM's device arrays, values
 * (through host copies) against Context::getState in the sorted order of
 * ATOM_ORDER, device copies, the stream handshake.  Needs a CUDA GPU (label "gpu").
 */
#include "OpenMMGraphDLPack.h"
#include "openmm/Context.h"
#include "openmm/CustomExternalForce.h"
#include "openmm/Platform.h"
#include "openmm/State.h"
#include "openmm/System.h"
#include "openmm/VerletIntegrator.h"
#include <cmath>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <memory>
#include <string>
#include <vector>

using namespace OpenMM;

namespace {

const int NumParticles = 5;
const double SpringConstant = 3.5; // kJ/mol/nm^2

struct VersionedDeleter {
    void operator()(DLManagedTensorVersioned* tensor) const {
        tensor->deleter(tensor);
    }
};
using VersionedTensor = std::unique_ptr<DLManagedTensorVersioned, VersionedDeleter>;

void loadOpenMMPlugins() {
    static bool loaded = (Platform::loadPluginsFromDirectory(Platform::getDefaultPluginsDirectory()), true);
    (void) loaded;
}

void loadGraphPlugins() {
    loadOpenMMPlugins();
    static bool loaded = (Platform::loadPluginsFromDirectory(GRAPH_PLUGIN_DIR), true);
    (void) loaded;
}

/** Five particles in a spring to the origin, in a periodic box, on the CUDA platform at `precision`. */
struct SpringSystem {
    explicit SpringSystem(const std::string& precision) : integrator(0.001) {
        CustomExternalForce* force = new CustomExternalForce("k*(x^2+y^2+z^2)");
        force->addGlobalParameter("k", SpringConstant);
        for (int i = 0; i < NumParticles; i++) {
            system.addParticle(1.0 + i);
            force->addParticle(i);
            positions.push_back(Vec3(0.1 * i + 0.05, 0.2 - 0.03 * i, 0.3 + 0.07 * i));
            velocities.push_back(Vec3(-0.4 + 0.1 * i, 0.25 * i, 1.5 - 0.2 * i));
        }
        system.addForce(force);
        system.setDefaultPeriodicBoxVectors(Vec3(2.0, 0, 0), Vec3(0.5, 2.5, 0), Vec3(-0.3, 0.4, 3.0));
        context.reset(new Context(system, integrator, Platform::getPlatformByName("CUDA"), {{"Precision", precision}}));
        context->setPositions(positions);
        context->setVelocities(velocities);
    }
    System system;
    VerletIntegrator integrator;
    std::unique_ptr<Context> context;
    std::vector<Vec3> positions, velocities;
};

VersionedTensor view(Context& context, int which, unsigned flags = 0) {
    DLManagedTensorVersioned* tensor = nullptr;
    EXPECT_EQ(ommgraph_view_versioned(&context, which, flags, nullptr, nullptr, &tensor), OMMGRAPH_OK) << ommgraph_last_error();
    return VersionedTensor(tensor);
}

/** Element (row, column) of a 2-D float tensor in host memory, as double. */
double element(const DLTensor& tensor, int64_t row, int64_t column) {
    int64_t index = row * tensor.strides[0] + column * tensor.strides[1];
    return tensor.dtype.bits == 64 ? static_cast<const double*>(tensor.data)[index] : static_cast<const float*>(tensor.data)[index];
}

// Runs first (gtest keeps the order of definition): before openmm-graph's CUDA plugin is loaded.
TEST(CudaDLPackViews, WithoutTheGraphCudaPluginViewsAreAPlatformError) {
    loadOpenMMPlugins();
    if (dlsym(RTLD_DEFAULT, "ommgraphCudaDescribeView") != nullptr)
        GTEST_SKIP() << "openmm-graph's CUDA plugin is already loaded (tests shuffled?)";
    SpringSystem spring("single");
    DLManagedTensorVersioned* tensor = nullptr;
    EXPECT_EQ(ommgraph_view_versioned(spring.context.get(), OMMGRAPH_VIEW_POSITIONS, 0, nullptr, nullptr, &tensor),
              OMMGRAPH_ERROR_PLATFORM);
    EXPECT_NE(std::string(ommgraph_last_error()).find("libOpenMMGraphCUDA.so"), std::string::npos) << ommgraph_last_error();
}

class CudaDLPackViewsTest : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        loadGraphPlugins();
        liveAtStart = ommgraph_live_views();
    }
    void TearDown() override {
        EXPECT_EQ(ommgraph_live_views(), liveAtStart);
    }
    int64_t liveAtStart = 0;
};

TEST_P(CudaDLPackViewsTest, ViewsDescribeOpenMMsDeviceArrays) {
    const std::string precision = GetParam();
    SpringSystem spring(precision);
    Context& context = *spring.context;
    std::vector<Vec3> forces = context.getState(State::Forces).getForces();

    int32_t deviceType = 0, deviceId = -1;
    ASSERT_EQ(ommgraph_view_device(&context, &deviceType, &deviceId), OMMGRAPH_OK) << ommgraph_last_error();
    EXPECT_EQ(deviceType, kDLCUDA);
    EXPECT_GE(deviceId, 0);

    VersionedTensor positions = view(context, OMMGRAPH_VIEW_POSITIONS);
    const DLTensor& p = positions->dl_tensor;
    EXPECT_EQ(p.device.device_type, kDLCUDA);
    EXPECT_EQ(p.device.device_id, deviceId);
    ASSERT_EQ(p.ndim, 2);
    const int64_t padded = p.shape[0];
    EXPECT_GE(padded, NumParticles);
    EXPECT_EQ(p.shape[1], 4);
    EXPECT_EQ(p.strides[0], 4);
    EXPECT_EQ(p.strides[1], 1);
    EXPECT_EQ(p.dtype.code, kDLFloat);
    EXPECT_EQ(p.dtype.bits, precision == "double" ? 64 : 32);
    EXPECT_EQ(p.byte_offset, 0u);
    EXPECT_EQ(positions->flags, 0u);

    // Values, through host copies, in the sorted order of ATOM_ORDER.
    VersionedTensor order = view(context, OMMGRAPH_VIEW_ATOM_ORDER, OMMGRAPH_VIEW_COPY | OMMGRAPH_VIEW_HOST);
    ASSERT_EQ(order->dl_tensor.ndim, 1);
    EXPECT_EQ(order->dl_tensor.shape[0], padded);
    EXPECT_EQ(order->dl_tensor.dtype.code, kDLInt);
    EXPECT_EQ(order->dl_tensor.dtype.bits, 32);
    EXPECT_EQ(order->flags, DLPACK_FLAG_BITMASK_READ_ONLY | DLPACK_FLAG_BITMASK_IS_COPIED);
    const int32_t* particleOfSlot = static_cast<const int32_t*>(order->dl_tensor.data);
    VersionedTensor hostPositions = view(context, OMMGRAPH_VIEW_POSITIONS, OMMGRAPH_VIEW_COPY | OMMGRAPH_VIEW_HOST);
    VersionedTensor hostVelocities = view(context, OMMGRAPH_VIEW_VELOCITIES, OMMGRAPH_VIEW_COPY | OMMGRAPH_VIEW_HOST);
    VersionedTensor hostForces = view(context, OMMGRAPH_VIEW_FORCES, OMMGRAPH_VIEW_COPY | OMMGRAPH_VIEW_HOST);
    EXPECT_EQ(hostPositions->dl_tensor.device.device_type, kDLCPU);
    EXPECT_EQ(hostPositions->flags, DLPACK_FLAG_BITMASK_IS_COPIED);
    EXPECT_EQ(hostVelocities->dl_tensor.dtype.bits, precision == "single" ? 32 : 64);
    const DLTensor& f = hostForces->dl_tensor;
    ASSERT_EQ(f.ndim, 2);
    EXPECT_EQ(f.shape[0], 3);
    EXPECT_EQ(f.shape[1], padded);
    EXPECT_EQ(f.dtype.code, kDLInt);
    EXPECT_EQ(f.dtype.bits, 64);
    const int64_t* fixedForces = static_cast<const int64_t*>(f.data);
    const double tolerance = precision == "double" ? 1e-12 : 1e-6;
    std::vector<bool> seen(NumParticles, false);
    for (int slot = 0; slot < NumParticles; slot++) {
        const int particle = particleOfSlot[slot];
        ASSERT_GE(particle, 0);
        ASSERT_LT(particle, NumParticles);
        seen[particle] = true;
        for (int c = 0; c < 3; c++) {
            EXPECT_NEAR(element(hostPositions->dl_tensor, slot, c), spring.positions[particle][c], tolerance);
            EXPECT_NEAR(element(hostVelocities->dl_tensor, slot, c), spring.velocities[particle][c], tolerance);
            EXPECT_NEAR(fixedForces[c * padded + slot] / 4294967296.0, forces[particle][c], 1e-6);
            EXPECT_NEAR(forces[particle][c], -2 * SpringConstant * spring.positions[particle][c], 1e-4);
        }
        EXPECT_NEAR(element(hostVelocities->dl_tensor, slot, 3), 1.0 / (1.0 + particle), tolerance); // 1/mass
    }
    for (int i = 0; i < NumParticles; i++)
        EXPECT_TRUE(seen[i]) << "particle " << i << " is in no slot of ATOM_ORDER";

    // Zero copy: the view keeps pointing at OpenMM's array, which setPositions rewrites.
    spring.positions[2] = Vec3(0.625, -0.5, 0.25);
    context.setPositions(spring.positions);
    VersionedTensor again = view(context, OMMGRAPH_VIEW_POSITIONS);
    EXPECT_EQ(again->dl_tensor.data, p.data);
    VersionedTensor updated = view(context, OMMGRAPH_VIEW_POSITIONS, OMMGRAPH_VIEW_COPY | OMMGRAPH_VIEW_HOST);
    for (int slot = 0; slot < NumParticles; slot++)
        if (particleOfSlot[slot] == 2)
            EXPECT_NEAR(element(updated->dl_tensor, slot, 0), 0.625, tolerance);

    VersionedTensor box = view(context, OMMGRAPH_VIEW_BOX);
    EXPECT_EQ(box->dl_tensor.device.device_type, kDLCPU);
    EXPECT_EQ(element(box->dl_tensor, 1, 0), 0.5);
    EXPECT_EQ(element(box->dl_tensor, 2, 2), 3.0);
}

TEST_P(CudaDLPackViewsTest, PositionCorrectionExistsOnlyInMixedPrecision) {
    SpringSystem spring(GetParam());
    DLManagedTensorVersioned* tensor = nullptr;
    int status = ommgraph_view_versioned(spring.context.get(), OMMGRAPH_VIEW_POSITION_CORRECTION, 0, nullptr, nullptr, &tensor);
    if (GetParam() == "mixed") {
        ASSERT_EQ(status, OMMGRAPH_OK) << ommgraph_last_error();
        EXPECT_EQ(tensor->dl_tensor.dtype.bits, 32);
        EXPECT_EQ(tensor->dl_tensor.shape[1], 4);
        tensor->deleter(tensor);
    }
    else {
        EXPECT_EQ(status, OMMGRAPH_ERROR_UNAVAILABLE);
        EXPECT_NE(std::string(ommgraph_last_error()).find("POSITION_CORRECTION view"), std::string::npos) << ommgraph_last_error();
    }
}

TEST_P(CudaDLPackViewsTest, DeviceCopyIsIndependentAndFreedByTheDeleter) {
    SpringSystem spring(GetParam());
    VersionedTensor original = view(*spring.context, OMMGRAPH_VIEW_VELOCITIES);
    {
        VersionedTensor copy = view(*spring.context, OMMGRAPH_VIEW_VELOCITIES, OMMGRAPH_VIEW_COPY);
        EXPECT_EQ(copy->dl_tensor.device.device_type, kDLCUDA);
        EXPECT_NE(copy->dl_tensor.data, original->dl_tensor.data);
        EXPECT_EQ(copy->flags, DLPACK_FLAG_BITMASK_IS_COPIED);
        EXPECT_EQ(ommgraph_live_views(), liveAtStart + 2);
    }
    EXPECT_EQ(ommgraph_live_views(), liveAtStart + 1);
}

TEST_P(CudaDLPackViewsTest, ContextLiveViewsCountsDeviceMemoryButNotHostCopies) {
    SpringSystem spring(GetParam());
    auto liveOf = [&](int which) {
        int64_t count = -1;
        EXPECT_EQ(ommgraph_context_live_views(spring.context.get(), which, &count), OMMGRAPH_OK) << ommgraph_last_error();
        return count;
    };
    // The forces view holds the last evaluation's forces; before the first one, OpenMM's buffer is uninitialised
    // memory (compute-sanitizer's initcheck reports a copy of it), so the copy below follows an evaluation.
    spring.context->getState(State::Forces);
    {
        VersionedTensor positions = view(*spring.context, OMMGRAPH_VIEW_POSITIONS);
        VersionedTensor atomOrder = view(*spring.context, OMMGRAPH_VIEW_ATOM_ORDER); // OpenMM's own array on CUDA
        VersionedTensor deviceCopy = view(*spring.context, OMMGRAPH_VIEW_FORCES, OMMGRAPH_VIEW_COPY);
        VersionedTensor hostCopy = view(*spring.context, OMMGRAPH_VIEW_VELOCITIES, OMMGRAPH_VIEW_COPY | OMMGRAPH_VIEW_HOST);
        // A device copy lives in the CUDA context OpenMM made for the Context, which reinitialize() destroys.
        EXPECT_EQ(liveOf(-1), 3);
        EXPECT_EQ(liveOf(OMMGRAPH_VIEW_ATOM_ORDER), 1);
        EXPECT_EQ(liveOf(OMMGRAPH_VIEW_FORCES), 1);
        EXPECT_EQ(liveOf(OMMGRAPH_VIEW_VELOCITIES), 0);
        positions.reset();
        atomOrder.reset();
        deviceCopy.reset();
        EXPECT_EQ(liveOf(-1), 0);
        spring.context->reinitialize(true); // the host copy owns its memory and outlives it
        EXPECT_EQ(hostCopy->dl_tensor.device.device_type, kDLCPU);
        EXPECT_NEAR(element(hostCopy->dl_tensor, 0, 0), spring.velocities[0][0], 1e-6);
    }
    EXPECT_EQ(liveOf(-1), 0);
}

TEST_P(CudaDLPackViewsTest, StreamHandshakeAcceptsTheSpecialStreams) {
    SpringSystem spring(GetParam());
    for (uintptr_t stream : {(uintptr_t) 0, (uintptr_t) 1, (uintptr_t) 2, UINTPTR_MAX})
        EXPECT_EQ(ommgraph_synchronize_stream(spring.context.get(), stream), OMMGRAPH_OK) << ommgraph_last_error();
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaDLPackViewsTest, ::testing::Values("single", "mixed", "double"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

} // namespace
