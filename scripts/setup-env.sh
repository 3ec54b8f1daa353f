# Sourced by demo.sh, test.sh and test-gpu.sh: makes sure the system packages
# are there (Debian: g++, CMake, GoogleTest), creates the virtual environment
# .venv with the packages of scripts/requirements.txt, and activates it.
# Idempotent: a second run only checks.
set -euo pipefail
GRAPH_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

missing=()
command -v g++ >/dev/null || missing+=(g++)
command -v cmake >/dev/null || missing+=(cmake)
[ -f /usr/include/gtest/gtest.h ] || missing+=(libgtest-dev)
[ -f /usr/include/zlib.h ] || missing+=(zlib1g-dev)
if [ ${#missing[@]} -gt 0 ]; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        echo "openmm-graph: installing ${missing[*]} (apt-get)"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
        echo "openmm-graph: please install ${missing[*]} (Debian/Ubuntu: apt-get install ${missing[*]})" >&2
        exit 1
    fi
fi

# PYTHON: the interpreter that makes .venv (default python3; OpenMM 8.6.1's wheels need Python >= 3.10).  A .venv
# counts as made once it has bin/activate and a working pip (`python -m venv` writes bin/python first, so an
# interrupted one is made again); one made with another Python than PYTHON names is kept and reported, never replaced.
user_python="${PYTHON:-}"
PYTHON="${PYTHON:-python3}"
version_ok='import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)'
venv="$GRAPH_ROOT/.venv"
if [ ! -f "$venv/bin/activate" ] || ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
    command -v "$PYTHON" >/dev/null || { echo "openmm-graph: PYTHON=$PYTHON: no such command" >&2; exit 1; }
    if ! "$PYTHON" -c "$version_ok" 2>/dev/null; then
        found=$("$PYTHON" -c 'import platform; print("is Python", platform.python_version())' 2>/dev/null) ||
            found="does not run as a Python interpreter"
        echo "openmm-graph: PYTHON=$PYTHON $found; OpenMM 8.6.1 needs Python >= 3.10 (PYTHON=python3.12, say)" >&2
        exit 1
    fi
    [ -e "$venv" ] && echo "openmm-graph: .venv is incomplete (an interrupted set-up?): making it again"
    echo "openmm-graph: creating the virtual environment .venv ($("$PYTHON" -c 'import platform; print("Python", platform.python_version())'))"
    "$PYTHON" -m venv --clear "$venv" ||
        { rm -rf "$venv"; echo "openmm-graph: '$PYTHON -m venv' failed (Debian/Ubuntu: apt-get install python3-venv)" >&2; exit 1; }
elif [ -n "$user_python" ]; then
    want=$("$PYTHON" -c 'import platform; print(platform.python_version())' 2>/dev/null || echo unknown)
    have=$("$venv/bin/python" -c 'import platform; print(platform.python_version())')
    [ "${want%.*}" = "${have%.*}" ] ||
        { echo "openmm-graph: .venv has Python $have, PYTHON=$PYTHON is $want: remove .venv (rm -rf $venv) to make it again with $PYTHON" >&2; exit 1; }
fi
"$venv/bin/python" -c "$version_ok" ||
    { echo "openmm-graph: .venv has Python $("$venv/bin/python" -c 'import platform; print(platform.python_version())'); OpenMM 8.6.1 needs >= 3.10: remove .venv (rm -rf $venv) and run again with PYTHON=python3.12, say" >&2; exit 1; }
# shellcheck disable=SC1091
source "$GRAPH_ROOT/.venv/bin/activate"
stamp="$GRAPH_ROOT/.venv/.requirements"
if ! cmp -s "$GRAPH_ROOT/scripts/requirements.txt" "$stamp"; then
    echo "openmm-graph: installing Python packages (scripts/requirements.txt)"
    python -m pip install -q --upgrade pip
    python -m pip install -q -r "$GRAPH_ROOT/scripts/requirements.txt"
    cp "$GRAPH_ROOT/scripts/requirements.txt" "$stamp"
fi
