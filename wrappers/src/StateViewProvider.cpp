#include "StateViewProvider.h"
#include "CudaStateViewProvider.h"
#include "DLPackError.h"
#include "HostStateViewProvider.h"
#include <cstring>

using namespace GraphPlugin;
using namespace OpenMM;

std::unique_ptr<StateViewProvider> StateViewProvider::forContext(ContextImpl& context) {
    const std::string& platform = context.getPlatform().getName();
    if (platform == "Reference" || platform == "CPU")
        return std::unique_ptr<StateViewProvider>(new HostStateViewProvider(context));
    if (platform == "CUDA")
        return std::unique_ptr<StateViewProvider>(new CudaStateViewProvider(context));
    throw DLPackError(OMMGRAPH_ERROR_PLATFORM,
                      "the Context runs on the " + platform + " platform; views exist only on the Reference, CPU and CUDA platforms");
}

size_t StateViewProvider::byteSize(const OMMGraphViewDescriptor& layout) {
    size_t elements = 1;
    for (int i = 0; i < layout.ndim; i++)
        elements *= (size_t) layout.shape[i];
    return elements * (layout.dtypeBits / 8);
}

StateView StateViewProvider::copy(const StateView& source, bool toHost) {
    StateView result;
    result.layout = source.layout;
    result.readOnly = source.readOnly;
    const size_t bytes = byteSize(source.layout);
    if (source.layout.deviceType == kDLCPU) {
        result.owned = OwnedBuffer::allocateHost(bytes);
        if (bytes > 0)
            std::memcpy(result.owned.data(), source.layout.data, bytes);
    }
    else {
        result.owned = copyDeviceMemory(source.layout, toHost);
        if (toHost) {
            result.layout.deviceType = kDLCPU;
            result.layout.deviceId = 0;
        }
    }
    result.layout.data = result.owned.data();
    return result;
}

OwnedBuffer StateViewProvider::copyDeviceMemory(const OMMGraphViewDescriptor&, bool) {
    throw DLPackError(OMMGRAPH_ERROR_RUNTIME, "this platform has no device memory to copy (internal error)");
}

StateView StateViewProvider::boxView(ContextImpl& context) {
    Vec3 a, b, c;
    context.getPeriodicBoxVectors(a, b, c);
    StateView view;
    view.owned = OwnedBuffer::allocateHost(9 * sizeof(double));
    double* box = static_cast<double*>(view.owned.data());
    const Vec3* rows[3] = {&a, &b, &c};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            box[3 * i + j] = (*rows[i])[j];
    view.layout = hostLayout(box, kDLFloat, 64, 3, 3);
    view.readOnly = true;
    return view;
}

OMMGraphViewDescriptor StateViewProvider::hostLayout(void* data, uint8_t dtypeCode, uint8_t dtypeBits, int64_t rows, int64_t columns) {
    OMMGraphViewDescriptor layout{};
    layout.structSize = sizeof(OMMGraphViewDescriptor);
    layout.data = data;
    layout.deviceType = kDLCPU;
    layout.deviceId = 0;
    layout.dtypeCode = dtypeCode;
    layout.dtypeBits = dtypeBits;
    ommgraphSetCompactShape(&layout, rows, columns);
    return layout;
}
