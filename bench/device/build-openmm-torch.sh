#!/usr/bin/env bash
# Builds openmm-torch (TorchForce) from source against the PyTorch of $PYTHON and
# the OpenMM it imports (on the device: torch 2.11.0+cu130 and the OpenMM 8.6.1
# wheel in /tmp/graph-site), and installs it next to that OpenMM:
#   <OpenMM.libs>/lib/libOpenMMTorch.so
#   <OpenMM.libs>/lib/plugins/libOpenMMTorchReference.so, libOpenMMTorchCUDA.so
#   <site>/openmmtorch.py, <site>/_openmmtorch<EXT_SUFFIX>
# where <site> is the folder holding OpenMM.libs (the openmm package's site).
#
# Why not the PyPI wheels (openmmtorch 1.5 + openmm-torch-cuda-13 1.5): they
# were built against an older torch; their libOpenMMTorch.so needs
# libnvrtc.so.12 (CUDA 12, absent on a CUDA 13 machine) and their CUDA plugin
# calls c10::cuda::c10_cuda_check_implementation(int, ..., int, bool), which
# torch >= 2.10 no longer exports (now uint32_t line), so it cannot run.
#
#   bash bench/device/build-openmm-torch.sh
#
# Environment (defaults in brackets):
#   PYTHON               the interpreter whose torch/openmm are used [python3]
#   OPENMM_TORCH_SRC     source tarball (git archive of openmm/openmm-torch v1.5.1)
#                        [.device/openmm-torch-src.tar.gz]
#   OPENMM_TORCH_BUILD   build folder [/tmp/openmm-torch-build]
#   OPENMM_TORCH_CUDA    ON/OFF: build the CUDA plugin [ON when nvcc is found]
#   BUILD_TIMEOUT        seconds for each of configure, build and wrapper [900]
#   JOBS                 parallel compile jobs [nproc]
# Logs: $OUT/openmm-torch-{cmake,build,swig,wrapper}.log (OUT defaults to ./out).
# Exit status 0 only when `import openmmtorch` works afterwards.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT="${OUT:-$ROOT/out}"
mkdir -p "$OUT"
PYTHON="${PYTHON:-python3}"
SRC_TGZ="${OPENMM_TORCH_SRC:-$ROOT/.device/openmm-torch-src.tar.gz}"
BUILD="${OPENMM_TORCH_BUILD:-/tmp/openmm-torch-build}"
TMO="${BUILD_TIMEOUT:-900}"
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 4)}"
say() { echo "[build-openmm-torch] $*"; }
fail() { say "FAILED: $*"; exit 1; }

[ -f "$SRC_TGZ" ] || fail "no source tarball $SRC_TGZ"
command -v cmake > /dev/null || fail "no cmake"
if ! command -v swig > /dev/null; then
    # The swig wheel's binary, run as its console script does (SWIG_LIB set to the wheel's library).
    swig_env=$("$PYTHON" -c "import glob, os, swig; print(swig.BIN_DIR); print(glob.glob(os.path.join(swig.SWIG_SHARE_DIR, '*'))[0])" 2>/dev/null)
    if [ -n "$swig_env" ]; then
        export PATH="$(echo "$swig_env" | sed -n 1p):$PATH" SWIG_LIB="$(echo "$swig_env" | sed -n 2p)"
    fi
fi
command -v swig > /dev/null || fail "no swig (pip install swig; the wheel of .device/wheels is installed into \$SITE)"
say "swig: $(command -v swig) ${SWIG_LIB:-}"

