"""DeePMD-kit se_e2_a energy models -> the openmm-graph model format.

The DeePMD-kit model is read through DeePMD-kit's own backend-independent
serialisation (``deepmd.pt.utils.serialization.serialize_from_file`` for a
frozen ``.pth`` or a checkpoint ``.pt`` of the PyTorch backend), or given as
that dictionary. The mapping (docs/deepmd-import.md has the derivation):

DeePMD-kit's environment-matrix row of neighbour j of center i (type a,
neighbour type b, r = |x_j - x_i|, u = (x_j - x_i) / r, s = sw(r) / r with
DeePMD's switch between rcut_smth and rcut) is normalised per center type and
neighbour slot with davg/dstd:

    row = ((s - davg0) / dstd0, (s u_x - davg1) / dstd1, ... )

and the descriptor is, with G_ab the embedding net (input row[0]) and
nnei = sum(sel),

    X = (1 / nnei) sum_j row_j^T G_ab(row_j[0])      (4 x M)
    D = X^T X[:, :axis_neuron]                        (M x M_axis, flat k * M_axis + k')

With davg = 0 (set_davg_zero, required) and dstd constant over the slots of
one neighbour type, this is the format's descriptor with L = 1, summed
degrees, n_norm = nnei, M = neuron[-1], M_axis = axis_neuron, and

    R[a][b][0][k](r) = G_ab(s / dstd0_ab)_k * s / dstd0_ab
    R[a][b][1][k](r) = G_ab(s / dstd0_ab)_k * s / dstd1_ab

(the l = 1 harmonics of the format are u_x, u_y, u_z: DeePMD's columns 1-3).
The tables are built by forward-mode autograd (value, f', f'') on a uniform
grid whose r_0 is lowered slightly (to the nearest value <= the requested
one) so that rcut_smth is a knot (s is only C2 there), as
``training.compress`` does for its ``deepmd`` radial form. The fitting
networks map layer by layer (DeePMD's ``resnet`` with equal widths ->
residual, ``idt`` -> timestep); energy_shift[a] = bias_atom_e[a] +
out_bias[a]. Units: eV and Angstrom.

Everything else is refused with a DeepmdConversionError that says why.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import types as _types
from dataclasses import dataclass

import numpy as np
import torch

from ..grades import atomic_number
from ..modelfile import FORMAT_NAME, FORMAT_VERSION, ModelFile

DEFAULT_INTERVALS = 2000
DEFAULT_R0 = 0.5  # Angstrom

# Activations of DeePMD-kit (deepmd.pt.utils.utils.ActivationFn) that are smooth
# enough (C2) to tabulate; the fitting network of the format has tanh and silu only.
def _gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


# Written out so that forward-mode AD gives second derivatives (torch's silu and
# softplus kernels have no forward AD of their backward).
_EMBEDDING_ACTIVATIONS = {
    "tanh": torch.tanh,
    "silu": lambda x: x * torch.sigmoid(x),
    "sigmoid": torch.sigmoid,
    "softplus": lambda x: torch.where(x > 20.0, x, torch.log1p(torch.exp(torch.clamp(x, max=20.0)))),
    "gelu": _gelu_tanh,
    "gelu_tf": _gelu_tanh,
    "none": lambda x: x,
    "linear": lambda x: x,
}
_FITTING_ACTIVATIONS = ("tanh", "silu")


class DeepmdConversionError(ValueError):
    """A DeePMD-kit model that cannot be mapped exactly onto the format."""


def _refuse(message: str):
    raise DeepmdConversionError(f"convert-deepmd: {message}")


# The schemas of the ops of DeePMD-kit's PyTorch op library (3.2.0, as it registers them).  A model frozen where that
# library was loaded (any DeePMD-kit whose torch matches its wheel's) calls them in the TorchScript of branches that
# conversion never runs (the compressed descriptor, the MPI border exchange); TorchScript's loader must still resolve
# them, so where the library cannot load they are declared without any kernel (bench/NOTES.md v68).
_DEEPMD_OP_SCHEMAS = (
    "tabulate_fusion_se_a(Tensor _0, Tensor _1, Tensor _2, Tensor _3, int _4) -> Tensor[] _0",
    "tabulate_fusion_se_atten(Tensor _0, Tensor _1, Tensor _2, Tensor _3, Tensor _4, int _5, bool _6) -> Tensor[] _0",
    "tabulate_fusion_se_r(Tensor _0, Tensor _1, Tensor _2, int _3) -> Tensor[] _0",
    "tabulate_fusion_se_t(Tensor _0, Tensor _1, Tensor _2, Tensor _3, int _4) -> Tensor[] _0",
    "tabulate_fusion_se_t_tebd(Tensor _0, Tensor _1, Tensor _2, Tensor _3, int _4) -> Tensor[] _0",
    "border_op(Tensor _0, Tensor _1, Tensor _2, Tensor _3, Tensor _4, Tensor _5, Tensor _6, Tensor _7, Tensor _8) "
    "-> Tensor[] _0",
    "border_op_backward(Tensor _0, Tensor _1, Tensor _2, Tensor _3, Tensor _4, Tensor _5, Tensor _6, Tensor _7, "
    "Tensor _8) -> Tensor _0",
)


def _ensure_deepmd_pytorch():
    """Import DeePMD-kit's PyTorch backend.

    A PyPI wheel of deepmd-kit carries a custom-op library compiled for one
    PyTorch version and refuses to import its PyTorch backend under another.
    Reading a model and the se_e2_a inference are pure PyTorch and need no
    custom op, so when the versions differ the op library's marker op is
    defined (empty) before the import and the backend runs without it.  The
    library's other ops are then declared (schemas only, no kernel), so that
    a model frozen with the library loaded, whose TorchScript calls them in
    branches that are never run here, can still be read.
    """
    try:
        from deepmd.env import GLOBAL_CONFIG
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise DeepmdConversionError(
            "convert-deepmd: DeePMD-kit is not installed (pip install deepmd-kit; its PyTorch "
            "backend needs no TensorFlow)"
        ) from error
    from packaging.version import Version

    built = _deepmd_torch_version(GLOBAL_CONFIG)
    if built and built != Version(torch.__version__).public:
        if not (hasattr(torch.ops, "deepmd") and hasattr(torch.ops.deepmd, "enable_mpi")):
            library = torch.library.Library("deepmd", "FRAGMENT")
            library.define("enable_mpi() -> ()")
            for schema in _DEEPMD_OP_SCHEMAS:
                if not hasattr(torch.ops.deepmd, schema.split("(", 1)[0]):
                    library.define(schema)
            _ensure_deepmd_pytorch.library = library  # keep it alive
    try:
        import deepmd.pt  # noqa: F401
    except ImportError as error:
        raise _backend_import_error(error) from error


def _deepmd_torch_version(config) -> str:
    """The torch version DeePMD-kit's op library was built for (its GLOBAL_CONFIG), or "" where it does not say."""
    return str(config.get("pt_version", ""))


