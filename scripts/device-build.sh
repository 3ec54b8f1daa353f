# Sourced by device-session.sh and build-device-bundle.sh (after device-env.sh, which sets SITE and OPENMM_LIBS): how the
# package and the C++ tests are built for the device machine, and the bundles that carry a build there.
#
# The package (pip, scikit-build-core) goes into $SITE, built in /tmp/graph-py; with the C++ tests in the same build, so
# the plugin is compiled once.  Fixed paths (/tmp/graph-site, /tmp/graph-py) let a build made on another machine run
# where it is unpacked.
#   .device/pkg.txz    the installed package, with the hash of the sources it was built from
#   .device/tests.txz  the C++ tests of the same build (test binaries, CTest files, the plugins), with the same hash and
#                      the source folder it was configured in (the tests read tests/data from there)

# The hash of the sources that go into the package and the tests (in C order: the same on machines of other locales).
source_hash() {
    find openmmapi platforms serialization wrappers python/openmmgraph python/CMakeLists.txt CMakeLists.txt pyproject.toml tests \
        -type f ! -name '*.pyc' ! -name '_graphforce*' ! -name graphforce.py ! -path 'python/openmmgraph/lib/*' ! -path 'tests/data/*' \
        -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1
}

# install_package [pip -C options...]: builds and installs the package into $SITE (log: $OUT/pip.log).
install_package() {
    rm -rf /tmp/graph-py
    python3 -m pip install -q --upgrade --no-build-isolation --no-deps --no-index --target "$SITE" . -Ccmake.define.OPENMM_DIR="$OPENMM_LIBS" \
        -Cbuild-dir=/tmp/graph-py "$@" > "$OUT/pip.log" 2>&1 || { tail -30 "$OUT/pip.log"; return 1; }
}

# install_package_with_tests: the package and the C++ tests (GoogleTest from .device/gtest) in one build.
install_package_with_tests() {
    install_package -Ccmake.define.GRAPH_BUILD_TESTS=ON -Ccmake.define.GTEST_ROOT="$PWD/.device/gtest"
}

# pack_package DEST: the installed package as DEST (tar.xz).
pack_package() {
    source_hash > "$SITE/openmmgraph/source-hash.txt"
    (cd "$SITE" && XZ_OPT="-T0 -6" tar cJf "$1" openmmgraph openmm_graph-*.dist-info $(ls bin/openmm-graph 2>/dev/null))
}

# pack_tests DEST: the C++ tests of /tmp/graph-py as DEST (tar.xz, paths from /).
pack_tests() {
    source_hash > /tmp/graph-py/source-hash.txt
    echo "$PWD" > /tmp/graph-py/source-dir.txt
    (cd / && XZ_OPT="-T0 -6" tar cJf "$1" tmp/graph-py/source-hash.txt tmp/graph-py/source-dir.txt tmp/graph-py/CTestTestfile.cmake \
        tmp/graph-py/tests/CTestTestfile.cmake tmp/graph-py/tests/Test* tmp/graph-py/plugins $(cd / && ls tmp/graph-py/lib*.so))
}

# reuse_package: unpacks .device/pkg.txz into $SITE when it was built from these sources.
reuse_package() {
    [ -f .device/pkg.txz ] || return 1
    tar xf .device/pkg.txz -C "$SITE" || return 1
    local built here
    built=$(cat "$SITE/openmmgraph/source-hash.txt" 2>/dev/null) here=$(source_hash)
    if [ "$built" = "$here" ]; then
        echo "package: unpacked from .device/pkg.txz (built from these sources)"
        return 0
    fi
    echo "package: .device/pkg.txz was built from other sources ($built, here $here)"
    rm -rf "$SITE"/openmmgraph "$SITE"/openmm_graph-*.dist-info
    return 1
}

# reuse_tests: unpacks .device/tests.txz into /tmp/graph-py when it was built from these sources (and links its source
# folder to this tree when that folder is not here).
reuse_tests() {
    [ -f .device/tests.txz ] || return 1
    rm -rf /tmp/graph-py
    tar xf .device/tests.txz -C / || return 1
    local built here dir
    built=$(cat /tmp/graph-py/source-hash.txt 2>/dev/null) here=$(source_hash)
    if [ "$built" != "$here" ]; then
        echo "tests: .device/tests.txz was built from other sources ($built, here $here)"
        rm -rf /tmp/graph-py
        return 1
    fi
    dir=$(cat /tmp/graph-py/source-dir.txt)
    if [ "$(readlink -f "$dir" 2>/dev/null)" != "$(readlink -f "$PWD")" ]; then
        [ -e "$dir" ] && { echo "tests: configured in $dir, which exists here and is not this tree"; return 1; }
        mkdir -p "$(dirname "$dir")" && ln -s "$PWD" "$dir" || return 1
    fi
    echo "tests: unpacked from .device/tests.txz (built from these sources in $dir)"
}
