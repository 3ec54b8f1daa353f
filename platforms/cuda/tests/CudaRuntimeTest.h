#ifndef OPENMM_GRAPH_CUDA_RUNTIME_TEST_H_
#define OPENMM_GRAPH_CUDA_RUNTIME_TEST_H_

// What the tests that call the CUDA platform's launch functions directly (TestCudaDenseTiles, TestCudaGridSetup)
// share: a check of CUDA runtime calls and whether there is a device to run on (they skip themselves without one).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

/** Fails the test (ASSERT) when a CUDA runtime call does not return cudaSuccess, naming the call. */
#define CUDA_OK(call) ASSERT_EQ(cudaSuccess, (call)) << #call

/** Whether the CUDA runtime sees a device. */
inline bool haveCudaDevice() {
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

#endif
