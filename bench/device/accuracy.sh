#!/usr/bin/env bash
# Device-session extra (EXTRA_SCRIPT): CUDA accuracy against Reference on the standard systems (bench/accuracy.py), logs
# and JSON under $OUT.  ACCURACY_PRECISIONS (default "single,mixed,double"); ACCURACY_QUICK=1 for the 10,296-particle
# cases alone (about a minute).  The NVE drift is bench/device/nve-drift.sh's (same run lengths as the stored
# Reference runs; the 8,000-step Reference run this script used to make did not compare, bench/NOTES.md v46).
set -uo pipefail
precisions=${ACCURACY_PRECISIONS:-single,mixed,double}
status=0
timeout 200 python3 bench/accuracy.py --grades small,medium --sizes 10296 --precisions "$precisions" --out "$OUT/accuracy-10296.json" \
    || status=1
[ "${ACCURACY_QUICK:-0}" = 1 ] && exit $status
# The large grade (streamed moments scan in single and mixed precision) at 512 particles: its Reference evaluation at
# 10,296 takes minutes on one CPU core.
python3 bench/accuracy.py --grades large --sizes 512 --precisions "$precisions" --out "$OUT/accuracy-large-512.json" || status=1
python3 bench/accuracy.py --grades small --sizes 100800 --precisions mixed --out "$OUT/accuracy-100800.json" || status=1
exit $status
