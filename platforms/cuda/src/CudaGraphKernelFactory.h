#ifndef OPENMM_GRAPH_CUDA_KERNEL_FACTORY_H_
#define OPENMM_GRAPH_CUDA_KERNEL_FACTORY_H_

#include "openmm/KernelFactory.h"

namespace GraphPlugin {

/** Creates the GraphForce kernels of the CUDA platform. */
class CudaGraphKernelFactory : public OpenMM::KernelFactory {
public:
    OpenMM::KernelImpl* createKernelImpl(std::string name, const OpenMM::Platform& platform, OpenMM::ContextImpl& context) const override;
};

} // namespace GraphPlugin

#endif
