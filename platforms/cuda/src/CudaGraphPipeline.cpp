#include "CudaGraphPipeline.h"
#include "CudaGraphErrors.h"
#include "CudaNeighborGraph.h"
#include "GraphKernelLaunch.h"
#include "openmm/OpenMMException.h"
#include "openmm/common/ContextSelector.h"
#include <algorithm>
#include <cmath>
#include <sstream>

using namespace GraphPlugin;
using namespace OpenMM;

namespace {

/** Device copy of one dense layer in `real`. */
struct DeviceLayer {
    std::unique_ptr<CudaArray> weight, bias, timestep;
    std::unique_ptr<CudaArray> weightT; ///< [numInputs][numOutputs] (DenseBatch::weightT), in float only (the 128 x 128 tiles)
    int numInputs = 0, numOutputs = 0;
    bool residual = false;
};

/** Device copy of the networks of one kind (fitting or node), one per type. */
struct DeviceNetworks {
    std::vector<std::vector<DeviceLayer>> hidden; ///< [type][layer]
    std::vector<DeviceLayer> output;              ///< [type]
    int numHidden = 0;
    std::vector<int> layerWidth; ///< [layer] the widest output of that layer over all types
};

template <typename real> class CudaGraphPipeline : public CudaGraphPipelineBase {
public:
    CudaGraphPipeline(CudaContext& cu, std::shared_ptr<const GraphModel> model, const std::vector<int>& particles,
                      const std::vector<int>& types, bool periodic, int numSystemParticles, const CudaGraphOptions& options,
                      const CudaGraphDomain& domain)
        : cu(cu), model(model), n((int) particles.size()), periodic(periodic), graphMode(options.graphMode) {
        firstCenter = domain.firstCenter;
        numCenters = domain.numCenters < 0 ? n : domain.numCenters;
        if (firstCenter < 0 || numCenters < 0 || firstCenter + numCenters > n)
            throw OpenMMException("GraphForce: internal error: a device's centers lie outside the force's particles");
        exchange = domain.exchange;
        domainIndex = domain.domainIndex;
        if (numCenters != n && model->numInteractions != 0 && exchange == nullptr)
            throw OpenMMException("GraphForce: internal error: a model with an interaction block is split without an exchange");
        if (exchange != nullptr) {
            // The exchange waits on other contexts' events and copies between contexts: not captured into a graph.
            if (options.graphMode == CudaGraphMode::Required)
                throw OpenMMException("GraphForce: CudaGraph is \"true\", but a model with an interaction block split over several "
                                      "devices exchanges node features between them, which is not captured into CUDA graphs; set "
                                      "CudaGraph to \"auto\" or \"false\", or use one device");
            graphMode = CudaGraphMode::Off;
        }
        rankSums = domain.rankSums;
        // Only the whole system on one device reads its status early: the domains' and ranks' sums need the whole record.
        statusCheck = !rankSums && numCenters == n && n > 0 ? options.statusCheck : CudaStatusCheck::Current;
        ContextSelector selector(cu);
        GRAPH_CU_CHECK(cuDeviceGetAttribute(&numMultiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, cu.getDevice()));
        GRAPH_CU_CHECK(cuDeviceGetAttribute(&maxSharedPerBlock, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, cu.getDevice()));
        const GraphModel& m = *model;
        if (m.numChannels > 32 * 4)
            throw OpenMMException("GraphForce: the CUDA platform supports at most 128 channels (n_channels); this model has " +
                                  std::to_string(m.numChannels));
        H = m.numHarmonics();
        M = m.numChannels;
        descriptorSize = m.descriptorSize();
        fittingInputSize = m.fittingInputSize();
        // Model parameters and tables.
        params.numTypes = m.numTypes;
        params.lMax = m.lMax;
        params.numChannels = M;
        params.numAxis = m.numAxis;
        params.descriptorLSum = m.descriptorLSum ? 1 : 0;
        params.numInteractions = m.numInteractions;
        params.radialIntervals = m.radialIntervals;
        params.descriptorSize = descriptorSize;
        params.cutoff = (real) m.cutoff;
        params.cutoff2 = (real) (m.cutoff * m.cutoff);
        params.radialR0 = (real) m.radialR0;
        params.radialDr = (real) m.radialDr;
        params.invDr = (real) (1.0 / m.radialDr);
        params.invNorm = (real) (1.0 / m.nNorm);
        radialTable = upload(m.radialTable, "graphRadialTable");
        params.radialTable = pointer<real>(radialTable);
        if (m.numInteractions == 1) {
            interactionTable = upload(m.interactionTable, "graphInteractionTable");
            params.interactionTable = pointer<real>(interactionTable);
        }
        else
            params.interactionTable = nullptr;
        setUpMomentsScan(options.momentsScan);
        setUpForceScan(options.forceScan);
        activation = m.activation == Activation::Tanh ? GraphTanh : GraphSilu;
        fitting = uploadNetworks(m.fitting);
        if (m.numInteractions == 1)
            node = uploadNetworks(m.node);
        energyShift = m.energyShift;

        // Particles and their graph.
        graph.reset(new CudaNeighborGraph(cu, particles, numSystemParticles, m.cutoff, periodic, firstCenter, numCenters,
                                          domain.orderContext, options.search));
        typeArray.reset(CudaArray::create<int>(cu, std::max(1, n), "graphTypes"));
        nodesByType.reset(CudaArray::create<int>(cu, std::max(1, numCenters), "graphNodesByType")); // this domain's centers only
        setTypes(types);

        const int n1 = std::max(1, n);
        // Per node: the moments and their gradients (and the interaction block's).
        moments.reset(CudaArray::create<real>(cu, (size_t) n1 * H * M, "graphMoments"));
        gradMoments.reset(CudaArray::create<real>(cu, (size_t) n1 * H * M, "graphGradMoments"));
        if (m.numInteractions == 1) {
            nodeFeatures.reset(CudaArray::create<real>(cu, (size_t) n1 * M, "graphNodeFeatures"));
            nodeFeatureGrad.reset(CudaArray::create<real>(cu, (size_t) n1 * M, "graphNodeFeatureGrad"));
            interactionMoments.reset(CudaArray::create<real>(cu, (size_t) n1 * H * M, "graphInteractionMoments"));
            gradInteractionMoments.reset(CudaArray::create<real>(cu, (size_t) n1 * H * M, "graphGradInteractionMoments"));
            if (exchange != nullptr) {
                exchange->attach(domainIndex, CudaGraphExchange::NodeFeatures, nodeFeatures->getDevicePointer(), M * sizeof(real));
                exchange->attach(domainIndex, CudaGraphExchange::InteractionMomentGradients, gradInteractionMoments->getDevicePointer(),
                                 (size_t) H * M * sizeof(real));
            }
        }
        // Per row of a chunk of the type-sorted node list: network inputs, activations and gradients.
        int widest = *std::max_element(fitting.layerWidth.begin(), fitting.layerWidth.end());
        size_t rowElements = 2 * (size_t) fittingInputSize;
        for (int w : fitting.layerWidth)
            rowElements += 2 * (size_t) w;
        if (m.numInteractions == 1) {
            for (int w : node.layerWidth) {
                widest = std::max(widest, w);
                rowElements += 2 * (size_t) w;
            }
            rowElements += descriptorSize;
        }
        gradWidth = widest;
        rowElements += 2 * (size_t) gradWidth;
        chunkRows = chooseChunkRows(std::max(1, numCenters), rowElements * sizeof(real), options.maxChunkRows);
        numChunks = (numCenters + chunkRows - 1) / chunkRows;
        setUpFusedNetwork(options.fusedNetwork, options.fusedCluster, options.fusedTileRows, options.fusedResident);
        setUpFusedMomentScan(options.momentsScan);
        if (!fused) { // the fused kernel keeps all of these in shared memory
            streamedWideTiles = configureDenseLayers<real>();
            const size_t c1 = chunkRows;
            fittingInput.reset(CudaArray::create<real>(cu, c1 * fittingInputSize, "graphFittingInput"));
            fittingInputGrad.reset(CudaArray::create<real>(cu, c1 * fittingInputSize, "graphFittingInputGrad"));
            allocateActivations(fitting, fittingActivations, fittingDerivatives, "graphFitting");
            if (m.numInteractions == 1) {
                nodeInputGrad.reset(CudaArray::create<real>(cu, c1 * descriptorSize, "graphNodeInputGrad"));
                allocateActivations(node, nodeActivations, nodeDerivatives, "graphNode");
            }
            // Two buffers ping-pong through the hidden layers' gradients.
            for (int b = 0; b < 2; b++)
                gradientScratch[b].reset(CudaArray::create<real>(cu, c1 * gradWidth, "graphGradientScratch"));
        }
        particleEnergy.reset(CudaArray::create<real>(cu, n1, "graphParticleEnergy"));
        if (rankSums) {
            // Forces in force order: the force scan writes through an identity "slot" map with a stride of n.
            rankForces.reset(CudaArray::create<long long>(cu, 3 * (size_t) n1, "graphRankForces"));
            std::vector<int> identity(n1);
            for (int i = 0; i < n1; i++)
                identity[i] = i;
            identitySlots.reset(CudaArray::create<int>(cu, n1, "graphIdentitySlots"));
            identitySlots->upload(identity);
        }
        status.reset(CudaArray::create<GraphStatus>(cu, 1, "graphStatus"));
        status->upload(std::vector<GraphStatus>(1)); // the record the first evaluation hands on (Deferred) is a clean one
        // Driver objects last, after every check that can refuse the force; a throwing constructor runs no
        // destructor, so a failure here releases those already made.
        try {
            GRAPH_CU_CHECK(cuStreamCreate(&captureStream, CU_STREAM_NON_BLOCKING));
            GRAPH_CU_CHECK(cuMemHostAlloc((void**) &hostStatus, StatusRecords * sizeof(GraphStatus), CU_MEMHOSTALLOC_DEVICEMAP));
            for (int r = 0; r < StatusRecords; r++)
                hostStatus[r] = GraphStatus();
            CUdeviceptr mapped = 0;
            GRAPH_CU_CHECK(cuMemHostGetDevicePointer(&mapped, hostStatus, 0));
            mappedStatus = reinterpret_cast<GraphStatus*>(mapped);
            GRAPH_CU_CHECK(cuEventCreate(&statusEvent, CU_EVENT_DISABLE_TIMING));
            GRAPH_CU_CHECK(cuEventCreate(&buildEvent, CU_EVENT_DISABLE_TIMING));
        }
        catch (...) {
            releaseDriverObjects();
            throw;
        }
    }

    ~CudaGraphPipeline() {
        ContextSelector selector(cu);
        // With CheckFinite "deferred" or "false" the last evaluation's tail may still run, and its last kernel writes
        // the mapped status record: wait for it before the pinned memory goes (errors are the Context's to report).
        cuStreamSynchronize(cu.getCurrentStream());
        dropGraph();
        releaseDriverObjects();
    }

    /** Destroys the stream, events and pinned status made by the constructor (those that exist). */
    void releaseDriverObjects() {
        if (captureStream)
            cuStreamDestroy(captureStream);
        if (hostStatus)
            cuMemFreeHost(hostStatus);
        if (statusEvent)
            cuEventDestroy(statusEvent);
        if (buildEvent)
            cuEventDestroy(buildEvent);
        captureStream = nullptr;
        hostStatus = nullptr;
        statusEvent = nullptr;
        buildEvent = nullptr;
    }

    void setTypes(const std::vector<int>& types) override {
        ContextSelector selector(cu);
        dropGraph(); // the type groups are baked into a captured graph
        typeArray->upload(types);
        // The domain's centers grouped by type (stable), for the per-type networks.
        std::vector<int> order;
        typeOffsets.assign(model->numTypes + 1, 0);
        for (int t = 0; t < model->numTypes; t++) {
            typeOffsets[t] = (int) order.size();
            for (int i = firstCenter; i < firstCenter + numCenters; i++)
                if (types[i] == t)
                    order.push_back(i);
        }
        typeOffsets[model->numTypes] = (int) order.size();
        if (!order.empty())
            nodesByType->upload(order);
        // The streamed scans' blocks: runs of up to centersPerBlock centers of one type.
        auto uploadBlocks = [&](const StreamedScanPlan& plan, std::unique_ptr<CudaArray>& array, const std::string& name) {
            const std::vector<int> blocks = streamedScanBlocks(typeOffsets, plan.centersPerBlock);
            if (!blocks.empty()) {
                if (!array || array->getSize() != (int) blocks.size())
                    array.reset(CudaArray::create<int>(cu, blocks.size(), name));
                array->upload(blocks);
            }
        };
        if (streamedMoments)
            uploadBlocks(streamedPlan, streamedBlocks, "graphStreamedBlocks");
        if (streamedForces)
            uploadBlocks(streamedForcePlan, streamedForceBlocks, "graphStreamedForceBlocks");
    }

    void enqueue(bool includeForces, bool addEnergy) override {
        ContextSelector selector(cu);
        cudaStream_t stream = (cudaStream_t) cu.getCurrentStream();
        const GraphBox<double> box = graph->currentBox();
        energyIsDouble = cu.getEnergyBuffer().getElementSize() == sizeof(double);
        pending = true;
        graph->enqueueCorrectionCopy(stream);
        if (statusCheck == CudaStatusCheck::Current && statusDirty) { // on the stream, never in a captured graph
            launchClearStatus(pointer<GraphStatus>(status), stream);
            GRAPH_CUDA_CHECK(cudaGetLastError());
            statusDirty = false;
        }
        if (graphMode != CudaGraphMode::Off) {
            const LaunchKey key = currentKey(includeForces, addEnergy, box);
            if (graphExec == nullptr || !(key == graphKey))
                captureGraph(key, includeForces, addEnergy, box);
            if (graphExec != nullptr) {
                GRAPH_CUDA_CHECK(cudaGraphLaunch(graphExec, stream));
                recordStatusEvent(stream);
                return;
            }
        }
        enqueueWork(stream, includeForces, addEnergy, box);
        recordStatusEvent(stream);
    }

private:
    /** The event finish() waits for with CudaStatusCheck Current (the others wait for buildEvent, recorded inside). */
    void recordStatusEvent(cudaStream_t stream) {
        if (statusCheck == CudaStatusCheck::Current)
            GRAPH_CU_CHECK(cuEventRecord(statusEvent, (CUstream) stream));
    }

    /**
     * Everything one evaluation does on the device, in stream order; no host
     * synchronisation and no host reads, so that it can be captured into a CUDA
     * graph.  Ends with the kernel that writes the status to mapped pinned memory.
     */
    void enqueueWork(cudaStream_t stream, bool includeForces, bool addEnergy, const GraphBox<double>& box) {
        const GraphModel& m = *model;
        if (statusCheck == CudaStatusCheck::Current)
            statusDirty = true; // until finishEvaluation has been enqueued: it leaves the record clean for the next evaluation
        else // the previous evaluation's record to the host (finish() checks it when Deferred), then a clean one
            launchCopyStatus(pointer<GraphStatus>(status), mappedStatus + PreviousRecord, true, stream);
        if (n == 0)
            return finishEvaluation(stream, false);
        const int* types = pointer<int>(typeArray);

        // Stage 1: the canonical graph.
        graph->enqueue(stream, box, pointer<GraphStatus>(status));
        if (statusCheck != CudaStatusCheck::Current) {
            // What the build found, for finish() to read as soon as the build is done (an event node when captured).
            launchCopyStatus(pointer<GraphStatus>(status), mappedStatus + BuildRecord, false, stream);
            GRAPH_CU_CHECK(
                cuEventRecordWithFlags(buildEvent, (CUstream) stream,
                                       stream == (cudaStream_t) captureStream ? CU_EVENT_RECORD_EXTERNAL : CU_EVENT_RECORD_DEFAULT));
        }
        const double* x = graph->positions();
        const int capacity = graph->capacity();

        // Stage 2: moments (and the interaction block's node features and moments), per node.
        const int* rows = graph->rows();
        const int* counts = graph->rowCount();
        const int* rowNodes = pointer<int>(nodesByType);
        real* A = pointer<real>(moments);
        real* input = pointer<real>(fittingInput);
        real* gradInput = pointer<real>(fittingInputGrad);
        real* gradA = pointer<real>(gradMoments);
        // The moments of `table` (tableByKnot: its copy for the streamed scan), weighted by nodeWeights when given, into out.
        auto scanMoments = [&](const real* table, const std::unique_ptr<CudaArray>& tableByKnot, const real* nodeWeights, real* out) {
            if (streamedMoments)
                launchStreamedMoments<real>(params, streamedPlan, pointer<real>(tableByKnot), nodeWeights, x, types, rowNodes,
                                            pointer<int>(streamedBlocks), streamedBlocks->getSize() / 4, box, rows, counts, capacity, out,
                                            pointer<GraphStatus>(status), stream);
            else
                launchMoments<real>(params, table, nodeWeights, x, types, rowNodes, numCenters, box, rows, counts, capacity, out, stream);
        };
        // With fusedScan the fused network scans its tiles' moments itself (setUpFusedMomentScan).
        const FusedMomentScan<real> momentScan{params.radialTable, x, types, rows, counts, capacity, box};
        if (!fusedScan)
            scanMoments(params.radialTable, radialTableByKnot, nullptr, A);
        const bool interaction = m.numInteractions == 1;
        real *B = nullptr, *gradB = nullptr;
        if (interaction) {
            B = pointer<real>(interactionMoments);
            gradB = pointer<real>(gradInteractionMoments);
            for (int c = 0; c < numChunks; c++) {
                launchInvariants<real>(params, A, A, rowNodes + chunkBegin(c), chunkEnd(c) - chunkBegin(c), input, fittingInputSize, 0,
                                       stream);
                forwardNetwork(node, nodeActivations, nodeDerivatives, c, input, fittingInputSize, pointer<real>(nodeFeatures), M, true,
                               false, nullptr, stream);
            }
            if (exchange != nullptr) // the other domains' node features, for the rows of this domain's centers
                exchange->allGather(domainIndex, CudaGraphExchange::NodeFeatures, (CUstream) stream);
            scanMoments(params.interactionTable, interactionTableByKnot, pointer<real>(nodeFeatures), B);
        }
        GRAPH_CUDA_CHECK(cudaGetLastError());

        // Stage 3, chunk by chunk: invariants, the fitting network, the energy, and back to dE/dA (and dE/dB); in one
        // kernel when fused.
        GraphStatus* energySum = addEnergy ? pointer<GraphStatus>(status) : nullptr;
        if (fused && fusedShape.clusterSize > 1)
            launchClusterFitting<real>(params, fusedTiles(), pointer<FusedNetworkWeights<real>>(fusedGroups), rowNodes, A,
                                       pointer<real>(particleEnergy), gradA, energySum, includeForces, stream);
        else if (fused)
            launchFusedFitting<real>(params, fusedTiles(), pointer<FusedNetworkWeights<real>>(fusedGroups), rowNodes, A,
                                     pointer<real>(particleEnergy), gradA, energySum, includeForces, fusedScan ? &momentScan : nullptr,
                                     stream);
        else
            for (int c = 0; c < numChunks; c++) {
                const int* chunkNodes = rowNodes + chunkBegin(c);
                const int chunkSize = chunkEnd(c) - chunkBegin(c);
                if (!interaction || numChunks > 1)
                    launchInvariants<real>(params, A, A, chunkNodes, chunkSize, input, fittingInputSize, 0, stream);
                if (interaction)
                    launchInvariants<real>(params, B, A, chunkNodes, chunkSize, input, fittingInputSize, descriptorSize, stream);
                forwardNetwork(fitting, fittingActivations, fittingDerivatives, c, input, fittingInputSize, nullptr, 0, false,
                               includeForces, energySum, stream);
                if (!includeForces)
                    continue;
                backwardNetwork(fitting, fittingDerivatives, c, gradInput, fittingInputSize, false, stream);
                if (interaction) {
                    launchInvariantsBackward<real>(params, B, A, chunkNodes, chunkSize, gradInput, fittingInputSize, descriptorSize, gradB,
                                                   gradA, false, stream);
                    launchInvariantsBackward<real>(params, A, A, chunkNodes, chunkSize, gradInput, fittingInputSize, 0, gradA, gradA, true,
                                                   stream);
                }
                else
                    launchInvariantsBackward<real>(params, A, A, chunkNodes, chunkSize, gradInput, fittingInputSize, 0, gradA, gradA, false,
                                                   stream);
            }
        GRAPH_CUDA_CHECK(cudaGetLastError());
        if (!includeForces)
            return finishEvaluation(stream, addEnergy && !rankSums);

        // Stage 4: the interaction block's backward (node features, then the node network, chunk by chunk; its
        // activations are recomputed when there is more than one chunk), then the edge backward into OpenMM's forces.
        if (interaction) {
            if (exchange != nullptr) // dE/dB of the other domains' centers in this domain's rows
                exchange->allGather(domainIndex, CudaGraphExchange::InteractionMomentGradients, (CUstream) stream);
            launchNodeFeatureGradient<real>(params, gradB, x, types, rowNodes, numCenters, box, rows, counts, capacity,
                                            pointer<real>(nodeFeatureGrad), stream);
            for (int c = 0; c < numChunks; c++) {
                const int* chunkNodes = rowNodes + chunkBegin(c);
                const int chunkSize = chunkEnd(c) - chunkBegin(c);
                if (numChunks > 1) {
                    launchInvariants<real>(params, A, A, chunkNodes, chunkSize, input, fittingInputSize, 0, stream);
                    forwardNetwork(node, nodeActivations, nodeDerivatives, c, input, fittingInputSize, pointer<real>(nodeFeatures), M, true,
                                   false, nullptr, stream);
                }
                backwardNetwork(node, nodeDerivatives, c, pointer<real>(nodeInputGrad), descriptorSize, true, stream);
                launchInvariantsBackward<real>(params, A, A, chunkNodes, chunkSize, pointer<real>(nodeInputGrad), descriptorSize, 0, gradA,
                                               gradA, true, stream);
            }
        }
        if (rankSums)
            GRAPH_CUDA_CHECK(cudaMemsetAsync(pointer<long long>(rankForces), 0, rankForces->getSize() * sizeof(long long), stream));
        const real* phi = interaction ? pointer<real>(nodeFeatures) : nullptr;
        const int* slots = rankSums ? pointer<int>(identitySlots) : graph->slotOfNode();
        long long* forceTarget = rankSums ? pointer<long long>(rankForces) : (long long*) cu.getLongForceBuffer().getDevicePointer();
        const int forceStride = rankSums ? std::max(1, n) : cu.getPaddedNumAtoms();
        if (streamedForces)
            launchStreamedForces<real>(params, streamedForcePlan, pointer<real>(radialTableByKnot), gradA, x, types, rowNodes,
                                       pointer<int>(streamedForceBlocks), streamedForceBlocks->getSize() / 4, box, rows, counts, capacity,
                                       slots, forceTarget, forceStride, pointer<GraphStatus>(status), stream);
        else
            launchForces<real>(params, gradA, gradB, phi, x, types, rowNodes, numCenters, box, rows, counts, capacity, slots, forceTarget,
                               forceStride, pointer<GraphStatus>(status), chooseForceWarps(numCenters, numMultiprocessors), stream);
        GRAPH_CUDA_CHECK(cudaGetLastError());
        finishEvaluation(stream, addEnergy && !rankSums);
    }

    /** What a captured graph depends on besides the arrays this pipeline owns. */
    struct LaunchKey {
        bool includeForces = false, addEnergy = false, energyIsDouble = false;
        GraphBox<double> box;
        int capacity = 0;
        CUdeviceptr posq = 0, correction = 0, atomIndex = 0, forces = 0, energy = 0;
        bool operator==(const LaunchKey& o) const {
            if (includeForces != o.includeForces || addEnergy != o.addEnergy || energyIsDouble != o.energyIsDouble ||
                capacity != o.capacity || posq != o.posq || correction != o.correction || atomIndex != o.atomIndex || forces != o.forces ||
                energy != o.energy || box.periodic != o.box.periodic)
                return false;
            for (int d = 0; d < 3; d++)
                if (box.a[d] != o.box.a[d] || box.b[d] != o.box.b[d] || box.c[d] != o.box.c[d])
                    return false;
            return true;
        }
    };

    LaunchKey currentKey(bool includeForces, bool addEnergy, const GraphBox<double>& box) {
        LaunchKey key;
        key.includeForces = includeForces;
        key.addEnergy = addEnergy;
        key.energyIsDouble = energyIsDouble;
        key.box = box;
        key.capacity = graph->capacity();
        key.posq = cu.getPosq().getDevicePointer();
        key.correction = graph->correctionPointer();
        key.atomIndex = graph->atomIndexPointer();
        key.forces = cu.getLongForceBuffer().getDevicePointer();
        key.energy = cu.getEnergyBuffer().getDevicePointer();
        return key;
    }

    /**
     * Capture enqueueWork() into a CUDA graph (on a private stream: capturing
     * runs nothing) and instantiate it, or update the instantiated graph in
     * place.  A failed capture turns graphs off in "auto" mode and is an
     * OpenMMException in "true" mode (a capture fails, among other reasons,
     * when the work synchronises with the host).
     */
    void captureGraph(const LaunchKey& key, bool includeForces, bool addEnergy, const GraphBox<double>& box) {
        cudaGraph_t graph = nullptr;
        cudaError_t result = cudaStreamBeginCapture(captureStream, cudaStreamCaptureModeThreadLocal);
        std::string failure;
        if (result == cudaSuccess) {
            try {
                enqueueWork(captureStream, includeForces, addEnergy, box);
            }
            catch (const std::exception& error) {
                failure = error.what();
            }
            const cudaError_t end = cudaStreamEndCapture(captureStream, &graph);
            if (result == cudaSuccess)
                result = end;
        }
        if (failure.empty() && result == cudaSuccess && graphExec != nullptr) {
            cudaGraphExecUpdateResultInfo info;
            if (cudaGraphExecUpdate(graphExec, graph, &info) != cudaSuccess) {
                (void) cudaGetLastError();
                cudaGraphExecDestroy(graphExec);
                graphExec = nullptr;
            }
        }
        if (failure.empty() && result == cudaSuccess && graphExec == nullptr)
            result = cudaGraphInstantiate(&graphExec, graph, 0);
        if (graph != nullptr)
            cudaGraphDestroy(graph);
        if (failure.empty() && result != cudaSuccess)
            failure = cudaGetErrorString(result);
        if (!failure.empty()) {
            (void) cudaGetLastError();
            if (graphExec != nullptr)
                cudaGraphExecDestroy(graphExec);
            graphExec = nullptr;
            if (graphMode == CudaGraphMode::Required)
                throw OpenMMException("GraphForce: CudaGraph is \"true\" but the evaluation could not be captured into a CUDA graph (" +
                                      failure + "); set CudaGraph to \"auto\" or \"false\"");
            graphMode = CudaGraphMode::Off;
            return;
        }
        graphKey = key;
    }

public:
    bool finish() override {
        std::string error;
        const bool done = finish(error);
        if (!error.empty())
            throw OpenMMException(error);
        return done;
    }

    bool finish(std::string& error) override {
        error.clear();
        if (!pending)
            return true;
        pending = false;
        ContextSelector selector(cu);
        if (statusCheck != CudaStatusCheck::Current) {
            GRAPH_CU_CHECK(cuEventSynchronize(buildEvent));
            const GraphStatus previous = hostStatus[PreviousRecord], built = hostStatus[BuildRecord];
            const bool checkPrevious = previousValid && statusCheck == CudaStatusCheck::Deferred;
            // This evaluation's record is checked at the next one, unless an error is reported now: the evaluation that
            // throws (for its own build or for the one before) is not blamed again.
            previousValid = false;
            if (checkPrevious && !(error = graph->errorMessage(previous)).empty()) {
                error += " (found in the evaluation before this one: CheckFinite is \"deferred\", so its forces have been used)";
                return true;
            }
            const bool done = checkBuild(built, error);
            previousValid = done && error.empty();
            return done;
        }
        GRAPH_CU_CHECK(cuEventSynchronize(statusEvent));
        return checkBuild(hostStatus[EndRecord], error);
    }

    /**
     * The part of finish() common to every CudaStatusCheck: an error in `s`
     * into `error`, or a row overflow (capacity grows, returns false: OpenMM
     * recomputes; with Deferred the evaluation's record is then not checked
     * as the previous one).
     */
    bool checkBuild(const GraphStatus& s, std::string& error) {
        error = graph->errorMessage(s);
        if (!error.empty())
            return true;
        if (s.maxRowCount > graph->capacity()) {
            // A row did not fit: grow (with room to spare) and have OpenMM recompute.
            dropGraph();
            graph->grow(s.maxRowCount);
            return false;
        }
        return true;
    }

    void downloadParticleEnergies(std::vector<double>& energies) override {
        ContextSelector selector(cu);
        std::vector<real> values(std::max(1, n));
        particleEnergy->download(values);
        energies.assign(values.begin(), values.begin() + n);
    }

    void readRankResult(std::vector<int64_t>* forces, int64_t energyWords[3]) override {
        energyWords[0] = hostStatus[EndRecord].energyTop;
        energyWords[1] = hostStatus[EndRecord].energyHigh;
        energyWords[2] = hostStatus[EndRecord].energyLow;
        if (forces != nullptr) {
            ContextSelector selector(cu);
            forces->resize(3 * (size_t) std::max(1, n));
            // As rankForces->download() (blocking) does, with a size_t byte count: OpenMM 8.6.1's copies fail past 2 GiB
            // (3 x 8 bytes a particle: 89,478,485 particles), below its own single-precision limit (bench/NOTES.md v41).
            GRAPH_CU_CHECK(cuMemcpyDtoH(forces->data(), rankForces->getDevicePointer(), forces->size() * sizeof(int64_t)));
        }
    }

    void addRankForces(const std::vector<int64_t>& forces) override {
        ContextSelector selector(cu);
        if (forces.size() != 3 * (size_t) std::max(1, n))
            throw OpenMMException("GraphForce: Domains = \"mpi\": the summed forces hold " + std::to_string(forces.size()) +
                                  " values, not 3 x " + std::to_string(std::max(1, n)));
        GRAPH_CU_CHECK(cuMemcpyHtoD(rankForces->getDevicePointer(), forces.data(), forces.size() * sizeof(int64_t))); // as readRankResult
        launchAddForces(pointer<long long>(rankForces), n, graph->slotOfNode(), (long long*) cu.getLongForceBuffer().getDevicePointer(),
                        cu.getPaddedNumAtoms(), (cudaStream_t) cu.getCurrentStream());
        GRAPH_CUDA_CHECK(cudaGetLastError());
    }

    void setAtomOrder(const std::vector<int>& atomIndex) override {
        graph->setAtomOrder(atomIndex);
    }

private:
    /** The array's device pointer; nullptr for an array not allocated (the per-layer network's, when fused). */
    template <typename T> static T* pointer(const std::unique_ptr<CudaArray>& array) {
        return array ? reinterpret_cast<T*>(array->getDevicePointer()) : nullptr;
    }

    std::unique_ptr<CudaArray> upload(const std::vector<double>& values, const std::string& name) {
        std::vector<real> converted(values.begin(), values.end());
        if (converted.empty())
            converted.push_back(0);
        std::unique_ptr<CudaArray> array(CudaArray::create<real>(cu, converted.size(), name));
        // With a size_t byte count: OpenMM 8.6.1's CudaArray::upload multiplies elements by their size in int, so a table or
        // layer of 2 to 4 GiB failed to upload and one of 4 to 6 GiB was copied in part (bench/NOTES.md v66).
        ContextSelector selector(cu);
        GRAPH_CU_CHECK(cuMemcpyHtoD(array->getDevicePointer(), converted.data(), converted.size() * sizeof(real)));
        return array;
    }

    DeviceLayer uploadLayer(const DenseLayer& layer, const std::string& name) {
        DeviceLayer device;
        device.numInputs = layer.numInputs;
        device.numOutputs = layer.numOutputs;
        device.residual = layer.residual;
        device.weight = upload(layer.weight, name + "Weight");
        if (sizeof(real) == 4)
            device.weightT = upload(transposedWeights(layer.weight, layer.numInputs, layer.numOutputs), name + "WeightT");
        device.bias = upload(layer.bias, name + "Bias");
        if (layer.residual)
            device.timestep = upload(layer.timestep, name + "Timestep");
        return device;
    }

    DeviceNetworks uploadNetworks(const std::vector<DenseNetwork>& networks) {
        DeviceNetworks device;
        device.numHidden = (int) networks[0].hidden.size();
        device.layerWidth.assign(device.numHidden + 1, 0);
        for (size_t t = 0; t < networks.size(); t++) {
            if ((int) networks[t].hidden.size() != device.numHidden)
                throw OpenMMException("GraphForce: the networks of all types must have the same number of layers");
            std::vector<DeviceLayer> layers;
            for (int l = 0; l < device.numHidden; l++) {
                layers.push_back(uploadLayer(networks[t].hidden[l], "graphLayer"));
                device.layerWidth[l] = std::max(device.layerWidth[l], networks[t].hidden[l].numOutputs);
            }
            device.hidden.push_back(std::move(layers));
            device.output.push_back(uploadLayer(networks[t].output, "graphOutput"));
            device.layerWidth[device.numHidden] = std::max(device.layerWidth[device.numHidden], networks[t].output.numOutputs);
        }
        return device;
    }

    void allocateActivations(const DeviceNetworks& networks, std::vector<std::unique_ptr<CudaArray>>& activations,
                             std::vector<std::unique_ptr<CudaArray>>& derivatives, const std::string& name) {
        for (int l = 0; l < networks.numHidden; l++) {
            activations.emplace_back(CudaArray::create<real>(cu, (size_t) chunkRows * networks.layerWidth[l], name + "Activation"));
            derivatives.emplace_back(CudaArray::create<real>(cu, (size_t) chunkRows * networks.layerWidth[l], name + "Derivative"));
        }
    }

    /**
     * The most tiles of `rows` rows that the fused kernels launch for the
     * numCenters rows: each type's rows are tiled apart, so at most one
     * partial tile per type beyond the whole ones.
     */
    long long fusedTileBound(int rows) const {
        return (numCenters + rows - 1) / rows + model->numTypes - 1;
    }

    /**
     * Why the fitting network cannot run in a fused kernel (empty when it
     * can): what launchFusedFitting and launchClusterFitting support and what
     * fits in a block's shared memory.  Sets fusedShape's widths, cluster
     * size, tile rows and layout when it can.  `cluster` is the
     * CudaFusedCluster property: blocks per tile, 0 for automatic
     * (FusedAutoCluster where the device has thread-block clusters and the
     * network suits them, else 1); `tileRows` the CudaFusedTileRows property:
     * rows per tile, 0 for automatic.
     */
    std::string fusedNetworkObstacle(int cluster, int tileRows) {
        const GraphModel& m = *model;
        if (m.numInteractions != 0)
            return "the model has an interaction block (only the fitting network of a model without one is fused)";
        if (numChunks != 1)
            return "the node stage runs in " + std::to_string(numChunks) + " chunks (CudaChunkRows)";
        if (batchesOf(fitting).size() != 1)
            return "the types' fitting networks differ in shape (or there are more than " + std::to_string(MaxBatchedGroups) + " types)";
        if (fitting.numHidden < 1 || fitting.numHidden > MaxFusedLayers)
            return "the fitting network has " + std::to_string(fitting.numHidden) + " hidden layers (1 to " +
                   std::to_string(MaxFusedLayers) + " are fused)";
        fusedShape = FusedNetworkShape();
        fusedShape.numLayers = fitting.numHidden;
        fusedShape.width[0] = fittingInputSize;
        for (int l = 0; l < fitting.numHidden; l++) {
            const DeviceLayer& layer = fitting.hidden[0][l];
            fusedShape.width[l + 1] = layer.numOutputs;
            fusedShape.residual[l] = layer.residual ? 1 : 0;
        }
        fusedShape.activation = activation;
        for (int l = 0; l <= fitting.numHidden; l++)
            if (fusedShape.width[l] > MaxFusedWidth)
                return std::string(l == 0 ? "the descriptor" : "a hidden layer") + " has " + std::to_string(fusedShape.width[l]) +
                       " entries (at most " + std::to_string(MaxFusedWidth) + " are fused)";
        const bool hasClusters = cu.getComputeCapability() >= 9.0;
        if (cluster > 1 && !hasClusters)
            return "CudaFusedCluster is " + std::to_string(cluster) + " but the device (compute capability " +
                   std::to_string(cu.getComputeCapability()) + ") has no thread-block clusters (compute capability 9.0 and later)";
        const int blocks = cluster != 0 ? cluster : hasClusters ? FusedAutoCluster : 1;
        if (blocks > 1) {
            const std::string why = clusterTilesObstacle(blocks, tileRows);
            if (why.empty() || cluster != 0)
                return why;
        }
        if (tileRows != 0 && tileRows != 4 && tileRows != 8 && tileRows != 16)
            return "CudaFusedTileRows is " + std::to_string(tileRows) +
                   ", which one block per tile (CudaFusedCluster 1 or \"auto\") does not take (4, 8 or 16 rows); set "
                   "CudaFusedTileRows to one of these or to \"auto\"" +
                   (hasClusters ? ", or CudaFusedCluster to 2 or more" : "");
        // One block per tile (fusedFittingKernel): every block streams all the weights from L2, and that stream bounds the
        // kernel (bench/NOTES.md v11-v12): the fewest rows per tile (4, 8, 16) that still give at most one block per
        // multiprocessor, so the weights stream once per multiprocessor; 16 only for layers and descriptors of at most 512
        // entries (a thread's sums of 8 rows and up to 4 columns stay in registers). Fewer rows when the tile does not fit
        // in shared memory.
        fusedShape.clusterSize = 1;
        const int widest = fusedWidestWidth(fusedShape);
        const int mostRows = widest <= 512 ? 16 : 8;
        if (tileRows > mostRows) // CudaFusedTileRows 16
            return "CudaFusedTileRows is " + std::to_string(tileRows) + ", and tiles of " + std::to_string(tileRows) +
                   " rows take layers and descriptors of at most 512 entries (this network has " + std::to_string(widest) +
                   "); set CudaFusedTileRows to 4, 8 or \"auto\"";
        int rows = tileRows; // CudaFusedTileRows, or the fewest rows that fill the device
        if (rows == 0) {
            rows = 4;
            while (rows < mostRows && (numCenters + rows - 1) / rows > numMultiprocessors)
                rows *= 2;
        }
        for (;; rows /= 2) {
            fusedShape.tileRows = rows;
            const size_t bytes = fusedLayout(fusedShape, H * M, sizeof(real));
            if (bytes <= (size_t) maxSharedPerBlock)
                return "";
            const std::string tooBig = "a tile of " + std::to_string(rows) + " rows needs " + std::to_string(bytes / 1024) +
                                       " KB of shared memory, more than the device's " + std::to_string(maxSharedPerBlock / 1024) +
                                       " KB per block";
            if (tileRows != 0)
                return "CudaFusedTileRows is " + std::to_string(tileRows) + ", and " + tooBig +
                       "; set CudaFusedTileRows to fewer rows or to \"auto\"";
            if (rows == 4)
                return tooBig;
        }
    }

    /**
     * Why the fitting network cannot run with each tile's columns spread over
     * a cluster of S blocks (empty when it can; then fusedShape holds the
     * cluster's tile rows and layout).  Each block's slice of a layer is at
     * most 128 columns (its threads cover the slice's columns) and its slices
     * of all the weights stay in its shared memory.  Tiles of 16, 32 or 64
     * rows within 8 rows a thread (rows x slice <= 2,048) and the shared
     * memory of a block: the ones that take the fewest waves of clusters the
     * device runs at once (cudaOccupancyMaxActiveClusters), then the fewest
     * rows; only `tileRows` rows unless 0 (the CudaFusedTileRows property).
     */
    std::string clusterTilesObstacle(int S, int tileRows) {
        fusedShape.clusterSize = S;
        if (!clusterFittingCompiled<real>())
            return "the plugin holds no code for compute capability 9.0 or later (CMAKE_CUDA_ARCHITECTURES), which clusters need";
        const int widestWidth = fusedWidestWidth(fusedShape), widestSlice = clusterSlice<real>(widestWidth, S); // slices grow with width
        if (widestSlice > 128)
            return "a cluster of " + std::to_string(S) + " blocks leaves " + std::to_string(widestSlice) + " columns of a layer of " +
                   std::to_string(widestWidth) + " to each block (at most 128); set CudaFusedCluster to 16 or to 1";
        const int columnThreads = widestSlice <= 16 ? 16 : widestSlice <= 32 ? 32 : widestSlice <= 64 ? 64 : 128;
        const int mostRows = std::min(64, 2048 / columnThreads);
        if (tileRows != 0 && (tileRows < 16 || tileRows > mostRows))
            return "CudaFusedTileRows is " + std::to_string(tileRows) + ", and a cluster of " + std::to_string(S) +
                   " blocks with slices of " + std::to_string(widestSlice) + " columns takes tiles of 16 to " + std::to_string(mostRows) +
                   " rows; set CudaFusedTileRows to one of these or to \"auto\"";
        int bestRows = 0;
        long long bestWaves = 0;
        std::string why;
        for (int rows = tileRows != 0 ? tileRows : 16; rows <= (tileRows != 0 ? tileRows : mostRows); rows *= 2) {
            fusedShape.tileRows = rows;
            const size_t bytes = clusterLayout(fusedShape, H * M, sizeof(real));
            if (bytes > (size_t) maxSharedPerBlock) {
                if (why.empty())
                    why = "a tile of " + std::to_string(rows) + " rows over a cluster of " + std::to_string(S) + " blocks needs " +
                          std::to_string(bytes / 1024) + " KB of shared memory per block (with the block's slices of the weights), " +
                          "more than the device's " + std::to_string(maxSharedPerBlock / 1024) +
                          " KB; set CudaFusedCluster to a larger size" +
                          (tileRows != 0 ? " or CudaFusedTileRows to fewer rows or to \"auto\"" : "");
                break;
            }
            const int active = configureClusterFitting<real>(fusedShape, maxSharedPerBlock);
            if (active < 1) {
                if (why.empty())
                    why = "the device cannot run a cluster of " + std::to_string(S) + " blocks with " + std::to_string(bytes / 1024) +
                          " KB of shared memory each; set CudaFusedCluster to a smaller size" +
                          (tileRows != 0 ? " or CudaFusedTileRows to fewer rows or to \"auto\"" : "");
                continue;
            }
            const long long tiles = fusedTileBound(rows);
            const long long waves = (tiles + active - 1) / active;
            if (bestRows == 0 || waves < bestWaves) {
                bestRows = rows;
                bestWaves = waves;
            }
        }
        if (bestRows == 0)
            return why;
        fusedShape.tileRows = bestRows;
        clusterLayout(fusedShape, H * M, sizeof(real));
        return "";
    }

    /**
     * Which hidden layers of the one-block fused kernel keep their W^T in
     * shared memory (the CudaFusedResidentWeights property; fusedShape's
     * layout from fusedNetworkObstacle): "auto" only where the tiles run in
     * one wave of one block per multiprocessor, since a block that holds
     * them leaves no room for a second one; "true" wherever a layer fits, or
     * an error that says why none does.  Results do not change.
     */
    void chooseResidentLayers(CudaResidentWeights mode) {
        if (mode == CudaResidentWeights::Off)
            return;
        const long long tiles = fusedTileBound(fusedShape.tileRows);
        if (mode == CudaResidentWeights::Auto && tiles > numMultiprocessors)
            return;
        const size_t streamed = (size_t) fusedShape.totalElements * sizeof(real);
        fusedResidentLayout(fusedShape, sizeof(real), (size_t) maxSharedPerBlock);
        if (mode == CudaResidentWeights::Required && fusedShape.residentFrom == fusedShape.numLayers) {
            if (fusedShape.numLayers == 1)
                throw OpenMMException("GraphForce: CudaFusedResidentWeights is \"true\" but the fitting network has one hidden layer, "
                                      "and the first layer's weights always stream; set CudaFusedResidentWeights to \"auto\" or \"false\"");
            const size_t need = (size_t) fusedResidentLayerElements(fusedShape, fusedShape.numLayers - 1, sizeof(real)) * sizeof(real);
            throw OpenMMException("GraphForce: CudaFusedResidentWeights is \"true\" but the last hidden layer's weights (" +
                                  std::to_string(need / 1024) + " KB) do not fit beside the tile's " + std::to_string(streamed / 1024) +
                                  " KB in the device's " + std::to_string(maxSharedPerBlock / 1024) +
                                  " KB of shared memory per block; set CudaFusedResidentWeights to \"auto\" or \"false\", or "
                                  "CudaFusedTileRows to fewer rows");
        }
    }

    /**
     * Chooses the moments scan (the CudaMomentsScan property): the streamed
     * scan where it was asked for (an OpenMMException saying why where it
     * cannot run); "auto" takes it where it can run in single or mixed
     * precision with lane groups of 16 or 32 (more than 32 channels: the
     * medium and large grades) and the domain has centers for at least
     * StreamedScanPlan::MinWaves blocks a multiprocessor, where it was measured
     * faster, else the row scan (docs/cuda-platform.md), which the fused
     * network may run itself (setUpFusedMomentScan: "fused", or "auto").  The
     * streamed scan gets the tables laid out by knot; its blocks come with the
     * types (setTypes).
     */
    void setUpMomentsScan(CudaMomentsScan mode) {
        streamedMoments = false;
        if (mode == CudaMomentsScan::Rows || mode == CudaMomentsScan::Fused || numCenters == 0)
            return;
        const bool required = mode == CudaMomentsScan::Streamed;
        const GraphModel& m = *model;
        // Where the scan cannot run: an OpenMMException saying why when it was asked for, the row scan for "auto".
        auto refuse = [&](const std::string& why) {
            if (required)
                throw OpenMMException("GraphForce: CudaMomentsScan is \"streamed\" but " + why +
                                      "; set CudaMomentsScan to \"auto\" or \"rows\"");
        };
        streamedPlan = streamedMomentsPlan<real>(params, maxSharedPerBlock);
        const std::string obstacle = streamedScanObstacle(streamedPlan);
        if (!obstacle.empty())
            return refuse(obstacle);
        // "auto": groups of 8 or fewer lanes (a warp's four or more groups run their centers' loops side by side) were
        // 2x slower than the row scan at small 100,800; double precision was not measured (bench/NOTES.md v30).  Every
        // block streams its type's whole table, however few its centers' edges: with fewer than MinWaves waves of
        // blocks (one a multiprocessor) the row scan was faster (a step at medium 512: 0.50 ms against 0.25; medium
        // 10,296, 1.3 waves: 2.27 against 2.15; large 10,296, 2.6 waves: 12.7 against 12.9 the other way; bench/NOTES.md v31).
        if (!required &&
            (sizeof(real) != 4 || streamedPlan.groupLanes < 16 ||
             (long long) numCenters < (long long) StreamedScanPlan::MinWaves * numMultiprocessors * streamedPlan.centersPerBlock))
            return;
        if (!configureStreamedMoments<real>(params, streamedPlan))
            return refuse(sharedMemoryRefused(streamedPlan));
        streamedMoments = true;
        radialTableByKnot = tableByKnot(m.radialTable, "graphRadialTableByKnot");
        if (m.numInteractions == 1)
            interactionTableByKnot = tableByKnot(m.interactionTable, "graphInteractionTableByKnot");
    }

    /**
     * Whether the fused network scans its tiles' moments itself (fusedScan;
     * the CudaMomentsScan property, after setUpMomentsScan and
     * setUpFusedNetwork): "fused" where it can (an OpenMMException saying
     * why where it cannot), "auto" wherever it can and the streamed scan was
     * not taken.  The scan runs the moments kernel's operations in its order
     * (EdgeMoments.cuh), so the results are bitwise those of "rows"; its
     * first weights load while it scans, and no moments kernel is launched
     * (docs/cuda-platform.md).
     */
    void setUpFusedMomentScan(CudaMomentsScan mode) {
        fusedScan = false;
        if ((mode != CudaMomentsScan::Auto && mode != CudaMomentsScan::Fused) || streamedMoments || numCenters == 0)
            return;
        const std::string obstacle = fused ? fusedMomentScanObstacle<real>(params, fusedShape)
                                           : "the fitting network runs a kernel per layer (CudaFusedNetwork is \"false\", or "
                                             "\"auto\" did not fuse it for this model and system: \"true\" says why)";
        if (!obstacle.empty()) {
            if (mode == CudaMomentsScan::Fused)
                throw OpenMMException("GraphForce: CudaMomentsScan is \"fused\" but " + obstacle +
                                      "; set CudaMomentsScan to \"auto\" or \"rows\"");
            return;
        }
        fusedScan = true;
    }

    /**
     * Why a streamed scan with `plan` cannot run the model on this device (no
     * TMA bulk copies before compute capability 9.0; plan.refusal:
     * streamedMomentsPlan, streamedForcesPlan), or "" if it can.
     */
    std::string streamedScanObstacle(const StreamedScanPlan& plan) const {
        const GraphModel& m = *model;
        if (cu.getComputeCapability() < 9.0)
            return "the device (compute capability " + std::to_string(cu.getComputeCapability()) +
                   ") has no tensor memory access (TMA) bulk copies (9.0 and later)";
        switch (plan.refusal) {
        case StreamedScanPlan::Refusal::None:
            return "";
        case StreamedScanPlan::Refusal::Channels:
            return "its " + std::to_string(M) + " channels are not whole 16-byte vectors of " + std::to_string(sizeof(real) * 8) +
                   "-bit reals (a multiple of " + std::to_string(16 / sizeof(real)) + " channels is needed)";
        case StreamedScanPlan::Refusal::SharedMemory:
            return "its windows (" + std::to_string(plan.windowBytes / 1024) + " KB) and 4 knots of the table (" +
                   std::to_string(4 * (plan.knotBytes + 16) / 1024) + " KB: " + std::to_string(m.numTypes) + " types, l_max " +
                   std::to_string(m.lMax) + ", " + std::to_string(M) + " channels) do not fit in the device's " +
                   std::to_string(maxSharedPerBlock / 1024) + " KB of shared memory a block";
        case StreamedScanPlan::Refusal::Intervals:
            return "the table's intervals of " + std::to_string(m.radialDr) +
                   " nm are too fine for its ring (the rows' distance order holds to one interval only above about r_c^2 "
                   "/ 2^32 / (r_0 + dr); docs/cuda-platform.md)";
        case StreamedScanPlan::Refusal::Interactions:
            return "the model has an interaction block, whose force terms need a second table (the streamed force scan takes "
                   "models without one)";
        }
        return "";
    }

    /** The reason given where the device refuses a streamed scan's kernels plan.sharedBytes of shared memory. */
    static std::string sharedMemoryRefused(const StreamedScanPlan& plan) {
        return "the device refused " + std::to_string(plan.sharedBytes / 1024) + " KB of shared memory for it";
    }

    /** A table of the model [T][T][L+1][K+1][3][M] on the device laid out by knot for the streamed scans (streamedTableLayout). */
    std::unique_ptr<CudaArray> tableByKnot(const std::vector<double>& table, const std::string& name) {
        const GraphModel& m = *model;
        return upload(streamedTableLayout<double>(table, m.numTypes, m.lMax, m.radialIntervals, m.numChannels), name);
    }

    /**
     * Chooses the force scan (the CudaForceScan property): the streamed scan
     * where it was asked for (an OpenMMException saying why where it cannot
     * run), the row scan otherwise ("auto" too: the streamed force scan was
     * 29% slower at medium 100,800; docs/cuda-platform.md).  Both give
     * bitwise the same forces.  The streamed scan shares the radial table
     * laid out by knot with the streamed moments scan; its blocks come with
     * the types (setTypes).
     */
    void setUpForceScan(CudaForceScan mode) {
        streamedForces = false;
        if (mode != CudaForceScan::Streamed || numCenters == 0)
            return;
        const GraphModel& m = *model;
        auto refuse = [&](const std::string& why) {
            throw OpenMMException("GraphForce: CudaForceScan is \"streamed\" but " + why + "; set CudaForceScan to \"auto\" or \"rows\"");
        };
        streamedForcePlan = streamedForcesPlan<real>(params, maxSharedPerBlock);
        const std::string obstacle = streamedScanObstacle(streamedForcePlan);
        if (!obstacle.empty())
            refuse(obstacle);
        if (!configureStreamedForces<real>(params, streamedForcePlan))
            refuse(sharedMemoryRefused(streamedForcePlan));
        streamedForces = true;
        if (!radialTableByKnot)
            radialTableByKnot = tableByKnot(m.radialTable, "graphRadialTableByKnot");
    }

    /**
     * Decides whether the fitting network runs fused (the CudaFusedNetwork
     * property) and, if so, uploads its weights in the fused kernel's layout:
     * per type and hidden layer, W^T [in][padded out] and W [out][padded in].
     */
    void setUpFusedNetwork(CudaFusedNetwork mode, int cluster, int tileRows, CudaResidentWeights resident) {
        fused = false;
        if (mode == CudaFusedNetwork::Off || numCenters == 0)
            return;
        const std::string obstacle = fusedNetworkObstacle(cluster, tileRows);
        if (!obstacle.empty()) {
            if (mode == CudaFusedNetwork::Required)
                throw OpenMMException("GraphForce: CudaFusedNetwork is \"true\" but " + obstacle +
                                      "; set CudaFusedNetwork to \"auto\" or \"false\"");
            return;
        }
        // "auto": only where the per-layer kernels would take their smallest tiles (too few rows to fill the device), and
        // for networks of at most FusedAutoWeights weights per type (see its comment).
        size_t weights = 0;
        for (int l = 0; l < fusedShape.numLayers; l++)
            weights += (size_t) fusedShape.width[l] * fusedShape.width[l + 1];
        if (mode == CudaFusedNetwork::Auto &&
            (weights > FusedAutoWeights ||
             chooseDenseTileRows(numCenters, fusedShape.width[1], numMultiprocessors, sizeof(real) == 4) != 8))
            return;
        fused = true;
        if (fusedShape.clusterSize == 1)
            chooseResidentLayers(resident);
        else if (resident == CudaResidentWeights::Required)
            throw OpenMMException("GraphForce: CudaFusedResidentWeights is \"true\" but the fitting network runs over clusters of " +
                                  std::to_string(fusedShape.clusterSize) +
                                  " blocks (CudaFusedCluster), whose blocks keep their slices of the weights anyway; set "
                                  "CudaFusedResidentWeights to \"auto\" or \"false\", or CudaFusedCluster to 1");
        if (fusedShape.clusterSize == 1 && !configureFusedFitting<real>(maxSharedPerBlock))
            throw OpenMMException("GraphForce: the device refused " + std::to_string(maxSharedPerBlock / 1024) +
                                  " KB of shared memory for the fused fitting network; set CudaFusedNetwork to \"false\"");
        const GraphModel& m = *model;
        const int S = fusedShape.clusterSize;
        std::vector<FusedNetworkWeights<real>> groups(m.numTypes);
        for (int t = 0; t < m.numTypes; t++) {
            FusedNetworkWeights<real>& g = groups[t];
            for (int l = 0; l < fitting.numHidden; l++) {
                const DenseLayer& layer = m.fitting[t].hidden[l];
                const int K = layer.numInputs, N = layer.numOutputs, qN = clusterSlice<real>(N, S), qK = clusterSlice<real>(K, S);
                // One block (S = 1): W^T and W in k-groups (fusedGroupedIndex, [ceil(K / G)][qN][G] and [ceil(N / G)][qK][G]).
                // A cluster: block b's slice of W^T, [K][qN] of output columns [b qN, (b + 1) qN); of W, [N][qK] of input columns.
                const int G = fusedVector<real>(), rowsK = (K + G - 1) / G * G, rowsN = (N + G - 1) / G * G;
                std::vector<double> forward((size_t) S * rowsK * qN, 0.0), backward((size_t) S * rowsN * qK, 0.0);
                for (int c = 0; c < N; c++)
                    for (int k = 0; k < K; k++) {
                        const double w = layer.weight[(size_t) c * K + k];
                        if (S == 1) {
                            forward[fusedGroupedIndex(k, c, qN, G)] = w;
                            backward[fusedGroupedIndex(c, k, qK, G)] = w;
                        }
                        else {
                            forward[((size_t) (c / qN) * K + k) * qN + c % qN] = w;
                            backward[((size_t) (k / qK) * N + c) * qK + k % qK] = w;
                        }
                    }
                fusedWeights.push_back(upload(forward, "graphFusedForward"));
                g.forward[l] = pointer<real>(fusedWeights.back());
                fusedWeights.push_back(upload(backward, "graphFusedBackward"));
                g.backward[l] = pointer<real>(fusedWeights.back());
                g.bias[l] = pointer<real>(fitting.hidden[t][l].bias);
                g.timestep[l] = layer.residual ? pointer<real>(fitting.hidden[t][l].timestep) : nullptr;
            }
            g.outputWeight = pointer<real>(fitting.output[t].weight);
            g.outputBias = pointer<real>(fitting.output[t].bias);
            g.energyShift = (real) energyShift[t];
        }
        fusedGroups.reset(CudaArray::create<FusedNetworkWeights<real>>(cu, m.numTypes, "graphFusedNetworks"));
        fusedGroups->upload(groups);
    }

    /** fusedShape with the row tiles of the current types (one chunk: rows [0, numCenters) of the type-sorted list). */
    FusedNetworkShape fusedTiles() const {
        FusedNetworkShape shape = fusedShape;
        shape.numGroups = model->numTypes;
        shape.rowStart[0] = 0;
        shape.tileStart[0] = 0;
        for (int t = 0; t < model->numTypes; t++) {
            shape.rowStart[t + 1] = typeOffsets[t + 1];
            shape.tileStart[t + 1] = shape.tileStart[t] + (typeOffsets[t + 1] - typeOffsets[t] + shape.tileRows - 1) / shape.tileRows;
        }
        return shape;
    }

    /**
     * Rows per chunk of the node stage: at most `requested` (the CudaChunkRows
     * property) or, when 0, as many as fit in a quarter of the device memory
     * free now (at least 1 GiB's worth and MinChunkRows), evened out over the
     * chunks; so per-node memory is only the graph, the moments and their
     * gradients, and systems that fit are not split (a split costs launches
     * and, with an interaction block, a second pass of the node network).
     * Results do not depend on it (every row's network is evaluated alone).
     */
    static int chooseChunkRows(int n, size_t bytesPerRow, int requested) {
        if (requested > 0)
            return std::min(n, requested);
        size_t freeBytes = 0, totalBytes = 0;
        if (cuMemGetInfo(&freeBytes, &totalBytes) != CUDA_SUCCESS)
            freeBytes = 0;
        const size_t ChunkBytes = std::max<size_t>((size_t) 1 << 30, freeBytes / 4);
        const int MinChunkRows = 32768;
        const int maxRows = (int) std::min<size_t>(1 << 30, std::max<size_t>(MinChunkRows, ChunkBytes / std::max<size_t>(1, bytesPerRow)));
        if (n <= maxRows)
            return n;
        const int chunks = (n + maxRows - 1) / maxRows;
        return ((n + chunks - 1) / chunks + 127) / 128 * 128;
    }

    int chunkBegin(int c) const {
        return c * chunkRows;
    }

    int chunkEnd(int c) const {
        return std::min(numCenters, (c + 1) * chunkRows);
    }

    /**
     * The batches of types whose networks have the same shape (one batch of all
     * types in the usual case), so that one launch serves them all.
     */
    static std::vector<std::vector<int>> batchesOf(const DeviceNetworks& networks) {
        const int numTypes = (int) networks.output.size();
        bool uniform = numTypes <= MaxBatchedGroups;
        for (int t = 1; t < numTypes && uniform; t++)
            for (int l = 0; l < networks.numHidden; l++) {
                const DeviceLayer &a = networks.hidden[0][l], &b = networks.hidden[t][l];
                uniform = uniform && a.numInputs == b.numInputs && a.numOutputs == b.numOutputs && a.residual == b.residual;
            }
        std::vector<std::vector<int>> batches;
        if (uniform) {
            batches.emplace_back();
            for (int t = 0; t < numTypes; t++)
                batches.back().push_back(t);
        }
        else
            for (int t = 0; t < numTypes; t++)
                batches.push_back({t});
        return batches;
    }

    /**
     * The DenseBatch of layer `layer` (-1: the output layer) for the given types,
     * restricted to the rows of chunk `chunk`.
     */
    DenseBatch<real> makeBatch(const DeviceNetworks& networks, int layer, const std::vector<int>& batchTypes, int columns, int chunk,
                               bool forward) {
        const int begin = chunkBegin(chunk), end = chunkEnd(chunk);
        auto clip = [&](int row) { return std::min(end, std::max(begin, row)); };
        DenseBatch<real> batch;
        batch.numGroups = (int) batchTypes.size();
        batch.chunkStart = begin;
        batch.rowStart[0] = clip(typeOffsets[batchTypes[0]]);
        for (int g = 0; g < batch.numGroups; g++) {
            const int t = batchTypes[g];
            const DeviceLayer& l = layer < 0 ? networks.output[t] : networks.hidden[t][layer];
            batch.rowStart[g + 1] = clip(typeOffsets[t + 1]);
            batch.weight[g] = pointer<real>(l.weight);
            batch.weightT[g] = pointer<real>(l.weightT);
            batch.bias[g] = pointer<real>(l.bias);
            batch.timestep[g] = l.residual ? pointer<real>(l.timestep) : nullptr;
            batch.energyShift[g] = (real) energyShift[t];
        }
        batch.gradScale = nullptr;
        batch.gradScaleStride = 0;
        chooseDenseTiles(batch, columns, numMultiprocessors, streamedWideTiles, forward);
        return batch;
    }

    /**
     * Forward through the hidden layers of every type for the rows of chunk
     * `chunk` (input: chunk array [row][inputStride]); then either the scalar
     * energy output (fitting: particle energies, with withGradient also dE/dh
     * of the last hidden layer into gradientScratch[0], with energySum also the
     * fixed-point total) or the linear M-output layer into output [node][outputStride] (node).
     */
    void forwardNetwork(const DeviceNetworks& networks, std::vector<std::unique_ptr<CudaArray>>& activations,
                        std::vector<std::unique_ptr<CudaArray>>& derivatives, int chunk, const real* input, int inputStride, real* output,
                        int outputStride, bool isNode, bool withGradient, GraphStatus* energySum, cudaStream_t stream) {
        const int* rowNodes = pointer<int>(nodesByType);
        const int H = networks.numHidden;
        for (const std::vector<int>& batchTypes : batchesOf(networks)) {
            const int t0 = batchTypes[0];
            const real* h = input;
            int stride = inputStride;
            for (int l = 0; l < H; l++) {
                const DeviceLayer& layer = networks.hidden[t0][l];
                launchDenseForward<real>(makeBatch(networks, l, batchTypes, layer.numOutputs, chunk, true), rowNodes, h, stride,
                                         layer.numInputs, layer.numOutputs, activation, layer.residual, pointer<real>(derivatives[l]),
                                         pointer<real>(activations[l]), networks.layerWidth[l], false, stream);
                h = pointer<real>(activations[l]);
                stride = networks.layerWidth[l];
            }
            const DeviceLayer& out = networks.output[t0];
            if (isNode)
                launchDenseForward<real>(makeBatch(networks, -1, batchTypes, out.numOutputs, chunk, true), rowNodes, h, stride,
                                         out.numInputs, out.numOutputs, GraphIdentity, false, nullptr, output, outputStride, true, stream);
            else {
                // E = w . h_H + b + shift: dE/dh_H = w (into the input gradient directly when there are no hidden layers).
                real* gradHidden = withGradient ? (H > 0 ? pointer<real>(gradientScratch[0]) : pointer<real>(fittingInputGrad)) : nullptr;
                launchEnergyOutput<real>(makeBatch(networks, -1, batchTypes, 1, chunk, true), rowNodes, h, stride, out.numInputs,
                                         pointer<real>(particleEnergy), gradHidden, energySum, stream);
            }
        }
    }

    /**
     * Backward through a network of every type for the rows of chunk `chunk`
     * to dE/d(input), written to the chunk array gradInput [row][gradInputStride].
     * Fitting: seeded by dE/dh_H = w (gradientScratch[0], from forwardNetwork).
     * Node: seeded by dE/dphi (nodeFeatureGrad, per node).
     */
    void backwardNetwork(const DeviceNetworks& networks, std::vector<std::unique_ptr<CudaArray>>& derivatives, int chunk, real* gradInput,
                         int gradInputStride, bool isNode, cudaStream_t stream) {
        const int* rowNodes = pointer<int>(nodesByType);
        const int H = networks.numHidden;
        for (const std::vector<int>& batchTypes : batchesOf(networks)) {
            const int t0 = batchTypes[0];
            real* grad = H > 0 ? pointer<real>(gradientScratch[0]) : gradInput;
            // A hidden layer that is not residual (whose input gradient needs no dE/d(out)) and has an activation takes its
            // dE/dz ready: the product before it multiplies its output by the layer's act'(z) (DenseBatch::gradScale), which
            // spares the layer's own product a third operand stream (the same products in the same order: bitwise the same).
            auto takesDz = [&](int l) { return !networks.hidden[t0][l].residual && activation != GraphIdentity; };
            auto scaledFor = [&](DenseBatch<real> batch, int l) {
                if (l >= 0 && takesDz(l)) {
                    batch.gradScale = pointer<real>(derivatives[l]);
                    batch.gradScaleStride = networks.layerWidth[l];
                }
                return batch;
            };
            if (isNode) {
                // phi = W_out h + b: dE/dh = W_out^T dE/dphi.
                const DeviceLayer& out = networks.output[t0];
                launchDenseBackward<real>(scaledFor(makeBatch(networks, -1, batchTypes, out.numInputs, chunk, false), H - 1), rowNodes,
                                          pointer<real>(nodeFeatureGrad), M, true, nullptr, 0, out.numInputs, out.numOutputs, GraphIdentity,
                                          false, grad, H > 0 ? networks.layerWidth[H - 1] : gradInputStride, stream);
            }
            int current = 0;
            for (int l = H - 1; l >= 0; l--) {
                const DeviceLayer& layer = networks.hidden[t0][l];
                // Whether grad holds layer l's dE/dz: the product before it scaled for it (the layer above's, or the node
                // network's output layer's; the fitting network's last layer takes dE/dh = w from the energy output).
                const bool gradIsDz = takesDz(l) && (l < H - 1 || isNode);
                real* target;
                int targetStride;
                if (l == 0) {
                    target = gradInput;
                    targetStride = gradInputStride;
                }
                else {
                    current = 1 - current;
                    target = pointer<real>(gradientScratch[current]);
                    targetStride = networks.layerWidth[l - 1];
                }
                launchDenseBackward<real>(scaledFor(makeBatch(networks, l, batchTypes, layer.numInputs, chunk, false), l - 1), rowNodes,
                                          grad, networks.layerWidth[l], false, pointer<real>(derivatives[l]), networks.layerWidth[l],
                                          layer.numInputs, layer.numOutputs, gradIsDz ? GraphIdentity : activation, layer.residual, target,
                                          targetStride, stream);
                grad = target;
            }
        }
    }

    void dropGraph() {
        if (graphExec != nullptr)
            cudaGraphExecDestroy(graphExec);
        graphExec = nullptr;
    }

    /** The energy into OpenMM's buffer (when addToBuffer) and the status record to the host: the evaluation's last kernel. */
    void finishEvaluation(cudaStream_t stream, bool addToBuffer) {
        // CheckFinite "true": the record is zeroed once copied, for the next evaluation (the other checks copy it, uncleared,
        // at the start of the next one).
        const bool clear = statusCheck == CudaStatusCheck::Current;
        launchFinishEvaluation(pointer<GraphStatus>(status), mappedStatus,
                               addToBuffer ? (void*) cu.getEnergyBuffer().getDevicePointer() : nullptr, energyIsDouble, clear, stream);
        GRAPH_CUDA_CHECK(cudaGetLastError());
        statusDirty = !clear;
    }

    CudaContext& cu;
    std::shared_ptr<const GraphModel> model;
    int n;
    bool periodic;
    int H = 1, M = 1, descriptorSize = 1, fittingInputSize = 1, gradWidth = 1;
    int activation = GraphTanh;
    GraphModelParams<real> params;
    DeviceNetworks fitting, node;
    std::vector<double> energyShift;
    std::vector<int> typeOffsets;
    int chunkRows = 1, numChunks = 1;      ///< the node stage runs over chunks of chunkRows rows of the type-sorted node list
    int firstCenter = 0, numCenters = 0;   ///< this device's centers (CudaGraphDomain)
    CudaGraphExchange* exchange = nullptr; ///< CudaGraphDomain::exchange (not owned)
    int domainIndex = 0;
    bool rankSums = false;                                ///< CudaGraphDomain::rankSums
    std::unique_ptr<CudaArray> rankForces, identitySlots; ///< with rankSums: [3][n] fixed-point forces, force order; 0..n-1
    bool energyIsDouble = true;
    std::unique_ptr<CudaNeighborGraph> graph; ///< stage 1
    std::unique_ptr<CudaArray> radialTable, interactionTable, typeArray, nodesByType, moments, gradMoments, fittingInput, fittingInputGrad,
        nodeFeatures, nodeFeatureGrad, interactionMoments, gradInteractionMoments, nodeInputGrad, particleEnergy, status;
    std::unique_ptr<CudaArray> gradientScratch[2];
    std::vector<std::unique_ptr<CudaArray>> fittingActivations, fittingDerivatives, nodeActivations, nodeDerivatives;
    bool streamedMoments = false;                                         ///< the moments come from the streamed scan (CudaMomentsScan)
    bool fusedScan = false; ///< the fused network scans its tiles' moments itself (CudaMomentsScan; setUpFusedMomentScan)
    StreamedScanPlan streamedPlan;                                        ///< its ring, stages and blocks
    std::unique_ptr<CudaArray> radialTableByKnot, interactionTableByKnot; ///< its tables (streamedTableLayout)
    std::unique_ptr<CudaArray> streamedBlocks;                            ///< [blocks][4] (streamedScanBlocks)
    bool streamedForces = false;                                          ///< the forces come from the streamed scan (CudaForceScan)
    StreamedScanPlan streamedForcePlan;                                   ///< its ring, stages and blocks
    std::unique_ptr<CudaArray> streamedForceBlocks;                       ///< [blocks][4] (streamedScanBlocks of its centersPerBlock)
    bool fused = false;           ///< the fitting network runs in the fused kernel (CudaFusedNetwork)
    /// the per-layer network's 128 x 128 tiles stream k-slices (1), and the 64 x 128 tiles too (2): configureDenseLayers
    int streamedWideTiles = 0;
    FusedNetworkShape fusedShape{}; ///< its widths, tile rows and shared-memory layout
    int maxSharedPerBlock = 0;      ///< the device's shared memory per block (opt-in), bytes
    /**
     * CudaFusedNetwork "auto" fuses networks of at most this many hidden-layer
     * weights per type.  Measured on an H200 at 512 particles with the sm_75
     * build (bench/NOTES.md v11): the small grade (65,536 weights) took 53.4 us
     * fused against 58.8 us in per-layer kernels (plus their gaps); the medium
     * grade (483,840) took 380.9 us fused against about 200 us per layer.  With
     * the sm_90 build the small grade's fused kernel takes 36.1 us (v12); the
     * medium grade is to be measured again.
     */
    static constexpr size_t FusedAutoWeights = 131072;
    /**
     * CudaFusedCluster "auto": blocks per tile where the device has clusters.
     * 1: on an H200 at small 512 (bench/NOTES.md v13-v14) clusters of 4, 8
     * and 16 blocks with resident weight slices took 103.6-132.6 us of
     * GraphForce kernels per step against 71.7 us with one block per tile
     * (fusedFittingKernel); their stores of the activations into the other
     * blocks cost 1.9-5.4 us a stage.  Clusters run only when asked for.
     */
    static constexpr int FusedAutoCluster = 1;
    std::vector<std::unique_ptr<CudaArray>> fusedWeights; ///< per type and hidden layer: W^T, W (FusedNetworkWeights)
    std::unique_ptr<CudaArray> fusedGroups;               ///< [numTypes] FusedNetworkWeights
    /** hostStatus's records: written at an evaluation's end; after its graph build and at its start (the previous one's). */
    static constexpr int EndRecord = 0, BuildRecord = 1, PreviousRecord = 2, StatusRecords = 3;
    GraphStatus* hostStatus = nullptr;   ///< pinned [StatusRecords], written by the evaluation's kernels through mappedStatus
    GraphStatus* mappedStatus = nullptr; ///< hostStatus in the device's address space
    CUevent statusEvent = nullptr;       ///< recorded after an evaluation (CudaStatusCheck Current waits for it)
    CUevent buildEvent = nullptr;        ///< recorded after an evaluation's graph build (Deferred and Off wait for it)
    CudaStatusCheck statusCheck = CudaStatusCheck::Current;
    bool previousValid = false; ///< Deferred: the next PreviousRecord is that of an evaluation whose build fit (to be checked)
    bool pending = false; ///< an enqueue() whose status finish() has not read yet
    /// CheckFinite "true": the device's status record may not be clean (no evaluation yet, or the last one's enqueueWork
    /// stopped before its finishEvaluation), so enqueue() zeroes it first, outside any captured graph.
    bool statusDirty = true;
    int numMultiprocessors = 1;
    CudaGraphMode graphMode;
    CUstream captureStream = nullptr;
    cudaGraphExec_t graphExec = nullptr;
    LaunchKey graphKey;
};

} // namespace

std::unique_ptr<CudaGraphPipelineBase> GraphPlugin::createCudaGraphPipeline(CudaContext& cu, std::shared_ptr<const GraphModel> model,
                                                                            const std::vector<int>& particles,
                                                                            const std::vector<int>& types, bool periodic,
                                                                            int numSystemParticles, const CudaGraphOptions& options,
                                                                            const CudaGraphDomain& domain) {
    if (cu.getUseDoublePrecision())
        return std::make_unique<CudaGraphPipeline<double>>(cu, model, particles, types, periodic, numSystemParticles, options, domain);
    return std::make_unique<CudaGraphPipeline<float>>(cu, model, particles, types, periodic, numSystemParticles, options, domain);
}
