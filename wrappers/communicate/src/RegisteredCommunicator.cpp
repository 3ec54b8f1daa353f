#include "RegisteredCommunicator.h"

namespace GraphPlugin {

RegisteredCommunicator::RegisteredCommunicator(int64_t handle, const OMMGraphCommunicator& communicator)
    : handle_(handle), communicator_(communicator), name_(communicator.name ? communicator.name : "") {
    communicator_.name = name_.c_str();
    description_ = "communicator " + std::to_string(handle);
    if (!name_.empty())
        description_ += " ('" + name_ + "')";
}

RegisteredCommunicator::~RegisteredCommunicator() {
    if (communicator_.release)
        communicator_.release(communicator_.userData);
}

} // namespace GraphPlugin
