#ifndef OPENMM_GRAPH_FORCE_H_
#define OPENMM_GRAPH_FORCE_H_

/* -------------------------------------------------------------------------- *
 *                              openmm-graph                                  *
 * -------------------------------------------------------------------------- */

#include "internal/windowsExportGraph.h"
#include "openmm/Context.h"
#include "openmm/Force.h"
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace GraphPlugin {

class GraphModel;

/**
 * A machine-learned graph potential (the compressed model of
 * docs/model-format.md) applied to a chosen set of particles of a System.
 *
 * The model is read once, when the force is created, by the project's single
 * model loader: a malformed file is rejected right here with an
 * OpenMMException that names the key, the expected and the found value.  The
 * force keeps the model's bytes, so a serialized System is self-contained.
 *
 * Only the particles added with addParticle() take part: the graph is built
 * over them alone, and all other particles of the System feel no force from
 * the model (an ML region inside a larger classical System).  Each added
 * particle carries a model type, an index in [0, getNumTypes()).
 *
 * Units: positions, the box and the cut-off are in nm, energies in kJ/mol and
 * forces in kJ/mol/nm, whatever units the model file declares; the loader
 * converts them.
 *
 * Properties (setProperty(); unknown keys and bad values are rejected):
 *
 *  - "CheckFinite": "true" (default), "deferred" or "false".  When true, each
 *    evaluation checks that the energy and every force are finite (and, on
 *    CUDA, within the fixed-point range) and throws an OpenMMException naming
 *    the first bad particle before OpenMM uses them; on the CUDA platform the
 *    host waits for the whole evaluation every step to learn this.
 *    "deferred" (CUDA platform, one device, Domains "single"; elsewhere the
 *    same as "true"): the host waits only for the graph build (row overflow,
 *    coincident or non-finite positions are still handled in the same step)
 *    and learns of a bad energy or force at the next evaluation, which then
 *    throws, naming the particle; so the host's work of a step overlaps the
 *    device's (13 us less per step at 512 particles of the small grade on an
 *    H200), and the bad forces have been used for one step.  "false": as
 *    "deferred" on CUDA but the energy and forces are not checked (the
 *    Reference platforms do not check either; a PyTorch model on CUDA always
 *    checks); for benchmarks.
 *  - "CudaGraph": "auto" (default), "true" or "false".  CUDA platform only:
 *    the whole evaluation (graph build, edge scans, networks, forces) is
 *    captured once into a CUDA graph and replayed, one launch per evaluation;
 *    it is captured again when the periodic box, the neighbour capacity, the
 *    types or OpenMM's buffers change.  "auto" falls back to plain kernel
 *    launches if a capture fails, "true" throws an OpenMMException instead,
 *    "false" never captures.  Results are bitwise the same in every mode.
 *    With a PyTorch model, the model's part is captured when its metadata
 *    says "capturable" (docs/torch-models.md).
 *  - "CudaChunkRows": "auto" (default) or a positive number of rows.  CUDA
 *    platform only: the networks run over chunks of at most this many
 *    particles, so their activations take memory per chunk, not per
 *    particle; "auto" lets the activations take up to a quarter of the
 *    device memory free when the Context is created (at least 1 GiB, at
 *    least 32,768 rows), so systems that fit run in one chunk.  Results
 *    are bitwise the same for every value; a smaller value lowers peak
 *    memory and adds kernel launches.
 *  - "CudaFusedNetwork": "auto" (default), "true" or "false".  CUDA platform
 *    only: the fitting network (invariants, hidden layers, energy output and
 *    their backward) of a block of 4, 8 or 16 particles runs in one kernel, its
 *    intermediates in shared memory, instead of a kernel per layer.  "auto"
 *    fuses when a batch is too small to fill the device with per-layer tiles
 *    (a few thousand particles or fewer), the network is small (at most
 *    131,072 hidden-layer weights per type) and the model allows it: no
 *    interaction block, one chunk (CudaChunkRows), the same layer widths for
 *    every type, 1 to 8 hidden layers of at most 2,048 units, and the tile's
 *    shared memory within the device's limit; "true" fuses whenever the
 *    model allows it and otherwise throws an OpenMMException saying why;
 *    "false" never fuses.  Results are bitwise the same in every mode.
 *  - "CudaFusedCluster": "auto" (default), "1", "2", "4", "8" or "16".  CUDA
 *    platform only, when the fitting network is fused: how many blocks share
 *    a tile of rows, each computing a slice of every layer's columns and
 *    holding only that slice of the weights (a thread-block cluster,
 *    compute capability 9.0 and later; tiles of 16, 32 or 64 rows).  "1" is
 *    one block per tile of 4, 8 or 16 rows that streams all the weights,
 *    and what "auto" takes (clusters are slower: at 512 particles of the
 *    small grade on an H200 the GraphForce's kernels take 103.6-132.6 us a
 *    step with clusters of 4, 8 or 16 blocks against 71.7 us with one block
 *    per tile; docs/cuda-platform.md says why).  A size that cannot run (no
 *    clusters, a slice of more than 128 columns, too little shared memory)
 *    is an OpenMMException when CudaFusedNetwork is "true" and a kernel per
 *    layer when it is "auto".  Results are bitwise the same for every value.
 *  - "CudaFusedResidentWeights": "auto" (default), "true" or "false".  CUDA
 *    platform only, when the fitting network is fused with one block per
 *    tile: whether the W^T of the last hidden layers (all but the first, as
 *    many as fit in the block's shared memory beside the rest) is copied into
 *    shared memory once, during the first layer's product, and read there by
 *    their forward and backward products instead of streaming both weight
 *    copies from L2 (the small grade: 384 KB a block instead of 512 KB).
 *    "auto" does so where the tiles run in one wave of one block per
 *    multiprocessor (the extra shared memory then costs no occupancy);
 *    "true" wherever a layer fits, and otherwise throws an OpenMMException
 *    saying why; "false" never.  Results are bitwise the same in every mode.
 *  - "CudaFusedTileRows": "auto" (default), "4", "8", "16", "32" or "64".
 *    CUDA platform only, when the fitting network is fused: the rows of a
 *    tile.  One block per tile takes 4, 8 or 16 (16 only for layers and
 *    descriptors of at most 512 entries), a cluster 16, 32 or 64 (at most
 *    2,048 / threads a row); "auto" chooses from the
 *    device and the system (docs/cuda-platform.md).  A value that cannot
 *    run is an OpenMMException when CudaFusedNetwork is "true" and a kernel
 *    per layer when it is "auto".  For tuning on other devices; results are
 *    bitwise the same for every value.
 *  - "CudaMomentsScan": "auto" (default), "rows", "streamed" or "fused".
 *    CUDA platform only: how the moments scan reads the radial table.  "rows"
 *    takes a center per block and reads each edge's two knots from L2;
 *    "streamed" gives a block up to 60 centers of one type (medium grade;
 *    docs/cuda-platform.md) and streams that type's table through shared
 *    memory once, in knot order.  "auto" takes "streamed" in single and
 *    mixed precision for more than 32 channels (lane groups of 16 or 32:
 *    the medium and large grades) where it can run and the centers fill
 *    at least two of its blocks a multiprocessor (medium grade on an H200:
 *    15,840 centers), else "rows" (docs/cuda-platform.md has the
 *    measurements).  "streamed" is an
 *    OpenMMException where it cannot run (channels not a multiple of 16
 *    bytes of reals, too little shared memory, a table too fine for its
 *    ring) and needs compute capability 9.0.  The row and streamed scans sum each center's edges in a different order,
 *    so the moments, and every result, differ in rounding; each is bitwise
 *    reproducible.  "fused" runs the row scan inside the fused fitting
 *    network (CudaFusedNetwork), tile by tile while its first weights load,
 *    instead of in a kernel of its own: bitwise the results of "rows".  It
 *    needs single or mixed precision, the fused network in tiles of 4 rows
 *    of one block with a descriptor and layers of at most 512 entries,
 *    l_max at most 1, 20 to 32 channels (a multiple of 4: the small grade)
 *    and room for the scan's sums beside the tile's arrays (lacking only
 *    for layers of a few units); otherwise it is an OpenMMException that
 *    says which.  "auto" takes it wherever it can run and "streamed" was
 *    not taken.
 *  - "CudaForceScan": "auto" (default), "rows" or "streamed".  CUDA
 *    platform only: how the force scan reads the radial table, as
 *    CudaMomentsScan does ("streamed" needs a model without an interaction
 *    block, M a multiple of 16 bytes of reals and compute capability 9.0,
 *    and is an OpenMMException otherwise).  "auto" takes "rows": the
 *    streamed force scan was 29% slower at the medium grade on an H200
 *    (docs/cuda-platform.md).
 *    The forces are bitwise the same for every value.
 *  - "CudaNeighborSearch": "auto" (default), "cells" or "allpairs".  CUDA
 *    platform only: how the rows of the neighbour graph find their
 *    candidates.  "cells" bins the particles into a cell grid at least half
 *    a cut-off thick (sorted by cell) and scans up to 25 columns of cells
 *    around each particle, cut to the cut-off sphere; "allpairs" tests every particle against every other (O(n^2),
 *    no grid, sort or indirection: the fastest for small systems); "auto"
 *    uses "allpairs" up to 1,024 particles and "cells" beyond.  The graph,
 *    and so every result, is bitwise the same for every value.
 *  - "Domains": "single" (default) or "mpi".  With "mpi" every MPI rank
 *    (MPI_COMM_WORLD) runs its own Context for the whole System; the force
 *    evaluates the energies of the rank's own share of particles (a spatial
 *    slab on Reference and CPU, an index range on CUDA), and forces
 *    (in 64-bit fixed point) and energy (in rank order) are summed over the
 *    ranks, so every rank gets bitwise the same values and integrates the
 *    same trajectory.  Needs libOpenMMGraphMPI (docs/mpi.md); MPI is
 *    initialized if the application has not done it.  Reference and CPU
 *    platforms, native and TorchScript models (whose module gets the rank's
 *    particles, its ghosts and the communicate handle); on the CUDA
 *    platform, native models (each rank one GPU, or ranks sharing one; an
 *    interaction block's node features go between the ranks through MPI).
 *  - "TorchCudaContext": "auto" (default), "openmm" or "primary".  CUDA
 *    platform, PyTorch models only: the CUDA context PyTorch runs the model
 *    in.  "openmm": OpenMM's own context, so an evaluation switches no
 *    context; AOTInductor packages only (a TorchScript model's backward runs
 *    on autograd's worker thread, in the primary context); the model's memory
 *    comes from a private pool given back when the Context is destroyed.
 *    "primary": the device's primary context (where the rest of a PyTorch
 *    program works), as openmm-torch does; the GPU interleaves OpenMM's and
 *    PyTorch's contexts.  "auto": "openmm" for AOTInductor packages,
 *    "primary" for TorchScript (docs/torch-models.md).
 */
class OPENMM_EXPORT_GRAPH GraphForce : public OpenMM::Force {
public:
    /**
     * Create a GraphForce from a model file.
     *
     * @param modelPath   path of a model file (safetensors, docs/model-format.md)
     */
    explicit GraphForce(const std::string& modelPath);
    /**
     * Create a GraphForce from the bytes of a model file held in memory.
     *
     * @param modelBytes  the whole content of a model file
     */
    static GraphForce* fromModelBytes(const std::string& modelBytes);
    ~GraphForce();
    /**
     * The model's bytes, exactly as read (what serialization embeds).
     */
    const std::string& getModelBytes() const;
    /**
     * Add a particle of the System to the set the model applies to.
     *
     * @param particle   the index of the particle in the System
     * @param type       the model type of the particle, in [0, getNumTypes())
     * @return the index of the particle within this force
     */
    int addParticle(int particle, int type);
    /** The number of particles the model applies to. */
    int getNumParticles() const;
    /**
     * Get the System particle and model type of a particle of this force.
     *
     * @param index      the index of the particle within this force
     * @param[out] particle   the index of the particle in the System
     * @param[out] type       the model type of the particle
     */
    void getParticleParameters(int index, int& particle, int& type) const;
    /**
     * Set the System particle and model type of a particle of this force.
     */
    void setParticleParameters(int index, int particle, int type);
    /** The number of particle types of the model (T). */
    int getNumTypes() const;
    /** The name of a model type, e.g. "O". */
    const std::string& getTypeName(int type) const;
    /** The atomic number of a model type (0 where it has none). */
    int getTypeAtomicNumber(int type) const;
    /**
     * The index of the model type with a given name; throws an
     * OpenMMException listing the model's types when there is none.
     */
    int getTypeIndex(const std::string& name) const;
    /** The cut-off of the model in nm. */
    double getCutoff() const;
    /**
     * Set whether the model sees periodic boundary conditions (the Context's
     * periodic box, minimum image).  Default: false.
     */
    void setUsesPeriodicBoundaryConditions(bool periodic);
    bool usesPeriodicBoundaryConditions() const override;
    /**
     * Set a property (see the class comment for the keys).  Throws an
     * OpenMMException for an unknown key or a bad value.
     */
    void setProperty(const std::string& key, const std::string& value);
    /** The value of a property (its default when never set). */
    std::string getProperty(const std::string& key) const;
    /** All properties that were set, as key -> value. */
    const std::map<std::string, std::string>& getProperties() const;
    /** The property keys this version knows. */
    static std::vector<std::string> getPropertyKeys();
    /**
     * Copy the particle types into a Context that was created with this force.
     * Only types can change this way: a changed set of particles (their number
     * and System indices), periodicity or property throws an OpenMMException
     * (reinitialize the Context for those).
     */
    void updateParametersInContext(OpenMM::Context& context);
    /**
     * Evaluate the model on the Context's current positions and return the
     * energy of each particle of this force (E_i of the model, kJ/mol), in the
     * order of addParticle().  They sum to the force's energy.  With
     * CheckFinite not "false", a non-finite E_i throws an OpenMMException.
     */
    std::vector<double> getParticleEnergies(OpenMM::Context& context) const;
    /**
     * The parsed, validated model shared by all platforms (internal use).
     */
    std::shared_ptr<const GraphModel> getModel() const;

protected:
    OpenMM::ForceImpl* createImpl() const override;

private:
    GraphForce(const std::string& modelBytes, bool fromBytes);
    struct ParticleInfo {
        int particle, type;
    };
    std::string modelBytes;
    std::shared_ptr<const GraphModel> model;
    std::vector<ParticleInfo> particles;
    bool periodic;
    std::map<std::string, std::string> properties;
};

} // namespace GraphPlugin

#endif /*OPENMM_GRAPH_FORCE_H_*/
