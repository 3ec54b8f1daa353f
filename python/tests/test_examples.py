"""The examples run as documented (small sizes, CPU platform)."""

import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_md_demo_runs(capsys):
    assert load("run_md").main(["--platform", "CPU", "--particles", "300", "--steps", "20"]) == 0
    assert "steps/s" in capsys.readouterr().out


def test_dlpack_example_runs(capsys):
    import sys

    sys.path.insert(0, str(ROOT / "examples"))
    try:
        assert load("dlpack_views").main(["--platform", "CPU", "--particles", "300"]) == 0
    finally:
        sys.path.remove(str(ROOT / "examples"))
    out = capsys.readouterr().out
    assert "match State.getForces()" in out and "moved by 0.0100 nm" in out


def test_torch_model_example_runs(capsys):
    import openmm
    import openmmgraph
    import pytest

    openmmgraph.GraphForce  # noqa: B018  (loads the plugins)
    if not openmm.Platform.getPlatformByName("Reference").supportsKernels(["CalcTorchGraphForce"]):
        pytest.skip("the LibTorch plugin is not loaded")
    assert load("torch_model").main(["--platform", "CPU", "--cells", "2", "--steps", "5"]) == 0
    assert "TorchScript vs native" in capsys.readouterr().out
