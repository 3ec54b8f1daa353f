/*
 * The C API of wrappers/include/OpenMMGraphCommunicate.h with a small C
 * engine: one domain whose ghost rows are periodic images of its own rows
 * (as in LAMMPS on one process), so that forward and reverse have an effect
 * without a second domain.
 */
#include "OpenMMGraphCommunicate.h"
#include <cstdio>
#include <cstring>
#include <gtest/gtest.h>
#include <string>
#include <vector>

namespace {

/** The engine's state: ghostOwner[g] is the owned row that ghost row numOwned + g copies. */
struct PeriodicImages {
    std::vector<int64_t> ghostOwner;
    int released = 0;
    int failWithCode = 0;
    const char* failMessage = "simulated failure of the forward exchange";
};

int imagesForward(void* userData, const OMMGraphCommBuffer* buffer, char* message, size_t messageSize) {
    auto* engine = static_cast<PeriodicImages*>(userData);
    if (engine->failWithCode != 0) {
        std::snprintf(message, messageSize, "%s", engine->failMessage);
        return engine->failWithCode;
    }
    if (buffer->numGhost != (int64_t) engine->ghostOwner.size()) {
        std::snprintf(message, messageSize, "expected %zu ghost rows, got %lld", engine->ghostOwner.size(), (long long) buffer->numGhost);
        return 2;
    }
    auto* rows = static_cast<double*>(buffer->data);
    for (int64_t g = 0; g < buffer->numGhost; g++)
        for (int64_t f = 0; f < buffer->numFeatures; f++)
            rows[(buffer->numOwned + g) * buffer->rowStride + f] = rows[engine->ghostOwner[g] * buffer->rowStride + f];
    return 0;
}

int imagesReverse(void* userData, const OMMGraphCommBuffer* buffer, char*, size_t) {
    auto* engine = static_cast<PeriodicImages*>(userData);
    auto* rows = static_cast<double*>(buffer->data);
    for (int64_t g = 0; g < buffer->numGhost; g++)
        for (int64_t f = 0; f < buffer->numFeatures; f++) {
            double& ghost = rows[(buffer->numOwned + g) * buffer->rowStride + f];
            rows[engine->ghostOwner[g] * buffer->rowStride + f] += ghost;
            ghost = 0;
        }
    return 0;
}

void imagesRelease(void* userData) {
    static_cast<PeriodicImages*>(userData)->released++;
}

OMMGraphCommunicator communicatorOf(PeriodicImages& engine) {
    OMMGraphCommunicator communicator{};
    communicator.version = OMMGRAPH_COMMUNICATOR_VERSION;
    communicator.deviceTypes = OMMGRAPH_COMM_SUPPORTS_CPU;
    communicator.name = "periodic images";
    communicator.userData = &engine;
    communicator.forward = imagesForward;
    communicator.reverse = imagesReverse;
    communicator.release = imagesRelease;
    return communicator;
}

OMMGraphCommBuffer hostBuffer(std::vector<double>& rows, int64_t numOwned, int64_t numFeatures, int64_t rowStride) {
    OMMGraphCommBuffer buffer{};
    buffer.data = rows.data();
    buffer.dtype = OMMGRAPH_COMM_FLOAT64;
    buffer.deviceType = OMMGRAPH_COMM_DEVICE_CPU;
    buffer.numOwned = numOwned;
    buffer.numGhost = (int64_t) rows.size() / rowStride - numOwned;
    buffer.numFeatures = numFeatures;
    buffer.rowStride = rowStride;
    return buffer;
}

std::string lastError() {
    return ommgraph_communicator_last_error();
}

} // namespace

