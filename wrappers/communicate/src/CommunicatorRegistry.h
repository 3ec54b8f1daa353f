#ifndef OPENMM_GRAPH_COMMUNICATOR_REGISTRY_H_
#define OPENMM_GRAPH_COMMUNICATOR_REGISTRY_H_

#include "RegisteredCommunicator.h"
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace GraphPlugin {

/**
 * The process-wide table handle -> registered endpoint.  Handles are positive
 * and never reused; 0 is reserved for "one domain, no engine".  Every member
 * is thread-safe; callbacks are never called with the table's lock held (a
 * call takes a shared reference to its endpoint and runs unlocked).
 */
class CommunicatorRegistry {
public:
    /** The one registry of the process. */
    static CommunicatorRegistry& instance();

    /** Check and copy `communicator`, return its new handle.  Throws CommunicateError (ARGUMENT). */
    int64_t add(const OMMGraphCommunicator& communicator);

    /** Remove `handle`; its endpoint is destroyed (release called) once no call holds it.  Throws CommunicateError (HANDLE). */
    void remove(int64_t handle);

    /** The endpoint of `handle` (> 0), held for the duration of a call.  Throws CommunicateError (HANDLE). */
    std::shared_ptr<const RegisteredCommunicator> find(int64_t handle) const;

    /** Whether `handle` is registered now (no error). */
    bool contains(int64_t handle) const;

private:
    CommunicatorRegistry() = default;
    mutable std::mutex mutex_;
    int64_t nextHandle_ = 1;
    std::unordered_map<int64_t, std::shared_ptr<const RegisteredCommunicator>> endpoints_;
};

} // namespace GraphPlugin

#endif
