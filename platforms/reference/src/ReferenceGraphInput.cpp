#include "ReferenceGraphInput.h"
#include "internal/GraphForceImpl.h"
#include "openmm/OpenMMException.h"
#include <cmath>

using namespace GraphPlugin;
using namespace OpenMM;

ReferencePlatform::PlatformData& GraphPlugin::referencePlatformData(ContextImpl& context) {
    return *reinterpret_cast<ReferencePlatform::PlatformData*>(context.getPlatformData());
}

const Vec3* GraphPlugin::buildReferenceGraph(ContextImpl& context, double cutoff, bool periodic, const std::vector<int>& particles,
                                             std::vector<Vec3>& localPositions, ReferenceNeighborGraph& graph) {
    ReferencePlatform::PlatformData& data = referencePlatformData(context);
    const std::vector<Vec3>& positions = *data.positions;
    const int n = (int) particles.size();
    localPositions.resize(n);
    for (int i = 0; i < n; i++) {
        localPositions[i] = positions[particles[i]];
        if (!std::isfinite(localPositions[i][0]) || !std::isfinite(localPositions[i][1]) || !std::isfinite(localPositions[i][2]))
            throw OpenMMException("GraphForce: the position of System particle " + std::to_string(particles[i]) + " is not finite");
    }
    const Vec3* box = nullptr;
    if (periodic) {
        box = data.periodicBoxVectors;
        GraphForceImpl::checkCutoffFitsBox(cutoff, box[0], box[1], box[2]);
    }
    graph.build(localPositions, box, cutoff, particles);
    return box;
}

void GraphPlugin::addReferenceForces(ContextImpl& context, const std::vector<int>& particles, const std::vector<Vec3>* localForces, double energy,
                                     bool checkFinite) {
    const int n = (int) particles.size();
    if (checkFinite) {
        if (!std::isfinite(energy))
            throw OpenMMException("GraphForce: the model's energy is not finite (" + std::to_string(energy) + "); check the positions and the model");
        for (int i = 0; i < n && localForces != nullptr; i++)
            if (!std::isfinite((*localForces)[i][0]) || !std::isfinite((*localForces)[i][1]) || !std::isfinite((*localForces)[i][2]))
                throw OpenMMException("GraphForce: the force on System particle " + std::to_string(particles[i]) + " is not finite");
    }
    if (localForces != nullptr) {
        std::vector<Vec3>& forces = *referencePlatformData(context).forces;
        for (int i = 0; i < n; i++)
            forces[particles[i]] += (*localForces)[i];
    }
}
