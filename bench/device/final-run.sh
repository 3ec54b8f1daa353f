#!/usr/bin/env bash
# Device-session extra (EXTRA_SCRIPT): the accuracy and size figures of
# the CUDA issue in one call of about 5 minutes on an H200 (after the
# standard benchmark, which needs its own call):
#   - CUDA against Reference at 10,296 particles (small and medium, every
#     precision) and at 100,800 (small, mixed);
#   - (the NVE drift is bench/device/nve-drift.sh, a call of its own: about
#     100 s for each of the three stored Reference starts);
#   - the largest small-grade system: 30,000,000 particles only
#     (LARGEST_BUDGET=330 to go on doubling, as largest-and-drift.sh does).
# Each part has its own time limit, so one slow part cannot take the rest
# with it; JSON and logs under $OUT.
set -uo pipefail
status=0
timeout 150 python3 bench/accuracy.py --grades small,medium --sizes 10296 --precisions single,mixed,double \
    --out "$OUT/accuracy-10296.json" || status=1
timeout 90 python3 bench/accuracy.py --grades small --sizes 100800 --precisions mixed --out "$OUT/accuracy-100800.json" || status=1
timeout 150 python3 bench/run_benchmarks.py --grades small --sizes 512 --peers none --largest --largest-start 30000000 \
    --bisections 0 --time-budget ${LARGEST_BUDGET:-60} --out "$OUT/largest.json" --plot '' || status=1
exit $status
