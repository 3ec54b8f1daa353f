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


def test_examples_refuse_bad_arguments(capsys, load_script, tmp_path):
    import pytest
    from openmmgraph import grades

    run_md = load_script("examples/run_md.py")
    with pytest.raises(SystemExit):
        run_md.main(["--steps", "0"])
    assert "expected --particles >= 2 and --steps >= 1" in capsys.readouterr().err
    model = tmp_path / "water.safetensors"
    grades.make_model(grade="small", type_names=["Ow", "Hw"], radial_intervals=40).write(str(model))
    with pytest.raises(SystemExit, match="type 0 \\('Ow'\\) has no atomic number"):
        run_md.main(["--model", str(model), "--platform", "CPU", "--steps", "5"])
    silicon = load_script("examples/silicon/silicon_md.py")
    for flag in ("--steps", "--sample-every", "--cells"):
        with pytest.raises(SystemExit):
            silicon.main([flag, "0", "--platform", "CPU", "--plot", ""])
        assert f"{flag}: expected an integer >= 1, found 0" in capsys.readouterr().err
