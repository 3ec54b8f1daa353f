#!/usr/bin/env bash
# Build and run bench/device/overlap_probe.cu (would edge scans and dense layers of different row chunks overlap?) on a
# GPU machine, run directly (OUT=... bash bench/device/overlap-probe.sh): medium-shaped stand-ins at 100,800 rows and
# at 10,296.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/out}"
mkdir -p "$OUT"
probe=/tmp/overlap_probe
if ! nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -o $probe bench/device/overlap_probe.cu -lcublas; then
    # A build of the same source carried in .device/probe, with PyTorch's cuBLAS where the toolkit has none.
    probe=.device/probe/overlap_probe
    export LD_LIBRARY_PATH="$(python3 -c 'import nvidia.cublas, os; print(os.path.join(nvidia.cublas.__path__[0], "lib"))' 2>/dev/null):${LD_LIBRARY_PATH:-}"
fi
status=0
for n in 100800 10296; do
    timeout 150 $probe $n 10 | tee "$OUT/overlap-probe-$n.txt" || status=1
done
exit $status
