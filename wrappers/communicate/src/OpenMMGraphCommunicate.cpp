/*
 * The C entry points of wrappers/include/OpenMMGraphCommunicate.h: each turns
 * a CommunicateError (or any other exception) into its status and this
 * thread's last-error message; nothing is thrown across the C boundary.
 */
#include "OpenMMGraphCommunicate.h"
#include "BufferCheck.h"
#include "CommunicateError.h"
#include "CommunicatorRegistry.h"
#include <exception>
#include <string>

using namespace GraphPlugin;

namespace {

template <typename Body> int guarded(Body body) {
    try {
        body();
        clearCommunicateLastError();
        return OMMGRAPH_COMM_OK;
    }
    catch (const CommunicateError& error) {
        setCommunicateLastError(error.what());
        return error.status();
    }
    catch (const std::exception& error) {
        setCommunicateLastError(std::string("unexpected error: ") + error.what());
        return OMMGRAPH_COMM_ERROR_ENGINE;
    }
    catch (...) {
        setCommunicateLastError("unexpected error (an exception of unknown type; callbacks must not throw)");
        return OMMGRAPH_COMM_ERROR_ENGINE;
    }
}

/** Check the buffer, then run the engine's forward (isForward) or reverse callback on it. */
void communicate(int64_t handle, const OMMGraphCommBuffer* buffer, bool isForward) {
    const char* direction = isForward ? "forward" : "reverse";
    if (handle == 0) {
        checkBuffer(buffer, nullptr, direction);
        return; // one domain: nothing to exchange
    }
    std::shared_ptr<const RegisteredCommunicator> endpoint = CommunicatorRegistry::instance().find(handle);
    checkBuffer(buffer, endpoint.get(), direction);
    const OMMGraphCommunicator& engine = endpoint->communicator();
    char message[OMMGRAPH_COMM_MESSAGE_SIZE];
    message[0] = '\0';
    const int code = (isForward ? engine.forward : engine.reverse)(engine.userData, buffer, message, sizeof(message));
    if (code != 0) {
        message[sizeof(message) - 1] = '\0';
        throw CommunicateError(OMMGRAPH_COMM_ERROR_ENGINE, endpoint->description() + ": the engine's " + direction +
                                                               " callback failed (code " + std::to_string(code) +
                                                               "): " + (message[0] ? message : "(no message)"));
    }
}

} // namespace

extern "C" {

OMMGRAPH_COMM_EXPORT int ommgraph_communicator_register(const OMMGraphCommunicator* communicator, int64_t* handle) {
    return guarded([&] {
        if (!communicator || !handle)
            throw CommunicateError(OMMGRAPH_COMM_ERROR_ARGUMENT, std::string("ommgraph_communicator_register: ") +
                                                                     (communicator ? "handle" : "communicator") + " is NULL");
        *handle = CommunicatorRegistry::instance().add(*communicator);
    });
}

OMMGRAPH_COMM_EXPORT int ommgraph_communicator_unregister(int64_t handle) {
    return guarded([&] { CommunicatorRegistry::instance().remove(handle); });
}

OMMGRAPH_COMM_EXPORT int ommgraph_communicate_forward(int64_t handle, const OMMGraphCommBuffer* buffer) {
    return guarded([&] { communicate(handle, buffer, true); });
}

OMMGRAPH_COMM_EXPORT int ommgraph_communicate_reverse(int64_t handle, const OMMGraphCommBuffer* buffer) {
    return guarded([&] { communicate(handle, buffer, false); });
}

OMMGRAPH_COMM_EXPORT int ommgraph_communicator_is_registered(int64_t handle) {
    return CommunicatorRegistry::instance().contains(handle) ? 1 : 0;
}

OMMGRAPH_COMM_EXPORT const char* ommgraph_communicator_last_error(void) {
    return communicateLastError();
}

} // extern "C"
