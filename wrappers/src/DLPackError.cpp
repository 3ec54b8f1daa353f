#include "DLPackError.h"

namespace GraphPlugin {

namespace {

thread_local std::string lastErrorMessage;

} // namespace

const char* viewName(int view) {
    switch (view) {
    case OMMGRAPH_VIEW_POSITIONS:
        return "POSITIONS";
    case OMMGRAPH_VIEW_POSITION_CORRECTION:
        return "POSITION_CORRECTION";
    case OMMGRAPH_VIEW_VELOCITIES:
        return "VELOCITIES";
    case OMMGRAPH_VIEW_FORCES:
        return "FORCES";
    case OMMGRAPH_VIEW_ATOM_ORDER:
        return "ATOM_ORDER";
    case OMMGRAPH_VIEW_BOX:
        return "BOX";
    default:
        return "";
    }
}

std::string viewSubject(int view) {
    const std::string name = viewName(view);
    return name.empty() ? "view " + std::to_string(view) : name + " view";
}

void setLastError(const std::string& subject, const std::string& reason) {
    lastErrorMessage = "openmm-graph DLPack: " + subject + ": " + reason;
}

void clearLastError() {
    lastErrorMessage.clear();
}

const char* lastError() {
    return lastErrorMessage.c_str();
}

} // namespace GraphPlugin
