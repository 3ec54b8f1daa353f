#ifndef OPENMM_GRAPH_TORCH_MODEL_RUNNER_H_
#define OPENMM_GRAPH_TORCH_MODEL_RUNNER_H_

#include "GraphForce.h"
#include "internal/GraphModel.h"
#include <memory>
#include <string>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/script.h>
#include <vector>

namespace GraphPlugin {

/**
 * The one place that loads and runs a PyTorch model of a GraphForce
 * (docs/torch-models.md), for every platform of the LibTorch plugins: a
 * TorchScript module (energies, gradients by autograd; or energies and both
 * gradients from the module) or an AOTInductor package (energies and both
 * gradients from its program).
 */
class TorchModelRunner {
public:
    /**
     * Load the force's model onto `device` (torch::kCPU, or a CUDA device of the Context).  Throws an
     * OpenMMException that names the problem when LibTorch cannot load it, or when an AOTInductor package was
     * compiled for another kind of device.  currentContext (CUDA): the CUDA context current on this thread is the
     * device's and the model must stay in it (an AOTInductor package is then loaded without selecting its device, which
     * would make the device's primary context current).
     */
    TorchModelRunner(const GraphForce& force, torch::Device device, bool currentContext = false);
    bool isPackage() const {
        return package != nullptr;
    }
    /** Whether the model returns the gradients itself (an AOTInductor package, or a module with that interface). */
    bool returnsGradients() const {
        return package != nullptr || moduleReturnsGradients;
    }
    /** "TorchScript" or "AOTInductor", for messages. */
    const char* kindName() const {
        return package ? "AOTInductor" : "TorchScript";
    }
    /**
     * Run the model on one graph.
     *
     * @param inputs        {positions [n_local, 3], types [n_local], row_offsets [rows + 1], neighbors [E], edge_vectors [E, 3],
     *                      box}, on the runner's device; positions and edge_vectors require grad when gradients are wanted
     *                      from a TorchScript module
     * @param rows          the owned rows (n_owned of the interface)
     * @param counted       the energies whose sum is differentiated (the first `counted` rows; TorchScript modules; an
     *                      AOTInductor program differentiates the sum of all rows)
     * @param communicator  the communicate handle (0: one domain)
     * @param wantGradients whether dE/d edge_vectors and dE/d positions are wanted
     * @param stream        the CUDA stream to run an AOTInductor program on (nullptr: the current stream)
     * @param energies      out: [rows] model energy unit
     * @param gradEdges     out: [E, 3] (undefined when the model does not use edge_vectors)
     * @param gradPositions out: [n_local, 3] (undefined when the model does not use positions)
     */
    void run(const std::vector<torch::Tensor>& inputs, int rows, int counted, int64_t communicator, bool wantGradients, void* stream,
             torch::Tensor& energies, torch::Tensor& gradEdges, torch::Tensor& gradPositions);

    /** The message of an exception, without LibTorch's C++ backtrace (c10::Error::what_without_backtrace). */
    static std::string messageOf(const std::exception& error);

private:
    /** Refuses a package whose openmmgraph.json contradicts what export_aoti recorded in the compiled program. */
    void checkCompiledMetadata(const GraphModel& model);
    /** Refuses an output whose dtype is not the metadata's ("the energies", "dE/d edge_vectors", ...). */
    void checkOutputType(const torch::Tensor& tensor, const char* what) const;
    /**
     * The three outputs of a program that returns gradients, checked against the sizes of the graph it was given
     * (edges E and local particles n_local, taken before the call: a module may resize its input tensors in place).
     */
    void takeGradientOutputs(const std::vector<torch::Tensor>& outputs, int64_t edges, int64_t particles, int rows, torch::Tensor& energies,
                             torch::Tensor& gradEdges, torch::Tensor& gradPositions) const;

    torch::jit::Module module;
    bool moduleReturnsGradients = false;
    torch::ScalarType outputType = torch::kFloat64; ///< the metadata's dtype: every output's
    std::unique_ptr<torch::inductor::AOTIModelPackageLoader> package;
};

} // namespace GraphPlugin

#endif
