#!/usr/bin/env bash
# compute-sanitizer over the CUDA C++ tests: every GoogleTest case of each test binary in a process of its own, under
# each tool, SANITIZE_JOBS processes at a time on the one GPU.  Needs a GPU whose runtime lets compute-sanitizer run
# (the lent Firecracker machines do; /work/.library/device/KINDS.md).
#
#   BUILD=build/tests bash scripts/sanitize-gpu-tests.sh      (after scripts/test-gpu.sh, which builds there)
#   EXTRA_SCRIPT=scripts/sanitize-gpu-tests.sh bash scripts/device-session.sh extra   (carry .device/tests.txz)
#
#   BUILD              the CMake build holding the tests (default /tmp/graph-py, unpacked from .device/tests.txz when
#                      it is not there and the carried tests match these sources)
#   SANITIZE_TOOLS     default "memcheck racecheck synccheck initcheck", run in that order
#   SANITIZE_BINARIES  default "TestCudaDenseTiles TestCudaDLPackViews TestCudaGraphForceMixed"
#   SANITIZE_FILTER    grep -E pattern on "tool binary case" lines (default: every case)
#   SANITIZE_TIMEOUT   seconds a case may take (default 150)
#   SANITIZE_DEADLINE  seconds after which no case starts (default 480)
#   SANITIZE_JOBS      processes at a time (default 8)
#                      (racecheck is the slow one: at 10 jobs and 170 s a case, 15 of 85 cases timed out and two ended
#                      without output in bench/NOTES.md v65; give it SANITIZE_FILTER, fewer jobs and more time)
#   SANITIZER          the compute-sanitizer to run (default: the one on PATH or in /usr/local/cuda)
#   SANITIZE_OPTIONS   more options of compute-sanitizer for every case, e.g. kernel filters: a kernel left out by
#                      `--kernel-name regex=...` or `--kernel-name-exclude kns=...` still runs, uninstrumented.  Racecheck
#                      of the cases that take more than a device call's 600 s (bench/NOTES.md v68-v70) instrumenting only
#                      the kernels each case is about:
#                        ClusterFused:     --kernel-name kns=clusterFittingKernel
#                        FusedNetworkOfWide: --kernel-name kns=fusedFittingKernel
#                        RowLoopsBeyond:   --kernel-name regex=invariants
#                      and OpenMM's own kernels left out where a test's surroundings use them:
#                        --kernel-name-exclude kns=computeNonbonded
#
# Each case ends as: clean (the test passed and the tool reported nothing), HOST-ONLY (the test passed without any
# CUDA call for the tool to watch), ERROR (the tool's report: hazards, invalid accesses, uninitialised reads, barrier
# misuse), FAILED (the test failed under the tool), TIMEOUT or NOT-STARTED (the deadline).  CUDA API calls that return
# an error are not reported (--report-api-errors no): OpenMM's kernel cache looks for modules that are not there yet
# (cuModuleLoad, CUDA_ERROR_FILE_NOT_FOUND) and the pipeline tries cudaGraphExecUpdate before instantiating again;
# both are checked returns, not faults.  A case not clean is never counted as checked.  Logs: $OUT/sanitize/<tool>/<binary>.<case>.log and
# $OUT/sanitize/summary.txt.  The exit status is 1 when a case reports ERROR or FAILED.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
BUILD=${BUILD:-/tmp/graph-py}
SAN=${SANITIZER:-$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer 2>/dev/null | head -n 1)}
[ -n "$SAN" ] || { echo "compute-sanitizer not found"; exit 1; }
if [ ! -d "$BUILD" ]; then
    [ "$BUILD" = /tmp/graph-py ] || { echo "no build in $BUILD"; exit 1; }
    source scripts/device-build.sh
    reuse_tests || { echo "no build in $BUILD and no carried tests for these sources"; exit 1; }
fi
# The tests load OpenMM's platforms from OPENMM_PLUGIN_DIR, which ctest sets from the build's configuration (run directly
# here, they need it from the environment or from that configuration).  A carried build names the folder of the machine
# that built it (bench/NOTES.md v66), so the folder must exist here.
if [ -z "${OPENMM_PLUGIN_DIR:-}" ]; then
    OPENMM_PLUGIN_DIR=$(grep -rhoE 'OPENMM_PLUGIN_DIR=[^";]+' "$BUILD" --include=CTestTestfile.cmake 2>/dev/null | head -n 1 | cut -d= -f2-)
    export OPENMM_PLUGIN_DIR
fi
[ -d "$OPENMM_PLUGIN_DIR" ] || { echo "OPENMM_PLUGIN_DIR (\"$OPENMM_PLUGIN_DIR\", from the environment or $BUILD's tests) is not a folder here (source scripts/device-env.sh)"; exit 1; }
dir="$OUT/sanitize"
mkdir -p "$dir"
"$SAN" --version | tail -n 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader

