"""The Julia package julia/OpenMMGraph run by a real Julia, where one is set up:
julia/OpenMMGraph/test/capi.jl makes Contexts through OpenMM's C API and checks
the package's views, System-order helpers, errors and a CallbackForce written
in Julia against OpenMM's own State, with the library of the installed
openmmgraph package.

Julia is found as $OPENMMGRAPH_JULIA (a path) or `julia` on PATH; the Julia
environment must load DLPack.jl and this repository's OpenMMGraph (with neither
JULIA_PROJECT nor JULIA_LOAD_PATH set, the package's own project is used, which
needs `julia --project=julia/OpenMMGraph -e 'using Pkg; Pkg.instantiate()'`
once).  Skipped, with the reason, where Julia or DLPack.jl is missing (CI has
no Julia); an OpenMMGraph that does not load, or is another copy, fails."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "julia" / "OpenMMGraph"


def _julia():
    path = os.environ.get("OPENMMGRAPH_JULIA") or shutil.which("julia")
    if not path:
        pytest.skip("no Julia: set OPENMMGRAPH_JULIA or put julia on PATH")
    return path


def _environment():
    import openmmgraph

    env = dict(os.environ)
    env["OPENMMGRAPH_LIB"] = str(Path(openmmgraph.__file__).parent / "lib" / "libOpenMMGraphDLPack.so")
    if "JULIA_PROJECT" not in env and "JULIA_LOAD_PATH" not in env:
        env["JULIA_PROJECT"] = str(PACKAGE)
    return env


def test_the_julia_package_runs_through_openmms_c_api():
    julia = _julia()
    env = _environment()
    # DLPack.jl is the environment's (skipped without it); OpenMMGraph must be this repository's, and must load.
    probe = subprocess.run([julia, "-e", "using DLPack"], env=env, capture_output=True, text=True, timeout=1200)
    if probe.returncode != 0:
        pytest.skip(f"{julia} cannot load DLPack.jl in this environment: {probe.stderr.strip()[-400:]}")
    where = subprocess.run([julia, "-e", "using OpenMMGraph; print(pathof(OpenMMGraph))"], env=env, capture_output=True,
                           text=True, timeout=1200)
    assert where.returncode == 0, f"OpenMMGraph does not load:\n{where.stderr[-4000:]}"
    assert Path(where.stdout.strip()).resolve() == (PACKAGE / "src" / "OpenMMGraph.jl").resolve(), where.stdout
    run = subprocess.run([julia, str(PACKAGE / "test" / "capi.jl")], env=env, capture_output=True, text=True,
                         timeout=1200)
    assert run.returncode == 0, f"capi.jl failed (status {run.returncode}):\n{run.stdout[-4000:]}\n{run.stderr[-4000:]}"
    assert "OpenMMGraph.jl through OpenMM's C API" in run.stdout
