#include "ReferenceCalcTorchGraphForceKernel.h"
#include "ReferenceGraphInput.h"
#include "internal/GraphModel.h"
#include "openmm/OpenMMException.h"
#include "openmm/internal/ContextImpl.h"
#include "openmm/reference/ReferencePlatform.h"
#include <cmath>
#include <sstream>

using namespace GraphPlugin;
using namespace OpenMM;

void ReferenceCalcTorchGraphForceKernel::initialize(const System& system, const GraphForce& force) {
    model = force.getModel();
    domains.reset();
    if (force.getProperty("Domains") == "mpi") {
        if (model->kind != ModelKind::TorchScript)
            throw OpenMMException("GraphForce: property Domains = \"mpi\" needs a native or TorchScript model; an AOTInductor package "
                                  "takes one domain only, for now (docs/torch-models.md)");
        domains.reset(new ReferenceMpiDomains());
    }
    periodic = force.usesPeriodicBoundaryConditions();
    checkFinite = force.getProperty("CheckFinite") != "false"; // "deferred" checks at once here: nothing runs ahead
    dtype = model->torchFloat32 ? torch::kFloat32 : torch::kFloat64;
    const int n = force.getNumParticles();
    particles.resize(n);
    types.resize(n);
    for (int i = 0; i < n; i++) {
        int type;
        force.getParticleParameters(i, particles[i], type);
        types[i] = type;
    }
    runner = std::make_unique<TorchModelRunner>(force, torch::kCPU);
}

torch::Tensor ReferenceCalcTorchGraphForceKernel::evaluate(ContextImpl& context, std::vector<Vec3>* forces) {
    const int n = (int) particles.size();
    const Vec3* box = buildReferenceGraph(context, model->cutoff, periodic, particles, localPositions, graph);
    std::vector<int> local(n);
    for (int i = 0; i < n; i++)
        local[i] = i;
    return runGraph(local, graph.rowOffsets, graph.neighbors, graph.edgeVectors, box, 0, forces);
}

double ReferenceCalcTorchGraphForceKernel::evaluateDomain(ContextImpl& context, std::vector<Vec3>* forces) {
    const Vec3* box = buildReferenceGraph(context, model->cutoff, periodic, particles, localPositions, graph);
    // This rank's slab (the native path's split), then its ghosts; every rank makes the same collective calls in the same order.
    const std::vector<int> owner = domains->ownerRanks(localPositions, box);
    ReferenceMpiDomains::Exchange exchange(*domains, owner, graph);
    std::vector<int> local(exchange.owned());
    local.insert(local.end(), exchange.ghosts().begin(), exchange.ghosts().end());
    std::vector<int> localOf(particles.size(), -1);
    for (size_t k = 0; k < local.size(); k++)
        localOf[local[k]] = (int) k;
    std::vector<int64_t> rowOffsets(1, 0);
    std::vector<int> neighbors;
    std::vector<Vec3> edgeVectors;
    for (int i : exchange.owned()) {
        for (int64_t e = graph.rowOffsets[i]; e < graph.rowOffsets[i + 1]; e++) {
            neighbors.push_back(localOf[graph.neighbors[e]]);
            edgeVectors.push_back(graph.edgeVectors[e]);
        }
        rowOffsets.push_back((int64_t) neighbors.size());
    }
    torch::Tensor energies = runGraph(local, rowOffsets, neighbors, edgeVectors, box, exchange.communicator(), forces);
    if (forces != nullptr)
        domains->sumForces(*forces);
    return domains->sumEnergy(energies.sum().item<double>());
}

