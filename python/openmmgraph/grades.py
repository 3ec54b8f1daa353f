"""Random but well-formed models of the benchmark grades, benchmark systems and FLOP counts.

See docs/benchmarks.md. Conventions of the generated models (the project's
choices where benchmarks.md is silent):

- Cut-off 0.6 nm, r_0 = 0 (override with ``radial_r0``), K = 400 intervals,
  dr = (r_c - r_0) / K, n_norm 4, activation tanh. ``cutoff`` and
  ``radial_r0`` are given in nm and written in the model's length unit,
  rounded to 12 significant digits (0.6 nm is written as 6 angstrom); dr is
  (r_c - r_0) / K of the written values.
- The generated model is the same physical model whatever its units: radial
  functions are functions of x = r / r_c, and the fitting networks' output
  layers and energy_shift are divided by the energy unit's size in kJ/mol, so
  energies are O(1) kJ/mol per particle and forces O(1-100) kJ/mol/nm at
  liquid density (100 particles / nm^3) in every unit system.
- Radial functions: R(x) = g(x) * (1 - x^2)^3 with g a random sum of eight
  Gaussians of width 1/8 centred on [0, 1]; f, f' and f'' at the knots are
  analytic (float64), and the last knot (x = 1, where all three vanish
  analytically) is stored as exactly 0.0.
- Hidden layers: weights N(0, 1/in), biases N(0, 0.1^2). A hidden layer whose
  width equals its input size is residual, with a timestep drawn uniformly
  from [0.1, 0.5] per channel. Output layers: weights N(0, 1/width), times 3 (and
  divided by the energy unit) for the fitting networks.
- Node network (n_interactions = 1): two hidden layers of width M (the
  second, and the first too when the descriptor size is M, residual with a
  timestep), then a linear layer with M outputs.
"""

from __future__ import annotations

import json
import math
import numbers

import numpy as np

from .modelfile import (
    ACTIVATIONS,
    ENERGY_UNITS_KJ_PER_MOL,
    FORMAT_NAME,
    FORMAT_VERSION,
    LENGTH_UNITS_NM,
    MAX_CHANNELS,
    MAX_INTERVALS,
    MAX_LAYERS,
    MAX_TYPES,
    MAX_WIDTH,
    ModelFile,
)

# The grades of docs/benchmarks.md.
GRADES: dict[str, dict] = {
    "small": dict(n_types=2, l_max=1, n_channels=32, n_axis=8, descriptor_l_sum=True,
                  fitting_widths=(128, 128, 128), n_interactions=0),
    "medium": dict(n_types=4, l_max=2, n_channels=64, n_axis=8, descriptor_l_sum=False,
                   fitting_widths=(240, 240, 240), n_interactions=0),
    "large": dict(n_types=4, l_max=2, n_channels=128, n_axis=16, descriptor_l_sum=False,
                  fitting_widths=(256, 256, 256), n_interactions=1),
}
DEFAULT_CUTOFF_NM = 0.6
DEFAULT_RADIAL_R0_NM = 0.0
DEFAULT_RADIAL_INTERVALS = 400
DEFAULT_N_NORM = 4.0
DEFAULT_ACTIVATION = "tanh"

ELEMENT_SYMBOLS = (
    "H He Li Be B C N O F Ne Na Mg Al Si P S Cl Ar K Ca Sc Ti V Cr Mn Fe Co Ni Cu Zn Ga Ge As Se Br Kr "
    "Rb Sr Y Zr Nb Mo Tc Ru Rh Pd Ag Cd In Sn Sb Te I Xe Cs Ba La Ce Pr Nd Pm Sm Eu Gd Tb Dy Ho Er Tm Yb "
    "Lu Hf Ta W Re Os Ir Pt Au Hg Tl Pb Bi Po At Rn"
).split()
_DEFAULT_TYPE_NAMES = ("H", "C", "N", "O", "F", "P", "S", "Cl")

_GAUSSIAN_COUNT = 8
_GAUSSIAN_WIDTH = 1.0 / 8.0  # in units of r_c
_RADIAL_AMPLITUDE = 0.35
_TIMESTEP_RANGE = (0.1, 0.5)
_BIAS_SCALE = 0.1
_FITTING_OUTPUT_SCALE = 3.0


