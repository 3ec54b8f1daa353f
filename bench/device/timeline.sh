#!/usr/bin/env bash
# The `timeline` part of scripts/device-session.sh: GPU timelines of OpenMM
# steps with the GraphForce (bench/timeline.py, PyTorch's profiler through
# CUPTI) for the cases in TIMELINE_CASES (grade:n, default "small:512
# small:10296"), in the modes of TIMELINE_MODES (default "auto layered false
# floor": the defaults, the fitting network a kernel per layer, no CUDA graph,
# and OpenMM's floor with a trivial force; KEY=VALUE: the defaults with that GraphForce property set) at each size.  The figures also go to $OUT/timeline-*.json.
#
#   TIMELINE_CASES="small:512 medium:512" bash scripts/device-session.sh timeline
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
    # auto: the defaults; layered: the fitting network a kernel per layer (CudaFusedNetwork "false"), for comparison in the
    # same run; false: no CUDA graph; floor: OpenMM with a trivial force instead.
    for mode in ${TIMELINE_MODES:-auto layered false floor}; do
        case $mode in
            floor) args="--floor" ;;
            layered) args="--cuda-graph auto --property CudaFusedNetwork=false" ;;
            *=*) args="--cuda-graph auto --property $mode" ;; # a property, e.g. CudaFusedNetwork=true
            *) args="--cuda-graph $mode" ;;
        esac
        timeout 180 python3 bench/timeline.py --grade "$grade" --n "$n" --steps "$steps" $args \
            --out "$OUT/timeline-$grade-$n-$mode.json" > "$OUT/timeline-$grade-$n-$mode.txt" 2>&1 || status=1
        grep -v "^\[W\|UserWarning\|_warn_once" "$OUT/timeline-$grade-$n-$mode.txt" | head -45
        echo
    done
done
exit $status
