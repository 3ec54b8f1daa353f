#!/usr/bin/env bash
# Device-session extra (EXTRA_SCRIPT), or run directly on a GPU machine: every build of .device/ab
# (scripts/build-ab-plugins.sh) evaluates the cases of bench/ab_forces.py (AB_FORCE_CASES and AB_FORCE_PRECISIONS
# change them) with the package of bench/device/ab-package.sh, and the builds' energies and forces are compared bit
# for bit ($OUT/ab-forces.log; exit status 1 if any differ).  For a change meant to keep every bit, in a call with
# no room for `ctest`, which it does not replace (bench/README.md).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/out}"
mkdir -p "$OUT"
source bench/device/ab-package.sh "" || exit 1
builds=$(cd .device/ab 2>/dev/null && ls -d */ 2>/dev/null | tr -d /)
[ -n "$builds" ] || { echo "plugin-forces: no builds in .device/ab/NAME/libOpenMMGraphCUDA.so"; exit 1; }
files=()
for build in $builds; do
    ab_use "$build" || exit 1
    python3 bench/ab_forces.py --out "$OUT/forces-$build.npz" ${AB_FORCE_CASES:+--cases "$AB_FORCE_CASES"} \
        ${AB_FORCE_PRECISIONS:+--precisions "$AB_FORCE_PRECISIONS"} > "$OUT/ab-forces-$build.log" 2>&1 \
        || { echo "plugin-forces: $build failed"; tail -20 "$OUT/ab-forces-$build.log"; exit 1; }
    files+=("$OUT/forces-$build.npz")
done
python3 bench/ab_forces.py --compare "${files[@]}" 2>&1 | tee "$OUT/ab-forces.log"
exit "${PIPESTATUS[0]}"
