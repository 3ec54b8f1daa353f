#ifndef OPENMM_GRAPH_OWNED_BUFFER_H_
#define OPENMM_GRAPH_OWNED_BUFFER_H_

#include <cstddef>

namespace GraphPlugin {

/**
 * Memory that a tensor owns (a copy, or data made for the view such as the
 * box): host memory from malloc, or device memory with the function and
 * handle (the CUcontext) that free it.  Move-only; freed exactly once, by
 * reset() or the destructor.
 */
class OwnedBuffer {
public:
    /** Frees `data`; `handle` is what the allocator needs (the CUcontext of a device copy, else unused). */
    using ReleaseFunction = void (*)(void* handle, void* data);

    OwnedBuffer() = default;
    OwnedBuffer(void* data, ReleaseFunction release, void* handle) : data_(data), release_(release), handle_(handle) {}
    /** `bytes` of uninitialised host memory (at least one byte, so data() is never NULL); throws std::bad_alloc. */
    static OwnedBuffer allocateHost(size_t bytes);
    /** Takes ownership of host memory from malloc. */
    static OwnedBuffer adoptHost(void* data);

    OwnedBuffer(OwnedBuffer&& other) noexcept;
    OwnedBuffer& operator=(OwnedBuffer&& other) noexcept;
    OwnedBuffer(const OwnedBuffer&) = delete;
    OwnedBuffer& operator=(const OwnedBuffer&) = delete;
    ~OwnedBuffer() {
        reset();
    }

    void* data() const {
        return data_;
    }
    /** Free the memory now (idempotent). */
    void reset() noexcept;

private:
    void* data_ = nullptr;
    ReleaseFunction release_ = nullptr;
    void* handle_ = nullptr;
};

} // namespace GraphPlugin

#endif
