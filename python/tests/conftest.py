"""Fixtures shared by the tests."""

import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _load_script(relative_path, name=None):
    path = ROOT / relative_path
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def load_script():
    """load_script("bench/timeline.py"): a script of the repository (examples, bench) loaded as a module, by path."""
    return _load_script


@pytest.fixture
def graph_cuda():
    """Skips the test unless OpenMM has a CUDA platform that runs the GraphForce (openmm-graph's CUDA plugin loaded)."""
    import openmm

    import openmmgraph

    openmmgraph.pluginLoadFailures()  # loads the plugins
    names = [openmm.Platform.getPlatform(i).getName() for i in range(openmm.Platform.getNumPlatforms())]
    if "CUDA" not in names or not openmm.Platform.getPlatformByName("CUDA").supportsKernels(["CalcGraphForce"]):
        pytest.skip("no CUDA platform with the GraphForce kernels")