# What to build against: the interpreter's torch and openmm.
eval "$("$PYTHON" - <<'PY'
import os, sysconfig, shlex
import torch, openmm, openmm.version
libs = os.path.dirname(os.path.abspath(openmm.version.openmm_library_path))
vals = {
    "TORCH_VERSION": torch.__version__,
    "TORCH_CMAKE": torch.utils.cmake_prefix_path,
    "TORCH_ROOT": os.path.dirname(os.path.abspath(torch.__file__)),
    "CXX11_ABI": str(int(torch._C._GLIBCXX_USE_CXX11_ABI)),
    "OPENMM_VERSION": openmm.__version__,
    "OPENMM_LIBS": libs,
    "SITE_DIR": os.path.dirname(libs),
    "PY_INCLUDE": sysconfig.get_paths()["include"],
    "EXT_SUFFIX": sysconfig.get_config_var("EXT_SUFFIX"),
    "CUDART_DIR": "",
}
# The CUDA runtime torch loaded (its nvidia wheel or the toolkit): the CUDA plugin needs the same libcudart.so.
for line in open("/proc/self/maps"):
    path = line.split()[-1]
    if "/libcudart.so" in path:
        vals["CUDART_DIR"] = os.path.dirname(path)
        break
for key, value in vals.items():
    print(f"{key}={shlex.quote(value)}")
PY
)" || fail "python cannot import torch and openmm"
TORCH_LIB="$TORCH_ROOT/lib"
say "torch $TORCH_VERSION ($TORCH_ROOT), OpenMM $OPENMM_VERSION ($OPENMM_LIBS), site $SITE_DIR, libcudart in ${CUDART_DIR:-?}"
[ -f "$OPENMM_LIBS/include/OpenMM.h" ] || fail "no OpenMM headers in $OPENMM_LIBS/include"

# CUDA: the plugin needs the toolkit's headers (cuda.h); its kernels are compiled at run time by OpenMM.
NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
CUDA_HOME="${CUDA_HOME:-$([ -n "$NVCC" ] && dirname "$(dirname "$(readlink -f "$NVCC")")")}"
if [ -z "${OPENMM_TORCH_CUDA:-}" ]; then
    OPENMM_TORCH_CUDA=OFF
    [ -n "$NVCC" ] && [ -f "$OPENMM_LIBS/include/openmm/cuda/CudaContext.h" ] && OPENMM_TORCH_CUDA=ON
fi
say "CUDA plugin: $OPENMM_TORCH_CUDA (nvcc: ${NVCC:-none}, CUDA_HOME: ${CUDA_HOME:-none})"

rm -rf "$BUILD" && mkdir -p "$BUILD" || fail "cannot create $BUILD"
tar xzf "$SRC_TGZ" -C "$BUILD" || fail "cannot unpack $SRC_TGZ"
SRC=$(ls -d "$BUILD"/openmm-torch-*/ | head -n 1)
SRC=${SRC%/}
[ -f "$SRC/CMakeLists.txt" ] || fail "no CMakeLists.txt in the tarball"

GENERATOR="Unix Makefiles"
command -v ninja > /dev/null && GENERATOR=Ninja
# Torch's CMake config probes the GPU for its arch list unless told; the plugin compiles no .cu itself.
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
cuda_args=(-DNN_BUILD_CUDA_LIB="$OPENMM_TORCH_CUDA")
if [ "$OPENMM_TORCH_CUDA" = ON ]; then
    cuda_args+=(-DCUDAToolkit_ROOT="$CUDA_HOME" -DCUDA_TOOLKIT_ROOT_DIR="$CUDA_HOME" -DCMAKE_CUDA_COMPILER="$NVCC"
                -DCUDA_TOOLKIT_INCLUDE="$CUDA_HOME/include")
fi
# Installed RPATH: the plugin folder, OpenMM's lib and torch's lib (absolute: torch lives outside $SITE).
RPATH="\$ORIGIN;\$ORIGIN/..;$OPENMM_LIBS/lib;$TORCH_LIB${CUDART_DIR:+;$CUDART_DIR}"
say "configure ($GENERATOR)"
timeout "$TMO" cmake -S "$SRC" -B "$BUILD/build" -G "$GENERATOR" -DCMAKE_BUILD_TYPE=Release \
    -DOPENMM_DIR="$OPENMM_LIBS" -DPYTORCH_DIR="$TORCH_CMAKE" -DCMAKE_PREFIX_PATH="$TORCH_CMAKE" \
    -DNN_BUILD_OPENCL_LIB=OFF -DNN_BUILD_HIP_LIB=OFF -DNN_BUILD_PYTHON_WRAPPERS=OFF "${cuda_args[@]}" \
    -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON -DCMAKE_INSTALL_RPATH="$RPATH" \
    > "$OUT/openmm-torch-cmake.log" 2>&1 || { tail -30 "$OUT/openmm-torch-cmake.log"; fail "cmake configure"; }
