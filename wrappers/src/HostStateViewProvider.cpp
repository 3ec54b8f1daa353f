#include "HostStateViewProvider.h"
#include "DLPackError.h"
#include <cstdint>

using namespace GraphPlugin;
using namespace OpenMM;

static_assert(sizeof(Vec3) == 3 * sizeof(double), "a view of std::vector<Vec3> needs Vec3 to be three packed doubles");

HostStateViewProvider::HostStateViewProvider(ContextImpl& context)
    : context(context), data(*static_cast<ReferencePlatform::PlatformData*>(context.getPlatformData())),
      platformName(context.getPlatform().getName()) {}

StateView HostStateViewProvider::vectorView(std::vector<Vec3>& values) {
    StateView view;
    view.layout = hostLayout(values.empty() ? nullptr : &values[0][0], kDLFloat, 64, (int64_t) values.size(), 3);
    return view;
}

StateView HostStateViewProvider::describe(int view) {
    switch (view) {
    case OMMGRAPH_VIEW_POSITIONS:
        return vectorView(*data.positions);
    case OMMGRAPH_VIEW_VELOCITIES:
        return vectorView(*data.velocities);
    case OMMGRAPH_VIEW_FORCES:
        return vectorView(*data.forces);
    case OMMGRAPH_VIEW_ATOM_ORDER: {
        const int n = data.numParticles;
        StateView order;
        order.owned = OwnedBuffer::allocateHost((size_t) n * sizeof(int32_t));
        int32_t* index = static_cast<int32_t*>(order.owned.data());
        for (int i = 0; i < n; i++)
            index[i] = i;
        order.layout = hostLayout(index, kDLInt, 32, n, 0);
        order.readOnly = true;
        return order;
    }
    case OMMGRAPH_VIEW_BOX:
        return boxView(context);
    case OMMGRAPH_VIEW_POSITION_CORRECTION:
    default:
        throw DLPackError(OMMGRAPH_ERROR_UNAVAILABLE, "not available on the " + platformName +
                                                          " platform, which keeps positions in double precision (the correction "
                                                          "exists only on the CUDA platform in mixed precision)");
    }
}

void HostStateViewProvider::synchronize(uintptr_t) {
    // Host memory: every write OpenMM made is already visible.
}

DLDevice HostStateViewProvider::device() {
    return DLDevice{kDLCPU, 0};
}
