#!/usr/bin/env bash
# Build and run bench/device/network_probe.cu (the small-system network probe: 2D tiles over 128 blocks, one cooperative
# kernel with grid syncs against six kernels in a CUDA graph) on a GPU machine; for scripts/device-session.sh's `extra`:
#   EXTRA_SCRIPT=bench/device/network-probe.sh bash scripts/device-session.sh extra
# (or compile it elsewhere with the same nvcc line and carry the binary: seconds on an H200).
set -euo pipefail
cd "$(dirname "$0")/../.."
nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -o /tmp/network_probe bench/device/network_probe.cu
timeout 120 /tmp/network_probe
