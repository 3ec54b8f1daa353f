"""Tests of the model file reader/writer (openmmgraph.modelfile) and the generated grades."""

import json
import struct

import numpy as np
import pytest

from openmmgraph import grades
from openmmgraph.modelfile import (
    ENERGY_UNITS_KJ_PER_MOL,
    LENGTH_UNITS_NM,
    ModelFile,
    convert_model_units,
    decode_safetensors,
    read_model,
    write_model,
)


def small_model(n_interactions=0, **overrides):
    settings = dict(n_channels=6, n_axis=3, fitting_widths=[10, 10], radial_intervals=20, n_interactions=n_interactions)
    settings.update(overrides)
    return grades.make_model("small", seed=3, **settings)


def raw_file(header: dict, data: bytes) -> bytes:
    header_bytes = json.dumps(header).encode()
    return struct.pack("<Q", len(header_bytes)) + header_bytes + data


def split_file(buffer: bytes):
    (length,) = struct.unpack("<Q", buffer[:8])
    return json.loads(buffer[8 : 8 + length]), buffer[8 + length :]


# -- round trip and the bytes on disk -------------------------------------------


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("n_interactions", [0, 1])
def test_round_trip_keeps_metadata_and_tensors(tmp_path, dtype, n_interactions):
    model = small_model(n_interactions)
    path = tmp_path / "model.safetensors"
    write_model(path, model.metadata, model.tensors, dtype=dtype)
    loaded = read_model(path)
    assert loaded.metadata == model.metadata
    assert set(loaded.tensors) == set(model.tensors)
    for name, array in model.tensors.items():
        assert loaded.tensors[name].dtype == np.dtype(dtype)
        np.testing.assert_array_equal(loaded.tensors[name], array.astype(dtype))
    assert loaded.file_dtype == dtype
    assert read_model(path.read_bytes()).to_bytes() == path.read_bytes()


def test_written_bytes_follow_safetensors_layout():
    model = small_model(1)
    buffer = model.to_bytes(dtype="float32")
    header, data = split_file(buffer)
    (header_length,) = struct.unpack("<Q", buffer[:8])
    assert (8 + header_length) % 8 == 0  # data 8-byte aligned, header padded with spaces
    metadata = header.pop("__metadata__")
    assert metadata == model.metadata and all(isinstance(v, str) for v in metadata.values())
    names = list(header)
    assert names == sorted(names) == sorted(model.tensors)
    position = 0
    for name in names:
        entry = header[name]
        assert entry["dtype"] == "F32"
        begin, end = entry["data_offsets"]
        assert begin == position
        expected = model.tensors[name].astype("<f4")
        assert entry["shape"] == list(expected.shape)
        assert data[begin:end] == expected.tobytes()
        position = end
    assert position == len(data)


def test_properties_parse_metadata():
    model = grades.make_model("large", seed=1, n_channels=8, n_axis=4, fitting_widths=[12, 12], radial_intervals=10,
                              length_unit="angstrom", energy_unit="eV", type_names=["O", "H", "Cl", "Xx"])
    assert model.type_names == ["O", "H", "Cl", "Xx"]
    assert model.type_atomic_numbers == [8, 1, 17, 0]
    assert model.cutoff == 6.0 and model.cutoff_nm == pytest.approx(0.6, rel=1e-15)
    assert model.length_scale_nm == 0.1 and model.energy_scale_kj_per_mol == ENERGY_UNITS_KJ_PER_MOL["eV"]
    assert (model.n_channels, model.n_axis, model.l_max, model.descriptor_l_sum) == (8, 4, 2, False)
    assert (model.n_norm, model.radial_r0, model.radial_intervals) == (4.0, 0.0, 10)
    assert model.radial_dr == pytest.approx(0.6, rel=1e-15)
    assert model.activation == "tanh" and model.n_interactions == 1
    assert model.fitting_residual == [False, True] and model.node_residual == [False, True]
    assert model.descriptor_size == 3 * 8 * 4 and model.fitting_input_size == 2 * 3 * 8 * 4
    assert [layer.weight.shape for layer in model.node_layers(2)] == [(8, 96), (8, 8), (8, 8)]


