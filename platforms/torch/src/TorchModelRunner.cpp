#include "TorchModelRunner.h"
#include "openmm/OpenMMException.h"
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <sstream>
#include <unistd.h>

using namespace GraphPlugin;
using namespace OpenMM;

namespace {

/**
 * The compiled program of an AOTInductor package needs libtorch.so (by that
 * name, without a path); a Python process that imported torch has it loaded,
 * a C++ program linking only libtorch_cpu may not.  Load it from the folder of
 * the LibTorch this plugin runs with, so that the package's dlopen finds it.
 */
void preloadLibTorch() {
    Dl_info info;
    if (dladdr(reinterpret_cast<void*>(&at::globalContext), &info) == 0 || info.dli_fname == nullptr)
        return;
    std::string path(info.dli_fname);
    const size_t slash = path.rfind('/');
    if (slash == std::string::npos)
        return;
    dlopen((path.substr(0, slash) + "/libtorch.so").c_str(), RTLD_NOW | RTLD_GLOBAL); // absent in some builds: the package then says so
}

} // namespace

TorchModelRunner::TorchModelRunner(const GraphForce& force, torch::Device device, bool currentContext) {
    const GraphModel& model = *force.getModel();
    outputType = model.torchFloat32 ? torch::kFloat32 : torch::kFloat64;
    if (model.kind == ModelKind::AOTInductor) {
        if (model.torchPackageForCuda != device.is_cuda())
            throw OpenMMException(std::string("GraphForce: AOTInductor model: the package was compiled for ") +
                                  (model.torchPackageForCuda ? "CUDA devices" : "the CPU") + " and cannot run on the " +
                                  (device.is_cuda() ? "CUDA" : "Reference or CPU") +
                                  " platform; export it with export_aoti(..., device=\"" + (device.is_cuda() ? "cuda" : "cpu") +
                                  "\") (docs/torch-models.md)");
        preloadLibTorch();
        // The loader reads a file: the package's bytes go to a private temporary file, removed once loaded.
        char path[] = "/tmp/openmmgraph-XXXXXX.pt2";
        const int fd = mkstemps(path, 4);
        if (fd < 0)
            throw OpenMMException(std::string("GraphForce: AOTInductor model: cannot create a temporary file for the package: ") +
                                  std::strerror(errno));
        const std::string& bytes = force.getModelBytes();
        size_t written = 0;
        while (written < bytes.size()) {
            const ssize_t count = write(fd, bytes.data() + written, bytes.size() - written);
            if (count <= 0)
                break;
            written += (size_t) count;
        }
        close(fd);
        try {
            if (written != bytes.size())
                throw std::runtime_error("cannot write the package to " + std::string(path));
            // Device index -1: the program takes the device of the current context (an index makes it call cudaSetDevice).
            const c10::DeviceIndex index = device.is_cuda() && !currentContext ? device.index() : (c10::DeviceIndex) -1;
            // A CPU program checks the dtype and shape of its inputs (else a package whose metadata misstates its
            // dtype reads past its buffers), unless the user chose otherwise.  Not set for CUDA packages, where the
            // checks have not run on a GPU yet (the environment is the process's: a CPU package loaded first sets it).
            if (!device.is_cuda())
                setenv("AOTI_RUNTIME_CHECK_INPUTS", "1", 0);
            package = std::make_unique<torch::inductor::AOTIModelPackageLoader>(path, "model", false, 1, index);
        }
        catch (const std::exception& error) {
            std::remove(path);
            throw OpenMMException(std::string("GraphForce: AOTInductor model: LibTorch cannot load the package (it runs only on the "
                                              "kind of machine and with the torch version it was compiled for): ") +
                                  messageOf(error));
        }
        std::remove(path);
        checkCompiledMetadata(model);
        return;
    }
    moduleReturnsGradients = model.torchReturnsGradients;
    try {
        std::istringstream bytes(force.getModelBytes());
        module = torch::jit::load(bytes, device);
        module.eval();
    }
    catch (const std::exception& error) {
        throw OpenMMException(std::string("GraphForce: TorchScript model: LibTorch cannot load the module: ") + messageOf(error));
    }
}

void TorchModelRunner::checkOutputType(const torch::Tensor& tensor, const char* what) const {
    // A sparse output or one on the meta device (shapes without data) would fail later in LibTorch with a message that
    // does not name the model.
    if (tensor.layout() != c10::kStrided || tensor.is_meta()) {
        std::stringstream message;
        message << "GraphForce: " << kindName() << " model: " << what << " must be a dense tensor that holds its data; found a "
                << (tensor.is_meta() ? std::string("meta-device") : c10::str(tensor.layout())) << " tensor (docs/torch-models.md)";
        throw OpenMMException(message.str());
    }
    if (tensor.scalar_type() != outputType)
        throw OpenMMException(std::string("GraphForce: ") + kindName() + " model: " + what + " are " + c10::toString(tensor.scalar_type()) +
                              "; the metadata's dtype is " + c10::toString(outputType) +
                              " (every output must have it; docs/torch-models.md)");
}

std::string TorchModelRunner::messageOf(const std::exception& error) {
    const c10::Error* torchError = dynamic_cast<const c10::Error*>(&error);
    return torchError != nullptr ? torchError->what_without_backtrace() : error.what();
}

