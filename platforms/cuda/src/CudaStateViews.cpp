/*
 * The CUDA side of the DLPack views (wrappers/include/OpenMMGraphDLPack.h):
 * where OpenMM's device arrays are, the stream handshake and device copies.
 * libOpenMMGraphDLPack does not link CUDA; it finds these functions in this
 * plugin at run time (the contract: wrappers/include/internal/GraphViewDescriptor.h).
 * Every function catches everything and reports a status and a message.
 *
 * Layouts (rows in OpenMM's sorted order; padded = cu.getPaddedNumAtoms()):
 *  POSITIONS            posq,           float32 (single, mixed) or float64 (double) [padded][4]: x, y, z nm, charge e
 *  POSITION_CORRECTION  posqCorrection, float32 [padded][4], mixed precision only
 *  VELOCITIES           velm,           float32 (single) or float64 (mixed, double) [padded][4]: v nm/ps, 1/mass 1/amu
 *  FORCES               longForceBuffer, int64 [3][padded], 2^32 per kJ/mol/nm
 *  ATOM_ORDER           atomIndex,      int32 [padded]
 *  BOX is not here: the DLPack library copies the Context's box on every platform.
 */
#include "CudaGraphErrors.h"
#include "OpenMMGraphDLPack.h"
#include "internal/GraphViewDescriptor.h"
#include "internal/windowsExportGraph.h"
#include "openmm/common/ContextSelector.h"
#include "openmm/cuda/CudaContext.h"
#include "openmm/cuda/CudaPlatform.h"
#include "openmm/internal/ContextImpl.h"
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

using namespace GraphPlugin;
using namespace OpenMM;

namespace {

/** A failure with the status to return (errors of CUDA calls arrive as OpenMMException, status RUNTIME). */
class ViewFailure : public std::runtime_error {
public:
    ViewFailure(OMMGraphStatus status, const std::string& reason) : std::runtime_error(reason), status(status) {}
    OMMGraphStatus status;
};

void writeMessage(char* message, size_t messageSize, const char* text) {
    if (message == nullptr || messageSize == 0)
        return;
    std::strncpy(message, text, messageSize - 1);
    message[messageSize - 1] = '\0';
}

template <class Body> int guarded(char* message, size_t messageSize, Body body) noexcept {
    try {
        body();
        writeMessage(message, messageSize, "");
        return OMMGRAPH_OK;
    }
    catch (const ViewFailure& failure) {
        writeMessage(message, messageSize, failure.what());
        return failure.status;
    }
    catch (const std::exception& error) {
        writeMessage(message, messageSize, error.what());
    }
    catch (...) {
        writeMessage(message, messageSize, "an unknown error in the CUDA plugin");
    }
    return OMMGRAPH_ERROR_RUNTIME;
}

/** The one CudaContext of a Context on the CUDA platform (views of a Context on several devices would be partial). */
CudaContext& cudaContextOf(void* contextImpl) {
    if (contextImpl == nullptr)
        throw ViewFailure(OMMGRAPH_ERROR_ARGUMENT, "the ContextImpl is NULL");
    ContextImpl& context = *static_cast<ContextImpl*>(contextImpl);
    if (context.getPlatform().getName() != "CUDA")
        throw ViewFailure(OMMGRAPH_ERROR_PLATFORM, "the Context runs on the " + context.getPlatform().getName() + " platform, not CUDA");
    CudaPlatform::PlatformData& data = *static_cast<CudaPlatform::PlatformData*>(context.getPlatformData());
    if (data.contexts.size() != 1)
        throw ViewFailure(OMMGRAPH_ERROR_UNAVAILABLE, "the Context runs on " + std::to_string(data.contexts.size()) +
                                                          " CUDA devices; views need a Context on one device (DeviceIndex with one index)");
    return *data.contexts[0];
}

/**
 * Describe `array` as a compact [rows][columns] (or [rows] when columns is 0)
 * array of `bits`-bit elements, after checking that OpenMM's array has that
 * element size and at least that many elements.
 */
void describeArray(CudaContext& cu, CudaArray& array, const char* name, uint8_t code, uint8_t bits, int64_t rows, int64_t columns,
                   size_t arrayElementSize, OMMGraphViewDescriptor& out) {
    const size_t needed = (size_t) rows * (columns > 0 ? columns : 1) * (bits / 8);
    const size_t available = array.getSize() * array.getElementSize();
    if (!array.isInitialized() || (size_t) array.getElementSize() != arrayElementSize || available < needed)
        throw ViewFailure(OMMGRAPH_ERROR_RUNTIME, std::string("OpenMM's ") + name + " array does not have the expected layout (" +
                                                      std::to_string(array.getSize()) + " elements of " +
                                                      std::to_string(array.getElementSize()) + " bytes; expected elements of " +
                                                      std::to_string(arrayElementSize) + " bytes, " + std::to_string(needed) +
                                                      " bytes in all); this OpenMM version is not supported");
    out.data = (void*) (uintptr_t) array.getDevicePointer();
    out.deviceType = kDLCUDA;
    out.deviceId = cu.getDeviceIndex();
    out.dtypeCode = code;
    out.dtypeBits = bits;
    ommgraphSetCompactShape(&out, rows, columns);
}

void checkDescriptor(const OMMGraphViewDescriptor* descriptor) {
    if (descriptor == nullptr)
        throw ViewFailure(OMMGRAPH_ERROR_ARGUMENT, "the view descriptor is NULL");
    if (descriptor->structSize != sizeof(OMMGraphViewDescriptor))
        throw ViewFailure(OMMGRAPH_ERROR_RUNTIME, "libOpenMMGraphDLPack and libOpenMMGraphCUDA come from different builds "
                                                  "(view descriptor of " +
                                                      std::to_string(descriptor->structSize) + " bytes, expected " +
                                                      std::to_string(sizeof(OMMGraphViewDescriptor)) + "); reinstall openmm-graph");
}

} // namespace

