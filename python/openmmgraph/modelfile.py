"""Read, validate and write openmm-graph model files (docs/model-format.md).

A model file is one ``safetensors`` file: an 8-byte little-endian header
length N, N bytes of UTF-8 JSON header, then the raw little-endian tensor
data. This module reads and writes that format with ``struct``, ``json`` and
``numpy`` only (no ``safetensors`` package), so that it is an independent
second implementation of the contract that the C++ loader follows.

Rules this reader enforces, beyond the letter of model-format.md where the
spec is silent (they are the project's choices, documented here):

- Header: 8 <= total size, header length <= remaining bytes, UTF-8 JSON
  object, no duplicate keys; every tensor entry has exactly ``dtype``,
  ``shape`` and ``data_offsets``; dtype ``F64`` or ``F32`` only.
- Offsets (the safetensors rule): sorted by begin, the first begins at 0,
  each begins where the previous one ends (no gap, no overlap), the last one
  ends at the end of the data buffer, and end - begin == numel * itemsize.
- ``__metadata__`` is required and all its values are strings. Every key of
  the spec's table is checked; ``node_residual`` is required when
  ``n_interactions`` is 1 and rejected when it is 0. Metadata keys and tensor
  names that the spec does not name are rejected (as the C++ loader does).
- Numbers: integers are plain decimal (``^[+-]?[0-9]+$``); reals are decimal
  or exponent notation (no ``nan``/``inf``). ``radial_r0 + radial_intervals
  * radial_dr`` must equal ``cutoff`` to 1e-9 relative; 0 <= r_0 < r_c.
- Every tensor value is finite. The radial tables are zero at the cut-off:
  f, f' and f'' at the last knot (q = K) are required to be exactly 0.0,
  which is what a well-formed generator writes (the smooth switch makes them
  analytically zero, and the generator stores an exact 0.0 there).
- Hidden layer n of a network of type a has weight [out_n, in_n] with in_0
  the network's input size (fitting: descriptor size * (1 + n_interactions);
  node: descriptor size) and in_n = out_{n-1}; a residual layer needs
  out_n == in_n; a ``timestep`` [out_n] is allowed only on residual layers.
  Widths may differ between types.

Errors are ``ValueError`` whose message starts with ``ModelFile`` (and the
path when read from a file) and names the key, the expected and the found
value.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import struct
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

# Section 8: scale of each declared unit to nm and to kJ/mol.
LENGTH_UNITS_NM: dict[str, float] = {
    "nm": 1.0,
    "angstrom": 0.1,
    "bohr": 0.052917721090,
}
ENERGY_UNITS_KJ_PER_MOL: dict[str, float] = {
    "kJ/mol": 1.0,
    "kcal/mol": 4.184,
    "eV": 96.48533212331,
    "hartree": 2625.4996394799,
}

FORMAT_NAME = "openmm-graph"
FORMAT_VERSION = "1"
ACTIVATIONS = ("tanh", "silu")
MAX_L = 2

# The metadata keys of section 9, in the order a writer emits them.
REQUIRED_METADATA_KEYS = (
    "format",
    "format_version",
    "length_unit",
    "energy_unit",
    "type_names",
    "type_atomic_numbers",
    "cutoff",
    "n_channels",
    "n_axis",
    "l_max",
    "descriptor_l_sum",
    "n_norm",
    "radial_r0",
    "radial_dr",
    "radial_intervals",
    "activation",
    "fitting_residual",
    "n_interactions",
)
NODE_RESIDUAL_KEY = "node_residual"

_SAFETENSORS_DTYPES = {"F64": np.dtype("<f8"), "F32": np.dtype("<f4")}
_NUMPY_TO_SAFETENSORS = {np.dtype("float64"): "F64", np.dtype("float32"): "F32"}

# Whole-string patterns (used with fullmatch: "$" would also match before a final newline, which the C++ loader
# refuses).
_INTEGER_PATTERN = re.compile(r"[+-]?[0-9]+")
_REAL_PATTERN = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
# The C++ loader's limits (GraphModelLoader.cpp), so that both readers accept the same files
# (docs/implementation-notes.md, "The model loader").
MAX_TYPES = 256
MAX_CHANNELS = 4096
MAX_INTERVALS = 1 << 20
MAX_LAYERS = 64
MAX_WIDTH = 1 << 16
MAX_TENSOR_RANK = 8
MAX_TENSOR_ELEMENTS = 1 << 40
MAX_DATA_OFFSET = 1 << 62
# Integers of more significant digits are outside every allowed range; refused before int() (which refuses 4,300).
_MAX_INTEGER_DIGITS = 19

# Relative tolerance of the grid rule r_0 + K * dr == r_c (decimal strings of
# r_0, dr and r_c cannot satisfy it exactly in binary floating point).
GRID_RELATIVE_TOLERANCE = 1e-9


class _Errors:
    """Builds ValueErrors whose message starts with ``ModelFile`` and the source."""

    def __init__(self, source: str | None):
        self.prefix = f"ModelFile ({source})" if source else "ModelFile"

    def error(self, message: str) -> ValueError:
        return ValueError(f"{self.prefix}: {message}")

    def metadata(self, key: str, expected: str, found) -> ValueError:
        return self.error(f"metadata '{key}': expected {expected}, found {found!r}")

    def tensor(self, name: str, expected: str, found) -> ValueError:
        return self.error(f"tensor '{name}': expected {expected}, found {found}")


# ---------------------------------------------------------------------------
# Metadata parsing (shared by validation and the ModelFile properties)


def _get(metadata: dict, key: str, errors: _Errors) -> str:
    if key not in metadata:
        raise errors.error(f"metadata '{key}': expected a value, found the key missing")
    value = metadata[key]
    if not isinstance(value, str):
        raise errors.metadata(key, "a string", value)
    return value


def _parse_integer(metadata, key, errors, minimum=None, maximum=None) -> int:
    text = _get(metadata, key, errors)
    if not _INTEGER_PATTERN.fullmatch(text):
        raise errors.metadata(key, "a decimal integer", _shortened(text))
    bounds = f"an integer in [{minimum}, {maximum if maximum is not None else 'inf'}]"
    if len(text.lstrip("+-").lstrip("0")) > _MAX_INTEGER_DIGITS:
        raise errors.metadata(key, bounds, _shortened(text))
    value = int(text)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise errors.metadata(key, bounds, text)
    return value


def _parse_real(metadata, key, errors, positive=False, non_negative=False) -> float:
    text = _get(metadata, key, errors)
    if not _REAL_PATTERN.fullmatch(text):
        raise errors.metadata(key, "a finite decimal number", _shortened(text))
    value = float(text)
    if not math.isfinite(value):
        raise errors.metadata(key, "a finite decimal number", text)
    if positive and not value > 0.0:
        raise errors.metadata(key, "a number > 0", text)
    if non_negative and not value >= 0.0:
        raise errors.metadata(key, "a number >= 0", text)
    return value


def _parse_choice(metadata, key, errors, choices: Iterable[str]) -> str:
    text = _get(metadata, key, errors)
    choices = tuple(choices)
    if text not in choices:
        raise errors.metadata(key, "one of " + ", ".join(repr(c) for c in choices), text)
    return text


def _parse_bool(metadata, key, errors) -> bool:
    return _parse_choice(metadata, key, errors, ("true", "false")) == "true"


def _shortened(text: str, limit: int = 200) -> str:
    """A found value for a message: at most ``limit`` characters (the C++ loader cuts long values too)."""
    return text if len(text) <= limit else text[:limit] + f"... ({len(text) - limit} more characters)"


def _has_lone_surrogate(value) -> bool:
    """Whether a decoded JSON value holds a string that is not valid Unicode (an escaped lone surrogate such as
    \\ud800, which strict JSON readers refuse: it cannot be encoded as UTF-8)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, list):
        return any(_has_lone_surrogate(v) for v in value)
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    return False


