#!/usr/bin/env bash
# Device-session extra (EXTRA_SCRIPT) on a two-GPU machine (nvidia-h200-x2):
# where the time of a two-GPU evaluation goes.  For each case of
# MULTI_GPU_PROFILE_CASES (grade:n ..., default medium:100800 large:100800):
# the wall time of an evaluation and of a step on GPU 0 alone and on GPUs
# "0,1" in the same run; an Nsight Systems timeline of three two-GPU
# evaluations (kernels and copies of both devices, CSV) where nsys exists;
# Nsight Compute's per-kernel durations with the device of each kernel.
set -uo pipefail
NSYS=$(command -v nsys || ls /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/bin/nsys 2>/dev/null | head -n 1)
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
echo "nsys: ${NSYS:-none}; ncu: ${NCU:-none}"
nvidia-smi topo -m 2>&1 | head -5
for case in ${MULTI_GPU_PROFILE_CASES:-medium:100800 large:100800}; do
    grade=${case%%:*}; n=${case##*:}
    for devices in 0 0,1; do
        python3 bench/profile_kernels.py --grade "$grade" --n "$n" --evaluations 10 --steps 20 --device-index "$devices" 2>&1 | tail -2
    done
    if [ -n "$NSYS" ]; then
        timeout 200 "$NSYS" profile --trace=cuda --capture-range=cudaProfilerApi --capture-range-end=stop -f true -o "$OUT/nsys-$grade-$n" \
            python3 bench/profile_kernels.py --grade "$grade" --n "$n" --evaluations 3 --device-index 0,1 > "$OUT/nsys-$grade-$n.log" 2>&1
        "$NSYS" stats --report cuda_gpu_trace --format csv --output "$OUT/nsys-$grade-$n" "$OUT/nsys-$grade-$n.nsys-rep" >> "$OUT/nsys-$grade-$n.log" 2>&1
        rm -f "$OUT/nsys-$grade-$n.nsys-rep" "$OUT/nsys-$grade-$n.sqlite"
    fi
    [ -n "$NCU" ] && timeout 200 "$NCU" --clock-control none --profile-from-start off --metrics gpu__time_duration.sum --csv \
        python3 bench/profile_kernels.py --grade "$grade" --n "$n" --evaluations 2 --device-index 0,1 > "$OUT/ncu-2gpu-$grade-$n.csv" 2> "$OUT/ncu-2gpu-$grade-$n.err"
done
