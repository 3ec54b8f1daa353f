#!/usr/bin/env bash
# Build and run the dense-layer probes on a GPU machine (seconds; for scripts/device-session.sh's `extra`):
#   EXTRA_SCRIPT=bench/device/dense-probe.sh bash scripts/device-session.sh extra
# dense_probe.cu: stripped copies of the 128 x 128 schemes (registers, cp.async stages, launch orders) at medium 100,800's
# shape; dense_layers_bench.cu: the plugin's own launchDenseForward/Backward at that shape, both schemes, compared bitwise.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/out}"
flags=(-O3 -std=c++17 --fmad=true -gencode arch=compute_90,code=sm_90 -Ibench/device)
nvcc "${flags[@]}" -o /tmp/dense_probe bench/device/dense_probe.cu
nvcc "${flags[@]}" -Iplatforms/cuda/src -o /tmp/dense_layers_bench bench/device/dense_layers_bench.cu platforms/cuda/src/DenseLayerKernels.cu
timeout 200 /tmp/dense_probe | tee "$OUT/dense-probe.log"
timeout 200 /tmp/dense_layers_bench | tee "$OUT/dense-layers-bench.log"
