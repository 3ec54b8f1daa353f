#ifndef OPENMM_GRAPH_DLPACK_ERROR_H_
#define OPENMM_GRAPH_DLPACK_ERROR_H_

#include "OpenMMGraphDLPack.h"
#include <stdexcept>
#include <string>

namespace GraphPlugin {

/**
 * The one failure of the DLPack layer: an OMMGraphStatus and the reason (what
 * is wrong and what to do).  Thrown inside the library only; the C entry points
 * turn it into their return value and the thread's last-error message
 * "openmm-graph DLPack: <subject>: <reason>".
 */
class DLPackError : public std::runtime_error {
public:
    DLPackError(OMMGraphStatus status, const std::string& reason) : std::runtime_error(reason), status_(status) {}
    OMMGraphStatus status() const {
        return status_;
    }

private:
    OMMGraphStatus status_;
};

/** The name of an OMMGraphView ("POSITIONS", ...), or "" for a number that is no view. */
const char* viewName(int view);

/** The subject of a view's error messages: "POSITIONS view", or "view 17" for an unknown number. */
std::string viewSubject(int view);

/** Set this thread's last-error message to "openmm-graph DLPack: <subject>: <reason>". */
void setLastError(const std::string& subject, const std::string& reason);

/** Clear this thread's last-error message (every successful call does). */
void clearLastError();

/** This thread's last-error message ("" if the last call succeeded); valid until the next call on this thread. */
const char* lastError();

} // namespace GraphPlugin

#endif
