#!/usr/bin/env bash
# GPU tests and benchmarks on a machine with an NVIDIA GPU but no network
# (the lent device machine): Python 3 with numpy/torch/pytest, CMake, ninja,
# nvcc and g++ present; OpenMM and SWIG come as wheels in .device/wheels
# (cp312: openmm==8.6.1, openmm-cuda-13==8.6.1, swig) and GoogleTest as
# headers and static libraries in .device/gtest.  Logs go to $OUT (or ./out).
#
#   bash scripts/device-session.sh [PARTS]
#
# PARTS: comma-separated, of
#   test     build with CMake, run every C++ test (ctest)
#   py       pip install the package, run the Python tests marked gpu (PYTEST_ARGS: more pytest arguments, e.g. files)
#   profile  per-kernel times under Nsight Compute (PROFILE_CASES, grade:n ..., empty for none; PROFILE_ARGS: more arguments of
#            bench/profile_kernels.py, e.g. "--precision double"; NCU_ARGS: more arguments of ncu, e.g.
#            "--cache-control none" to keep the caches warm between kernels, as in a run)
#   bench    bench/run_benchmarks.py with $BENCH_ARGS
#   timeline GPU timelines of real steps (bench/device/timeline.sh; TIMELINE_CASES, grade:n ..., default "small:512 small:10296")
#   extra    bash each script of $EXTRA_SCRIPT (space-separated; after the rest; the package is installed)
# "all" = test,py,bench (the default).
# Timing on an H200 (bench/NOTES.md v39): the build about 200 s, `test` about 190 s (170-220 s on H100s in v53; 335 s on an H100 in v67, with
# the 2.25 GiB table and 38M-particle tests; the mixed binary took 319 s, so keep CTEST_TIMEOUT at 400 or more), `py` about 310 s (210 s of it the
# AOTI test, which compiles a package), so `test,py` does not fit one 600 s device call: run `test` with `py` and
# PYTEST_ARGS="--deselect python/tests/test_torch_cuda.py::test_aoti_package_for_cuda", then that test alone.
# A call that builds returns the package as $OUT/pkg.txz; copied to .device/pkg.txz (carried with .device) it spares later
# calls without `test` the build while the sources are the same (checked by a hash).  scripts/build-device-bundle.sh
# makes .device/pkg.txz and .device/tests.txz on a CPU machine: carried with .device/wheels, no call builds at all, and
# `test` runs the carried build's GPU tests (`ctest -L gpu`; its CPU tests are CI's).
# The MPI tests of `py` need the mpich wheel the bundle was built against in .device/mpi (`pip download --no-deps -d
# .device/mpi mpich==5.0.2`, 13.3 MB); with .device/tests.txz as well the carry and the tree pass a call's 64 MiB, so
# carry .device/tests.txz for `test` and .device/mpi for `py`, in two calls (bench/NOTES.md v64).
set -uo pipefail
cd "$(dirname "$0")/.."
parts="${1:-all}"
[ "$parts" = all ] && parts=test,py,bench
has() { [[ ",$parts," == *",$1,"* ]]; }
source scripts/device-env.sh

# Which code ran: the digest of the plugin's sources (a device copy's git metadata can be stale, bench/NOTES.md v11);
# `python3 bench/run_benchmarks.py --source-digest` prints the same for any checkout.
python3 bench/run_benchmarks.py --source-digest > "$OUT/source-digest.txt" 2>&1 && echo "source digest: $(cat "$OUT/source-digest.txt")"

status=0
python_parts() { has py || has profile || has bench || has timeline || has extra; }
source scripts/device-build.sh
# A carried build's LibTorch plugins (C++ tests and package) find torch through the build machine's paths: give them
# this machine's, so that the plugin folder loads whole (without it `py` skipped the torch tests, bench/NOTES.md v44).
torch_lib=$(python3 -c "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))" 2> /dev/null)
[ -n "$torch_lib" ] && export LD_LIBRARY_PATH="$torch_lib:${LD_LIBRARY_PATH:-}"
if has test; then
    labels=
    if reuse_tests && { ! python_parts || reuse_package; }; then
        BUILD=/tmp/graph-py
        labels="-L gpu"
    elif python_parts; then
        BUILD=/tmp/graph-py
        install_package_with_tests || exit 1
        pack_package "$OUT/pkg.txz"
    else
        BUILD=/tmp/graph-build
        cmake -S . -B "$BUILD" -G Ninja -DOPENMM_DIR="$OPENMM_LIBS" -DGRAPH_BUILD_PYTHON=OFF -DGTEST_ROOT="$PWD/.device/gtest" \
            -DCMAKE_BUILD_TYPE=Release > "$OUT/cmake.log" 2>&1 && ninja -C "$BUILD" > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log" "$OUT/cmake.log"; exit 1; }
    fi
    # A carried build runs its GPU tests only (its CPU tests name tools of the machine that built it; CI runs those).
    ctest --test-dir "$BUILD" $labels --output-on-failure -j 4 --timeout "${CTEST_TIMEOUT:-400}" > "$OUT/ctest.log" 2>&1 || status=1
    grep -E "tests passed|Passed|Failed|\*\*\*" "$OUT/ctest.log" | tail -20
