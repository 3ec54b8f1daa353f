#!/usr/bin/env bash
# Device-session extra (EXTRA_SCRIPT): the benchmark's openmm-torch peer on the
# GPU.  Makes `openmmtorch` importable (a build from .device/openmm-torch-src.tar.gz
# against the machine's torch and the OpenMM wheel in /tmp/graph-site, by
# bench/device/build-openmm-torch.sh; skipped when it already imports), checks
# that OpenMM loads its plugins and that a TorchForce runs on CUDA, then runs
# the small grade (OPENMM_TORCH_GRADES) at 512 and 10,296 particles: the
# native GraphForce, the GraphForce with the model exported as TorchScript and
# as an AOTInductor package (--torch-models), and openmm-torch's TorchForce
# with the same model, in one run.  Logs and the JSON under $OUT.
#
#   EXTRA_SCRIPT=bench/device/openmm-torch.sh bash scripts/device-session.sh extra
#
# Environment: OPENMM_TORCH_BUDGET (benchmark --time-budget, 240 s), OPENMM_TORCH_SIZES (512,10296),
# OPENMM_TORCH_MODELS (--torch-models, torchscript,aoti),
# OPENMM_TORCH_BUILD_TIMEOUT (whole build, 420 s; about 2 minutes on 2 cores),
# BENCH_TIMEOUT (hard limit of the benchmark, budget + 120 s).  A device command
# may run 10 minutes: package install + build + check + benchmark fit in it.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# When run by hand rather than from device-session.sh: the carried OpenMM first.
if ! python3 -c "import openmm" > /dev/null 2>&1; then
    source scripts/device-env.sh > "$OUT/openmm-torch-env.log" 2>&1 || { tail -5 "$OUT/openmm-torch-env.log"; exit 1; }
fi

imports() { timeout 120 python3 -c "import torch, openmm, openmmtorch" > /dev/null 2>&1; }
if imports; then
    echo "openmmtorch already importable: no build"
else
    echo "building openmm-torch from source ($(date +%T))"
    timeout "${OPENMM_TORCH_BUILD_TIMEOUT:-420}" bash bench/device/build-openmm-torch.sh > "$OUT/openmm-torch-build-all.log" 2>&1
    rc=$?
    tail -15 "$OUT/openmm-torch-build-all.log"
    [ $rc -eq 0 ] || echo "build-openmm-torch.sh: exit status $rc (124: timed out)"
    echo "build finished ($(date +%T))"
fi

# The plugins and one TorchForce evaluation on each platform: E = sum(x^2), F = -2x.
timeout 300 python3 - > "$OUT/openmm-torch-check.log" 2>&1 <<'PY'
import os, tempfile
import numpy as np
import torch, openmm, openmm.version, openmmtorch

print("torch", torch.__version__, "OpenMM", openmm.__version__, "openmmtorch", openmmtorch.__file__)
names = [openmm.Platform.getPlatform(i).getName() for i in range(openmm.Platform.getNumPlatforms())]
print("platforms:", names)
plugins = os.environ.get("OPENMM_PLUGIN_DIR") or os.path.join(openmm.version.openmm_library_path, "plugins")
print("torch plugins:", sorted(f for f in os.listdir(plugins) if "Torch" in f))
failures = openmm.Platform.getPluginLoadFailures()
for failure in failures:
    print("plugin load failure:", failure)

class Square(torch.nn.Module):
    def forward(self, positions):
        return torch.sum(positions ** 2)

positions = np.random.default_rng(0).uniform(-1, 1, (50, 3))
path = os.path.join(tempfile.mkdtemp(), "square.pt")
torch.jit.trace(Square(), torch.as_tensor(positions)).save(path)  # trace: script needs the source file
ok = not any("Torch" in failure for failure in failures)
for name in [p for p in ("Reference", "CUDA") if p in names]:
    system = openmm.System()
    for _ in range(len(positions)):
        system.addParticle(1.0)
    system.addForce(openmmtorch.TorchForce(path))
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName(name))
    context.setPositions(positions)
    state = context.getState(getEnergy=True, getForces=True)
    energy = state.getPotentialEnergy().value_in_unit(openmm.unit.kilojoules_per_mole)
    forces = state.getForces(asNumpy=True).value_in_unit(openmm.unit.kilojoules_per_mole / openmm.unit.nanometer)
    energy_error = abs(energy - np.sum(positions ** 2)) / np.sum(positions ** 2)
    force_error = np.max(np.abs(forces + 2 * positions))
    good = energy_error < 1e-5 and force_error < 1e-4
    ok &= good
    print(f"{name}: TorchForce energy rel. error {energy_error:.2e}, max force error {force_error:.2e}: {'ok' if good else 'WRONG'}")
    del context
print("check:", "ok" if ok else "FAILED")
raise SystemExit(0 if ok else 1)
PY
check=$?
cat "$OUT/openmm-torch-check.log" | cut -c1-400
[ $check -eq 0 ] || echo "openmm-torch check failed (exit status $check); the benchmark runs anyway and records why the peer is missing"

budget=${OPENMM_TORCH_BUDGET:-240}
timeout "${BENCH_TIMEOUT:-$((budget + 120))}" python3 bench/run_benchmarks.py --grades "${OPENMM_TORCH_GRADES:-small}" \
    --sizes "${OPENMM_TORCH_SIZES:-512,10296}" --peers openmm-torch --torch-models "${OPENMM_TORCH_MODELS:-torchscript,aoti}" --time-budget "$budget" --verbose \
    --out "$OUT/openmm-torch.json" --plot '' \
    > "$OUT/openmm-torch-bench.log" 2>&1
bench=$?
tail -40 "$OUT/openmm-torch-bench.log"
[ $bench -eq 0 ] || echo "run_benchmarks.py: exit status $bench (124: timed out)"
python3 - "$OUT/openmm-torch.json" <<'PY' || true
import json, sys
records = json.load(open(sys.argv[1])).get("records", [])
for r in records:
    if r.get("implementation", "").startswith(("openmm-torch", "openmm-graph")):
        print(r.get("implementation"), r.get("grade"), r.get("n"), "force_time_s", r.get("force_time_s"),
              "step_time_s", r.get("step_time_s"), "error", r.get("error"))
PY
exit $(( check != 0 || bench != 0 ))
