#ifndef OPENMM_GRAPH_REFERENCE_KERNEL_FACTORY_H_
#define OPENMM_GRAPH_REFERENCE_KERNEL_FACTORY_H_

#include "openmm/KernelFactory.h"

namespace GraphPlugin {

/** Creates the GraphForce kernels of the Reference and CPU platforms. */
class ReferenceGraphKernelFactory : public OpenMM::KernelFactory {
public:
    OpenMM::KernelImpl* createKernelImpl(std::string name, const OpenMM::Platform& platform, OpenMM::ContextImpl& context) const override;
};

} // namespace GraphPlugin

#endif
