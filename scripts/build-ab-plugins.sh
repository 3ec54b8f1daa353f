#!/usr/bin/env bash
# Builds the CUDA plugin (libOpenMMGraphCUDA.so) several ways on this machine, for bench/device/plugin-ab.sh to time
# against each other in one device call (bench/README.md).  Each build goes, xz-compressed (13.6 MB; 7.8 with 90-real), to
# .device/ab/NAME/libOpenMMGraphCUDA.so.xz; .device/ab is emptied first.
#
#   AB_BASE=COMMIT AB_COMMITS='NAME=COMMIT ...' AB_VARIANTS='NAME=FILE:SED@@NAME2=FILE:SED' bash scripts/build-ab-plugins.sh
#
# - "current": HEAD (committed sources only: a build must be reproducible from a commit; uncommitted changes under
#   platforms/ are an error);
# - "base", when AB_BASE names a commit: that commit;
# - each NAME=COMMIT of AB_COMMITS (space-separated): that commit, e.g. one step of a series between base and HEAD;
# - each entry of AB_VARIANTS (separated by "@@"): HEAD with FILE (a path in the repository) edited by `sed -e SED`, e.g.
#   'fold=platforms/cuda/src/GraphDeviceFunctions.cuh:s/return interval \& 1;/return 0 * interval;/'
#   (an edit that changes nothing is an error).
# - AB_ARCHITECTURES: CMAKE_CUDA_ARCHITECTURES of every build (default 90: the project's, sm_90 with PTX); "90-real"
#   (SASS only) makes a build about 7.8 MB with xz instead of 13.6, so that three fit one call beside the package, and
#   ran as fast as the package's own plugin in bench/NOTES.md v55 (the same SASS);
# - AB_BUILD_PROPERTIES="NAME:KEY=VALUE[,KEY=VALUE...] ...": GraphForce properties that build NAME runs with in
#   plugin-ab.sh (.device/ab/NAME/properties), e.g. CheckFinite=false for a probe whose results are not finite.
# Every build uses the same compiler and options (Release, AB_ARCHITECTURES, OpenMM from .venv), in
# /tmp/ab-build-NAME from a worktree in /tmp/ab-src-NAME.  A device call carries at most 64 MiB: with the openmm
# wheels, .device/pkg.txz and the tree (about 41 MiB) that is one build of 90 with PTX or three of 90-real; the
# script says when the carry would be larger.  Only the CUDA plugin is swapped: .device/pkg.txz (the rest of the
# package, from a device build or scripts/build-device-bundle.sh) must come from sources with the same openmmapi/.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
openmm_dir=$(ls -d "$repo"/.venv/lib/python3*/site-packages/OpenMM.libs 2>/dev/null | head -n 1)
[ -n "$openmm_dir" ] || { echo "build-ab-plugins: no OpenMM in .venv (run: source scripts/setup-env.sh)"; exit 1; }
if ! git diff --quiet HEAD -- platforms openmmapi; then
    echo "build-ab-plugins: uncommitted changes under platforms/ or openmmapi/; commit them (\"current\" is HEAD)"
    exit 1
