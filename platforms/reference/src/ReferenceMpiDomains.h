#ifndef OPENMM_GRAPH_REFERENCE_MPI_DOMAINS_H_
#define OPENMM_GRAPH_REFERENCE_MPI_DOMAINS_H_

#include "openmm/Vec3.h"
#include <cstdint>
#include <string>
#include <vector>

namespace GraphPlugin {

/**
 * The multi-process mode of the GraphForce on the Reference and CPU platforms
 * (property Domains = "mpi", docs/mpi.md): every MPI rank runs its own
 * Context for the whole System and evaluates the energies of its own slab of
 * particles; the forces are summed over the ranks in 64-bit fixed point and
 * the energy in rank order, so every rank gets bitwise the same forces and
 * energy and integrates the same trajectory.
 *
 * MPI comes from libOpenMMGraphMPI, opened at run time (the Reference plugin
 * does not link MPI): next to libOpenMMGraph, else on the library path.
 */
class ReferenceMpiDomains {
public:
    /** Opens the MPI library and initializes MPI if the application has not (OpenMMException if it cannot). */
    ReferenceMpiDomains();
    int getRank() const {
        return rank;
    }
    int getSize() const {
        return size;
    }
    /**
     * The particles this rank owns: [n] flags, a slab of n / size particles in
     * the order of their wrapped fractional coordinate along the first box
     * vector (then index).  A function of the positions alone, so every rank
     * (holding bitwise the same positions) makes the same split.
     *
     * @param positions  [n] nm
     * @param box        the periodic box vectors (nm), or nullptr (then plain x)
     */
    std::vector<char> ownedParticles(const std::vector<OpenMM::Vec3>& positions, const OpenMM::Vec3* box) const;
    /** Sum the forces [n] (kJ/mol/nm) over the ranks in 64-bit fixed point (2^-32 kJ/mol/nm), in place. */
    void sumForces(std::vector<OpenMM::Vec3>& forces) const;
    /** The sum of one energy per rank (kJ/mol), added in rank order on every rank. */
    double sumEnergy(double energy) const;

private:
    void check(int status, const char* what) const;

    int rank = 0, size = 1;
    int (*allreduceInt64)(int64_t*, size_t, char*, size_t) = nullptr;
    int (*sumDoubleOrdered)(const double*, double*, char*, size_t) = nullptr;
};

} // namespace GraphPlugin

#endif
