#include "ReferenceGraphKernelFactory.h"
#include "ReferenceCalcGraphForceKernel.h"
#include "internal/windowsExportGraph.h"
#include "openmm/OpenMMException.h"
#include "openmm/reference/ReferencePlatform.h"

using namespace GraphPlugin;
using namespace OpenMM;

namespace {

/**
 * Called by OpenMM's plugin loading (and by the tests): registers the kernels
 * with the Reference platform and every platform derived from it (CPU).
 */
void registerReferenceKernels() {
    for (int i = 0; i < Platform::getNumPlatforms(); i++) {
        Platform& platform = Platform::getPlatform(i);
        if (dynamic_cast<ReferencePlatform*>(&platform) != nullptr && !platform.supportsKernels({CalcGraphForceKernel::Name()}))
            platform.registerKernelFactory(CalcGraphForceKernel::Name(), new ReferenceGraphKernelFactory());
    }
}

} // namespace

extern "C" OPENMM_EXPORT_GRAPH void registerPlatforms() {}

// OpenMM's plugin loading looks this name up in each plugin library (dlsym on
// the library's own handle).  The uniquely named entry point below is for
// programs that link the library directly; both call the same internal
// function, so neither depends on which library's symbol wins interposition.
extern "C" OPENMM_EXPORT_GRAPH void registerKernelFactories() {
    registerReferenceKernels();
}

extern "C" OPENMM_EXPORT_GRAPH void registerGraphReferenceKernelFactories() {
    registerReferenceKernels();
}

KernelImpl* ReferenceGraphKernelFactory::createKernelImpl(std::string name, const Platform& platform, ContextImpl& context) const {
    if (name == CalcGraphForceKernel::Name())
        return new ReferenceCalcGraphForceKernel(name, platform);
    throw OpenMMException("GraphForce: the Reference platform has no kernel named '" + name + "'");
}
