#include "CudaCalcGraphForceKernel.h"
#include "openmm/OpenMMException.h"

using namespace GraphPlugin;
using namespace OpenMM;

namespace {

[[noreturn]] void notInThisBuild() {
    throw OpenMMException("GraphForce: this build of openmm-graph has no CUDA implementation of GraphForce yet; "
                          "create the Context with the Reference or CPU platform (Platform.getPlatformByName('CPU'))");
}

} // namespace

void CudaCalcGraphForceKernel::initialize(const System& system, const GraphForce& force) {
    notInThisBuild();
}

double CudaCalcGraphForceKernel::execute(ContextImpl& context, bool includeForces, bool includeEnergy) {
    notInThisBuild();
}

void CudaCalcGraphForceKernel::getParticleEnergies(ContextImpl& context, std::vector<double>& energies) {
    notInThisBuild();
}

void CudaCalcGraphForceKernel::copyParametersToContext(ContextImpl& context, const GraphForce& force) {
    notInThisBuild();
}
