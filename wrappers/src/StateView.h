#ifndef OPENMM_GRAPH_STATE_VIEW_H_
#define OPENMM_GRAPH_STATE_VIEW_H_

#include "GraphDLPackABI.h"
#include "OwnedBuffer.h"
#include "internal/GraphViewDescriptor.h"

namespace GraphPlugin {

/**
 * One view of a Context's state before it becomes a DLPack tensor: where the
 * elements are and their layout, and the memory the tensor will own when the
 * view is not OpenMM's own array (the box, the host ATOM_ORDER, any copy).
 */
struct StateView {
    OMMGraphViewDescriptor layout{};
    OwnedBuffer owned;     ///< empty for a zero-copy view; else layout.data points into it
    bool readOnly = false; ///< writes would not reach the Context (ATOM_ORDER, BOX)
};

/**
 * The DLTensor of a view's layout, with its shape and strides copied into
 * shape[] and strides[] (OMMGRAPH_VIEW_MAX_DIMS each), which must outlive it.
 */
inline DLTensor dlTensorOf(const OMMGraphViewDescriptor& layout, int64_t* shape, int64_t* strides) {
    for (int i = 0; i < layout.ndim; i++) {
        shape[i] = layout.shape[i];
        strides[i] = layout.strides[i];
    }
    DLTensor tensor{};
    tensor.data = layout.data;
    tensor.device = DLDevice{(DLDeviceType) layout.deviceType, layout.deviceId};
    tensor.ndim = layout.ndim;
    tensor.dtype = DLDataType{layout.dtypeCode, layout.dtypeBits, 1};
    tensor.shape = shape;
    tensor.strides = strides;
    tensor.byte_offset = 0;
    return tensor;
}

} // namespace GraphPlugin

#endif
