#!/usr/bin/env bash
# The Julia package's test without Python (julia/OpenMMGraph/test/capi.jl, through python/tests/test_julia_package.py)
# on a GPU machine, with the CUDA platform's host-copy checks.  No Julia can be installed from the project's build
# machine but Debian bullseye's 1.5.3, so it travels in .device/julia (bench/NOTES.md v69):
#   julia153.txz  usr/ of the debs julia, libjulia1, julia-common 1.5.3+dfsg-3 and the libraries they need from
#                 bullseye (libllvm9, libgit2-1.1, libmbed*, libdsfmt, libopenlibm3, libffi7, libz3-4, libunwind8 1.3.2)
#                 and bookworm (libgfortran5, libutf8proc2, libcurl3-gnutls, libpcre2-8 ...), sys.so with
#                 `strip --strip-debug`, unversioned .so links beside them (52.7 MB);
#   jlpkgs.tgz    the sources of DLPack.jl 0.3.1, Requires.jl 1.3.0 and BFloat16s.jl 0.3.0 (the last that loads on 1.5).
# With the tree the Julia archive is nearly a whole call's carry (64 MiB), so a first call carries .device/julia and
# runs `bash bench/device/julia-capi.sh --unpack` (into /tmp/graph-julia), and the next call on the same warm machine
# carries the usual wheels and package and runs this as an extra script of scripts/device-session.sh (the package
# installed): EXTRA_SCRIPT=bench/device/julia-capi.sh bash scripts/device-session.sh py,extra
# scripts/julia-bullseye.sh makes .device/julia (and a Julia for this machine) from Debian's mirror.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=${GRAPH_JULIA_ROOT:-/tmp/graph-julia}   # scripts/julia-bullseye.sh unpacks its archive here too
unpack() {
    [ -f .device/julia/julia153.txz ] && [ -f .device/julia/jlpkgs.tgz ] || {
        echo "julia-capi: no Julia here and none carried (.device/julia/julia153.txz, jlpkgs.tgz)" >&2
        return 1
    }
    rm -rf "$root" && mkdir -p "$root/jlpkgs" && tar -xJf .device/julia/julia153.txz -C "$root" \
        && tar -xzf .device/julia/jlpkgs.tgz -C "$root/jlpkgs" || return 1
    cat > "$root/julia" <<EOF
#!/bin/sh
export LD_LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu:$root/usr/lib/x86_64-linux-gnu/julia\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "$root/usr/bin/julia" "\$@"
EOF
    chmod +x "$root/julia"
    "$root/julia" -e 'println("julia-capi: Julia ", VERSION, " unpacked in '"$root"'")'
}
if [ "${1:-}" = --unpack ]; then
    unpack
    exit $?
fi
[ -x "$root/julia" ] || unpack || exit 1
ln -sfn "$PWD/julia/OpenMMGraph" "$root/jlpkgs/OpenMMGraph"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
OPENMMGRAPH_JULIA="$root/julia" JULIA_LOAD_PATH="$root/jlpkgs:@stdlib" JULIA_DEPOT_PATH="$root/depot" \
    python3 -m pytest -q -rs -p no:cacheprovider python/tests/test_julia_package.py
status=$?
# The Julia test's own report (its summary lines), from a second run's output: pytest shows it only on failure.
OPENMMGRAPH_LIB="$(python3 -c 'import openmmgraph, os; print(os.path.join(os.path.dirname(openmmgraph.__file__), "lib", "libOpenMMGraphDLPack.so"))')" \
    JULIA_LOAD_PATH="$root/jlpkgs:@stdlib" JULIA_DEPOT_PATH="$root/depot" "$root/julia" julia/OpenMMGraph/test/capi.jl 2>&1 | tail -15
exit $status