extern "C" OPENMM_EXPORT_GRAPH int ommgraphCudaDescribeView(void* contextImpl, int view, OMMGraphViewDescriptor* out, char* message,
                                                            size_t messageSize) {
    return guarded(message, messageSize, [&] {
        checkDescriptor(out);
        CudaContext& cu = cudaContextOf(contextImpl);
        const int64_t padded = cu.getPaddedNumAtoms();
        const bool singlePrecision = !cu.getUseDoublePrecision() && !cu.getUseMixedPrecision();
        switch (view) {
        case OMMGRAPH_VIEW_POSITIONS:
            if (cu.getUseDoublePrecision())
                describeArray(cu, cu.getPosq(), "posq", kDLFloat, 64, padded, 4, 4 * sizeof(double), *out);
            else
                describeArray(cu, cu.getPosq(), "posq", kDLFloat, 32, padded, 4, 4 * sizeof(float), *out);
            break;
        case OMMGRAPH_VIEW_POSITION_CORRECTION:
            if (!cu.getUseMixedPrecision())
                throw ViewFailure(OMMGRAPH_ERROR_UNAVAILABLE, std::string("not available: the Context uses ") +
                                                                  (singlePrecision ? "single" : "double") +
                                                                  " precision; the correction exists only in mixed precision");
            describeArray(cu, cu.getPosqCorrection(), "posqCorrection", kDLFloat, 32, padded, 4, 4 * sizeof(float), *out);
            break;
        case OMMGRAPH_VIEW_VELOCITIES:
            if (singlePrecision)
                describeArray(cu, cu.getVelm(), "velm", kDLFloat, 32, padded, 4, 4 * sizeof(float), *out);
            else
                describeArray(cu, cu.getVelm(), "velm", kDLFloat, 64, padded, 4, 4 * sizeof(double), *out);
            break;
        case OMMGRAPH_VIEW_FORCES:
            describeArray(cu, cu.getLongForceBuffer(), "longForceBuffer", kDLInt, 64, 3, padded, sizeof(long long), *out);
            break;
        case OMMGRAPH_VIEW_ATOM_ORDER:
            describeArray(cu, cu.getAtomIndexArray(), "atomIndex", kDLInt, 32, padded, 0, sizeof(int), *out);
            break;
        default:
            throw ViewFailure(OMMGRAPH_ERROR_ARGUMENT, "the CUDA plugin has no view number " + std::to_string(view));
        }
    });
}

extern "C" OPENMM_EXPORT_GRAPH int ommgraphCudaSynchronizeStream(void* contextImpl, uintptr_t consumerStream, char* message,
                                                                 size_t messageSize) {
    return guarded(message, messageSize, [&] {
        CudaContext& cu = cudaContextOf(contextImpl);
        if (consumerStream == UINTPTR_MAX)
            return;                                                                             // the consumer asked for no synchronisation
        CUstream consumer = consumerStream == 0 ? CU_STREAM_LEGACY : (CUstream) consumerStream; // 1 and 2 are CUDA's own handles
        CUstream producer = cu.getCurrentStream();
        if (consumer == producer)
            return;
        ContextSelector selector(cu);
        CUevent event;
        GRAPH_CU_CHECK(cuEventCreate(&event, CU_EVENT_DISABLE_TIMING));
        CUresult recorded = cuEventRecord(event, producer);
        CUresult waited = recorded == CUDA_SUCCESS ? cuStreamWaitEvent(consumer, event, 0) : recorded;
        cuEventDestroy(event); // released by the driver once the wait is satisfied
        GRAPH_CU_CHECK(recorded);
        GRAPH_CU_CHECK(waited);
    });
}

