#!/usr/bin/env bash
# One GPU call (run directly): where CudaMomentsScan "auto" should switch between the row and streamed moments scans
# (bench/NOTES.md v31).  First the wall time of Verlet steps (CUDA graph on) with each scan set explicitly, for the cases
# of SCAN_CASES (grade:n:steps ..., two interleaved rounds), with the package of .device/pkg.txz (the scans' kernels do
# not depend on "auto"); then the C++ tests of the choice (GTEST_FILTER *MomentsScan*) built here from these sources.
# Logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device-env.sh > "$OUT/env.log" 2>&1 || { tail -5 "$OUT/env.log"; exit 1; }
base_library_path="${LD_LIBRARY_PATH:-}"
(
    tar xf .device/pkg.txz -C "$SITE" || exit 1
    export LD_LIBRARY_PATH="$SITE/openmmgraph/lib:$OPENMM_LIBS/lib:$OPENMM_LIBS/lib/plugins:$base_library_path"
    for round in 1 2; do
        for case in ${SCAN_CASES:-medium:512:2000 medium:10296:1000 large:10296:150}; do
            IFS=: read -r grade n steps <<< "$case"
            for scan in rows streamed; do
                echo "$scan round $round: $(python3 bench/profile_kernels.py --grade "$grade" --n "$n" --evaluations 1 --cuda-graph auto \
                    --property CudaMomentsScan=$scan --steps "$steps" 2>&1 | tail -1)"
            done
        done
    done
) | tee "$OUT/scan-choice.log"
export LD_LIBRARY_PATH="$base_library_path"
cmake -S . -B /tmp/graph-build -G Ninja -DOPENMM_DIR="$OPENMM_LIBS" -DGRAPH_BUILD_PYTHON=OFF -DGTEST_ROOT="$PWD/.device/gtest" \
    -DCMAKE_BUILD_TYPE=Release > "$OUT/cmake.log" 2>&1 &&
    ninja -C /tmp/graph-build TestCudaGraphForceSingle TestCudaGraphForceMixed TestCudaGraphForceDouble > "$OUT/build.log" 2>&1 ||
    { tail -30 "$OUT/build.log" "$OUT/cmake.log"; exit 1; }
GTEST_FILTER='*MomentsScan*' ctest --test-dir /tmp/graph-build -R 'TestCudaGraphForce(Single|Mixed|Double)$' --output-on-failure -j 3 \
    > "$OUT/ctest.log" 2>&1
status=$?
grep -E "tests passed|Passed|Failed|OK \]|FAILED" "$OUT/ctest.log" | tail -30
exit $status
