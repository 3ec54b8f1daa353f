"""Tests of the openmm-graph command line (openmmgraph.cli)."""

import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from openmmgraph import grades
from openmmgraph.cli import main
from openmmgraph.modelfile import read_model

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared tiny_training_data module (importlib mode)
from tiny_training_data import write_tiny_extxyz  # noqa: E402

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
    assert summary["sha256"] == hashlib.sha256(output.read_bytes()).hexdigest()


def test_inspect_text_names_units_types_and_shapes(tmp_path, capsys):
    output = tmp_path / "small.safetensors"
    assert main(["make-model", "--grade", "small", "-o", str(output), "--intervals", "10", "--no-l-sum"]) == 0
    capsys.readouterr()
    assert main(["inspect", str(output)]) == 0
    text = capsys.readouterr().out
    for expected in ("length nm", "energy kJ/mol", "0: H (Z=1)", "1: C (Z=6)", "cut-off: 0.6 nm = 0.6 nm",
                     "channels M: 32, axis channels M_axis: 8, l_max L: 1, l-sum: no", "K = 10 intervals",
                     "activation: tanh, interactions: 0", "fitting network of type 1: 512->128, 128->128 (residual, timestep)",
                     "per edge", "file dtype: float64", f"sha256: {hashlib.sha256(output.read_bytes()).hexdigest()} "):
        assert expected in text


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["inspect", "does-not-exist.safetensors"], "No such file"),
        (["make-model", "--grade", "huge", "-o", "x.safetensors"], "invalid choice"),
        (["make-model", "-o", "x.safetensors", "--widths", "12,a"], "comma-separated integers"),
        (["make-model", "-o", "x.safetensors", "--axis", "64"], "n_axis"),
        (["make-model", "-o", "x.safetensors", "--seed", "-1"], "--seed: expected an integer >= 0, found -1"),
        (["frobnicate"], "invalid choice"),
        # Session 61: a file named "new" was written; the others failed after the tables were made, or in a traceback.
        (["make-model", "-o", "new/"], "make-model: output 'new/': ends with a path separator"),
        (["make-model", "-o", "missing/x.safetensors"], "the folder"),
        (["make-model", "-o", "x.safetensors", "--intervals", "1048577"], "radial_intervals: expected an integer in [1, 1048576]"),
        (["make-model", "-o", "x.safetensors", "--channels", "4097", "--axis", "1"], "n_channels: expected an integer in [1, 4096]"),
    ],
)
def test_errors_are_one_line_with_status_2(tmp_path, capsys, monkeypatch, arguments, message):
    monkeypatch.chdir(tmp_path)
    assert main(arguments) == 2
    error = capsys.readouterr().err
    assert error.startswith("openmm-graph: error: ") and message in error
    assert error.count("\n") == 1
    assert os.listdir(tmp_path) == []  # nothing written


def test_out_of_memory_is_one_line_with_status_2(tmp_path, capsys, monkeypatch):
    """Sizes within the format's limits can exceed the machine (--channels 4096 --intervals 1048576 asks numpy for
    256 GiB): a one-line error, not a traceback."""
    from openmmgraph import grades

    def too_large(**options):
        raise MemoryError("Unable to allocate 256. GiB for an array with shape (2, 2, 2, 1048577, 4096)")

    monkeypatch.setattr(grades, "make_model", too_large)
    monkeypatch.chdir(tmp_path)
    assert main(["make-model", "-o", "x.safetensors"]) == 2
    error = capsys.readouterr().err
    assert error == ("openmm-graph: error: out of memory (Unable to allocate 256. GiB for an array with shape "
                     "(2, 2, 2, 1048577, 4096)); choose smaller sizes (or a smaller input)\n")
    assert os.listdir(tmp_path) == []


def test_inspect_reports_an_invalid_file_in_one_line(tmp_path, capsys):
    path = tmp_path / "broken.safetensors"
    path.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      ")
    assert main(["inspect", str(path)]) == 2
    error = capsys.readouterr().err
    assert "ModelFile" in error and "header" in error and error.count("\n") == 1


