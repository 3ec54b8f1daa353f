/**
 * The DLPack C API (wrappers/include/OpenMMGraphDLPack.h) on the host
 * platforms: every view's layout and values against Context::getState, zero
 * copy (writes reach the Context), copies, the deleter contract, the legacy
 * variant and the errors.  Run on the Reference and the CPU platform.
 */
#include "OpenMMGraphDLPack.h"
#include "openmm/Context.h"
#include "openmm/CustomExternalForce.h"
#include "openmm/Platform.h"
#include "openmm/State.h"
#include "openmm/System.h"
#include "openmm/VerletIntegrator.h"
#include <cstring>
#include <gtest/gtest.h>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace OpenMM;

namespace {

const int NumParticles = 5;
const double SpringConstant = 3.5; // kJ/mol/nm^2: U = k |r|^2, F = -2 k r

/** Counts the calls of releaseOwner and remembers the owner it was given. */
struct OwnerRecord {
    int releases = 0;
    void* lastOwner = nullptr;
};

void recordRelease(void* owner) {
    OwnerRecord* record = static_cast<OwnerRecord*>(owner);
    record->releases++;
    record->lastOwner = owner;
}

/** A versioned tensor that runs its deleter when it goes out of scope (unless released). */
struct VersionedDeleter {
    void operator()(DLManagedTensorVersioned* tensor) const {
        tensor->deleter(tensor);
    }
};
using VersionedTensor = std::unique_ptr<DLManagedTensorVersioned, VersionedDeleter>;

class DLPackViewsTest : public ::testing::TestWithParam<std::string> {
protected:
    static void SetUpTestSuite() {
        // The CPU platform is a plugin of OpenMM; the Reference platform is built in.
        try {
            Platform::getPlatformByName("CPU");
        }
        catch (...) {
            Platform::loadPluginLibrary(std::string(GRAPH_OPENMM_PLUGIN_DIR) + "/libOpenMMCPU.so");
        }
    }

    void SetUp() override {
        liveAtStart = ommgraph_live_views();
        system.reset(new System());
        CustomExternalForce* force = new CustomExternalForce("k*(x^2+y^2+z^2)");
        force->addGlobalParameter("k", SpringConstant);
        for (int i = 0; i < NumParticles; i++) {
            system->addParticle(1.0 + i);
            force->addParticle(i);
        }
        system->addForce(force);
        system->setDefaultPeriodicBoxVectors(Vec3(2.0, 0, 0), Vec3(0.5, 2.5, 0), Vec3(-0.3, 0.4, 3.0));
        integrator.reset(new VerletIntegrator(0.001));
        context.reset(new Context(*system, *integrator, Platform::getPlatformByName(GetParam())));
        for (int i = 0; i < NumParticles; i++) {
            positions.push_back(Vec3(0.1 * i + 0.05, 0.2 - 0.03 * i, 0.3 + 0.07 * i));
            velocities.push_back(Vec3(-0.4 + 0.1 * i, 0.25 * i, 1.5 - 0.2 * i));
        }
        context->setPositions(positions);
        context->setVelocities(velocities);
    }

    void TearDown() override {
        EXPECT_EQ(ommgraph_live_views(), liveAtStart) << "a view was not deleted, or deleted twice";
    }

    VersionedTensor view(int which, unsigned flags = 0) {
        DLManagedTensorVersioned* tensor = nullptr;
        int status = ommgraph_view_versioned(context.get(), which, flags, nullptr, nullptr, &tensor);
        EXPECT_EQ(status, OMMGRAPH_OK) << ommgraph_last_error();
        EXPECT_NE(tensor, nullptr);
        EXPECT_STREQ(ommgraph_last_error(), "");
        return VersionedTensor(tensor);
    }

    /** Checks the layout every host view shares and returns the data as doubles. */
    static void expectHostLayout(const DLTensor& tensor, std::vector<int64_t> shape, uint8_t code, uint8_t bits) {
        EXPECT_EQ(tensor.device.device_type, kDLCPU);
        EXPECT_EQ(tensor.device.device_id, 0);
        ASSERT_EQ(tensor.ndim, (int) shape.size());
        EXPECT_EQ(tensor.dtype.code, code);
        EXPECT_EQ(tensor.dtype.bits, bits);
        EXPECT_EQ(tensor.dtype.lanes, 1);
        EXPECT_EQ(tensor.byte_offset, 0u);
        ASSERT_NE(tensor.shape, nullptr);
        ASSERT_NE(tensor.strides, nullptr);
        int64_t stride = 1;
        for (int i = tensor.ndim - 1; i >= 0; i--) {
            EXPECT_EQ(tensor.shape[i], shape[i]) << "dimension " << i;
            EXPECT_EQ(tensor.strides[i], stride) << "dimension " << i;
            stride *= shape[i];
        }
        EXPECT_NE(tensor.data, nullptr);
    }

