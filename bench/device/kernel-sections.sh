#!/usr/bin/env bash
# Nsight Compute's sections (speed of light, occupancy, launch statistics, warp states, scheduler, memory and compute
# workload) of one launch of each kernel matching SECTION_KERNELS (a regex, default the two force scans) in each case of
# SECTION_CASES (grade:n ..., default medium:100800), for each GraphForce property variant of SECTION_VARIANTS
# ("NAME=KEY=VALUE[,KEY=VALUE...] ...", default "rows=CudaForceScan=rows streamed=CudaForceScan=streamed"): why one
# kernel is slower than another, not how long either takes (that is plugin-ab.sh's).  Full reports go to
# $OUT/sections-*.txt, the headline figures to standard output.  Run by scripts/device-session.sh's `extra` part
# (EXTRA_SCRIPT=bench/device/kernel-sections.sh), the package installed; about 30 s a variant and case.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-out}
mkdir -p "$OUT"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
[ -n "$NCU" ] || { echo "kernel-sections: no ncu"; exit 1; }
sections=(SpeedOfLight Occupancy LaunchStats WarpStateStats SchedulerStats MemoryWorkloadAnalysis ComputeWorkloadAnalysis)
status=0
for variant in ${SECTION_VARIANTS:-rows=CudaForceScan=rows streamed=CudaForceScan=streamed}; do
    name=${variant%%=*}
    properties=()
    IFS=, read -ra pairs <<< "${variant#*=}"
    for pair in "${pairs[@]}"; do properties+=(--property "$pair"); done
    for case in ${SECTION_CASES:-medium:100800}; do
        grade=${case%%:*}; n=${case##*:}
        tag="$name-$grade-$n"
        timeout 240 "$NCU" --clock-control none --profile-from-start off -k "regex:${SECTION_KERNELS:-forcesKernel|streamedForcesKernel}" \
            --launch-count 2 $(printf -- '--section %s ' "${sections[@]}") python3 bench/profile_kernels.py --grade "$grade" --n "$n" \
            --evaluations 1 "${properties[@]}" > "$OUT/sections-$tag.txt" 2>&1 || { echo "kernel-sections: ncu failed for $tag"; status=1; }
        echo "== $tag"
        grep -E "^  [a-zA-Z_].*\(|^    (Duration|Registers Per Thread|Block Size|Grid Size|Dynamic Shared Memory Per Block|Theoretical Occupancy|Achieved Occupancy|Memory Throughput|DRAM Throughput|L1/TEX Hit Rate|L2 Hit Rate|L1/TEX Cache Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|Executed Ipc Active|Issue Slots Busy|Warp Cycles Per Issued Instruction|Avg. Active Threads Per Warp|No Eligible|One or More Eligible|Local Memory Spilling)" \
            "$OUT/sections-$tag.txt" | cut -c1-120
        # The warp-state advice names the stall that dominates.
        grep -E -A2 "^    (WRN|OPT) +.*(stall|Stall)" "$OUT/sections-$tag.txt" | cut -c1-240 | head -12
    done
done
exit $status
