#!/usr/bin/env bash
# GPU tests and benchmarks on a machine with an NVIDIA GPU but no network
# (the lent device machine): Python 3 with numpy/torch/pytest, CMake, ninja,
# nvcc and g++ present; OpenMM and SWIG come as wheels in .device/wheels
# (cp312: openmm==8.6.1, openmm-cuda-13==8.6.1, swig) and GoogleTest as
# headers and static libraries in .device/gtest.  Logs go to $OUT (or ./out).
#
#   bash scripts/device-session.sh [test|bench|all]
set -uo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"
source scripts/device-env.sh

BUILD=/tmp/graph-build
status=0
if [ "$what" = test ] || [ "$what" = all ]; then
    cmake -S . -B "$BUILD" -G Ninja -DOPENMM_DIR="$OPENMM_LIBS" -DGRAPH_BUILD_PYTHON=OFF -DGTEST_ROOT="$PWD/.device/gtest" \
        -DCMAKE_BUILD_TYPE=Release > "$OUT/cmake.log" 2>&1 && ninja -C "$BUILD" > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log" "$OUT/cmake.log"; exit 1; }
    ctest --test-dir "$BUILD" --output-on-failure -j 4 > "$OUT/ctest.log" 2>&1 || status=1
    grep -E "tests passed|Passed|Failed|\*\*\*" "$OUT/ctest.log" | tail -20
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
    rm -rf /tmp/graph-py
    python3 -m pip install -q --upgrade --no-build-isolation --no-deps --no-index --target "$SITE" . -Ccmake.define.OPENMM_DIR="$OPENMM_LIBS" \
        -Cbuild-dir=/tmp/graph-py > "$OUT/pip.log" 2>&1 || { tail -30 "$OUT/pip.log"; exit 1; }
    python3 -m pytest -m gpu -q -p no:cacheprovider > "$OUT/pytest-gpu.log" 2>&1; rc=$?
    [ $rc -eq 0 ] || [ $rc -eq 5 ] || status=1
    tail -3 "$OUT/pytest-gpu.log"
    python3 bench/run_benchmarks.py ${BENCH_ARGS:---time-budget 900} --out "$OUT/bench.json" --plot "$OUT/bench.png" > "$OUT/bench.log" 2>&1 \
        || status=1
    tail -40 "$OUT/bench.log"
fi
exit $status
