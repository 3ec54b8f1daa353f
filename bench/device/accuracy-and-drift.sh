#!/usr/bin/env bash
# Device-session extra (EXTRA_SCRIPT): CUDA accuracy against Reference and the
# NVE drift of the silicon test system on CUDA and Reference, logs under $OUT.
set -uo pipefail
python3 bench/accuracy.py --grades small,medium --sizes 10296 --precisions single,mixed,double --out "$OUT/accuracy-10296.json"
# The large grade (streamed moments scan in single and mixed precision) at 512 particles: its Reference evaluation at
# 10,296 takes minutes on one CPU core.
python3 bench/accuracy.py --grades large --sizes 512 --precisions single,mixed,double --out "$OUT/accuracy-large-512.json"
python3 bench/accuracy.py --grades small --sizes 100800 --precisions mixed --out "$OUT/accuracy-100800.json"
python3 bench/nve_drift.py --platforms Reference,CUDA --precision mixed --steps ${NVE_STEPS:-8000} --out "$OUT/nve_drift.json" --no-series
