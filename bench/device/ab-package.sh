# Sourced on a GPU machine: the package installed earlier in the call or else that of .device/pkg.txz, whose CUDA
# plugin `ab_use NAME` replaces with the build .device/ab/NAME (scripts/build-ab-plugins.sh; .so or .so.xz).  With a
# NAME argument it does so at once, for any script that needs the package installed, e.g. Nsight Compute's source
# counters of one build:
#
#   source bench/device/ab-package.sh current && NCU_SOURCE_CASE=medium:100800 bash bench/device/ncu-source.sh
#
# plugin-ab.sh sources it without a NAME and swaps its builds in turn.  Sets what scripts/device-env.sh sets and
# LD_LIBRARY_PATH for the package's libraries.
source scripts/device-env.sh > "${OUT:-$PWD/out}/ab-package-env.log" 2>&1 || { tail -5 "${OUT:-$PWD/out}/ab-package-env.log"; return 1; }
# A package installed earlier in this call (device-session.sh's `test` or `py` part, which sets GRAPH_PACKAGE_INSTALLED,
# e.g. with EXTRA_SCRIPT=plugin-ab.sh) is the base; else .device/pkg.txz.  (The first spares the carry of pkg.txz:
# wheels, gtest and three builds fill it.)
if [ "${GRAPH_PACKAGE_INSTALLED:-}" = "$SITE" ] && [ -d "$SITE/openmmgraph/lib/plugins" ]; then
    echo "ab-package: the package installed in this call ($SITE) gets the builds' plugins"
elif [ -f .device/pkg.txz ]; then
    tar xf .device/pkg.txz -C "$SITE" || return 1
else
    echo "ab-package: no package installed and .device/pkg.txz is missing (the package of a device build or of scripts/build-device-bundle.sh)"
    return 1
fi
export LD_LIBRARY_PATH="$SITE/openmmgraph/lib:$OPENMM_LIBS/lib:$OPENMM_LIBS/lib/plugins:${LD_LIBRARY_PATH:-}"

# The package's CUDA plugin becomes the build .device/ab/$1 (decompressed once, next to the .xz).
# A build whose directory holds a file `same-as` naming another build has that build's plugin (and its own properties,
# plugin-ab.sh), so that a property peer costs no carry.
ab_use() {
    local build=".device/ab/${1:?ab_use: name a build of .device/ab}"
    [ -f "$build/same-as" ] && build=".device/ab/$(cat "$build/same-as")"
    if [ ! -f "$build/libOpenMMGraphCUDA.so" ] && [ -f "$build/libOpenMMGraphCUDA.so.xz" ]; then
        python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" \
            "$build/libOpenMMGraphCUDA.so.xz" "$build/libOpenMMGraphCUDA.so" || return 1
    fi
    [ -f "$build/libOpenMMGraphCUDA.so" ] || { echo "ab-package: no $build/libOpenMMGraphCUDA.so(.xz)"; return 1; }
    cp "$build/libOpenMMGraphCUDA.so" "$SITE/openmmgraph/lib/plugins/libOpenMMGraphCUDA.so"
}

if [ -n "${1:-}" ]; then
    ab_use "$1" || return 1
    echo "ab-package: the package with the CUDA plugin of .device/ab/$1"
fi
