#!/usr/bin/env bash
# Build and run bench/device/stream_probe.cu (the weight-stream probe) on a GPU machine; for scripts/device-session.sh's
# `extra` part:  EXTRA_SCRIPT=bench/device/stream-probe.sh bash scripts/device-session.sh extra
set -euo pipefail
cd "$(dirname "$0")/../.."
nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/stream_probe bench/device/stream_probe.cu
timeout 120 /tmp/stream_probe