def _backend_import_error(error: ImportError) -> DeepmdConversionError:
    """A missing dependency of DeePMD-kit's PyTorch backend (e3nn, ...), named."""
    module = getattr(error, "name", None) or ""
    if module.split(".")[0] == "deepmd":  # a part of DeePMD-kit itself: an older or broken installation
        hint = "; upgrade DeePMD-kit (pip install -U deepmd-kit)"
    elif module:
        hint = f"; install the package that provides the module '{module}' (e.g. pip install {module.split('.')[0]})"
    else:
        hint = ""
    return DeepmdConversionError(f"convert-deepmd: DeePMD-kit's PyTorch backend cannot be imported: {error}{hint}")


def load_deepmd(path: str) -> dict:
    """DeePMD-kit's serialisation (a dict) of a PyTorch-backend model (.pth frozen or .pt checkpoint)."""
    path = os.fsdecode(path)
    if not (path.endswith(".pth") or path.endswith(".pt")):
        _refuse(f"{path}: expected a DeePMD-kit PyTorch model (.pth from `dp --pt freeze` or a .pt "
                "checkpoint); convert other backends first with `dp convert-backend MODEL OUT.pth`")
    if not os.path.exists(path):
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
    if not os.path.isfile(path):
        _refuse(f"{path}: not a file")
    _ensure_deepmd_pytorch()
    try:
        from deepmd.pt.utils.serialization import serialize_from_file
    except ImportError as error:  # the backend's model registry imports every descriptor's dependencies
        raise _backend_import_error(error) from error

    try:
        return serialize_from_file(path)
    except DeepmdConversionError:
        raise
    except Exception as error:  # torch's and DeePMD-kit's readers raise anything (RuntimeError, KeyError, ...)
        _refuse_unreadable(path, error)


