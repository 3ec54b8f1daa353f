#include "CudaGraphKernelFactory.h"
#include "CudaCalcGraphForceKernel.h"
#include "CudaParallelCalcGraphForceKernel.h"
#include "internal/windowsExportGraph.h"
#include "openmm/OpenMMException.h"
#include "openmm/cuda/CudaPlatform.h"
#include "openmm/internal/ContextImpl.h"

using namespace GraphPlugin;
using namespace OpenMM;

namespace {

/** Called by OpenMM's plugin loading: registers the kernels with the CUDA platform when it is present. */
void registerCudaKernels() {
    for (int i = 0; i < Platform::getNumPlatforms(); i++) {
        Platform& platform = Platform::getPlatform(i);
        if (platform.getName() == "CUDA" && !platform.supportsKernels({CalcGraphForceKernel::Name()}))
            platform.registerKernelFactory(CalcGraphForceKernel::Name(), new CudaGraphKernelFactory());
    }
}

} // namespace

extern "C" OPENMM_EXPORT_GRAPH void registerPlatforms() {}

// OpenMM's plugin loading looks this name up in each plugin library (dlsym on
// the library's own handle).  The uniquely named entry point below is for
// programs that link the library directly; both call the same internal
// function, so neither depends on which library's symbol wins interposition.
extern "C" OPENMM_EXPORT_GRAPH void registerKernelFactories() {
    registerCudaKernels();
}

extern "C" OPENMM_EXPORT_GRAPH void registerGraphCudaKernelFactories() {
    registerCudaKernels();
}

KernelImpl* CudaGraphKernelFactory::createKernelImpl(std::string name, const Platform& platform, ContextImpl& context) const {
    CudaPlatform::PlatformData& data = *static_cast<CudaPlatform::PlatformData*>(context.getPlatformData());
    CudaContext& cu = *data.contexts[0];
    if (name == CalcGraphForceKernel::Name()) {
        if (data.contexts.size() > 1)
            return new CudaParallelCalcGraphForceKernel(name, platform, data);
        return new CudaCalcGraphForceKernel(name, platform, cu);
    }
    throw OpenMMException("GraphForce: the CUDA platform has no kernel named '" + name + "'");
}