void TorchModelRunner::checkCompiledMetadata(const GraphModel& model) {
    // export_aoti records what the compiled program was made for (aot_inductor.metadata); a package whose
    // openmmgraph.json says otherwise would index past the program's tables, which aborts the process inside its
    // parallel loops.  Packages made otherwise carry no such record and are taken as their metadata says.
    const std::unordered_map<std::string, std::string> compiled = package->get_metadata();
    auto types = compiled.find("openmmgraph_num_types");
    if (types != compiled.end() && types->second != std::to_string(model.numTypes))
        throw OpenMMException("GraphForce: AOTInductor model: the program was compiled for " + types->second +
                              " types, but its openmmgraph.json lists " + std::to_string(model.numTypes) +
                              " (was the metadata edited? export the model again with export_aoti)");
    auto dtype = compiled.find("openmmgraph_dtype");
    const std::string stated = model.torchFloat32 ? "float32" : "float64";
    if (dtype != compiled.end() && dtype->second != stated)
        throw OpenMMException("GraphForce: AOTInductor model: the program was compiled for " + dtype->second +
                              ", but its openmmgraph.json says " + stated +
                              " (was the metadata edited? export the model again with export_aoti)");
}

void TorchModelRunner::takeGradientOutputs(const std::vector<torch::Tensor>& outputs, int64_t edges, int64_t particles, int rows,
                                           torch::Tensor& energies, torch::Tensor& gradEdges, torch::Tensor& gradPositions) const {
    if (outputs.size() != 3)
        throw OpenMMException(std::string("GraphForce: ") + kindName() + " model: the program returned " + std::to_string(outputs.size()) +
                              " tensors; expected 3 (energies, dE/d edge_vectors, dE/d positions; docs/torch-models.md)");
    auto expectShape = [&](const torch::Tensor& tensor, std::vector<int64_t> shape, const char* what) {
        if (!tensor.defined() || tensor.sizes() != c10::IntArrayRef(shape)) {
            std::stringstream message;
            message << "GraphForce: " << kindName() << " model: " << what << " has shape "
                    << (tensor.defined() ? tensor.sizes() : c10::IntArrayRef()) << "; expected " << c10::IntArrayRef(shape)
                    << " (docs/torch-models.md)";
            throw OpenMMException(message.str());
        }
    };
    expectShape(outputs[0], {rows}, "the energies");
    expectShape(outputs[1], {edges, 3}, "dE/d edge_vectors");
    expectShape(outputs[2], {particles, 3}, "dE/d positions");
    checkOutputType(outputs[0], "the energies");
    checkOutputType(outputs[1], "dE/d edge_vectors");
    checkOutputType(outputs[2], "dE/d positions");
    energies = outputs[0];
    gradEdges = outputs[1];
    gradPositions = outputs[2];
}

void TorchModelRunner::run(const std::vector<torch::Tensor>& inputs, int rows, int counted, int64_t communicator, bool wantGradients,
                           void* stream, torch::Tensor& energies, torch::Tensor& gradEdges, torch::Tensor& gradPositions) {
    // The graph's sizes as the caller's kernel knows them: the gradients are read with these, whatever the program does
    // to its input tensors (a module may resize one in place).
    const int64_t edges = inputs[4].size(0), particles = inputs[0].size(0);
    if (package) {
        takeGradientOutputs(package->run(inputs, stream), edges, particles, rows, energies, gradEdges, gradPositions);
        return;
    }
    // A module that returns its gradients differentiates inside forward: autograd must be on for it.
    torch::AutoGradMode gradMode(wantGradients || moduleReturnsGradients);
    std::vector<torch::jit::IValue> arguments(inputs.begin(), inputs.end());
    arguments.push_back((int64_t) rows);
    arguments.push_back(communicator);
    const torch::jit::IValue result = module.forward(arguments);
    if (moduleReturnsGradients) {
        if (!result.isTuple())
            throw OpenMMException("GraphForce: TorchScript model: its metadata says interface \"particle_energies_and_gradients\", but "
                                  "forward returned " +
                                  result.tagKind() +
                                  ", not a tuple (energies, dE/d edge_vectors, dE/d positions)"
                                  " (docs/torch-models.md)");
        std::vector<torch::Tensor> outputs;
        for (const torch::jit::IValue& element : result.toTupleRef().elements()) {
            if (!element.isTensor())
                throw OpenMMException("GraphForce: TorchScript model: forward returned a tuple holding " + element.tagKind() +
                                      "; expected three tensors (energies, dE/d edge_vectors, dE/d positions; docs/torch-models.md)");
            outputs.push_back(element.toTensor().detach());
        }
        takeGradientOutputs(outputs, edges, particles, rows, energies, gradEdges, gradPositions);
        return;
    }
    if (!result.isTensor())
        throw OpenMMException("GraphForce: TorchScript model: forward returned " + result.tagKind() + "; expected the tensor of the " +
                              std::to_string(rows) +
                              " owned particles' energies (or declare interface "
                              "\"particle_energies_and_gradients\" in the metadata; docs/torch-models.md)");
    energies = result.toTensor();
    if (energies.dim() != 1 || energies.size(0) != rows) {
        std::stringstream message;
        message << "GraphForce: TorchScript model: forward returned a tensor of shape " << energies.sizes()
                << "; expected the energies of the " << rows << " owned particles, shape [" << rows << "] (docs/torch-models.md)";
        throw OpenMMException(message.str());
    }
    checkOutputType(energies, "the energies");
    if (wantGradients) {
        torch::Tensor total = (counted == rows ? energies : energies.narrow(0, 0, counted)).sum();
        if (!total.requires_grad()) {
            // Energies that depend on neither edge_vectors nor positions (e.g. per-type reference energies): no forces.
            gradEdges = torch::Tensor();
            gradPositions = torch::Tensor();
            return;
        }
        std::vector<torch::Tensor> gradients = torch::autograd::grad({total}, {inputs[4], inputs[0]}, {}, /*retain_graph=*/false,
                                                                     /*create_graph=*/false, /*allow_unused=*/true);
        gradEdges = gradients[0];
        gradPositions = gradients[1];
    }
}
