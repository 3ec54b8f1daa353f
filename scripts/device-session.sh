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
# Timing on an H200 (bench/NOTES.md v39): the build about 200 s, `test` about 190 s, `py` about 310 s (210 s of it the
# AOTI test, which compiles a package), so `test,py` does not fit one 600 s device call: run `test` with `py` and
# PYTEST_ARGS="--deselect python/tests/test_torch_cuda.py::test_aoti_package_for_cuda", then that test alone.
# A call that builds returns the package as $OUT/pkg.txz; copied to .device/pkg.txz (carried with .device) it spares later
# calls without `test` the build while the sources are the same (checked by a hash).
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
# The package (pip, scikit-build-core) in /tmp/graph-py; with `test` also the C++ tests in the same build, so the plugin
# is compiled once per session (compiling it twice cost about 130 s of device time a call).
install_package() {
    rm -rf /tmp/graph-py
    python3 -m pip install -q --upgrade --no-build-isolation --no-deps --no-index --target "$SITE" . -Ccmake.define.OPENMM_DIR="$OPENMM_LIBS" \
        -Cbuild-dir=/tmp/graph-py "$@" > "$OUT/pip.log" 2>&1 || { tail -30 "$OUT/pip.log"; exit 1; }
}
# The built package travels back as $OUT/pkg.txz (with a hash of the sources it was built from); a later call that carries
# it as .device/pkg.txz and has no `test` part unpacks it instead of compiling, when the sources still match (about 150 s
# of device time a call).
source_hash() {
    find openmmapi platforms serialization wrappers python/openmmgraph python/CMakeLists.txt CMakeLists.txt pyproject.toml \
        -type f ! -name '*.pyc' ! -name '_graphforce*' ! -name graphforce.py ! -path 'python/openmmgraph/lib/*' -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1
}
SRC_HASH=$(source_hash)
pack_package() {
    echo "$SRC_HASH" > "$SITE/openmmgraph/source-hash.txt"
    (cd "$SITE" && XZ_OPT="-T0 -6" tar cJf "$OUT/pkg.txz" openmmgraph openmm_graph-*.dist-info $(ls bin/openmm-graph 2>/dev/null))
}
reuse_package() {
    [ -f .device/pkg.txz ] || return 1
    tar xf .device/pkg.txz -C "$SITE" || return 1
    if [ "$(cat "$SITE/openmmgraph/source-hash.txt" 2>/dev/null)" = "$SRC_HASH" ]; then
        echo "package: unpacked from .device/pkg.txz (built from these sources)"
        return 0
    fi
    echo "package: .device/pkg.txz was built from other sources; building"
    rm -rf "$SITE"/openmmgraph "$SITE"/openmm_graph-*.dist-info
    return 1
}
if has test; then
    if python_parts; then
        BUILD=/tmp/graph-py
        install_package -Ccmake.define.GRAPH_BUILD_TESTS=ON -Ccmake.define.GTEST_ROOT="$PWD/.device/gtest"
        pack_package
    else
        BUILD=/tmp/graph-build
        cmake -S . -B "$BUILD" -G Ninja -DOPENMM_DIR="$OPENMM_LIBS" -DGRAPH_BUILD_PYTHON=OFF -DGTEST_ROOT="$PWD/.device/gtest" \
            -DCMAKE_BUILD_TYPE=Release > "$OUT/cmake.log" 2>&1 && ninja -C "$BUILD" > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log" "$OUT/cmake.log"; exit 1; }
    fi
    ctest --test-dir "$BUILD" --output-on-failure -j 4 --timeout "${CTEST_TIMEOUT:-400}" > "$OUT/ctest.log" 2>&1 || status=1
    grep -E "tests passed|Passed|Failed|\*\*\*" "$OUT/ctest.log" | tail -20
elif python_parts; then
    reuse_package || { install_package; pack_package; }
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
