#!/usr/bin/env bash
# Device-session extra (EXTRA_SCRIPT): GPU timelines of OpenMM steps with the
# GraphForce (bench/timeline.py, PyTorch's profiler through CUPTI), for the
# cases in TIMELINE_CASES (grade:n, default "small:512 small:10296"), with the
# CUDA graph on and off, and OpenMM's floor (a trivial force) at each size.
#
#   EXTRA_SCRIPT=bench/device/timeline.sh bash scripts/device-session.sh extra
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/out}"
mkdir -p "$OUT"
if ! python3 -c "import openmm" > /dev/null 2>&1; then
    source scripts/device-env.sh > "$OUT/timeline-env.log" 2>&1 || { tail -5 "$OUT/timeline-env.log"; exit 1; }
fi
status=0
for case in ${TIMELINE_CASES:-small:512 small:10296}; do
    grade=${case%%:*}; n=${case##*:}
    steps=$([ "$n" -le 20000 ] && echo 300 || echo 30)
    for args in "--cuda-graph auto" "--cuda-graph false" "--floor" ${TIMELINE_EXTRA:-}; do
        timeout 180 python3 bench/timeline.py --grade "$grade" --n "$n" --steps "$steps" $args 2>&1 | grep -v "^\[W" | head -45 \
            || status=1
        echo
    done
done
exit $status
