#ifndef OPENMM_GRAPH_COMMUNICATE_ERROR_H_
#define OPENMM_GRAPH_COMMUNICATE_ERROR_H_

#include "OpenMMGraphCommunicate.h"
#include <stdexcept>
#include <string>

namespace GraphPlugin {

/**
 * The one failure of the communicate C library: an OMMGraphCommStatus and the
 * reason (what is wrong and what to do).  Thrown inside the library only; the
 * C entry points turn it into their return value and this thread's
 * last-error message "openmm-graph communicate: <reason>".
 */
class CommunicateError : public std::runtime_error {
public:
    CommunicateError(OMMGraphCommStatus status, const std::string& reason) : std::runtime_error(reason), status_(status) {}
    OMMGraphCommStatus status() const {
        return status_;
    }

private:
    OMMGraphCommStatus status_;
};

/** Set this thread's last-error message to "openmm-graph communicate: <reason>". */
void setCommunicateLastError(const std::string& reason);

/** Clear this thread's last-error message (every successful call does). */
void clearCommunicateLastError();

/** This thread's last-error message ("" after a success); valid until the thread's next call. */
const char* communicateLastError();

} // namespace GraphPlugin

#endif