def _refuse_unreadable(path: str, error: Exception):
    """Refuse a model DeePMD-kit's reader failed on, naming the cause where it is a known kind of model."""
    text = str(error)
    if any(marker in text for marker in ("compress_info", "compress_data")):
        _refuse(f"{path}: a compressed model (`dp --pt compress`): its embedding nets are tables, which cannot be "
                "converted exactly; convert the frozen model from before `dp compress` instead")
    unknown = re.search(r"Unknown builtin op: (deepmd::\w+)", text)
    if unknown:  # an op of a newer DeePMD-kit than _DEEPMD_OP_SCHEMAS knows, where its op library cannot load
        from deepmd.env import GLOBAL_CONFIG

        built = _deepmd_torch_version(GLOBAL_CONFIG) or "another version"
        _refuse(f"{path}: its TorchScript calls {unknown.group(1)}, an op of DeePMD-kit's op library, which cannot load "
                f"here (built for torch {built}, this is torch {torch.__version__}); convert in an environment with the "
                "torch DeePMD-kit was built for (docs/deepmd-import.md)")
    heads = _multitask_heads(path)
    if heads:
        _refuse(f"{path}: a multi-task checkpoint (heads {', '.join(heads)}); freeze one head first with "
                "`dp --pt freeze -c CHECKPOINT_DIR --head NAME -o model.pth` and convert that")
    lines = text.strip().splitlines()
    reason = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    _refuse(f"{path}: cannot read it as a DeePMD-kit PyTorch model (truncated, corrupt or another kind of "
            f"file?): {reason}")


def _multitask_heads(path: str) -> list[str]:
    """The heads of a multi-task training checkpoint (.pt), or [] for anything else."""
    if not path.endswith(".pt"):
        return []
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        state = state.get("model", state)
        params = state["_extra_state"]["model_params"]
        return [str(head) for head in params["model_dict"]]
    except Exception:  # not a checkpoint of that shape: the caller reports the reader's own error
        return []


def _variables(node: dict) -> dict:
    return node.get("@variables", {}) or {}


def _array(value, name: str) -> np.ndarray:
    if value is None:
        _refuse(f"{name} is missing")
    return np.asarray(value, dtype=np.float64)


def _layers(network: dict, name: str) -> list[dict]:
    layers = network.get("layers")
    if not isinstance(layers, list) or not layers:
        _refuse(f"{name}: no layers")
    return layers


