// The shared GraphForce tests on the CUDA platform in single precision.
#define GRAPH_TEST_PRECISION "single"
#include "CudaTestPlatform.h"
#include "GraphForceTests.h"
#include "CudaGraphForceTests.h"
