#ifndef OPENMM_GRAPH_BUFFER_CHECK_H_
#define OPENMM_GRAPH_BUFFER_CHECK_H_

#include "OpenMMGraphCommunicate.h"
#include "RegisteredCommunicator.h"

namespace GraphPlugin {

/**
 * Check an OMMGraphCommBuffer before it reaches an engine: known dtype and
 * device, nonnegative counts, rowStride >= numFeatures, data non-NULL when
 * there are elements, and a device the endpoint serves.  `direction` is
 * "forward" or "reverse" (for the message).  Throws CommunicateError
 * (ARGUMENT, or UNSUPPORTED for a device the engine does not serve).
 */
void checkBuffer(const OMMGraphCommBuffer* buffer, const RegisteredCommunicator* endpoint, const char* direction);

} // namespace GraphPlugin

#endif
