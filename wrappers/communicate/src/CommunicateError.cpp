#include "CommunicateError.h"

namespace GraphPlugin {

namespace {

thread_local std::string lastErrorMessage;

} // namespace

void setCommunicateLastError(const std::string& reason) {
    lastErrorMessage = "openmm-graph communicate: " + reason;
}

void clearCommunicateLastError() {
    lastErrorMessage.clear();
}

const char* communicateLastError() {
    return lastErrorMessage.c_str();
}

} // namespace GraphPlugin
