#!/usr/bin/env bash
# Device-session extra (EXTRA_SCRIPT): the NVE drift target of issue 3 compared
# over the same run length. For every stored Reference run
# bench/reference/nve_drift_reference_200k_seed<S>.json (200,000 steps of the
# silicon test system, measured on a CPU machine: Reference computes in double
# on the CPU wherever it runs, about 18 minutes a run), CUDA runs the same
# trajectory start (seed S) for the same 200,000 steps and nve_drift.py
# --compare prints |drift| and |second-half drift| against it; then
# --summarize gives the verdict over all starts (mean |drift|).
# NVE_PRECISION: the CUDA precisions, space-separated (default "mixed", "" for none; e.g.
# "mixed single double"). About 12 s a seed and precision on an H100 (v47).
# NVE_RESCORE: the Precision in which every sampled frame's potential is
# evaluated again (nve_drift.py --rescore; default double, "" for none; not for
# runs in that precision): the drift of the dynamics without the run's own
# energy readout, and the readout's error.
# NVE_CONTROL_SEEDS (default none, e.g. "1 2 3 4 5"): the control, run after
# the rest: the same potential as OpenMM's own forces (nve_drift.py --forces
# native) from those starts, CUDA double then CUDA mixed compared with it, and
# the GraphForce the same way (CUDA double, then mixed compared with it): what
# mixed precision does to the drift of ordinary OpenMM forces and of the
# GraphForce, each against its own double run (files nve_control_<forces>_
# <precision>_seed<S>.json, summaries nve_control_summary_<forces>.txt).
# JSON and logs under $OUT: nve_drift_cuda_<precision>_seed<S>.json and
# nve_drift_summary_<precision>.txt.
set -uo pipefail
status=0
for precision in ${NVE_PRECISION-mixed}; do
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
for forces in ${NVE_CONTROL_SEEDS:+native graph}; do
    for seed in $NVE_CONTROL_SEEDS; do
        common=(--platforms CUDA --steps 200000 --report-every 100 --seed "$seed" --forces "$forces" --no-series)
        double="$OUT/nve_control_${forces}_double_seed$seed.json"
        timeout 300 python3 bench/nve_drift.py "${common[@]}" --precision double --out "$double" || { status=1; continue; }
        timeout 300 python3 bench/nve_drift.py "${common[@]}" --precision mixed --compare "$double" \
            --out "$OUT/nve_control_${forces}_mixed_seed$seed.json" || status=1
    done
    echo "== control: $forces forces, CUDA mixed against CUDA double"
    python3 bench/nve_drift.py --summarize "$OUT"/nve_control_"${forces}"_mixed_seed*.json \
        | tee "$OUT/nve_control_summary_$forces.txt" || status=1
done
exit $status