def _embedding_function(network: dict, name: str):
    """A torch function x [E, 1] -> G [E, M] evaluating DeePMD's embedding net (NativeLayer rules)."""
    layers = []
    for index, layer in enumerate(_layers(network, name)):
        variables = _variables(layer)
        weight = torch.as_tensor(_array(variables.get("w"), f"{name}.layers[{index}].w"))
        bias = variables.get("b")
        bias = None if bias is None else torch.as_tensor(_array(bias, f"{name}.layers[{index}].b"))
        idt = variables.get("idt")
        idt = None if idt is None else torch.as_tensor(_array(idt, f"{name}.layers[{index}].idt"))
        activation = str(layer.get("activation_function", "tanh")).lower()
        if activation not in _EMBEDDING_ACTIVATIONS:
            _refuse(f"{name}.layers[{index}]: activation {activation!r} cannot be tabulated with value, "
                    f"first and second derivative (supported: {sorted(_EMBEDDING_ACTIVATIONS)})")
        layers.append((weight, bias, idt, _EMBEDDING_ACTIVATIONS[activation], bool(layer.get("resnet", False))))

    def evaluate(x):
        h = x
        for weight, bias, idt, activation, resnet in layers:
            y = h @ weight
            if bias is not None:
                y = y + bias
            y = activation(y)
            if idt is not None:
                y = y * idt
            if resnet and weight.shape[1] == weight.shape[0]:
                y = y + h
            elif resnet and weight.shape[1] == 2 * weight.shape[0]:
                y = y + torch.cat([h, h], dim=-1)
            h = y
        return h

    return evaluate


def _deepmd_switch(r, r_smooth, cutoff):
    u = torch.clamp((r - r_smooth) / (cutoff - r_smooth), min=0.0, max=1.0)
    return u * u * u * (-6.0 * u * u + 15.0 * u - 10.0) + 1.0


def _section_constant(array: np.ndarray, what: str) -> float:
    value = float(array.reshape(-1)[0])
    if not np.all(array == value):
        _refuse(f"{what} differs between the neighbour slots of one neighbour type "
                f"(from {array.min()!r} to {array.max()!r}); the format has one radial function per type pair")
    return value


@dataclass
class DeepmdConversionReport:
    """Worst |table - direct| of R and dR/dr on a check grid (model units), and the grid."""

    intervals: int
    r0: float
    dr: float
    table_error: float
    table_scale: float
    derivative_error: float
    derivative_scale: float

    def summary(self) -> str:
        return (f"tables: K = {self.intervals}, r0 = {self.r0:.6g} A, dr = {self.dr:.4g} A; worst table error "
                f"{self.table_error:.3g} (largest |R| {self.table_scale:.3g}), derivative error "
                f"{self.derivative_error:.3g} /A (largest |R'| {self.derivative_scale:.3g} /A)")


@dataclass
class DeepmdModelFile(ModelFile):
    """A ModelFile converted from DeePMD-kit, with the ``report`` of its tables."""

    report: DeepmdConversionReport | None = None


def _check_model(data: dict):
    model = data.get("model", data)
    model_type = model.get("type", "standard")
    if model_type != "standard":
        _refuse(f"model type {model_type!r} (e.g. ZBL/linear/pair-table/spin combinations) is not supported; "
                "only a plain descriptor + energy fitting model")
    for key in ("pair_exclude_types", "atom_exclude_types"):
        if model.get(key):
            _refuse(f"model.{key} = {model[key]} is not supported (the format has no type exclusions)")
    script = data.get("model_def_script") or {}
    if isinstance(script, str):
        script = json.loads(script)
    if isinstance(script, dict):
        if script.get("type_embedding"):
            _refuse("type_embedding is not supported (se_e2_a with per-type embedding nets only)")
        if script.get("use_srtab") or script.get("srtab_file_path"):
            _refuse("a short-range pair table (use_srtab) is not supported")
        if script.get("spin"):
            _refuse("spin models are not supported")
    return model


