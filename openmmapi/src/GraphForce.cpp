#include "GraphForce.h"
#include "internal/GraphForceImpl.h"
#include "internal/GraphModelLoader.h"
#include "internal/QuotedText.h"
#include "openmm/OpenMMException.h"
#include "openmm/internal/ContextImpl.h"
#include <algorithm>
#include <cerrno>
#include <cstdlib>

using namespace GraphPlugin;
using namespace OpenMM;

namespace {

const std::map<std::string, std::string>& propertyDefaults() {
    static const std::map<std::string, std::string> defaults = {
        {"CheckFinite", "true"},        {"CudaChunkRows", "auto"},    {"CudaForceScan", "auto"},
        {"CudaFusedCluster", "auto"},   {"CudaFusedNetwork", "auto"}, {"CudaFusedResidentWeights", "auto"},
        {"CudaFusedTileRows", "auto"},  {"CudaGraph", "auto"},        {"CudaMomentsScan", "auto"},
        {"CudaNeighborSearch", "auto"}, {"Domains", "single"},        {"TorchCudaContext", "auto"}};
    return defaults;
}

/**
 * Whether `value` is exactly a decimal whole number in [least, most]: an optional '-' and digits, nothing else
 * (no space, '+', hexadecimal prefix or trailing text).
 */
bool isWholeNumberIn(const std::string& value, long long least, long long most) {
    const size_t first = !value.empty() && value[0] == '-' ? 1 : 0;
    if (first == value.size())
        return false;
    for (size_t i = first; i < value.size(); i++)
        if (value[i] < '0' || value[i] > '9')
            return false;
    errno = 0;
    const long long number = std::strtoll(value.c_str(), nullptr, 10);
    return errno == 0 && number >= least && number <= most;
}

/** A loader's message about a model read from a file, with the path after its subject ("GraphForce: model file 'PATH': ..."). */
std::string withPath(const std::string& message, const std::string& path) {
    for (const char* subject : {"GraphForce: model file", "GraphForce: TorchScript model", "GraphForce: AOTInductor model"}) {
        const std::string prefix = std::string(subject) + ": ";
        if (message.compare(0, prefix.size(), prefix) == 0)
            return subject + (" '" + path + "': ") + message.substr(prefix.size());
    }
    const std::string generic = "GraphForce: ";
    return "GraphForce: model file '" + path +
           "': " + (message.compare(0, generic.size(), generic) == 0 ? message.substr(generic.size()) : message);
}

/** Throws an OpenMMException naming the call, the index and the valid range unless 0 <= index < size. */
void checkIndex(const char* call, const char* what, int index, size_t size) {
    if (index >= 0 && (size_t) index < size)
        return;
    std::string range = size == 0 ? "there are none" : "valid: 0 to " + std::to_string(size - 1);
    throw OpenMMException(std::string("GraphForce: ") + call + ": " + what + " " + std::to_string(index) + " is out of range (" + range +
                          ")");
}

} // namespace

GraphForce::GraphForce(const std::string& modelPath) : modelBytes(GraphModelLoader::readFile(modelPath)), periodic(false) {
    try {
        model = GraphModelLoader::fromBytes(modelBytes);
    }
    catch (const OpenMMException& error) {
        throw OpenMMException(withPath(error.what(), modelPath));
    }
}

GraphForce::GraphForce(const std::string& bytes, bool) : modelBytes(bytes), periodic(false) {
    model = GraphModelLoader::fromBytes(modelBytes);
}

GraphForce* GraphForce::fromModelBytes(const std::string& modelBytes) {
    return new GraphForce(modelBytes, true);
}

GraphForce::~GraphForce() {}

const std::string& GraphForce::getModelBytes() const {
    return modelBytes;
}

std::shared_ptr<const GraphModel> GraphForce::getModel() const {
    return model;
}

int GraphForce::addParticle(int particle, int type) {
    if (particle < 0)
        throw OpenMMException("GraphForce: addParticle: particle index " + std::to_string(particle) + " is negative");
    if (type < 0 || type >= getNumTypes())
        throw OpenMMException("GraphForce: addParticle: type " + std::to_string(type) + " is out of range; the model has " +
                              std::to_string(getNumTypes()) + " types (0 to " + std::to_string(getNumTypes() - 1) + ")");
    particles.push_back(ParticleInfo{particle, type});
    return (int) particles.size() - 1;
}

int GraphForce::getNumParticles() const {
    return (int) particles.size();
}

void GraphForce::getParticleParameters(int index, int& particle, int& type) const {
    checkIndex("getParticleParameters", "index", index, particles.size());
    particle = particles[index].particle;
    type = particles[index].type;
}

void GraphForce::setParticleParameters(int index, int particle, int type) {
    checkIndex("setParticleParameters", "index", index, particles.size());
    if (particle < 0)
        throw OpenMMException("GraphForce: setParticleParameters: particle index " + std::to_string(particle) + " is negative");
    if (type < 0 || type >= getNumTypes())
        throw OpenMMException("GraphForce: setParticleParameters: type " + std::to_string(type) + " is out of range; the model has " +
                              std::to_string(getNumTypes()) + " types (0 to " + std::to_string(getNumTypes() - 1) + ")");
    particles[index] = ParticleInfo{particle, type};
}