TEST(CommunicateCApi, ForwardCopiesOwnersIntoGhostsAndReverseIsItsTranspose) {
    PeriodicImages engine;
    engine.ghostOwner = {2, 0};
    OMMGraphCommunicator communicator = communicatorOf(engine);
    int64_t handle = 0;
    ASSERT_EQ(OMMGRAPH_COMM_OK, ommgraph_communicator_register(&communicator, &handle)) << lastError();
    EXPECT_GT(handle, 0);
    // 3 owned + 2 ghost rows, 2 features, a padding element per row (stride 3) that must stay untouched.
    std::vector<double> rows = {1, 2, -1, 3, 4, -1, 5, 6, -1, 0, 0, -1, 0, 0, -1};
    OMMGraphCommBuffer buffer = hostBuffer(rows, 3, 2, 3);
    ASSERT_EQ(OMMGRAPH_COMM_OK, ommgraph_communicate_forward(handle, &buffer)) << lastError();
    EXPECT_EQ((std::vector<double>{1, 2, -1, 3, 4, -1, 5, 6, -1, 5, 6, -1, 1, 2, -1}), rows);
    // <reverse(y), x> == <y, forward(x)> for the transpose: check on the definition directly.
    std::vector<double> gradient = {1, 1, -1, 1, 1, -1, 1, 1, -1, 10, 20, -1, 100, 200, -1};
    OMMGraphCommBuffer gradientBuffer = hostBuffer(gradient, 3, 2, 3);
    ASSERT_EQ(OMMGRAPH_COMM_OK, ommgraph_communicate_reverse(handle, &gradientBuffer)) << lastError();
    EXPECT_EQ((std::vector<double>{101, 201, -1, 1, 1, -1, 11, 21, -1, 0, 0, -1, 0, 0, -1}), gradient);
    EXPECT_EQ(0, engine.released);
    ASSERT_EQ(OMMGRAPH_COMM_OK, ommgraph_communicator_unregister(handle));
    EXPECT_EQ(1, engine.released);
}

TEST(CommunicateCApi, HandleZeroDoesNothing) {
    std::vector<double> rows = {1, 2, 3, 4};
    OMMGraphCommBuffer buffer = hostBuffer(rows, 1, 2, 2);
    EXPECT_EQ(OMMGRAPH_COMM_OK, ommgraph_communicate_forward(0, &buffer));
    EXPECT_EQ(OMMGRAPH_COMM_OK, ommgraph_communicate_reverse(0, &buffer));
    EXPECT_EQ((std::vector<double>{1, 2, 3, 4}), rows);
    EXPECT_EQ(1, ommgraph_communicator_is_registered(0));
}

TEST(CommunicateCApi, StaleAndNegativeHandlesAreErrors) {
    PeriodicImages engine;
    OMMGraphCommunicator communicator = communicatorOf(engine);
    int64_t handle = 0;
    ASSERT_EQ(OMMGRAPH_COMM_OK, ommgraph_communicator_register(&communicator, &handle));
    ASSERT_EQ(OMMGRAPH_COMM_OK, ommgraph_communicator_unregister(handle));
    std::vector<double> rows = {1, 2};
    OMMGraphCommBuffer buffer = hostBuffer(rows, 1, 2, 2);
    EXPECT_EQ(OMMGRAPH_COMM_ERROR_HANDLE, ommgraph_communicate_forward(handle, &buffer));
    EXPECT_NE(std::string::npos, lastError().find("handle " + std::to_string(handle) + " is not registered")) << lastError();
    EXPECT_EQ(OMMGRAPH_COMM_ERROR_HANDLE, ommgraph_communicator_unregister(handle));
    EXPECT_EQ(OMMGRAPH_COMM_ERROR_HANDLE, ommgraph_communicate_reverse(-3, &buffer));
    EXPECT_NE(std::string::npos, lastError().find("negative")) << lastError();
    // A new registration never reuses the old number.
    int64_t next = 0;
    ASSERT_EQ(OMMGRAPH_COMM_OK, ommgraph_communicator_register(&communicator, &next));
    EXPECT_GT(next, handle);
    ASSERT_EQ(OMMGRAPH_COMM_OK, ommgraph_communicator_unregister(next));
}

TEST(CommunicateCApi, BadRegistrationsAreRefusedWithAMessage) {
    PeriodicImages engine;
    int64_t handle = 0;
    OMMGraphCommunicator communicator = communicatorOf(engine);
    communicator.version = 99;
    EXPECT_EQ(OMMGRAPH_COMM_ERROR_ARGUMENT, ommgraph_communicator_register(&communicator, &handle));
    EXPECT_NE(std::string::npos, lastError().find("version is 99")) << lastError();
    communicator = communicatorOf(engine);
    communicator.reverse = nullptr;
    EXPECT_EQ(OMMGRAPH_COMM_ERROR_ARGUMENT, ommgraph_communicator_register(&communicator, &handle));
    EXPECT_NE(std::string::npos, lastError().find("reverse is NULL")) << lastError();
    communicator = communicatorOf(engine);
    communicator.deviceTypes = 0;
    EXPECT_EQ(OMMGRAPH_COMM_ERROR_ARGUMENT, ommgraph_communicator_register(&communicator, &handle));
    EXPECT_EQ(OMMGRAPH_COMM_ERROR_ARGUMENT, ommgraph_communicator_register(nullptr, &handle));
    EXPECT_EQ(0, engine.released);
}

