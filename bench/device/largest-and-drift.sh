#!/usr/bin/env bash
# Device-session extra (EXTRA_SCRIPT): the largest small-grade system (from
# LARGEST_START particles, default 30,000,000, doubling up to LARGEST_MAX, then
# LARGEST_BISECTIONS bisections, default 0, within LARGEST_BUDGET seconds) and a
# long NVE run of the silicon test system on CUDA (mixed precision; NVE_STEPS=0
# leaves it out), logs and JSON under $OUT.
set -uo pipefail
python3 bench/run_benchmarks.py --grades small --sizes 512 --peers none --largest --largest-start ${LARGEST_START:-30000000} \
    --largest-max ${LARGEST_MAX:-1073741824} --bisections ${LARGEST_BISECTIONS:-0} --time-budget ${LARGEST_BUDGET:-330} --out "$OUT/largest.json" --plot ''
[ "${NVE_STEPS:-200000}" -gt 0 ] || exit 0
# The same length as the stored Reference run of seed 1 (compared there); another length runs without comparison.
reference=bench/reference/nve_drift_reference_200k_seed1.json
compare=()
[ "${NVE_STEPS:-200000}" = 200000 ] && [ -e "$reference" ] && compare=(--report-every 100 --compare "$reference")
python3 bench/nve_drift.py --platforms CUDA --precision mixed --steps ${NVE_STEPS:-200000} ${compare[@]+"${compare[@]}"} --out "$OUT/nve_cuda.json" --no-series
