#include "CudaStateViewProvider.h"
#include "DLPackError.h"
#include <dlfcn.h>
#include <mutex>

using namespace GraphPlugin;
using namespace OpenMM;

namespace {

const size_t MessageSize = 1024;

/** A symbol of the CUDA plugin: in the global namespace (OpenMM loads plugins RTLD_GLOBAL), else in the plugin by name. */
void* findPluginSymbol(const char* name) {
    if (void* symbol = dlsym(RTLD_DEFAULT, name))
        return symbol;
    void* library = dlopen("libOpenMMGraphCUDA.so", RTLD_LAZY | RTLD_NOLOAD);
    if (library == nullptr)
        return nullptr;
    void* symbol = dlsym(library, name);
    dlclose(library); // drops only the reference RTLD_NOLOAD took
    return symbol;
}

/** The plugin's functions; looked up again on each call until found (the plugin may be loaded later), then kept. */
CudaStateViewProvider::PluginFunctions findPlugin() {
    static std::mutex mutex;
    static CudaStateViewProvider::PluginFunctions found;
    std::lock_guard<std::mutex> lock(mutex);
    if (found.describe == nullptr) {
        CudaStateViewProvider::PluginFunctions functions;
        functions.describe = reinterpret_cast<OMMGraphCudaDescribeViewFunction>(findPluginSymbol(OMMGRAPH_CUDA_DESCRIBE_VIEW_SYMBOL));
        functions.synchronize =
            reinterpret_cast<OMMGraphCudaSynchronizeStreamFunction>(findPluginSymbol(OMMGRAPH_CUDA_SYNCHRONIZE_STREAM_SYMBOL));
        functions.copy = reinterpret_cast<OMMGraphCudaCopyFunction>(findPluginSymbol(OMMGRAPH_CUDA_COPY_SYMBOL));
        functions.free = reinterpret_cast<OMMGraphCudaFreeFunction>(findPluginSymbol(OMMGRAPH_CUDA_FREE_SYMBOL));
        if (functions.describe && functions.synchronize && functions.copy && functions.free)
            found = functions;
    }
    return found;
}

/** Turn a nonzero status of a plugin function into the one error path. */
void check(int status, const char* message) {
    if (status != OMMGRAPH_OK)
        throw DLPackError((OMMGraphStatus) status, message[0] != '\0' ? message : "the CUDA plugin reported an error without a message");
}

void freeDeviceCopy(void* handle, void* data) {
    // The copy was made only after the plugin's functions were found, so they are there.
    findPlugin().free(handle, data);
}

} // namespace

CudaStateViewProvider::CudaStateViewProvider(ContextImpl& context) : context(context), plugin(findPlugin()) {
    if (plugin.describe == nullptr)
        throw DLPackError(OMMGRAPH_ERROR_PLATFORM,
                          "the Context runs on the CUDA platform but openmm-graph's CUDA plugin (libOpenMMGraphCUDA.so) is not loaded in "
                          "this process; load it first (Python: import openmmgraph; C++: Platform::loadPluginsFromDirectory on "
                          "openmmgraph's plugin folder)");
}

StateView CudaStateViewProvider::describe(int view) {
    if (view == OMMGRAPH_VIEW_BOX)
        return boxView(context);
    StateView result;
    result.layout.structSize = sizeof(OMMGraphViewDescriptor);
    char message[MessageSize] = "";
    check(plugin.describe(&context, view, &result.layout, message, MessageSize), message);
    result.readOnly = view == OMMGRAPH_VIEW_ATOM_ORDER;
    return result;
}

void CudaStateViewProvider::synchronize(uintptr_t consumerStream) {
    char message[MessageSize] = "";
    check(plugin.synchronize(&context, consumerStream, message, MessageSize), message);
}

uintptr_t CudaStateViewProvider::stream() {
    static auto currentStream = reinterpret_cast<OMMGraphCudaCurrentStreamFunction>(findPluginSymbol(OMMGRAPH_CUDA_CURRENT_STREAM_SYMBOL));
    if (currentStream == nullptr)
        throw DLPackError(OMMGRAPH_ERROR_PLATFORM, "the CUDA plugin of openmm-graph has no " OMMGRAPH_CUDA_CURRENT_STREAM_SYMBOL
                                                   " (an older build?)");
    char message[MessageSize] = "";
    uintptr_t result = 0;
    check(currentStream(&context, &result, message, MessageSize), message);
    return result;
}

DLDevice CudaStateViewProvider::device() {
    StateView positions = describe(OMMGRAPH_VIEW_POSITIONS);
    return DLDevice{(DLDeviceType) positions.layout.deviceType, positions.layout.deviceId};
}

OwnedBuffer CudaStateViewProvider::copyDeviceMemory(const OMMGraphViewDescriptor& source, bool toHost) {
    void* copy = nullptr;
    void* cudaContext = nullptr;
    char message[MessageSize] = "";
    check(plugin.copy(&context, &source, toHost ? 1 : 0, &copy, &cudaContext, message, MessageSize), message);
    if (toHost)
        return OwnedBuffer::adoptHost(copy);
    return OwnedBuffer(copy, freeDeviceCopy, cudaContext);
}
