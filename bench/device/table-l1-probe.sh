#!/usr/bin/env bash
# Build and run bench/device/table_l1_probe.cu (can the L1 serve the edge scans' table reads when every multiprocessor
# works on one slice of the table at a time?) on a GPU machine, run directly (OUT=... bash bench/device/table-l1-probe.sh):
# the timings with no shared memory taken from L1 and with 28 KB a block (4 blocks: about the 115 KB a multiprocessor the
# moments kernel held before v25), then Nsight Compute's L1 hit rate, L2 and DRAM bytes and instruction counts of every kernel (28 KB).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/out}"
mkdir -p "$OUT"
nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -o /tmp/table_l1_probe bench/device/table_l1_probe.cu || exit 1
status=0
for smem in 0 28672; do
    timeout 120 /tmp/table_l1_probe 100800 10 $smem | tee "$OUT/table-l1-probe-$smem.txt" || status=1
done
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
if [ -n "$NCU" ]; then
    timeout 300 "$NCU" --clock-control none -k regex:scan --csv --metrics \
        gpu__time_duration.sum,l1tex__t_sector_hit_rate.pct,lts__t_bytes.sum,dram__bytes_read.sum,sm__inst_executed.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active \
        /tmp/table_l1_probe 100800 1 28672 > "$OUT/table-l1-probe-ncu.csv" 2> "$OUT/table-l1-probe-ncu.err" || status=1
    python3 bench/device/ncu_metric_lines.py "$OUT/table-l1-probe-ncu.csv" || status=1
fi
exit $status
