#!/usr/bin/env bash
# The MPI tests again, against Debian's Open MPI (the rest of the test suite
# uses the mpich wheel of scripts/requirements.txt): installs openmpi-bin and
# libopenmpi-dev when missing (apt-get, as root), builds libOpenMMGraphMPI
# against Open MPI in build/openmpi, and runs python/tests/test_mpi_library.py
# and test_mpi_domains.py with that library (OPENMMGRAPH_MPI_LIBRARY) under
# Open MPI's mpiexec (OPENMMGRAPH_TEST_MPIEXEC).  Without apt-get or root and
# without Open MPI it says so and stops.  GRAPH_TEST_OPENMPI: auto (the
# default), on (no Open MPI is an error), off (skip these tests); any other
# value is refused.  Sourced environment: scripts/setup-env.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${GRAPH_TEST_OPENMPI:-auto}"
case "$mode" in
    auto | on | off) ;;
    *) echo "openmm-graph: GRAPH_TEST_OPENMPI must be auto, on or off, not '$mode'" >&2; exit 1 ;;
esac
[ "$mode" = off ] && exit 0
source scripts/setup-env.sh
if ! command -v mpicc.openmpi >/dev/null || ! command -v mpiexec.openmpi >/dev/null; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        echo "openmm-graph: installing Open MPI (apt-get: openmpi-bin libopenmpi-dev)"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openmpi-bin libopenmpi-dev >/dev/null
    else
        echo "openmm-graph: Open MPI tests skipped: no mpicc.openmpi and no apt-get as root to install it" >&2
        [ "$mode" = on ] && exit 1
        exit 0
    fi
fi
echo "openmm-graph: MPI tests against $(mpiexec.openmpi --version 2>/dev/null | head -n 1)"
cmake -S . -B build/openmpi -G Ninja -DGRAPH_BUILD_PYTHON=OFF -DGRAPH_BUILD_TESTS=OFF -DGRAPH_BUILD_MPI=ON \
    -DMPI_C_COMPILER="$(command -v mpicc.openmpi)" > build/openmpi.cmake.log 2>&1 || { tail -30 build/openmpi.cmake.log; exit 1; }
cmake --build build/openmpi --target OpenMMGraphMPI > build/openmpi.build.log 2>&1 || { tail -30 build/openmpi.build.log; exit 1; }
OPENMMGRAPH_MPI_LIBRARY="$PWD/build/openmpi/libOpenMMGraphMPI.so" OPENMMGRAPH_TEST_MPIEXEC="$(command -v mpiexec.openmpi)" \
    python -m pytest -m "not gpu" -q -p no:cacheprovider python/tests/test_mpi_library.py python/tests/test_mpi_domains.py