def atomic_number(type_name: str) -> int:
    """Atomic number of an element symbol (case-sensitive, e.g. 'Cl'); 0 when not an element."""
    return ELEMENT_SYMBOLS.index(type_name) + 1 if type_name in ELEMENT_SYMBOLS else 0


def _round_significant(value: float, digits: int = 12) -> float:
    return float(f"{value:.{digits}g}")


def radial_table(rng: np.random.Generator, n_types: int, l_max: int, n_channels: int,
                 r0: float, dr: float, intervals: int, cutoff: float) -> np.ndarray:
    """A random smooth table [T, T, L+1, K+1, 3, M] (f, f', f'' in the given length unit).

    R(r) = g(x) (1 - x^2)^3 with x = r / cutoff and g a random sum of Gaussians
    in x; derivatives are analytic; the last knot is exactly 0.
    """
    knots = r0 + np.arange(intervals + 1, dtype=np.float64) * dr
    x = knots / cutoff  # [K+1]
    centres = np.linspace(0.0, 1.0, _GAUSSIAN_COUNT)
    coefficients = rng.standard_normal((n_types, n_types, l_max + 1, n_channels, _GAUSSIAN_COUNT))
    coefficients *= _RADIAL_AMPLITUDE
    offset = x[:, None] - centres[None, :]  # [K+1, P]
    inv_var = 1.0 / _GAUSSIAN_WIDTH**2
    gaussian = np.exp(-0.5 * offset**2 * inv_var)
    gaussian_d1 = -offset * inv_var * gaussian
    gaussian_d2 = (offset**2 * inv_var**2 - inv_var) * gaussian
    g = np.einsum("abkmp,qp->abkqm", coefficients, gaussian)  # d/dx^n of g, [T, T, L+1, K+1, M]
    g1 = np.einsum("abkmp,qp->abkqm", coefficients, gaussian_d1)
    g2 = np.einsum("abkmp,qp->abkqm", coefficients, gaussian_d2)
    one_minus = 1.0 - x * x
    switch = one_minus**3
    switch_d1 = -6.0 * x * one_minus**2
    switch_d2 = 6.0 * one_minus * (5.0 * x * x - 1.0)
    s0, s1, s2 = (v[None, None, None, :, None] for v in (switch, switch_d1, switch_d2))
    value = g * s0
    first = (g1 * s0 + g * s1) / cutoff
    second = (g2 * s0 + 2.0 * g1 * s1 + g * s2) / cutoff**2
    table = np.stack((value, first, second), axis=4)  # [T, T, L+1, K+1, 3, M]
    table[:, :, :, -1, :, :] = 0.0
    return table


def _dense_network(rng, prefix: str, input_size: int, widths, output_size: int,
                   output_scale: float) -> tuple[dict, list[bool]]:
    """Tensors of a network of section 7 and its residual flags."""
    tensors = {}
    residual = []
    in_size = input_size
    for layer, width in enumerate(widths):
        tensors[f"{prefix}.{layer}.weight"] = rng.standard_normal((width, in_size)) / math.sqrt(in_size)
        tensors[f"{prefix}.{layer}.bias"] = _BIAS_SCALE * rng.standard_normal(width)
        is_residual = width == in_size
        if is_residual:
            tensors[f"{prefix}.{layer}.timestep"] = rng.uniform(*_TIMESTEP_RANGE, size=width)
        residual.append(is_residual)
        in_size = width
    tensors[f"{prefix}.out.weight"] = output_scale * rng.standard_normal((output_size, in_size)) / math.sqrt(in_size)
    tensors[f"{prefix}.out.bias"] = output_scale * _BIAS_SCALE * rng.standard_normal(output_size)
    return tensors, residual


