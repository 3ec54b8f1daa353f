#include "CudaCalcGraphForceKernel.h"
#include "CudaGraphForceInfo.h"
#include "CudaMpiExchange.h"
#include "CudaNeighborGraph.h"
#include "internal/GraphModel.h"
#include "openmm/OpenMMException.h"
#include <algorithm>
#include <cstring>
#include <sstream>

using namespace GraphPlugin;
using namespace OpenMM;

namespace {

/** A whole-number property ("auto" or digits, validated by GraphForce::setProperty); 0 for "auto". */
int wholeOrAuto(const GraphForce& force, const std::string& key) {
    const std::string value = force.getProperty(key);
    return value == "auto" ? 0 : std::stoi(value);
}

/** The GraphForce's CUDA properties (validated by GraphForce::setProperty). */
CudaGraphOptions cudaGraphOptions(const GraphForce& force) {
    CudaGraphOptions options;
    const std::string graph = force.getProperty("CudaGraph");
    options.graphMode = graph == "true" ? CudaGraphMode::Required : graph == "false" ? CudaGraphMode::Off : CudaGraphMode::Auto;
    options.maxChunkRows = wholeOrAuto(force, "CudaChunkRows");
    options.search = parseNeighborSearch(force.getProperty("CudaNeighborSearch"));
    const std::string fused = force.getProperty("CudaFusedNetwork");
    options.fusedNetwork = fused == "true" ? CudaFusedNetwork::Required : fused == "false" ? CudaFusedNetwork::Off : CudaFusedNetwork::Auto;
    options.fusedCluster = wholeOrAuto(force, "CudaFusedCluster");
    options.fusedTileRows = wholeOrAuto(force, "CudaFusedTileRows");
    const std::string resident = force.getProperty("CudaFusedResidentWeights");
    options.fusedResident = resident == "true"    ? CudaResidentWeights::Required
                            : resident == "false" ? CudaResidentWeights::Off
                                                  : CudaResidentWeights::Auto;
    const std::string scan = force.getProperty("CudaMomentsScan");
    options.momentsScan = scan == "rows" ? CudaMomentsScan::Rows : scan == "streamed" ? CudaMomentsScan::Streamed : CudaMomentsScan::Auto;
    const std::string forceScan = force.getProperty("CudaForceScan");
    options.forceScan = forceScan == "rows" ? CudaForceScan::Rows : forceScan == "streamed" ? CudaForceScan::Streamed : CudaForceScan::Auto;
    const std::string finite = force.getProperty("CheckFinite");
    options.statusCheck = finite == "deferred" ? CudaStatusCheck::Deferred
                          : finite == "false"  ? CudaStatusCheck::Off
                                               : CudaStatusCheck::Current;
    return options;
}

} // namespace

void CudaCalcGraphForceKernel::initialize(const System& system, const GraphForce& force) {
    model = force.getModel();
    if (force.getProperty("Domains") == "mpi") {
        if (numDomains != 1)
            throw OpenMMException("GraphForce: property Domains = \"mpi\" needs one device per rank (DeviceIndex names several)");
        domains.reset(new ReferenceMpiDomains());
        domainIndex = domains->getRank();
        numDomains = domains->getSize();
    }
    periodic = force.usesPeriodicBoundaryConditions();
    const int n = force.getNumParticles();
    particles.resize(n);
    types.resize(n);
    for (int i = 0; i < n; i++)
        force.getParticleParameters(i, particles[i], types[i]);
    std::vector<int> first, count;
    centerShares(n, numDomains, first, count);
    firstCenter = first[domainIndex];
    numCenters = count[domainIndex];
    if (domains && model->numInteractions != 0) {
        // The interaction block's node features and dE/dB go between the ranks (CudaMpiExchange).
        ownedExchange.reset(new CudaMpiExchange(*domains, first, count, n));
        exchange = ownedExchange.get();
    }
    CudaGraphDomain domain;
    domain.firstCenter = firstCenter;
    domain.numCenters = numCenters;
    domain.orderContext = orderContext;
    domain.rankSums = domains != nullptr;
    domain.exchange = exchange;
    domain.domainIndex = domainIndex;
    pipeline = createCudaGraphPipeline(cu, model, particles, types, periodic, system.getNumParticles(), cudaGraphOptions(force), domain);
    cu.addForce(new CudaGraphForceInfo(particles, periodic)); // keeps a non-periodic force's particles together when OpenMM wraps molecules
    // The status of an evaluation is read where OpenMM reads its own neighbour-list
    // count: in finishComputation, after every force has been enqueued.
    postComputation = std::make_shared<PostComputationState>();
    postComputation->pipeline = pipeline.get();
    cu.addPostComputation(new StatusCheck(postComputation, cu));
}

