#!/usr/bin/env bash
# Build and run bench/device/table_probe.cu (the table-stationary edge-scan probe) on a GPU machine; for
# scripts/device-session.sh's `extra` part:  EXTRA_SCRIPT=bench/device/table-probe.sh bash scripts/device-session.sh extra
# (or compile it elsewhere with the same nvcc line and carry the binary: about 5 s on an H200).
set -euo pipefail
cd "$(dirname "$0")/../.."
nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -o /tmp/table_probe bench/device/table_probe.cu
timeout 120 /tmp/table_probe
