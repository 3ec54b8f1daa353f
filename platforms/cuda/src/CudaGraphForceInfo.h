#ifndef OPENMM_GRAPH_CUDA_GRAPH_FORCE_INFO_H_
#define OPENMM_GRAPH_CUDA_GRAPH_FORCE_INFO_H_

#include "openmm/common/ComputeForceInfo.h"
#include <utility>
#include <vector>

namespace GraphPlugin {

/**
 * What the CUDA platform's atom reordering must know about a GraphForce (one per CudaContext, added with
 * CudaContext::addForce, which owns it).
 *
 * When the System is periodic (a cut-off force with periodic boundaries), OpenMM moves each molecule into the box
 * when it reorders atoms (every 250 steps, and at setPositions), where a molecule is what constraints and the
 * forces' particle groups hold together.  A GraphForce without periodic boundary conditions computes plain
 * distances between its particles, so they must move together: they are one particle group (OpenMM joins them into
 * one molecule, which it translates by whole box vectors as a unit).  A periodic GraphForce uses minimum-image
 * distances, which any such move leaves unchanged: it defines no group.  Particle parameters never hold a
 * reordering back: the graph build reads every particle through OpenMM's atom order (atomIndex).
 */
class CudaGraphForceInfo : public OpenMM::ComputeForceInfo {
public:
    /** particles: the System indices of the force's particles; periodic: the force's usesPeriodicBoundaryConditions(). */
    CudaGraphForceInfo(std::vector<int> particles, bool periodic) : particles(std::move(particles)), periodic(periodic) {}
    bool areParticlesIdentical(int, int) override {
        return true;
    }
    int getNumParticleGroups() override {
        return periodic || particles.size() < 2 ? 0 : 1;
    }
    void getParticlesInGroup(int, std::vector<int>& group) override {
        group = particles;
    }
    bool areGroupsIdentical(int, int) override {
        return true;
    }

private:
    std::vector<int> particles;
    bool periodic;
};

} // namespace GraphPlugin

#endif
