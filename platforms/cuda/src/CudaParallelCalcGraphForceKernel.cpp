#include "CudaParallelCalcGraphForceKernel.h"
#include "CudaGraphErrors.h"
#include "openmm/OpenMMException.h"
#include "openmm/common/ContextSelector.h"
#include "openmm/internal/ContextImpl.h"

using namespace GraphPlugin;
using namespace OpenMM;

class CudaParallelCalcGraphForceKernel::OrderListener : public ComputeContext::ReorderListener {
public:
    explicit OrderListener(std::shared_ptr<OrderVersion> version) : version(version) {}
    void execute() override {
        version->value++;
    }

private:
    std::shared_ptr<OrderVersion> version;
};

/** One device's share of an evaluation, run on that device's worker thread. */
class CudaParallelCalcGraphForceKernel::Task : public ComputeContext::WorkTask {
public:
    Task(CudaParallelCalcGraphForceKernel& owner, ContextImpl& context, int device, bool includeForces, bool includeEnergy)
        : owner(owner), context(context), device(device), includeForces(includeForces), includeEnergy(includeEnergy) {}
    void execute() override {
        // Only OpenMMException crosses OpenMM's worker threads.
        try {
            ContextSelector selector(*owner.data.contexts[device]);
            owner.refreshAtomOrder(device);
            owner.share(device).execute(context, includeForces, includeEnergy);
        }
        catch (const OpenMMException&) {
            throw;
        }
        catch (const std::exception& error) {
            throw OpenMMException(std::string("GraphForce: on device ") + std::to_string(device) + ": " + error.what());
        }
    }

private:
    CudaParallelCalcGraphForceKernel& owner;
    ContextImpl& context;
    int device;
    bool includeForces, includeEnergy;
};

CudaParallelCalcGraphForceKernel::CudaParallelCalcGraphForceKernel(std::string name, const Platform& platform,
                                                                   CudaPlatform::PlatformData& data)
    : CalcGraphForceKernel(name, platform), data(data), orderVersion(std::make_shared<OrderVersion>()) {}

void CudaParallelCalcGraphForceKernel::initialize(const System& system, const GraphForce& force) {
    const int numDevices = force.getModel()->numInteractions == 0 ? (int) data.contexts.size() : 1;
    CudaContext& first = *data.contexts[0];
    for (int device = 0; device < numDevices; device++) {
        CudaCalcGraphForceKernel* kernel = new CudaCalcGraphForceKernel(getName(), getPlatform(), *data.contexts[device], device,
                                                                        numDevices, device == 0 ? nullptr : &first);
        kernels.emplace_back(kernel);
        kernel->initialize(system, force);
    }
    seenVersion.assign(numDevices, 0);
    first.addReorderListener(new OrderListener(orderVersion));
}

void CudaParallelCalcGraphForceKernel::refreshAtomOrder(int device) {
    const long long version = orderVersion->value;
    if (device == 0 || seenVersion[device] == version)
        return;
    share(device).setAtomOrder(data.contexts[0]->getAtomIndex());
    seenVersion[device] = version;
}

double CudaParallelCalcGraphForceKernel::execute(ContextImpl& context, bool includeForces, bool includeEnergy) {
    for (int device = 0; device < (int) kernels.size(); device++)
        data.contexts[device]->getWorkThread().addTask(new Task(*this, context, device, includeForces, includeEnergy));
    return 0.0; // each share's energy goes into its own context's energy buffer
}

void CudaParallelCalcGraphForceKernel::getParticleEnergies(ContextImpl& context, std::vector<double>& energies) {
    // Outside an evaluation only the first context holds current positions: copy them to the others first.
    data.syncContexts();
    CudaContext& first = *data.contexts[0];
    energies.clear();
    std::vector<double> shareEnergies;
    for (int device = 0; device < (int) kernels.size(); device++) {
        CudaContext& cu = *data.contexts[device];
        if (device > 0) {
            GRAPH_CU_CHECK(cuMemcpyPeer(cu.getPosq().getDevicePointer(), cu.getContext(), first.getPosq().getDevicePointer(),
                                        first.getContext(), first.getPosq().getSize() * first.getPosq().getElementSize()));
            ContextSelector selector(cu);
            refreshAtomOrder(device);
        }
        CudaCalcGraphForceKernel& kernel = share(device);
        kernel.getParticleEnergies(context, shareEnergies);
        if (energies.empty())
            energies.assign(shareEnergies.size(), 0.0);
        for (int i = kernel.getFirstCenter(); i < kernel.getFirstCenter() + kernel.getNumCenters(); i++)
            energies[i] = shareEnergies[i];
    }
}

void CudaParallelCalcGraphForceKernel::copyParametersToContext(ContextImpl& context, const GraphForce& force) {
    data.syncContexts();
    for (int device = 0; device < (int) kernels.size(); device++)
        share(device).copyParametersToContext(context, force);
}
