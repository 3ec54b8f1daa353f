#!/usr/bin/env bash
# Each kernel's time, L1 hit rate, L2 traffic and active warps under Nsight Compute (caches flushed), for the kernels that
# match TRAFFIC_KERNELS (a regex, default the two edge scans) of TRAFFIC_CASES (grade:n ..., default medium:100800), two
# evaluations each.  The edge scans are bound by reading the radial tables from L2 (docs/cuda-platform.md), so their L2
# bytes are the figure to watch.  Run by scripts/device-session.sh's `extra` part (EXTRA_SCRIPT=bench/device/kernel-traffic.sh),
# the package installed.
set -uo pipefail
OUT=${OUT:-out}
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
[ -n "$NCU" ] || { echo "no ncu"; exit 1; }
metrics=gpu__time_duration.sum,l1tex__t_sector_hit_rate.pct,lts__t_bytes.sum,sm__warps_active.avg.pct_of_peak_sustained_active
for case in ${TRAFFIC_CASES:-medium:100800}; do
    grade=${case%%:*}; n=${case##*:}
    timeout 240 "$NCU" --clock-control none --profile-from-start off -k "regex:${TRAFFIC_KERNELS:-momentsKernel|forcesKernel}" \
        --metrics "$metrics" --csv python3 bench/profile_kernels.py --grade "$grade" --n "$n" --evaluations 2 ${PROFILE_ARGS:-} \
        > "$OUT/traffic-$grade-$n.csv" 2> "$OUT/traffic-$grade-$n.err" || echo "ncu failed: $case"
    python3 - "$OUT/traffic-$grade-$n.csv" "$case" <<'PY'
import collections, csv, sys
rows = list(csv.reader(open(sys.argv[1])))
head = next((k for k, r in enumerate(rows) if "Kernel Name" in r), None)
if head is None:
    sys.exit(print("no kernels profiled:", sys.argv[1]))
h = rows[head]
kn, mn, mv = h.index("Kernel Name"), h.index("Metric Name"), h.index("Metric Value")
values = collections.defaultdict(list)
for r in rows[head + 1:]:
    if len(r) > mv:
        values[(r[kn].split("<")[0].split("::")[-1], r[mn])].append(float(r[mv].replace(",", "")))
for (kernel, metric), v in sorted(values.items()):
    print(f"{sys.argv[2]:14} {kernel:22} {metric:52} mean {sum(v) / len(v):16.4f} over {len(v)}")
PY
done
