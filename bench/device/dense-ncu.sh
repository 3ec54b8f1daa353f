#!/usr/bin/env bash
# Nsight Compute (full set, source counters) on medium 100,800's first-layer backward (K 240, N 1536) in four kernels: the
# stripped probe's register and cp.async schemes (dense_probe.cu, variants 0 and 5) and the plugin's own two
# (dense_layers_bench.cu), side by side: in v18 (bench/NOTES.md) it found why the plugin's took 3.71 and 3.31 ms where the
# probe's took 3.04 and 2.23 (the streamed kernel's copy loops, since rewritten).  For scripts/device-session.sh's `extra`
# (about a minute):
#   EXTRA_SCRIPT=bench/device/dense-ncu.sh bash scripts/device-session.sh extra
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/out}"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2> /dev/null | head -n 1)
[ -n "$NCU" ] || { echo "ncu not found"; exit 1; }
flags=(-O3 -std=c++17 --fmad=true -lineinfo -gencode arch=compute_90,code=sm_90 -Ibench/device)
nvcc "${flags[@]}" -o /tmp/dense_probe bench/device/dense_probe.cu || exit 1
nvcc "${flags[@]}" -Iplatforms/cuda/src -o /tmp/dense_layers_bench bench/device/dense_layers_bench.cu platforms/cuda/src/DenseLayerKernels.cu || exit 1
profile() { # name, binary, launches to skip (all kernels count)
    timeout 240 "$NCU" --clock-control none --set full --import-source yes --launch-skip "$3" --launch-count 1 -f -o "$OUT/dense-ncu-$1" \
        "$2" --once > "$OUT/dense-ncu-$1.log" 2>&1
    "$NCU" -i "$OUT/dense-ncu-$1.ncu-rep" --page details > "$OUT/dense-ncu-$1.txt" 2>&1
    "$NCU" -i "$OUT/dense-ncu-$1.ncu-rep" --page source --print-source sass --csv > "$OUT/dense-ncu-$1-sass.csv" 2>&1
    echo "== $1: $(grep -m1 -E '^  [a-zA-Z_<].*\(' "$OUT/dense-ncu-$1.txt" | cut -c1-100)"
    grep -E "^    (Duration|Registers Per Thread|Achieved Occupancy|Memory Throughput|DRAM Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|Warp Cycles Per Issued Instruction|Issued Warp Per Scheduler|Local Memory Spilling)" \
        "$OUT/dense-ncu-$1.txt"
}
profile probe-registers /tmp/dense_probe 3
profile probe-streamed /tmp/dense_probe 53
profile plugin-registers /tmp/dense_layers_bench 1
profile plugin-streamed /tmp/dense_layers_bench 13