    static void expectRowsEqual(const DLTensor& tensor, const std::vector<Vec3>& expected) {
        const double* data = static_cast<const double*>(tensor.data);
        for (size_t i = 0; i < expected.size(); i++)
            for (int j = 0; j < 3; j++)
                EXPECT_EQ(data[3 * i + j], expected[i][j]) << "row " << i << " column " << j;
    }

    int64_t liveAtStart = 0;
    std::unique_ptr<System> system;
    std::unique_ptr<VerletIntegrator> integrator;
    std::unique_ptr<Context> context;
    std::vector<Vec3> positions, velocities;
};

TEST_P(DLPackViewsTest, ViewDeviceIsTheHost) {
    int32_t deviceType = -1, deviceId = -1;
    ASSERT_EQ(ommgraph_view_device(context.get(), &deviceType, &deviceId), OMMGRAPH_OK) << ommgraph_last_error();
    EXPECT_EQ(deviceType, kDLCPU);
    EXPECT_EQ(deviceId, 0);
}

TEST_P(DLPackViewsTest, PositionsViewIsOpenMMsOwnMemory) {
    VersionedTensor tensor = view(OMMGRAPH_VIEW_POSITIONS);
    EXPECT_EQ(tensor->version.major, 1u);
    EXPECT_EQ(tensor->version.minor, 1u);
    EXPECT_EQ(tensor->flags, 0u);
    EXPECT_NE(tensor->manager_ctx, nullptr);
    expectHostLayout(tensor->dl_tensor, {NumParticles, 3}, kDLFloat, 64);
    expectRowsEqual(tensor->dl_tensor, context->getState(State::Positions).getPositions());

    // Zero copy: a write through the view is what the Context reports.
    double* data = static_cast<double*>(tensor->dl_tensor.data);
    data[3 * 2 + 1] = 0.875;
    data[3 * 4 + 0] = -0.125;
    std::vector<Vec3> after = context->getState(State::Positions).getPositions();
    EXPECT_EQ(after[2][1], 0.875);
    EXPECT_EQ(after[4][0], -0.125);
    EXPECT_EQ(after[3][2], positions[3][2]);

    // ... and context->setPositions is what the view shows.
    positions[1] = Vec3(0.625, -0.5, 0.25);
    context->setPositions(positions);
    EXPECT_EQ(data[3 * 1 + 0], 0.625);
    EXPECT_EQ(data[3 * 1 + 1], -0.5);
    EXPECT_EQ(data[3 * 1 + 2], 0.25);
}

TEST_P(DLPackViewsTest, VelocitiesViewMatchesTheState) {
    VersionedTensor tensor = view(OMMGRAPH_VIEW_VELOCITIES);
    expectHostLayout(tensor->dl_tensor, {NumParticles, 3}, kDLFloat, 64);
    expectRowsEqual(tensor->dl_tensor, context->getState(State::Velocities).getVelocities());
    expectRowsEqual(tensor->dl_tensor, velocities);
    static_cast<double*>(tensor->dl_tensor.data)[3 * 3 + 2] = 9.5;
    EXPECT_EQ(context->getState(State::Velocities).getVelocities()[3][2], 9.5);
}

TEST_P(DLPackViewsTest, ForcesViewHoldsTheLastEvaluatedForces) {
    std::vector<Vec3> forces = context->getState(State::Forces).getForces();
    VersionedTensor tensor = view(OMMGRAPH_VIEW_FORCES);
    expectHostLayout(tensor->dl_tensor, {NumParticles, 3}, kDLFloat, 64);
    const double* data = static_cast<const double*>(tensor->dl_tensor.data);
    for (int i = 0; i < NumParticles; i++)
        for (int j = 0; j < 3; j++) {
            EXPECT_EQ(data[3 * i + j], forces[i][j]);
            EXPECT_NEAR(data[3 * i + j], -2 * SpringConstant * positions[i][j], 1e-5) << "particle " << i;
        }
}

TEST_P(DLPackViewsTest, AtomOrderIsAReadOnlyIdentityCopy) {
    VersionedTensor tensor = view(OMMGRAPH_VIEW_ATOM_ORDER);
    expectHostLayout(tensor->dl_tensor, {NumParticles}, kDLInt, 32);
    EXPECT_EQ(tensor->flags, DLPACK_FLAG_BITMASK_READ_ONLY | DLPACK_FLAG_BITMASK_IS_COPIED);
    const int32_t* order = static_cast<const int32_t*>(tensor->dl_tensor.data);
    for (int i = 0; i < NumParticles; i++)
        EXPECT_EQ(order[i], i);
}

TEST_P(DLPackViewsTest, BoxIsAReadOnlyCopyOfTheCurrentBox) {
    const Vec3 a(2.25, 0, 0), b(0.75, 2.0, 0), c(-0.5, 0.25, 2.75);
    context->setPeriodicBoxVectors(a, b, c);
    VersionedTensor tensor = view(OMMGRAPH_VIEW_BOX);
    expectHostLayout(tensor->dl_tensor, {3, 3}, kDLFloat, 64);
    EXPECT_EQ(tensor->flags, DLPACK_FLAG_BITMASK_READ_ONLY | DLPACK_FLAG_BITMASK_IS_COPIED);
    Vec3 stateBox[3];
    context->getState(State::Positions).getPeriodicBoxVectors(stateBox[0], stateBox[1], stateBox[2]);
    expectRowsEqual(tensor->dl_tensor, {stateBox[0], stateBox[1], stateBox[2]});
    expectRowsEqual(tensor->dl_tensor, {a, b, c});
    // A copy: writing into it leaves the Context's box alone.
    static_cast<double*>(tensor->dl_tensor.data)[0] = 7.0;
    Vec3 after[3];
    context->getState(State::Positions).getPeriodicBoxVectors(after[0], after[1], after[2]);
    EXPECT_EQ(after[0][0], 2.25);
}

TEST_P(DLPackViewsTest, ReadOnlyFlagIsSetWhenAsked) {
    VersionedTensor tensor = view(OMMGRAPH_VIEW_POSITIONS, OMMGRAPH_VIEW_READ_ONLY);
    EXPECT_EQ(tensor->flags, DLPACK_FLAG_BITMASK_READ_ONLY);
    VersionedTensor writable = view(OMMGRAPH_VIEW_POSITIONS);
    EXPECT_EQ(tensor->dl_tensor.data, writable->dl_tensor.data);
}

TEST_P(DLPackViewsTest, CopyOwnsIndependentMemory) {
    for (unsigned flags : {OMMGRAPH_VIEW_COPY, OMMGRAPH_VIEW_COPY | OMMGRAPH_VIEW_HOST}) {
        context->setVelocities(velocities); // undo the write through the view of the previous round
        VersionedTensor original = view(OMMGRAPH_VIEW_VELOCITIES);
        VersionedTensor copy = view(OMMGRAPH_VIEW_VELOCITIES, flags);
        EXPECT_EQ(copy->flags, DLPACK_FLAG_BITMASK_IS_COPIED);
        expectHostLayout(copy->dl_tensor, {NumParticles, 3}, kDLFloat, 64);
        EXPECT_NE(copy->dl_tensor.data, original->dl_tensor.data);
        expectRowsEqual(copy->dl_tensor, velocities);
        static_cast<double*>(copy->dl_tensor.data)[0] = 123.0;
        EXPECT_EQ(context->getState(State::Velocities).getVelocities()[0][0], velocities[0][0]);
        static_cast<double*>(original->dl_tensor.data)[1] = -4.0;
        EXPECT_EQ(static_cast<double*>(copy->dl_tensor.data)[1], velocities[0][1]);
    }
    VersionedTensor readOnlyCopy = view(OMMGRAPH_VIEW_POSITIONS, OMMGRAPH_VIEW_COPY | OMMGRAPH_VIEW_READ_ONLY);
    EXPECT_EQ(readOnlyCopy->flags, DLPACK_FLAG_BITMASK_READ_ONLY | DLPACK_FLAG_BITMASK_IS_COPIED);
}

TEST_P(DLPackViewsTest, DeleterReleasesTheOwnerExactlyOnce) {
    for (int which : {OMMGRAPH_VIEW_POSITIONS, OMMGRAPH_VIEW_ATOM_ORDER, OMMGRAPH_VIEW_BOX}) {
        for (unsigned flags : {0u, OMMGRAPH_VIEW_COPY}) {
            OwnerRecord record;
            DLManagedTensorVersioned* tensor = nullptr;
            ASSERT_EQ(ommgraph_view_versioned(context.get(), which, flags, &record, recordRelease, &tensor), OMMGRAPH_OK)
                << ommgraph_last_error();
            EXPECT_EQ(ommgraph_live_views(), liveAtStart + 1);
            EXPECT_EQ(record.releases, 0);
            tensor->deleter(tensor);
            EXPECT_EQ(record.releases, 1);
            EXPECT_EQ(record.lastOwner, &record);
            EXPECT_EQ(ommgraph_live_views(), liveAtStart);
        }
    }
}

TEST_P(DLPackViewsTest, ContextLiveViewsCountsOnlyZeroCopyTensorsOfThatContext) {
    auto liveOf = [](void* context, int which) {
        int64_t count = -1;
        EXPECT_EQ(ommgraph_context_live_views(context, which, &count), OMMGRAPH_OK) << ommgraph_last_error();
        return count;
    };
    EXPECT_EQ(liveOf(context.get(), -1), 0);
    VersionedTensor positionsView = view(OMMGRAPH_VIEW_POSITIONS);
    VersionedTensor forcesView = view(OMMGRAPH_VIEW_FORCES, OMMGRAPH_VIEW_READ_ONLY);
    VersionedTensor positionsCopy = view(OMMGRAPH_VIEW_POSITIONS, OMMGRAPH_VIEW_COPY);
    VersionedTensor box = view(OMMGRAPH_VIEW_BOX);
    VersionedTensor atomOrder = view(OMMGRAPH_VIEW_ATOM_ORDER); // a copy on host platforms
    DLManagedTensor* legacy = nullptr;
    ASSERT_EQ(ommgraph_view_legacy(context.get(), OMMGRAPH_VIEW_FORCES, 0, nullptr, nullptr, &legacy), OMMGRAPH_OK);
    EXPECT_EQ(liveOf(context.get(), -1), 3);
    EXPECT_EQ(liveOf(context.get(), OMMGRAPH_VIEW_POSITIONS), 1);
    EXPECT_EQ(liveOf(context.get(), OMMGRAPH_VIEW_FORCES), 2);
    EXPECT_EQ(liveOf(context.get(), OMMGRAPH_VIEW_BOX), 0);
    EXPECT_EQ(liveOf(context.get(), OMMGRAPH_VIEW_ATOM_ORDER), 0);
    VerletIntegrator otherIntegrator(0.001);
    Context other(*system, otherIntegrator, Platform::getPlatformByName(GetParam()));
    EXPECT_EQ(liveOf(&other, -1), 0) << "another Context's count";
    legacy->deleter(legacy);
    EXPECT_EQ(liveOf(context.get(), OMMGRAPH_VIEW_FORCES), 1);
    positionsView.reset();
    forcesView.reset();
    EXPECT_EQ(liveOf(context.get(), -1), 0);
    context->reinitialize(true); // nothing points into the Context: the copies stay valid
    EXPECT_EQ(static_cast<const double*>(positionsCopy->dl_tensor.data)[0], positions[0][0]);

    int64_t count = 0;
    EXPECT_EQ(ommgraph_context_live_views(context.get(), 6, &count), OMMGRAPH_ERROR_ARGUMENT);
    EXPECT_NE(std::string(ommgraph_last_error()).find("unknown view number 6"), std::string::npos) << ommgraph_last_error();
    EXPECT_EQ(ommgraph_context_live_views(nullptr, -1, &count), OMMGRAPH_ERROR_ARGUMENT);
    EXPECT_EQ(ommgraph_context_live_views(context.get(), -1, nullptr), OMMGRAPH_ERROR_ARGUMENT);
    EXPECT_NE(std::string(ommgraph_last_error()).find("must not be NULL"), std::string::npos) << ommgraph_last_error();
}

TEST_P(DLPackViewsTest, LegacyTensorDescribesTheSameMemory) {
    VersionedTensor versioned = view(OMMGRAPH_VIEW_POSITIONS);
    OwnerRecord record;
    DLManagedTensor* legacy = nullptr;
    ASSERT_EQ(ommgraph_view_legacy(context.get(), OMMGRAPH_VIEW_POSITIONS, 0, &record, recordRelease, &legacy), OMMGRAPH_OK)
        << ommgraph_last_error();
    ASSERT_NE(legacy, nullptr);
    EXPECT_NE(legacy->manager_ctx, nullptr);
    expectHostLayout(legacy->dl_tensor, {NumParticles, 3}, kDLFloat, 64);
    EXPECT_EQ(legacy->dl_tensor.data, versioned->dl_tensor.data);
    EXPECT_NE(legacy->dl_tensor.shape, versioned->dl_tensor.shape) << "each tensor owns its shape";
    expectRowsEqual(legacy->dl_tensor, positions);
    EXPECT_EQ(ommgraph_live_views(), liveAtStart + 2);
    legacy->deleter(legacy);
    EXPECT_EQ(record.releases, 1);
    EXPECT_EQ(ommgraph_live_views(), liveAtStart + 1);

    DLManagedTensor* box = nullptr;
    ASSERT_EQ(ommgraph_view_legacy(context.get(), OMMGRAPH_VIEW_BOX, OMMGRAPH_VIEW_COPY, nullptr, nullptr, &box), OMMGRAPH_OK);
    expectHostLayout(box->dl_tensor, {3, 3}, kDLFloat, 64);
    EXPECT_EQ(static_cast<double*>(box->dl_tensor.data)[4], 2.5);
    box->deleter(box);
}

TEST_P(DLPackViewsTest, ErrorsSayWhatIsWrong) {
    OwnerRecord record;
    DLManagedTensorVersioned* tensor = reinterpret_cast<DLManagedTensorVersioned*>(&record); // must be reset to NULL
    auto expectError = [&](int status, int expected, const std::string& mention) {
        EXPECT_EQ(status, expected);
        std::string message = ommgraph_last_error();
        EXPECT_EQ(message.rfind("openmm-graph DLPack:", 0), 0u) << message;
        EXPECT_NE(message.find(mention), std::string::npos) << message << " should mention " << mention;
    };
    expectError(ommgraph_view_versioned(nullptr, OMMGRAPH_VIEW_POSITIONS, 0, &record, recordRelease, &tensor), OMMGRAPH_ERROR_ARGUMENT,
                "context is NULL");
    EXPECT_EQ(tensor, nullptr);
    expectError(ommgraph_view_versioned(context.get(), OMMGRAPH_VIEW_POSITIONS, 0, nullptr, nullptr, nullptr), OMMGRAPH_ERROR_ARGUMENT,
                "out is NULL");
    expectError(ommgraph_view_versioned(context.get(), 6, 0, nullptr, nullptr, &tensor), OMMGRAPH_ERROR_ARGUMENT, "view 6");
    expectError(ommgraph_view_versioned(context.get(), -1, 0, nullptr, nullptr, &tensor), OMMGRAPH_ERROR_ARGUMENT, "unknown view");
    expectError(ommgraph_view_versioned(context.get(), OMMGRAPH_VIEW_POSITIONS, 8u, nullptr, nullptr, &tensor), OMMGRAPH_ERROR_ARGUMENT,
                "unknown flags 0x8");
    expectError(ommgraph_view_versioned(context.get(), OMMGRAPH_VIEW_POSITIONS, OMMGRAPH_VIEW_HOST, nullptr, nullptr, &tensor),
                OMMGRAPH_ERROR_ARGUMENT, "OMMGRAPH_VIEW_HOST needs OMMGRAPH_VIEW_COPY");
    expectError(ommgraph_view_versioned(context.get(), OMMGRAPH_VIEW_POSITION_CORRECTION, 0, &record, recordRelease, &tensor),
                OMMGRAPH_ERROR_UNAVAILABLE, "POSITION_CORRECTION view");
    EXPECT_NE(std::string(ommgraph_last_error()).find(GetParam() + " platform"), std::string::npos) << ommgraph_last_error();
    DLManagedTensor* legacy = reinterpret_cast<DLManagedTensor*>(&record);
    expectError(ommgraph_view_legacy(context.get(), OMMGRAPH_VIEW_POSITION_CORRECTION, 0, &record, recordRelease, &legacy),
                OMMGRAPH_ERROR_UNAVAILABLE, "POSITION_CORRECTION view");
    EXPECT_EQ(legacy, nullptr);
    int32_t deviceType, deviceId;
    expectError(ommgraph_view_device(nullptr, &deviceType, &deviceId), OMMGRAPH_ERROR_ARGUMENT, "ommgraph_view_device");
    expectError(ommgraph_view_device(context.get(), nullptr, &deviceId), OMMGRAPH_ERROR_ARGUMENT, "must not be NULL");
    expectError(ommgraph_synchronize_stream(nullptr, 0), OMMGRAPH_ERROR_ARGUMENT, "ommgraph_synchronize_stream");
    // A failed call takes nothing: the owner is not released and no view is alive.
    EXPECT_EQ(record.releases, 0);
    EXPECT_EQ(ommgraph_live_views(), liveAtStart);
    // The next successful call clears the message.
    VersionedTensor ok = view(OMMGRAPH_VIEW_BOX);
    EXPECT_STREQ(ommgraph_last_error(), "");
}

TEST_P(DLPackViewsTest, LastErrorBelongsToItsThread) {
    DLManagedTensorVersioned* tensor = nullptr;
    ASSERT_EQ(ommgraph_view_versioned(context.get(), 42, 0, nullptr, nullptr, &tensor), OMMGRAPH_ERROR_ARGUMENT);
    std::string other = "unset";
    std::thread([&] { other = ommgraph_last_error(); }).join();
    EXPECT_EQ(other, "");
    EXPECT_NE(std::string(ommgraph_last_error()).find("view 42"), std::string::npos);
}

TEST_P(DLPackViewsTest, SynchronizeStreamIsANoOpOnTheHost) {
    for (uintptr_t stream : {(uintptr_t) 0, (uintptr_t) 1, (uintptr_t) 2, (uintptr_t) -1}) {
        EXPECT_EQ(ommgraph_synchronize_stream(context.get(), stream), OMMGRAPH_OK) << ommgraph_last_error();
        EXPECT_STREQ(ommgraph_last_error(), "");
    }
}

TEST_P(DLPackViewsTest, PythonHelpersDoNothingWithoutPython) {
    // This test program has no Python interpreter: the helpers must find none and touch nothing.
    int notAPythonObject = 7;
    ommgraph_python_release(&notAPythonObject);
    ommgraph_capsule_destructor(&notAPythonObject);
    ommgraph_python_release(nullptr);
    ommgraph_capsule_destructor(nullptr);
    EXPECT_EQ(notAPythonObject, 7);
}

TEST(DLPackBorrowTensor, RefusesWhatItCannotDescribe) {
    double data[6] = {0, 1, 2, 3, 4, 5};
    int64_t shape[2] = {2, 3};
    DLTensor tensor{};
    tensor.data = data;
    tensor.device = {kDLCPU, 0};
    tensor.ndim = 2;
    tensor.dtype = {kDLFloat, 64, 1};
    tensor.shape = shape;
    void* out = nullptr;
    ASSERT_EQ(ommgraph_borrow_tensor(&tensor, 1, 0, &out), OMMGRAPH_OK) << ommgraph_last_error();
    DLManagedTensorVersioned* borrowed = static_cast<DLManagedTensorVersioned*>(out);
    EXPECT_EQ(borrowed->dl_tensor.data, data);
    EXPECT_EQ(borrowed->dl_tensor.shape[1], 3);
    EXPECT_EQ(borrowed->dl_tensor.strides[0], 3);
    borrowed->deleter(borrowed);
    // A NULL shape, more than one lane (it would come back as one, a quarter of the elements) and negative extents.
    auto expectRefused = [&](const std::string& words) {
        out = nullptr;
        EXPECT_EQ(ommgraph_borrow_tensor(&tensor, 1, 0, &out), OMMGRAPH_ERROR_ARGUMENT) << words;
        EXPECT_EQ(out, nullptr);
        EXPECT_NE(std::string(ommgraph_last_error()).find(words), std::string::npos) << ommgraph_last_error();
    };
    tensor.shape = nullptr;
    expectRefused("shape must not be NULL");
    tensor.shape = shape;
    tensor.dtype.lanes = 4;
    expectRefused("4 lanes");
    tensor.dtype.lanes = 1;
    shape[0] = -5;
    expectRefused("shape[0] is negative (-5)");
    shape[0] = 2;
    tensor.byte_offset = 8;
    expectRefused("without a byte_offset can be borrowed (found byte_offset 8)");
    tensor.byte_offset = 0;
    tensor.ndim = 3;
    expectRefused("1 or 2 dimensions can be borrowed (found ndim 3)");
}

INSTANTIATE_TEST_SUITE_P(HostPlatforms, DLPackViewsTest, ::testing::Values("Reference", "CPU"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

} // namespace