@pytest.mark.skipif(not os.path.exists("/dev/zero") or not hasattr(os, "mkfifo"), reason="needs /dev/zero and FIFOs")
def test_inspect_refuses_an_endless_stream_and_reads_a_pipe_once(tmp_path, capsys):
    # /dev/zero was read until memory ran out; a FIFO was read twice (the model, then the digest: a hang).
    assert main(["inspect", "/dev/zero"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "ModelFile (/dev/zero): header length: expected 1 to" in error
    assert "not a regular file, so reading stopped after its first 8 bytes" in error
    model = tmp_path / "small.safetensors"
    assert main(["make-model", "--grade", "small", "-o", str(model), "--intervals", "10"]) == 0
    capsys.readouterr()
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(model.read_bytes()), daemon=True)
    writer.start()
    assert main(["inspect", str(fifo)]) == 0
    writer.join(timeout=30)
    assert f"sha256: {hashlib.sha256(model.read_bytes()).hexdigest()} " in capsys.readouterr().out


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


_TRAIN = ["--epochs", "1", "--cutoff", "3", "--channels", "2", "--axis", "1", "--embedding-widths", "4",
          "--fitting-widths", "4", "--intervals", "10", "--checkpoint-every", "0", "--no-progress"]


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["-o", "data.extxyz"], "'output' 'data.extxyz' is the training data 'data.extxyz'; choose another path"),
        (["-o", "./sub/../data.extxyz"], "is the training data 'data.extxyz'"),
        (["-o", "."], "'output' '.': is a folder"),
        (["-o", "data.extxyz/m.safetensors"], "'output' .*: cannot be made .*data.extxyz' is not a folder"),
        (["--cutoff", "inf"], "'cutoff': expected a finite number, found inf"),
        (["--cutoff", "nan"], "'cutoff': expected a finite number, found nan"),
        (["--set", "type_map=5"], "'type_map': expected a list of type names"),
        (["--set", "fitting_widths=5"], "'fitting_widths': expected a list of integer widths, found 5"),
        (["--fitting-widths", "0"], r"'fitting_widths': expected widths >= 1, found \[0\]"),
        (["--dtype", "float16"], "'output_dtype': expected 'float64' or 'float32', found 'float16'"),
        (["--set", "intervals=0"], "'intervals': expected an integer >= 1, found 0"),
        (["--r0", "10"], "'r0': expected 0 <= r0 < cutoff = 3.0, found 10.0"),
        (["--data", "empty.extxyz"], "training data empty.extxyz: cannot read it as extended XYZ"),
        (["--data", "bad.extxyz"], "training data bad.extxyz: cannot read it .*AttributeError"),
        # Session 61: a traceback, a message without the file's name, and the last of two keys silently taken.
        (["deep.json"], "deep.json: JSON nested too deeply"),
        (["latin.json"], "latin.json: not UTF-8 text"),
        (["twice.json"], "twice.json: duplicate key 'epochs' in a JSON object"),
        (["-o", "new/"], "'output' 'new/': ends with a path separator"),
    ],
)
def test_train_errors_are_one_line_before_training_and_keep_the_data(tmp_path, capsys, monkeypatch, arguments,
                                                                       message):
    import re

    monkeypatch.chdir(tmp_path)
    write_tiny_extxyz(tmp_path / "data.extxyz")
    (tmp_path / "sub").mkdir()
    (tmp_path / "empty.extxyz").write_text("")
    (tmp_path / "bad.extxyz").write_text("2\nnot a comment line with Properties\nSi 0 0 0\n")
    (tmp_path / "deep.json").write_text("[" * 100000 + "]" * 100000)
    (tmp_path / "latin.json").write_bytes(b'{"length_unit": "\xc5ngstr\xf6m"}')
    (tmp_path / "twice.json").write_text('{"epochs": 1, "epochs": 2}')
    before = (tmp_path / "data.extxyz").read_bytes()
    if "--data" not in arguments:
        arguments = ["--data", "data.extxyz", "-o", "m.safetensors"] + arguments
    else:
        arguments = ["-o", "m.safetensors"] + arguments
    assert main(["train"] + _TRAIN + arguments) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("openmm-graph: error: ") and captured.err.count("\n") == 1, captured.err
    assert re.search(message, captured.err), captured.err
    assert "epoch" not in captured.out and "data:" not in captured.out  # refused before any training
    assert (tmp_path / "data.extxyz").read_bytes() == before
    assert not (tmp_path / "m.safetensors").exists() and not (tmp_path / "m.checkpoints").exists()


