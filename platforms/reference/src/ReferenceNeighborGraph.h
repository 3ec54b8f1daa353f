#ifndef OPENMM_GRAPH_REFERENCE_NEIGHBOR_GRAPH_H_
#define OPENMM_GRAPH_REFERENCE_NEIGHBOR_GRAPH_H_

#include "openmm/Vec3.h"
#include <cstdint>
#include <vector>

namespace GraphPlugin {

/**
 * The compact canonical neighbour graph of docs/model-format.md section 2, in
 * CSR form, built in O(n) with cells.  Host memory, double precision.
 *
 * Row i lists every j != i with |d_ij| < cutoff, d_ij = x_j - x_i reduced to
 * the minimum image, in canonical order (increasing r^2, then increasing j).
 * Indices are the positions in the `positions` vector given to build() (the
 * particle order of the Force).
 */
class ReferenceNeighborGraph {
public:
    /**
     * Build the graph.
     *
     * @param positions   [n] positions in nm
     * @param boxVectors  the three periodic box vectors in nm (OpenMM's reduced
     *                    form), or nullptr for no periodic boundary conditions;
     *                    the caller has checked cutoff <= half the smallest height
     * @param cutoff      r_c in nm
     * Throws an OpenMMException naming both particles (as indices of
     * `positions`, translated through `particleNames`) when two of them are at
     * distance zero (up to the rounding of the coordinates: isSamePosition).
     */
    void build(const std::vector<OpenMM::Vec3>& positions, const OpenMM::Vec3* boxVectors, double cutoff,
               const std::vector<int>& particleNames);
    int getNumNodes() const {
        return (int) rowOffsets.size() - 1;
    }
    int64_t getNumEdges() const {
        return rowOffsets.empty() ? 0 : rowOffsets.back();
    }
    std::vector<int64_t> rowOffsets;       ///< [n + 1]: row i is edges [rowOffsets[i], rowOffsets[i+1])
    std::vector<int> neighbors;            ///< [edges]: j of each edge
    std::vector<OpenMM::Vec3> edgeVectors; ///< [edges]: d_ij = x_j - x_i (minimum image), nm
};

} // namespace GraphPlugin

#endif