torch::Tensor ReferenceCalcTorchGraphForceKernel::runGraph(const std::vector<int>& local, const std::vector<int64_t>& rowOffsets,
                                                           const std::vector<int>& neighbors, const std::vector<Vec3>& edgeVectors,
                                                           const Vec3* box, int64_t communicator, std::vector<Vec3>* forces) {
    const int numLocal = (int) local.size(), numOwned = (int) rowOffsets.size() - 1;
    const int64_t numEdges = (int64_t) neighbors.size();
    const double toModel = 1.0 / model->lengthScale;

    // The graph as CPU tensors, in the model's length unit and dtype.
    auto real = torch::TensorOptions().dtype(torch::kFloat64);
    auto integer = torch::TensorOptions().dtype(torch::kInt64);
    torch::Tensor positionTensor = torch::empty({numLocal, 3}, real);
    auto p = positionTensor.accessor<double, 2>();
    torch::Tensor typeTensor = torch::empty({numLocal}, integer);
    for (int k = 0; k < numLocal; k++) {
        typeTensor[k] = types[local[k]];
        for (int c = 0; c < 3; c++)
            p[k][c] = localPositions[local[k]][c] * toModel;
    }
    torch::Tensor vectorTensor = torch::empty({numEdges, 3}, real);
    auto v = vectorTensor.accessor<double, 2>();
    for (int64_t e = 0; e < numEdges; e++)
        for (int c = 0; c < 3; c++)
            v[e][c] = edgeVectors[e][c] * toModel;
    torch::Tensor neighborTensor = torch::empty({numEdges}, integer);
    std::copy(neighbors.begin(), neighbors.end(), neighborTensor.data_ptr<int64_t>());
    torch::Tensor rowTensor = torch::empty({numOwned + 1}, integer);
    std::copy(rowOffsets.begin(), rowOffsets.end(), rowTensor.data_ptr<int64_t>());
    // An AOTInductor program was traced with a [3, 3] box: zeros stand for no periodicity there (the box is not used for
    // the edge vectors, which carry the shifts); TorchScript modules get [0, 3].
    torch::Tensor boxTensor = torch::zeros({periodic || runner->isPackage() ? 3 : 0, 3}, real);
    if (periodic)
        for (int a = 0; a < 3; a++)
            for (int c = 0; c < 3; c++)
                boxTensor[a][c] = box[a][c] * toModel;
    const bool autograd = forces != nullptr && !runner->returnsGradients();
    positionTensor = positionTensor.to(dtype).requires_grad_(autograd);
    vectorTensor = vectorTensor.to(dtype).requires_grad_(autograd);
    boxTensor = boxTensor.to(dtype);

    torch::Tensor energies, gradEdges, gradPositions;
    try {
        runner->run({positionTensor, typeTensor, rowTensor, neighborTensor, vectorTensor, boxTensor}, numOwned, numOwned, communicator,
                    forces != nullptr, nullptr, energies, gradEdges, gradPositions);
        if (forces != nullptr) {
            const double scale = model->energyScale / model->lengthScale; // model energy / model length -> kJ/mol/nm
            if (gradEdges.defined()) {
                torch::Tensor g = gradEdges.to(torch::kFloat64).contiguous();
                auto a = g.accessor<double, 2>();
                for (int i = 0; i < numOwned; i++)
                    for (int64_t e = rowOffsets[i]; e < rowOffsets[i + 1]; e++) {
                        // d = x_j - x_i: dE/dx_j = g, dE/dx_i = -g; F = -dE/dx.
                        const int center = local[i], neighbor = local[neighbors[e]];
                        for (int c = 0; c < 3; c++) {
                            (*forces)[center][c] += a[e][c] * scale;
                            (*forces)[neighbor][c] -= a[e][c] * scale;
                        }
                    }
            }
            if (gradPositions.defined()) {
                torch::Tensor g = gradPositions.to(torch::kFloat64).contiguous();
                auto a = g.accessor<double, 2>();
                for (int k = 0; k < numLocal; k++)
                    for (int c = 0; c < 3; c++)
                        (*forces)[local[k]][c] -= a[k][c] * scale;
            }
        }
    }
    catch (const OpenMMException&) {
        throw;
    }
    catch (const std::exception& error) {
        throw OpenMMException(std::string("GraphForce: ") + runner->kindName() +
                              " model: the model failed: " + TorchModelRunner::messageOf(error));
    }
    return energies.detach().to(torch::kFloat64) * model->energyScale;
}

double ReferenceCalcTorchGraphForceKernel::execute(ContextImpl& context, bool includeForces, bool includeEnergy) {
    const int n = (int) particles.size();
    localForces.assign(n, Vec3());
    const double energy = domains ? evaluateDomain(context, includeForces ? &localForces : nullptr)
                                  : evaluate(context, includeForces ? &localForces : nullptr).sum().item<double>();
    addReferenceForces(context, particles, includeForces ? &localForces : nullptr, energy, checkFinite);
    return energy;
}

void ReferenceCalcTorchGraphForceKernel::getParticleEnergies(ContextImpl& context, std::vector<double>& energies) {
    torch::Tensor values = evaluate(context, nullptr).contiguous();
    energies.assign(values.data_ptr<double>(), values.data_ptr<double>() + values.size(0));
}

void ReferenceCalcTorchGraphForceKernel::copyParametersToContext(ContextImpl& context, const GraphForce& force) {
    const std::vector<int> updated = updatedTypes(force, particles);
    types.assign(updated.begin(), updated.end());
}
