#!/usr/bin/env bash
# Build and run bench/device/table_stream_probe.cu (the center-stationary, table-streamed moments scan against the row
# scan) on a GPU machine: OUT=... bash bench/device/table-stream-probe.sh.  The timings at medium 100,800, then Nsight
# Compute's L2 bytes, shared-memory wavefronts, instructions and IPC of every kernel (one run each).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/out}"
mkdir -p "$OUT"
nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -o /tmp/table_stream_probe bench/device/table_stream_probe.cu || exit 1
status=0
timeout 120 /tmp/table_stream_probe 100800 10 | tee "$OUT/table-stream-probe.txt" || status=1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
if [ -n "$NCU" ]; then
    timeout 240 "$NCU" --clock-control none -k regex:scan --csv --metrics \
        gpu__time_duration.sum,lts__t_bytes.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,sm__inst_executed.sum,smsp__inst_executed.avg.per_cycle_active,lts__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active \
        /tmp/table_stream_probe 100800 1 > "$OUT/table-stream-probe-ncu.csv" 2> "$OUT/table-stream-probe-ncu.err" || status=1
    python3 bench/device/ncu_metric_lines.py "$OUT/table-stream-probe-ncu.csv" --odd || status=1
    # Warp stall reasons (warps stalled per issue), in a second pass so that a metric this ncu lacks costs only this table.
    timeout 240 "$NCU" --clock-control none -k regex:scanStreamed --launch-count 20 --csv --metrics gpu__time_duration.sum,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_branch_resolving_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio \
        /tmp/table_stream_probe 100800 1 > "$OUT/table-stream-probe-stalls.csv" 2> "$OUT/table-stream-probe-stalls.err" || status=1
    python3 bench/device/ncu_metric_lines.py "$OUT/table-stream-probe-stalls.csv" --odd --strip smsp__average_warps_issue_stalled_,_per_issue_active.ratio || status=1
fi
exit $status
