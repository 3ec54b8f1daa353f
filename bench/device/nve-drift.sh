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
# NVE_CONTROL_SEEDS (default none, e.g. "1 2 3 4 5"; NVE_CONTROL_FORCES, default
# "native graph", which of the two): the control, run after
# the rest: the same potential as OpenMM's own forces (nve_drift.py --forces
# native) from those starts, CUDA double then CUDA mixed compared with it, and
# the GraphForce the same way (CUDA double, then mixed compared with it): what
# mixed precision does to the drift of ordinary OpenMM forces and of the
# GraphForce, each against its own double run (files nve_control_<forces>_
# <precision>_seed<S>.json, summaries nve_control_summary_<forces>.txt).
# NVE_SEEDS (default: every stored Reference run's seed): the starts compared
# with the stored Reference runs.
# NVE_JOBS (default 1): runs at once on the one GPU, each its own process
# (each run's trajectory is the same however many run beside it). Without MPS
# the GPU time-slices between processes: on an H100 (v49) eight CUDA double
# runs at once made about 4,900 steps/s in all, one alone 17,900, so leave it
# at 1 unless the GPU runs under MPS.
# A run's output goes to its own log, <its JSON>.log.
# JSON and logs under $OUT: nve_drift_cuda_<precision>_seed<S>.json and
# nve_drift_summary_<precision>.txt.
set -uo pipefail
status=0
jobs_max=${NVE_JOBS:-1}
[[ $jobs_max =~ ^[1-9][0-9]*$ ]] || { echo "nve-drift.sh: NVE_JOBS=$jobs_max: give a positive whole number" >&2; exit 2; }
failures="$OUT/nve-failures.txt"
: > "$failures"
# start <log> <command...>: runs the command in the background, its output in <log>, once fewer than NVE_JOBS run;
# a failure is written to $failures with the end of its log (a background job's status does not reach this shell's
# otherwise).
start() {
    local log=$1
    shift
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
    ( "$@" > "$log" 2>&1 || { echo "failed: $*"; tail -n 3 "$log"; } >> "$failures" ) &
}
finish() {
    wait
    if [ -s "$failures" ]; then cat "$failures"; status=1; : > "$failures"; fi
}
for precision in ${NVE_PRECISION-mixed}; do
    rescore=()
    [ -n "${NVE_RESCORE-double}" ] && [ "${NVE_RESCORE-double}" != "$precision" ] && rescore=(--rescore "${NVE_RESCORE-double}")
    found=0
    for reference in bench/reference/nve_drift_reference_200k_seed*.json; do
        [ -e "$reference" ] || continue
        seed=${reference##*_seed}
        seed=${seed%.json}
        [ -n "${NVE_SEEDS:-}" ] && [[ " $NVE_SEEDS " != *" $seed "* ]] && continue
        stored_seeds="${stored_seeds:-} $seed"
        found=1
        out="$OUT/nve_drift_cuda_${precision}_seed$seed.json"
        start "$out.log" timeout 400 python3 bench/nve_drift.py --platforms CUDA --precision "$precision" --steps 200000 \
            --report-every 100 --seed "$seed" --compare "$reference" --out "$out" ${rescore[@]+"${rescore[@]}"}
    done
    finish
    for seed in ${NVE_SEEDS:-}; do
        [[ " ${stored_seeds:-} " == *" $seed "* ]] || echo "nve-drift.sh: no stored Reference run of seed $seed: not run" >&2
    done
    [ $found = 1 ] || { echo "nve-drift.sh: no stored Reference run for the seeds (${NVE_SEEDS:-all})" >&2; exit 1; }
    # The verdict: mean |drift| over the starts against the stored runs' (one start alone is noise: Reference's own
    # drift changes sign between starts).
    echo "== CUDA $precision"
    python3 bench/nve_drift.py --summarize "$OUT"/nve_drift_cuda_"${precision}"_seed*.json \
        | tee "$OUT/nve_drift_summary_$precision.txt" || status=1
done
# The control: every double run first (both forces, NVE_JOBS at once), then the mixed runs compared with them.
# control_run <forces> <seed> <precision> [more nve_drift.py arguments]: one run of the control, in the pool.
control_run() {
    local out="$OUT/nve_control_$1_$3_seed$2.json"
    start "$out.log" timeout 400 python3 bench/nve_drift.py --platforms CUDA --steps 200000 --report-every 100 \
        --seed "$2" --forces "$1" --precision "$3" --out "$out" "${@:4}"
}
control_forces=${NVE_CONTROL_SEEDS:+${NVE_CONTROL_FORCES:-native graph}}
for forces in $control_forces; do
    for seed in $NVE_CONTROL_SEEDS; do control_run "$forces" "$seed" double; done
done
finish
for forces in $control_forces; do
    for seed in $NVE_CONTROL_SEEDS; do
        double="$OUT/nve_control_${forces}_double_seed$seed.json"
        [ -e "$double" ] && control_run "$forces" "$seed" mixed --compare "$double"
    done
done
finish
for forces in $control_forces; do
    echo "== control: $forces forces, CUDA mixed against CUDA double"
    python3 bench/nve_drift.py --summarize "$OUT"/nve_control_"${forces}"_mixed_seed*.json \
        | tee "$OUT/nve_control_summary_$forces.txt" || status=1
done
exit $status
