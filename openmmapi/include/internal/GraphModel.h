#ifndef OPENMM_GRAPH_MODEL_H_
#define OPENMM_GRAPH_MODEL_H_

#include "internal/windowsExportGraph.h"
#include <string>
#include <vector>

namespace GraphPlugin {

/**
 * One dense layer of a fitting or node network (docs/model-format.md section 7).
 * Host memory, float64, row-major.
 */
struct DenseLayer {
    int numInputs = 0;
    int numOutputs = 0;
    std::vector<double> weight;   ///< [numOutputs][numInputs]
    std::vector<double> bias;     ///< [numOutputs]
    std::vector<double> timestep; ///< [numOutputs] for residual layers (ones when the file has none), else empty
    bool residual = false;        ///< h = h + timestep * act(W h + b) (needs numOutputs == numInputs)
};

/**
 * The network of one center type: hidden layers, then a linear output layer.
 * For the fitting network the output layer has one output (kJ/mol after unit
 * conversion); for the node network it has M outputs (dimensionless).
 */
struct DenseNetwork {
    std::vector<DenseLayer> hidden;
    DenseLayer output; ///< residual is false, timestep empty
};

enum class Activation { Tanh, Silu };

/**
 * What a model file holds: the project's format, a TorchScript module with the
 * graph interface, or an AOTInductor package (.pt2) whose program returns the
 * energies and their gradients (docs/torch-models.md).
 */
enum class ModelKind { Native, TorchScript, AOTInductor };

/**
 * A parsed, validated and immutable graph model, already converted to OpenMM
 * units (nm, kJ/mol).  Built only by GraphModelLoader; every platform reads
 * the same object, never the file.
 *
 * Unit conversion: lengths (cutoff, radialR0, radialDr) are in nm; the tables
 * hold f (dimensionless), f' in 1/nm and f'' in 1/nm^2; the fitting network's
 * output layer and energyShift are scaled to kJ/mol.  The descriptor and the
 * node features are dimensionless and not changed.
 */
class OPENMM_EXPORT_GRAPH GraphModel {
public:
    ModelKind kind = ModelKind::Native;
    /**
     * TorchScript and AOTInductor models: the module computes in float32 (else float64) and
     * routes ghost node features through openmmgraph::communicate.  Only the
     * fields above cutoff (types, units, cut-off) are set for them; the module
     * itself is the model's bytes, loaded by the LibTorch plugin.
     */
    bool torchFloat32 = false, torchUsesCommunicate = false;
    /** AOTInductor models: the package was compiled for CUDA devices (metadata "device": "cuda"), else for the CPU. */
    bool torchPackageForCuda = false;
    /**
     * The model returns (energies, dE/d edge_vectors, dE/d positions) (interface "particle_energies_and_gradients":
     * every AOTInductor package, and TorchScript modules that differentiate themselves); else energies only.
     */
    bool torchReturnsGradients = false;
    /**
     * Metadata "capturable": the model's forward (and its backward) neither synchronise with the host nor change
     * shape with the data, given inputs of fixed shapes, so the CUDA platform may capture them into a CUDA graph.
     */
    bool torchCapturable = false;
    int numTypes = 0; ///< T
    std::vector<std::string> typeNames;
    std::vector<int> typeAtomicNumbers;
    std::string lengthUnit, energyUnit; ///< as declared in the file
    double lengthScale = 1;             ///< nm per model length unit
    double energyScale = 1;             ///< kJ/mol per model energy unit
    bool fileIsFloat32 = false;         ///< the tensors of the file were float32
    double cutoff = 0;                  ///< r_c in nm
    int numChannels = 0;                ///< M
    int numAxis = 0;                    ///< M_axis
    int lMax = 0;                       ///< L
    bool descriptorLSum = false;
    double nNorm = 1;
    double radialR0 = 0;     ///< nm
    double radialDr = 0;     ///< nm
    int radialIntervals = 0; ///< K
    Activation activation = Activation::Tanh;
    int numInteractions = 0; ///< 0 or 1
    /** [T][T][L+1][K+1][3][M] : f, f' (1/nm), f'' (1/nm^2) at each knot. */
    std::vector<double> radialTable;
    /** Same layout as radialTable, for the interaction block (empty when numInteractions is 0). */
    std::vector<double> interactionTable;
    std::vector<DenseNetwork> fitting; ///< one per center type
    std::vector<DenseNetwork> node;    ///< one per type (empty when numInteractions is 0)
    std::vector<double> energyShift;   ///< [T] in kJ/mol

    /** (L+1)^2: the number of (l, m) pairs. */
    int numHarmonics() const {
        return (lMax + 1) * (lMax + 1);
    }
    /** Size of D (and of D2): M * M_axis, times (L+1) unless summed over l. */
    int descriptorSize() const {
        return (descriptorLSum ? 1 : lMax + 1) * numChannels * numAxis;
    }
    /** Size of the fitting network's input: descriptorSize() times (1 + numInteractions). */
    int fittingInputSize() const {
        return descriptorSize() * (1 + numInteractions);
    }
    /** Flat offset of knot q of table (a, b, l) in radialTable; add c*M + k for value c, channel k. */
    size_t tableOffset(int a, int b, int l, int q) const {
        return ((((size_t) a * numTypes + b) * (lMax + 1) + l) * (radialIntervals + 1) + q) * 3 * numChannels;
    }
    /** Number of scalar parameters of the model (tables and networks). */
    long long countParameters() const;
};

} // namespace GraphPlugin

#endif