elif python_parts; then
    reuse_package || { install_package || exit 1; pack_package "$OUT/pkg.txz"; }
fi
# The extra scripts (bench/device/ab-package.sh) know the package in $SITE is this call's, not a warm machine's leftover.
if python_parts; then
    export GRAPH_PACKAGE_INSTALLED="$SITE"
fi
if has py; then
    python3 -m pytest -m gpu -q -p no:cacheprovider -rs --durations=25 ${PYTEST_ARGS:-} > "$OUT/pytest-gpu.log" 2>&1; rc=$?
    [ $rc -eq 0 ] || [ $rc -eq 5 ] || status=1
    grep -E "FAILED|ERROR|SKIPPED" "$OUT/pytest-gpu.log" | head -30
    tail -3 "$OUT/pytest-gpu.log"
fi
if has profile; then
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
    for case in ${PROFILE_CASES-small:512 medium:10296}; do
        grade=${case%%:*}; n=${case##*:}
        for graph in false auto; do
            python3 bench/profile_kernels.py --grade "$grade" --n "$n" --evaluations 20 --cuda-graph $graph ${PROFILE_ARGS:-} \
                --steps $([ "$n" -le 20000 ] && echo 2000 || echo 50) > "$OUT/wall-$grade-$n-$graph.log" 2>&1
            tail -2 "$OUT/wall-$grade-$n-$graph.log"
        done
        [ -n "$NCU" ] && timeout 240 "$NCU" --clock-control none ${NCU_ARGS:-} --profile-from-start off --metrics gpu__time_duration.sum --csv \
            python3 bench/profile_kernels.py --grade "$grade" --n "$n" --evaluations 2 ${PROFILE_ARGS:-} > "$OUT/ncu-$grade-$n.csv" 2> "$OUT/ncu-$grade-$n.err"
    done
    # PROFILE_DETAIL="grade:n:kernel-regex ...": Nsight Compute's throughput and stall sections for one evaluation's kernels.
    for case in ${PROFILE_DETAIL:-}; do
        IFS=: read -r grade n kernels <<< "$case"
        [ -n "$NCU" ] && timeout 240 "$NCU" --clock-control none --profile-from-start off -k "regex:$kernels" \
            --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
            python3 bench/profile_kernels.py --grade "$grade" --n "$n" --evaluations 1 ${PROFILE_ARGS:-} > "$OUT/ncu-detail-$grade-$n.txt" 2>&1
    done
fi
if has bench; then
    python3 bench/run_benchmarks.py ${BENCH_ARGS:---time-budget 900} --out "$OUT/bench.json" --plot "$OUT/bench.png" > "$OUT/bench.log" 2>&1 \
        || status=1
    tail -40 "$OUT/bench.log"
fi
if has timeline; then
    bash bench/device/timeline.sh > "$OUT/timeline.log" 2>&1 || status=1
    grep -E "wall|steps:|GraphForce:" "$OUT/timeline.log" | head -40
fi
if has extra; then
    for script in ${EXTRA_SCRIPT:?}; do
        bash "$script" > "$OUT/extra-$(basename "$script" .sh).log" 2>&1 || status=1
        tail -30 "$OUT/extra-$(basename "$script" .sh).log"
    done
fi
# The logs travel back as one archive (the device returns a limited number of files).
(cd "$OUT" && tar czf /tmp/graph-logs.tgz --exclude=bench.json --exclude=bench.png --exclude=pkg.txz . \
    && find . -type f ! -name bench.json ! -name bench.png ! -name pkg.txz -delete \
    && mv /tmp/graph-logs.tgz logs.tgz)
exit $status
