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
    /**
     * Parse the bytes of a model file: a safetensors model, or a TorchScript
     * archive with the graph interface and its openmmgraph.json metadata
     * (docs/torch-models.md; only the metadata is read here).
     */
    static std::shared_ptr<const GraphModel> fromBytes(const std::string& bytes);
    /**
     * nm (length) or kJ/mol (energy) per unit, for the units model files may
     * declare: nm, angstrom, bohr; kJ/mol, kcal/mol, eV, hartree.  False for
     * any other unit.
     */
    static bool unitScale(const std::string& unit, bool length, double& scale);
    /** Read a whole file into memory (throws an OpenMMException naming the path if it cannot). */
    static std::string readFile(const std::string& path);

private:
    static std::shared_ptr<const GraphModel> fromTorchScriptBytes(const std::string& bytes);
};

} // namespace GraphPlugin

#endif