def _parse_json_list(metadata, key, errors, element_check, element_description) -> list:
    text = _get(metadata, key, errors)
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError, ValueError):  # ValueError: an integer beyond int()'s digit limit
        raise errors.metadata(key, f"a JSON list of {element_description}", _shortened(text)) from None
    if _has_lone_surrogate(value):
        raise errors.metadata(key, f"a JSON list of {element_description} (valid Unicode: no lone surrogate "
                              "escapes such as \\ud800)", _shortened(text))
    if not isinstance(value, list) or not all(element_check(v) for v in value):
        raise errors.metadata(key, f"a JSON list of {element_description}", text)
    return value


def _is_bool(value) -> bool:
    return isinstance(value, bool)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class ModelShape:
    """The parsed, checked metadata of a model (all lengths in the model's unit)."""

    length_unit: str
    energy_unit: str
    type_names: tuple[str, ...]
    type_atomic_numbers: tuple[int, ...]
    cutoff: float
    n_channels: int
    n_axis: int
    l_max: int
    descriptor_l_sum: bool
    n_norm: float
    radial_r0: float
    radial_dr: float
    radial_intervals: int
    activation: str
    fitting_residual: tuple[bool, ...]
    n_interactions: int
    node_residual: tuple[bool, ...]

    @property
    def n_types(self) -> int:
        return len(self.type_names)

    @property
    def descriptor_size(self) -> int:
        """Size of D per particle: M * M_axis (l-summed) or (L+1) * M * M_axis."""
        degrees = 1 if self.descriptor_l_sum else self.l_max + 1
        return degrees * self.n_channels * self.n_axis

    @property
    def fitting_input_size(self) -> int:
        """Size of the fitting network's input: D, followed by D2 with interactions."""
        return self.descriptor_size * (1 + self.n_interactions)

    @property
    def table_shape(self) -> tuple[int, ...]:
        """[T, T, L+1, K+1, 3, M] of ``radial.table`` and ``interaction.radial.table``."""
        t = self.n_types
        return (t, t, self.l_max + 1, self.radial_intervals + 1, 3, self.n_channels)


