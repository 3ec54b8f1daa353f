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
    checkFinite = force.getProperty("CheckFinite") != "false"; // "deferred" checks at once here: nothing runs ahead
    domains.reset();
    if (force.getProperty("Domains") == "mpi")
        domains.reset(new ReferenceMpiDomains());
    int n = force.getNumParticles();
    particles.resize(n);
    types.resize(n);
    for (int i = 0; i < n; i++)
        force.getParticleParameters(i, particles[i], types[i]);
}

const Vec3* ReferenceCalcGraphForceKernel::buildGraph(ContextImpl& context) {
    return buildReferenceGraph(context, model->cutoff, periodic, particles, localPositions, graph);
}

double ReferenceCalcGraphForceKernel::execute(ContextImpl& context, bool includeForces, bool includeEnergy) {
    const Vec3* box = buildGraph(context);
    if (!evaluator)
        evaluator.reset(new ReferenceGraphEvaluator(model, &referencePlatformData(context).threads));
    const int n = (int) particles.size();
    localForces.assign(n, Vec3());
    double energy;
    if (domains) {
        // This rank's slab, then the sums over the ranks (every rank makes the same calls in the same order).
        const std::vector<int> owner = domains->ownerRanks(localPositions, box);
        const std::vector<char> owned = domains->ownedParticles(owner);
        // The interaction block's ghost node features come from their owners (the halo stays one cut-off wide).
        std::unique_ptr<ReferenceMpiDomains::Exchange> exchange;
        if (model->numInteractions == 1)
            exchange.reset(new ReferenceMpiDomains::Exchange(*domains, owner, graph));
        // A failure of this rank's evaluation joins the next sum as an error word: every rank throws, none waits.  Not
        // with an interaction block: its exchange makes collective calls of its own inside the evaluation, which a
        // failure before them would leave the other ranks waiting in (its own agreement covers its bad arguments).
        std::string failure;
        try {
            energy = evaluator->evaluate(types, graph, includeForces ? &localForces : nullptr, nullptr, &owned, exchange.get());
        }
        catch (const std::exception& error) {
            if (exchange)
                throw;
            failure = error.what();
            energy = 0;
        }
        if (includeForces)
            domains->sumForces(localForces, failure);
        else
            domains->agree(failure);
        energy = domains->sumEnergy(energy);
    }
    else
        energy = evaluator->evaluate(types, graph, includeForces ? &localForces : nullptr, nullptr);
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
