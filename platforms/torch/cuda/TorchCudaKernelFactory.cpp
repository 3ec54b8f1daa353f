#include "TorchCudaKernelFactory.h"
#include "CudaCalcTorchGraphForceKernel.h"
#include "internal/windowsExportGraph.h"
#include "openmm/OpenMMException.h"
#include "openmm/cuda/CudaPlatform.h"
#include "openmm/internal/ContextImpl.h"

using namespace GraphPlugin;
using namespace OpenMM;

namespace {

/** Registers the kernel of PyTorch models with the CUDA platform when it is present. */
void registerTorchCudaKernels() {
    for (int i = 0; i < Platform::getNumPlatforms(); i++) {
        Platform& platform = Platform::getPlatform(i);
        if (platform.getName() == "CUDA" && !platform.supportsKernels({CalcTorchGraphForceKernel::Name()}))
            platform.registerKernelFactory(CalcTorchGraphForceKernel::Name(), new TorchCudaKernelFactory());
    }
}

} // namespace

extern "C" OPENMM_EXPORT_GRAPH void registerPlatforms() {}

// As in the other plugins: OpenMM's plugin loading calls registerKernelFactories
// in each library it loads; programs that link the library call the unique name.
extern "C" OPENMM_EXPORT_GRAPH void registerKernelFactories() {
    registerTorchCudaKernels();
}

extern "C" OPENMM_EXPORT_GRAPH void registerGraphTorchCudaKernelFactories() {
    registerTorchCudaKernels();
}

KernelImpl* TorchCudaKernelFactory::createKernelImpl(std::string name, const Platform& platform, ContextImpl& context) const {
    CudaPlatform::PlatformData& data = *static_cast<CudaPlatform::PlatformData*>(context.getPlatformData());
    if (name == CalcTorchGraphForceKernel::Name())
        return new CudaCalcTorchGraphForceKernel(name, platform, *data.contexts[0], (int) data.contexts.size());
    throw OpenMMException("GraphForce: the LibTorch CUDA plugin has no kernel named '" + name + "'");
}