def parse_metadata(metadata: dict, source: str | None = None) -> ModelShape:
    """Check every metadata key of section 9 and return the parsed values.

    Raises ValueError naming the key, the expected and the found value.
    """
    errors = _Errors(source)
    if not isinstance(metadata, dict):
        raise errors.error(f"'__metadata__': expected a JSON object, found {type(metadata).__name__}")
    for key in sorted(metadata):
        if key not in REQUIRED_METADATA_KEYS and key != "node_residual":
            raise errors.metadata(key, "no such key in format version 1 (unexpected key)", metadata[key])
    _parse_choice(metadata, "format", errors, (FORMAT_NAME,))
    _parse_choice(metadata, "format_version", errors, (FORMAT_VERSION,))
    length_unit = _parse_choice(metadata, "length_unit", errors, LENGTH_UNITS_NM)
    energy_unit = _parse_choice(metadata, "energy_unit", errors, ENERGY_UNITS_KJ_PER_MOL)
    type_names = _parse_json_list(
        metadata, "type_names", errors, lambda v: isinstance(v, str) and v != "", "non-empty strings"
    )
    if not 1 <= len(type_names) <= MAX_TYPES:
        raise errors.metadata("type_names", f"a JSON list of 1 to {MAX_TYPES} names", _shortened(metadata["type_names"]))
    if len(set(type_names)) != len(type_names):
        raise errors.metadata("type_names", "distinct names", metadata["type_names"])
    atomic_numbers = _parse_json_list(
        metadata,
        "type_atomic_numbers",
        errors,
        lambda v: _is_int(v) and 0 <= v <= 118,
        "integers in [0, 118]",
    )
    if len(atomic_numbers) != len(type_names):
        raise errors.metadata(
            "type_atomic_numbers",
            f"{len(type_names)} integers (one per entry of type_names, which lists {len(type_names)} names)",
            metadata["type_atomic_numbers"],
        )
    cutoff = _parse_real(metadata, "cutoff", errors, positive=True)
    n_channels = _parse_integer(metadata, "n_channels", errors, minimum=1, maximum=MAX_CHANNELS)
    n_axis = _parse_integer(metadata, "n_axis", errors, minimum=1, maximum=n_channels)
    l_max = _parse_integer(metadata, "l_max", errors, minimum=0, maximum=MAX_L)
    descriptor_l_sum = _parse_bool(metadata, "descriptor_l_sum", errors)
    n_norm = _parse_real(metadata, "n_norm", errors, positive=True)
    radial_r0 = _parse_real(metadata, "radial_r0", errors, non_negative=True)
    radial_dr = _parse_real(metadata, "radial_dr", errors, positive=True)
    radial_intervals = _parse_integer(metadata, "radial_intervals", errors, minimum=1, maximum=MAX_INTERVALS)
    if not radial_r0 < cutoff:
        raise errors.metadata("radial_r0", f"a number < cutoff ({metadata['cutoff']})", metadata["radial_r0"])
    grid_end = radial_r0 + radial_intervals * radial_dr
    if abs(grid_end - cutoff) > GRID_RELATIVE_TOLERANCE * cutoff:
        raise errors.metadata(
            "radial_dr",
            f"radial_r0 + radial_intervals * radial_dr == cutoff = {cutoff!r} "
            f"(to {GRID_RELATIVE_TOLERANCE:g} relative), i.e. radial_dr = {(cutoff - radial_r0) / radial_intervals!r}",
            f"{metadata['radial_dr']} (grid ends at {grid_end!r})",
        )
    activation = _parse_choice(metadata, "activation", errors, ACTIVATIONS)
    fitting_residual = _parse_json_list(metadata, "fitting_residual", errors, _is_bool, "booleans")
    if len(fitting_residual) > MAX_LAYERS:
        raise errors.metadata("fitting_residual", f"at most {MAX_LAYERS} layers", f"{len(fitting_residual)} layers")
    n_interactions = _parse_integer(metadata, "n_interactions", errors, minimum=0, maximum=1)
    if n_interactions == 1:
        node_residual = _parse_json_list(metadata, NODE_RESIDUAL_KEY, errors, _is_bool, "booleans")
        if len(node_residual) > MAX_LAYERS:
            raise errors.metadata(NODE_RESIDUAL_KEY, f"at most {MAX_LAYERS} layers", f"{len(node_residual)} layers")
    else:
        if NODE_RESIDUAL_KEY in metadata:
            raise errors.metadata(
                NODE_RESIDUAL_KEY, "no such key when n_interactions is 0", metadata[NODE_RESIDUAL_KEY]
            )
        node_residual = []
    return ModelShape(
        length_unit=length_unit,
        energy_unit=energy_unit,
        type_names=tuple(type_names),
        type_atomic_numbers=tuple(atomic_numbers),
        cutoff=cutoff,
        n_channels=n_channels,
        n_axis=n_axis,
        l_max=l_max,
        descriptor_l_sum=descriptor_l_sum,
        n_norm=n_norm,
        radial_r0=radial_r0,
        radial_dr=radial_dr,
        radial_intervals=radial_intervals,
        activation=activation,
        fitting_residual=tuple(fitting_residual),
        n_interactions=n_interactions,
        node_residual=tuple(node_residual),
    )


# ---------------------------------------------------------------------------
# Tensor validation


@dataclass(frozen=True)
class DenseLayer:
    """One layer of a network: weight [out, in], bias [out], timestep [out] or None."""

    weight: np.ndarray
    bias: np.ndarray
    timestep: np.ndarray | None
    residual: bool

    @property
    def in_size(self) -> int:
        return int(self.weight.shape[1])

    @property
    def out_size(self) -> int:
        return int(self.weight.shape[0])


def _shape_text(shape) -> str:
    return "[" + ", ".join(str(int(s)) for s in shape) + "]"


def _check_tensor(tensors, name, expected_shape, errors) -> np.ndarray:
    if name not in tensors:
        raise errors.tensor(name, f"a tensor of shape {_shape_text(expected_shape)}", "none")
    array = tensors[name]
    if array.shape != tuple(expected_shape):
        raise errors.tensor(name, f"shape {_shape_text(expected_shape)}", _shape_text(array.shape))
    return array


