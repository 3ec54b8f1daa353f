"""The two readers of the model file agree: the C++ loader every platform uses
(GraphForce.fromModelBytes) and the Python reader (openmmgraph.modelfile.read_model,
used by the PyTorch implementation, the command line and the converters) accept and
refuse the same files, and both name the key. The cases are the disagreements a
differential fuzz of the two found (bench/NOTES.md v46)."""

import json
import struct

import numpy as np
import openmm
import pytest

import openmmgraph
from openmmgraph import grades
from openmmgraph.modelfile import ModelFile, read_model


def _model(**overrides):
    settings = dict(n_channels=6, n_axis=3, fitting_widths=[10, 10], radial_intervals=20)
    settings.update(overrides)
    return grades.make_model("small", seed=3, **settings)


def _file(metadata_changes=None, tensor_changes=None, header_change=None, model=None):
    """The bytes of a small model with metadata strings replaced, tensors replaced, or its header edited."""
    model = model or _model()
    metadata = dict(model.metadata, **(metadata_changes or {}))
    tensors = {name: array.copy() for name, array in model.tensors.items()}
    tensors.update(tensor_changes or {})
    buffer = ModelFile(metadata, tensors).to_bytes(validate=False)
    if header_change is None:
        return buffer
    (length,) = struct.unpack("<Q", buffer[:8])
    header = json.loads(buffer[8 : 8 + length])
    header_change(header)
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + buffer[8 + length :]


def _readers(buffer):
    """(Python's message or None, C++'s message or None)."""
    python = cpp = None
    try:
        read_model(buffer)
    except ValueError as error:
        python = str(error)
    try:
        openmmgraph.GraphForce.fromModelBytes(buffer)
    except openmm.OpenMMException as error:
        cpp = str(error)
    return python, cpp


def _overflowing_table():
    model = _model(length_unit="angstrom")
    table = model.tensors["radial.table"].copy()
    table[0, 0, 0, 3, 2, 0] = 1e307  # f'' per angstrom^2: 1e309 per nm^2
    return dict(tensor_changes={"radial.table": table}, model=model)


REFUSED_BY_BOTH = [
    ("newline after an integer", dict(metadata_changes={"n_channels": "6\n"}), "n_channels"),
    ("newline after a real", dict(metadata_changes={"cutoff": "0.6\n"}), "cutoff"),
    ("lone surrogate", dict(metadata_changes={"type_names": '["A", "\\ud800"]'}), "type_names"),
    ("lone surrogate beside a non-ASCII name", dict(metadata_changes={"type_names": '["\u00c5", "\\ud800"]'}),
     "type_names"),
    ("r0 at the cut-off", dict(metadata_changes={"radial_r0": "0.6", "radial_dr": "1e-12",
                                                "radial_intervals": "1"}), "radial_r0"),
    ("4097 channels", dict(metadata_changes={"n_channels": "4097"}), "n_channels"),
    ("2^20 + 1 intervals", dict(metadata_changes={"radial_intervals": str((1 << 20) + 1)}), "radial_intervals"),
    ("a dtype that is a list", dict(header_change=lambda h: h["energy_shift"].__setitem__("dtype", ["F64"])),
     "energy_shift"),
    ("a 5,000-digit atomic number", dict(metadata_changes={"type_atomic_numbers": "[" + "9" * 5000 + ", 1]"}),
     "type_atomic_numbers"),
    ("a shape beyond 2^40", dict(header_change=lambda h: h.__setitem__(
        "x", dict(dtype="F64", shape=[0, 10**30], data_offsets=[0, 0]))), "'x'"),
    ("a tensor of rank 70", dict(header_change=lambda h: h.__setitem__(
        "x", dict(dtype="F64", shape=[0] * 70, data_offsets=[0, 0]))), "'x'"),
    ("65 hidden layers", dict(metadata_changes={"fitting_residual": json.dumps([False] * 65)}), "fitting_residual"),
    ("a table beyond the double range in nm", _overflowing_table(), "radial.table"),
]


@pytest.mark.parametrize("label, case, key", REFUSED_BY_BOTH, ids=[c[0] for c in REFUSED_BY_BOTH])
def test_both_readers_refuse_naming_the_key(label, case, key):
    python, cpp = _readers(_file(**case))
    assert python is not None and cpp is not None, (python, cpp)
    assert key in python and key in cpp, (python, cpp)
    for message in (python, cpp):
        message.encode("utf-8")  # printable: no lone surrogate
        assert len(message) < 3000 and "\0" not in message


def test_the_valid_models_of_the_cases_are_accepted_by_both():
    for model in (_model(), _model(fitting_widths=[4] * 64), _model(length_unit="angstrom")):
        assert _readers(model.to_bytes()) == (None, None)
    # Long decimal text of an allowed value: leading zeros, trailing zeros.
    cutoff = _model().metadata["cutoff"]
    assert _readers(_file(metadata_changes={"n_channels": "0" * 45 + "6", "cutoff": cutoff + "0" * 200})) == (None, None)


def test_control_characters_are_shown_escaped():
    python, cpp = _readers(_file(metadata_changes={"format": "openmm-graph\0"}))
    assert "\\x00" in cpp and "\\x00" in python  # not cut at the NUL


def test_a_header_length_that_reads_as_a_zip_signature():
    """'PK\\x03\\x04' is also the low half of a header length of 0x04034B50 bytes (under the 100 MiB limit):
    the C++ loader took such a safetensors file for a TorchScript archive."""
    model = _model()
    buffer = model.to_bytes()
    (length,) = struct.unpack("<Q", buffer[:8])
    target = 0x04034B50
    header = buffer[8 : 8 + length] + b" " * (target - length)  # JSON allows trailing spaces
    padded = struct.pack("<Q", target) + header + buffer[8 + length :]
    assert padded[:4] == b"PK\x03\x04"
    assert _readers(padded) == (None, None)
    del padded, header
