#include "CudaCalcGraphForceKernel.h"
#include "internal/GraphModel.h"
#include "openmm/OpenMMException.h"
#include <algorithm>
#include <sstream>

using namespace GraphPlugin;
using namespace OpenMM;

void CudaCalcGraphForceKernel::initialize(const System& system, const GraphForce& force) {
    if (force.getProperty("Domains") != "single")
        throw OpenMMException("GraphForce: property Domains = \"" + force.getProperty("Domains") +
                              "\" is supported on the Reference and CPU platforms only, for now (docs/mpi.md)");
    model = force.getModel();
    periodic = force.usesPeriodicBoundaryConditions();
    const int n = force.getNumParticles();
    particles.resize(n);
    types.resize(n);
    for (int i = 0; i < n; i++)
        force.getParticleParameters(i, particles[i], types[i]);
    const std::string graph = force.getProperty("CudaGraph");
    const CudaGraphMode mode = graph == "true" ? CudaGraphMode::Required : graph == "false" ? CudaGraphMode::Off : CudaGraphMode::Auto;
    const std::string chunk = force.getProperty("CudaChunkRows");
    const int chunkRows = chunk == "auto" ? 0 : std::stoi(chunk); // validated by setProperty
    firstCenter = (int) ((long long) domainIndex * n / numDomains);
    numCenters = (int) ((long long) (domainIndex + 1) * n / numDomains) - firstCenter;
    CudaGraphDomain domain;
    domain.firstCenter = firstCenter;
    domain.numCenters = numCenters;
    domain.orderContext = orderContext;
    pipeline = createCudaGraphPipeline(cu, model, particles, types, periodic, system.getNumParticles(), mode, chunkRows, domain);
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

void CudaCalcGraphForceKernel::checkBox() const {
    if (!periodic)
        return;
    Vec3 a, b, c;
    cu.getPeriodicBoxVectors(a, b, c);
    double smallest = std::min(a[0], std::min(b[1], c[2]));
    if (model->cutoff > 0.5 * smallest) {
        std::stringstream s;
        s << "GraphForce: the model's cut-off (" << model->cutoff << " nm) is larger than half the smallest height of the periodic box ("
          << 0.5 * smallest << " nm); the box must be at least " << 2 * model->cutoff << " nm in every direction";
        throw OpenMMException(s.str());
    }
}

double CudaCalcGraphForceKernel::execute(ContextImpl& context, bool includeForces, bool includeEnergy) {
    checkBox();
    pipeline->enqueue(includeForces, includeEnergy); // checked by StatusCheck in finishComputation
    return 0.0;                                      // the energy goes into OpenMM's energy buffer
}

void CudaCalcGraphForceKernel::getParticleEnergies(ContextImpl& context, std::vector<double>& energies) {
    checkBox();
    pipeline->finish(); // a pending evaluation of a step first
    do
        pipeline->enqueue(false, false);
    while (!pipeline->finish());
    pipeline->downloadParticleEnergies(energies);
}

void CudaCalcGraphForceKernel::copyParametersToContext(ContextImpl& context, const GraphForce& force) {
    types = updatedTypes(force, particles);
    pipeline->setTypes(types);
}
