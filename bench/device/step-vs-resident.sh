#!/usr/bin/env bash
# Device-session extra (EXTRA_SCRIPT; the package installed): bench/step_vs_resident.py for each case of SVR_CASES
# (grade:n ..., default "medium:100800"); logs and JSON in $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/out}"
status=0
for case in ${SVR_CASES:-medium:100800}; do
    grade=${case%%:*} n=${case#*:}
    timeout 300 python3 bench/step_vs_resident.py --grade "$grade" --n "$n" ${SVR_ARGS:-} --out "$OUT/svr-$grade-$n.json" \
        2>&1 | tee "$OUT/svr-$grade-$n.log" || status=1
done
exit $status