# -- validation: every rule gives a ValueError naming the key -----------------------


def _set(key, value):
    return lambda metadata, tensors: metadata.__setitem__(key, value)


def _delete_metadata(key):
    return lambda metadata, tensors: metadata.pop(key)


def _delete_tensor(name):
    return lambda metadata, tensors: tensors.pop(name)


def _replace_tensor(name, function):
    return lambda metadata, tensors: tensors.__setitem__(name, function(tensors[name]))


def _poke_last_knot(derivative):
    def poke(table):
        table = table.copy()
        table[1, 0, 0, -1, derivative, 2] = 1e-300
        return table

    return poke


def _nan_at_end(array):
    array = array.copy()
    array.flat[-1] = np.nan
    return array


METADATA_CASES = [
    (_delete_metadata("format"), "format", 0),
    (_set("format", "deepmd"), "format", 0),
    (_set("format_version", "2"), "format_version", 0),
    (_set("length_unit", "meter"), "length_unit", 0),
    (_set("energy_unit", "kJ"), "energy_unit", 0),
    (_set("type_names", "O,H"), "type_names", 0),
    (_set("type_names", "[]"), "type_names", 0),
    (_set("type_names", '["H", "H"]'), "type_names", 0),
    (_set("type_atomic_numbers", "[1]"), "type_atomic_numbers", 0),
    (_set("type_atomic_numbers", "[1, 200]"), "type_atomic_numbers", 0),
    (_set("cutoff", "-0.6"), "cutoff", 0),
    (_set("cutoff", "nan"), "cutoff", 0),
    (_set("cutoff", "0.6 nm"), "cutoff", 0),
    (_set("n_channels", "0"), "n_channels", 0),
    (_set("n_channels", "6.0"), "n_channels", 0),
    (_set("n_axis", "7"), "n_axis", 0),
    (_set("l_max", "3"), "l_max", 0),
    (_set("descriptor_l_sum", "True"), "descriptor_l_sum", 0),
    (_set("n_norm", "0"), "n_norm", 0),
    (_set("radial_r0", "-0.1"), "radial_r0", 0),
    (_set("radial_r0", "0.6"), "radial_r0", 0),
    (_set("radial_dr", "0.031"), "radial_dr", 0),
    (_set("radial_intervals", "21"), "radial_dr", 0),
    (_set("activation", "relu"), "activation", 0),
    (_set("fitting_residual", "[1, 0]"), "fitting_residual", 0),
    (_set("fitting_residual", "[true, true]"), "fitting.0.0.weight", 0),
    (_set("fitting_residual", "[false, true, false]"), "fitting.0.2.weight", 0),
    (_set("n_interactions", "2"), "n_interactions", 0),
    (_set("node_residual", "[false, true]"), "node_residual", 0),
    (_delete_metadata("node_residual"), "node_residual", 1),
    (_set("node_residual", "[false]"), "node.0.1.bias", 1),
    (_set("n_interactions", "0"), "node_residual", 1),
]

