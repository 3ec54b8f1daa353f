// The shared GraphForce tests on the CUDA platform in double precision.
#define GRAPH_TEST_PRECISION "double"
#include "CudaTestPlatform.h"
#include "GraphForceTests.h"
#include "CudaGraphForceTests.h"
