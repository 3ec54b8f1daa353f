#include "CommunicatorRegistry.h"
#include "CommunicateError.h"
#include <string>

namespace GraphPlugin {

CommunicatorRegistry& CommunicatorRegistry::instance() {
    // Never destroyed: endpoints may still be held by calls on other threads at exit.
    static CommunicatorRegistry* registry = new CommunicatorRegistry();
    return *registry;
}

int64_t CommunicatorRegistry::add(const OMMGraphCommunicator& communicator) {
    if (communicator.version != OMMGRAPH_COMMUNICATOR_VERSION)
        throw CommunicateError(OMMGRAPH_COMM_ERROR_ARGUMENT, "OMMGraphCommunicator.version is " + std::to_string(communicator.version) +
                                                                 ", this library implements version " +
                                                                 std::to_string(OMMGRAPH_COMMUNICATOR_VERSION) +
                                                                 " (set it to OMMGRAPH_COMMUNICATOR_VERSION)");
    if (!communicator.forward || !communicator.reverse)
        throw CommunicateError(OMMGRAPH_COMM_ERROR_ARGUMENT, std::string("OMMGraphCommunicator.") +
                                                                 (communicator.forward ? "reverse" : "forward") +
                                                                 " is NULL; an engine supplies both callbacks");
    const uint32_t known = OMMGRAPH_COMM_SUPPORTS_CPU | OMMGRAPH_COMM_SUPPORTS_CUDA;
    if (communicator.deviceTypes == 0 || (communicator.deviceTypes & ~known) != 0)
        throw CommunicateError(OMMGRAPH_COMM_ERROR_ARGUMENT, "OMMGraphCommunicator.deviceTypes is " +
                                                                 std::to_string(communicator.deviceTypes) +
                                                                 "; expected a nonzero combination of OMMGRAPH_COMM_SUPPORTS_CPU (1) and "
                                                                 "OMMGRAPH_COMM_SUPPORTS_CUDA (2)");
    std::lock_guard<std::mutex> lock(mutex_);
    const int64_t handle = nextHandle_++;
    endpoints_.emplace(handle, std::make_shared<const RegisteredCommunicator>(handle, communicator));
    return handle;
}

void CommunicatorRegistry::remove(int64_t handle) {
    std::shared_ptr<const RegisteredCommunicator> removed; // destroyed (release called) after the lock is dropped
    {
        std::lock_guard<std::mutex> lock(mutex_);
        auto found = endpoints_.find(handle);
        if (found == endpoints_.end())
            throw CommunicateError(OMMGRAPH_COMM_ERROR_HANDLE,
                                   "cannot unregister handle " + std::to_string(handle) + ": it is not registered (already unregistered?)");
        removed = std::move(found->second);
        endpoints_.erase(found);
    }
}

std::shared_ptr<const RegisteredCommunicator> CommunicatorRegistry::find(int64_t handle) const {
    if (handle < 0)
        throw CommunicateError(OMMGRAPH_COMM_ERROR_HANDLE, "handle " + std::to_string(handle) +
                                                               " is negative; handles are 0 (one domain, no engine) or the positive "
                                                               "numbers ommgraph_communicator_register returns");
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = endpoints_.find(handle);
    if (found == endpoints_.end())
        throw CommunicateError(OMMGRAPH_COMM_ERROR_HANDLE, "handle " + std::to_string(handle) + " is not registered (" +
                                                               std::to_string(endpoints_.size()) +
                                                               " registered now; was it unregistered, or made in another process?); "
                                                               "0 means one domain, no engine");
    return found->second;
}

bool CommunicatorRegistry::contains(int64_t handle) const {
    if (handle == 0)
        return true;
    std::lock_guard<std::mutex> lock(mutex_);
    return endpoints_.count(handle) != 0;
}

} // namespace GraphPlugin
