#!/usr/bin/env bash
# Every test that runs without a GPU: set up, build the plugin with its C++
# tests, run them (ctest, label "gpu" excluded), then the Python tests
# (pytest, marker "gpu" excluded), and the MPI tests against Open MPI
# (scripts/test-openmpi.sh).  GPU tests: scripts/test-gpu.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-env.sh
python -m pip install -q --no-build-isolation . -Ccmake.define.GRAPH_BUILD_TESTS=ON -Cbuild-dir=build/tests
ctest --test-dir build/tests -LE gpu --output-on-failure -j 2
python -m pytest -m "not gpu" -q
# The MPI tests once more against Debian's Open MPI (above: the mpich wheel).
bash scripts/test-openmpi.sh
