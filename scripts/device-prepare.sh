#!/usr/bin/env bash
# Everything a lent GPU machine (no network, Python 3.12) needs from this checkout, made on a CPU machine with the CUDA
# toolkit and network access to PyPI and Debian, so that no device time goes to set-up or compiling.  A new checkout has
# none of it (.device/ is git-ignored); each step is skipped when its output is there.
#
#   bash scripts/device-prepare.sh [--julia]      (about 15 minutes on 2 cores; --julia adds about 5)
#
#   .device/wheels     cp312 wheels of openmm 8.6.1, openmm-cuda-13 8.6.1 and swig (scripts/device-env.sh installs them)
#   .device/mpi        the mpich wheel the package's MPI library is built against (the MPI tests of `py`)
#   .device/gtest      GoogleTest's headers and static libraries (the C++ tests of the bundle)
#   .device/pkg.txz, .device/tests.txz   the package and the C++ tests (scripts/build-device-bundle.sh), rebuilt
#                      whenever the plugin's sources differ from those they were built from
#   .device/julia      with --julia: Julia 1.5.3 and its packages (scripts/julia-bullseye.sh, which needs the packages'
#                      git repositories: DLPACK_GIT, REQUIRES_GIT, BFLOAT16S_GIT, GitHub by default)
#
# Then, on the device: scripts/device-session.sh (its header says which of these each part carries).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .device

if ! ls .device/wheels/openmm-8.6.1-cp312-*.whl .device/wheels/openmm_cuda_13-8.6.1-*.whl .device/wheels/swig-*.whl > /dev/null 2>&1; then
    # swig publishes manylinux_2_12 wheels, OpenMM manylinux_2_34 ones: name every tag the device's glibc takes.
    python3 -m pip download -q --no-deps --python-version 3.12 --only-binary=:all: \
        --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux2010_x86_64 \
        -d .device/wheels openmm==8.6.1 openmm-cuda-13==8.6.1 swig
fi
ls .device/mpi/mpich-*.whl > /dev/null 2>&1 || python3 -m pip download -q --no-deps -d .device/mpi mpich==5.0.2
if [ ! -f .device/gtest/lib/libgtest.a ]; then
    [ -f /usr/src/googletest/CMakeLists.txt ] || { echo "device-prepare: no /usr/src/googletest (apt-get install googletest)" >&2; exit 1; }
    build=$(mktemp -d)
    cmake -S /usr/src/googletest -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
        -DCMAKE_INSTALL_PREFIX="$PWD/.device/gtest" > /dev/null
    cmake --build "$build" -j "$(nproc)" > /dev/null && cmake --install "$build" > /dev/null
    rm -rf "$build"
fi

# The bundle: rebuilt unless the one here was built from these sources (the hash device-session.sh checks).
hash=$(bash -c 'source scripts/device-build.sh && source_hash')
package=$(tar -xJOf .device/pkg.txz openmmgraph/source-hash.txt 2>/dev/null || true)
tests=$(tar -xJOf .device/tests.txz tmp/graph-py/source-hash.txt 2>/dev/null || true)
if [ "$hash" != "$package" ] || [ "$hash" != "$tests" ]; then
    bash scripts/build-device-bundle.sh
else
    echo "device-prepare: .device/pkg.txz and tests.txz are from these sources ($hash)"
fi

if [ "${1:-}" = --julia ] && [ ! -f .device/julia/julia153.txz ]; then
    bash scripts/julia-bullseye.sh
fi
du -sh .device/* | grep -v bundle-logs
