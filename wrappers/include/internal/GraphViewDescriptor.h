/*
 * openmm-graph: the private contract between libOpenMMGraphDLPack (which
 * builds DLPack tensors and does not link CUDA) and the CUDA platform plugin
 * (which knows where OpenMM's device arrays are).  Plain C, no CUDA types:
 * the DLPack library finds the plugin's functions at run time with dlsym, so
 * both sides must agree on these structs and signatures exactly.
 */
#ifndef OPENMM_GRAPH_VIEW_DESCRIPTOR_H_
#define OPENMM_GRAPH_VIEW_DESCRIPTOR_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The most dimensions a view has (POSITIONS [padded][4], FORCES [3][padded], ...). */
#define OMMGRAPH_VIEW_MAX_DIMS 2

/**
 * Where one view's elements are and how they are laid out.  Row-major and
 * compact: strides[ndim - 1] == 1 and strides[i] == shape[i + 1] * strides[i + 1],
 * in elements (not bytes).
 */
typedef struct {
    uint32_t structSize; /* sizeof(OMMGraphViewDescriptor) as the caller compiled it; checked by the callee */
    void* data;          /* the first element: device memory (deviceType kDLCUDA) or host memory (kDLCPU) */
    int32_t deviceType;  /* a DLDeviceType: kDLCPU or kDLCUDA */
    int32_t deviceId;    /* the CUDA device ordinal, 0 on the host */
    uint8_t dtypeCode;   /* a DLDataTypeCode: kDLFloat or kDLInt */
    uint8_t dtypeBits;   /* 32 or 64 */
    int32_t ndim;        /* 1 or 2 */
    int64_t shape[OMMGRAPH_VIEW_MAX_DIMS];
    int64_t strides[OMMGRAPH_VIEW_MAX_DIMS];
} OMMGraphViewDescriptor;

/** The compact row-major shape of *d: [rows][columns], or [rows] when columns is 0. */
static inline void ommgraphSetCompactShape(OMMGraphViewDescriptor* d, int64_t rows, int64_t columns) {
    if (columns > 0) {
        d->ndim = 2;
        d->shape[0] = rows;
        d->shape[1] = columns;
        d->strides[0] = columns;
        d->strides[1] = 1;
    }
    else {
        d->ndim = 1;
        d->shape[0] = rows;
        d->strides[0] = 1;
    }
}

/*
 * The functions the CUDA plugin (libOpenMMGraphCUDA.so) exports under these
 * names.  Each returns an OMMGraphStatus and, on failure, writes a message
 * (NUL-terminated, at most messageSize bytes) into `message`.  contextImpl is
 * an OpenMM::ContextImpl* of a Context on the CUDA platform.
 */

/** Fill *out for one OMMGraphView of OpenMM's CUDA arrays (no copy, no synchronisation). */
typedef int (*OMMGraphCudaDescribeViewFunction)(void* contextImpl, int view, OMMGraphViewDescriptor* out, char* message,
                                                size_t messageSize);
#define OMMGRAPH_CUDA_DESCRIBE_VIEW_SYMBOL "ommgraphCudaDescribeView"

/**
 * Make consumerStream wait (on the device, not the host) for the work queued
 * on OpenMM's current stream; UINTPTR_MAX means "no synchronisation", 0 the
 * legacy default stream, 2 the per-thread default stream.
 */
typedef int (*OMMGraphCudaSynchronizeStreamFunction)(void* contextImpl, uintptr_t consumerStream, char* message, size_t messageSize);
#define OMMGRAPH_CUDA_SYNCHRONIZE_STREAM_SYMBOL "ommgraphCudaSynchronizeStream"

/**
 * Copy the device view `source` (after all work queued on OpenMM's stream,
 * and complete when this returns) into new memory: host memory from malloc
 * when toHost is nonzero (*cudaContext = NULL; release with free), else
 * device memory from cuMemAlloc in the Context's CUcontext, returned in
 * *cudaContext (release with the free function below).
 */
typedef int (*OMMGraphCudaCopyFunction)(void* contextImpl, const OMMGraphViewDescriptor* source, int toHost, void** copy,
                                        void** cudaContext, char* message, size_t messageSize);
#define OMMGRAPH_CUDA_COPY_SYMBOL "ommgraphCudaCopy"

/** Free a device copy made by the copy function (cuMemFree in cudaContext); never fails loudly. */
typedef void (*OMMGraphCudaFreeFunction)(void* cudaContext, void* copy);
#define OMMGRAPH_CUDA_FREE_SYMBOL "ommgraphCudaFree"

/** OpenMM's current CUDA stream of the Context (a CUstream), for work that must be ordered with OpenMM's. */
typedef int (*OMMGraphCudaCurrentStreamFunction)(void* contextImpl, uintptr_t* stream, char* message, size_t messageSize);
#define OMMGRAPH_CUDA_CURRENT_STREAM_SYMBOL "ommgraphCudaCurrentStream"

#ifdef __cplusplus
}
#endif

#endif /* OPENMM_GRAPH_VIEW_DESCRIPTOR_H_ */
