#!/usr/bin/env bash
# Device-session extra (EXTRA_SCRIPT): the fitting network fused across layers
# against the layer-by-layer products, in the same run.  For each case of
# FUSED_CASES (grade:n ..., default below): wall time of an evaluation and of
# a step with CudaFusedNetwork "false" and "true"; then Nsight Compute's
# per-kernel durations of one evaluation of each, where ncu exists, for
# FUSED_NCU_CASES.
set -uo pipefail
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
for case in ${FUSED_CASES:-small:512 small:10296 small:100800 medium:512 medium:10296 medium:100800 large:10296}; do
    grade=${case%%:*}; n=${case##*:}
    steps=$([ "$n" -le 20000 ] && echo 1000 || echo 40)
    for fused in false true; do
        python3 bench/profile_kernels.py --grade "$grade" --n "$n" --evaluations 20 --steps "$steps" \
            --property CudaFusedNetwork=$fused 2>&1 | tail -2
    done
done
for case in ${FUSED_NCU_CASES:-small:512 medium:100800}; do
    grade=${case%%:*}; n=${case##*:}
    for fused in false true; do
        [ -n "$NCU" ] && timeout 120 "$NCU" --clock-control none --profile-from-start off --metrics gpu__time_duration.sum --csv \
            python3 bench/profile_kernels.py --grade "$grade" --n "$n" --evaluations 1 --property CudaFusedNetwork=$fused \
            > "$OUT/ncu-fused-$fused-$grade-$n.csv" 2> "$OUT/ncu-fused-$fused-$grade-$n.err"
    done
done
exit 0
