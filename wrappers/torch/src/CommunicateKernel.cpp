#include "CommunicateKernel.h"
#include "CommunicateChecks.h"
#include "OpenMMGraphCommunicate.h"
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

namespace GraphPlugin {

namespace {

/** The engine's view of `table` (contiguous, rows = its first dimension): its OMMGraphCommBuffer. */
OMMGraphCommBuffer describe(const at::Tensor& table, int64_t numOwned) {
    OMMGraphCommBuffer buffer{};
    buffer.data = table.data_ptr();
    buffer.dtype = table.scalar_type() == at::kDouble ? OMMGRAPH_COMM_FLOAT64 : OMMGRAPH_COMM_FLOAT32;
    const int64_t rows = table.size(0);
    buffer.numOwned = numOwned;
    buffer.numGhost = rows - numOwned;
    buffer.numFeatures = 1; // the product of the dimensions after the first
    for (int64_t dim = 1; dim < table.dim(); dim++)
        buffer.numFeatures *= table.size(dim);
    buffer.rowStride = buffer.numFeatures;
    if (table.is_cuda()) {
        buffer.deviceType = OMMGRAPH_COMM_DEVICE_CUDA;
        buffer.deviceIndex = table.device().index();
        // The current stream of the tensor's device, through c10's device-guard registry:
        // no CUDA headers or libraries are needed here.
        const c10::impl::DeviceGuardImplInterface* cuda = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
        buffer.stream = cuda->getStream(table.device()).native_handle();
    }
    else {
        buffer.deviceType = OMMGRAPH_COMM_DEVICE_CPU;
        buffer.deviceIndex = 0;
        buffer.stream = nullptr;
    }
    return buffer;
}

at::Tensor run(const char* op, const at::Tensor& input, const c10::SymInt& symHandle, const c10::SymInt& symNumOwned, bool isForward) {
    checkCommunicateArguments(op, input, symHandle, symNumOwned);
    const int64_t handle = symHandle.expect_int();
    const int64_t numOwned = symNumOwned.expect_int();
    // A bad handle is reported before any work.
    TORCH_CHECK(ommgraph_communicator_is_registered(handle), op, ": handle ", handle,
                " is not registered (was it unregistered, or made in another process?); 0 means one domain, no engine");
    at::Tensor table = input.clone(at::MemoryFormat::Contiguous);
    if (handle == 0)
        return table;
    c10::DeviceGuard deviceGuard(table.device());
    const OMMGraphCommBuffer buffer = describe(table, numOwned);
    const int status = isForward ? ommgraph_communicate_forward(handle, &buffer) : ommgraph_communicate_reverse(handle, &buffer);
    TORCH_CHECK(status == OMMGRAPH_COMM_OK, op, ": ", ommgraph_communicator_last_error());
    return table;
}

} // namespace

at::Tensor communicateKernel(const at::Tensor& features, c10::SymInt handle, c10::SymInt numOwned) {
    return run("openmmgraph::communicate", features, handle, numOwned, true);
}

at::Tensor communicateReverseKernel(const at::Tensor& gradient, c10::SymInt handle, c10::SymInt numOwned) {
    return run("openmmgraph::communicate_reverse", gradient, handle, numOwned, false);
}

} // namespace GraphPlugin
