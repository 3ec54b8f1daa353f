#!/usr/bin/env bash
# The plugin's dense layers at medium 100,800's shape (bench/device/dense_layers_bench.cu) built several ways and timed in
# one call (seconds; for scripts/device-session.sh's `extra`):
#   DENSE_BASE_SOURCE=.device/DenseLayerKernels-base.cu EXTRA_SCRIPT=bench/device/dense-ab.sh bash scripts/device-session.sh extra
# - "current": platforms/cuda/src/DenseLayerKernels.cu as the pipeline drives it (layer 1's backward scales its output by
#   layer 0's act'(z), DenseBatch::gradScale);
# - "unscaled": the same source, layer 0's backward forming dE/dz itself (-DDENSE_BENCH_NO_GRAD_SCALE);
# - "base", where DENSE_BASE_SOURCE names a copy of an earlier DenseLayerKernels.cu (e.g. one carried in .device): that
#   one, the peer of the same call; built with DENSE_BASE_FLAGS (default -DDENSE_BENCH_NO_GRAD_SCALE, for a source from
#   before gradScale; empty for one that has it).
# Each binary checks that its two schemes (registers, streamed) agree bitwise; logs in $OUT/dense-ab-*.log.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/out}"
flags=(-O3 -std=c++17 --fmad=true -gencode arch=compute_90,code=sm_90 -Ibench/device -Iplatforms/cuda/src)
nvcc "${flags[@]}" -o /tmp/dense_ab_current bench/device/dense_layers_bench.cu platforms/cuda/src/DenseLayerKernels.cu &
nvcc "${flags[@]}" -DDENSE_BENCH_NO_GRAD_SCALE -o /tmp/dense_ab_unscaled bench/device/dense_layers_bench.cu \
    platforms/cuda/src/DenseLayerKernels.cu &
builds=(current unscaled)
if [ -n "${DENSE_BASE_SOURCE:-}" ] && [ -f "$DENSE_BASE_SOURCE" ]; then
    cp "$DENSE_BASE_SOURCE" /tmp/DenseLayerKernelsBase.cu
    nvcc "${flags[@]}" ${DENSE_BASE_FLAGS--DDENSE_BENCH_NO_GRAD_SCALE} -o /tmp/dense_ab_base bench/device/dense_layers_bench.cu \
        /tmp/DenseLayerKernelsBase.cu &
    builds+=(base)
fi
wait
# Twice each, interleaved, so that a drift of the clock over the call shows as a difference between the rounds.
for round in 1 2; do
    for b in "${builds[@]}"; do
        echo "== $b (round $round)" | tee -a "$OUT/dense-ab-$b.log"
        timeout 120 /tmp/dense_ab_$b | tee -a "$OUT/dense-ab-$b.log"
    done
done
