#include "GraphForce.h"
#include "internal/GraphForceImpl.h"
#include "internal/GraphModelLoader.h"
#include "openmm/OpenMMException.h"
#include "openmm/internal/AssertionUtilities.h"
#include "openmm/internal/ContextImpl.h"
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
    ASSERT_VALID_INDEX(index, particles);
    particle = particles[index].particle;
    type = particles[index].type;
}

void GraphForce::setParticleParameters(int index, int particle, int type) {
    ASSERT_VALID_INDEX(index, particles);
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
    ASSERT_VALID_INDEX(type, model->typeNames);
    return model->typeNames[type];
}

int GraphForce::getTypeAtomicNumber(int type) const {
    ASSERT_VALID_INDEX(type, model->typeAtomicNumbers);
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
        throw OpenMMException("GraphForce: unknown property '" + key + "'; the known properties are " + known);
    }
    if (key == "CheckFinite" && value != "true" && value != "deferred" && value != "false")
        throw OpenMMException("GraphForce: property CheckFinite must be \"true\", \"deferred\" or \"false\", found \"" + value + "\"");
    if (key == "Domains" && value != "single" && value != "mpi")
        throw OpenMMException("GraphForce: property Domains must be \"single\" or \"mpi\", found \"" + value + "\"");
    if (key == "CudaGraph" && value != "auto" && value != "true" && value != "false")
        throw OpenMMException("GraphForce: property CudaGraph must be \"auto\", \"true\" or \"false\", found \"" + value + "\"");
    if (key == "CudaFusedNetwork" && value != "auto" && value != "true" && value != "false")
        throw OpenMMException("GraphForce: property CudaFusedNetwork must be \"auto\", \"true\" or \"false\", found \"" + value + "\"");
    if (key == "CudaFusedResidentWeights" && value != "auto" && value != "true" && value != "false")
        throw OpenMMException("GraphForce: property CudaFusedResidentWeights must be \"auto\", \"true\" or \"false\", found \"" + value +
                              "\"");
    if (key == "CudaFusedCluster" && value != "auto" && value != "1" && value != "2" && value != "4" && value != "8" && value != "16")
        throw OpenMMException(
            "GraphForce: property CudaFusedCluster must be \"auto\", \"1\", \"2\", \"4\", \"8\" or \"16\" (blocks per tile "
            "of the fused network), found \"" +
            value + "\"");
    if (key == "CudaFusedTileRows" && value != "auto" && value != "4" && value != "8" && value != "16" && value != "32" && value != "64")
        throw OpenMMException("GraphForce: property CudaFusedTileRows must be \"auto\", \"4\", \"8\", \"16\", \"32\" or \"64\" (rows per "
                              "tile of the fused network), found \"" +
                              value + "\"");
    if (key == "CudaForceScan" && value != "auto" && value != "rows" && value != "streamed")
        throw OpenMMException("GraphForce: property CudaForceScan must be \"auto\", \"rows\" or \"streamed\", found \"" + value + "\"");
    if (key == "CudaMomentsScan" && value != "auto" && value != "rows" && value != "streamed")
        throw OpenMMException("GraphForce: property CudaMomentsScan must be \"auto\", \"rows\" or \"streamed\", found \"" + value + "\"");
    if (key == "CudaNeighborSearch" && value != "auto" && value != "cells" && value != "allpairs")
        throw OpenMMException("GraphForce: property CudaNeighborSearch must be \"auto\", \"cells\" or \"allpairs\", found \"" + value +
                              "\"");
    if (key == "TorchCudaContext" && value != "auto" && value != "openmm" && value != "primary")
        throw OpenMMException("GraphForce: property TorchCudaContext must be \"auto\", \"openmm\" or \"primary\", found \"" + value + "\"");
    if (key == "CudaChunkRows" && value != "auto" && !isWholeNumberIn(value, 1, 2147483647LL))
        throw OpenMMException("GraphForce: property CudaChunkRows must be \"auto\" or a positive whole number of rows, found \"" + value +
                              "\"");
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
