#ifndef OPENMM_GRAPH_REGISTERED_COMMUNICATOR_H_
#define OPENMM_GRAPH_REGISTERED_COMMUNICATOR_H_

#include "OpenMMGraphCommunicate.h"
#include <cstdint>
#include <string>

namespace GraphPlugin {

/**
 * One registered endpoint: the engine's OMMGraphCommunicator copied at
 * registration (with its name), and the handle it got.  Shared (shared_ptr)
 * between the registry and the calls in flight; the destructor, which runs
 * when the handle is unregistered and the last call has returned, calls the
 * engine's `release` callback.
 */
class RegisteredCommunicator {
public:
    RegisteredCommunicator(int64_t handle, const OMMGraphCommunicator& communicator);
    ~RegisteredCommunicator();
    RegisteredCommunicator(const RegisteredCommunicator&) = delete;
    RegisteredCommunicator& operator=(const RegisteredCommunicator&) = delete;

    int64_t handle() const {
        return handle_;
    }
    const OMMGraphCommunicator& communicator() const {
        return communicator_;
    }
    /** "communicator 3 ('MPI rank 1 of 2')", or "communicator 3" without a name: the subject of error messages. */
    const std::string& description() const {
        return description_;
    }

private:
    int64_t handle_;
    OMMGraphCommunicator communicator_;
    std::string name_;
    std::string description_;
};

} // namespace GraphPlugin

#endif
