#include "CommunicateMeta.h"
#include "CommunicateChecks.h"
#include <ATen/ops/empty_like.h>

namespace GraphPlugin {

at::Tensor communicateMeta(const at::Tensor& features, c10::SymInt handle, c10::SymInt numOwned) {
    checkCommunicateArguments("openmmgraph::communicate", features, handle, numOwned);
    return at::empty_like(features, at::MemoryFormat::Contiguous);
}

at::Tensor communicateReverseMeta(const at::Tensor& gradient, c10::SymInt handle, c10::SymInt numOwned) {
    checkCommunicateArguments("openmmgraph::communicate_reverse", gradient, handle, numOwned);
    return at::empty_like(gradient, at::MemoryFormat::Contiguous);
}

} // namespace GraphPlugin