def make_model(grade: str = "small", seed: int = 0, dtype: str = "float64", l_max=None,
               descriptor_l_sum=None, n_interactions=None, n_types=None, n_channels=None,
               n_axis=None, fitting_widths=None, radial_intervals=None, activation=None,
               length_unit: str = "nm", energy_unit: str = "kJ/mol", cutoff=None,
               type_names=None, radial_r0=None) -> ModelFile:
    """A random, well-formed model of a benchmark grade (docs/benchmarks.md).

    grade: 'small', 'medium' or 'large'; every other argument left None takes
    the grade's value. cutoff and radial_r0 are in nm (defaults 0.6 and 0.0)
    and are written in ``length_unit``. type_names: list of T names (defaults
    H, C, N, O, ... ; their atomic numbers are looked up). dtype: 'float64' or
    'float32', the dtype of the returned tensors. The same seed and shape give
    the same physical model in any units. Raises ValueError for a bad argument.
    """
    if grade not in GRADES:
        raise ValueError(f"make_model: grade: expected one of {list(GRADES)}, found {grade!r}")
    if length_unit not in LENGTH_UNITS_NM:
        raise ValueError(f"make_model: length_unit: expected one of {list(LENGTH_UNITS_NM)}, found {length_unit!r}")
    if energy_unit not in ENERGY_UNITS_KJ_PER_MOL:
        raise ValueError(
            f"make_model: energy_unit: expected one of {list(ENERGY_UNITS_KJ_PER_MOL)}, found {energy_unit!r}"
        )
    if dtype not in ("float64", "float32"):
        raise ValueError(f"make_model: dtype: expected 'float64' or 'float32', found {dtype!r}")
    # Integers must be integers (1.5 was taken as 1) and names a list (the string "OH" was split into O and H).
    for name, value in (("seed", seed), ("l_max", l_max), ("n_interactions", n_interactions), ("n_types", n_types),
                        ("n_channels", n_channels), ("n_axis", n_axis), ("radial_intervals", radial_intervals)):
        if value is not None:
            _check_integer("make_model", name, value)
    if seed < 0:
        raise ValueError(f"make_model: seed: expected an integer >= 0, found {seed}")
    if fitting_widths is not None:
        if isinstance(fitting_widths, (str, bytes)) or not hasattr(fitting_widths, "__iter__"):
            raise ValueError(f"make_model: fitting_widths: expected a list of integers, found {fitting_widths!r}")
        for width in fitting_widths:
            _check_integer("make_model", "fitting_widths", width)
    if descriptor_l_sum is not None and not isinstance(descriptor_l_sum, (bool, np.bool_)):
        raise ValueError(f"make_model: descriptor_l_sum: expected True or False, found {descriptor_l_sum!r}")
    if isinstance(type_names, (str, bytes)):
        raise ValueError(f"make_model: type_names: expected a list of type names, found the string {type_names!r}")
    for name, value in (("cutoff", cutoff), ("radial_r0", radial_r0)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)
                                  or not math.isfinite(value * value)):
            raise ValueError(f"make_model: {name}: expected a finite number of nm (whose square is finite), "
                             f"found {value!r}")
    settings = dict(GRADES[grade])
    if type_names is not None:
        type_names = list(type_names)
        if n_types is not None and n_types != len(type_names):
            raise ValueError(f"make_model: n_types: expected {len(type_names)} (the type names given), found {n_types}")
        n_types = len(type_names)
    overrides = dict(l_max=l_max, descriptor_l_sum=descriptor_l_sum, n_interactions=n_interactions,
                     n_types=n_types, n_channels=n_channels, n_axis=n_axis, fitting_widths=fitting_widths)
    settings.update({key: value for key, value in overrides.items() if value is not None})
    n_types = int(settings["n_types"])
    l_max = int(settings["l_max"])
    n_channels = int(settings["n_channels"])
    n_axis = int(settings["n_axis"])
    n_interactions = int(settings["n_interactions"])
    l_sum = bool(settings["descriptor_l_sum"])
    widths = [int(w) for w in settings["fitting_widths"]]
    intervals = int(radial_intervals if radial_intervals is not None else DEFAULT_RADIAL_INTERVALS)
    activation = activation if activation is not None else DEFAULT_ACTIVATION
    if activation not in ACTIVATIONS:
        raise ValueError(f"make_model: activation: expected one of {list(ACTIVATIONS)}, found {activation!r}")
    if type_names is None:
        type_names = list(_DEFAULT_TYPE_NAMES[:n_types]) + [f"T{index}" for index in range(len(_DEFAULT_TYPE_NAMES), n_types)]
    # The format's limits (modelfile.MAX_*), checked before any table or weight is made.
    for name, value, low, high in (("n_types", n_types, 1, MAX_TYPES), ("l_max", l_max, 0, 2),
                                   ("n_channels", n_channels, 1, MAX_CHANNELS), ("n_axis", n_axis, 1, n_channels),
                                   ("n_interactions", n_interactions, 0, 1), ("radial_intervals", intervals, 1, MAX_INTERVALS)):
        if not low <= value <= high:
            raise ValueError(f"make_model: {name}: expected an integer in [{low}, {high}], found {value}")
    if len(widths) > MAX_LAYERS or any(not 1 <= w <= MAX_WIDTH for w in widths):
        raise ValueError(f"make_model: fitting_widths: expected at most {MAX_LAYERS} widths from 1 to {MAX_WIDTH}, found {widths}")

    length_scale = LENGTH_UNITS_NM[length_unit]
    energy_scale = ENERGY_UNITS_KJ_PER_MOL[energy_unit]
    cutoff_nm = DEFAULT_CUTOFF_NM if cutoff is None else float(cutoff)
    r0_nm = DEFAULT_RADIAL_R0_NM if radial_r0 is None else float(radial_r0)
    if not (cutoff_nm > 0 and 0 <= r0_nm < cutoff_nm):
        raise ValueError(f"make_model: expected 0 <= radial_r0 < cutoff (nm), found radial_r0 = {r0_nm}, cutoff = {cutoff_nm}")
    model_cutoff = _round_significant(cutoff_nm / length_scale)
    model_r0 = _round_significant(r0_nm / length_scale)
    model_dr = (model_cutoff - model_r0) / intervals

    rng = np.random.default_rng(seed)
    degrees = 1 if l_sum else l_max + 1
    descriptor_size = degrees * n_channels * n_axis
    tensors: dict[str, np.ndarray] = {
        "radial.table": radial_table(rng, n_types, l_max, n_channels, model_r0, model_dr, intervals, model_cutoff)
    }
    fitting_residual: list[bool] = []
    for type_index in range(n_types):
        network, fitting_residual = _dense_network(
            rng, f"fitting.{type_index}", descriptor_size * (1 + n_interactions), widths, 1,
            _FITTING_OUTPUT_SCALE / energy_scale
        )
        tensors.update(network)
    tensors["energy_shift"] = rng.uniform(-1.0, 1.0, size=n_types) / energy_scale
    metadata = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "length_unit": length_unit,
        "energy_unit": energy_unit,
        "type_names": json.dumps(type_names),
        "type_atomic_numbers": json.dumps([atomic_number(name) for name in type_names]),
        "cutoff": repr(model_cutoff),
        "n_channels": str(n_channels),
        "n_axis": str(n_axis),
        "l_max": str(l_max),
        "descriptor_l_sum": "true" if l_sum else "false",
        "n_norm": repr(DEFAULT_N_NORM),
        "radial_r0": repr(model_r0),
        "radial_dr": repr(model_dr),
        "radial_intervals": str(intervals),
        "activation": activation,
        "fitting_residual": json.dumps(fitting_residual),
        "n_interactions": str(n_interactions),
    }
    if n_interactions == 1:
        tensors["interaction.radial.table"] = radial_table(
            rng, n_types, l_max, n_channels, model_r0, model_dr, intervals, model_cutoff
        )
        node_residual: list[bool] = []
        for type_index in range(n_types):
            network, node_residual = _dense_network(
                rng, f"node.{type_index}", descriptor_size, [n_channels, n_channels], n_channels, 1.0
            )
            tensors.update(network)
        metadata["node_residual"] = json.dumps(node_residual)
    model = ModelFile(metadata, {name: np.asarray(array, dtype=dtype) for name, array in tensors.items()})
    model.validate()
    return model