def _check_descriptor(desc: dict, n_types: int):
    kind = desc.get("type")
    if kind not in ("se_e2_a", "se_a"):
        _refuse(f"descriptor {kind!r} is not supported; only se_e2_a (se_a) maps onto the format "
                "(other descriptors: se_e2_r, se_e3, se_atten/DPA-1, DPA-2/3, hybrid, ...)")
    if desc.get("exclude_types"):
        _refuse(f"descriptor.exclude_types = {desc['exclude_types']} is not supported")
    if float(desc.get("env_protection", 0.0) or 0.0) != 0.0:
        _refuse(f"descriptor.env_protection = {desc['env_protection']} is not supported (must be 0)")
    env = desc.get("env_mat", {}) or {}
    if env.get("use_exp_switch"):
        _refuse("descriptor.env_mat.use_exp_switch is not supported (DeePMD's polynomial switch only)")
    if float(env.get("protection", 0.0) or 0.0) != 0.0:
        _refuse(f"descriptor.env_mat.protection = {env['protection']} is not supported (must be 0)")
    if desc.get("spin"):
        _refuse("spin descriptors are not supported")
    sel = desc.get("sel")
    if not isinstance(sel, list) or len(sel) != n_types:
        _refuse(f"descriptor.sel: expected one neighbour count per type ({n_types}), found {sel!r}")


def _check_fitting(fit: dict):
    kind = fit.get("type", "ener")
    if kind != "ener":
        _refuse(f"fitting {kind!r} is not supported; only the energy fitting ('ener')")
    for key, what in (("numb_fparam", "frame parameters (fparam)"), ("numb_aparam", "atomic parameters (aparam)"),
                      ("dim_case_embd", "case embedding (multi-task)")):
        if int(fit.get(key, 0) or 0) != 0:
            _refuse(f"fitting.{key} = {fit[key]}: {what} are not supported")
    if any(value is not None for value in (fit.get("atom_ener") or [])):  # [None, ...] is DeePMD's "not set"
        _refuse(f"fitting.atom_ener = {fit['atom_ener']} is not supported")
    if fit.get("exclude_types"):
        _refuse(f"fitting.exclude_types = {fit['exclude_types']} is not supported")
    if fit.get("mixed_types"):
        _refuse("fitting.mixed_types is not supported (one fitting net per type expected)")
    if fit.get("use_aparam_as_mask"):
        _refuse("fitting.use_aparam_as_mask is not supported")
    if _variables(fit).get("case_embd") is not None:
        _refuse("fitting case embedding is not supported")


def _fitting_tensors(fit: dict, n_types: int, descriptor_size: int):
    nets = fit.get("nets", {})
    networks = nets.get("networks", [])
    if int(nets.get("ndim", 1)) != 1 or len(networks) != n_types:
        _refuse(f"fitting.nets: expected one network per type ({n_types}), found ndim={nets.get('ndim')} "
                f"with {len(networks)} networks")
    tensors, activation, residual_flags = {}, None, None
    for a, network in enumerate(networks):
        name = f"fitting network of type {a}"
        layers = _layers(network, name)
        flags = []
        for index, layer in enumerate(layers):
            variables = _variables(layer)
            weight = _array(variables.get("w"), f"{name}.layers[{index}].w")  # [in, out]
            bias = variables.get("b")
            bias = np.zeros(weight.shape[1]) if bias is None else _array(bias, f"{name}.layers[{index}].b")
            idt = variables.get("idt")
            act = str(layer.get("activation_function", "tanh")).lower()
            last = index == len(layers) - 1
            if index == 0 and weight.shape[0] != descriptor_size:
                _refuse(f"{name}: input size {weight.shape[0]} != descriptor size {descriptor_size}")
            if last:
                if act not in ("none", "linear") or weight.shape[1] != 1 or idt is not None or layer.get("resnet") \
                        and weight.shape[0] == weight.shape[1]:
                    _refuse(f"{name}: the output layer must be linear with one output (found activation "
                            f"{act!r}, shape {list(weight.shape)})")
                tensors[f"fitting.{a}.out.weight"] = weight.T.copy()
                tensors[f"fitting.{a}.out.bias"] = bias.reshape(1).copy()
                continue
            if act not in _FITTING_ACTIVATIONS:
                _refuse(f"{name}: activation {act!r} is not supported by the format's fitting network "
                        f"(supported: {list(_FITTING_ACTIVATIONS)})")
            if activation is None:
                activation = act
            elif act != activation:
                _refuse(f"{name}: mixed activations ({activation!r} and {act!r}); the format has one")
            in_size, out_size = weight.shape
            resnet = bool(layer.get("resnet", False))
            if resnet and out_size == 2 * in_size:
                _refuse(f"{name}.layers[{index}]: DeePMD's doubling residual ({in_size} -> {out_size}, "
                        "h = [x, x] + y) has no counterpart in the format (residual needs equal widths)")
            residual = resnet and out_size == in_size
            if idt is not None and not residual:
                _refuse(f"{name}.layers[{index}]: a timestep (idt) on a non-residual layer is not supported")
            flags.append(residual)
            tensors[f"fitting.{a}.{index}.weight"] = weight.T.copy()
            tensors[f"fitting.{a}.{index}.bias"] = bias.copy()
            if idt is not None:
                tensors[f"fitting.{a}.{index}.timestep"] = _array(idt, "idt").copy()
        if residual_flags is None:
            residual_flags = flags
        elif flags != residual_flags:
            _refuse(f"{name}: layer structure differs from type 0's; the format needs one structure for all types")
    if not residual_flags:
        _refuse("fitting networks without hidden layers are not supported")
    return tensors, activation, residual_flags