targets=(OpenMMTorch OpenMMTorchReference)
[ "$OPENMM_TORCH_CUDA" = ON ] && targets+=(OpenMMTorchCUDA)
say "build ${targets[*]} (-j $JOBS)"
timeout "$TMO" cmake --build "$BUILD/build" --target "${targets[@]}" -j "$JOBS" > "$OUT/openmm-torch-build.log" 2>&1 \
    || { grep -E "error|Error" "$OUT/openmm-torch-build.log" | head -20; tail -20 "$OUT/openmm-torch-build.log"; fail "build"; }

# The Python module: SWIG as upstream's python/CMakeLists.txt runs it, compiled directly (no setuptools needed).
say "python wrapper"
WRAP="$BUILD/python"
mkdir -p "$WRAP"
torch_inc=(-I"$TORCH_ROOT/include" -I"$TORCH_ROOT/include/torch/csrc/api/include")
(cd "$WRAP" && timeout "$TMO" swig -python -c++ -o TorchPluginWrapper.cpp -I"$OPENMM_LIBS/include" "${torch_inc[@]}" \
    "$SRC/python/openmmtorch.i") > "$OUT/openmm-torch-swig.log" 2>&1 || { tail -20 "$OUT/openmm-torch-swig.log"; fail "swig"; }
timeout "$TMO" "${CXX:-g++}" -O2 -shared -fPIC -std=c++17 -D_GLIBCXX_USE_CXX11_ABI="$CXX11_ABI" -w \
    "$WRAP/TorchPluginWrapper.cpp" -o "$WRAP/_openmmtorch$EXT_SUFFIX" \
    -I"$PY_INCLUDE" -I"$OPENMM_LIBS/include" -I"$SRC/openmmapi/include" "${torch_inc[@]}" \
    -L"$BUILD/build" -L"$OPENMM_LIBS/lib" -L"$TORCH_LIB" -lOpenMMTorch -lOpenMM -ltorch -ltorch_cpu -lc10 \
    -Wl,-rpath,"\$ORIGIN/OpenMM.libs/lib:$OPENMM_LIBS/lib:$TORCH_LIB" \
    > "$OUT/openmm-torch-wrapper.log" 2>&1 || { grep -E "error" "$OUT/openmm-torch-wrapper.log" | head -20; fail "wrapper compile"; }

# Install next to OpenMM (OpenMM loads every library of lib/plugins when openmm is imported).
say "install into $OPENMM_LIBS and $SITE_DIR"
cp "$BUILD/build/libOpenMMTorch.so" "$OPENMM_LIBS/lib/" || fail "install libOpenMMTorch.so"
for plugin in "${targets[@]:1}"; do
    cp "$BUILD/build/lib$plugin.so" "$OPENMM_LIBS/lib/plugins/" || fail "install lib$plugin.so"
done
cp "$WRAP/openmmtorch.py" "$WRAP/_openmmtorch$EXT_SUFFIX" "$SITE_DIR/" || fail "install the Python module"

# Check: the module imports and OpenMM loaded the plugins without failures.
OPENMM_PLUGIN_DIR="${OPENMM_PLUGIN_DIR:-$OPENMM_LIBS/lib/plugins}" "$PYTHON" - <<'PY' || fail "import openmmtorch"
import torch, openmm, openmmtorch
failures = [f for f in openmm.Platform.getPluginLoadFailures() if "Torch" in f]
print("[build-openmm-torch] openmmtorch imports:", openmmtorch.__file__)
print("[build-openmm-torch] platforms:", [openmm.Platform.getPlatform(i).getName() for i in range(openmm.Platform.getNumPlatforms())])
for f in failures:
    print("[build-openmm-torch] plugin load failure:", f)
raise SystemExit(1 if failures else 0)
PY
say "done"