TENSOR_CASES = [
    (_delete_tensor("radial.table"), "radial.table", 0),
    (_replace_tensor("radial.table", lambda t: t[:, :, :, :-1]), "radial.table", 0),
    (_replace_tensor("radial.table", _poke_last_knot(0)), "radial.table", 0),
    (_replace_tensor("radial.table", _poke_last_knot(1)), "radial.table", 0),
    (_replace_tensor("radial.table", _poke_last_knot(2)), "radial.table", 0),
    (_replace_tensor("interaction.radial.table", _poke_last_knot(2)), "interaction.radial.table", 1),
    (_delete_tensor("interaction.radial.table"), "interaction.radial.table", 1),
    (_delete_tensor("energy_shift"), "energy_shift", 0),
    (_replace_tensor("energy_shift", lambda t: t[:1]), "energy_shift", 0),
    (_replace_tensor("fitting.1.0.weight", lambda t: t[:, :-1]), "fitting.1.0.weight", 0),
    (_replace_tensor("fitting.1.0.bias", lambda t: t[:-1]), "fitting.1.0.bias", 0),
    (_delete_tensor("fitting.0.1.weight"), "fitting.0.1.weight", 0),
    (_replace_tensor("fitting.0.1.timestep", lambda t: t[:-1]), "fitting.0.1.timestep", 0),
    (lambda m, t: t.__setitem__("fitting.0.0.timestep", np.ones(10)), "fitting.0.0.timestep", 0),
    (_replace_tensor("fitting.0.out.weight", lambda t: t.T.copy()), "fitting.0.out.weight", 0),
    (_replace_tensor("fitting.0.out.bias", lambda t: np.zeros(2)), "fitting.0.out.bias", 0),
    (_replace_tensor("fitting.0.1.weight", _nan_at_end), "fitting.0.1.weight", 0),
    (_replace_tensor("radial.table", lambda t: np.where(t == t.max(), np.inf, t)), "radial.table", 0),
    (lambda m, t: t.__setitem__("fitting.2.0.weight", np.ones((10, 24))), "fitting.2.0.weight", 0),
    (lambda m, t: t.__setitem__("fitting.00.0.weight", np.ones((10, 24))), "fitting.00.0.weight", 0),
    (_replace_tensor("node.1.0.weight", lambda t: t[:, :-1]), "node.1.0.weight", 1),
    (_replace_tensor("node.0.out.weight", lambda t: t[:-1]), "node.0.out.weight", 1),
    (_replace_tensor("node.0.out.bias", lambda t: t[:-1]), "node.0.out.bias", 1),
    (lambda m, t: t.__setitem__("node.0.0.weight", np.ones((6, 18))), "node.0.0.weight", 0),
]


@pytest.mark.parametrize("mutate, key, n_interactions", METADATA_CASES + TENSOR_CASES)
def test_invalid_model_is_rejected_naming_the_key(mutate, key, n_interactions):
    model = small_model(n_interactions)
    metadata = dict(model.metadata)
    tensors = {name: array.copy() for name, array in model.tensors.items()}
    mutate(metadata, tensors)
    buffer = ModelFile(metadata, tensors).to_bytes(validate=False)
    with pytest.raises(ValueError, match=f"ModelFile: .*'{key}'") as error:
        read_model(buffer)
    assert "expected" in str(error.value) and "found" in str(error.value)


def test_write_refuses_an_invalid_model(tmp_path):
    model = small_model()
    metadata = dict(model.metadata, activation="relu")
    with pytest.raises(ValueError, match="'activation'"):
        write_model(tmp_path / "bad.safetensors", metadata, model.tensors)
    assert not (tmp_path / "bad.safetensors").exists()


def test_a_failed_write_leaves_the_old_file_intact(tmp_path, monkeypatch):
    import os

    path = tmp_path / "model.safetensors"
    small_model().write(path)
    path.chmod(0o640)
    before = path.read_bytes()
    other = small_model(fitting_widths=[12, 12])

    def disk_full(descriptor):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        other.write(path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]  # no temporary file left
    # A successful write replaces the file, keeps its permissions, and writes through a symbolic link.
    link = tmp_path / "link.safetensors"
    link.symlink_to(path)
    other.write(link)
    assert link.is_symlink() and path.read_bytes() == other.to_bytes()
    assert path.stat().st_mode & 0o777 == 0o640
    with pytest.raises(IsADirectoryError, match="is a directory"):
        other.write(tmp_path)
    # Not a regular file (a device, a FIFO): written in place, as open() would.
    other.write(os.devnull)
    assert os.path.exists(os.devnull) and not os.path.isfile(os.devnull)


