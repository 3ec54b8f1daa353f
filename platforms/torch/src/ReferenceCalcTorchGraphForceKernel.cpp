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
    if (force.getProperty("Domains") != "single")
        throw OpenMMException("GraphForce: property Domains = \"" + force.getProperty("Domains") +
                              "\" is supported for native models only, for now (docs/mpi.md)");
    model = force.getModel();
    periodic = force.usesPeriodicBoundaryConditions();
    checkFinite = force.getProperty("CheckFinite") == "true";
    dtype = model->torchFloat32 ? torch::kFloat32 : torch::kFloat64;
    const int n = force.getNumParticles();
    particles.resize(n);
    types.resize(n);
    for (int i = 0; i < n; i++) {
        int type;
        force.getParticleParameters(i, particles[i], type);
        types[i] = type;
    }
    try {
        std::istringstream bytes(force.getModelBytes());
        module = torch::jit::load(bytes, torch::kCPU);
        module.eval();
    }
    catch (const std::exception& error) {
        throw OpenMMException(std::string("GraphForce: TorchScript model: LibTorch cannot load the module: ") + error.what());
    }
}

torch::Tensor ReferenceCalcTorchGraphForceKernel::evaluate(ContextImpl& context, std::vector<Vec3>* forces) {
    const int n = (int) particles.size();
    const Vec3* box = buildReferenceGraph(context, model->cutoff, periodic, particles, localPositions, graph);
    const int64_t numEdges = graph.getNumEdges();
    const double toModel = 1.0 / model->lengthScale;

    // The graph as CPU tensors, in the model's length unit and dtype.
    auto real = torch::TensorOptions().dtype(torch::kFloat64);
    auto integer = torch::TensorOptions().dtype(torch::kInt64);
    torch::Tensor positionTensor = torch::empty({n, 3}, real);
    auto p = positionTensor.accessor<double, 2>();
    for (int i = 0; i < n; i++)
        for (int c = 0; c < 3; c++)
            p[i][c] = localPositions[i][c] * toModel;
    torch::Tensor vectorTensor = torch::empty({numEdges, 3}, real);
    auto v = vectorTensor.accessor<double, 2>();
    for (int64_t e = 0; e < numEdges; e++)
        for (int c = 0; c < 3; c++)
            v[e][c] = graph.edgeVectors[e][c] * toModel;
    torch::Tensor neighborTensor = torch::empty({numEdges}, integer);
    std::copy(graph.neighbors.begin(), graph.neighbors.end(), neighborTensor.data_ptr<int64_t>());
    torch::Tensor rowTensor = torch::from_blob(graph.rowOffsets.data(), {n + 1}, integer).clone();
    torch::Tensor typeTensor = torch::from_blob(types.data(), {n}, integer).clone();
    torch::Tensor boxTensor = torch::zeros({periodic ? 3 : 0, 3}, real);
    if (periodic)
        for (int a = 0; a < 3; a++)
            for (int c = 0; c < 3; c++)
                boxTensor[a][c] = box[a][c] * toModel;
    positionTensor = positionTensor.to(dtype).requires_grad_(forces != nullptr);
    vectorTensor = vectorTensor.to(dtype).requires_grad_(forces != nullptr);
    boxTensor = boxTensor.to(dtype);

    torch::Tensor energies;
    try {
        torch::AutoGradMode gradMode(forces != nullptr);
        energies = module.forward({positionTensor, typeTensor, rowTensor, neighborTensor, vectorTensor, boxTensor, (int64_t) n, (int64_t) 0})
                       .toTensor();
        if (energies.dim() != 1 || energies.size(0) != n) {
            std::stringstream message;
            message << "GraphForce: TorchScript model: forward returned a tensor of shape " << energies.sizes() << "; expected the energies of the "
                    << n << " owned particles, shape [" << n << "] (docs/torch-models.md)";
            throw OpenMMException(message.str());
        }
        if (forces != nullptr) {
            torch::Tensor total = energies.sum();
            std::vector<torch::Tensor> gradients =
                torch::autograd::grad({total}, {vectorTensor, positionTensor}, {}, /*retain_graph=*/false, /*create_graph=*/false,
                                      /*allow_unused=*/true);
            const double scale = model->energyScale / model->lengthScale; // model energy / model length -> kJ/mol/nm
            if (gradients[0].defined()) {
                torch::Tensor g = gradients[0].to(torch::kFloat64).contiguous();
                auto a = g.accessor<double, 2>();
                for (int i = 0; i < n; i++)
                    for (int64_t e = graph.rowOffsets[i]; e < graph.rowOffsets[i + 1]; e++) {
                        // d = x_j - x_i: dE/dx_j = g, dE/dx_i = -g; F = -dE/dx.
                        const int j = graph.neighbors[e];
                        for (int c = 0; c < 3; c++) {
                            (*forces)[i][c] += a[e][c] * scale;
                            (*forces)[j][c] -= a[e][c] * scale;
                        }
                    }
            }
            if (gradients[1].defined()) {
                torch::Tensor g = gradients[1].to(torch::kFloat64).contiguous();
                auto a = g.accessor<double, 2>();
                for (int i = 0; i < n; i++)
                    for (int c = 0; c < 3; c++)
                        (*forces)[i][c] -= a[i][c] * scale;
            }
        }
    }
    catch (const OpenMMException&) {
        throw;
    }
    catch (const std::exception& error) {
        throw OpenMMException(std::string("GraphForce: TorchScript model: the module failed: ") + error.what());
    }
    return energies.detach().to(torch::kFloat64) * model->energyScale;
}

double ReferenceCalcTorchGraphForceKernel::execute(ContextImpl& context, bool includeForces, bool includeEnergy) {
    const int n = (int) particles.size();
    localForces.assign(n, Vec3());
    torch::Tensor energies = evaluate(context, includeForces ? &localForces : nullptr);
    const double energy = energies.sum().item<double>();
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
