"""The examples run as documented (small sizes, CPU platform)."""

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_md_demo_runs(capsys, load_script):
    assert load_script("examples/run_md.py").main(["--platform", "CPU", "--particles", "300", "--steps", "20"]) == 0
    assert "steps/s" in capsys.readouterr().out


def test_dlpack_example_runs(capsys, load_script):
    import sys

    sys.path.insert(0, str(ROOT / "examples"))
    try:
        assert load_script("examples/dlpack_views.py").main(["--platform", "CPU", "--particles", "300"]) == 0
    finally:
        sys.path.remove(str(ROOT / "examples"))
    out = capsys.readouterr().out
    assert "match State.getForces()" in out and "moved by 0.0100 nm" in out


def test_torch_model_example_runs(capsys, load_script):
    import openmm
    import openmmgraph
    import pytest

    openmmgraph.GraphForce  # noqa: B018  (loads the plugins)
    if not openmm.Platform.getPlatformByName("Reference").supportsKernels(["CalcTorchGraphForce"]):
        pytest.skip("the LibTorch plugin is not loaded")
    assert load_script("examples/torch_model.py").main(["--platform", "CPU", "--cells", "2", "--steps", "5"]) == 0
    assert "TorchScript vs native" in capsys.readouterr().out