def _check_network(
    tensors, prefix, input_size, residual_flags, output_size, errors, claimed: set
) -> None:
    """Check the layers ``{prefix}.{n}.*`` and ``{prefix}.out.*`` of one network."""
    in_size = input_size
    for layer, residual in enumerate(residual_flags):
        weight_name = f"{prefix}.{layer}.weight"
        if weight_name not in tensors:
            raise errors.tensor(weight_name, f"a tensor of shape [width, {in_size}]", "none")
        weight = tensors[weight_name]
        if weight.ndim != 2 or weight.shape[1] != in_size or not 1 <= weight.shape[0] <= MAX_WIDTH:
            raise errors.tensor(weight_name, f"shape [width, {in_size}] with 1 <= width <= {MAX_WIDTH}",
                                _shape_text(weight.shape))
        out_size = int(weight.shape[0])
        if residual and out_size != in_size:
            raise errors.tensor(
                weight_name,
                f"shape [{in_size}, {in_size}] (layer {layer} is residual, so out == in)",
                _shape_text(weight.shape),
            )
        claimed.add(weight_name)
        _check_tensor(tensors, f"{prefix}.{layer}.bias", (out_size,), errors)
        claimed.add(f"{prefix}.{layer}.bias")
        timestep_name = f"{prefix}.{layer}.timestep"
        if timestep_name in tensors:
            if not residual:
                raise errors.tensor(
                    timestep_name, "no timestep (layer is not residual)", _shape_text(tensors[timestep_name].shape)
                )
            _check_tensor(tensors, timestep_name, (out_size,), errors)
            claimed.add(timestep_name)
        in_size = out_size
    _check_tensor(tensors, f"{prefix}.out.weight", (output_size, in_size), errors)
    _check_tensor(tensors, f"{prefix}.out.bias", (output_size,), errors)
    claimed.update((f"{prefix}.out.weight", f"{prefix}.out.bias"))


def _check_table(tensors, name, shape: ModelShape, errors) -> None:
    table = _check_tensor(tensors, name, shape.table_shape, errors)
    last_knot = table[:, :, :, -1, :, :]  # [T, T, L+1, 3, M]
    nonzero = np.argwhere(last_knot != 0.0)
    if nonzero.size:
        a, b, degree, derivative, channel = (int(v) for v in nonzero[0])
        which = ("f", "f'", "f''")[derivative]
        raise errors.tensor(
            name,
            "f = f' = f'' = 0.0 exactly at the last knot (r = cutoff)",
            f"{which} = {last_knot[a, b, degree, derivative, channel]!r} at types ({a}, {b}), "
            f"l = {degree}, channel {channel} ({len(nonzero)} nonzero values)",
        )


def validate_model(metadata: dict, tensors: dict, source: str | None = None) -> ModelShape:
    """Check a model against every rule of docs/model-format.md.

    metadata: the ``__metadata__`` strings; tensors: name -> float32/float64
    numpy array. Returns the parsed metadata. Raises ValueError naming the key,
    the expected and the found value.
    """
    errors = _Errors(source)
    shape = parse_metadata(metadata, source)
    for name, array in tensors.items():
        if not isinstance(array, np.ndarray) or array.dtype not in _NUMPY_TO_SAFETENSORS:
            found = getattr(array, "dtype", type(array).__name__)
            raise errors.tensor(name, "a float64 or float32 numpy array", found)
        if not np.all(np.isfinite(array)):
            index = tuple(int(v) for v in np.argwhere(~np.isfinite(array))[0])
            raise errors.tensor(name, "finite values", f"{array[index]!r} at index {list(index)}")
    claimed: set[str] = set()
    _check_table(tensors, "radial.table", shape, errors)
    claimed.add("radial.table")
    _check_tensor(tensors, "energy_shift", (shape.n_types,), errors)
    claimed.add("energy_shift")
    for type_index in range(shape.n_types):
        _check_network(
            tensors,
            f"fitting.{type_index}",
            shape.fitting_input_size,
            shape.fitting_residual,
            1,
            errors,
            claimed,
        )
    if shape.n_interactions == 1:
        _check_table(tensors, "interaction.radial.table", shape, errors)
        claimed.add("interaction.radial.table")
        for type_index in range(shape.n_types):
            _check_network(
                tensors,
                f"node.{type_index}",
                shape.descriptor_size,
                shape.node_residual,
                shape.n_channels,
                errors,
                claimed,
            )
    unknown = sorted(set(tensors) - claimed)
    if unknown:
        raise errors.tensor(
            unknown[0],
            "only the tensors named in model-format.md section 9 for this model's metadata",
            "an extra tensor" + (f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""),
        )
    _check_range_in_openmm_units(tensors, shape, errors)
    return shape


def _check_range_in_openmm_units(tensors, shape: ModelShape, errors) -> None:
    """Finite values can overflow when OpenMM converts them to nm and kJ/mol (a second derivative of 1e307 per
    angstrom^2 is 1e309 per nm^2); the C++ loader refuses such a model, and so does this one."""
    length, energy = LENGTH_UNITS_NM[shape.length_unit], ENERGY_UNITS_KJ_PER_MOL[shape.energy_unit]
    checks = [(name, lambda t: np.concatenate([(t[..., 1, :] / length).ravel(), (t[..., 2, :] / length**2).ravel()]),
               "nm") for name in ("radial.table", "interaction.radial.table") if name in tensors]
    checks += [(name, lambda t: t * energy, "kJ/mol")
               for name in ["energy_shift"] + [f"fitting.{a}.out.{p}" for a in range(shape.n_types) for p in ("weight", "bias")]]
    with np.errstate(over="ignore"):
        for name, converted, unit in checks:
            if not np.all(np.isfinite(converted(np.asarray(tensors[name], dtype=np.float64)))):
                raise errors.tensor(name, f"values that stay finite in OpenMM's units ({unit}); rescale the model",
                                    "a value beyond the double range there")


