// The shared GraphForce tests on the CUDA platform in mixed precision.
#define GRAPH_TEST_PRECISION "mixed"
#include "CudaTestPlatform.h"
#include "GraphForceTests.h"
#include "CudaGraphForceTests.h"
