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
 * The communicate operation for the native interaction block (docs/communicate.md)
 * in a domain decomposition: node-feature rows of this domain's ghosts come
 * from their owners, and the ghosts' gradients go back to them.  Arrays are
 * indexed by node ([n][M], host memory); only owned and ghost rows are used.
 */
class NodeFeatureExchange {
public:
    virtual ~NodeFeatureExchange() {
    }
    /** The ghost nodes of this domain: not owned, reached by the rows of owned nodes (ascending). */
    virtual const std::vector<int>& ghosts() const = 0;
    /** Set the ghost rows of values [n][M] from their owners' rows. */
    virtual void forward(std::vector<double>& values, int M) = 0;
    /** Add the ghost rows of gradients [n][M] into their owners' rows (on the owners' domains), then zero them. */
    virtual void reverse(std::vector<double>& gradients, int M) = 0;
};

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
     * @param owned            if not null, [n] flags: this domain of a
     *                         decomposition.  Only the energies of the owned
     *                         nodes are computed (the others are 0) and the
     *                         forces are this domain's share of the gradient of
     *                         the total energy: summed over the domains they
     *                         give the forces of the whole system.  Work is
     *                         limited to the owned nodes (their moments,
     *                         networks and rows).
     * @param exchange         with owned and an interaction block (required
     *                         then): the node features of the ghosts come from
     *                         their owners and their gradients go back, so the
     *                         halo stays one cut-off wide
     * @return the energy in kJ/mol (the sum of E_i over the owned nodes in node order)
     */
    double evaluate(const std::vector<int>& types, const ReferenceNeighborGraph& graph, std::vector<OpenMM::Vec3>* forces,
                    std::vector<double>* particleEnergies, const std::vector<char>* owned = nullptr, NodeFeatureExchange* exchange = nullptr);

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