TEST(CommunicateCApi, BadBuffersAndEngineErrorsAreReported) {
    PeriodicImages engine;
    engine.ghostOwner = {0};
    OMMGraphCommunicator communicator = communicatorOf(engine);
    int64_t handle = 0;
    ASSERT_EQ(OMMGRAPH_COMM_OK, ommgraph_communicator_register(&communicator, &handle));
    std::vector<double> rows = {1, 2, 0, 0};
    OMMGraphCommBuffer buffer = hostBuffer(rows, 1, 2, 2);

    OMMGraphCommBuffer bad = buffer;
    bad.dtype = 7;
    EXPECT_EQ(OMMGRAPH_COMM_ERROR_ARGUMENT, ommgraph_communicate_forward(handle, &bad));
    EXPECT_NE(std::string::npos, lastError().find("dtype 7")) << lastError();
    bad = buffer;
    bad.rowStride = 1;
    EXPECT_EQ(OMMGRAPH_COMM_ERROR_ARGUMENT, ommgraph_communicate_forward(handle, &bad));
    EXPECT_NE(std::string::npos, lastError().find("rowStride 1")) << lastError();
    bad = buffer;
    bad.numGhost = -1;
    EXPECT_EQ(OMMGRAPH_COMM_ERROR_ARGUMENT, ommgraph_communicate_forward(handle, &bad));
    bad = buffer;
    bad.data = nullptr;
    EXPECT_EQ(OMMGRAPH_COMM_ERROR_ARGUMENT, ommgraph_communicate_forward(handle, &bad));
    EXPECT_EQ(OMMGRAPH_COMM_ERROR_ARGUMENT, ommgraph_communicate_forward(handle, nullptr));
    bad = buffer;
    bad.deviceType = OMMGRAPH_COMM_DEVICE_CUDA;
    EXPECT_EQ(OMMGRAPH_COMM_ERROR_UNSUPPORTED, ommgraph_communicate_forward(handle, &bad));
    EXPECT_NE(std::string::npos, lastError().find("does not exchange CUDA device buffers")) << lastError();

    // The engine's own checks and failures reach the caller with its message and code.
    OMMGraphCommBuffer tooManyGhosts = hostBuffer(rows, 0, 2, 2);
    EXPECT_EQ(OMMGRAPH_COMM_ERROR_ENGINE, ommgraph_communicate_forward(handle, &tooManyGhosts));
    EXPECT_NE(std::string::npos, lastError().find("'periodic images'")) << lastError();
    EXPECT_NE(std::string::npos, lastError().find("expected 1 ghost rows, got 2")) << lastError();
    engine.failWithCode = 42;
    EXPECT_EQ(OMMGRAPH_COMM_ERROR_ENGINE, ommgraph_communicate_forward(handle, &buffer));
    EXPECT_NE(std::string::npos, lastError().find("code 42")) << lastError();
    EXPECT_NE(std::string::npos, lastError().find("simulated failure")) << lastError();
    EXPECT_EQ((std::vector<double>{1, 2, 0, 0}), rows);
    // A message that is not valid UTF-8 (a character cut by the engine's buffer, an overlong form, a surrogate, a code
    // point beyond U+10FFFF) reaches the caller with '?' for each bad byte: Python decodes it as UTF-8.
    engine.failMessage = "caf\xC3\xA9 \xC3 \xC0\x80 \xED\xA0\x80 \xF4\x90\x80\x80 \xE2\x82\xAC\xF0\x9F\x98\x80 \xE2\x82";
    EXPECT_EQ(OMMGRAPH_COMM_ERROR_ENGINE, ommgraph_communicate_forward(handle, &buffer));
    const std::string expected = "caf\xC3\xA9 ? ?? ??? ???? \xE2\x82\xAC\xF0\x9F\x98\x80 ??";
    EXPECT_EQ(expected, lastError().substr(lastError().size() - expected.size())) << lastError();
    // A success clears the message.
    engine.failWithCode = 0;
    EXPECT_EQ(OMMGRAPH_COMM_OK, ommgraph_communicate_forward(handle, &buffer));
    EXPECT_EQ("", lastError());
    ASSERT_EQ(OMMGRAPH_COMM_OK, ommgraph_communicator_unregister(handle));
}
