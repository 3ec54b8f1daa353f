#!/usr/bin/env bash
# The step time of a small system against how the host waits for the device (run as device-session.sh's extra part,
# EXTRA_SCRIPT=bench/device/step-wait.sh, or directly after bench/device/ab-package.sh's set-up): interleaved rounds of
# Verlet steps (bench/profile_kernels.py --steps, CUDA graph on) of each variant of STEP_WAIT_VARIANTS, a
# space-separated list of BUILD[:KEY=VALUE,...], where BUILD is a build of .device/ab (scripts/build-ab-plugins.sh),
# "pkg" (the package's CUDA plugin as installed when this script starts: after plugin-ab.sh in the same call that is the
# last build it swapped in, so name AB_PACKAGE_AS's copy in .device/ab instead) or "floor" (the package with a trivial
# force in place of the GraphForce: OpenMM's own step), and KEY=VALUE are CUDA platform properties (e.g.
# UseBlockingSync=false) or, prefixed with "force.", GraphForce properties (force.CheckFinite=deferred).  STEP_WAIT_CASE
# (default small:512), STEP_WAIT_ROUNDS (default 3), STEP_WAIT_STEPS (default 3000).  One line a run to
# $OUT/step-wait.log ("VARIANT round R: ... ms per step").
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/out}"
mkdir -p "$OUT"
source bench/device/ab-package.sh "" || exit 1
mkdir -p .device/ab/pkg-own && cp "$SITE/openmmgraph/lib/plugins/libOpenMMGraphCUDA.so" .device/ab/pkg-own/ || exit 1
case=${STEP_WAIT_CASE:-small:512}
grade=${case%%:*} n=${case##*:}
log="$OUT/step-wait.log"
for round in $(seq 1 "${STEP_WAIT_ROUNDS:-3}"); do
    for variant in ${STEP_WAIT_VARIANTS:-pkg pkg:UseBlockingSync=false floor floor:UseBlockingSync=false}; do
        build=${variant%%:*} settings=""
        [ "$build" = "$variant" ] || settings=${variant#*:}
        arguments=()
        case "$build" in
            pkg) ab_use pkg-own || exit 1 ;;
            floor) ab_use pkg-own || exit 1; arguments+=(--floor) ;;
            *) ab_use "$build" || exit 1 ;;
        esac
        IFS=, read -ra pairs <<< "$settings"
        for pair in "${pairs[@]}"; do
            case "$pair" in
                force.*) arguments+=(--property "${pair#force.}") ;;
                ?*) arguments+=(--platform-property "$pair") ;;
            esac
        done
        result=$(timeout 150 python3 bench/profile_kernels.py --grade "$grade" --n "$n" --evaluations 20 --cuda-graph auto \
            --steps "${STEP_WAIT_STEPS:-3000}" "${arguments[@]}" 2>&1 | tail -1)
        echo "$variant round $round: $result" | tee -a "$log"
    done
done
