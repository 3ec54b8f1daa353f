#!/usr/bin/env bash
# The main job: set up (system packages, .venv, build and install the plugin)
# and run the silicon demo: MD of 512 Si atoms with the bundled trained model on
# the best platform present, compared with the classical Stillinger-Weber
# reference (speed of both, g(r) and angle distribution, examples/silicon/results/observables.png).
# Extra arguments go to examples/silicon/silicon_md.py (e.g. --steps 500 --platform CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-env.sh
echo "openmm-graph: building and installing the plugin (pip install .; the first time about 15 minutes on 2 cores)"
python -m pip install -q --no-build-isolation .
python examples/silicon/silicon_md.py "$@"
