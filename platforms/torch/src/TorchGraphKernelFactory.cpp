#include "TorchGraphKernelFactory.h"
#include "ReferenceCalcTorchGraphForceKernel.h"
#include "internal/windowsExportGraph.h"
#include "openmm/OpenMMException.h"
#include "openmm/reference/ReferencePlatform.h"

using namespace GraphPlugin;
using namespace OpenMM;

namespace {

/** Registers the LibTorch kernel with the Reference platform and every platform derived from it (CPU). */
void registerTorchKernels() {
    for (int i = 0; i < Platform::getNumPlatforms(); i++) {
        Platform& platform = Platform::getPlatform(i);
        if (dynamic_cast<ReferencePlatform*>(&platform) != nullptr && !platform.supportsKernels({CalcTorchGraphForceKernel::Name()}))
            platform.registerKernelFactory(CalcTorchGraphForceKernel::Name(), new TorchGraphKernelFactory());
    }
}

} // namespace

extern "C" OPENMM_EXPORT_GRAPH void registerPlatforms() {}

// As in the other plugins: OpenMM's plugin loading calls registerKernelFactories
// in each library it loads; programs that link the library call the unique name.
extern "C" OPENMM_EXPORT_GRAPH void registerKernelFactories() {
    registerTorchKernels();
}

extern "C" OPENMM_EXPORT_GRAPH void registerGraphTorchKernelFactories() {
    registerTorchKernels();
}

KernelImpl* TorchGraphKernelFactory::createKernelImpl(std::string name, const Platform& platform, ContextImpl& context) const {
    if (name == CalcTorchGraphForceKernel::Name())
        return new ReferenceCalcTorchGraphForceKernel(name, platform);
    throw OpenMMException("GraphForce: the LibTorch plugin has no kernel named '" + name + "'");
}
