#include "CommunicateAutograd.h"
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/custom_function.h>

namespace GraphPlugin {

namespace {

using Signature = at::Tensor(const at::Tensor&, c10::SymInt, c10::SymInt);

/** The typed dispatcher handle of openmmgraph::communicate_reverse (isReverse) or openmmgraph::communicate. */
const c10::TypedOperatorHandle<Signature>& findOperator(bool isReverse) {
    static const auto forward = c10::Dispatcher::singleton().findSchemaOrThrow("openmmgraph::communicate", "").typed<Signature>();
    static const auto reverse = c10::Dispatcher::singleton().findSchemaOrThrow("openmmgraph::communicate_reverse", "").typed<Signature>();
    return isReverse ? reverse : forward;
}

/**
 * One direction of the exchange as an autograd Function: forward runs the
 * operator (communicate, or communicate_reverse when IsReverse) below
 * autograd, backward runs the other one through the dispatcher, so that the
 * backward is itself differentiable.
 */
template <bool IsReverse> class CommunicateFunction : public torch::autograd::Function<CommunicateFunction<IsReverse>> {
public:
    static at::Tensor forward(torch::autograd::AutogradContext* context, const at::Tensor& input, c10::SymInt handle,
                              c10::SymInt numOwned) {
        context->saved_data["handle"] = handle;
        context->saved_data["numOwned"] = numOwned;
        at::AutoDispatchBelowADInplaceOrView guard;
        return findOperator(IsReverse).call(input, std::move(handle), std::move(numOwned));
    }

    static torch::autograd::variable_list backward(torch::autograd::AutogradContext* context, torch::autograd::variable_list gradients) {
        const at::Tensor& gradient = gradients[0];
        if (!gradient.defined())
            return {at::Tensor(), at::Tensor(), at::Tensor()};
        c10::SymInt handle = context->saved_data["handle"].toSymInt();
        c10::SymInt numOwned = context->saved_data["numOwned"].toSymInt();
        // Incoming gradients may be expanded or strided (e.g. the gradient of a sum).
        at::Tensor result = findOperator(!IsReverse).call(gradient.contiguous(), handle, numOwned);
        return {result, at::Tensor(), at::Tensor()};
    }
};

} // namespace

at::Tensor communicateAutograd(const at::Tensor& features, c10::SymInt handle, c10::SymInt numOwned) {
    return CommunicateFunction<false>::apply(features, std::move(handle), std::move(numOwned));
}

at::Tensor communicateReverseAutograd(const at::Tensor& gradient, c10::SymInt handle, c10::SymInt numOwned) {
    return CommunicateFunction<true>::apply(gradient, std::move(handle), std::move(numOwned));
}

} // namespace GraphPlugin
