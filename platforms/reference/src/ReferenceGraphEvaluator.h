#ifndef OPENMM_GRAPH_REFERENCE_GRAPH_EVALUATOR_H_
#define OPENMM_GRAPH_REFERENCE_GRAPH_EVALUATOR_H_

#include "ReferenceNeighborGraph.h"
#include "internal/GraphModel.h"
#include "openmm/Vec3.h"
#include "openmm/internal/ThreadPool.h"
#include <functional>
#include <memory>
#include <vector>

namespace GraphPlugin {

/**
 * The whole model of docs/model-format.md in double precision with analytic
 * forces, on a ReferenceNeighborGraph.  Host memory.  Stages, in order:
 * edge scan (moments A), invariants D, node network and interaction moments B
 * (n_interactions = 1), fitting network forward and input-gradient backward,
 * back through D2, the node network and D to dE/dA and dE/dB, and the edge
 * backward that assembles the forces.
 */
class ReferenceGraphEvaluator {
public:
    /**
     * @param pool  threads to spread the work over (the CPU platform's), or
     *              nullptr for one thread.  Results are deterministic for a
     *              given number of threads.
     */
    ReferenceGraphEvaluator(std::shared_ptr<const GraphModel> model, OpenMM::ThreadPool* pool);
    /**
     * @param types            [n] model type of each node of the graph
     * @param graph            the canonical graph over the same n nodes
     * @param forces           if not null, [n] forces in kJ/mol/nm are ADDED to it
     * @param particleEnergies if not null, set to [n] energies E_i in kJ/mol
     * @param owned            if not null, [n] flags: only the energies of the
     *                         owned nodes are computed (the others are 0) and
     *                         the forces are those of their sum (a domain of a
     *                         decomposition).  Work is limited to the owned
     *                         nodes and, with an interaction block, the
     *                         ghosts their rows reach (whose node features
     *                         the owned energies use).
     * @return the energy in kJ/mol (the sum of E_i over the owned nodes in node order)
     */
    double evaluate(const std::vector<int>& types, const ReferenceNeighborGraph& graph, std::vector<OpenMM::Vec3>* forces,
                    std::vector<double>* particleEnergies, const std::vector<char>* owned = nullptr);

private:
    /** sum over the row of i of table(t_i, t_j, l, r) * weight_j[k] * Y_lm(u): moments[lm][k], scaled by 1/n_norm. */
    void scanMoments(int i, const std::vector<int>& types, const ReferenceNeighborGraph& graph, const std::vector<double>& table,
                     const double* nodeWeights, double* moments) const;
    /** D[l][k][k'] = sum_m X[lm][k] A[lm][k'] flattened as the spec says (summed over l when descriptor_l_sum). */
    void invariants(const double* X, const double* A, double* D) const;
    /** Back through invariants(): adds dE/dX and dE/dA given dE/dD (either may be the same array when X == A). */
    void invariantsBackward(const double* X, const double* A, const double* gradD, double* gradX, double* gradA) const;

    /** body(begin, end, thread) over a static partition of [0, n) among the pool's threads. */
    void parallelFor(int n, const std::function<void(int begin, int end, int thread)>& body) const;
    /** body(node, thread) for each node of the list, in a static partition of the list among the threads. */
    void forNodes(const std::vector<int>& nodes, const std::function<void(int node, int thread)>& body) const;
    int numThreads() const;

    std::shared_ptr<const GraphModel> model;
    OpenMM::ThreadPool* pool;
};

} // namespace GraphPlugin

#endif
