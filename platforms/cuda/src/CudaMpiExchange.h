#ifndef OPENMM_GRAPH_CUDA_MPI_EXCHANGE_H_
#define OPENMM_GRAPH_CUDA_MPI_EXCHANGE_H_

#include "CudaGraphExchange.h"
#include "ReferenceMpiDomains.h"
#include "openmm/OpenMMException.h"
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace GraphPlugin {

/**
 * CudaGraphExchange between MPI ranks (property Domains = "mpi" on the CUDA
 * platform, models with an interaction block): each rank's pipeline computes
 * the rows of its own centers; an exchange point stages the rank's rows to
 * host memory, sums a buffer of all rows over the ranks as 64-bit integers
 * (every byte has exactly one non-zero contributor, so the integer sum is the
 * bitwise union: every rank gets bitwise the rows of their owners) and copies
 * it back to the device.  A rank that cannot stage its rows still joins the
 * sum with an error word, and so does a rank whose evaluation failed before a point (joinRemaining), so every
 * rank throws instead of one waiting in MPI.  It waits for the device twice per point
 * (the staging), and moves every row through MPI_Allreduce: simple and exact,
 * at the cost of n x width bytes per rank and point (docs/mpi.md).  One
 * domain per process: `domain` is this rank.
 */
class CudaMpiExchange : public CudaGraphExchange {
public:
    /**
     * @param domains the MPI ranks (ReferenceMpiDomains::sumInt64)
     * @param first, count [ranks] the centers of each rank (force order)
     * @param n        the force's particles (rows of every exchanged array)
     */
    CudaMpiExchange(const ReferenceMpiDomains& domains, const std::vector<int>& first, const std::vector<int>& count, int n);
    void attach(int domain, Point point, CUdeviceptr array, size_t bytesPerNode) override;
    void allGather(int domain, Point point, CUstream stream) override;
    bool allOf(int domain, bool value) override;
    /**
     * Before each evaluation (CudaCalcGraphForceKernel::executeRanks): no point of it joined yet.  `injectFailure`:
     * the failure of OMMGRAPH_MPI_TEST_FAILURE's "exchange" (docs/mpi.md): the host copy back of the NodeFeatures
     * point throws on this rank after the sum, as a failed copy would.
     */
    void beginEvaluation(bool injectFailure = false);
    /**
     * After an evaluation that failed on this rank with `failure` (an exception between or before the exchange
     * points): join the sums of the points it did not reach (NodeFeatures; InteractionMomentGradients when
     * includeForces) with it, so that the other ranks throw there instead of waiting in MPI.  Never throws.
     */
    void joinRemaining(bool includeForces, const std::string& failure);

private:
    const ReferenceMpiDomains& domains;
    std::vector<int> first, count;
    int n;
    struct Slot {
        CUdeviceptr array = 0;
        size_t bytesPerNode = 0;
    };
    std::array<Slot, NumPoints> slots;
    std::array<bool, NumPoints> joined{}; ///< the points of the current evaluation whose sum this rank joined
    bool injectedFailure = false;
    std::vector<int64_t> words; ///< host staging of one point: the rows (rounded up to 8 bytes), then the error word
};

/** The error of a failure injected by OMMGRAPH_MPI_TEST_FAILURE=<rank>:<where> (docs/mpi.md). */
OpenMM::OpenMMException injectedFailureError(int rank, const std::string& where);

} // namespace GraphPlugin

#endif
