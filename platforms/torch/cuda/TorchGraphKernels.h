#ifndef OPENMM_GRAPH_TORCH_GRAPH_KERNELS_H_
#define OPENMM_GRAPH_TORCH_GRAPH_KERNELS_H_

/**
 * Device stages of a PyTorch model on the CUDA platform (TorchGraphKernels.cu):
 * the canonical graph of CudaNeighborGraph turned into the tensors of the graph
 * interface (docs/torch-models.md), and the model's gradients turned into
 * fixed-point forces in OpenMM's buffer.  Every launcher only enqueues work on
 * `stream`.  `real` is the model's dtype (float or double).
 *
 * The layout handed to the model has static shapes, so that no count is read
 * back to the host: n + 1 rows, the last one a padding particle (index n,
 * type 0, at the origin) that owns every padding edge; the edge arrays have
 * edgeCapacity entries; edges past the real ones are self-edges of the padding
 * particle, (2 r_c, 0, 0) long.  Its energy is not counted and its edges give
 * no force.
 */

#include "GraphDeviceTypes.h"
#include <cstddef>
#include <cstdint>
#include <cuda_runtime.h>

namespace GraphPlugin {

/** Bytes of CUB scratch for launchTorchRowOffsets over n rows. */
size_t getTorchScanScratchBytes(int n);

/**
 * Exclusive offsets of the rows: scanned [n + 1] int64 (scanned[n] = edges of the graph), from rowCount [n] (each
 * at most `capacity`, the rows' storage); counts [n] int64 is scratch.
 */
void launchTorchRowOffsets(const int* rowCount, int n, int capacity, long long* counts, long long* scanned, void* scratch,
                           size_t scratchBytes, cudaStream_t stream);

/**
 * The model's inputs, in the model length unit (toModel = 1 / nm per unit):
 * positions [n + 1][3], rowOffsets [n + 2] (clipped to edgeCapacity), neighbors
 * [edgeCapacity] int64, edgeVectors [edgeCapacity][3] (x_j - x_i, minimum image
 * in double, then rounded), box [3][3] (written when writeBox), and
 * status->edgeCount.  A graph with more edges than edgeCapacity is cut at it
 * (the caller grows and recomputes).
 */
template <typename real>
void launchTorchGraphInputs(const double* positionsNm, const int* rows, const int* rowCount, int capacity, const long long* scanned, int n,
                            GraphBox<double> box, double toModel, double paddingLength, long long edgeCapacity, bool writeBox,
                            real* positions, long long* rowOffsets, long long* neighbors, real* edgeVectors, real* boxOut,
                            GraphStatus* status, cudaStream_t stream);

/**
 * Forces from the model's gradients (model energy per model length; scale converts to kJ/mol/nm), added in 64-bit
 * fixed point to OpenMM's buffer [3][paddedAtoms] (slot order): edge e of row i with neighbour j adds
 * +dE/dd_e to i and -dE/dd_e to j; dE/dx_k subtracts from k.  gradEdges or gradPositions may be nullptr.
 * Contributions that are not finite or beyond the fixed-point range are reported in status.
 */
template <typename real>
void launchTorchForces(const real* gradEdges, const real* gradPositions, const long long* rowOffsets, const long long* neighbors, int n,
                       double scale, const int* slotOfNode, long long* forceBuffer, int paddedAtoms, GraphStatus* status,
                       cudaStream_t stream);

/**
 * The sum of energies [0, n) times scale (kJ/mol), in a fixed order, added to OpenMM's energy buffer (when not null); a
 * non-finite energy is reported in status.
 */
template <typename real>
void launchTorchEnergy(const real* energies, int n, double scale, GraphStatus* status, void* energyBuffer, bool energyIsDouble,
                       cudaStream_t stream);

} // namespace GraphPlugin

#endif
