#ifndef OPENMM_GRAPH_CUDA_STATE_VIEW_PROVIDER_H_
#define OPENMM_GRAPH_CUDA_STATE_VIEW_PROVIDER_H_

#include "StateViewProvider.h"
#include "internal/GraphViewDescriptor.h"

namespace GraphPlugin {

/**
 * The state of a Context on the CUDA platform, in device memory, as the CUDA
 * plugin (libOpenMMGraphCUDA.so) describes it: this library does not link
 * CUDA, it finds the plugin's functions (internal/GraphViewDescriptor.h) in
 * the running process at first use.  Layouts: see OpenMMGraphDLPack.h; BOX is
 * the host copy of the Context's box on every platform.
 */
class CudaStateViewProvider : public StateViewProvider {
public:
    /** Throws DLPackError(OMMGRAPH_ERROR_PLATFORM) when the CUDA plugin is not loaded. */
    explicit CudaStateViewProvider(OpenMM::ContextImpl& context);
    StateView describe(int view) override;
    void synchronize(uintptr_t consumerStream) override;
    DLDevice device() override;
    uintptr_t stream() override;

    /** The plugin's functions, found once (all four, or none). */
    struct PluginFunctions {
        OMMGraphCudaDescribeViewFunction describe = nullptr;
        OMMGraphCudaSynchronizeStreamFunction synchronize = nullptr;
        OMMGraphCudaCopyFunction copy = nullptr;
        OMMGraphCudaFreeFunction free = nullptr;
    };

protected:
    OwnedBuffer copyDeviceMemory(const OMMGraphViewDescriptor& source, bool toHost) override;

private:
    OpenMM::ContextImpl& context;
    PluginFunctions plugin;
};

} // namespace GraphPlugin

#endif
