#!/usr/bin/env bash
# Device-session extra (EXTRA_SCRIPT): the NVE drift target of issue 3 compared
# over the same run length. For every stored Reference run
# bench/reference/nve_drift_reference_200k_seed<S>.json (200,000 steps of the
# silicon test system, measured on a CPU machine: Reference computes in double
# on the CPU wherever it runs, about 18 minutes a run), CUDA runs the same
# trajectory start (seed S) for the same 200,000 steps in mixed precision and
# nve_drift.py --compare prints |drift| and |second-half drift| against it;
# then --summarize gives the verdict over all starts (mean |drift|).
# About 100 s a seed on an H200; NVE_PRECISION=double|single for the others.
# JSON and logs under $OUT.
set -uo pipefail
status=0
found=0
for reference in bench/reference/nve_drift_reference_200k_seed*.json; do
    [ -e "$reference" ] || continue
    found=1
    seed=${reference##*_seed}
    seed=${seed%.json}
    timeout 200 python3 bench/nve_drift.py --platforms CUDA --precision ${NVE_PRECISION:-mixed} --steps 200000 \
        --report-every 100 --seed "$seed" --compare "$reference" --out "$OUT/nve_drift_cuda_seed$seed.json" --no-series \
        || status=1
done
[ $found = 1 ] || { echo "nve-drift.sh: no bench/reference/nve_drift_reference_200k_seed*.json" >&2; exit 1; }
# The verdict: mean |drift| over the starts against the stored runs' (one start alone is noise: Reference's own
# drift changes sign between starts).
python3 bench/nve_drift.py --summarize "$OUT"/nve_drift_cuda_seed*.json | tee "$OUT/nve_drift_summary.txt" || status=1
exit $status