def convert_deepmd(source, intervals: int = DEFAULT_INTERVALS, r0: float = DEFAULT_R0,
                   check_points: int = 4) -> DeepmdModelFile:
    """Convert a DeePMD-kit se_e2_a energy model (path to .pth/.pt, or its serialisation dict).

    intervals: K of the radial tables; r0: first knot in Angstrom (lowered to
    the nearest value <= r0 that makes rcut_smth a knot, or raised with a
    ``TableStartRaised`` warning where no positive one does; distances below it
    use the first interval's polynomial, so r0 must be below every distance
    the model will see).
    Returns a validated DeepmdModelFile (float64 tensors) with a ``report``
    of the worst table errors on ``check_points`` points per interval.
    Raises DeepmdConversionError for anything that cannot be mapped exactly.
    """
    try:  # before reading the model (the r0 range needs its cut-off, below)
        valid = int(intervals) == intervals and int(intervals) >= 1
    except (TypeError, ValueError, OverflowError):
        valid = False
    if not valid:
        _refuse(f"intervals: expected an integer >= 1, found {intervals!r}")
    try:
        valid = math.isfinite(float(r0)) and float(r0) > 0.0
    except (TypeError, ValueError, OverflowError):
        valid = False
    if not valid:
        _refuse(f"r0: expected a distance > 0 in Angstrom, found {r0!r} (s(r) = sw(r)/r diverges at 0)")
    data = load_deepmd(source) if isinstance(source, (str, bytes)) or hasattr(source, "__fspath__") else source
    model = _check_model(data)
    type_names = [str(name) for name in model.get("type_map", [])]
    n_types = len(type_names)
    if n_types == 0:
        _refuse("the model has no type_map")
    desc = model.get("descriptor", {})
    _check_descriptor(desc, n_types)
    fit = model.get("fitting", {})
    _check_fitting(fit)

    cutoff, r_smooth = float(desc["rcut"]), float(desc["rcut_smth"])
    sel = [int(n) for n in desc["sel"]]
    nnei = sum(sel)
    if any(n < 0 for n in sel) or nnei == 0:
        _refuse(f"descriptor.sel = {sel}: expected counts >= 0 with at least one above 0")
    sections = np.concatenate([[0], np.cumsum(sel)])
    widths = [int(n) for n in desc["neuron"]]
    n_channels, n_axis = widths[-1], int(desc["axis_neuron"])
    if not 0 < n_axis <= n_channels:
        _refuse(f"axis_neuron = {n_axis} must be in [1, neuron[-1] = {n_channels}]")
    if not 0.0 <= r_smooth < cutoff:
        _refuse(f"rcut_smth = {r_smooth} must be in [0, rcut = {cutoff})")

    variables = _variables(desc)
    davg = _array(variables.get("davg"), "descriptor davg")
    dstd = _array(variables.get("dstd"), "descriptor dstd")
    if davg.shape != (n_types, nnei, 4) or dstd.shape != (n_types, nnei, 4):
        _refuse(f"davg/dstd: expected shape {(n_types, nnei, 4)}, found {davg.shape} / {dstd.shape}")
    if np.any(davg != 0.0):
        _refuse(
            f"davg != 0 (largest |davg| {np.abs(davg).max():.3g}; the model was trained with set_davg_zero = "
            f"{desc.get('set_davg_zero')}): DeePMD-kit fills the sel - n unused neighbour slots with the "
            "normalised row -davg/dstd, whose embedding adds a term that depends on the number of neighbours "
            "and is not a sum over neighbours; the format cannot represent it. Retrain with "
            "\"set_davg_zero\": true")
    # A neighbour type with sel_b = 0 (what sel "auto" gives a type absent from the training data) has no
    # slots: DeePMD-kit ignores such neighbours, and so does a zero table R[a][b].
    std0 = np.ones((n_types, n_types))
    std1 = np.ones((n_types, n_types))
    for a in range(n_types):
        for b in range(n_types):
            if sel[b] == 0:
                continue
            block = dstd[a, sections[b]:sections[b + 1]]
            std0[a, b] = _section_constant(block[:, 0], f"dstd[center {a}, neighbour {b}, column 0]")
            std1[a, b] = _section_constant(block[:, 1:4], f"dstd[center {a}, neighbour {b}, columns 1-3]")
    if np.any(std0 <= 0) or np.any(std1 <= 0):
        _refuse("dstd must be positive")

    embeddings = desc.get("embeddings", {})
    networks = embeddings.get("networks", [])
    one_side = bool(desc.get("type_one_side", int(embeddings.get("ndim", 1)) == 1))
    expected = n_types if one_side else n_types * n_types
    if len(networks) != expected or int(embeddings.get("ndim", 1 if one_side else 2)) != (1 if one_side else 2):
        _refuse(f"embeddings: expected {expected} networks (type_one_side = {one_side}), found {len(networks)}")

    def embedding_of(a, b):
        # DeePMD-kit's DescrptBlockSeA.forward: network index = neighbour * T + center (two-side).
        return networks[b] if one_side else networks[b * n_types + a]

    functions = {}
    for a in range(n_types):
        for b in range(n_types):
            function = _embedding_function(embedding_of(a, b), f"embedding net (center {a}, neighbour {b})")
            s0, s1 = float(std0[a, b]), float(std1[a, b])

            def radial(r, function=function, s0=s0, s1=s1):
                s = _deepmd_switch(r, r_smooth, cutoff) / r
                g = function((s / s0)[:, None])  # [E, M]
                return torch.stack((g * (s / s0)[:, None], g * (s / s1)[:, None]), dim=1)  # [E, 2, M]

            with torch.no_grad():
                probe = radial(torch.tensor([0.5 * (r_smooth + cutoff)], dtype=torch.float64))
            if probe.shape != (1, 2, n_channels):
                _refuse(f"embedding net (center {a}, neighbour {b}): output width {probe.shape[-1]} != "
                        f"neuron[-1] = {n_channels}")
            if sel[b] == 0:
                def radial(r):
                    return torch.zeros((r.shape[0], 2, n_channels), dtype=r.dtype) + 0.0 * r[:, None, None]
            functions[a, b] = radial

    # Grid: K intervals from r0 to rcut, r0 moved down so that rcut_smth is a knot.
    from ..training.compress import aligned_r0

    intervals = int(intervals)
    if intervals < 1:
        _refuse(f"intervals: expected an integer >= 1, found {intervals}")
    r0 = float(r0)
    if not 0.0 < r0 < cutoff:
        _refuse(f"r0: expected 0 < r0 < rcut = {cutoff}, found {r0} (s(r) = sw(r)/r diverges at 0)")
    r0 = aligned_r0(_types.SimpleNamespace(radial="deepmd", r_smooth=r_smooth, cutoff=cutoff), intervals, r0)
    dr = (cutoff - r0) / intervals
    knots = r0 + torch.arange(intervals + 1, dtype=torch.float64) * dr
    knots[-1] = cutoff
    table = np.zeros((n_types, n_types, 2, intervals + 1, 3, n_channels))
    ones = torch.ones_like(knots)
    for (a, b), radial in functions.items():
        def first(x, radial=radial):
            return torch.func.jvp(radial, (x,), (torch.ones_like(x),))[1]

        with torch.no_grad():
            f, f1 = torch.func.jvp(radial, (knots,), (ones,))
            _, f2 = torch.func.jvp(first, (knots,), (ones,))
        table[a, b] = torch.stack((f, f1, f2), dim=2).permute(1, 0, 2, 3).numpy()  # [2, K+1, 3, M]
    table[:, :, :, -1] = 0.0

    fitting_tensors, activation, residual_flags = _fitting_tensors(fit, n_types, n_channels * n_axis)
    bias_atom_e = _array(_variables(fit).get("bias_atom_e"), "fitting bias_atom_e").reshape(n_types, -1)
    if bias_atom_e.shape[1] != 1:
        _refuse(f"fitting bias_atom_e: expected one energy per type, found shape {bias_atom_e.shape}")
    shift = bias_atom_e[:, 0].copy()
    out_bias = _variables(model).get("out_bias")
    if out_bias is not None:
        out_bias = np.asarray(out_bias, dtype=np.float64)
        if out_bias.shape != (1, n_types, 1):
            _refuse(f"model out_bias: expected shape (1, {n_types}, 1) (energy only), found {out_bias.shape}")
        shift += out_bias[0, :, 0]

    metadata = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "length_unit": "angstrom",
        "energy_unit": "eV",
        "type_names": json.dumps(type_names),
        "type_atomic_numbers": json.dumps([atomic_number(name) for name in type_names]),
        "cutoff": repr(cutoff),
        "n_channels": str(n_channels),
        "n_axis": str(n_axis),
        "l_max": "1",
        "descriptor_l_sum": "true",
        "n_norm": repr(float(nnei)),
        "radial_r0": repr(float(r0)),
        "radial_dr": repr(float(dr)),
        "radial_intervals": str(intervals),
        "activation": activation,
        "fitting_residual": json.dumps(residual_flags),
        "n_interactions": "0",
    }
    tensors = {"radial.table": table, "energy_shift": shift, **fitting_tensors}
    model_file = DeepmdModelFile(metadata, tensors)
    try:
        model_file.validate()
    except ValueError as error:
        _refuse(f"the converted model is not well formed: {error}")

    # Table error against the direct functions on a check grid.
    from ..torch_model import GraphModelTorch

    compressed = GraphModelTorch(model_file, dtype=torch.float64)
    offsets = (torch.arange(check_points, dtype=torch.float64) + 0.5) / check_points
    dense = (r0 + (torch.arange(intervals, dtype=torch.float64)[:, None] + offsets[None, :]) * dr).reshape(-1)
    worst = [0.0, 0.0, 0.0, 0.0]
    dense_ones = torch.ones_like(dense)
    for (a, b), radial in functions.items():
        pair_types = torch.full(dense.shape, a * n_types + b, dtype=torch.long)
        with torch.no_grad():
            net, net_d = torch.func.jvp(radial, (dense,), (dense_ones,))
            tab, tab_d = torch.func.jvp(lambda x: compressed._radial(compressed.radial_intervals_table, pair_types, x),
                                        (dense,), (dense_ones,))
        worst[0] = max(worst[0], float((tab - net).abs().max()))
        worst[1] = max(worst[1], float(net.abs().max()))
        worst[2] = max(worst[2], float((tab_d - net_d).abs().max()))
        worst[3] = max(worst[3], float(net_d.abs().max()))
    model_file.report = DeepmdConversionReport(intervals, r0, dr, *worst)
    return model_file
