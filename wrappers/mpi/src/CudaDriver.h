/*
 * The few CUDA driver functions the staging of CUDA buffers needs, loaded at
 * run time from libcuda.so.1 (no CUDA headers or toolkit at build time, no
 * CUDA dependency for host-only runs).  Untested in CI (no GPU): see docs/mpi.md.
 */
#ifndef OPENMM_GRAPH_MPI_CUDA_DRIVER_H_
#define OPENMM_GRAPH_MPI_CUDA_DRIVER_H_

#include <cstddef>
#include <string>

namespace GraphMPI {

class CudaDriver {
public:
    /** The process-wide driver, or nullptr with *why set when libcuda cannot be loaded. */
    static CudaDriver* get(std::string* why);

    /** Wait for the work already enqueued on stream (a cudaStream_t as void*, NULL = legacy default). */
    bool synchronize(void* stream, std::string* why);
    /** Copy `rows` rows of `rowBytes` bytes between device memory with pitch devicePitch and host memory
     *  with pitch hostPitch, ordered on stream (2D copy: the padding of device rows is never touched). */
    bool deviceToHost(void* host, std::size_t hostPitch, const void* device, std::size_t devicePitch, std::size_t rowBytes,
                      std::size_t rows, void* stream, std::string* why);
    bool hostToDevice(void* device, std::size_t devicePitch, const void* host, std::size_t hostPitch, std::size_t rowBytes,
                      std::size_t rows, void* stream, std::string* why);
    /** Page-locked host memory (portable over contexts). */
    void* allocatePinned(std::size_t bytes, std::string* why);
    void freePinned(void* pointer);

private:
    CudaDriver() = default;
    bool load(std::string* why);
    std::string error(const char* call, int result) const;
    bool copy2D(bool toHost, void* host, std::size_t hostPitch, void* device, std::size_t devicePitch, std::size_t rowBytes,
                std::size_t rows, void* stream, std::string* why);

    void* library = nullptr;
    int (*cuInit)(unsigned int) = nullptr;
    int (*cuStreamSynchronize)(void*) = nullptr;
    int (*cuMemcpy2DAsync)(const void*, void*) = nullptr;
    int (*cuMemHostAlloc)(void**, std::size_t, unsigned int) = nullptr;
    int (*cuMemFreeHost)(void*) = nullptr;
    int (*cuGetErrorString)(int, const char**) = nullptr;
};

} // namespace GraphMPI

#endif
