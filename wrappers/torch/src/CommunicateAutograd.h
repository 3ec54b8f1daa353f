#ifndef OPENMM_GRAPH_COMMUNICATE_AUTOGRAD_H_
#define OPENMM_GRAPH_COMMUNICATE_AUTOGRAD_H_

#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>

namespace GraphPlugin {

/**
 * The Autograd kernel of openmmgraph::communicate: runs the op below autograd
 * and records a node whose backward is openmmgraph::communicate_reverse of the
 * incoming gradient (made contiguous) with the same handle and num_owned.
 * Both ops are linear and each other's transpose, so second derivatives work
 * too (the backward of communicate_reverse is communicate).
 */
at::Tensor communicateAutograd(const at::Tensor& features, c10::SymInt handle, c10::SymInt numOwned);

/** The Autograd kernel of openmmgraph::communicate_reverse (backward: communicate). */
at::Tensor communicateReverseAutograd(const at::Tensor& gradient, c10::SymInt handle, c10::SymInt numOwned);

} // namespace GraphPlugin

#endif
