/*
 * openmmgraph::communicate from LibTorch (C++), as an application would use
 * it: the operator library is loaded at run time with dlopen, the engine is a
 * C engine registered through OpenMMGraphCommunicate.h (one domain whose
 * ghost rows are periodic images of its own rows), the op is called through
 * the dispatcher, through autograd and from TorchScript compiled in C++
 * (the name openmmgraph resolved to the builtin operator namespace, as the
 * loader of a saved TorchScript module resolves ops.openmmgraph).
 */
#include "OpenMMGraphCommunicate.h"
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <cstdio>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/jit/api/compilation_unit.h>
#include <torch/csrc/jit/frontend/resolver.h>
#include <torch/csrc/jit/frontend/sugared_value.h>
#include <vector>

namespace {

/** ghostOwner[g]: the owned row that ghost row numOwned + g is an image of. */
struct PeriodicImages {
    std::vector<int64_t> ghostOwner;
    bool fail = false;
};

template <typename Real> void exchange(const PeriodicImages& engine, const OMMGraphCommBuffer& buffer, bool isForward) {
    auto* rows = static_cast<Real*>(buffer.data);
    for (int64_t g = 0; g < buffer.numGhost; g++)
        for (int64_t f = 0; f < buffer.numFeatures; f++) {
            Real& ghost = rows[(buffer.numOwned + g) * buffer.rowStride + f];
            Real& owner = rows[engine.ghostOwner[g] * buffer.rowStride + f];
            if (isForward)
                ghost = owner;
            else {
                owner += ghost;
                ghost = 0;
            }
        }
}

int run(void* userData, const OMMGraphCommBuffer* buffer, char* message, size_t messageSize, bool isForward) {
    const auto& engine = *static_cast<PeriodicImages*>(userData);
    if (engine.fail || buffer->numGhost != (int64_t) engine.ghostOwner.size()) {
        std::snprintf(message, messageSize, "this domain has %zu ghost rows, the buffer %lld", engine.ghostOwner.size(),
                      (long long) buffer->numGhost);
        return 1;
    }
    if (buffer->dtype == OMMGRAPH_COMM_FLOAT64)
        exchange<double>(engine, *buffer, isForward);
    else
        exchange<float>(engine, *buffer, isForward);
    return 0;
}

int forward(void* userData, const OMMGraphCommBuffer* buffer, char* message, size_t messageSize) {
    return run(userData, buffer, message, messageSize, true);
}

int reverse(void* userData, const OMMGraphCommBuffer* buffer, char* message, size_t messageSize) {
    return run(userData, buffer, message, messageSize, false);
}

/** TorchScript's own names, plus `openmmgraph`: the operators of that namespace. */
struct OperatorNamespaceResolver : public torch::jit::Resolver {
    std::shared_ptr<torch::jit::SugaredValue> resolveValue(const std::string& name, torch::jit::GraphFunction& function,
                                                           const torch::jit::SourceRange& location) override {
        if (name == "openmmgraph")
            return std::make_shared<torch::jit::BuiltinModule>("openmmgraph");
        return torch::jit::nativeResolver()->resolveValue(name, function, location);
    }
    c10::TypePtr resolveType(const std::string& name, const torch::jit::SourceRange& location) override {
        return torch::jit::nativeResolver()->resolveType(name, location);
    }
};

class CommunicateOp : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        library = dlopen(GRAPH_TORCH_OPS_LIBRARY, RTLD_NOW);
        ASSERT_NE(nullptr, library) << dlerror();
    }
    void SetUp() override {
        engine.ghostOwner = {2, 0, 2};
        OMMGraphCommunicator communicator{};
        communicator.version = OMMGRAPH_COMMUNICATOR_VERSION;
        communicator.deviceTypes = OMMGRAPH_COMM_SUPPORTS_CPU;
        communicator.name = "periodic images";
        communicator.userData = &engine;
        communicator.forward = forward;
        communicator.reverse = reverse;
        ASSERT_EQ(OMMGRAPH_COMM_OK, ommgraph_communicator_register(&communicator, &handle)) << ommgraph_communicator_last_error();
    }
    void TearDown() override {
        ommgraph_communicator_unregister(handle);
    }
    static at::Tensor communicate(const at::Tensor& features, int64_t handle, int64_t numOwned) {
        static auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("openmmgraph::communicate", "")
                             .typed<at::Tensor(const at::Tensor&, c10::SymInt, c10::SymInt)>();
        return op.call(features, handle, numOwned);
    }
    static void* library;
    PeriodicImages engine;
    int64_t handle = 0;
};

