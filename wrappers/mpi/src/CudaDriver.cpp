#include "CudaDriver.h"

#include <cstdint>
#include <dlfcn.h>
#include <mutex>

namespace GraphMPI {

namespace {

// The layout of CUDA_MEMCPY2D (cuda.h, the _v2 API, unchanged since CUDA 3.2).
enum { kMemoryTypeHost = 1, kMemoryTypeDevice = 2 };
struct Memcpy2D {
    std::size_t srcXInBytes, srcY;
    int srcMemoryType;
    const void* srcHost;
    unsigned long long srcDevice;
    void* srcArray;
    std::size_t srcPitch;
    std::size_t dstXInBytes, dstY;
    int dstMemoryType;
    void* dstHost;
    unsigned long long dstDevice;
    void* dstArray;
    std::size_t dstPitch;
    std::size_t WidthInBytes, Height;
};
const unsigned int kHostAllocPortable = 1; // CU_MEMHOSTALLOC_PORTABLE

std::mutex loadMutex;
CudaDriver* instance = nullptr;
std::string loadError;

template <typename F> bool symbol(void* library, const char* name, F* function, std::string* why) {
    *function = reinterpret_cast<F>(dlsym(library, name));
    if (!*function) {
        *why = std::string("libcuda.so.1 has no ") + name;
        return false;
    }
    return true;
}

} // namespace

CudaDriver* CudaDriver::get(std::string* why) {
    std::lock_guard<std::mutex> lock(loadMutex);
    if (!instance && loadError.empty()) {
        CudaDriver* driver = new CudaDriver();
        if (driver->load(&loadError))
            instance = driver;
        else
            delete driver;
    }
    if (!instance)
        *why = loadError;
    return instance;
}

bool CudaDriver::load(std::string* why) {
    library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        const char* text = dlerror();
        *why = std::string("CUDA buffers need the CUDA driver, but libcuda.so.1 could not be loaded: ") + (text ? text : "");
        return false;
    }
    if (!symbol(library, "cuInit", &cuInit, why) || !symbol(library, "cuStreamSynchronize", &cuStreamSynchronize, why) ||
        !symbol(library, "cuMemcpy2DAsync_v2", &cuMemcpy2DAsync, why) || !symbol(library, "cuMemHostAlloc", &cuMemHostAlloc, why) ||
        !symbol(library, "cuMemFreeHost", &cuMemFreeHost, why) || !symbol(library, "cuGetErrorString", &cuGetErrorString, why))
        return false;
    const int result = cuInit(0);
    if (result != 0) {
        *why = error("cuInit", result);
        return false;
    }
    return true;
}

std::string CudaDriver::error(const char* call, int result) const {
    const char* text = nullptr;
    if (cuGetErrorString)
        cuGetErrorString(result, &text);
    return std::string(call) + " failed (CUresult " + std::to_string(result) + (text ? std::string(": ") + text : "") + ")";
}

bool CudaDriver::synchronize(void* stream, std::string* why) {
    const int result = cuStreamSynchronize(stream);
    if (result != 0)
        *why = error("cuStreamSynchronize", result);
    return result == 0;
}

bool CudaDriver::copy2D(bool toHost, void* host, std::size_t hostPitch, void* device, std::size_t devicePitch, std::size_t rowBytes,
                        std::size_t rows, void* stream, std::string* why) {
    if (rows == 0 || rowBytes == 0)
        return true;
    Memcpy2D copy = {};
    const unsigned long long devicePointer = static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(device));
    if (toHost) {
        copy.srcMemoryType = kMemoryTypeDevice;
        copy.srcDevice = devicePointer;
        copy.srcPitch = devicePitch;
        copy.dstMemoryType = kMemoryTypeHost;
        copy.dstHost = host;
        copy.dstPitch = hostPitch;
    }
    else {
        copy.srcMemoryType = kMemoryTypeHost;
        copy.srcHost = host;
        copy.srcPitch = hostPitch;
        copy.dstMemoryType = kMemoryTypeDevice;
        copy.dstDevice = devicePointer;
        copy.dstPitch = devicePitch;
    }
    copy.WidthInBytes = rowBytes;
    copy.Height = rows;
    const int result = cuMemcpy2DAsync(&copy, stream);
    if (result != 0)
        *why = error("cuMemcpy2DAsync", result);
    return result == 0;
}

bool CudaDriver::deviceToHost(void* host, std::size_t hostPitch, const void* device, std::size_t devicePitch, std::size_t rowBytes,
                              std::size_t rows, void* stream, std::string* why) {
    return copy2D(true, host, hostPitch, const_cast<void*>(device), devicePitch, rowBytes, rows, stream, why);
}

bool CudaDriver::hostToDevice(void* device, std::size_t devicePitch, const void* host, std::size_t hostPitch, std::size_t rowBytes,
                              std::size_t rows, void* stream, std::string* why) {
    return copy2D(false, const_cast<void*>(host), hostPitch, device, devicePitch, rowBytes, rows, stream, why);
}

void* CudaDriver::allocatePinned(std::size_t bytes, std::string* why) {
    void* pointer = nullptr;
    const int result = cuMemHostAlloc(&pointer, bytes, kHostAllocPortable);
    if (result != 0) {
        *why = error("cuMemHostAlloc", result);
        return nullptr;
    }
    return pointer;
}

void CudaDriver::freePinned(void* pointer) {
    if (pointer)
        cuMemFreeHost(pointer);
}

} // namespace GraphMPI
