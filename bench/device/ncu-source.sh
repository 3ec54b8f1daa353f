#!/usr/bin/env bash
# Nsight Compute's full set with source counters (stall samples per SASS instruction, with -lineinfo's CUDA lines) for one
# evaluation's kernels of one case; for scripts/device-session.sh's `extra` part:
#
#   NCU_SOURCE_CASE=small:512 NCU_SOURCE_KERNELS="forcesKernel|momentsKernel" EXTRA_SCRIPT=bench/device/ncu-source.sh \
#       bash scripts/device-session.sh extra
#
# Writes $OUT/ncu-source.ncu-rep (open it in Nsight Compute), the details page as text and, per kernel, the SASS with its
# samples as CSV ($OUT/ncu-source-sass.csv).  PROFILE_ARGS: more arguments of bench/profile_kernels.py.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/out}"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2> /dev/null | head -n 1)
[ -n "$NCU" ] || { echo "ncu not found"; exit 1; }
IFS=: read -r grade n <<< "${NCU_SOURCE_CASE:-small:512}"
timeout 400 "$NCU" --clock-control none --profile-from-start off -k "regex:${NCU_SOURCE_KERNELS:-forcesKernel|momentsKernel}" --set full \
    --import-source yes -f -o "$OUT/ncu-source" \
    python3 bench/profile_kernels.py --grade "$grade" --n "$n" --evaluations 1 ${PROFILE_ARGS:-} > "$OUT/ncu-source.log" 2>&1
tail -3 "$OUT/ncu-source.log"
"$NCU" -i "$OUT/ncu-source.ncu-rep" --page details > "$OUT/ncu-source-details.txt" 2>&1
"$NCU" -i "$OUT/ncu-source.ncu-rep" --page source --print-source sass,cuda --csv > "$OUT/ncu-source-sass.csv" 2>&1 \
    || "$NCU" -i "$OUT/ncu-source.ncu-rep" --page source --print-source sass --csv > "$OUT/ncu-source-sass.csv" 2>&1
wc -c "$OUT"/ncu-source*
