#ifndef OPENMM_GRAPH_STATE_VIEW_H_
#define OPENMM_GRAPH_STATE_VIEW_H_

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

} // namespace GraphPlugin

#endif
