/*
 * The operators of libOpenMMGraphTorchOps, registered with the PyTorch
 * dispatcher when the library is loaded (torch.ops.load_library in Python,
 * dlopen or a --no-as-needed link in LibTorch/C++):
 *
 *   openmmgraph::communicate(Tensor features, SymInt handle, SymInt num_owned) -> Tensor
 *   openmmgraph::communicate_reverse(Tensor gradient, SymInt handle, SymInt num_owned) -> Tensor
 *
 * features: [num_owned + num_ghost, features...] float32/float64, contiguous,
 * CPU or CUDA; rows num_owned.. are ghosts.  handle: from
 * ommgraph_communicator_register (wrappers/include/OpenMMGraphCommunicate.h),
 * 0 for one domain (then both ops return a copy).  See docs/communicate.md.
 *
 * Kernels: CPU and CUDA (the same code: the engine does the device work),
 * Meta (shapes only, for FakeTensor / torch.export / torch.compile) and
 * Autograd (communicate_reverse is the backward of communicate and vice versa).
 * handle and num_owned are SymInt so that torch.export can keep them as
 * inputs of the exported program (Dim.DYNAMIC) instead of baking in the values
 * seen while tracing.
 */
#include "CommunicateAutograd.h"
#include "CommunicateKernel.h"
#include "CommunicateMeta.h"
#include <torch/library.h>

using namespace GraphPlugin;

TORCH_LIBRARY(openmmgraph, m) {
    m.def("communicate(Tensor features, SymInt handle, SymInt num_owned) -> Tensor");
    m.def("communicate_reverse(Tensor gradient, SymInt handle, SymInt num_owned) -> Tensor");
}

TORCH_LIBRARY_IMPL(openmmgraph, CPU, m) {
    m.impl("communicate", &communicateKernel);
    m.impl("communicate_reverse", &communicateReverseKernel);
}

TORCH_LIBRARY_IMPL(openmmgraph, CUDA, m) {
    m.impl("communicate", &communicateKernel);
    m.impl("communicate_reverse", &communicateReverseKernel);
}

TORCH_LIBRARY_IMPL(openmmgraph, Meta, m) {
    m.impl("communicate", &communicateMeta);
    m.impl("communicate_reverse", &communicateReverseMeta);
}

TORCH_LIBRARY_IMPL(openmmgraph, Autograd, m) {
    m.impl("communicate", &communicateAutograd);
    m.impl("communicate_reverse", &communicateReverseAutograd);
}