def test_error_names_the_path(tmp_path):
    model = small_model()
    path = tmp_path / "bad.safetensors"
    path.write_bytes(ModelFile(dict(model.metadata, l_max="5"), model.tensors).to_bytes(validate=False))
    with pytest.raises(ValueError, match=f"ModelFile \\({path}\\): metadata 'l_max': expected .*found '5'"):
        read_model(path)


def test_unknown_metadata_keys_are_rejected():
    model = small_model()
    model.metadata["description"] = "trained on nothing"
    with pytest.raises(ValueError, match="'description'.*unexpected key"):
        model.to_bytes()


# -- the container (header, dtypes, offsets) -----------------------------------------------


def _valid_parts():
    return split_file(small_model().to_bytes())


def _container_cases():
    cases = []
    header, data = _valid_parts()
    names = sorted(n for n in header if n != "__metadata__")
    first, second = names[0], names[1]

    cases.append(("short", b"\x01\x00\x00", "header length"))
    cases.append(("only the length", struct.pack("<Q", 100), "ends after these 8 bytes"))
    cases.append(("header too long", struct.pack("<Q", 10**6) + b"{}", "header length"))
    cases.append(("empty header", struct.pack("<Q", 0) + b"{}", "header length"))
    cases.append(("not json", struct.pack("<Q", 3) + b"{x}", "header"))
    nested = b'{"a": ' + b"[" * 65 + b"]" * 65 + b"}"
    cases.append(("nested 66 deep", struct.pack("<Q", len(nested)) + nested, "nesting deeper than 64"))
    in_strings = b'{"__metadata__": {"a": "' + b"[" * 100 + b'"}}'
    cases.append(("brackets in a string", struct.pack("<Q", len(in_strings)) + in_strings, "metadata 'a'"))
    cases.append(("not object", raw_file([], b""), "header"))
    no_metadata = {k: v for k, v in header.items() if k != "__metadata__"}
    cases.append(("no metadata", raw_file(no_metadata, data), "__metadata__"))
    bad_metadata = json.loads(json.dumps(header))
    bad_metadata["__metadata__"]["l_max"] = 1
    cases.append(("metadata int", raw_file(bad_metadata, data), "l_max"))
    text = json.dumps(header)
    duplicated = text[:-1] + ', "energy_shift": ' + json.dumps(header["energy_shift"]) + "}"
    cases.append(("duplicate", struct.pack("<Q", len(duplicated)) + duplicated.encode() + data, "duplicate"))
    for label, change, key in (
        ("F16", lambda h: h[first].__setitem__("dtype", "F16"), first),
        ("I64", lambda h: h[first].__setitem__("dtype", "I64"), first),
        ("no offsets", lambda h: h[first].pop("data_offsets"), first),
        ("extra field", lambda h: h[first].__setitem__("extra", 1), first),
        ("negative shape", lambda h: h[first].__setitem__("shape", [-1]), first),
        ("gap", lambda h: h[second].__setitem__("data_offsets", [h[second]["data_offsets"][0] + 8, h[second]["data_offsets"][1] + 8]), "a gap of 8 bytes"),
        ("size", lambda h: h[first].__setitem__("shape", [1]), first),
        ("overlap", lambda h: h[second].__setitem__("data_offsets", [0, h[second]["data_offsets"][1] - h[second]["data_offsets"][0]]), "overlaps tensor '"),
    ):
        changed = json.loads(json.dumps(header))
        change(changed)
        cases.append((label, raw_file(changed, data), key))
    cases.append(("trailing data", raw_file(header, data + b"\0" * 8), "data_offsets"))
    last = names[-1]
    truncated = raw_file(header, data[:-8])
    cases.append(("past end", truncated, last))
    return cases


@pytest.mark.parametrize("label, buffer, key", _container_cases(), ids=lambda v: v if isinstance(v, str) else "")
def test_malformed_container_is_rejected(label, buffer, key):
    with pytest.raises(ValueError, match="ModelFile") as error:
        read_model(buffer)
    assert key in str(error.value)


