#ifndef OPENMM_GRAPH_CUDA_PARALLEL_CALC_GRAPH_FORCE_KERNEL_H_
#define OPENMM_GRAPH_CUDA_PARALLEL_CALC_GRAPH_FORCE_KERNEL_H_

#include "CudaCalcGraphForceKernel.h"
#include "CudaPeerExchange.h"
#include "GraphKernels.h"
#include "openmm/Kernel.h"
#include "openmm/cuda/CudaPlatform.h"
#include <atomic>
#include <memory>
#include <vector>

namespace GraphPlugin {

/**
 * GraphForce on a CUDA Context that spans several GPUs (DeviceIndex "0,1",
 * ...).  One CudaCalcGraphForceKernel per device, each evaluating the
 * energies of a contiguous share of the force's particles (their rows reach
 * every particle: OpenMM copies all positions to every device each step) and
 * adding their forces in 64-bit fixed point to its own context's force buffer
 * and its energy to its own energy buffer; OpenMM's
 * CudaParallelCalcForcesAndEnergyKernel sums both over the devices.  Every
 * edge's force is the same computation as on one GPU and integer sums do not
 * depend on order, so forces are bitwise those of one GPU; the energy is a
 * sum of per-device partial sums (equal to about 1e-16 relative).
 *
 * Each share runs as a task on its device's OpenMM worker thread, queued
 * behind that device's other work.  The tasks meet on the host before they
 * enqueue anything (a few microseconds): by then every device's thread has
 * enqueued OpenMM's copy of the positions to its device, a peer copy on the
 * legacy stream that waits for all work already issued to the first device,
 * so no device waits for the first device's evaluation.  The shares' own
 * peer copies run off the legacy stream (CudaPeerCopyStream).  Devices after
 * the first use the first
 * context's atom order and posqCorrection (OpenMM reorders atoms on the first
 * context only); a ReorderListener on it tells them when the order changes.
 *
 * A model with an interaction block is split the same way: its node features
 * (after the node network) and dE/dB (after the fitting network's backward)
 * are exchanged between the devices by peer copies (CudaPeerExchange, the
 * `communicate` of the native interaction block), so every device's halo stays
 * one cut-off wide and forces are still bitwise those of one GPU
 * (docs/multi-gpu.md).  CUDA graphs are not captured for such a model.
 */
class CudaParallelCalcGraphForceKernel : public CalcGraphForceKernel {
public:
    CudaParallelCalcGraphForceKernel(std::string name, const OpenMM::Platform& platform, OpenMM::CudaPlatform::PlatformData& data);
    void initialize(const OpenMM::System& system, const GraphForce& force) override;
    double execute(OpenMM::ContextImpl& context, bool includeForces, bool includeEnergy) override;
    void getParticleEnergies(OpenMM::ContextImpl& context, std::vector<double>& energies) override;
    void copyParametersToContext(OpenMM::ContextImpl& context, const GraphForce& force) override;

private:
    /** Bumped by the first context's reorder listener; shared with it (the context owns the listener). */
    struct OrderVersion {
        std::atomic<long long> value{0};
    };
    class OrderListener;
    class Task;
    CudaCalcGraphForceKernel& share(int device) {
        return kernels[device].getAs<CudaCalcGraphForceKernel>();
    }
    /** A device's task failed: the other devices stop waiting for it at the exchange. */
    void abortExchange(const std::string& error);
    /** Before the devices' tasks of an evaluation are queued: after an aborted one, wait for its stray tasks, then reset. */
    void recoverExchange();
    /** Device `device` (> 0) takes the first context's current atom order if it changed since it last did. */
    void refreshAtomOrder(int device);

    OpenMM::CudaPlatform::PlatformData& data;
    std::vector<OpenMM::Kernel> kernels; ///< one per device that has a share
    std::vector<long long> seenVersion;  ///< [device] the order version its share has (touched by that device's thread only)
    std::shared_ptr<OrderVersion> orderVersion;
    std::unique_ptr<CudaPeerExchange> exchange; ///< the devices' meeting point; the node features of an interaction block
};

} // namespace GraphPlugin

#endif
