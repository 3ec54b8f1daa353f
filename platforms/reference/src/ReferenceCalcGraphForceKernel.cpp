#include "ReferenceCalcGraphForceKernel.h"
#include "ReferenceGraphInput.h"
#include "openmm/OpenMMException.h"
#include "openmm/internal/ContextImpl.h"
#include "openmm/reference/ReferencePlatform.h"
#include <cmath>
#include <sstream>

using namespace GraphPlugin;
using namespace OpenMM;


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
    buildReferenceGraph(context, model->cutoff, periodic, particles, localPositions, graph);
}

double ReferenceCalcGraphForceKernel::execute(ContextImpl& context, bool includeForces, bool includeEnergy) {
    buildGraph(context);
    if (!evaluator)
        evaluator.reset(new ReferenceGraphEvaluator(model, &referencePlatformData(context).threads));
    const int n = (int) particles.size();
    localForces.assign(n, Vec3());
    double energy = evaluator->evaluate(types, graph, includeForces ? &localForces : nullptr, nullptr);
    addReferenceForces(context, particles, includeForces ? &localForces : nullptr, energy, checkFinite);
    return energy;
}

void ReferenceCalcGraphForceKernel::getParticleEnergies(ContextImpl& context, std::vector<double>& energies) {
    buildGraph(context);
    if (!evaluator)
        evaluator.reset(new ReferenceGraphEvaluator(model, &referencePlatformData(context).threads));
    evaluator->evaluate(types, graph, nullptr, &energies);
}

void ReferenceCalcGraphForceKernel::copyParametersToContext(ContextImpl& context, const GraphForce& force) {
    types = updatedTypes(force, particles);
}