CudaCalcGraphForceKernel::~CudaCalcGraphForceKernel() {
    if (postComputation)
        postComputation->pipeline = nullptr;
}

double CudaCalcGraphForceKernel::StatusCheck::computeForceAndEnergy(bool includeForces, bool includeEnergy, int groups) {
    CudaGraphPipelineBase* pipeline = state->pipeline;
    if (pipeline != nullptr && !pipeline->finish())
        cu.setForcesValid(false); // a neighbour row overflowed: capacity has grown, OpenMM recomputes
    return 0.0;
}

double CudaCalcGraphForceKernel::executeRanks(bool includeForces) {
    // Every rank makes the same collective calls in the same order: a flag sum, then the result sum.
    while (true) {
        pipeline->enqueue(includeForces, true);
        std::string error;
        const bool complete = pipeline->finish(error);
        std::vector<int64_t> flags = {complete ? 0 : 1, error.empty() ? 0 : 1};
        domains->sumInt64(flags);
        if (flags[1] != 0)
            throw OpenMMException(error.empty() ? "GraphForce: Domains = \"mpi\": another rank's evaluation failed (see its output)"
                                                : error);
        if (flags[0] == 0)
            break; // else some rank's rows overflowed: it has grown; every rank evaluates again
    }
    std::vector<int64_t> forces;
    int64_t words[2];
    pipeline->readRankResult(includeForces ? &forces : nullptr, words);
    std::vector<int64_t> sums;
    sums.reserve(2 + (includeForces ? forces.size() : 0));
    sums.push_back(words[0]);
    sums.push_back(words[1]);
    if (includeForces)
        sums.insert(sums.end(), forces.begin(), forces.end());
    domains->sumInt64(sums);
    if (includeForces) {
        std::copy(sums.begin() + 2, sums.end(), forces.begin());
        pipeline->addRankForces(forces);
    }
    return energyOfWords(sums[0], sums[1]); // words that are bitwise the same on every rank
}

double CudaCalcGraphForceKernel::execute(ContextImpl& context, bool includeForces, bool includeEnergy) {
    CudaNeighborGraph::checkBox(cu, model->cutoff, periodic);
    if (domains)
        return executeRanks(includeForces);
    pipeline->enqueue(includeForces, includeEnergy); // checked by StatusCheck in finishComputation
    return 0.0;                                      // the energy goes into OpenMM's energy buffer
}

void CudaCalcGraphForceKernel::getParticleEnergies(ContextImpl& context, std::vector<double>& energies) {
    CudaNeighborGraph::checkBox(cu, model->cutoff, periodic);
    if (domains) {
        // This rank's centers, then every particle's energy from its rank (one rank contributes each: an exact integer sum).
        executeRanks(false);
        pipeline->downloadParticleEnergies(energies);
        std::vector<int64_t> bits(energies.size(), 0);
        for (int i = firstCenter; i < firstCenter + numCenters; i++)
            std::memcpy(&bits[i], &energies[i], sizeof(double));
        domains->sumInt64(bits);
        for (size_t i = 0; i < energies.size(); i++)
            std::memcpy(&energies[i], &bits[i], sizeof(double));
        return;
    }
    pipeline->finish(); // a pending evaluation of a step first
    bool complete;
    do {
        pipeline->enqueue(false, false);
        complete = pipeline->finish();
        if (exchange != nullptr) // the devices of a split interaction block evaluate again together
            complete = exchange->allOf(domainIndex, complete);
    } while (!complete);
    pipeline->downloadParticleEnergies(energies);
}

void CudaCalcGraphForceKernel::copyParametersToContext(ContextImpl& context, const GraphForce& force) {
    types = updatedTypes(force, particles);
    pipeline->setTypes(types);
}