def test_convert_deepmd_refuses_to_overwrite_its_input(tmp_path, capsys, monkeypatch):
    """Checked before DeePMD-kit is imported: no DeePMD-kit needed."""
    monkeypatch.chdir(tmp_path)
    model = tmp_path / "model.pth"
    model.write_bytes(b"PK\x03\x04 stands for a DeePMD-kit model")
    os.link(model, tmp_path / "hard.pth")
    for output in ("model.pth", str(model), "./model.pth", "hard.pth"):
        assert main(["convert-deepmd", "model.pth", "-o", output]) == 2
        error = capsys.readouterr().err
        assert error == (f"openmm-graph: error: convert-deepmd: the output {output!r} is the input model 'model.pth'; "
                         "choose another output path\n")
    assert model.read_bytes() == b"PK\x03\x04 stands for a DeePMD-kit model"
    assert main(["convert-deepmd", "model.pth", "-o", "missing/x.safetensors"]) == 2
    assert "convert-deepmd: output 'missing/x.safetensors': the folder" in capsys.readouterr().err
    assert main(["convert-deepmd", "model.pth", "-o", "."]) == 2
    assert "convert-deepmd: output '.': is a folder" in capsys.readouterr().err


def test_inspect_of_an_exported_pytorch_model_prints_its_metadata(tmp_path, capsys):
    # Session 67's review: inspect of a .pt refused it as a truncated safetensors file ("header length ... found
    # 578712552184433488") although GraphForce runs it.
    pytest.importorskip("torch")
    from openmmgraph.torch_export import export_torchscript, read_metadata

    model = tmp_path / "small.safetensors"
    assert main(["make-model", "--grade", "small", "--seed", "1", "--intervals", "10", "-o", str(model)]) == 0
    exported = tmp_path / "small.pt"
    export_torchscript(str(model), str(exported))
    capsys.readouterr()
    assert main(["inspect", str(exported), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary.pop("sha256") == hashlib.sha256(exported.read_bytes()).hexdigest()
    assert summary == read_metadata(str(exported))
    assert main(["inspect", str(exported)]) == 0
    text = capsys.readouterr().out
    assert "kind: a PyTorch model exported for openmm-graph" in text and f"cutoff: {json.dumps(summary['cutoff'])}" in text
    # A zip that is not such a model is refused in one line, naming the file.
    foreign = tmp_path / "foreign.pt"
    import zipfile

    with zipfile.ZipFile(foreign, "w") as archive:
        archive.writestr("x/data.pkl", b"0")
    assert main(["inspect", str(foreign)]) == 2
    assert f"{foreign}: no openmmgraph.json in the archive" in capsys.readouterr().err


def test_inspect_into_a_closed_pipe_ends_quietly(tmp_path):
    # Session 67's review: `openmm-graph inspect m.safetensors | head` ended with "error: [Errno 32] Broken pipe".
    model = tmp_path / "small.safetensors"
    assert main(["make-model", "--grade", "small", "--seed", "1", "--intervals", "10", "-o", str(model)]) == 0
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the command writes: its first write fails with EPIPE
    try:
        done = subprocess.run([sys.executable, "-m", "openmmgraph.cli", "inspect", str(model)], stdout=write_end,
                              stderr=subprocess.PIPE, timeout=120, text=True)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (1, "")
