#!/usr/bin/env bash
# The main job: set up (system packages, .venv, build and install the plugin)
# and run MD with the bundled model on the best platform present.
# Extra arguments go to examples/run_md.py (e.g. --steps 2000 --platform CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-env.sh
python -m pip install -q --no-build-isolation .
python examples/run_md.py "$@"
