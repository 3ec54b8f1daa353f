#ifndef OPENMM_GRAPH_CUDA_CALC_TORCH_GRAPH_FORCE_KERNEL_H_
#define OPENMM_GRAPH_CUDA_CALC_TORCH_GRAPH_FORCE_KERNEL_H_

#include "CudaNeighborGraph.h"
#include "GraphKernels.h"
#include "TorchModelRunner.h"
#include "openmm/cuda/CudaArray.h"
#include "openmm/cuda/CudaContext.h"
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#include <memory>
#include <optional>
#include <vector>

namespace GraphPlugin {

/**
 * A GraphForce with a PyTorch model (TorchScript module or AOTInductor
 * package compiled for CUDA) on the CUDA platform (docs/torch-models.md).
 *
 * Each evaluation, in stream order and without waiting for the device:
 *  1. on OpenMM's stream (OpenMM's CUDA context): the canonical graph
 *     (CudaNeighborGraph, as for native models), written straight into the
 *     model's input tensors (TorchGraphKernels.cu: static shapes, a padding
 *     particle owns the padding edges, so no count is read back);
 *  2. on a stream of this kernel, after an event of step 1: the model, and
 *     autograd for a TorchScript module.  PyTorch works in the device's
 *     primary context (property TorchCudaContext "primary", and TorchScript
 *     modules under the default "auto", as openmm-torch does) or, for an
 *     AOTInductor package, in OpenMM's own context ("openmm", and packages
 *     under "auto": no context switch on the host or the GPU);
 *  3. on OpenMM's stream, after an event of step 2: the energy into OpenMM's
 *     energy buffer and the forces in 64-bit fixed point into its force buffer.
 * The status (errors, longest row, edge count) is read where OpenMM reads its
 * own neighbour-list count (a ForcePostComputation); an overflow of the rows
 * or of the edge tensors grows them and has OpenMM recompute.  A model whose
 * metadata says "capturable" has step 2 captured into a CUDA graph (in
 * PyTorch's context) and replayed, captured again when the edge tensors change.
 *
 * Device memory: the graph in OpenMM's context (CudaArray), the model's inputs,
 * outputs and intermediates in PyTorch's caching allocator.  In OpenMM's
 * context they come from a private pool of this kernel (no other tensor of the
 * process shares its blocks), given back, with the cuBLAS workspaces, before
 * OpenMM destroys its context; in the primary context from the common pools.
 * Kernels of either context address the other's memory on the same device.
 */
class CudaCalcTorchGraphForceKernel : public CalcTorchGraphForceKernel {
public:
    CudaCalcTorchGraphForceKernel(std::string name, const OpenMM::Platform& platform, OpenMM::CudaContext& cu, int numDevices)
        : CalcTorchGraphForceKernel(name, platform), cu(cu), numDevices(numDevices) {}
    ~CudaCalcTorchGraphForceKernel();
    void initialize(const OpenMM::System& system, const GraphForce& force) override;
    double execute(OpenMM::ContextImpl& context, bool includeForces, bool includeEnergy) override;
    void getParticleEnergies(OpenMM::ContextImpl& context, std::vector<double>& energies) override;
    void copyParametersToContext(OpenMM::ContextImpl& context, const GraphForce& force) override;

private:
    /** Shared with the StatusCheck (owned by the CudaContext, which may outlive the kernel). */
    struct PostComputationState {
        CudaCalcTorchGraphForceKernel* kernel = nullptr;
    };
    class StatusCheck;
    /** Makes PyTorch's context for this kernel (torchContext) current for a scope. */
    class TorchContextScope;
    /** Routes PyTorch's allocations on modelStream to memoryPool for a scope (OpenMM's context only). */
    class AllocationRouting;
    /** Enqueue one evaluation (steps 1 to 3); addEnergy: add the energy to OpenMM's buffer. */
    void enqueue(bool includeForces, bool addEnergy);
    /** Step 1's last kernel: the model's inputs (in its dtype `real`) from the graph, on OpenMM's stream. */
    template <typename real> void launchInputs(cudaStream_t stream, const GraphBox<double>& boxNm, GraphStatus* deviceStatus);
    /** Step 3: the energy (when addEnergy) and the forces (when includeForces) into OpenMM's buffers, on OpenMM's stream. */
    template <typename real> void launchOutputs(cudaStream_t stream, bool includeForces, bool addEnergy, GraphStatus* deviceStatus);
    /** Step 2 without a graph: the model on the inputs, outputs into energies, gradEdges, gradPositions (PyTorch's context). */
    void runModel(bool includeForces);
    /**
     * Capture step 2 into a CUDA graph for the current edge capacity (after an eager run of the same evaluation, whose
     * outputs are kept).  A failed capture turns capturing off ("auto") or throws (CudaGraph "true").
     */
    void captureModelGraph(bool includeForces);
    /**
     * Read the status of the last enqueue() (waits for it): throws an OpenMMException for an error; returns false when
     * the rows or the edge tensors overflowed (they have grown: evaluate again).
     */
    bool finish();
    /** (Re)allocate the model's edge tensors for `edges` edges (PyTorch's context). */
    void allocateEdges(long long edges);
    void uploadTypes();

    OpenMM::CudaContext& cu;
    int numDevices;
    std::shared_ptr<const GraphModel> model;
    std::vector<int> particles;
    std::vector<int64_t> types; ///< [n + 1] model types; the padding particle has type 0
    bool periodic = false;
    int n = 0;
    std::unique_ptr<CudaNeighborGraph> graph;
    std::unique_ptr<TorchModelRunner> runner;
    torch::Dtype dtype = torch::kFloat64;
    bool sharedContext = false;         ///< PyTorch works in OpenMM's context (TorchCudaContext "openmm")
    CUcontext primaryContext = nullptr; ///< retained once per process and device, never released
    CUcontext torchContext = nullptr;   ///< OpenMM's context or the primary context
    c10::DeviceIndex deviceIndex = 0;
    c10::cuda::MempoolId_t memoryPool{0, 0}; ///< the private pool in OpenMM's context ({0, 0}: none yet)
    int routingDepth = 0;                    ///< AllocationRouting scopes open
    CUstream modelStream = nullptr;          ///< in torchContext
    std::optional<c10::cuda::CUDAStream> torchStream;
    CUevent inputsReady = nullptr, outputsReady = nullptr, statusEvent = nullptr;
    std::unique_ptr<OpenMM::CudaArray> status, counts, scanned, scanScratch; ///< OpenMM's context
    GraphStatus* hostStatus = nullptr;
    long long edgeCapacity = 1;
    /** The model's inputs (PyTorch's context): [n + 1, 3], [n + 1], [n + 2], [E], [E, 3], box. */
    torch::Tensor positions, typeTensor, rowOffsets, neighbors, edgeVectors, box;
    /** The last evaluation's outputs, alive until the next one (step 3 reads them). */
    torch::Tensor energies, gradEdges, gradPositions;
    /**
     * CUDA graphs of step 2 for capturable models (metadata "capturable", property CudaGraph not "false"), one per
     * [includeForces], dropped whenever the edge tensors are reallocated; their outputs live in the graphs' pools.
     */
    bool captureModel = false, requireGraphs = false;
    static constexpr int WarmUpRuns = 3;
    int eagerRuns[2] = {0, 0}; ///< [includeForces] plain runs since the edge tensors were allocated
    std::unique_ptr<at::cuda::CUDAGraph> modelGraphs[2];
    std::vector<torch::Tensor> graphOutputs[2];
    bool pending = false;
    std::shared_ptr<PostComputationState> postComputation;
};

} // namespace GraphPlugin

#endif