int GraphForce::getNumTypes() const {
    return model->numTypes;
}

const std::string& GraphForce::getTypeName(int type) const {
    checkIndex("getTypeName", "type", type, model->typeNames.size());
    return model->typeNames[type];
}

int GraphForce::getTypeAtomicNumber(int type) const {
    checkIndex("getTypeAtomicNumber", "type", type, model->typeAtomicNumbers.size());
    return model->typeAtomicNumbers[type];
}

int GraphForce::getTypeIndex(const std::string& name) const {
    std::string known;
    for (int i = 0; i < model->numTypes; i++) {
        if (model->typeNames[i] == name)
            return i;
        known += (i ? ", " : "") + model->typeNames[i];
    }
    throw OpenMMException("GraphForce: the model has no type named '" + name + "'; its types are " + known);
}

double GraphForce::getCutoff() const {
    return model->cutoff;
}

void GraphForce::setUsesPeriodicBoundaryConditions(bool periodic) {
    this->periodic = periodic;
}

bool GraphForce::usesPeriodicBoundaryConditions() const {
    return periodic;
}

std::vector<std::string> GraphForce::getPropertyKeys() {
    std::vector<std::string> keys;
    for (auto& entry : propertyDefaults())
        keys.push_back(entry.first);
    return keys;
}

void GraphForce::setProperty(const std::string& key, const std::string& value) {
    if (!propertyDefaults().count(key)) {
        std::string known;
        for (const std::string& k : getPropertyKeys())
            known += (known.empty() ? "" : ", ") + k;
        throw OpenMMException("GraphForce: unknown property " + quotedText(key) + "; the known properties are " + known);
    }
    const std::vector<std::string> flag = {"auto", "true", "false"};
    const std::vector<std::string> kernels = {"auto", "rows", "streamed"};
    // Each property with a fixed set of values: those values, and what a number means.
    const std::map<std::string, std::pair<std::vector<std::string>, std::string>> choices = {
        {"CheckFinite", {{"true", "deferred", "false"}, ""}},
        {"Domains", {{"single", "mpi"}, ""}},
        {"CudaGraph", {flag, ""}},
        {"CudaFusedNetwork", {flag, ""}},
        {"CudaFusedResidentWeights", {flag, ""}},
        {"CudaFusedCluster", {{"auto", "1", "2", "4", "8", "16"}, " (blocks per tile of the fused network)"}},
        {"CudaFusedTileRows", {{"auto", "4", "8", "16", "32", "64"}, " (rows per tile of the fused network)"}},
        {"CudaForceScan", {kernels, ""}},
        {"CudaMomentsScan", {{"auto", "rows", "streamed", "fused"}, ""}},
        {"CudaNeighborSearch", {{"auto", "cells", "allpairs"}, ""}},
        {"TorchCudaContext", {{"auto", "openmm", "primary"}, ""}},
    };
    auto choice = choices.find(key);
    if (choice != choices.end()) {
        const std::vector<std::string>& allowed = choice->second.first;
        if (std::find(allowed.begin(), allowed.end(), value) == allowed.end()) {
            std::string list;
            for (size_t i = 0; i < allowed.size(); i++)
                list += (i == 0 ? "" : i + 1 == allowed.size() ? " or " : ", ") + quotedText(allowed[i]);
            throw OpenMMException("GraphForce: property " + key + " must be " + list + choice->second.second + ", found " +
                                  quotedText(value));
        }
    }
    if (key == "CudaChunkRows" && value != "auto" && !isWholeNumberIn(value, 1, 2147483647LL))
        throw OpenMMException("GraphForce: property CudaChunkRows must be \"auto\" or a positive whole number of rows, found " +
                              quotedText(value));
    properties[key] = value;
}

std::string GraphForce::getProperty(const std::string& key) const {
    auto it = properties.find(key);
    if (it != properties.end())
        return it->second;
    auto def = propertyDefaults().find(key);
    if (def == propertyDefaults().end())
        throw OpenMMException("GraphForce: unknown property '" + key + "'");
    return def->second;
}

const std::map<std::string, std::string>& GraphForce::getProperties() const {
    return properties;
}

void GraphForce::updateParametersInContext(Context& context) {
    dynamic_cast<GraphForceImpl&>(getImplInContext(context)).updateParametersInContext(getContextImpl(context));
}

std::vector<double> GraphForce::getParticleEnergies(Context& context) const {
    return dynamic_cast<GraphForceImpl&>(const_cast<GraphForce*>(this)->getImplInContext(context))
        .getParticleEnergies(const_cast<GraphForce*>(this)->getContextImpl(context));
}

ForceImpl* GraphForce::createImpl() const {
    return new GraphForceImpl(*this);
}
