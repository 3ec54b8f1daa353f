#ifndef OPENMM_GRAPH_STATE_VIEW_PROVIDER_H_
#define OPENMM_GRAPH_STATE_VIEW_PROVIDER_H_

#include "GraphDLPackABI.h"
#include "StateView.h"
#include "openmm/internal/ContextImpl.h"
#include <cstdint>
#include <memory>

namespace GraphPlugin {

/**
 * Where a platform keeps a Context's state: one implementation per kind of
 * platform (host memory of the Reference and CPU platforms, device memory of
 * the CUDA platform).  Every failure is a DLPackError.
 */
class StateViewProvider {
public:
    /**
     * The provider for the Context's platform: Reference and CPU (host), CUDA
     * (through the CUDA plugin, which must be loaded).  Anything else is an
     * OMMGRAPH_ERROR_PLATFORM.
     */
    static std::unique_ptr<StateViewProvider> forContext(OpenMM::ContextImpl& context);

    virtual ~StateViewProvider() = default;

    /**
     * The layout and memory of `view` (a valid OMMGraphView), without copying
     * OpenMM's arrays and without synchronising.  Views that are not an OpenMM
     * array (BOX, the host ATOM_ORDER) come in memory the view owns.
     */
    virtual StateView describe(int view) = 0;

    /**
     * An owned copy of `source`'s elements: in host memory when toHost is set
     * or the source is host memory, else in new device memory on the source's
     * device.  Complete when it returns (device copies synchronise OpenMM's stream).
     */
    StateView copy(const StateView& source, bool toHost);

    /** Make consumerStream wait for OpenMM's queued work (a no-op on host platforms). */
    virtual void synchronize(uintptr_t consumerStream) = 0;

    /** The device of the views of OpenMM's arrays. */
    virtual DLDevice device() = 0;

    /** OpenMM's current stream (a CUstream) on device platforms, 0 on host platforms. */
    virtual uintptr_t stream() {
        return 0;
    }

    /** The size in bytes of a compact view. */
    static size_t byteSize(const OMMGraphViewDescriptor& layout);

protected:
    /** A copy of device memory (only device providers have any); the default throws. */
    virtual OwnedBuffer copyDeviceMemory(const OMMGraphViewDescriptor& source, bool toHost);

    /** The BOX view, float64 [3][3] in host memory owned by the view: rows a, b, c in nm. */
    static StateView boxView(OpenMM::ContextImpl& context);

    /** A compact row-major layout of host memory: [rows][columns], or [rows] when columns is 0. */
    static OMMGraphViewDescriptor hostLayout(void* data, uint8_t dtypeCode, uint8_t dtypeBits, int64_t rows, int64_t columns);
};

} // namespace GraphPlugin

#endif
