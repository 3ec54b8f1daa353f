#include "internal/GraphForceImpl.h"
#include "GraphKernels.h"
#include "internal/GraphModel.h"
#include "openmm/OpenMMException.h"
#include "openmm/internal/ContextImpl.h"
#include <algorithm>
#include <cmath>
#include <sstream>

using namespace GraphPlugin;
using namespace OpenMM;

GraphForceImpl::GraphForceImpl(const GraphForce& owner) : owner(owner) {}

void GraphForceImpl::validate(const GraphForce& force, const System& system) {
    int numSystemParticles = system.getNumParticles();
    std::vector<int> owner(numSystemParticles, -1);
    for (int i = 0; i < force.getNumParticles(); i++) {
        int particle, type;
        force.getParticleParameters(i, particle, type);
        if (particle < 0 || particle >= numSystemParticles)
            throw OpenMMException("GraphForce: particle " + std::to_string(i) + " of the force refers to System particle " +
                                  std::to_string(particle) + ", but the System has " + std::to_string(numSystemParticles) + " particles");
        if (owner[particle] != -1)
            throw OpenMMException("GraphForce: System particle " + std::to_string(particle) + " was added twice (as particles " +
                                  std::to_string(owner[particle]) + " and " + std::to_string(i) + " of the force)");
        owner[particle] = i;
        if (type < 0 || type >= force.getNumTypes())
            throw OpenMMException("GraphForce: particle " + std::to_string(i) + " has type " + std::to_string(type) +
                                  ", out of range: the model has " + std::to_string(force.getNumTypes()) + " types");
    }
    if (force.usesPeriodicBoundaryConditions()) {
        Vec3 a, b, c;
        system.getDefaultPeriodicBoxVectors(a, b, c);
        checkCutoffFitsBox(force.getCutoff(), a, b, c);
    }
}

void GraphForceImpl::checkCutoffFitsBox(double cutoff, const Vec3& a, const Vec3& b, const Vec3& c) {
    // OpenMM accepts NaN and +inf box components; a NaN fails every comparison below and an infinite box would drop
    // every pair (the energy of isolated particles, no error), so both are refused here by name.
    const Vec3* vectors[3] = {&a, &b, &c};
    for (int v = 0; v < 3; v++) {
        const Vec3& vector = *vectors[v];
        if (!std::isfinite(vector[0]) || !std::isfinite(vector[1]) || !std::isfinite(vector[2])) {
            std::stringstream s;
            s.precision(15);
            s << "GraphForce: the periodic box vector "
              << "abc"[v] << " = (" << vector[0] << ", " << vector[1] << ", " << vector[2]
              << ") nm is not finite; set finite box vectors (Context.setPeriodicBoxVectors or the System's default box)";
            throw OpenMMException(s.str());
        }
    }
    const double smallest = std::min(a[0], std::min(b[1], c[2]));
    if (!(cutoff <= 0.5 * smallest * (1 + 1e-12))) {
        std::stringstream s;
        s.precision(15);
        s << "GraphForce: the model's cut-off (" << cutoff
          << " nm) is larger than half the smallest height of the periodic box, min(a_x, b_y, c_z) (" << 0.5 * smallest
          << " nm); use a box at least " << 2 * cutoff << " nm in every direction or a model with a shorter cut-off";
        throw OpenMMException(s.str());
    }
}

namespace {

std::string kernelNameFor(const GraphForce& force) {
    return force.getModel()->kind == ModelKind::Native ? CalcGraphForceKernel::Name() : CalcTorchGraphForceKernel::Name();
}

} // namespace

void GraphForceImpl::initialize(ContextImpl& context) {
    validate(owner, context.getSystem());
    const std::string name = kernelNameFor(owner);
    if (!context.getPlatform().supportsKernels({name}))
        throw OpenMMException(name == CalcTorchGraphForceKernel::Name()
                                  ? "GraphForce: this is a PyTorch model (TorchScript or AOTInductor) and the " + context.getPlatform().getName() +
                                        " platform has no LibTorch kernel for it: load the LibTorch plugin (libOpenMMGraphTorch; `import "
                                        "openmmgraph` loads it when torch is installed) or use the Reference or CPU platform"
                                  : "GraphForce: the " + context.getPlatform().getName() + " platform has no GraphForce kernel");
    kernel = context.getPlatform().createKernel(name, context);
    kernel.getAs<CalcGraphForceKernel>().initialize(context.getSystem(), owner);
    initialPeriodic = owner.usesPeriodicBoundaryConditions();
    initialProperties.clear();
    for (const std::string& key : GraphForce::getPropertyKeys())
        initialProperties[key] = owner.getProperty(key);
}

double GraphForceImpl::calcForcesAndEnergy(ContextImpl& context, bool includeForces, bool includeEnergy, int groups) {
    if ((groups & (1 << owner.getForceGroup())) != 0)
        return kernel.getAs<CalcGraphForceKernel>().execute(context, includeForces, includeEnergy);
    return 0.0;
}

std::vector<std::string> GraphForceImpl::getKernelNames() {
    return {kernelNameFor(owner)};
}

void GraphForceImpl::updateParametersInContext(ContextImpl& context) {
    const std::string where = "GraphForce: updateParametersInContext: ";
    const std::string only = "; only types can change (reinitialize the Context to change it)";
    auto onOff = [](bool value) { return std::string(value ? "true" : "false"); };
    if (owner.usesPeriodicBoundaryConditions() != initialPeriodic)
        throw OpenMMException(where + "usesPeriodicBoundaryConditions changed from " + onOff(initialPeriodic) + " to " +
                              onOff(owner.usesPeriodicBoundaryConditions()) + only);
    for (const auto& entry : initialProperties) {
        const std::string now = owner.getProperty(entry.first);
        if (now != entry.second)
            throw OpenMMException(where + "property " + entry.first + " changed from \"" + entry.second + "\" to \"" + now + "\"" + only);
    }
    kernel.getAs<CalcGraphForceKernel>().copyParametersToContext(context, owner);
    context.systemChanged();
}

std::vector<double> GraphForceImpl::getParticleEnergies(ContextImpl& context) {
    std::vector<double> energies;
    kernel.getAs<CalcGraphForceKernel>().getParticleEnergies(context, energies);
    if (initialProperties.at("CheckFinite") != "false")
        for (size_t i = 0; i < energies.size(); i++)
            if (!std::isfinite(energies[i])) {
                int particle, type;
                owner.getParticleParameters((int) i, particle, type);
                throw OpenMMException("GraphForce: the energy of particle " + std::to_string(i) + " (System particle " +
                                      std::to_string(particle) + ") is not finite (" + std::to_string(energies[i]) +
                                      "); check the positions and the model");
            }
    return energies;
}
