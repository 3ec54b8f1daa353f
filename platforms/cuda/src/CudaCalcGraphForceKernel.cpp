#include "CudaCalcGraphForceKernel.h"
#include "CudaGraphForceInfo.h"
#include "CudaMpiExchange.h"
#include "CudaNeighborGraph.h"
#include "internal/GraphModel.h"
#include "internal/QuotedText.h"
#include "openmm/OpenMMException.h"
#include <algorithm>
#include <cstdlib>
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
    options.momentsScan = scan == "rows"       ? CudaMomentsScan::Rows
                          : scan == "streamed" ? CudaMomentsScan::Streamed
                          : scan == "fused"    ? CudaMomentsScan::Fused
                                               : CudaMomentsScan::Auto;
    const std::string forceScan = force.getProperty("CudaForceScan");
    options.forceScan = forceScan == "rows" ? CudaForceScan::Rows : forceScan == "streamed" ? CudaForceScan::Streamed : CudaForceScan::Auto;
    const std::string finite = force.getProperty("CheckFinite");
    options.statusCheck = finite == "deferred" ? CudaStatusCheck::Deferred
                          : finite == "false"  ? CudaStatusCheck::Off
                                               : CudaStatusCheck::Current;
    return options;
}

/** What OMMGRAPH_MPI_TEST_FAILURE asks of one rank: where it fails and how many evaluations (0: every one). */
struct TestFailure {
    int rank = -1;
    std::string where;
    long long count = 0;
};

/**
 * OMMGRAPH_MPI_TEST_FAILURE=<rank>:<where>[:<count>], for the tests of the ranks' agreement on failure
 * (docs/mpi.md): the rank named fails on purpose in its first `count` evaluations (all when absent), "evaluation"
 * before its work is enqueued, "exchange" after the node features' sum (models with an interaction block),
 * "result" before its result is read back.
 */
TestFailure testFailure() {
    const char* text = std::getenv("OMMGRAPH_MPI_TEST_FAILURE");
    if (text == nullptr || *text == 0)
        return TestFailure();
    const std::string value(text);
    std::vector<std::string> fields(1);
    for (char c : value)
        if (c == ':')
            fields.emplace_back();
        else
            fields.back() += c;
    auto whole = [](const std::string& digits) {
        return !digits.empty() && digits.size() <= 9 && digits.find_first_not_of("0123456789") == std::string::npos;
    };
    const bool valid = (fields.size() == 2 || fields.size() == 3) && whole(fields[0]) &&
                       (fields[1] == "evaluation" || fields[1] == "exchange" || fields[1] == "result") &&
                       (fields.size() == 2 || (whole(fields[2]) && std::stoll(fields[2]) > 0));
    if (!valid)
        throw OpenMMException("GraphForce: OMMGRAPH_MPI_TEST_FAILURE=" + quotedText(value) +
                              " is not <rank>:<where>[:<count>] with <where> evaluation, exchange or result and <count> > 0 (a "
                              "hook for the tests; unset it)");
    TestFailure failure;
    failure.rank = std::stoi(fields[0]);
    failure.where = fields[1];
    failure.count = fields.size() == 3 ? std::stoll(fields[2]) : 0;
    return failure;
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
    if (domains) {
        // The ranks agree on their set-up: a rank whose pipeline cannot be made (device memory, a driver error)
        // makes every rank's Context creation fail, instead of leaving the others waiting in the first evaluation.
        std::string failure;
        try {
            const TestFailure injected = testFailure();
            if (injected.rank == domainIndex) {
                injectedFailure = injected.where == "evaluation" ? InjectedFailure::Evaluation
                                  : injected.where == "exchange" ? InjectedFailure::Exchange
                                                                 : InjectedFailure::Result;
                injectedFailures = injected.count;
            }
            pipeline =
                createCudaGraphPipeline(cu, model, particles, types, periodic, system.getNumParticles(), cudaGraphOptions(force), domain);
        }
        catch (const std::exception& error) {
            failure = error.what();
        }
        domains->agree(failure);
    }
    else
        pipeline =
            createCudaGraphPipeline(cu, model, particles, types, periodic, system.getNumParticles(), cudaGraphOptions(force), domain);
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
    // Every rank makes the same collective calls in the same order: the exchange points (an interaction block), a
    // flag sum, then the result sum.  A failure on this rank (a host exception anywhere in the evaluation) still
    // joins each of them, with an error word, so that every rank throws and none waits in MPI for this one.
    // The failure injected by OMMGRAPH_MPI_TEST_FAILURE, if any, for this evaluation.
    InjectedFailure injected = injectedFailure;
    if (injectedFailures > 0 && injectedFailures-- == 1)
        injectedFailure = InjectedFailure::None; // its last evaluation
    while (true) {
        std::string error;
        bool complete = true;
        if (ownedExchange)
            ownedExchange->beginEvaluation(injected == InjectedFailure::Exchange);
        try {
            if (injected == InjectedFailure::Evaluation)
                throw injectedFailureError(domainIndex, "evaluation");
            pipeline->enqueue(includeForces, true);
            complete = pipeline->finish(error);
        }
        catch (const std::exception& failure) {
            error = failure.what();
            complete = true;
        }
        if (ownedExchange && !error.empty())
            ownedExchange->joinRemaining(includeForces, error);
        std::vector<int64_t> flags = {complete ? 0 : 1};
        domains->sumAgreed(flags, error);
        if (flags[0] == 0)
            break; // else some rank's rows overflowed: it has grown; every rank evaluates again
    }
    // The energy words, then the forces.
    std::vector<int64_t> forces;
    int64_t words[3] = {0, 0, 0};
    std::string error;
    try {
        if (injected == InjectedFailure::Result)
            throw injectedFailureError(domainIndex, "result");
        pipeline->readRankResult(includeForces ? &forces : nullptr, words);
    }
    catch (const std::exception& failure) {
        error = failure.what();
    }
    // As readRankResult sizes them, whether or not it ran: every rank sums as many words.
    forces.resize(includeForces ? 3 * std::max<size_t>(1, particles.size()) : 0);
    std::vector<int64_t> sums;
    sums.reserve(3 + forces.size() + 1); // and sumAgreed's word
    sums.insert(sums.end(), words, words + 3);
    sums.insert(sums.end(), forces.begin(), forces.end());
    domains->sumAgreed(sums, error);
    if (includeForces) {
        std::copy(sums.begin() + 3, sums.end(), forces.begin());
        pipeline->addRankForces(forces);
    }
    return energyOfWords(sums[0], sums[1], sums[2]); // words that are bitwise the same on every rank
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
        // Then the bits of the energies.
        const size_t n = particles.size();
        std::vector<int64_t> bits;
        bits.reserve(n + 1); // and sumAgreed's word
        bits.assign(n, 0);
        std::string error;
        try {
            pipeline->downloadParticleEnergies(energies);
            for (int i = firstCenter; i < firstCenter + numCenters; i++)
                std::memcpy(&bits[i], &energies[i], sizeof(double));
        }
        catch (const std::exception& failure) {
            error = failure.what();
        }
        domains->sumAgreed(bits, error);
        energies.resize(n);
        for (size_t i = 0; i < n; i++)
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
