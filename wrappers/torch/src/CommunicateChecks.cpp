#include "CommunicateChecks.h"
#include <c10/util/Exception.h>

namespace GraphPlugin {

void checkCommunicateArguments(const char* op, const at::Tensor& tensor, const c10::SymInt& handle, const c10::SymInt& numOwned) {
    TORCH_CHECK(tensor.defined(), op, ": the tensor is undefined (None)");
    TORCH_CHECK(tensor.dim() >= 1, op, ": expected a tensor of shape [owned + ghost, features...], got a ", tensor.dim(),
                "-dimensional tensor (a scalar has no rows)");
    const at::ScalarType dtype = tensor.scalar_type();
    TORCH_CHECK(dtype == at::kFloat || dtype == at::kDouble, op, ": dtype ", dtype,
                " is not supported; expected torch.float32 or torch.float64 (convert with .double() or .float())");
    TORCH_CHECK(tensor.is_contiguous(), op, ": the tensor is not contiguous (strides ", tensor.sym_strides(), " for shape ",
                tensor.sym_sizes(), "); pass tensor.contiguous()");
    const c10::Device device = tensor.device();
    TORCH_CHECK(device.is_cpu() || device.is_cuda() || device.is_meta(), op, ": tensors on ", device,
                " are not supported; expected a CPU or CUDA tensor");
    if (auto known = handle.maybe_as_int())
        TORCH_CHECK(*known >= 0, op, ": handle ", *known,
                    " is negative; handles are 0 (one domain, no engine) or what ommgraph_communicator_register returned");
    auto owned = numOwned.maybe_as_int();
    auto rows = tensor.sym_size(0).maybe_as_int();
    if (owned)
        TORCH_CHECK(*owned >= 0, op, ": num_owned is ", *owned, "; it must be >= 0");
    if (owned && rows)
        TORCH_CHECK(*owned <= *rows, op, ": num_owned is ", *owned, " but the tensor has only ", *rows,
                    " rows (shape [owned + ghost, features...])");
}

} // namespace GraphPlugin