def test_overlapping_tensors_are_both_named():
    header, data = _valid_parts()
    names = sorted((n for n in header if n != "__metadata__"), key=lambda n: header[n]["data_offsets"][0])
    moved, landed_on = names[-1], names[0]
    span = header[moved]["data_offsets"]
    header[moved]["data_offsets"] = [0, span[1] - span[0]]
    with pytest.raises(ValueError) as error:
        read_model(raw_file(header, data))
    # The moved tensor and the one it lands on, each named.
    message = str(error.value)
    assert f"'{moved}'" in message and f"'{landed_on}'" in message and "overlaps" in message, message


def test_random_corruption_never_crashes():
    buffer = bytearray(small_model().to_bytes())
    rng = np.random.default_rng(0)
    header_length = struct.unpack("<Q", buffer[:8])[0]
    for _ in range(200):
        corrupted = bytearray(buffer)
        for position in rng.integers(0, 8 + header_length, size=3):
            corrupted[position] = int(rng.integers(0, 256))
        try:
            read_model(bytes(corrupted))
        except ValueError:
            pass
    for cut in range(0, len(buffer), max(1, len(buffer) // 50)):
        with pytest.raises(ValueError):
            read_model(bytes(buffer[:cut]))


def test_decoded_arrays_are_native_and_writable():
    header, data = decode_safetensors(small_model().to_bytes())
    assert all(array.dtype.isnative and array.flags.writeable for array in data.values())


# -- generated models ---------------------------------------------------------------------


@pytest.mark.parametrize("grade", sorted(grades.GRADES))
def test_grades_have_the_documented_shapes(grade):
    settings = grades.GRADES[grade]
    model = grades.make_model(grade, seed=0, radial_intervals=8)
    model.validate()
    assert model.n_types == settings["n_types"] and model.l_max == settings["l_max"]
    assert (model.n_channels, model.n_axis) == (settings["n_channels"], settings["n_axis"])
    assert model.descriptor_l_sum == settings["descriptor_l_sum"]
    assert model.n_interactions == settings["n_interactions"]
    assert [layer.out_size for layer in model.fitting_layers(0)] == list(settings["fitting_widths"]) + [1]
    assert model.fitting_residual == [False, True, True]
    assert (model.cutoff, model.radial_r0, model.n_norm, model.activation) == (0.6, 0.0, 4.0, "tanh")
    assert grades.make_model(grade, seed=0).radial_dr == pytest.approx(0.6 / 400, rel=1e-15)
    assert all(model.tensors[f"fitting.0.{n}.timestep"].min() > 0 for n in (1, 2))
    if settings["n_interactions"]:
        assert [layer.weight.shape for layer in model.node_layers(0)] == [
            (model.n_channels, model.descriptor_size), (model.n_channels,) * 2, (model.n_channels,) * 2]
        assert model.node_residual == [False, True]


@pytest.mark.parametrize("function, arguments, message", [
    # Session 62's review: values coerced, split or computed into a NaN box, and messages without the argument.
    ("make_model", dict(l_max=1.5), "make_model: l_max: expected an integer, found 1.5"),
    ("make_model", dict(n_channels=2.7), "make_model: n_channels: expected an integer, found 2.7"),
    ("make_model", dict(fitting_widths=[8, 2.5]), "make_model: fitting_widths: expected an integer, found 2.5"),
    ("make_model", dict(fitting_widths="88"), "make_model: fitting_widths: expected a list of integers"),
    ("make_model", dict(type_names="OH"), "make_model: type_names: expected a list of type names, found the string 'OH'"),
    ("make_model", dict(descriptor_l_sum=1), "make_model: descriptor_l_sum: expected True or False, found 1"),
    ("make_model", dict(cutoff=1e300), r"make_model: cutoff: expected a finite number of nm \(whose square is finite\)"),
    ("make_model", dict(cutoff=float("nan")), "make_model: cutoff: expected a finite number"),
    ("make_model", dict(seed=-1), "make_model: seed: expected an integer >= 0, found -1"),
    ("make_model", dict(seed=True), "make_model: seed: expected an integer, found True"),
    ("lattice_system", dict(n=8, density=float("inf")), "lattice_system: density: expected a finite number > 0, found inf"),
    ("lattice_system", dict(n=8, density=1e-320), "lattice_system: density 1e-320 gives a box of side inf nm"),
    ("lattice_system", dict(n=8, n_types=0), "lattice_system: n_types: expected >= 1, found 0"),
    ("lattice_system", dict(n=8, n_types=2.5), "lattice_system: n_types: expected an integer, found 2.5"),
    ("lattice_system", dict(n=8, seed=-1), "lattice_system: seed: expected >= 0, found -1"),
    ("lattice_system", dict(n=2.5), "lattice_system: n: expected an integer, found 2.5"),
])
def test_generators_name_a_bad_argument(function, arguments, message):
    with pytest.raises(ValueError, match="^" + message):
        getattr(grades, function)(**arguments)


def test_generated_tables_have_consistent_derivatives():
    model = grades.make_model("small", seed=2, radial_intervals=2000, radial_r0=0.05)
    table = model.tensors["radial.table"]
    dr = model.radial_dr
    value, first, second = table[..., 0, :], table[..., 1, :], table[..., 2, :]
    central_first = (value[:, :, :, 2:] - value[:, :, :, :-2]) / (2 * dr)
    central_second = (first[:, :, :, 2:] - first[:, :, :, :-2]) / (2 * dr)
    np.testing.assert_allclose(central_first, first[:, :, :, 1:-1], atol=1e-4 * np.abs(first).max())
    np.testing.assert_allclose(central_second, second[:, :, :, 1:-1], atol=1e-4 * np.abs(second).max())
    assert np.all(table[:, :, :, -1] == 0.0)
    assert np.abs(table[:, :, :, -2, 0]).max() < 1e-7 * np.abs(value).max()  # f ~ (r_c - r)^3 near r_c


@pytest.mark.parametrize("length_unit", sorted(LENGTH_UNITS_NM))
@pytest.mark.parametrize("energy_unit", ["kcal/mol", "hartree"])
def test_generated_model_in_other_units_is_the_converted_model(length_unit, energy_unit):
    reference = grades.make_model("small", seed=5, radial_intervals=10)
    converted = convert_model_units(reference, length_unit, energy_unit)
    generated = grades.make_model("small", seed=5, radial_intervals=10, length_unit=length_unit, energy_unit=energy_unit)
    assert generated.cutoff_nm == pytest.approx(0.6, rel=1e-11)
    assert generated.cutoff == pytest.approx(converted.cutoff, rel=1e-11)
    for name, array in converted.tensors.items():
        np.testing.assert_allclose(generated.tensors[name], array, rtol=1e-10, atol=1e-13 * np.abs(array).max())


def test_model_flops_follow_the_benchmark_formula():
    small = grades.make_model("small", seed=0, radial_intervals=4)
    per_edge = 2 * 32 * 6 + 4 * 32
    per_node = 4 * 32 * 8 + 256 * 128 + 128 * 128 * 2 + 128
    assert grades.multiply_adds_per_edge(small) == per_edge
    assert grades.multiply_adds_per_node(small) == per_node
    assert grades.model_flops(small, 1000, 10) == 6 * (1000 * per_edge + 10 * per_node)
    assert grades.flops_per_edge(small) == 6 * per_edge and grades.flops_per_node(small) == 6 * per_node
    large = grades.make_model("large", seed=0, radial_intervals=4)
    contraction = 9 * 128 * 16
    fitting = 2 * 3 * 128 * 16 * 256 + 2 * 256 * 256 + 256
    node = 3 * 128 * 16 * 128 + 128 * 128 + 128 * 128  # D -> M, M -> M (residual), M -> M (output)
    assert grades.multiply_adds_per_edge(large) == 2 * (3 * 128 * 6 + 9 * 128)
    assert grades.multiply_adds_per_node(large) == 2 * contraction + fitting + node
