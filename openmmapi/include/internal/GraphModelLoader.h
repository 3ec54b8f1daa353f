#ifndef OPENMM_GRAPH_MODEL_LOADER_H_
#define OPENMM_GRAPH_MODEL_LOADER_H_

#include "internal/GraphModel.h"
#include <memory>
#include <string>

namespace GraphPlugin {

/**
 * The one model loader of the project: parses a safetensors model file
 * (docs/model-format.md), checks every metadata key, tensor name, dtype,
 * shape and value, converts units and returns an immutable GraphModel.
 *
 * Any rule broken throws an OpenMMException starting with "GraphForce: model
 * file" that names the key or tensor, the expected and the found value.  The
 * loader never reads past the buffer it is given.
 */
class OPENMM_EXPORT_GRAPH GraphModelLoader {
public:
    /** Parse the bytes of a model file. */
    static std::shared_ptr<const GraphModel> fromBytes(const std::string& bytes);
    /** Read a whole file into memory (throws an OpenMMException naming the path if it cannot). */
    static std::string readFile(const std::string& path);
};

} // namespace GraphPlugin

#endif
