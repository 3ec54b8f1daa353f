#include "ReferenceGraphEvaluator.h"
#include "ReferenceDenseNetwork.h"
#include "ReferenceRadialTable.h"
#include "openmm/OpenMMException.h"
#include <algorithm>
#include <cmath>
#include <iterator>

using namespace GraphPlugin;
using namespace OpenMM;

ReferenceGraphEvaluator::ReferenceGraphEvaluator(std::shared_ptr<const GraphModel> model, OpenMM::ThreadPool* pool) : model(model), pool(pool) {}

void ReferenceGraphEvaluator::scanMoments(int i, const std::vector<int>& types, const ReferenceNeighborGraph& graph,
                                          const std::vector<double>& table, const double* nodeWeights, double* moments) const {
    const GraphModel& m = *model;
    const int M = m.numChannels, H = m.numHarmonics();
    std::vector<double> value(M), deriv(M);
    std::fill(moments, moments + H * M, 0.0);
    for (int64_t e = graph.rowOffsets[i]; e < graph.rowOffsets[i + 1]; e++) {
        int j = graph.neighbors[e];
        const Vec3& d = graph.edgeVectors[e];
        EdgeGeometry edge(d, m.lMax);
        const double r = edge.r;
        const double* Y = edge.Y;
        for (int l = 0; l <= m.lMax; l++) {
            evaluateRadial(m, table, types[i], types[j], l, r, value.data(), deriv.data());
            if (nodeWeights != nullptr)
                for (int k = 0; k < M; k++)
                    value[k] *= nodeWeights[(size_t) j * M + k];
            for (int lm = l * l; lm < (l + 1) * (l + 1); lm++)
                for (int k = 0; k < M; k++)
                    moments[lm * M + k] += value[k] * Y[lm];
        }
    }
    for (int x = 0; x < H * M; x++)
        moments[x] /= m.nNorm;
}

void ReferenceGraphEvaluator::invariants(const double* X, const double* A, double* D) const {
    const GraphModel& m = *model;
    const int M = m.numChannels, Maxis = m.numAxis;
    std::fill(D, D + m.descriptorSize(), 0.0);
    for (int l = 0; l <= m.lMax; l++) {
        double* Dl = m.descriptorLSum ? D : D + (size_t) l * M * Maxis;
        for (int lm = l * l; lm < (l + 1) * (l + 1); lm++)
            for (int k = 0; k < M; k++)
                for (int kp = 0; kp < Maxis; kp++)
                    Dl[k * Maxis + kp] += X[lm * M + k] * A[lm * M + kp];
    }
}

void ReferenceGraphEvaluator::invariantsBackward(const double* X, const double* A, const double* gradD, double* gradX,
                                                 double* gradA) const {
    const GraphModel& m = *model;
    const int M = m.numChannels, Maxis = m.numAxis;
    for (int l = 0; l <= m.lMax; l++) {
        const double* gDl = m.descriptorLSum ? gradD : gradD + (size_t) l * M * Maxis;
        for (int lm = l * l; lm < (l + 1) * (l + 1); lm++)
            for (int k = 0; k < M; k++)
                for (int kp = 0; kp < Maxis; kp++) {
                    double g = gDl[k * Maxis + kp];
                    gradX[lm * M + k] += g * A[lm * M + kp];
                    gradA[lm * M + kp] += g * X[lm * M + k];
                }
    }
}

void ReferenceGraphEvaluator::parallelFor(int n, const std::function<void(int begin, int end, int thread)>& body) const {
    const int numThreads = pool ? pool->getNumThreads() : 1;
    if (numThreads <= 1 || n < 2 * numThreads) {
        body(0, n, 0);
        return;
    }
    pool->execute([&](OpenMM::ThreadPool&, int thread) { body((int) ((long long) n * thread / numThreads), (int) ((long long) n * (thread + 1) / numThreads), thread); });
    pool->waitForThreads();
}

void ReferenceGraphEvaluator::forNodes(const std::vector<int>& nodes, const std::function<void(int node, int thread)>& body) const {
    parallelFor((int) nodes.size(), [&](int begin, int end, int thread) {
        for (int x = begin; x < end; x++)
            body(nodes[x], thread);
    });
}

int ReferenceGraphEvaluator::numThreads() const {
    return pool ? std::max(1, pool->getNumThreads()) : 1;
}

