#ifndef OPENMM_GRAPH_CUDA_ERRORS_H_
#define OPENMM_GRAPH_CUDA_ERRORS_H_

/**
 * The one error check of the CUDA platform: throws an OpenMMException naming
 * the failed call, the CUDA error, the file and the line.
 */

#include "openmm/OpenMMException.h"
#include <cuda.h>
#include <cuda_runtime.h>
#include <string>

namespace GraphPlugin {

inline void throwCudaError(const char* call, const char* error, const char* file, int line) {
    throw OpenMM::OpenMMException(std::string("GraphForce: CUDA call failed: ") + call + ": " + error + " (" + file + ":" +
                                  std::to_string(line) + ")");
}

} // namespace GraphPlugin

/** Check a CUDA runtime call (or cudaGetLastError() after a launch). */
#define GRAPH_CUDA_CHECK(call)                                                                                                             \
    do {                                                                                                                                   \
        cudaError_t graphCudaResult = (call);                                                                                              \
        if (graphCudaResult != cudaSuccess)                                                                                                \
            GraphPlugin::throwCudaError(#call, cudaGetErrorString(graphCudaResult), __FILE__, __LINE__);                                   \
    } while (0)

/** Check a CUDA driver API call. */
#define GRAPH_CU_CHECK(call)                                                                                                               \
    do {                                                                                                                                   \
        CUresult graphCuResult = (call);                                                                                                   \
        if (graphCuResult != CUDA_SUCCESS) {                                                                                               \
            const char* graphCuMessage = "unknown error";                                                                                  \
            cuGetErrorString(graphCuResult, &graphCuMessage);                                                                              \
            GraphPlugin::throwCudaError(#call, graphCuMessage, __FILE__, __LINE__);                                                        \
        }                                                                                                                                  \
    } while (0)

#endif
