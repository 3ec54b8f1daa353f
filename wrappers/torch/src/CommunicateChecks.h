#ifndef OPENMM_GRAPH_COMMUNICATE_CHECKS_H_
#define OPENMM_GRAPH_COMMUNICATE_CHECKS_H_

#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>

namespace GraphPlugin {

/**
 * The checks both operators make on their arguments, on real and on fake
 * (meta) tensors alike, so that torch.export reports a bad call while
 * tracing: `tensor` has at least one dimension (rows = its first, features =
 * the product of the others), dtype float32 or float64, is contiguous, and
 * 0 <= numOwned <= rows (when both are known), handle >= 0 (when known).
 * `op` ("openmmgraph::communicate") starts every message.  Throws c10::Error.
 */
void checkCommunicateArguments(const char* op, const at::Tensor& tensor, const c10::SymInt& handle, const c10::SymInt& numOwned);

} // namespace GraphPlugin

#endif
