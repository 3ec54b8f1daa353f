#include "OwnedBuffer.h"
#include <cstdlib>
#include <new>
#include <utility>

using namespace GraphPlugin;

namespace {

void freeHost(void*, void* data) {
    std::free(data);
}

} // namespace

OwnedBuffer OwnedBuffer::allocateHost(size_t bytes) {
    void* data = std::malloc(bytes > 0 ? bytes : 1);
    if (data == nullptr)
        throw std::bad_alloc();
    return OwnedBuffer(data, freeHost, nullptr);
}

OwnedBuffer OwnedBuffer::adoptHost(void* data) {
    return OwnedBuffer(data, freeHost, nullptr);
}

OwnedBuffer::OwnedBuffer(OwnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), release_(std::exchange(other.release_, nullptr)),
      handle_(std::exchange(other.handle_, nullptr)) {}

OwnedBuffer& OwnedBuffer::operator=(OwnedBuffer&& other) noexcept {
    if (this != &other) {
        reset();
        data_ = std::exchange(other.data_, nullptr);
        release_ = std::exchange(other.release_, nullptr);
        handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
}

void OwnedBuffer::reset() noexcept {
    if (data_ != nullptr && release_ != nullptr)
        release_(handle_, data_);
    data_ = nullptr;
    release_ = nullptr;
    handle_ = nullptr;
}
