#ifndef OPENMM_GRAPH_NETWORK_DEVICE_FUNCTIONS_CUH_
#define OPENMM_GRAPH_NETWORK_DEVICE_FUNCTIONS_CUH_

/**
 * The per-element formulas of the node stage (invariants, dense layers, the
 * energy output and their backward), shared by the per-layer kernels
 * (EdgeScanKernels.cu, DenseLayerKernels.cu) and the fused network kernel
 * (FusedNetworkKernels.cu), so that both compute every value with the same
 * operations in the same order: bitwise the same results.
 */

#include "GraphDeviceFunctions.cuh"
#include "GraphKernelLaunch.h"

namespace GraphPlugin {

/** The group g whose range [starts[g], starts[g + 1]) holds `index` (a linear search over numGroups <= MaxBatchedGroups). */
__device__ inline int groupOf(const int* starts, int numGroups, int index) {
    int g = 0;
    while (g < numGroups - 1 && index >= starts[g + 1])
        g++;
    return g;
}

template <typename real> __device__ inline real activate(int activation, real z) {
    if (activation == GraphTanh)
        return tanh(z);
    if (activation == GraphSilu)
        return z / (1 + exp(-z));
    return z;
}

template <typename real> __device__ inline real activateDerivative(int activation, real z) {
    if (activation == GraphTanh) {
        real t = tanh(z);
        return 1 - t * t;
    }
    if (activation == GraphSilu) {
        real s = 1 / (1 + exp(-z));
        return s * (1 + z * (1 - s));
    }
    return 1;
}

/**
 * A dense layer's output for column col from its product acc = sum_k W[col][k] h[k]:
 * z = acc + bias; act'(z) into *deriv (when deriv); returns act(z), or
 * input + timestep act(z) when residual (input: h[col]).
 */
template <typename real>
__device__ inline real denseForwardValue(int activation, bool residual, real acc, real bias, real timestep, real input, real* deriv) {
    const real z = acc + bias;
    const real value = activate(activation, z);
    if (deriv)
        *deriv = activation == GraphTanh ? 1 - value * value : activateDerivative(activation, z);
    return residual ? input + timestep * value : value;
}

/** dE/dz of a dense layer's output k from dE/d(out): g act'(z) (times the timestep when residual). */
template <typename real> __device__ inline real denseOutputGradient(int activation, bool residual, real g, real deriv, real timestep) {
    real value = g;
    if (activation != GraphIdentity)
        value *= deriv;
    if (residual)
        value *= timestep;
    return value;
}

/** dE/dh[col] of a dense layer from acc = sum_k dz[k] W[k][col]: plus dE/d(out)[col] when residual. */
template <typename real> __device__ inline real denseInputGradient(bool residual, real acc, real gradOutput) {
    return acc + (residual ? gradOutput : real(0));
}

/**
 * One warp's share of w . h over `width` entries (lane k, k + 32, ...),
 * summed over the warp in a fixed butterfly: every lane returns the total.
 */
template <typename real> __device__ inline real warpDot(const real* __restrict__ weight, const real* hidden, int width, int lane) {
    real sum = 0;
    for (int k = lane; k < width; k += 32)
        sum += weight[k] * hidden[k];
    return warpSum(sum);
}

/**
 * Adds a particle's energy to the evaluation's fixed-point sum
 * (GraphStatus::energyHigh/Low/Top, integer atomics: order independent), or
 * reports it when not finite or beyond the fixed-point range.
 */
__device__ inline void addParticleEnergy(GraphStatus* status, int node, double e) {
    if (!(fabs(e) < FixedPointLimit))
        reportError(status, GraphErrorNonFiniteEnergy, node, -1, e);
    else {
        // e = high / 2^8 + low / 2^40, and high's multiple of 2^32 (see GraphStatus).
        const GraphEnergyWords words = energyWordsOf(e);
        atomicAdd((unsigned long long*) &status->energyHigh, (unsigned long long) words.high);
        atomicAdd((unsigned long long*) &status->energyLow, (unsigned long long) words.low);
        atomicAdd((unsigned long long*) &status->energyTop, (unsigned long long) words.top);
    }
}

/**
 * sum over lm in [lmBegin, lmEnd), in order, of X[lm ld + k] A[lm ld + k'] (X, A: a center's [H][M] moments, rows ld apart):
 * the m (and, with the l-sum, l) sum of one invariant.  Unrolled where the bounds are compile-time constants.
 */
template <typename real> __device__ inline real invariantSum(const real* X, const real* A, int ld, int lmBegin, int lmEnd, int k, int kp) {
    real sum = 0;
#pragma unroll
    for (int lm = lmBegin; lm < lmEnd; lm++)
        sum += X[lm * ld + k] * A[lm * ld + kp];
    return sum;
}

/**
 * Invariant `flat` (= [l][k][k'] or, with the l-sum, [k][k']) of one center: sum over m (and over l with the l-sum) of
 * X[lm][k] A[lm][k'] (X, A: the center's [H][M]; invariantSum).
 */
template <typename real>
__device__ inline real invariantValue(const GraphModelParams<real>& model, const real* X, const real* A, int flat) {
    const int M = model.numChannels, Maxis = model.numAxis;
    const int lFirst = model.descriptorLSum ? 0 : flat / (M * Maxis);
    const int lLast = model.descriptorLSum ? model.lMax : lFirst;
    return invariantSum(X, A, M, lFirst * lFirst, (lLast + 1) * (lLast + 1), (flat / Maxis) % M, flat % Maxis);
}

/** dD[l] (rows [k] of M_axis entries) within the descriptor gradient g (the same flat index as the invariants). */
template <typename real> __device__ inline const real* descriptorGradientOf(const GraphModelParams<real>& model, const real* g, int l) {
    return g + (model.descriptorLSum ? 0 : l * model.numChannels * model.numAxis);
}

/** gx = sum over k' < M_axis, in order, of g[k'] a[k'] (g: dD[l][k][.], a: A[lm][.]). */
template <typename real> __device__ inline real invariantGradientXSum(const real* g, const real* a, int Maxis) {
    real gx = 0;
    for (int kp = 0; kp < Maxis; kp++)
        gx += g[kp] * a[kp];
    return gx;
}

/** ga = sum over kk < M, in order, of g[kk gStride] x[kk] (g: &dD[l][0][k'] with rows gStride apart, x: X[lm][.]). */
template <typename real> __device__ inline real invariantGradientASum(const real* g, int gStride, const real* x, int M) {
    real ga = 0;
    for (int kk = 0; kk < M; kk++)
        ga += g[kk * gStride] * x[kk];
    return ga;
}

/**
 * The invariants' backward for entry x = [lm][k] of one center, from its
 * descriptor gradient g: gx = sum_k' dD[l][k][k'] A[lm][k'] (channel k as the
 * first factor; invariantGradientXSum) and ga = sum_k dD[l][k][k'] X[lm][k] with
 * k' = k < M_axis (as the second factor, invariantGradientASum; 0 otherwise).
 */
template <typename real>
__device__ inline void invariantGradient(const GraphModelParams<real>& model, const real* X, const real* A, const real* g, int x, real& gx,
                                         real& ga) {
    const int M = model.numChannels, Maxis = model.numAxis;
    const int lm = x / M, k = x % M;
    const real* gl = descriptorGradientOf(model, g, degreeOf(lm));
    gx = invariantGradientXSum(gl + k * Maxis, A + lm * M, Maxis);
    ga = k < Maxis ? invariantGradientASum(gl + k, Maxis, X + lm * M, M) : real(0);
}

} // namespace GraphPlugin

#endif
