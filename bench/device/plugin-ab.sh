#!/usr/bin/env bash
# A/B of CUDA plugin builds in one call on a GPU machine (run directly, or as device-session.sh's extra part):
# each directory .device/ab/NAME holds a libOpenMMGraphCUDA.so (or .so.xz: xz -9 takes a build from 28 to 9 MB, and
# a call carries 64 MiB at most) built elsewhere (e.g. on the CPU machine, from
# two commits, with the same compiler and flags: bench/README.md).  The package is the one device-session.sh installed in
# the same call, else that of .device/pkg.txz (bench/device/ab-package.sh; only the CUDA plugin is swapped).  Every round runs each build in turn: the wall time of
# Verlet steps (CUDA graph on) and Nsight Compute's per-kernel times of 2 evaluations, with the build's properties
# (.device/ab/NAME/properties, a KEY=VALUE a line, if present), for each case of
# AB_CASES (grade:n ..., default "small:512 medium:100800"); then bench/ncu_kernel_table.py puts the builds
# side by side.  AB_ROUNDS (default 2) interleaved rounds; AB_NCU=0 for the wall times only; AB_PACKAGE_AS=NAME adds
# the package's own plugin as build NAME.  Logs and CSVs go to $OUT.
#
# With AB_PROPERTIES="NAME=KEY=VALUE[,KEY=VALUE...] ..." the variants are GraphForce property sets of one plugin, the
# package already installed (run as device-session.sh's extra part, EXTRA_SCRIPT=bench/device/plugin-ab.sh), e.g.
# AB_PROPERTIES="cells=CudaNeighborSearch=cells allpairs=CudaNeighborSearch=allpairs" (v26 compared the force scan's
# orders this way, with the CudaForceScan property of commit 0a30d8f).
set -uo pipefail
cd "$(dirname "$0")/../.."
if [ -n "${AB_PROPERTIES:-}" ]; then
    OUT="${OUT:-$PWD/out}" # device-session.sh sets it; ab-package.sh does below
    mkdir -p "$OUT"
    builds=$(for variant in $AB_PROPERTIES; do echo "${variant%%=*}"; done)
    # The variant's properties as arguments of profile_kernels.py.
    use_variant() {
        local variant
        properties=()
        for variant in $AB_PROPERTIES; do
            [ "${variant%%=*}" = "$1" ] || continue
            IFS=, read -ra pairs <<< "${variant#*=}"
            for pair in "${pairs[@]}"; do properties+=(--property "$pair"); done
        done
    }
else
    source bench/device/ab-package.sh "" || exit 1 # no build yet: swapped in per round
    # AB_PACKAGE_AS=NAME: the package's own CUDA plugin (before any swap) is build NAME too, so that a call need not
    # carry a build of the sources the package was made from (the carry's 64 MiB).
    if [ -n "${AB_PACKAGE_AS:-}" ]; then
        [[ "$AB_PACKAGE_AS" =~ ^[A-Za-z0-9_-]+$ ]] && [ ! -e ".device/ab/$AB_PACKAGE_AS" ] \
            || { echo "plugin-ab: AB_PACKAGE_AS=$AB_PACKAGE_AS is not a new build name of .device/ab"; exit 1; }
        mkdir -p ".device/ab/$AB_PACKAGE_AS" && cp "$SITE/openmmgraph/lib/plugins/libOpenMMGraphCUDA.so" ".device/ab/$AB_PACKAGE_AS/" || exit 1
    fi
    builds=$(cd .device/ab 2>/dev/null && ls -d */ 2>/dev/null | tr -d /)
    [ -n "$builds" ] || { echo "plugin-ab: no builds in .device/ab/NAME/libOpenMMGraphCUDA.so"; exit 1; }
    for build in $builds; do # every build present before the first round
        ab_use "$build" || exit 1
    done
    # A build's GraphForce properties: .device/ab/NAME/properties, a KEY=VALUE a line, when present (e.g. the same
    # plugin as another build, with a property of its own: the peer in the same rounds).
    use_variant() {
        local pair
        properties=()
        if [ -f ".device/ab/$1/properties" ]; then
            while IFS= read -r pair; do [ -n "$pair" ] && properties+=(--property "$pair"); done < ".device/ab/$1/properties"
        fi
        ab_use "$1"
    }
fi
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
if [ "${AB_NCU:-1}" = 0 ]; then
    NCU= # AB_NCU=0: wall times only (a short call)
    echo "plugin-ab: AB_NCU=0, wall times only"
fi
[ -n "$NCU" ] || [ "${AB_NCU:-1}" = 0 ] || echo "plugin-ab: no ncu found; wall times only"
for round in $(seq 1 "${AB_ROUNDS:-2}"); do
    for build in $builds; do
        use_variant "$build"
        for case in ${AB_CASES:-small:512 medium:100800}; do
            grade=${case%%:*}; n=${case##*:}
            tag="$build-$grade-$n-r$round"
            timeout 150 python3 bench/profile_kernels.py --grade "$grade" --n "$n" --evaluations 20 --cuda-graph auto "${properties[@]}" \
                --steps $([ "$n" -le 20000 ] && echo 2000 || echo 50) > "$OUT/wall-$tag.log" 2>&1
            echo "$build round $round: $(tail -1 "$OUT/wall-$tag.log")"
            [ -n "$NCU" ] && timeout 240 "$NCU" --clock-control none --profile-from-start off --metrics gpu__time_duration.sum \
                --csv python3 bench/profile_kernels.py --grade "$grade" --n "$n" --evaluations 2 "${properties[@]}" > "$OUT/ncu-$tag.csv" 2> "$OUT/ncu-$tag.err"
        done
    done
done
# The per-run logs and CSVs go into one archive once tabulated: a device call returns a limited number of files (v26).
archive_runs() {
    local runs
    runs=$(cd "$OUT" && ls ncu-*.csv ncu-*.err wall-*.log 2> /dev/null)
    [ -n "$runs" ] || return 0
    (cd "$OUT" && tar czf plugin-ab-runs.tgz $runs && rm -f $runs)
}
[ -n "$NCU" ] || { archive_runs; exit 0; }
for case in ${AB_CASES:-small:512 medium:100800}; do
    grade=${case%%:*}; n=${case##*:}
    files=(); labels=()
    for round in $(seq 1 "${AB_ROUNDS:-2}"); do
        for build in $builds; do files+=("$OUT/ncu-$build-$grade-$n-r$round.csv"); labels+=("$build.$round"); done
    done
    echo "== $grade $n (Nsight Compute, caches flushed, us an evaluation)"
    python3 bench/ncu_kernel_table.py "${files[@]}" --labels "$(IFS=,; echo "${labels[*]}")"
done
archive_runs
