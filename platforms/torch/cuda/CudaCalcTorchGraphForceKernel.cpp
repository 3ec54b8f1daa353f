#include "CudaCalcTorchGraphForceKernel.h"
#include "CudaGraphErrors.h"
#include "CudaGraphForceInfo.h"
#include "TorchGraphKernels.h"
#include "internal/GraphModel.h"
#include "openmm/OpenMMException.h"
#include "openmm/common/ContextSelector.h"
#include "openmm/internal/ContextImpl.h"
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGraph.h>
#include <algorithm>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <map>
#include <mutex>
#include <set>

using namespace GraphPlugin;
using namespace OpenMM;

namespace {

/** An int64 tensor's data as the kernels' long long (the same 64 bits; int64_t is long on Linux). */
long long* longs(const torch::Tensor& tensor) {
    return reinterpret_cast<long long*>(tensor.data_ptr<int64_t>());
}

/** Runs `step`, swallowing any exception (destructors: each release step on its own, so one failure skips no other). */
template <typename Step> void releaseStep(Step step) {
    try {
        step();
    }
    catch (...) {
    }
}

/**
 * Fallback of at::cuda::clearCublasWorkspacesForStream for LibTorch versions without it (2.11 has none): all of
 * PyTorch's cuBLAS workspaces. Unqualified lookup in clearWorkspaces sees both; where LibTorch has its non-template
 * function, overload resolution prefers it (a qualified name that may not exist cannot be tested by SFINAE).
 */
namespace fallback {
template <typename Stream> void clearCublasWorkspacesForStream(Stream) {
    at::cuda::clearCublasWorkspaces();
}
} // namespace fallback

/** PyTorch's cuBLAS workspaces of `stream` (only that stream's where LibTorch can, else all of them). */
void clearWorkspaces(cudaStream_t stream) {
    using namespace at::cuda;
    using namespace fallback;
    clearCublasWorkspacesForStream(stream);
}

/** The cached memory of one private pool (emptyCache(pool) where LibTorch has it, else every free cached block). */
template <typename Id> auto emptyPool(const Id& pool, int) -> decltype(c10::cuda::CUDACachingAllocator::emptyCache(pool), void()) {
    c10::cuda::CUDACachingAllocator::emptyCache(pool);
}
template <typename Id> void emptyPool(const Id&, long) {
    c10::cuda::CUDACachingAllocator::emptyCache();
}

/**
 * The device's primary context, retained once per process and never released: PyTorch's objects made there (cuBLAS
 * handles, the caching allocator's memory) live as long as the process, and a last release would reset the context
 * under them.
 */
CUcontext retainedPrimaryContext(CUdevice device) {
    static std::mutex mutex;
    static std::map<CUdevice, CUcontext> contexts;
    std::lock_guard<std::mutex> lock(mutex);
    auto found = contexts.find(device);
    if (found != contexts.end())
        return found->second;
    CUcontext context;
    GRAPH_CU_CHECK(cuDevicePrimaryCtxRetain(&context, device));
    contexts[device] = context;
    return context;
}

/**
 * Make this thread's PyTorch cuBLAS handles for `device` in the primary context, once per thread and device (TorchCudaContext
 * "openmm": a handle made while OpenMM's context is current would outlive that context in PyTorch's process-wide pool).
 */
void warmUpBlasHandles(CUcontext primary, const torch::Device& device) {
    static thread_local std::set<int> warmed;
    if (warmed.count(device.index()))
        return;
    GRAPH_CU_CHECK(cuCtxPushCurrent(primary));
    try {
        c10::cuda::CUDAGuard deviceGuard(device);
        // The caching allocator is set up there too (on the first tensor of the process), before a pool is made.
        torch::empty({1}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
        at::cuda::getCurrentCUDABlasHandle();
        at::cuda::getCurrentCUDABlasLtHandle();
    }
    catch (...) {
        CUcontext popped;
        cuCtxPopCurrent(&popped);
        throw;
    }
    CUcontext popped;
    cuCtxPopCurrent(&popped);
    warmed.insert(device.index());
}

} // namespace

class CudaCalcTorchGraphForceKernel::TorchContextScope {
public:
    /** Makes `context` current on this thread for the scope (OpenMM's own: no switch, only the host's context stack). */
    explicit TorchContextScope(CUcontext context) {
        GRAPH_CU_CHECK(cuCtxPushCurrent(context));
    }
    ~TorchContextScope() {
        CUcontext popped;
        cuCtxPopCurrent(&popped);
    }
};

class CudaCalcTorchGraphForceKernel::AllocationRouting {
public:
    /**
     * In OpenMM's context (TorchCudaContext "openmm"): for the scope, PyTorch's allocations on the model's stream come
     * from this kernel's private pool of the caching allocator, whose memory belongs to OpenMM's context and is given
     * back before OpenMM destroys it; no other tensor of the process ever takes a block of it.  In the primary context:
     * nothing.  Every scope takes a reference to the pool and gives it back (the kernel holds one from initialize());
     * a scope inside another (initialize() uploading the types) routes nothing more.
     */
    explicit AllocationRouting(CudaCalcTorchGraphForceKernel& kernel) : kernel(kernel) {
        if (kernel.sharedContext && kernel.routingDepth == 0) {
            const cudaStream_t stream = (cudaStream_t) kernel.modelStream;
            c10::cuda::CUDACachingAllocator::beginAllocateToPool(kernel.deviceIndex, kernel.memoryPool,
                                                                 [stream](cudaStream_t s) { return s == stream; });
            active = true; // only once the routing is in place (a throw above leaves the kernel's state as it was)
        }
        kernel.routingDepth++;
    }
    ~AllocationRouting() {
        kernel.routingDepth--;
        if (active) {
            CudaCalcTorchGraphForceKernel& k = kernel;
            releaseStep([&] { c10::cuda::CUDACachingAllocator::endAllocateToPool(k.deviceIndex, k.memoryPool); });
            releaseStep([&] { c10::cuda::CUDACachingAllocator::releasePool(k.deviceIndex, k.memoryPool); });
        }
    }

private:
    CudaCalcTorchGraphForceKernel& kernel;
    bool active = false;
};

class CudaCalcTorchGraphForceKernel::StatusCheck : public ComputeContext::ForcePostComputation {
public:
    StatusCheck(std::shared_ptr<PostComputationState> state, CudaContext& cu) : state(state), cu(cu) {}
    double computeForceAndEnergy(bool includeForces, bool includeEnergy, int groups) override {
        if (state->kernel != nullptr && !state->kernel->finish())
            cu.setForcesValid(false); // the rows or the edge tensors have grown: OpenMM recomputes
        return 0.0;
    }

private:
    std::shared_ptr<PostComputationState> state;
    CudaContext& cu;
};

CudaCalcTorchGraphForceKernel::~CudaCalcTorchGraphForceKernel() {
    if (postComputation)
        postComputation->kernel = nullptr;
    if (pending && statusEvent != nullptr) {
        // An evaluation in flight (an exception left it unread) still uses the tensors and the status memory.
        ContextSelector selector(cu);
        cuEventSynchronize(statusEvent);
    }
    if (torchContext != nullptr && cuCtxPushCurrent(torchContext) == CUDA_SUCCESS) {
        // Torch's objects are released in PyTorch's context (no TorchContextScope: a destructor must not throw), each
        // step on its own.
        if (modelStream != nullptr)
            cuStreamSynchronize(modelStream);
        releaseStep([&] { energies = gradEdges = gradPositions = torch::Tensor(); });
        releaseStep([&] {
            for (int g = 0; g < 2; g++) {
                modelGraphs[g].reset();
                graphOutputs[g].clear();
            }
        });
        releaseStep([&] { positions = typeTensor = rowOffsets = neighbors = edgeVectors = box = torch::Tensor(); });
        releaseStep([&] { runner.reset(); });
        // PyTorch keeps a cuBLAS (and cuBLASLt) workspace per handle and stream for the life of the process, so every
        // Context's stream would leave its own behind (found on the H200: tens of MB per Context): this stream's go
        // (all of them, with a LibTorch that cannot drop one stream's), and are remade where next used.
        if (modelStream != nullptr)
            releaseStep([&] { clearWorkspaces((cudaStream_t) modelStream); });
        if (sharedContext && memoryPool != c10::cuda::MempoolId_t{0, 0}) {
            // Everything PyTorch holds in OpenMM's context goes back before OpenMM destroys it: the private pool.
            releaseStep([&] { c10::cuda::CUDACachingAllocator::releasePool(deviceIndex, memoryPool); });
            releaseStep([&] { emptyPool(memoryPool, 0); });
        }
        releaseStep([&] { torchStream.reset(); });
        if (modelStream != nullptr)
            cuStreamDestroy(modelStream);
        if (outputsReady != nullptr)
            cuEventDestroy(outputsReady);
        CUcontext popped;
        cuCtxPopCurrent(&popped);
    }
    ContextSelector selector(cu);
    if (hostStatus != nullptr)
        cuMemFreeHost(hostStatus);
    if (inputsReady != nullptr)
        cuEventDestroy(inputsReady);
    if (statusEvent != nullptr)
        cuEventDestroy(statusEvent);
}

void CudaCalcTorchGraphForceKernel::initialize(const System& system, const GraphForce& force) {
    model = force.getModel();
    if (numDevices > 1)
        throw OpenMMException("GraphForce: a PyTorch model runs on one CUDA device; DeviceIndex names " + std::to_string(numDevices) +
                              " (use one device, or a native model for several; docs/multi-gpu.md)");
    if (force.getProperty("Domains") == "mpi")
        throw OpenMMException("GraphForce: property Domains = \"mpi\" with a PyTorch model runs on the Reference and CPU platforms, not "
                              "yet on CUDA (docs/mpi.md)");
    const std::string contextProperty = force.getProperty("TorchCudaContext");
    sharedContext = model->kind == ModelKind::AOTInductor && contextProperty != "primary"; // "auto": packages in OpenMM's context
    if (contextProperty == "openmm" && model->kind != ModelKind::AOTInductor)
        throw OpenMMException(
            "GraphForce: TorchCudaContext \"openmm\" runs AOTInductor packages only: a TorchScript model's "
            "gradients come from autograd, whose CUDA backward runs on PyTorch's worker thread in the primary "
            "context; use \"auto\" (the default) or \"primary\", or export_aoti(..., device=\"cuda\") (docs/torch-models.md)");
    // CUDA graphs: the model's part is captured (in PyTorch's context) when its metadata says it is capturable.
    const std::string graphProperty = force.getProperty("CudaGraph");
    const bool capturable = model->torchCapturable && model->kind == ModelKind::TorchScript;
    if (graphProperty == "true" && !capturable)
        throw OpenMMException("GraphForce: CudaGraph is \"true\", but this PyTorch model is not marked capturable (metadata "
                              "\"capturable\": true, from export_torchscript(..., static_shapes=True); "
                              "AOTInductor packages are not captured); set CudaGraph to \"auto\" or \"false\" (docs/torch-models.md)");
    captureModel = capturable && graphProperty != "false";
    requireGraphs = graphProperty == "true";
    periodic = force.usesPeriodicBoundaryConditions();
    dtype = model->torchFloat32 ? torch::kFloat32 : torch::kFloat64;
    n = force.getNumParticles();
    particles.resize(n);
    types.assign(n + 1, 0);
    for (int i = 0; i < n; i++) {
        int type;
        force.getParticleParameters(i, particles[i], type);
        types[i] = type;
    }
    {
        ContextSelector selector(cu);
        graph.reset(new CudaNeighborGraph(cu, particles, system.getNumParticles(), model->cutoff, periodic, 0, n, nullptr,
                                          parseNeighborSearch(force.getProperty("CudaNeighborSearch"))));
        cu.addForce(new CudaGraphForceInfo(particles, periodic)); // a non-periodic force's particles move together
        status.reset(CudaArray::create<GraphStatus>(cu, 1, "graphTorchStatus"));
        counts.reset(CudaArray::create<long long>(cu, std::max(1, n), "graphTorchCounts"));
        scanned.reset(CudaArray::create<long long>(cu, n + 1, "graphTorchScanned"));
        const size_t scratchBytes = std::max<size_t>(1, getTorchScanScratchBytes(n));
        scanScratch.reset(CudaArray::create<char>(cu, scratchBytes, "graphTorchScanScratch"));
        GRAPH_CU_CHECK(cuMemHostAlloc((void**) &hostStatus, sizeof(GraphStatus), 0));
        *hostStatus = GraphStatus();
        GRAPH_CU_CHECK(cuEventCreate(&inputsReady, CU_EVENT_DISABLE_TIMING));
        GRAPH_CU_CHECK(cuEventCreate(&statusEvent, CU_EVENT_DISABLE_TIMING));
    }
    // PyTorch works in the device's primary context (TorchCudaContext "primary"; TorchScript models under "auto") or,
    // for AOTInductor packages, in OpenMM's own context ("openmm"; packages under "auto"): the model, its tensors and
    // its stream live there.
    deviceIndex = (c10::DeviceIndex) cu.getDeviceIndex();
    const torch::Device device(torch::kCUDA, deviceIndex);
    primaryContext = retainedPrimaryContext(cu.getDevice());
    if (sharedContext) // PyTorch's cuBLAS handles are made in the primary context, never in OpenMM's (also per step)
        warmUpBlasHandles(primaryContext, device);
    torchContext = sharedContext ? cu.getContext() : primaryContext;
    TorchContextScope scope(torchContext);
    c10::cuda::CUDAGuard deviceGuard(device);
    GRAPH_CU_CHECK(cuStreamCreate(&modelStream, CU_STREAM_NON_BLOCKING));
    torchStream = c10::cuda::getStreamFromExternal((cudaStream_t) modelStream, device.index());
    GRAPH_CU_CHECK(cuEventCreate(&outputsReady, CU_EVENT_DISABLE_TIMING));
    c10::cuda::CUDAStreamGuard streamGuard(*torchStream);
    if (sharedContext) {
        // The kernel's private pool, and the kernel's own reference to it (given back in the destructor).
        memoryPool = at::cuda::graph_pool_handle();
        c10::cuda::CUDACachingAllocator::beginAllocateToPool(deviceIndex, memoryPool, [](cudaStream_t) { return false; });
        c10::cuda::CUDACachingAllocator::endAllocateToPool(deviceIndex, memoryPool);
    }
    AllocationRouting routing(*this);
    runner = std::make_unique<TorchModelRunner>(force, device, sharedContext);
    auto real = torch::TensorOptions().dtype(dtype).device(device);
    auto integer = torch::TensorOptions().dtype(torch::kInt64).device(device);
    // Every input is written by the input kernel at every evaluation (on OpenMM's stream): allocated, not filled.
    positions = torch::empty({n + 1, 3}, real);
    typeTensor = torch::empty({n + 1}, integer);
    rowOffsets = torch::empty({n + 2}, integer);
    // TorchScript modules get [0, 3] without periodicity; an AOTInductor program was traced with [3, 3] (zeros then).
    box = torch::empty({periodic || runner->isPackage() ? 3 : 0, 3}, real);
    uploadTypes();
    // A first guess of the edges (half of every row at the capacity, which has headroom); the first status read sets
    // the size from the graph's edge count (growing with a recomputation if the guess was short).
    allocateEdges((long long) n * graph->capacity() / 2);
    postComputation = std::make_shared<PostComputationState>();
    postComputation->kernel = this;
    cu.addPostComputation(new StatusCheck(postComputation, cu));
}

void CudaCalcTorchGraphForceKernel::uploadTypes() {
    TorchContextScope scope(torchContext);
    GRAPH_CU_CHECK(cuStreamSynchronize(modelStream)); // an evaluation in flight reads the types
    c10::cuda::CUDAStreamGuard streamGuard(*torchStream);
    AllocationRouting routing(*this);
    typeTensor.copy_(torch::tensor(types, torch::kInt64));
}

void CudaCalcTorchGraphForceKernel::allocateEdges(long long edges) {
    TorchContextScope scope(torchContext);
    c10::cuda::CUDAStreamGuard streamGuard(*torchStream);
    AllocationRouting routing(*this);
    // Captured graphs read the old tensors: capture again.
    for (int g = 0; g < 2; g++) {
        modelGraphs[g].reset();
        graphOutputs[g].clear();
    }
    eagerRuns[0] = eagerRuns[1] = 0;
    edgeCapacity = std::max<long long>(1, edges);
    const torch::Device device(torch::kCUDA, (c10::DeviceIndex) cu.getDeviceIndex());
    // Not filled: the input kernel writes every slot (edges, then padding) at every evaluation, on OpenMM's stream,
    // which nothing orders with a fill on PyTorch's stream.
    neighbors = torch::empty({edgeCapacity}, torch::TensorOptions().dtype(torch::kInt64).device(device));
    edgeVectors = torch::empty({edgeCapacity, 3}, torch::TensorOptions().dtype(dtype).device(device));
}

void CudaCalcTorchGraphForceKernel::enqueue(bool includeForces, bool addEnergy) {
    ContextSelector selector(cu);
    cudaStream_t stream = (cudaStream_t) cu.getCurrentStream();
    const GraphBox<double> boxNm = graph->currentBox();

    // Step 1: the graph and the model's inputs (OpenMM's context and stream).
    GraphStatus* deviceStatus = reinterpret_cast<GraphStatus*>(status->getDevicePointer());
    GRAPH_CUDA_CHECK(cudaMemsetAsync(deviceStatus, 0, sizeof(GraphStatus), stream));
    graph->enqueue(stream, boxNm, deviceStatus);
    long long* scan = reinterpret_cast<long long*>(scanned->getDevicePointer());
    launchTorchRowOffsets(graph->rowCount(), n, graph->capacity(), reinterpret_cast<long long*>(counts->getDevicePointer()), scan,
                          reinterpret_cast<void*>(scanScratch->getDevicePointer()), scanScratch->getSize(), stream);
    if (dtype == torch::kFloat32)
        launchInputs<float>(stream, boxNm, deviceStatus);
    else
        launchInputs<double>(stream, boxNm, deviceStatus);
    GRAPH_CUDA_CHECK(cudaGetLastError());
    GRAPH_CU_CHECK(cuEventRecord(inputsReady, (CUstream) stream));

    // Step 2: the model, in PyTorch's context (the primary one, or OpenMM's for "openmm") on this kernel's stream, after
    // the inputs.
    {
        if (sharedContext) // this thread's handles (OpenMM may run the step on another thread than initialize())
            warmUpBlasHandles(primaryContext, torch::Device(torch::kCUDA, deviceIndex));
        TorchContextScope scope(torchContext);
        GRAPH_CU_CHECK(cuStreamWaitEvent(modelStream, inputsReady, 0));
        c10::cuda::CUDAStreamGuard streamGuard(*torchStream);
        const int g = includeForces ? 1 : 0;
        if (captureModel && modelGraphs[g] != nullptr) {
            // The captured model reads the same input tensors and writes the same output tensors every time.
            modelGraphs[g]->replay();
            energies = graphOutputs[g][0];
            gradEdges = graphOutputs[g][1];
            gradPositions = graphOutputs[g][2];
        }
        else {
            {
                AllocationRouting routing(*this); // not during a capture, whose allocations go to the graph's own pool
                runModel(includeForces);
            }
            // Captured after WarmUpRuns plain runs with these tensors (lazy initialisations and TorchScript's profiling
            // and optimisation happen outside the capture; the capacity has been confirmed by status reads), for the
            // next evaluations; the capture itself runs nothing.
            if (captureModel && ++eagerRuns[g] >= WarmUpRuns)
                captureModelGraph(includeForces);
        }
        GRAPH_CU_CHECK(cuEventRecord(outputsReady, modelStream));
    }

    // Step 3: energy and forces into OpenMM's buffers (OpenMM's stream, after the model).
    GRAPH_CU_CHECK(cuStreamWaitEvent((CUstream) stream, outputsReady, 0));
    if (dtype == torch::kFloat32)
        launchOutputs<float>(stream, includeForces, addEnergy, deviceStatus);
    else
        launchOutputs<double>(stream, includeForces, addEnergy, deviceStatus);
    GRAPH_CUDA_CHECK(cudaGetLastError());
    GRAPH_CUDA_CHECK(cudaMemcpyAsync(hostStatus, deviceStatus, sizeof(GraphStatus), cudaMemcpyDeviceToHost, stream));
    GRAPH_CU_CHECK(cuEventRecord(statusEvent, (CUstream) stream));
    pending = true;
}

template <typename real>
void CudaCalcTorchGraphForceKernel::launchInputs(cudaStream_t stream, const GraphBox<double>& boxNm, GraphStatus* deviceStatus) {
    const double toModel = 1.0 / model->lengthScale;
    launchTorchGraphInputs<real>(graph->positions(), graph->rows(), graph->rowCount(), graph->capacity(),
                                 reinterpret_cast<const long long*>(scanned->getDevicePointer()), n, boxNm, toModel,
                                 2 * model->cutoff * toModel, edgeCapacity, box.size(0) == 3, positions.data_ptr<real>(), longs(rowOffsets),
                                 longs(neighbors), edgeVectors.data_ptr<real>(), box.data_ptr<real>(), deviceStatus, stream);
}

template <typename real>
void CudaCalcTorchGraphForceKernel::launchOutputs(cudaStream_t stream, bool includeForces, bool addEnergy, GraphStatus* deviceStatus) {
    void* energyBuffer = addEnergy ? (void*) cu.getEnergyBuffer().getDevicePointer() : nullptr;
    const bool energyIsDouble = cu.getEnergyBuffer().getElementSize() == sizeof(double);
    launchTorchEnergy<real>(energies.data_ptr<real>(), n, model->energyScale, deviceStatus, energyBuffer, energyIsDouble, stream);
    if (includeForces)
        launchTorchForces<real>(gradEdges.defined() ? gradEdges.data_ptr<real>() : nullptr,
                                gradPositions.defined() ? gradPositions.data_ptr<real>() : nullptr, longs(rowOffsets), longs(neighbors), n,
                                model->energyScale / model->lengthScale, graph->slotOfNode(),
                                (long long*) cu.getLongForceBuffer().getDevicePointer(), cu.getPaddedNumAtoms(), deviceStatus, stream);
}

void CudaCalcTorchGraphForceKernel::runModel(bool includeForces) {
    const bool autograd = includeForces && !runner->returnsGradients();
    torch::Tensor x = positions.detach().requires_grad_(autograd), d = edgeVectors.detach().requires_grad_(autograd);
    try {
        runner->run({x, typeTensor, rowOffsets, neighbors, d, box}, n + 1, n, 0, includeForces, (void*) modelStream, energies, gradEdges,
                    gradPositions);
        energies = energies.detach().to(dtype).contiguous();
        if (includeForces) {
            gradEdges = gradEdges.defined() ? gradEdges.to(dtype).contiguous() : torch::Tensor();
            gradPositions = gradPositions.defined() ? gradPositions.to(dtype).contiguous() : torch::Tensor();
        }
        else
            gradEdges = gradPositions = torch::Tensor();
    }
    catch (const OpenMMException&) {
        throw;
    }
    catch (const std::exception& error) {
        throw OpenMMException(std::string("GraphForce: ") + runner->kindName() +
                              " model: the model failed: " + TorchModelRunner::messageOf(error));
    }
}

void CudaCalcTorchGraphForceKernel::captureModelGraph(bool includeForces) {
    const int g = includeForces ? 1 : 0;
    // The eager run's outputs stay this evaluation's; the capture's go to the graph's own memory pool.
    torch::Tensor eagerEnergies = energies, eagerGradEdges = gradEdges, eagerGradPositions = gradPositions;
    auto captured = std::make_unique<at::cuda::CUDAGraph>();
    std::string failure;
    try {
        captured->capture_begin();
    }
    catch (const std::exception& error) {
        failure = TorchModelRunner::messageOf(error);
    }
    if (failure.empty()) {
        try {
            runModel(includeForces);
        }
        catch (const std::exception& error) {
            failure = TorchModelRunner::messageOf(error);
        }
        try {
            captured->capture_end(); // always: the stream leaves capture mode (it fails after a failed run; the first error counts)
        }
        catch (const std::exception& error) {
            if (failure.empty())
                failure = TorchModelRunner::messageOf(error);
        }
    }

    if (failure.empty()) {
        graphOutputs[g] = {energies, gradEdges, gradPositions};
        modelGraphs[g] = std::move(captured);
    }
    energies = eagerEnergies;
    gradEdges = eagerGradEdges;
    gradPositions = eagerGradPositions;
    if (!failure.empty()) {
        modelGraphs[0].reset();
        modelGraphs[1].reset();
        if (!requireGraphs)
            captureModel = false; // "auto": plain runs from now on ("true": every evaluation tries again, and throws)
        else
            throw OpenMMException("GraphForce: CudaGraph is \"true\", but the model could not be captured into a CUDA graph (" + failure +
                                  "); set CudaGraph to \"auto\" or \"false\" (docs/torch-models.md)");
    }
}

bool CudaCalcTorchGraphForceKernel::finish() {
    if (!pending)
        return true;
    pending = false;
    {
        ContextSelector selector(cu);
        GRAPH_CU_CHECK(cuEventSynchronize(statusEvent));
    }
    const GraphStatus s = *hostStatus;
    const std::string error = graph->errorMessage(s);
    if (!error.empty())
        throw OpenMMException(error);
    if (s.maxRowCount > graph->capacity()) {
        graph->grow(s.maxRowCount);
        return false;
    }
    const long long headroom = s.edgeCount / 5 + 1024;
    if (s.edgeCount > edgeCapacity) {
        allocateEdges(s.edgeCount + headroom);
        return false;
    }
    if (edgeCapacity > 2 * (s.edgeCount + headroom))
        allocateEdges(s.edgeCount + headroom); // the model does the work of every padding edge: keep them few
    return true;
}

double CudaCalcTorchGraphForceKernel::execute(ContextImpl& context, bool includeForces, bool includeEnergy) {
    CudaNeighborGraph::checkBox(cu, model->cutoff, periodic);
    enqueue(includeForces, includeEnergy); // checked by StatusCheck in finishComputation
    return 0.0;                            // the energy goes into OpenMM's energy buffer
}

void CudaCalcTorchGraphForceKernel::getParticleEnergies(ContextImpl& context, std::vector<double>& result) {
    CudaNeighborGraph::checkBox(cu, model->cutoff, periodic);
    finish(); // a pending evaluation of a step first
    do
        enqueue(false, false);
    while (!finish());
    TorchContextScope scope(torchContext);
    c10::cuda::CUDAStreamGuard streamGuard(*torchStream);
    AllocationRouting routing(*this);
    torch::Tensor values = energies.narrow(0, 0, n).to(torch::kCPU, torch::kFloat64).contiguous();
    result.assign(values.data_ptr<double>(), values.data_ptr<double>() + n);
    for (double& e : result)
        e *= model->energyScale;
}

void CudaCalcTorchGraphForceKernel::copyParametersToContext(ContextImpl& context, const GraphForce& force) {
    const std::vector<int> updated = updatedTypes(force, particles);
    std::copy(updated.begin(), updated.end(), types.begin());
    uploadTypes();
}
