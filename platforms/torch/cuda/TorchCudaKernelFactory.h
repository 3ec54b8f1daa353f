#ifndef OPENMM_GRAPH_TORCH_CUDA_KERNEL_FACTORY_H_
#define OPENMM_GRAPH_TORCH_CUDA_KERNEL_FACTORY_H_

#include "openmm/KernelFactory.h"

namespace GraphPlugin {

/** Creates the kernel of PyTorch models (CalcTorchGraphForce) on the CUDA platform. */
class TorchCudaKernelFactory : public OpenMM::KernelFactory {
public:
    OpenMM::KernelImpl* createKernelImpl(std::string name, const OpenMM::Platform& platform, OpenMM::ContextImpl& context) const override;
};

} // namespace GraphPlugin

#endif
