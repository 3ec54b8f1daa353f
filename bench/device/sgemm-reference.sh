#!/usr/bin/env bash
# cuBLAS SGEMM, DGEMM, TF32 and split TF32 (3xTF32) at the medium grade's dense shapes (bench/device/sgemm_reference.py); `extra` part of scripts/device-session.sh.
python3 "$(dirname "$0")/sgemm_reference.py"