def _check_integer(function: str, name: str, value) -> None:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
        raise ValueError(f"{function}: {name}: expected an integer, found {value!r}")


def lattice_system(n: int, density: float = 100.0, n_types: int = 2, seed: int = 0):
    """A benchmark system of docs/benchmarks.md.

    A cubic periodic box of side (n / density)^(1/3) nm (density in
    particles / nm^3); particles on the first n sites of an m x m x m lattice
    (m = ceil(n^(1/3)), site (ix, iy, iz) at ((i + 1/2) * spacing), z fastest),
    each moved by a uniform jitter in [-0.15, 0.15] * spacing per coordinate
    (drawn first from numpy's default_rng(seed)), types uniform in [0, n_types)
    (drawn next). Returns (positions [n, 3] nm float64, types [n] int64,
    box [3, 3] nm float64 with rows a, b, c).
    """
    _check_integer("lattice_system", "n", n)
    _check_integer("lattice_system", "n_types", n_types)
    _check_integer("lattice_system", "seed", seed)
    if n < 1:
        raise ValueError(f"lattice_system: n: expected >= 1, found {n}")
    if n_types < 1:
        raise ValueError(f"lattice_system: n_types: expected >= 1, found {n_types}")
    if seed < 0:
        raise ValueError(f"lattice_system: seed: expected >= 0, found {seed}")
    if isinstance(density, bool) or not isinstance(density, numbers.Real) or not (math.isfinite(density) and density > 0):
        raise ValueError(f"lattice_system: density: expected a finite number > 0, found {density!r}")
    side = (n / density) ** (1.0 / 3.0)
    if not (math.isfinite(side) and side > 0 and math.isfinite(side * side * side)):
        # An infinite density gave a box of side 0 (every particle at 0), a tiny one an infinite box (NaN positions).
        raise ValueError(f"lattice_system: density {density!r} gives a box of side {side!r} nm for {n} particles; "
                         "expected particles per nm^3 (100 for the benchmarks)")
    m = math.ceil(round(n ** (1.0 / 3.0), 9))
    while m**3 < n:
        m += 1
    spacing = side / m
    sites = np.arange(n)
    grid = np.stack((sites // (m * m), (sites // m) % m, sites % m), axis=1).astype(np.float64)
    rng = np.random.default_rng(seed)
    jitter = rng.uniform(-0.15, 0.15, size=(n, 3)) * spacing
    positions = (grid + 0.5) * spacing + jitter
    types = rng.integers(0, n_types, size=n).astype(np.int64)
    box = np.diag([side, side, side]).astype(np.float64)
    return positions, types, box


def _network_multiply_adds(layers) -> int:
    return sum(layer.in_size * layer.out_size for layer in layers)


def multiply_adds_per_edge(model: ModelFile) -> int:
    """c_e = (L+1) * M * 6 + (L+1)^2 * M, twice with interactions (docs/benchmarks.md)."""
    degrees = model.l_max + 1
    per_table = degrees * model.n_channels * 6 + degrees * degrees * model.n_channels
    return per_table * (1 + model.n_interactions)


def multiply_adds_per_node(model: ModelFile) -> int:
    """c_n = (L+1)^2 * M * M_axis + sum over layers of in * out + last width (docs/benchmarks.md).

    The fitting network's layers count, its output layer being the "last
    width" term (width * 1). With interactions, D2 adds another
    (L+1)^2 * M * M_axis and the node network's layers (its output layer
    width * M included) add their in * out. Per-type networks may differ in
    shape; the count uses the most expensive type.
    """
    contraction = (model.l_max + 1) ** 2 * model.n_channels * model.n_axis
    fitting = max(_network_multiply_adds(model.fitting_layers(a)) for a in range(model.n_types))
    total = contraction + fitting
    if model.n_interactions == 1:
        node = max(_network_multiply_adds(model.node_layers(a)) for a in range(model.n_types))
        total += contraction + node
    return total


def flops_per_edge(model: ModelFile) -> int:
    """2 * 3 * c_e, the per-edge share of ``model_flops`` (docs/benchmarks.md)."""
    return 2 * 3 * multiply_adds_per_edge(model)


def flops_per_node(model: ModelFile) -> int:
    """2 * 3 * c_n (see multiply_adds_per_node)."""
    return 2 * 3 * multiply_adds_per_node(model)


def model_flops(model: ModelFile, n_edges: int, n_nodes: int) -> int:
    """Operation count of one energy + forces evaluation: 2 * 3 * (edges * c_e + nodes * c_n).

    n_edges counts ordered pairs (i, j) inside the cut-off; n_nodes particles.
    """
    return 2 * 3 * (int(n_edges) * multiply_adds_per_edge(model) + int(n_nodes) * multiply_adds_per_node(model))
