#ifndef OPENMM_GRAPH_REFERENCE_DENSE_NETWORK_H_
#define OPENMM_GRAPH_REFERENCE_DENSE_NETWORK_H_

#include "internal/GraphModel.h"
#include <vector>

namespace GraphPlugin {

/**
 * Forward and input-gradient backward of one DenseNetwork (docs/model-format.md
 * section 7) for one input vector.  Host, double.  Keeps the activations of
 * the last forward() for backward().
 */
class ReferenceDenseNetwork {
public:
    /**
     * @param input    [network.hidden[0].numInputs] (or output.numInputs when there are no hidden layers)
     * @param output   out: [network.output.numOutputs]
     */
    void forward(const DenseNetwork& network, Activation activation, const double* input, std::vector<double>& output);
    /**
     * @param gradOutput  [output size]: dE/d(output)
     * @param gradInput   out: [input size], dE/d(input) (overwritten)
     */
    void backward(const DenseNetwork& network, Activation activation, const double* gradOutput, std::vector<double>& gradInput);

private:
    std::vector<std::vector<double>> layerInputs;    ///< h_{n-1} of each hidden layer, then h_H
    std::vector<std::vector<double>> preActivations; ///< z of each hidden layer
};

} // namespace GraphPlugin

#endif
