#include "CudaParallelCalcGraphForceKernel.h"
#include "CudaGraphErrors.h"
#include "openmm/OpenMMException.h"
#include "openmm/common/ContextSelector.h"
#include "openmm/internal/ContextImpl.h"
#include <functional>

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

/** One device's part of an evaluation (or of the per-particle energies), run on that device's worker thread. */
class CudaParallelCalcGraphForceKernel::Task : public ComputeContext::WorkTask {
public:
    Task(CudaParallelCalcGraphForceKernel& owner, int device, std::function<void()> work) : owner(owner), device(device), work(work) {}
    void execute() override {
        // Only OpenMMException crosses OpenMM's worker threads; a failure also stops the other devices waiting at the exchange.
        try {
            ContextSelector selector(*owner.data.contexts[device]);
            work();
        }
        catch (const OpenMMException& error) {
            owner.abortExchange(error.what());
            throw;
        }
        catch (const std::exception& error) {
            const std::string message = std::string("GraphForce: on device ") + std::to_string(device) + ": " + error.what();
            owner.abortExchange(message);
            throw OpenMMException(message);
        }
    }

private:
    CudaParallelCalcGraphForceKernel& owner;
    int device;
    std::function<void()> work;
};

CudaParallelCalcGraphForceKernel::CudaParallelCalcGraphForceKernel(std::string name, const Platform& platform,
                                                                   CudaPlatform::PlatformData& data)
    : CalcGraphForceKernel(name, platform), data(data), orderVersion(std::make_shared<OrderVersion>()) {}

void CudaParallelCalcGraphForceKernel::initialize(const System& system, const GraphForce& force) {
    const int numDevices = (int) data.contexts.size();
    CudaContext& first = *data.contexts[0];
    // The devices' shares of the centers, as each CudaCalcGraphForceKernel computes them.  The exchange carries the
    // interaction block's node features between them, and is the devices' meeting point before each evaluation.
    std::vector<int> firstCenter, numCenters;
    centerShares(force.getNumParticles(), numDevices, firstCenter, numCenters);
    exchange.reset(new CudaPeerExchange(data.contexts, firstCenter, numCenters));
    CudaPeerExchange* featureExchange = force.getModel()->numInteractions != 0 ? exchange.get() : nullptr;
    for (int device = 0; device < numDevices; device++) {
        CudaCalcGraphForceKernel* kernel = new CudaCalcGraphForceKernel(getName(), getPlatform(), *data.contexts[device], device,
                                                                        numDevices, device == 0 ? nullptr : &first, featureExchange);
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

void CudaParallelCalcGraphForceKernel::abortExchange(const std::string& error) {
    exchange->abort(error);
}

void CudaParallelCalcGraphForceKernel::recoverExchange() {
    if (!exchange->wasAborted())
        return;
    // After a failed evaluation OpenMM rethrew the first device's error without waiting for the other devices' tasks:
    // let them finish (they throw the same error, which is dropped here) before the devices meet again.
    for (CudaContext* context : data.contexts) {
        try {
            context->getWorkThread().flush();
        }
        catch (const OpenMMException&) {
        }
    }
    exchange->reset();
}

double CudaParallelCalcGraphForceKernel::execute(ContextImpl& context, bool includeForces, bool includeEnergy) {
    recoverExchange();
    for (int device = 0; device < (int) kernels.size(); device++)
        data.contexts[device]->getWorkThread().addTask(new Task(*this, device, [this, &context, device, includeForces, includeEnergy] {
            refreshAtomOrder(device);
            // Wait until every device's thread has enqueued OpenMM's copy of the positions to its device (a peer copy
            // on the legacy stream, which waits for all work issued to the first device before it): were the first
            // device's evaluation enqueued before another device's copy, that device would wait for it to finish.
            exchange->allOf(device, true);
            share(device).execute(context, includeForces, includeEnergy);
        }));
    return 0.0; // each share's energy goes into its own context's energy buffer
}

void CudaParallelCalcGraphForceKernel::getParticleEnergies(ContextImpl& context, std::vector<double>& energies) {
    // Outside an evaluation only the first context holds current positions: copy them to the others first.
    data.syncContexts();
    CudaContext& first = *data.contexts[0];
    for (int device = 1; device < (int) kernels.size(); device++) {
        CudaContext& cu = *data.contexts[device];
        ContextSelector selector(cu);
        GRAPH_CU_CHECK(cuMemcpyPeer(cu.getPosq().getDevicePointer(), cu.getContext(), first.getPosq().getDevicePointer(),
                                    first.getContext(), first.getPosq().getSize() * first.getPosq().getElementSize()));
        refreshAtomOrder(device);
    }
    std::vector<std::vector<double>> shareEnergies(kernels.size());
    // The shares evaluate at the same time, each on its device's worker thread (those of an interaction block exchange
    // node features).
    recoverExchange();
    for (int device = 0; device < (int) kernels.size(); device++)
        data.contexts[device]->getWorkThread().addTask(new Task(*this, device, [this, &context, device, &shareEnergies] {
            share(device).getParticleEnergies(context, shareEnergies[device]);
        }));
    data.syncContexts(); // throws the first failure
    energies.assign(shareEnergies[0].size(), 0.0);
    for (int device = 0; device < (int) kernels.size(); device++) {
        CudaCalcGraphForceKernel& kernel = share(device);
        for (int i = kernel.getFirstCenter(); i < kernel.getFirstCenter() + kernel.getNumCenters(); i++)
            energies[i] = shareEnergies[device][i];
    }
}

void CudaParallelCalcGraphForceKernel::copyParametersToContext(ContextImpl& context, const GraphForce& force) {
    data.syncContexts();
    for (int device = 0; device < (int) kernels.size(); device++)
        share(device).copyParametersToContext(context, force);
}