extern "C" OPENMM_EXPORT_GRAPH int ommgraphCudaCurrentStream(void* contextImpl, uintptr_t* stream, char* message, size_t messageSize) {
    return guarded(message, messageSize, [&] { *stream = (uintptr_t) cudaContextOf(contextImpl).getCurrentStream(); });
}

extern "C" OPENMM_EXPORT_GRAPH int ommgraphCudaCopy(void* contextImpl, const OMMGraphViewDescriptor* source, int toHost, void** copy,
                                                    void** cudaContext, char* message, size_t messageSize) {
    return guarded(message, messageSize, [&] {
        checkDescriptor(source);
        if (copy == nullptr || cudaContext == nullptr)
            throw ViewFailure(OMMGRAPH_ERROR_ARGUMENT, "copy and cudaContext must not be NULL");
        *copy = nullptr;
        *cudaContext = nullptr;
        CudaContext& cu = cudaContextOf(contextImpl);
        if (source->deviceType != kDLCUDA)
            throw ViewFailure(OMMGRAPH_ERROR_ARGUMENT, "the view to copy is not in device memory");
        size_t bytes = source->dtypeBits / 8;
        for (int i = 0; i < source->ndim; i++)
            bytes *= (size_t) source->shape[i];
        ContextSelector selector(cu);
        CUstream stream = cu.getCurrentStream();
        const CUdeviceptr from = (CUdeviceptr) (uintptr_t) source->data;
        if (toHost) {
            void* host = std::malloc(bytes > 0 ? bytes : 1);
            if (host == nullptr)
                throw ViewFailure(OMMGRAPH_ERROR_RUNTIME, "out of host memory for a copy of " + std::to_string(bytes) + " bytes");
            CUresult result = bytes > 0 ? cuMemcpyDtoHAsync(host, from, bytes, stream) : CUDA_SUCCESS;
            if (result == CUDA_SUCCESS)
                result = cuStreamSynchronize(stream);
            if (result != CUDA_SUCCESS)
                std::free(host);
            GRAPH_CU_CHECK(result);
            *copy = host;
        }
        else {
            CUdeviceptr device = 0;
            GRAPH_CU_CHECK(cuMemAlloc(&device, bytes > 0 ? bytes : 1));
            CUresult result = bytes > 0 ? cuMemcpyDtoDAsync(device, from, bytes, stream) : CUDA_SUCCESS;
            if (result == CUDA_SUCCESS)
                result = cuStreamSynchronize(stream); // the copy is complete, whatever stream the consumer uses
            if (result != CUDA_SUCCESS)
                cuMemFree(device);
            GRAPH_CU_CHECK(result);
            *copy = (void*) (uintptr_t) device;
            *cudaContext = (void*) cu.getContext();
        }
    });
}

extern "C" OPENMM_EXPORT_GRAPH void ommgraphCudaFree(void* cudaContext, void* copy) {
    if (copy == nullptr || cudaContext == nullptr)
        return;
    // Called from a tensor's deleter, which must not throw: errors (a context already destroyed) are ignored.
    if (cuCtxPushCurrent((CUcontext) cudaContext) != CUDA_SUCCESS)
        return;
    cuMemFree((CUdeviceptr) (uintptr_t) copy);
    CUcontext popped;
    cuCtxPopCurrent(&popped);
}

// The signatures above are the contract of internal/GraphViewDescriptor.h.
static_assert(std::is_same<decltype(&ommgraphCudaDescribeView), OMMGraphCudaDescribeViewFunction>::value, "describe signature");
static_assert(std::is_same<decltype(&ommgraphCudaSynchronizeStream), OMMGraphCudaSynchronizeStreamFunction>::value, "sync signature");
static_assert(std::is_same<decltype(&ommgraphCudaCopy), OMMGraphCudaCopyFunction>::value, "copy signature");
static_assert(std::is_same<decltype(&ommgraphCudaFree), OMMGraphCudaFreeFunction>::value, "free signature");
static_assert(std::is_same<decltype(&ommgraphCudaCurrentStream), OMMGraphCudaCurrentStreamFunction>::value, "stream signature");