double ReferenceGraphEvaluator::evaluate(const std::vector<int>& types, const ReferenceNeighborGraph& graph, std::vector<Vec3>* forces,
                                         std::vector<double>* particleEnergies, const std::vector<char>* owned,
                                         NodeFeatureExchange* exchange) {
    const GraphModel& m = *model;
    const int n = graph.getNumNodes();
    const int M = m.numChannels, H = m.numHarmonics(), HM = H * M;
    const int descriptorSize = m.descriptorSize();
    const bool interacting = m.numInteractions == 1;

    // The nodes whose energies are computed (all, or this domain's), and, with an interaction block, the
    // nodes whose node-feature gradients they produce (the owned ones and the ghosts their rows reach).
    std::vector<int> ownedNodes, pullNodes;
    if (owned == nullptr) {
        ownedNodes.resize(n);
        for (int i = 0; i < n; i++)
            ownedNodes[i] = i;
        pullNodes = ownedNodes;
    }
    else {
        if (interacting && exchange == nullptr)
            throw OpenMM::OpenMMException("GraphForce: internal error: a domain of a model with an interaction block needs a node-feature exchange");
        for (int i = 0; i < n; i++)
            if ((*owned)[i])
                ownedNodes.push_back(i);
        if (interacting) {
            std::merge(ownedNodes.begin(), ownedNodes.end(), exchange->ghosts().begin(), exchange->ghosts().end(), std::back_inserter(pullNodes));
        }
    }

    // Stage 1: moments A and invariants D.
    std::vector<double> A((size_t) n * HM, 0.0), D((size_t) n * descriptorSize, 0.0);
    forNodes(ownedNodes, [&](int i, int) {
        scanMoments(i, types, graph, m.radialTable, nullptr, &A[(size_t) i * HM]);
        invariants(&A[(size_t) i * HM], &A[(size_t) i * HM], &D[(size_t) i * descriptorSize]);
    });

    // Stage 2 (interaction block): node features phi of the owned nodes (the ghosts' from their owners), moments B and
    // invariants D2.
    std::vector<ReferenceDenseNetwork> nodeNetworks(interacting ? n : 0);
    std::vector<double> phi, B, D2;
    if (interacting) {
        phi.assign((size_t) n * M, 0.0);
        forNodes(ownedNodes, [&](int j, int) {
            std::vector<double> out;
            nodeNetworks[j].forward(m.node[types[j]], m.activation, &D[(size_t) j * descriptorSize], out);
            std::copy(out.begin(), out.end(), &phi[(size_t) j * M]);
        });
        if (exchange != nullptr)
            exchange->forward(phi, M);
        B.assign((size_t) n * HM, 0.0);
        D2.assign((size_t) n * descriptorSize, 0.0);
        forNodes(ownedNodes, [&](int i, int) {
            scanMoments(i, types, graph, m.interactionTable, phi.data(), &B[(size_t) i * HM]);
            invariants(&B[(size_t) i * HM], &A[(size_t) i * HM], &D2[(size_t) i * descriptorSize]);
        });
    }

    // Stage 3: fitting network of the owned nodes, energies and dE/dD, dE/dD2.
    const int fittingInput = m.fittingInputSize();
    std::vector<double> gradD((size_t) n * descriptorSize, 0.0), gradD2(interacting ? (size_t) n * descriptorSize : 0, 0.0);
    std::vector<double> energies(n, 0.0);
    parallelFor((int) ownedNodes.size(), [&](int begin, int end, int) {
        std::vector<double> input(fittingInput), out, gradInput;
        ReferenceDenseNetwork fitting;
        const double one = 1.0;
        for (int x = begin; x < end; x++) {
            const int i = ownedNodes[x];
            std::copy(&D[(size_t) i * descriptorSize], &D[(size_t) (i + 1) * descriptorSize], input.begin());
            if (interacting)
                std::copy(&D2[(size_t) i * descriptorSize], &D2[(size_t) (i + 1) * descriptorSize], input.begin() + descriptorSize);
            fitting.forward(m.fitting[types[i]], m.activation, input.data(), out);
            energies[i] = out[0] + m.energyShift[types[i]];
            if (forces) {
                fitting.backward(m.fitting[types[i]], m.activation, &one, gradInput);
                std::copy(gradInput.begin(), gradInput.begin() + descriptorSize, &gradD[(size_t) i * descriptorSize]);
                if (interacting)
                    std::copy(gradInput.begin() + descriptorSize, gradInput.end(), &gradD2[(size_t) i * descriptorSize]);
            }
        }
    });
    double energy = 0;
    for (int i : ownedNodes)
        energy += energies[i];
    if (particleEnergies)
        *particleEnergies = energies;
    if (!forces)
        return energy;

    // Stage 4: back to dE/dA (and dE/dB, dE/dphi through the interaction block).
    std::vector<double> gradA((size_t) n * HM, 0.0), gradB(interacting ? (size_t) n * HM : 0, 0.0);
    if (interacting) {
        forNodes(ownedNodes, [&](int i, int) {
            invariantsBackward(&B[(size_t) i * HM], &A[(size_t) i * HM], &gradD2[(size_t) i * descriptorSize], &gradB[(size_t) i * HM],
                               &gradA[(size_t) i * HM]);
        });
        // dE/dphi_j = sum over the centers i that have j as a neighbour of (1/n_norm) sum_lm gradB_i[lm][k] R2(t_i, t_j)(r) Y_lm(u_ij),
        // pulled over the row of j (the graph is symmetric; u_ij = -u_ji).  gradB is zero outside the owned nodes;
        // the ghosts' rows then go to their owners.
        std::vector<double> gradPhi((size_t) n * M, 0.0);
        forNodes(pullNodes, [&](int j, int) {
            std::vector<double> value(M), deriv(M);
            for (int64_t e = graph.rowOffsets[j]; e < graph.rowOffsets[j + 1]; e++) {
                const int i = graph.neighbors[e];
                EdgeGeometry edge(-graph.edgeVectors[e], m.lMax);
                for (int l = 0; l <= m.lMax; l++) {
                    evaluateRadial(m, m.interactionTable, types[i], types[j], l, edge.r, value.data(), deriv.data());
                    for (int lm = l * l; lm < (l + 1) * (l + 1); lm++)
                        for (int k = 0; k < M; k++)
                            gradPhi[(size_t) j * M + k] += gradB[(size_t) i * HM + lm * M + k] * value[k] * edge.Y[lm] / m.nNorm;
                }
            }
        });
        if (exchange != nullptr)
            exchange->reverse(gradPhi, M);
        forNodes(ownedNodes, [&](int j, int) {
            std::vector<double> gradNodeInput;
            nodeNetworks[j].backward(m.node[types[j]], m.activation, &gradPhi[(size_t) j * M], gradNodeInput);
            for (int x = 0; x < descriptorSize; x++)
                gradD[(size_t) j * descriptorSize + x] += gradNodeInput[x];
        });
    }
    forNodes(ownedNodes, [&](int i, int) {
        invariantsBackward(&A[(size_t) i * HM], &A[(size_t) i * HM], &gradD[(size_t) i * descriptorSize], &gradA[(size_t) i * HM],
                           &gradA[(size_t) i * HM]);
    });

    // Stage 5: edge backward over the rows of the active nodes.  dE/dd for d = x_j - x_i; F_i += dE/dd,
    // F_j -= dE/dd, into one buffer per thread, added in thread order (deterministic for a given number of threads).
    const int threads = numThreads();
    std::vector<std::vector<Vec3>> threadForces(threads, std::vector<Vec3>(threads > 1 ? n : 0));
    forNodes(ownedNodes, [&](int i, int thread) {
        std::vector<Vec3>& target = threads > 1 ? threadForces[thread] : *forces;
        std::vector<double> value(M), deriv(M);
        for (int64_t e = graph.rowOffsets[i]; e < graph.rowOffsets[i + 1]; e++) {
            const int j = graph.neighbors[e];
            EdgeGeometry edge(graph.edgeVectors[e], m.lMax);
            const double r = edge.r;
            const double* u = edge.u;
            const double* Y = edge.Y;
            Vec3 gradEdge;
            for (int block = 0; block < (interacting ? 2 : 1); block++) {
                const std::vector<double>& table = block == 0 ? m.radialTable : m.interactionTable;
                const double* G = block == 0 ? &gradA[(size_t) i * HM] : &gradB[(size_t) i * HM];
                for (int l = 0; l <= m.lMax; l++) {
                    evaluateRadial(m, table, types[i], types[j], l, r, value.data(), deriv.data());
                    if (block == 1)
                        for (int k = 0; k < M; k++) {
                            value[k] *= phi[(size_t) j * M + k];
                            deriv[k] *= phi[(size_t) j * M + k];
                        }
                    for (int lm = l * l; lm < (l + 1) * (l + 1); lm++) {
                        double sumValue = 0, sumDeriv = 0;
                        for (int k = 0; k < M; k++) {
                            sumValue += G[lm * M + k] * value[k];
                            sumDeriv += G[lm * M + k] * deriv[k];
                        }
                        // d/dd [R(r) Y(u)] = R'(r) Y u + R(r) (g - u (u.g)) / r, g = dY/du.
                        double uDotG = u[0] * edge.grad[lm][0] + u[1] * edge.grad[lm][1] + u[2] * edge.grad[lm][2];
                        for (int c = 0; c < 3; c++)
                            gradEdge[c] += (sumDeriv * Y[lm] * u[c] + sumValue * (edge.grad[lm][c] - u[c] * uDotG) / r) / m.nNorm;
                    }
                }
            }
            target[i] += gradEdge;
            target[j] -= gradEdge;
        }
    });
    if (threads > 1)
        for (int t = 0; t < threads; t++)
            for (int i = 0; i < n; i++)
                (*forces)[i] += threadForces[t][i];
    return energy;
}
