# Sourced on a GPU machine (run directly, not through device-session.sh): the package of .device/pkg.tgz with the CUDA
# plugin of the build .device/ab/NAME (scripts/build-ab-plugins.sh) in place of its own, for any script that needs the
# package installed, e.g. Nsight Compute's source counters of one build:
#
#   source bench/device/ab-package.sh current && NCU_SOURCE_CASE=medium:100800 bash bench/device/ncu-source.sh
#
# Sets what scripts/device-env.sh sets and LD_LIBRARY_PATH for the package's libraries.
source scripts/device-env.sh > "${OUT:-$PWD/out}/ab-package-env.log" 2>&1 || { tail -5 "${OUT:-$PWD/out}/ab-package-env.log"; return 1; }
[ -f .device/pkg.tgz ] || { echo "ab-package: .device/pkg.tgz is missing (the package of a device build)"; return 1; }
ab_build=".device/ab/${1:?ab-package: name a build of .device/ab}"
[ -f "$ab_build/libOpenMMGraphCUDA.so.xz" ] || [ -f "$ab_build/libOpenMMGraphCUDA.so" ] || { echo "ab-package: no $ab_build/libOpenMMGraphCUDA.so(.xz)"; return 1; }
tar xzf .device/pkg.tgz -C "$SITE" || return 1
if [ -f "$ab_build/libOpenMMGraphCUDA.so.xz" ]; then
    python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" \
        "$ab_build/libOpenMMGraphCUDA.so.xz" "$SITE/openmmgraph/lib/plugins/libOpenMMGraphCUDA.so" || return 1
else
    cp "$ab_build/libOpenMMGraphCUDA.so" "$SITE/openmmgraph/lib/plugins/libOpenMMGraphCUDA.so" || return 1
fi
export LD_LIBRARY_PATH="$SITE/openmmgraph/lib:$OPENMM_LIBS/lib:$OPENMM_LIBS/lib/plugins:${LD_LIBRARY_PATH:-}"
echo "ab-package: the package of .device/pkg.tgz with the CUDA plugin of $ab_build"