# ---------------------------------------------------------------------------
# The model file


@dataclass
class ModelFile:
    """A model: ``metadata`` exactly as stored (all strings) and ``tensors``.

    tensors: name -> numpy array (float64 or float32, as stored in the file).
    The properties parse the metadata on each access (raising ValueError on a
    bad value); lengths are in the model's ``length_unit``, energies in its
    ``energy_unit``.
    """

    metadata: dict[str, str]
    tensors: dict[str, np.ndarray] = field(default_factory=dict)

    # -- parsed metadata -------------------------------------------------
    @property
    def shape(self) -> ModelShape:
        return parse_metadata(self.metadata)

    @property
    def length_unit(self) -> str:
        return self.shape.length_unit

    @property
    def energy_unit(self) -> str:
        return self.shape.energy_unit

    @property
    def length_scale_nm(self) -> float:
        """nm per model length unit (section 8)."""
        return LENGTH_UNITS_NM[self.length_unit]

    @property
    def energy_scale_kj_per_mol(self) -> float:
        """kJ/mol per model energy unit (section 8)."""
        return ENERGY_UNITS_KJ_PER_MOL[self.energy_unit]

    @property
    def type_names(self) -> list[str]:
        return list(self.shape.type_names)

    @property
    def type_atomic_numbers(self) -> list[int]:
        return list(self.shape.type_atomic_numbers)

    @property
    def n_types(self) -> int:
        return self.shape.n_types

    @property
    def cutoff(self) -> float:
        """r_c in the model's length unit."""
        return self.shape.cutoff

    @property
    def cutoff_nm(self) -> float:
        return self.cutoff * self.length_scale_nm

    @property
    def n_channels(self) -> int:
        return self.shape.n_channels

    @property
    def n_axis(self) -> int:
        return self.shape.n_axis

    @property
    def l_max(self) -> int:
        return self.shape.l_max

    @property
    def descriptor_l_sum(self) -> bool:
        return self.shape.descriptor_l_sum

    @property
    def n_norm(self) -> float:
        return self.shape.n_norm

    @property
    def radial_r0(self) -> float:
        return self.shape.radial_r0

    @property
    def radial_dr(self) -> float:
        return self.shape.radial_dr

    @property
    def radial_intervals(self) -> int:
        return self.shape.radial_intervals

    @property
    def activation(self) -> str:
        return self.shape.activation

    @property
    def fitting_residual(self) -> list[bool]:
        return list(self.shape.fitting_residual)

    @property
    def n_interactions(self) -> int:
        return self.shape.n_interactions

    @property
    def node_residual(self) -> list[bool]:
        return list(self.shape.node_residual)

    @property
    def descriptor_size(self) -> int:
        return self.shape.descriptor_size

    @property
    def fitting_input_size(self) -> int:
        return self.shape.fitting_input_size

    @property
    def file_dtype(self) -> str:
        """'float64', 'float32' or 'mixed' (the dtypes of the tensors)."""
        dtypes = {str(array.dtype) for array in self.tensors.values()}
        return dtypes.pop() if len(dtypes) == 1 else "mixed"

    # -- networks ------------------------------------------------------------
    def _network(self, prefix: str, residual_flags) -> list[DenseLayer]:
        layers = []
        for layer, residual in enumerate(residual_flags):
            layers.append(
                DenseLayer(
                    weight=self.tensors[f"{prefix}.{layer}.weight"],
                    bias=self.tensors[f"{prefix}.{layer}.bias"],
                    timestep=self.tensors.get(f"{prefix}.{layer}.timestep"),
                    residual=bool(residual),
                )
            )
        layers.append(
            DenseLayer(
                weight=self.tensors[f"{prefix}.out.weight"],
                bias=self.tensors[f"{prefix}.out.bias"],
                timestep=None,
                residual=False,
            )
        )
        return layers

    def fitting_layers(self, type_index: int) -> list[DenseLayer]:
        """Hidden layers then the output layer ([1, width]) of the fitting net of a type."""
        return self._network(f"fitting.{type_index}", self.fitting_residual)

    def node_layers(self, type_index: int) -> list[DenseLayer]:
        """Hidden layers then the output layer ([M, width]) of the node net of a type."""
        if self.n_interactions != 1:
            raise ValueError("ModelFile: node networks exist only when n_interactions is 1")
        return self._network(f"node.{type_index}", self.node_residual)

    @property
    def network_parameter_count(self) -> int:
        """Number of values in all networks (weights, biases, timesteps) and energy_shift."""
        return int(sum(a.size for name, a in self.tensors.items() if not name.endswith("radial.table")))

    @property
    def table_value_count(self) -> int:
        """Number of values in the radial tables."""
        return int(sum(a.size for name, a in self.tensors.items() if name.endswith("radial.table")))

    # -- I/O ---------------------------------------------------------------------
    def validate(self) -> ModelShape:
        """Check the model against docs/model-format.md; raise ValueError if it breaks a rule."""
        return validate_model(self.metadata, self.tensors)

    def to_bytes(self, dtype: str | None = None, validate: bool = True) -> bytes:
        """The safetensors bytes of this model.

        dtype: 'float64', 'float32', or None to keep each tensor's dtype.
        """
        return _encode(self.metadata, self.tensors, dtype, validate)

    def write(self, path, dtype: str | None = None, validate: bool = True) -> None:
        """Write the model to ``path`` (str or os.PathLike), validated first.

        Atomic: the bytes go to a temporary file in the same folder, which
        then replaces ``path`` (through a symbolic link, its target), so a
        failed write (disk full, interruption) leaves an existing file as it
        was and never a truncated model.
        """
        encoded = self.to_bytes(dtype, validate)  # validate before creating the file
        write_atomically(path, encoded)


