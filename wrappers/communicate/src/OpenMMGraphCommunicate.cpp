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

/**
 * An engine's message as valid UTF-8: a sequence cut by the message's size, or any other invalid byte, becomes '?'
 * (the message reaches Python as a str, where one bad byte replaced the whole error with a UnicodeDecodeError).
 */
std::string validUtf8(const char* text) {
    std::string result;
    const unsigned char* p = reinterpret_cast<const unsigned char*>(text);
    while (*p) {
        // A sequence's length and the range of its second byte (RFC 3629: no overlong forms, surrogates or code points
        // beyond U+10FFFF, which Python's decoder refuses too); later bytes are 0x80-0xBF.
        const unsigned char lead = *p;
        int length = 0;
        unsigned char low = 0x80, high = 0xBF;
        if (lead < 0x80)
            length = 1;
        else if (lead >= 0xC2 && lead <= 0xDF)
            length = 2;
        else if (lead >= 0xE0 && lead <= 0xEF) {
            length = 3;
            low = lead == 0xE0 ? 0xA0 : 0x80;
            high = lead == 0xED ? 0x9F : 0xBF;
        }
        else if (lead >= 0xF0 && lead <= 0xF4) {
            length = 4;
            low = lead == 0xF0 ? 0x90 : 0x80;
            high = lead == 0xF4 ? 0x8F : 0xBF;
        }
        bool valid = length > 0;
        for (int k = 1; k < length && valid; k++) // a zero byte (the end) is out of every range
            valid = k == 1 ? p[k] >= low && p[k] <= high : p[k] >= 0x80 && p[k] <= 0xBF;
        if (valid) {
            result.append(reinterpret_cast<const char*>(p), length);
            p += length;
        }
        else {
            result += '?';
            p++;
        }
    }
    return result;
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
                                                               "): " + (message[0] ? validUtf8(message) : "(no message)"));
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
