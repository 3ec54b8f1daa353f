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

PYTHON="${PYTHON:-python3}"
if [ ! -x "$GRAPH_ROOT/.venv/bin/python" ]; then
    echo "openmm-graph: creating the virtual environment .venv"
    "$PYTHON" -m venv "$GRAPH_ROOT/.venv"
fi
# shellcheck disable=SC1091
source "$GRAPH_ROOT/.venv/bin/activate"
stamp="$GRAPH_ROOT/.venv/.requirements"
if ! cmp -s "$GRAPH_ROOT/scripts/requirements.txt" "$stamp"; then
    echo "openmm-graph: installing Python packages (scripts/requirements.txt)"
    python -m pip install -q --upgrade pip
    python -m pip install -q -r "$GRAPH_ROOT/scripts/requirements.txt"
    cp "$GRAPH_ROOT/scripts/requirements.txt" "$stamp"
fi
