#!/usr/bin/env bash
# A Julia for the Julia package's C API test (julia/OpenMMGraph/test/capi.jl, run by python/tests/test_julia_package.py)
# on a machine whose network reaches Debian's mirrors but not julialang.org or GitHub (the project's build machine;
# bench/NOTES.md v69): Debian bullseye's julia 1.5.3+dfsg-3 with the libraries it needs from bullseye, and the packages
# DLPack.jl 0.3.1, Requires.jl 1.3.0 and BFloat16s.jl 0.3.0 (the last BFloat16s that loads on 1.5) as sources in an
# implicit-environment folder (no registry, no Pkg resolution).
#
#   bash scripts/julia-bullseye.sh [ROOT]      (default ROOT /tmp/graph-julia; about 170 MB downloaded, 5 minutes on 2 cores)
#
# Packs .device/julia/julia153.txz and jlpkgs.tgz (what a GPU machine without network gets) and unpacks them into ROOT
# with `bench/device/julia-capi.sh --unpack`, as the device does: ROOT/julia (a wrapper with the libraries'
# LD_LIBRARY_PATH) and ROOT/jlpkgs (the packages; julia-capi.sh links OpenMMGraph in), so the Julia checked here is the
# carried archive itself. The packages' git repositories come from DLPACK_GIT, REQUIRES_GIT and
# BFLOAT16S_GIT (a local git directory, e.g. a mirror, or a URL; default: their GitHub URLs).
#
# Two choices that matter: libunwind8 is bullseye's 1.3.2 (with bookworm's 1.6 every exception thrown in package code
# ends Julia 1.5 with a silent segmentation fault), and the C and C++ runtimes (libc6, libstdc++6, libgcc-s1, zlib1g)
# are the host's, never bullseye's (OpenMM's wheels need the newer libstdc++).
set -euo pipefail
cd "$(dirname "$0")/.."
export GRAPH_JULIA_ROOT=$(realpath -m "${1:-/tmp/graph-julia}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root   # the files to pack

# Debian bullseye's julia and the closure of its dependencies, less the host's own runtime and Debian's tools.
mkdir -p "$work"/apt/{lists/partial,cache/archives/partial} "$work/debs"
echo 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bullseye main' \
    > "$work/apt/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$work/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$work/apt/lists" -o "Dir::Cache=$work/apt/cache" -o Dir::State::status=/dev/null)
apt-get "${apt_opts[@]}" -qq update
# Left out: the host's runtime and Debian's tools, and libcurl3-gnutls with what only it needs, which keeps the archive
# within a device call's carry. Nothing the package's tests load needs them: after `using DLPack, LinearAlgebra`,
# Libdl.dllist() holds LLVM, OpenBLAS, SuiteSparse, gmp, mpfr, pcre2, utf8proc, unwind, libedit, libffi and z3 (only
# Pkg's libgit2 would need some of what is left out, and no test uses Pkg: the packages are in an implicit environment).
skip='^(libc6|libstdc\+\+6|libgcc-s1|gcc-10-base|zlib1g|libcrypt1|libselinux1|libacl1|liblzma5|libbz2-1.0|perl-base|tar|dpkg|debconf|cdebconf|libdebian-installer4|libnewt0.52|libslang2|libtextwrap1|libdb5.3|libpcre3'
skip+='|libcurl3-gnutls|libgnutls30|libnettle8|libhogweed6|libp11-kit0|libtasn1-6|libidn2-0|libunistring2|libldap-2.4-2|libsasl2-2|libsasl2-modules-db|libbrotli1|libnghttp2-14|librtmp1|libpsl5)$'
mapfile -t packages < <(apt-cache "${apt_opts[@]}" depends --recurse --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances julia libjulia1 julia-common | grep -v '^[ <]' | sort -u | grep -Ev "$skip")
(cd "$work/debs" && apt-get "${apt_opts[@]}" -qq download "${packages[@]}")
rm -rf "$root" && mkdir -p "$root/jlpkgs"
for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$root"; done
# Bullseye keeps some libraries in /lib (libtinfo, libgpg-error, libcom_err ...): one folder, as a merged /usr has.
if [ -d "$root/lib/x86_64-linux-gnu" ]; then
    cp -a "$root"/lib/x86_64-linux-gnu/. "$root/usr/lib/x86_64-linux-gnu/" && rm -rf "$root/lib"
fi
rm -rf "$root"/usr/share/{doc,man,lintian,bug} "$root"/etc "$root"/usr/share/julia/test "$root"/usr/share/julia/stdlib/*/*/test
# sys.so's debug sections are most of its size (180 -> 153 MB); the archive must fit a device call's carry.
strip --strip-debug "$root/usr/lib/x86_64-linux-gnu/julia/sys.so"
# Julia dlopens some libraries by their unversioned names (libgit2, libpcre2-8, libdSFMT, libgmp ...), which only the
# -dev packages would provide.
for lib in "$root"/usr/lib/x86_64-linux-gnu/lib*.so.*; do
    base=${lib%%.so.*}.so
    [ -e "$base" ] || ln -s "$(basename "$lib")" "$base"
done

# The packages at their tags, by name (an implicit environment finds NAME/src/NAME.jl).
fetch_package() { # NAME SOURCE TAG
    git clone -q --bare "$2" "$work/$1.git"
    mkdir -p "$root/jlpkgs/$1"
    git --git-dir="$work/$1.git" archive "$3" | tar -x -C "$root/jlpkgs/$1"
}
fetch_package DLPack "${DLPACK_GIT:-https://github.com/pabloferz/DLPack.jl}" v0.3.1
fetch_package Requires "${REQUIRES_GIT:-https://github.com/JuliaPackaging/Requires.jl}" v1.3.0
fetch_package BFloat16s "${BFLOAT16S_GIT:-https://github.com/JuliaMath/BFloat16s.jl}" v0.3.0

mkdir -p .device/julia
tar -C "$root" -cf - usr | xz -T0 -9 > .device/julia/julia153.txz
tar -C "$root/jlpkgs" -czf .device/julia/jlpkgs.tgz DLPack Requires BFloat16s
bash bench/device/julia-capi.sh --unpack
julia=$GRAPH_JULIA_ROOT/julia
"$julia" -e 'VERSION == v"1.5.3" || error("not Julia 1.5.3: $VERSION"); try; error("probe"); catch e; end' ||
    { echo "julia-bullseye: $julia does not run, or an exception ends it (libunwind?)" >&2; exit 1; }
JULIA_LOAD_PATH="$GRAPH_JULIA_ROOT/jlpkgs:@stdlib" JULIA_DEPOT_PATH="$work/depot" "$julia" -e 'using DLPack; println("julia-bullseye: DLPack loads")'
ls -la .device/julia
