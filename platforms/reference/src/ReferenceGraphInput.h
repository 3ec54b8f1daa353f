#ifndef OPENMM_GRAPH_REFERENCE_GRAPH_INPUT_H_
#define OPENMM_GRAPH_REFERENCE_GRAPH_INPUT_H_

#include "ReferenceNeighborGraph.h"
#include "openmm/internal/ContextImpl.h"
#include "openmm/reference/ReferencePlatform.h"
#include <vector>

namespace GraphPlugin {

/** The platform data (positions, forces, box; host memory) of a Context on the Reference or CPU platform. */
OpenMM::ReferencePlatform::PlatformData& referencePlatformData(OpenMM::ContextImpl& context);

/**
 * The input of one evaluation on the Reference and CPU platforms: gathers the
 * positions of the force's particles (nm, force order) into localPositions,
 * checks that they are finite and that the cut-off (nm) fits the periodic
 * box, and builds the canonical graph.  Errors are OpenMMExceptions naming
 * the System particle.  Returns the box vectors (nm), or nullptr when the
 * force is not periodic.
 */
const OpenMM::Vec3* buildReferenceGraph(OpenMM::ContextImpl& context, double cutoff, bool periodic, const std::vector<int>& particles,
                                        std::vector<OpenMM::Vec3>& localPositions, ReferenceNeighborGraph& graph);

/**
 * The output of one evaluation: checks (when checkFinite) that the energy
 * and the forces are finite, then adds the forces (kJ/mol/nm, force order;
 * nullptr: none) to the Context's.
 */
void addReferenceForces(OpenMM::ContextImpl& context, const std::vector<int>& particles, const std::vector<OpenMM::Vec3>* localForces,
                        double energy, bool checkFinite);

} // namespace GraphPlugin

#endif
