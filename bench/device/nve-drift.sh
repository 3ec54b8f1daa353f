#!/usr/bin/env bash
# Device-session extra (EXTRA_SCRIPT): the NVE drift target of issue 3 compared
# over the same run length. For every stored Reference run
# bench/reference/nve_drift_reference_200k_seed<S>.json (200,000 steps of the
# silicon test system, measured on a CPU machine: Reference computes in double
# on the CPU wherever it runs, about 18 minutes a run), CUDA runs the same
# trajectory start (seed S) for the same 200,000 steps and nve_drift.py
# --compare prints |drift| and |second-half drift| against it; then
# --summarize gives the verdict over all starts (mean |drift|).
# NVE_PRECISION: the CUDA precisions, space-separated (default "mixed"; e.g.
# "mixed single double"). About 12 s a seed and precision on an H100 (v47).
# NVE_RESCORE: the Precision in which every sampled frame's potential is
# evaluated again (nve_drift.py --rescore; default double, "" for none; not for
# runs in that precision): the drift of the dynamics without the run's own
# energy readout, and the readout's error.
# JSON and logs under $OUT: nve_drift_cuda_<precision>_seed<S>.json and
# nve_drift_summary_<precision>.txt.
set -uo pipefail
status=0
for precision in ${NVE_PRECISION:-mixed}; do
    rescore=()
    [ -n "${NVE_RESCORE-double}" ] && [ "${NVE_RESCORE-double}" != "$precision" ] && rescore=(--rescore "${NVE_RESCORE-double}")
    found=0
    for reference in bench/reference/nve_drift_reference_200k_seed*.json; do
        [ -e "$reference" ] || continue
        found=1
        seed=${reference##*_seed}
        seed=${seed%.json}
        timeout 200 python3 bench/nve_drift.py --platforms CUDA --precision "$precision" --steps 200000 \
            --report-every 100 --seed "$seed" --compare "$reference" --out "$OUT/nve_drift_cuda_${precision}_seed$seed.json" \
            "${rescore[@]}" || status=1
    done
    [ $found = 1 ] || { echo "nve-drift.sh: no bench/reference/nve_drift_reference_200k_seed*.json" >&2; exit 1; }
    # The verdict: mean |drift| over the starts against the stored runs' (one start alone is noise: Reference's own
    # drift changes sign between starts).
    echo "== CUDA $precision"
    python3 bench/nve_drift.py --summarize "$OUT"/nve_drift_cuda_"${precision}"_seed*.json \
        | tee "$OUT/nve_drift_summary_$precision.txt" || status=1
done
exit $status
