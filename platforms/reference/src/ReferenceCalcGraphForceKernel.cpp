#include "ReferenceCalcGraphForceKernel.h"
#include "openmm/OpenMMException.h"
#include "openmm/internal/ContextImpl.h"
#include "openmm/reference/ReferencePlatform.h"
#include <cmath>
#include <sstream>

using namespace GraphPlugin;
using namespace OpenMM;

namespace {

ReferencePlatform::PlatformData& platformData(ContextImpl& context) {
    return *reinterpret_cast<ReferencePlatform::PlatformData*>(context.getPlatformData());
}

} // namespace

void ReferenceCalcGraphForceKernel::initialize(const System& system, const GraphForce& force) {
    model = force.getModel();
    evaluator.reset();
    periodic = force.usesPeriodicBoundaryConditions();
    checkFinite = force.getProperty("CheckFinite") == "true";
    int n = force.getNumParticles();
    particles.resize(n);
    types.resize(n);
    for (int i = 0; i < n; i++)
        force.getParticleParameters(i, particles[i], types[i]);
}

void ReferenceCalcGraphForceKernel::buildGraph(ContextImpl& context) {
    ReferencePlatform::PlatformData& data = platformData(context);
    const std::vector<Vec3>& positions = *data.positions;
    const int n = (int) particles.size();
    localPositions.resize(n);
    for (int i = 0; i < n; i++) {
        localPositions[i] = positions[particles[i]];
        if (!std::isfinite(localPositions[i][0]) || !std::isfinite(localPositions[i][1]) || !std::isfinite(localPositions[i][2]))
            throw OpenMMException("GraphForce: the position of particle " + std::to_string(particles[i]) + " is not finite");
    }
    const Vec3* box = nullptr;
    if (periodic) {
        box = data.periodicBoxVectors;
        double smallest = std::min(box[0][0], std::min(box[1][1], box[2][2]));
        if (model->cutoff > 0.5 * smallest) {
            std::stringstream s;
            s << "GraphForce: the model's cut-off (" << model->cutoff
              << " nm) is larger than half the smallest height of the periodic box (" << 0.5 * smallest << " nm); the box must be at least "
              << 2 * model->cutoff << " nm in every direction";
            throw OpenMMException(s.str());
        }
    }
    graph.build(localPositions, box, model->cutoff, particles);
}

double ReferenceCalcGraphForceKernel::execute(ContextImpl& context, bool includeForces, bool includeEnergy) {
    buildGraph(context);
    if (!evaluator)
        evaluator.reset(new ReferenceGraphEvaluator(model, &platformData(context).threads));
    const int n = (int) particles.size();
    localForces.assign(n, Vec3());
    double energy = evaluator->evaluate(types, graph, includeForces ? &localForces : nullptr, nullptr);
    if (checkFinite) {
        if (!std::isfinite(energy))
            throw OpenMMException("GraphForce: the model's energy is not finite (" + std::to_string(energy) +
                                  "); check the positions and the model");
        for (int i = 0; i < n && includeForces; i++)
            if (!std::isfinite(localForces[i][0]) || !std::isfinite(localForces[i][1]) || !std::isfinite(localForces[i][2]))
                throw OpenMMException("GraphForce: the force on particle " + std::to_string(particles[i]) + " is not finite");
    }
    if (includeForces) {
        std::vector<Vec3>& forces = *platformData(context).forces;
        for (int i = 0; i < n; i++)
            forces[particles[i]] += localForces[i];
    }
    return energy;
}

void ReferenceCalcGraphForceKernel::getParticleEnergies(ContextImpl& context, std::vector<double>& energies) {
    buildGraph(context);
    if (!evaluator)
        evaluator.reset(new ReferenceGraphEvaluator(model, &platformData(context).threads));
    evaluator->evaluate(types, graph, nullptr, &energies);
}

void ReferenceCalcGraphForceKernel::copyParametersToContext(ContextImpl& context, const GraphForce& force) {
    if (force.getNumParticles() != (int) particles.size())
        throw OpenMMException("GraphForce: updateParametersInContext: the number of particles changed from " +
                              std::to_string(particles.size()) + " to " + std::to_string(force.getNumParticles()) +
                              "; only types can change (reinitialize the Context to change the particles)");
    for (int i = 0; i < force.getNumParticles(); i++) {
        int particle, type;
        force.getParticleParameters(i, particle, type);
        if (particle != particles[i])
            throw OpenMMException("GraphForce: updateParametersInContext: particle " + std::to_string(i) +
                                  " changed from System particle " + std::to_string(particles[i]) + " to " + std::to_string(particle) +
                                  "; only types can change (reinitialize the Context to change the particles)");
        if (type < 0 || type >= model->numTypes)
            throw OpenMMException("GraphForce: updateParametersInContext: particle " + std::to_string(i) + " has type " +
                                  std::to_string(type) + ", out of range: the model has " + std::to_string(model->numTypes) + " types");
        types[i] = type;
    }
}
