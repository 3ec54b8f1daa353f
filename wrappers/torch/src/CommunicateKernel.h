#ifndef OPENMM_GRAPH_COMMUNICATE_KERNEL_H_
#define OPENMM_GRAPH_COMMUNICATE_KERNEL_H_

#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>

namespace GraphPlugin {

/**
 * The CPU and CUDA kernel of openmmgraph::communicate: a copy of `features`
 * [owned + ghost, features...] (same device and dtype; the op is functional,
 * its output never aliases its input) whose ghost rows the engine of `handle`
 * has filled from their owners (ommgraph_communicate_forward, on the current
 * CUDA stream of the tensor's device, with that device current).  Handle 0:
 * the copy only.  Errors (bad handle, engine failure) are c10::Error whose
 * message is the communicate library's.
 */
at::Tensor communicateKernel(const at::Tensor& features, c10::SymInt handle, c10::SymInt numOwned);

/**
 * The CPU and CUDA kernel of openmmgraph::communicate_reverse, the adjoint of
 * communicate: a copy of `gradient` in which the engine has added every ghost
 * row into its owner's row and zeroed the ghost rows
 * (ommgraph_communicate_reverse).  Handle 0: the copy only.
 */
at::Tensor communicateReverseKernel(const at::Tensor& gradient, c10::SymInt handle, c10::SymInt numOwned);

} // namespace GraphPlugin

#endif
