#include "BufferCheck.h"
#include "CommunicateError.h"
#include <string>

namespace GraphPlugin {

namespace {

std::string subject(const RegisteredCommunicator* endpoint, const char* direction) {
    return std::string(direction) + " with " + (endpoint ? endpoint->description() : std::string("handle 0"));
}

} // namespace

void checkBuffer(const OMMGraphCommBuffer* buffer, const RegisteredCommunicator* endpoint, const char* direction) {
    if (!buffer)
        throw CommunicateError(OMMGRAPH_COMM_ERROR_ARGUMENT, subject(endpoint, direction) + ": the buffer description is NULL");
    const std::string where = subject(endpoint, direction) + ": ";
    if (buffer->dtype != OMMGRAPH_COMM_FLOAT32 && buffer->dtype != OMMGRAPH_COMM_FLOAT64)
        throw CommunicateError(OMMGRAPH_COMM_ERROR_ARGUMENT,
                               where + "dtype " + std::to_string(buffer->dtype) +
                                   " is unknown; expected OMMGRAPH_COMM_FLOAT32 (0) or OMMGRAPH_COMM_FLOAT64 (1)");
    if (buffer->deviceType != OMMGRAPH_COMM_DEVICE_CPU && buffer->deviceType != OMMGRAPH_COMM_DEVICE_CUDA)
        throw CommunicateError(OMMGRAPH_COMM_ERROR_ARGUMENT, where + "deviceType " + std::to_string(buffer->deviceType) +
                                                                 " is unknown; expected OMMGRAPH_COMM_DEVICE_CPU (1) or "
                                                                 "OMMGRAPH_COMM_DEVICE_CUDA (2)");
    if (buffer->deviceIndex < 0 || (buffer->deviceType == OMMGRAPH_COMM_DEVICE_CPU && buffer->deviceIndex != 0))
        throw CommunicateError(OMMGRAPH_COMM_ERROR_ARGUMENT, where + "deviceIndex " + std::to_string(buffer->deviceIndex) +
                                                                 " is invalid (0 on CPU, the CUDA ordinal on CUDA)");
    if (buffer->deviceType == OMMGRAPH_COMM_DEVICE_CPU && buffer->stream != nullptr)
        throw CommunicateError(OMMGRAPH_COMM_ERROR_ARGUMENT, where + "a host (CPU) buffer has a stream; pass NULL");
    if (buffer->numOwned < 0 || buffer->numGhost < 0 || buffer->numFeatures < 0)
        throw CommunicateError(OMMGRAPH_COMM_ERROR_ARGUMENT, where + "negative size (numOwned " + std::to_string(buffer->numOwned) +
                                                                 ", numGhost " + std::to_string(buffer->numGhost) + ", numFeatures " +
                                                                 std::to_string(buffer->numFeatures) + ")");
    if (buffer->rowStride < buffer->numFeatures)
        throw CommunicateError(OMMGRAPH_COMM_ERROR_ARGUMENT, where + "rowStride " + std::to_string(buffer->rowStride) +
                                                                 " is less than numFeatures " + std::to_string(buffer->numFeatures));
    const bool hasElements = buffer->numOwned + buffer->numGhost > 0 && buffer->numFeatures > 0;
    if (hasElements && buffer->data == nullptr)
        throw CommunicateError(OMMGRAPH_COMM_ERROR_ARGUMENT,
                               where + "data is NULL for a table of " + std::to_string(buffer->numOwned + buffer->numGhost) + " rows");
    if (endpoint) {
        const uint32_t needed = buffer->deviceType == OMMGRAPH_COMM_DEVICE_CUDA ? OMMGRAPH_COMM_SUPPORTS_CUDA : OMMGRAPH_COMM_SUPPORTS_CPU;
        if ((endpoint->communicator().deviceTypes & needed) == 0)
            throw CommunicateError(OMMGRAPH_COMM_ERROR_UNSUPPORTED,
                                   where + "the engine does not exchange " +
                                       (buffer->deviceType == OMMGRAPH_COMM_DEVICE_CUDA ? "CUDA device" : "host (CPU)") +
                                       " buffers (its deviceTypes is " + std::to_string(endpoint->communicator().deviceTypes) +
                                       "); move the features to a device it serves");
    }
}

} // namespace GraphPlugin
