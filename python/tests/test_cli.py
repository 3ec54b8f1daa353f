"""Tests of the openmm-graph command line (openmmgraph.cli)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from openmmgraph import grades
from openmmgraph.cli import main
from openmmgraph.modelfile import read_model

PYTHON_DIR = Path(__file__).resolve().parents[1]


def test_make_model_then_inspect_json(tmp_path, capsys):
    output = tmp_path / "medium.safetensors"
    status = main(["make-model", "--grade", "medium", "--seed", "4", "-o", str(output), "--dtype", "float32",
                   "--intervals", "20", "--types", "O,H,C,Cl", "--length-unit", "angstrom", "--energy-unit", "eV",
                   "--activation", "silu", "--l-sum", "--interactions", "1", "--l-max", "1"])
    assert status == 0
    model = read_model(output)
    assert model.file_dtype == "float32"
    assert (model.type_names, model.type_atomic_numbers) == (["O", "H", "C", "Cl"], [8, 1, 6, 17])
    assert (model.length_unit, model.energy_unit, model.activation) == ("angstrom", "eV", "silu")
    assert (model.descriptor_l_sum, model.n_interactions, model.l_max, model.radial_intervals) == (True, 1, 1, 20)
    expected = grades.make_model("medium", seed=4, dtype="float32", radial_intervals=20, type_names=["O", "H", "C", "Cl"],
                                 length_unit="angstrom", energy_unit="eV", activation="silu", descriptor_l_sum=True,
                                 n_interactions=1, l_max=1)
    for name, array in expected.tensors.items():
        np.testing.assert_array_equal(model.tensors[name], array)
    capsys.readouterr()

    assert main(["inspect", str(output), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["cutoff"] == 6.0 and summary["cutoff_nm"] == pytest.approx(0.6)
    assert summary["types"][3] == {"index": 3, "name": "Cl", "atomic_number": 17}
    assert (summary["n_channels"], summary["n_axis"], summary["l_max"], summary["n_norm"]) == (64, 8, 1, 4.0)
    assert summary["descriptor_l_sum"] is True and summary["file_dtype"] == "float32"
    assert summary["fitting_networks"][0][0] == {"weight": [240, 2 * 64 * 8], "residual": False, "timestep": False}
    assert summary["fitting_networks"][0][1] == {"weight": [240, 240], "residual": True, "timestep": True}
    assert summary["fitting_networks"][0][-1]["weight"] == [1, 240]
    assert summary["node_networks"][1][-1]["weight"] == [64, 64]
    assert summary["flops_per_edge"] == grades.flops_per_edge(model)
    assert summary["flops_per_node"] == grades.flops_per_node(model)
    assert summary["network_parameters"] == model.network_parameter_count > 0


def test_inspect_text_names_units_types_and_shapes(tmp_path, capsys):
    output = tmp_path / "small.safetensors"
    assert main(["make-model", "--grade", "small", "-o", str(output), "--intervals", "10", "--no-l-sum"]) == 0
    capsys.readouterr()
    assert main(["inspect", str(output)]) == 0
    text = capsys.readouterr().out
    for expected in ("length nm", "energy kJ/mol", "0: H (Z=1)", "1: C (Z=6)", "cut-off: 0.6 nm = 0.6 nm",
                     "channels M: 32, axis channels M_axis: 8, l_max L: 1, l-sum: no", "K = 10 intervals",
                     "activation: tanh, interactions: 0", "fitting network of type 1: 512->128, 128->128 (residual, timestep)",
                     "per edge", "file dtype: float64"):
        assert expected in text


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["inspect", "does-not-exist.safetensors"], "No such file"),
        (["make-model", "--grade", "huge", "-o", "x.safetensors"], "invalid choice"),
        (["make-model", "-o", "x.safetensors", "--widths", "12,a"], "comma-separated integers"),
        (["make-model", "-o", "x.safetensors", "--axis", "64"], "n_axis"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_errors_are_one_line_with_status_2(tmp_path, capsys, monkeypatch, arguments, message):
    monkeypatch.chdir(tmp_path)
    assert main(arguments) == 2
    error = capsys.readouterr().err
    assert error.startswith("openmm-graph: error: ") and message in error
    assert error.count("\n") == 1


def test_inspect_reports_an_invalid_file_in_one_line(tmp_path, capsys):
    path = tmp_path / "broken.safetensors"
    path.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      ")
    assert main(["inspect", str(path)]) == 2
    error = capsys.readouterr().err
    assert "ModelFile" in error and "header" in error and error.count("\n") == 1


def test_runs_as_a_module(tmp_path):
    environment = dict(os.environ, PYTHONPATH=str(PYTHON_DIR) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    output = tmp_path / "model.safetensors"
    made = subprocess.run([sys.executable, "-m", "openmmgraph.cli", "make-model", "--grade", "large", "--seed", "2",
                           "--intervals", "4", "-o", str(output)], capture_output=True, text=True, env=environment)
    assert made.returncode == 0, made.stderr
    inspected = subprocess.run([sys.executable, "-m", "openmmgraph.cli", "inspect", str(output), "--json"],
                               capture_output=True, text=True, env=environment)
    assert inspected.returncode == 0, inspected.stderr
    assert json.loads(inspected.stdout)["n_interactions"] == 1
    failed = subprocess.run([sys.executable, "-m", "openmmgraph.cli", "inspect", str(tmp_path / "missing")],
                            capture_output=True, text=True, env=environment)
    assert failed.returncode == 2 and "Traceback" not in failed.stderr and failed.stderr.count("\n") == 1