fi
# name, commit and edit of each build; the entries are checked before anything is compiled.
names=(current) commits=(HEAD) edits=("")
# A build's name: letters, digits, _ or -, and not one already taken ("current", "base" with AB_BASE, ...).
name_taken() {
    local taken
    for taken in "${names[@]}"; do [ "$taken" != "$1" ] || return 0; done
    return 1
}
name_is_new() {
    [[ "$1" =~ ^[A-Za-z0-9_-]+$ ]] && ! name_taken "$1"
}
# AB_BASE is the commit entry "base".
for entry in ${AB_BASE:+base=$AB_BASE} ${AB_COMMITS:-}; do
    name=${entry%%=*} commit=${entry#*=}
    name_is_new "$name" && [ "$commit" != "$entry" ] \
        || { echo "AB_COMMITS: \"$entry\" is not NAME=COMMIT (NAME: letters, digits, _ or -; not current, base or another's)"; exit 1; }
    git rev-parse --verify --quiet "${commit}^{commit}" > /dev/null || { echo "build-ab-plugins: $name: \"$commit\" is not a commit"; exit 1; }
    names+=("$name") commits+=("$commit") edits+=("")
done
if [ -n "${AB_VARIANTS:-}" ]; then
    while IFS= read -r entry; do
        [ -n "$entry" ] || continue
        name=${entry%%=*} rest=${entry#*=}
        file=${rest%%:*} script=${rest#*:}
        name_is_new "$name" && [ "$rest" != "$entry" ] \
            || { echo "AB_VARIANTS: \"$entry\" is not NAME=FILE:SED (NAME: letters, digits, _ or -; not current, base or another's)"; exit 1; }
        git cat-file -e "HEAD:$file" 2> /dev/null || { echo "AB_VARIANTS: $name: $file is not a file of HEAD"; exit 1; }
        if git show "HEAD:$file" | sed -e "$script" | cmp -s - <(git show "HEAD:$file"); then
            echo "AB_VARIANTS: $name: the edit \"$script\" changes nothing in $file"
            exit 1
        fi
        names+=("$name") commits+=(HEAD) edits+=("$file:$script")
    done < <(printf '%s\n' "${AB_VARIANTS//@@/$'\n'}")
fi
# AB_BUILD_PROPERTIES: checked against the builds' names before anything is compiled.
declare -A build_properties=()
for entry in ${AB_BUILD_PROPERTIES:-}; do
    name=${entry%%:*} pairs=${entry#*:}
    name_taken "$name" && [ "$pairs" != "$entry" ] && [[ "$pairs" =~ ^[A-Za-z0-9_]+=[^,=]+(,[A-Za-z0-9_]+=[^,=]+)*$ ]] \
        || { echo "AB_BUILD_PROPERTIES: \"$entry\" is not NAME:KEY=VALUE[,KEY=VALUE...] for a build of this run (${names[*]})"; exit 1; }
    build_properties[$name]=$pairs
done
# Always passed, so that a build folder kept from a run with other architectures (CMake's cache) takes these.
architectures=${AB_ARCHITECTURES:-90}
[[ "$architectures" =~ ^[0-9]+(-real|-virtual)?(\;[0-9]+(-real|-virtual)?)*$ ]] \
    || { echo "AB_ARCHITECTURES: \"$architectures\" is not a CMAKE_CUDA_ARCHITECTURES list such as 90-real"; exit 1; }
rm -rf .device/ab
for i in "${!names[@]}"; do
    name=${names[$i]} src=/tmp/ab-src-${names[$i]} build=/tmp/ab-build-${names[$i]}
    git worktree remove --force "$src" 2> /dev/null || rm -rf "$src"
    git worktree prune
    git worktree add --detach --quiet "$src" "${commits[$i]}"
    if [ -n "${edits[$i]}" ]; then
        edit=${edits[$i]}
        sed -i -e "${edit#*:}" "$src/${edit%%:*}"
    fi
    echo "build-ab-plugins: $name ($(git -C "$src" rev-parse --short HEAD)${edits[$i]:+, edited: ${edits[$i]}})"
    cmake -S "$src" -B "$build" -G Ninja -DOPENMM_DIR="$openmm_dir" -DGRAPH_BUILD_TESTS=OFF -DGRAPH_BUILD_PYTHON=OFF \
        -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$architectures" > "$build.log" 2>&1 && ninja -C "$build" OpenMMGraphCUDA >> "$build.log" 2>&1 \
        || { tail -30 "$build.log"; echo "build-ab-plugins: $name failed to build (log: $build.log)"; exit 1; }
    mkdir -p ".device/ab/$name"
    xz -T0 -9 -c "$build/plugins/libOpenMMGraphCUDA.so" > ".device/ab/$name/libOpenMMGraphCUDA.so.xz"
    if [ -n "${build_properties[$name]:-}" ]; then
        tr ',' '\n' <<< "${build_properties[$name]}" > ".device/ab/$name/properties"
    fi
    git worktree remove --force "$src"
done
# Two ways to carry them: with .device/pkg.txz (plugin-ab.sh run directly), or with .device/gtest and the package built
# in the same call (device-session.sh test,extra; ab-package.sh).  The working tree travels too (about 9 MiB).  Counted
# in bytes (du's default counts disk blocks) and rounded up: with the two openmm wheels where the package is carried,
# with every wheel (swig's too, for the build) where the call builds it.
tree=$(git ls-files -z | xargs -0 du -cb 2> /dev/null | tail -n 1 | cut -f1)
for extra in .device/pkg.txz .device/gtest; do
    [ -e "$extra" ] || { echo "build-ab-plugins: no $extra here (carrying it is one of the two ways)"; continue; }
    wheels=(.device/wheels/openmm*.whl)
    [ "$extra" = .device/pkg.txz ] || wheels=(.device/wheels)
    total=$(du -scb "${wheels[@]}" "$extra" .device/ab | tail -n 1 | awk -v t="$tree" '{printf "%d", ($1 + t + 1048575) / 1048576}')
    echo "build-ab-plugins: ${names[*]} in .device/ab; carrying ${wheels[*]}, $extra and .device/ab with the tree: about $total MiB"
    [ "$total" -le 64 ] || echo "build-ab-plugins: that is more than the 64 MiB a device call carries; build fewer variants"
done
# The call unpacks .device/pkg.txz only where the tree it runs in has the package's sources; otherwise it rebuilds the
# package (which needs SWIG's wheel and the build time): say so here, where the tree is switched (bench/NOTES.md v56).
if [ -e .device/pkg.txz ]; then
    source scripts/device-build.sh
    packaged=$(tar xJf .device/pkg.txz -O openmmgraph/source-hash.txt 2> /dev/null || true)
    if [ "$packaged" != "$(source_hash)" ]; then
        echo "build-ab-plugins: .device/pkg.txz was not built from this tree's sources (HEAD $(git rev-parse --short HEAD)): run the"
        echo "  device call from the package's commit (e.g. git switch main), or the call rebuilds the package"
    fi
fi
