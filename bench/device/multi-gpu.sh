#!/usr/bin/env bash
# Device-session extra (EXTRA_SCRIPT) on a two-GPU machine (nvidia-h200-x2): the
# multi-GPU ctest (forces of two GPUs against one) and the two-GPU benchmark
# of issue 6 (medium and large grades at 100,800 and 1,000,000 particles,
# DeviceIndex "0,1" against one GPU in the same run), logs under $OUT.
# Env: MULTI_GPU_GRADES, MULTI_GPU_SIZES (comma lists), MULTI_GPU_BUDGET (seconds).
set -uo pipefail
ctest --test-dir /tmp/graph-build -L multigpu --output-on-failure -V > "$OUT/ctest-multigpu.log" 2>&1
grep -E "OK|FAILED|SKIPPED|Passed|Failed|Skipped" "$OUT/ctest-multigpu.log" | tail -5
python3 bench/run_benchmarks.py --grades ${MULTI_GPU_GRADES:-medium,large} --sizes ${MULTI_GPU_SIZES:-100800,1000000} --peers none --multi-gpu 0,1 \
    --time-budget ${MULTI_GPU_BUDGET:-420} --out "$OUT/multi-gpu.json" --plot ''