void* CommunicateOp::library = nullptr;

} // namespace

TEST_F(CommunicateOp, ForwardFillsGhostRowsAndLeavesTheInputAlone) {
    at::Tensor features = at::arange(12, at::kDouble).reshape({6, 2});
    at::Tensor result = communicate(features, handle, 3);
    at::Tensor expected = features.clone();
    expected.slice(0, 3, 6).copy_(features.index_select(0, at::tensor({2, 0, 2}, at::kLong)));
    EXPECT_TRUE(at::equal(expected, result));
    EXPECT_TRUE(at::equal(at::arange(12, at::kDouble).reshape({6, 2}), features));
}

TEST_F(CommunicateOp, BackwardAddsGhostGradientsIntoTheirOwners) {
    at::Tensor features = at::rand({6, 2, 2}, at::kFloat).requires_grad_(true);
    at::Tensor weights = at::arange(24, at::kFloat).reshape({6, 2, 2});
    at::Tensor loss = (communicate(features, handle, 3) * weights).sum();
    auto gradients = torch::autograd::grad({loss}, {features});
    at::Tensor expected = weights.clone();
    expected[2] += weights[3] + weights[5];
    expected[0] += weights[4];
    expected.slice(0, 3, 6).zero_();
    EXPECT_TRUE(at::equal(expected, gradients[0]));
}

TEST_F(CommunicateOp, HandleZeroIsTheIdentity) {
    at::Tensor features = at::rand({4, 3}, at::kDouble).requires_grad_(true);
    at::Tensor result = communicate(features, 0, 4);
    EXPECT_TRUE(at::equal(features, result));
    auto gradients = torch::autograd::grad({(result * 3).sum()}, {features});
    EXPECT_TRUE(at::equal(at::full({4, 3}, 3.0, at::kDouble), gradients[0]));
}

TEST_F(CommunicateOp, ErrorsNameTheProblem) {
    at::Tensor features = at::rand({6, 2}, at::kDouble);
    auto message = [&](auto call) -> std::string {
        try {
            call();
        }
        catch (const c10::Error& error) {
            return error.what_without_backtrace();
        }
        return "(no error)";
    };
    EXPECT_NE(std::string::npos, message([&] { communicate(features, handle + 1000, 3); }).find("is not registered"));
    EXPECT_NE(std::string::npos, message([&] { communicate(features.to(at::kInt), handle, 3); }).find("dtype Int is not supported"));
    EXPECT_NE(std::string::npos, message([&] { communicate(features.t(), handle, 1); }).find("not contiguous"));
    EXPECT_NE(std::string::npos, message([&] { communicate(features, handle, 7); }).find("only 6 rows"));
    EXPECT_NE(std::string::npos, message([&] { communicate(features, handle, 4); }).find("this domain has 3 ghost rows, the buffer 2"));
}

TEST_F(CommunicateOp, RunsInTorchScriptCompiledInCpp) {
    torch::jit::CompilationUnit unit;
    unit.define(std::nullopt, R"JIT(
def update(features: Tensor, handle: int, num_owned: int) -> Tensor:
    return openmmgraph.communicate(features * 2.0, handle, num_owned)
)JIT",
                std::make_shared<OperatorNamespaceResolver>(), nullptr);
    at::Tensor features = at::arange(12, at::kDouble).reshape({6, 2});
    at::Tensor result = unit.run_method("update", features, handle, (int64_t) 3).toTensor();
    EXPECT_TRUE(at::equal(communicate(features * 2.0, handle, 3), result));
}
