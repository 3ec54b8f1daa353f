#ifndef OPENMM_GRAPH_HOST_STATE_VIEW_PROVIDER_H_
#define OPENMM_GRAPH_HOST_STATE_VIEW_PROVIDER_H_

#include "StateViewProvider.h"
#include "openmm/reference/ReferencePlatform.h"
#include <string>

namespace GraphPlugin {

/**
 * The state of a Context on the Reference or CPU platform (both keep it in
 * ReferencePlatform::PlatformData): host memory, float64, System order.
 *  POSITIONS  [n][3] nm, VELOCITIES [n][3] nm/ps, FORCES [n][3] kJ/mol/nm:
 *             OpenMM's own std::vector<Vec3> storage (zero copy, writable);
 *  ATOM_ORDER int32 [n], the identity (owned copy, read-only);
 *  BOX        float64 [3][3] (owned copy, read-only);
 *  POSITION_CORRECTION does not exist (OMMGRAPH_ERROR_UNAVAILABLE).
 */
class HostStateViewProvider : public StateViewProvider {
public:
    explicit HostStateViewProvider(OpenMM::ContextImpl& context);
    StateView describe(int view) override;
    void synchronize(uintptr_t consumerStream) override;
    DLDevice device() override;

private:
    StateView vectorView(std::vector<OpenMM::Vec3>& values);
    OpenMM::ContextImpl& context;
    OpenMM::ReferencePlatform::PlatformData& data;
    std::string platformName;
};

} // namespace GraphPlugin

#endif