# -- output paths, checked before any work (training, convert-deepmd) -------------------------------


def same_or_inside(path, other) -> str | None:
    """'is' when ``path`` is the file or folder ``other`` (same file, or same resolved path),
    'is inside' when it lies inside the folder ``other``, else None."""
    path, other = os.fspath(path), os.fspath(other)
    try:
        if os.path.exists(path) and os.path.exists(other) and os.path.samefile(path, other):
            return "is"
    except OSError:
        pass
    real, other_real = os.path.realpath(path), os.path.realpath(other)
    if real == other_real:
        return "is"
    if os.path.isdir(other_real) and os.path.commonpath([real, other_real]) == other_real:
        return "is inside"
    return None


def check_output_path(path, what: str = "output", create_folder: bool = False) -> None:
    """Raise ValueError unless a model file can be written at ``path``: not a folder, in an
    existing folder that is writable (or, with ``create_folder``, one that can be made), and
    not an existing read-only file (checked before any work)."""
    path = os.fspath(path)
    if not path:
        raise ValueError(f"{what}: expected a file path, found ''")
    if os.path.isdir(path):
        raise ValueError(f"{what} {path!r}: is a folder; expected a file path")
    if path.endswith(os.sep) or (os.altsep and path.endswith(os.altsep)):
        raise ValueError(f"{what} {path!r}: ends with a path separator (a folder); expected a file path")
    # The folder the file will be written in: write_atomically writes where a symbolic link points.
    folder = os.path.dirname(os.path.realpath(path))
    if create_folder and not os.path.exists(folder):
        check_folder_path(folder, what)
        return
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise ValueError(f"{what} {path!r}: cannot be made ({folder!r} is not a folder)")
    if not os.path.isdir(folder):
        raise ValueError(f"{what} {path!r}: the folder {folder!r} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"{what} {path!r}: the folder {folder!r} is not writable")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise ValueError(f"{what} {path!r}: the file exists and is not writable")


def check_folder_path(path, what: str) -> None:
    """Raise ValueError unless ``path`` is a folder or can be made as one (its nearest existing
    ancestor is a writable folder)."""
    path = os.path.abspath(os.fspath(path))
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise ValueError(f"{what} {path!r}: exists and is not a folder")
        if not os.access(path, os.W_OK | os.X_OK):
            raise ValueError(f"{what} {path!r}: the folder is not writable")
        return
    ancestor = os.path.dirname(path)
    while not os.path.exists(ancestor) and os.path.dirname(ancestor) != ancestor:
        ancestor = os.path.dirname(ancestor)
    if not os.path.isdir(ancestor):
        raise ValueError(f"{what} {path!r}: cannot be made ({ancestor!r} is not a folder)")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ValueError(f"{what} {path!r}: cannot be made (the folder {ancestor!r} is not writable)")


def write_atomically(path, data: bytes) -> None:
    """Replace the regular file at ``path`` by ``data`` at once (temporary file + os.replace).

    A new file gets the permissions open() would give it (the temporary file is
    created with mode 0o666 less the umask); an existing one keeps its mode.
    On any failure the temporary file is removed and ``path`` is untouched.
    Anything else at ``path`` (a device such as /dev/null, a FIFO) is written
    in place, as open() would.
    """
    target = os.path.realpath(os.fspath(path))
    if os.path.isdir(target):
        raise IsADirectoryError(f"cannot write the model: {os.fspath(path)!r} is a directory")
    if os.path.exists(target) and not os.path.isfile(target):  # a device, a FIFO: no temporary file beside it
        with open(target, "wb") as stream:
            stream.write(data)
        return
    temporary = temporary_path(target)
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        replace_file(temporary, path)
    finally:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass


def temporary_path(target, suffix: str = ".tmp") -> str:
    """A new hidden path beside ``target`` for the file that will replace it: .NAME.RANDOM``suffix``, NAME cut so
    that the name stays within the 255 bytes file systems allow (a legal 250-byte name got a temporary name too
    long to create)."""
    import secrets

    folder, name = os.path.split(os.fspath(target))
    token = secrets.token_hex(6)
    room = 255 - len(os.fsencode(f"..{token}{suffix}"))
    return os.path.join(folder, f".{os.fsdecode(os.fsencode(name)[:room])}.{token}{suffix}")


def replace_file(temporary, path) -> None:
    """Move the complete file ``temporary`` over ``path``: through a symbolic link, its target; an existing regular
    file keeps its mode (a new one keeps the temporary file's); anything else at ``path`` (a device, a FIFO) gets the
    bytes written in place, as open() would, and ``temporary`` stays for the caller to remove."""
    import shutil
    import stat

    target = os.path.realpath(os.fspath(path))
    try:
        existing = os.stat(target)
    except FileNotFoundError:
        existing = None
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        with open(temporary, "rb") as source, open(target, "wb") as stream:
            shutil.copyfileobj(source, stream)
        return
    if existing is not None:
        os.chmod(temporary, stat.S_IMODE(existing.st_mode))
    os.replace(temporary, target)


def _encode(metadata, tensors, dtype, validate) -> bytes:
    if dtype is not None and np.dtype(dtype) not in _NUMPY_TO_SAFETENSORS:
        raise ValueError(f"ModelFile: dtype: expected 'float64' or 'float32', found {dtype!r}")
    converted = {}
    for name, array in tensors.items():
        array = np.asarray(array)
        if dtype is not None:
            array = array.astype(dtype)
        converted[name] = array
    if validate:
        validate_model(metadata, converted)
    header: dict = {"__metadata__": {str(k): v for k, v in metadata.items()}}
    chunks = []
    offset = 0
    for name in sorted(converted):
        array = converted[name]
        data_type = _NUMPY_TO_SAFETENSORS.get(array.dtype)
        if data_type is None:
            raise ValueError(f"ModelFile: tensor '{name}': expected float64 or float32, found {array.dtype}")
        raw = np.ascontiguousarray(array, dtype=_SAFETENSORS_DTYPES[data_type]).tobytes()
        header[name] = {"dtype": data_type, "shape": [int(s) for s in array.shape], "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    header_bytes = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    # Pad with spaces so that the data starts 8-byte aligned (as the reference writer does).
    header_bytes += b" " * (-(8 + len(header_bytes)) % 8)
    return struct.pack("<Q", len(header_bytes)) + header_bytes + b"".join(chunks)


def write_model(path, metadata: dict, tensors: dict, dtype: str | None = "float64", validate: bool = True) -> None:
    """Write a model file (safetensors) at ``path``.

    metadata: str -> str (the ``__metadata__``); tensors: name -> array, stored
    in sorted name order, little-endian, converted to ``dtype`` ('float64' or
    'float32'; None keeps each tensor's own dtype). The model is validated
    first unless ``validate`` is False (used by tests to write broken files).
    """
    ModelFile(dict(metadata), dict(tensors)).write(path, dtype=dtype, validate=validate)


# The container limits of the C++ loader (GraphModelLoader.cpp MaxHeaderBytes, JsonValue.cpp MaxDepth).
_MAX_HEADER_BYTES = 100 * 1024 * 1024
_MAX_JSON_DEPTH = 64


def _json_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in JSON text (brackets inside strings do not count)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _reject_duplicate_keys(pairs):
    result = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def decode_safetensors(buffer: bytes, source: str | None = None) -> tuple[dict, dict]:
    """Split safetensors bytes into (metadata, tensors) checking the container rules only."""
    errors = _Errors(source)
    buffer = memoryview(buffer).cast("B")
    if len(buffer) < 8:
        raise errors.error(f"header length: expected 8 bytes, found a file of {len(buffer)} bytes")
    (header_length,) = struct.unpack("<Q", buffer[:8])
    available = len(buffer) - 8
    if header_length == 0 or header_length > available or header_length > _MAX_HEADER_BYTES:
        problem = (f"found {header_length}, but the file ends after these 8 bytes" if available == 0 else
                   f"expected 1 to {min(available, _MAX_HEADER_BYTES)} bytes (the rest of the file), found {header_length}")
        raise errors.error(f"header length: {problem} (truncated or not a safetensors file)")
    header_bytes = bytes(buffer[8 : 8 + header_length])
    data = buffer[8 + header_length :]
    try:
        text = header_bytes.decode("utf-8")
        depth = _json_depth(text)
        if depth > _MAX_JSON_DEPTH:
            raise ValueError(f"nesting deeper than {_MAX_JSON_DEPTH} levels ({depth})")
        header = json.loads(text, object_pairs_hook=_reject_duplicate_keys)
        if _has_lone_surrogate(header):
            raise ValueError("a string escapes a lone surrogate such as \\ud800, which is not valid Unicode")
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        message = str(exc).encode("utf-8", "backslashreplace").decode("utf-8")
        raise errors.error(f"header: expected a UTF-8 JSON object, found invalid JSON ({_shortened(message)})") from None
    if not isinstance(header, dict):
        raise errors.error(f"header: expected a JSON object, found {type(header).__name__}")
    if "__metadata__" not in header:
        raise errors.error("'__metadata__': expected an object of strings, found the key missing")
    metadata = header.pop("__metadata__")
    if not isinstance(metadata, dict):
        raise errors.error(f"'__metadata__': expected an object of strings, found {metadata!r}")
    for key, value in metadata.items():
        if not isinstance(value, str):
            raise errors.metadata(key, "a string value", value)
    entries = []
    for name, entry in header.items():
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise errors.tensor(name, "an entry with exactly dtype, shape and data_offsets", json.dumps(entry))
        data_type = entry["dtype"]
        if not isinstance(data_type, str) or data_type not in _SAFETENSORS_DTYPES:
            raise errors.tensor(name, "dtype 'F64' or 'F32'", _shortened(json.dumps(data_type)))
        shape = entry["shape"]
        if (not isinstance(shape, list) or len(shape) > MAX_TENSOR_RANK
                or not all(_is_int(s) and 0 <= s <= MAX_TENSOR_ELEMENTS for s in shape)):
            raise errors.tensor(name, f"a shape of at most {MAX_TENSOR_RANK} integers in [0, 2^40]",
                                _shortened(json.dumps(shape)))
        if math.prod(shape) > MAX_TENSOR_ELEMENTS:
            raise errors.tensor(name, "at most 2^40 elements", _shape_text(shape))
        offsets = entry["data_offsets"]
        if not (isinstance(offsets, list) and len(offsets) == 2
                and all(_is_int(v) and 0 <= v <= MAX_DATA_OFFSET for v in offsets)):
            raise errors.tensor(name, "data_offsets [begin, end] of two integers in [0, 2^62]",
                                _shortened(json.dumps(offsets)))
        entries.append((offsets[0], offsets[1], name, data_type, shape))
    entries.sort(key=lambda e: (e[0], e[1]))
    position = 0
    previous = None
    tensors = {}
    for begin, end, name, data_type, shape in entries:
        if begin != position:
            what = (f"overlaps tensor '{previous[0]}' [{previous[1]}, {previous[2]}]" if begin < position
                    else f"leaves a gap of {begin - position} bytes")
            raise errors.tensor(name, f"data_offsets beginning at {position}", f"[{begin}, {end}] ({what})")
        previous = (name, begin, end)
        itemsize = _SAFETENSORS_DTYPES[data_type].itemsize
        numel = math.prod(shape)
        if end - begin != numel * itemsize:
            raise errors.tensor(
                name,
                f"data_offsets spanning {numel * itemsize} bytes (shape {_shape_text(shape)} of {data_type})",
                f"[{begin}, {end}] ({end - begin} bytes)",
            )
        if end > len(data):
            raise errors.tensor(name, f"data_offsets ending within the {len(data)} data bytes", f"[{begin}, {end}]")
        array = np.frombuffer(data, dtype=_SAFETENSORS_DTYPES[data_type], count=numel, offset=begin)
        tensors[name] = array.reshape(shape).astype(array.dtype.newbyteorder("="), copy=True)
        position = end
    if position != len(data):
        raise errors.error(
            f"data_offsets: expected the tensors to cover all {len(data)} data bytes, found {position} covered"
        )
    return metadata, tensors


def read_model_bytes(path) -> bytes:
    """The bytes of a model file at `path` (str or os.PathLike), read once.

    A FIFO or a device has no size to check first: its first 8 bytes must begin
    a safetensors header, so that /dev/zero is refused at once (a ValueError
    starting with ``ModelFile``) instead of read until memory runs out, as the
    C++ reader does. OSError when the path cannot be read.
    """
    source = os.fspath(path)
    with open(source, "rb") as stream:
        buffer = b""
        if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
            buffer = stream.read(8)
            header_length = struct.unpack("<Q", buffer)[0] if len(buffer) == 8 else None
            if header_length is not None and not 1 <= header_length <= _MAX_HEADER_BYTES:
                raise _Errors(source).error(
                    f"header length: expected 1 to {_MAX_HEADER_BYTES} bytes, found {header_length} (not a "
                    "safetensors file; it is not a regular file, so reading stopped after its first 8 bytes)")
        return buffer + stream.read()


def read_model(path_or_bytes, *, source: str | None = None) -> ModelFile:
    """Read and validate a model file.

    path_or_bytes: a path (str or os.PathLike) or the file's bytes (then
    `source`, if given, names them in error messages). Returns a ModelFile
    whose tensors keep the file's dtype. Raises ValueError (message starting
    with ``ModelFile``, naming the key, expected and found value) for any file
    that breaks a rule of docs/model-format.md, and OSError when the path
    cannot be read.
    """
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        buffer = bytes(path_or_bytes)
    else:
        source = os.fspath(path_or_bytes)
        buffer = read_model_bytes(source)
    metadata, tensors = decode_safetensors(buffer, source)
    validate_model(metadata, tensors, source)
    return ModelFile(metadata, tensors)


def convert_model_units(model: ModelFile, length_unit: str, energy_unit: str) -> ModelFile:
    """The same physical model expressed in other units (section 8).

    Lengths (cutoff, r_0, dr) are divided by the length factor; table
    derivatives f' and f'' are multiplied by it once and twice (the tables are
    dimensionless functions of r); the fitting networks' output layer and
    energy_shift are multiplied by the energy factor. Descriptors and the node
    networks are unchanged. Energies and forces in kJ/mol and kJ/mol/nm are
    then the same up to rounding.
    """
    if length_unit not in LENGTH_UNITS_NM:
        raise ValueError(f"ModelFile: length_unit: expected one of {list(LENGTH_UNITS_NM)}, found {length_unit!r}")
    if energy_unit not in ENERGY_UNITS_KJ_PER_MOL:
        raise ValueError(
            f"ModelFile: energy_unit: expected one of {list(ENERGY_UNITS_KJ_PER_MOL)}, found {energy_unit!r}"
        )
    # new length = old length * length_factor; new energy = old energy * energy_factor
    length_factor = LENGTH_UNITS_NM[model.length_unit] / LENGTH_UNITS_NM[length_unit]
    energy_factor = ENERGY_UNITS_KJ_PER_MOL[model.energy_unit] / ENERGY_UNITS_KJ_PER_MOL[energy_unit]
    metadata = dict(model.metadata)
    metadata["length_unit"] = length_unit
    metadata["energy_unit"] = energy_unit
    r0 = model.radial_r0 * length_factor
    cutoff = model.cutoff * length_factor
    intervals = model.radial_intervals
    metadata["cutoff"] = repr(cutoff)
    metadata["radial_r0"] = repr(r0)
    metadata["radial_dr"] = repr((cutoff - r0) / intervals)
    tensors = {name: array.copy() for name, array in model.tensors.items()}
    for name in ("radial.table", "interaction.radial.table"):
        if name in tensors:
            table = tensors[name]
            table[..., 1, :] /= length_factor
            table[..., 2, :] /= length_factor**2
    for type_index in range(model.n_types):
        tensors[f"fitting.{type_index}.out.weight"] *= energy_factor
        tensors[f"fitting.{type_index}.out.bias"] *= energy_factor
    tensors["energy_shift"] *= energy_factor
    return ModelFile(metadata, tensors)
