#include "CudaPeerCopyStream.h"
#include "CudaGraphErrors.h"
#include "openmm/common/ContextSelector.h"

using namespace GraphPlugin;
using namespace OpenMM;

CudaPeerCopyStream::CudaPeerCopyStream(CudaContext& cu) : cu(cu) {
    ContextSelector selector(cu);
    GRAPH_CU_CHECK(cuStreamCreate(&copyStream, CU_STREAM_NON_BLOCKING));
    GRAPH_CU_CHECK(cuEventCreate(&started, CU_EVENT_DISABLE_TIMING));
    GRAPH_CU_CHECK(cuEventCreate(&finished, CU_EVENT_DISABLE_TIMING));
}

CudaPeerCopyStream::~CudaPeerCopyStream() {
    ContextSelector selector(cu);
    if (finished != nullptr)
        cuEventDestroy(finished);
    if (started != nullptr)
        cuEventDestroy(started);
    if (copyStream != nullptr)
        cuStreamDestroy(copyStream);
}

void CudaPeerCopyStream::begin(CUstream stream) {
    GRAPH_CU_CHECK(cuEventRecord(started, stream));
    GRAPH_CU_CHECK(cuStreamWaitEvent(copyStream, started, 0));
}

void CudaPeerCopyStream::waitFor(CUevent event) {
    GRAPH_CU_CHECK(cuStreamWaitEvent(copyStream, event, 0));
}

void CudaPeerCopyStream::copy(CUdeviceptr destination, CUdeviceptr source, CUcontext sourceContext, size_t bytes) {
    if (bytes > 0)
        GRAPH_CU_CHECK(cuMemcpyPeerAsync(destination, cu.getContext(), source, sourceContext, bytes, copyStream));
}

void CudaPeerCopyStream::end(CUstream stream) {
    GRAPH_CU_CHECK(cuEventRecord(finished, copyStream));
    GRAPH_CU_CHECK(cuStreamWaitEvent(stream, finished, 0));
}
