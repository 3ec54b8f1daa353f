#include "ReferenceDenseNetwork.h"
#include <cmath>

using namespace GraphPlugin;

namespace {

double activate(Activation activation, double z) {
    if (activation == Activation::Tanh)
        return std::tanh(z);
    return z / (1.0 + std::exp(-z));
}

double activateDerivative(Activation activation, double z) {
    if (activation == Activation::Tanh) {
        double t = std::tanh(z);
        return 1.0 - t * t;
    }
    double sigma = 1.0 / (1.0 + std::exp(-z));
    return sigma * (1.0 + z * (1.0 - sigma));
}

} // namespace

void ReferenceDenseNetwork::forward(const DenseNetwork& network, Activation activation, const double* input, std::vector<double>& output) {
    const int numHidden = (int) network.hidden.size();
    layerInputs.resize(numHidden + 1);
    preActivations.resize(numHidden);
    int width = numHidden > 0 ? network.hidden[0].numInputs : network.output.numInputs;
    layerInputs[0].assign(input, input + width);
    for (int n = 0; n < numHidden; n++) {
        const DenseLayer& layer = network.hidden[n];
        const std::vector<double>& h = layerInputs[n];
        std::vector<double>& z = preActivations[n];
        std::vector<double>& next = layerInputs[n + 1];
        z.resize(layer.numOutputs);
        next.resize(layer.numOutputs);
        for (int o = 0; o < layer.numOutputs; o++) {
            double sum = layer.bias[o];
            const double* w = &layer.weight[(size_t) o * layer.numInputs];
            for (int i = 0; i < layer.numInputs; i++)
                sum += w[i] * h[i];
            z[o] = sum;
            double y = activate(activation, sum);
            next[o] = layer.residual ? h[o] + layer.timestep[o] * y : y;
        }
    }
    const DenseLayer& out = network.output;
    const std::vector<double>& h = layerInputs[numHidden];
    output.resize(out.numOutputs);
    for (int o = 0; o < out.numOutputs; o++) {
        double sum = out.bias[o];
        for (int i = 0; i < out.numInputs; i++)
            sum += out.weight[(size_t) o * out.numInputs + i] * h[i];
        output[o] = sum;
    }
}

void ReferenceDenseNetwork::backward(const DenseNetwork& network, Activation activation, const double* gradOutput,
                                     std::vector<double>& gradInput) {
    const int numHidden = (int) network.hidden.size();
    const DenseLayer& out = network.output;
    std::vector<double> gradH(out.numInputs, 0.0);
    for (int o = 0; o < out.numOutputs; o++)
        for (int i = 0; i < out.numInputs; i++)
            gradH[i] += out.weight[(size_t) o * out.numInputs + i] * gradOutput[o];
    for (int n = numHidden - 1; n >= 0; n--) {
        const DenseLayer& layer = network.hidden[n];
        std::vector<double> gradPrevious(layer.numInputs, 0.0);
        if (layer.residual)
            gradPrevious = gradH;
        for (int o = 0; o < layer.numOutputs; o++) {
            double gradY = layer.residual ? gradH[o] * layer.timestep[o] : gradH[o];
            double gradZ = gradY * activateDerivative(activation, preActivations[n][o]);
            const double* w = &layer.weight[(size_t) o * layer.numInputs];
            for (int i = 0; i < layer.numInputs; i++)
                gradPrevious[i] += w[i] * gradZ;
        }
        gradH.swap(gradPrevious);
    }
    gradInput = gradH;
}