# "tool binary case" lines, every tool's cases before the next tool's, so that the deadline cuts the last tools.
cases="$dir/cases.txt"
: > "$cases"
for binary in ${SANITIZE_BINARIES:-TestCudaDenseTiles TestCudaDLPackViews TestCudaGraphForceMixed}; do
    path=$(find "$BUILD" -maxdepth 3 -type f -name "$binary" -perm -u+x | head -n 1)
    [ -n "$path" ] || { echo "no $binary in $BUILD"; exit 1; }
    echo "$path" > "$dir/$binary.path"
    # --gtest_list_tests: "Suite." lines, then "  Case" lines; parameterised ones end in "  # GetParam() = ...".
    "$path" --gtest_list_tests | sed 's/  #.*$//' | awk '/^[^ ]/ { suite = $1; next } /^  / { print suite $1 }' > "$dir/$binary.list"
    [ -s "$dir/$binary.list" ] || { echo "$binary listed no tests"; exit 1; }
done
for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}; do
    for binary in ${SANITIZE_BINARIES:-TestCudaDenseTiles TestCudaDLPackViews TestCudaGraphForceMixed}; do
        sed "s/^/$tool $binary /" "$dir/$binary.list"
    done
done | grep -E "${SANITIZE_FILTER:-.}" > "$cases"
echo "$(wc -l < "$cases") cases, ${SANITIZE_JOBS:-8} at a time, ${SANITIZE_TIMEOUT:-150} s each at most${SANITIZE_OPTIONS:+, with $SANITIZE_OPTIONS}"

export SAN dir SANITIZE_OPTIONS="${SANITIZE_OPTIONS:-}"
export DEADLINE=$(($(date +%s) + ${SANITIZE_DEADLINE:-480})) CASE_TIMEOUT=${SANITIZE_TIMEOUT:-150}
run_case() {
    local tool=$1 binary=$2 name=$3 options start rc result
    local log="$dir/$tool/$binary.${name//\//_}.log"
    mkdir -p "$dir/$tool"
    if [ "$(date +%s)" -ge "$DEADLINE" ]; then
        echo "$tool $binary $name NOT-STARTED 0" >> "$dir/results.txt"
        return 0
    fi
    case $tool in
        memcheck) options="--leak-check no" ;;
        *) options= ;;
    esac
    start=$(date +%s)
    timeout -k 10 "$CASE_TIMEOUT" "$SAN" --tool "$tool" $options ${SANITIZE_OPTIONS:-} --report-api-errors no --error-exitcode 86 --print-limit 20 \
        "$(cat "$dir/$binary.path")" --gtest_filter="$name" > "$log" 2>&1
    rc=$?
    case $rc in
        0) result=clean ;;
        86) result=ERROR ;;
        124|137) result=TIMEOUT ;;
        *) result=FAILED ;;
    esac
    # A test that skips itself (GTEST_SKIP) is not a checked case; nor is one that makes no CUDA call.
    [ $rc -eq 0 ] && grep -q '\[  SKIPPED \]' "$log" && result=SKIPPED
    grep -q 'terminated before first instrumented API call' "$log" && grep -q '\[  PASSED  \] 1 test' "$log" && result=HOST-ONLY
    echo "$tool $binary $name $result $(($(date +%s) - start))" >> "$dir/results.txt"
}
export -f run_case
: > "$dir/results.txt"
xargs -P "${SANITIZE_JOBS:-8}" -L 1 bash -c 'run_case "$@"' _ < "$cases"

{
    echo "== per tool: clean / HOST-ONLY / SKIPPED / ERROR / FAILED / TIMEOUT / NOT-STARTED"
    for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}; do
        printf '%s:' "$tool"
        for result in clean HOST-ONLY SKIPPED ERROR FAILED TIMEOUT NOT-STARTED; do
            printf ' %s' "$(awk -v t="$tool" -v r="$result" '$1 == t && $4 == r' "$dir/results.txt" | wc -l)"
        done
        echo
    done
    echo "== cases not clean"
    sort "$dir/results.txt" | awk '$4 != "clean" && $4 != "HOST-ONLY"'
    echo "== the tools' reports (first lines of each)"
    for log in $(grep -l -E '^========= (Invalid|Race|Error:|Uninitialized|Barrier|Warning|[A-Z][a-z]+ (reported|hazard))' "$dir"/*/*.log 2>/dev/null); do
        grep -q 'terminated before first instrumented API call' "$log" && continue
        echo "--- $log"
        grep -E '^=========' "$log" | head -n 12
    done
    echo "== slowest cases"
    sort -k5 -n -r "$dir/results.txt" | head -n 10
} | tee "$dir/summary.txt"
! awk '$4 == "ERROR" || $4 == "FAILED"' "$dir/results.txt" | grep -q .
