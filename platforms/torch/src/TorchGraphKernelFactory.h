#ifndef OPENMM_GRAPH_TORCH_GRAPH_KERNEL_FACTORY_H_
#define OPENMM_GRAPH_TORCH_GRAPH_KERNEL_FACTORY_H_

#include "openmm/KernelFactory.h"

namespace GraphPlugin {

/** Creates the LibTorch GraphForce kernel (CalcTorchGraphForce) for the Reference and CPU platforms. */
class TorchGraphKernelFactory : public OpenMM::KernelFactory {
public:
    OpenMM::KernelImpl* createKernelImpl(std::string name, const OpenMM::Platform& platform, OpenMM::ContextImpl& context) const override;
};

} // namespace GraphPlugin

#endif
