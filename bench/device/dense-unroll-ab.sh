#!/usr/bin/env bash
# The plugin's dense layers at medium 100,800's shape (bench/device/dense_layers_bench.cu) built several ways and timed in
# one call (seconds; for scripts/device-session.sh's `extra`):
#   EXTRA_SCRIPT=bench/device/dense-unroll-ab.sh bash scripts/device-session.sh extra
# - the streamed kernel's 16 k of a slice unrolled 16 (the default build), 8 and 4 deep (GRAPH_DENSE_SLICE_UNROLL);
# - where DENSE_BASE_SOURCE names a copy of an earlier DenseLayerKernels.cu (e.g. one carried in .device), that one too,
#   built the same way: the peer of the same call.
# Each binary checks that its two schemes agree bitwise; the logs go to $OUT/dense-unroll-*.log.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/out}"
flags=(-O3 -std=c++17 --fmad=true -gencode arch=compute_90,code=sm_90 -Ibench/device -Iplatforms/cuda/src)
builds=()
for unroll in 16 8 4; do
    nvcc "${flags[@]}" -DGRAPH_DENSE_SLICE_UNROLL=$unroll -o /tmp/dense_layers_bench_$unroll bench/device/dense_layers_bench.cu \
        platforms/cuda/src/DenseLayerKernels.cu &
    builds+=($unroll)
done
if [ -n "${DENSE_BASE_SOURCE:-}" ] && [ -f "$DENSE_BASE_SOURCE" ]; then
    cp "$DENSE_BASE_SOURCE" platforms/cuda/src/DenseLayerKernelsBase.cu
    nvcc "${flags[@]}" -o /tmp/dense_layers_bench_base bench/device/dense_layers_bench.cu platforms/cuda/src/DenseLayerKernelsBase.cu &
    builds+=(base)
fi
wait
rm -f platforms/cuda/src/DenseLayerKernelsBase.cu
# Twice each, interleaved, so that a drift of the clock over the call shows as a difference between the rounds.
for round in 1 2; do
    for b in "${builds[@]}"; do
        echo "== $b (round $round)" | tee -a "$OUT/dense-unroll-$b.log"
        timeout 120 /tmp/dense_layers_bench_$b | tee -a "$OUT/dense-unroll-$b.log"
    done
done
