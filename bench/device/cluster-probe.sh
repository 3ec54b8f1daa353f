#!/usr/bin/env bash
# Build and run bench/device/cluster_probe.cu (the cost of a cluster stage's communication) on a GPU machine; for
# scripts/device-session.sh's `extra` part:  EXTRA_SCRIPT=bench/device/cluster-probe.sh bash scripts/device-session.sh extra
set -euo pipefail
cd "$(dirname "$0")/../.."
nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/cluster_probe bench/device/cluster_probe.cu
timeout 120 /tmp/cluster_probe
