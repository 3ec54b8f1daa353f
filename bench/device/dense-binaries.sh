#!/usr/bin/env bash
# Runs prebuilt dense_layers_bench binaries (built on the CPU machine with the flags of dense_layers_bench.cu's header and
# -D options, carried in a git-ignored folder: no compile on the device) in interleaved rounds; logs in $OUT.
#   DENSE_BIN_DIR=.device/dense2 DENSE_ROUNDS=2 bash bench/device/dense-binaries.sh
# e.g. the launch choice of the dense tiles at other row counts (bench/NOTES.md v37):
#   nvcc ... -DDENSE_BENCH_GROUP_ROWS=2574 -DDENSE_BENCH_TILE_ROWS=128 -o .device/dense2/r2574_t128 \
#       bench/device/dense_layers_bench.cu platforms/cuda/src/DenseLayerKernels.cu
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/out}"
mkdir -p "$OUT"
dir=${DENSE_BIN_DIR:-.device/dense}
binaries=$(cd "$dir" && ls)
[ -n "$binaries" ] || { echo "dense-binaries: nothing in $dir"; exit 1; }
status=0
for round in $(seq 1 "${DENSE_ROUNDS:-2}"); do
    for b in $binaries; do
        echo "== $b (round $round)" | tee -a "$OUT/dense-$b.log"
        timeout 120 "$dir/$b" 2>&1 | tee -a "$OUT/dense-$b.log"
        [ "${PIPESTATUS[0]}" = 0 ] || status=1
    done
done
exit $status
