#!/usr/bin/env bash
# Builds, on a CPU machine with the CUDA toolkit, what a device call would otherwise build (about 200 s of device time a
# session): .device/pkg.txz (the package) and .device/tests.txz (the C++ tests), both for the device machine's Python
# (DEVICE_PYTHON, default python3.12; the wheels in .device/wheels are cp312), its torch (DEVICE_TORCH, default 2.11.0)
# and sm_90 with PTX, from the working tree as it is.  Carry [".device/wheels", ".device/pkg.txz", ".device/tests.txz"]
# (about 47 MiB of the 64 a call may carry), and ".device/mpi" (the mpich wheel, 13 MB) for the MPI tests where the
# rest leaves room; scripts/device-session.sh unpacks them when their source hash matches.
#
#   bash scripts/build-device-bundle.sh      (needs network for scikit-build-core, cmake, ninja and torch; about 5 min on 2 cores)
set -uo pipefail
cd "$(dirname "$0")/.."
python=${DEVICE_PYTHON:-python3.12}
"$python" --version > /dev/null 2>&1 || python=$(ls "$HOME"/.pyenv/versions/3.12.*/bin/python3.12 2>/dev/null | head -n 1)
"${python:-none}" --version > /dev/null 2>&1 || { echo "no Python 3.12: set DEVICE_PYTHON"; exit 1; }
venv=/tmp/graph-bundle-venv
[ -x $venv/bin/python3 ] || "$python" -m venv $venv || exit 1
# The device's torch (bench/NOTES.md: 2.11.0+cu130; PyPI's 2.11.0 is that build): the torch operators and the LibTorch
# plugins link it, and without it the package would lack them and their GPU tests would be skipped.
$venv/bin/python3 -m pip install -q "scikit-build-core>=0.10" cmake ninja swig numpy "torch==${DEVICE_TORCH:-2.11.0}" || exit 1
# MPICH (libmpi.so.12) for libOpenMMGraphMPI: the device gets the same wheel's library from .device/mpi
# (scripts/device-env.sh), so the package's MPI tests run there.  Its mpicc is the first on PATH below.
mpich=$(ls .device/mpi/mpich-*.whl 2>/dev/null | head -n 1)
$venv/bin/python3 -m pip install -q "${mpich:-mpich==5.0.2}" || exit 1
export PATH="$venv/bin:$PATH" GRAPH_DEVICE_MPI=off
export OUT="$PWD/.device/bundle-logs"
rm -rf "$OUT" /tmp/graph-site
source scripts/device-env.sh > /dev/null 2>&1 || { echo "device-env.sh failed (.device/wheels?)"; exit 1; }
source scripts/device-build.sh
[ -d .device/gtest ] || { echo "no .device/gtest (GoogleTest headers and static libraries)"; exit 1; }
install_package_with_tests || exit 1
for lib in libOpenMMGraphTorchOps.so libOpenMMGraphTorchCUDA.so; do
    [ -n "$(find "$SITE/openmmgraph" -name "$lib")" ] || { echo "the package has no $lib (torch not found by the build?): not packed"; exit 1; }
done
readelf -d "$SITE/openmmgraph/lib/libOpenMMGraphMPI.so" 2>/dev/null | grep -q 'libmpi.so.12' ||
    { echo "the package's libOpenMMGraphMPI does not link MPICH's libmpi.so.12 (the device's .device/mpi): not packed"; exit 1; }
pack_package "$PWD/.device/pkg.txz" && pack_tests "$PWD/.device/tests.txz" || exit 1
echo "source hash $(cat /tmp/graph-py/source-hash.txt)"
ls -la .device/pkg.txz .device/tests.txz
