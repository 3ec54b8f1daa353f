#ifndef OPENMM_GRAPH_COMMUNICATE_META_H_
#define OPENMM_GRAPH_COMMUNICATE_META_H_

#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>

namespace GraphPlugin {

/**
 * The Meta (shape-only) kernel of openmmgraph::communicate and
 * communicate_reverse, which FakeTensor, torch.export and torch.compile use:
 * the same checks as the real kernels (as far as symbolic sizes allow), then
 * a new tensor of the input's shape, dtype and device.  Never calls an engine.
 */
at::Tensor communicateMeta(const at::Tensor& features, c10::SymInt handle, c10::SymInt numOwned);

/** The Meta kernel of openmmgraph::communicate_reverse (see communicateMeta). */
at::Tensor communicateReverseMeta(const at::Tensor& gradient, c10::SymInt handle, c10::SymInt numOwned);

} // namespace GraphPlugin

#endif
