# Sourced by device-session.sh (and usable by hand): the environment of a GPU
# machine without network.  Installs the carried wheels (.device/wheels:
# openmm==8.6.1, openmm-cuda-13==8.6.1, swig; cp312) into /tmp/graph-site and
# points PYTHONPATH, PATH, OPENMM_PLUGIN_DIR and LD_LIBRARY_PATH at them.
OUT="${OUT:-$PWD/out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# Build with the system compiler: a toolchain whose headers are newer than the
# libstdc++ the process loads crashes inside std::ostream (seen with /opt/gcc).
[ -x /usr/bin/g++ ] && export CC=/usr/bin/gcc CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++
SITE=/tmp/graph-site
python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --target "$SITE" .device/wheels/*.whl || exit 1
export PYTHONPATH="$SITE" PATH="$SITE/bin:$PATH"
# MPI for the MPI tests: the mpich wheel (py3-none-manylinux) carried in .device/mpi, apart from .device/wheels (it is
# 13 MB, and the carry limit of 64 MiB does not hold it with both bundles).  In a folder of its own (pip --target
# --upgrade would replace $SITE/bin, swig's), its bin/ last on PATH (mpiexec for the tests, never a compiler ahead of
# the machine's); pip --target leaves out the wheel's lib/ (libmpi.so.12, which libOpenMMGraphMPI needs): taken out of
# the wheel by hand.  GRAPH_DEVICE_MPI=off skips it (scripts/build-device-bundle.sh).
for wheel in .device/mpi/mpich-*.whl; do
    [ -f "$wheel" ] && [ "${GRAPH_DEVICE_MPI:-on}" != off ] || continue
    MPI_SITE=/tmp/graph-mpich
    rm -rf "$MPI_SITE"
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$MPI_SITE" "$wheel" || exit 1
    mkdir -p "$MPI_SITE/mpich-lib"
    python3 - "$wheel" "$MPI_SITE/mpich-lib" <<'PY' || exit 1
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    for entry in wheel.infolist():
        if "/data/lib/" in entry.filename and ".so" in entry.filename:
            target = os.path.join(sys.argv[2], os.path.basename(entry.filename))
            with wheel.open(entry) as source, open(target, "wb") as out:
                out.write(source.read())
PY
    export PATH="$PATH:$MPI_SITE/bin" LD_LIBRARY_PATH="$MPI_SITE/mpich-lib:${LD_LIBRARY_PATH:-}"
    export OPENMMGRAPH_TEST_MPIEXEC="$MPI_SITE/bin/mpiexec"
    echo "MPI: $(basename "$wheel") (mpiexec and libmpi in $MPI_SITE)"
done
OPENMM_LIBS="$SITE/OpenMM.libs"
export OPENMM_PLUGIN_DIR="$OPENMM_LIBS/lib/plugins"
# OpenMM's CUDA platform needs cuFFT and NVRTC of CUDA 13: take them from the machine.
for lib in libcufft.so.12 libnvrtc.so.13; do
    found=$(find / -xdev -name "$lib" 2>/dev/null | head -n 1)
    [ -n "$found" ] && export LD_LIBRARY_PATH="$(dirname "$found"):${LD_LIBRARY_PATH:-}"
done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
python3 -c "import openmm; print('OpenMM', openmm.__version__, [openmm.Platform.getPlatform(i).getName() for i in range(openmm.Platform.getNumPlatforms())], openmm.Platform.getPluginLoadFailures())" 2>&1 | tee "$OUT/openmm.txt"

