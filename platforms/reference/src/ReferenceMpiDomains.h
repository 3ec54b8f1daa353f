#ifndef OPENMM_GRAPH_REFERENCE_MPI_DOMAINS_H_
#define OPENMM_GRAPH_REFERENCE_MPI_DOMAINS_H_

#include "OpenMMGraphCommunicate.h"
#include "ReferenceGraphEvaluator.h"
#include "ReferenceNeighborGraph.h"
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
     * The rank that owns each particle: [n], slabs of n / size particles in
     * the order of their wrapped fractional coordinate along the first box
     * vector (then index).  A function of the positions alone, so every rank
     * (holding bitwise the same positions) makes the same split.
     *
     * @param positions  [n] nm
     * @param box        the periodic box vectors (nm), or nullptr (then plain x)
     */
    std::vector<int> ownerRanks(const std::vector<OpenMM::Vec3>& positions, const OpenMM::Vec3* box) const;
    /** [n] flags: the particles this rank owns, given ownerRanks(). */
    std::vector<char> ownedParticles(const std::vector<int>& owner) const;

    /**
     * The node-feature exchange of one evaluation (the interaction block):
     * this rank's ghosts (not owned, reached by owned rows) with an MPI engine
     * of the communicate interface (libOpenMMGraphMPI), created collectively
     * on construction and destroyed with the object.
     */
    class Exchange : public NodeFeatureExchange {
    public:
        Exchange(const ReferenceMpiDomains& domains, const std::vector<int>& owner, const ReferenceNeighborGraph& graph);
        ~Exchange();
        const std::vector<int>& ghosts() const override {
            return ghostNodes;
        }
        /** This rank's particles, ascending (the owned rows of the communicate endpoint, in order). */
        const std::vector<int>& owned() const {
            return ownedNodes;
        }
        /** The communicate handle of the exchange (docs/communicate.md), for a model that calls the operator itself. */
        int64_t communicator() const {
            return handle;
        }
        void forward(std::vector<double>& values, int M) override;
        void reverse(std::vector<double>& gradients, int M) override;

    private:
        void run(std::vector<double>& values, int M, bool isForward);
        const ReferenceMpiDomains& domains;
        std::vector<int> ownedNodes, ghostNodes;
        std::vector<double> table; ///< [owned + ghost][M]
        int64_t handle = 0;
    };
    /**
     * Sum the forces [n] (kJ/mol/nm) over the ranks in 64-bit fixed point (2^-32 kJ/mol/nm), in place.  A rank
     * whose forces cannot be summed (a value not finite or beyond the fixed-point range) or whose evaluation
     * failed (`failure` not empty) still joins the sum, with an error word: then every rank throws (this one
     * its own message), so no rank waits in MPI for it.
     */
    void sumForces(std::vector<OpenMM::Vec3>& forces, const std::string& failure = std::string()) const;
    /** The sum of one energy per rank (kJ/mol), added in rank order on every rank. */
    double sumEnergy(double energy) const;
    /** Sum integers over the ranks, in place (exact, so every rank gets bitwise the same values). */
    void sumInt64(std::vector<int64_t>& values) const;
    /**
     * sumInt64 that also agrees on failure: every rank calls it at the same point with its own `failure` (empty
     * when it has none).  One more word, appended for the sum and removed after it, counts the ranks that failed;
     * a failing rank contributes zeros for `values`.  When any rank failed, every rank throws (this rank's message,
     * or one naming how many other ranks failed): the step that lets one rank's error reach all of them instead
     * of a hang.
     */
    void sumAgreed(std::vector<int64_t>& values, const std::string& failure) const;
    /** sumAgreed of no values: throws on every rank when any rank has a `failure`. */
    void agree(const std::string& failure) const;

private:
    void check(int status, const char* what) const;

    int rank = 0, size = 1;
    int (*allreduceInt64)(int64_t*, size_t, char*, size_t) = nullptr;
    int (*sumDoubleOrdered)(const double*, double*, char*, size_t) = nullptr;
    int (*communicatorCreate)(int64_t, int64_t, const int32_t*, const int64_t*, int64_t*, char*, size_t) = nullptr;
    int (*communicatorDestroy)(int64_t, char*, size_t) = nullptr;
    int (*communicateForward)(int64_t, const OMMGraphCommBuffer*) = nullptr;
    int (*communicateReverse)(int64_t, const OMMGraphCommBuffer*) = nullptr;
    const char* (*communicateLastError)() = nullptr;
};

} // namespace GraphPlugin

#endif
