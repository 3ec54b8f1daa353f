#!/usr/bin/env bash
# Build and run the dense-layer probes on a GPU machine (seconds; for scripts/device-session.sh's `extra`):
#   EXTRA_SCRIPT=bench/device/dense-probe.sh bash scripts/device-session.sh extra
# dense_probe.cu: stripped copies of the 128 x 128 schemes (registers, cp.async stages, launch orders) at medium 100,800's
# shape; dense_layers_bench.cu: the plugin's own launchDenseForward/Backward at that shape, both schemes, compared bitwise.
# The plugin streams the backward products only (launchGemm); a second build of the bench from a copy of
# DenseLayerKernels.cu that streams the forward products too checks that choice in the same run.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/out}"
flags=(-O3 -std=c++17 --fmad=true -gencode arch=compute_90,code=sm_90 -Ibench/device)
nvcc "${flags[@]}" -o /tmp/dense_probe bench/device/dense_probe.cu
nvcc "${flags[@]}" -Iplatforms/cuda/src -o /tmp/dense_layers_bench bench/device/dense_layers_bench.cu platforms/cuda/src/DenseLayerKernels.cu
sed 's/batch.streamedWide \&\& !Forward/batch.streamedWide/' platforms/cuda/src/DenseLayerKernels.cu > /tmp/DenseLayerKernelsForward.cu
if cmp -s platforms/cuda/src/DenseLayerKernels.cu /tmp/DenseLayerKernelsForward.cu; then
    echo "the copy that streams the forward too is the same file: launchGemm's condition changed; skipped"
else
    nvcc "${flags[@]}" -Iplatforms/cuda/src -o /tmp/dense_layers_bench_forward bench/device/dense_layers_bench.cu /tmp/DenseLayerKernelsForward.cu
fi
timeout 200 /tmp/dense_probe | tee "$OUT/dense-probe.log"
timeout 200 /tmp/dense_layers_bench | tee "$OUT/dense-layers-bench.log"
if [ -x /tmp/dense_layers_bench_forward ]; then
    echo "== the same, the forward products streamed too"
    timeout 200 /tmp/dense_layers_bench_forward | tee "$OUT/dense-layers-bench-forward.log"
fi
