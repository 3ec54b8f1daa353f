"""Training an EmbeddingModel on energies and forces, then compression and export.

    from openmmgraph.training import train
    result = train(data="train.extxyz", output="model.safetensors", cutoff=5.0, epochs=200)

Every option is a field of ``TrainingConfig`` (docs/training.md lists them).
The loss per batch is

    L = p_e * mean_frames(((E - E_ref) / N)^2) + p_f * mean_components((F - F_ref)^2)

with DeePMD-kit's prefactor schedule p(t) = limit + (start - limit) * lr(t) / lr(0),
or fixed weights when ``energy_weight`` / ``force_weight`` are set. Adam with
a learning rate decaying exponentially from ``start_lr`` to ``stop_lr`` over
the run (every step). The validation loss uses the final (limit) prefactors so
that it is comparable between epochs. The model with the best validation loss
(the last one without a validation set) is compressed and written.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import re
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from ..modelfile import (
    MAX_CHANNELS,
    MAX_INTERVALS,
    MAX_LAYERS,
    MAX_TYPES,
    MAX_WIDTH,
    _shortened,
    check_folder_path,
    check_output_path,
    same_or_inside,
    write_atomically,
)
from .compress import CompressionReport, compress
from .data import Dataset, frame_pairs, load_data
from .model import EmbeddingModel, check_model_options


_OPTIONAL_FLOATS = ("r_smooth", "n_norm", "energy_weight", "force_weight", "r0")
_WIDTH_LISTS = ("embedding_widths", "fitting_widths", "node_widths")
_PATHS = ("output", "checkpoint_dir")
_CHECKPOINT_NAME = re.compile(r"best\.pt|epoch-\d{5,}\.pt")  # the files train writes in the checkpoint folder
_OUTPUT_DTYPES = ("float64", "float32")


def _is_path(value) -> bool:
    return isinstance(value, (str, os.PathLike))


@dataclass
class TrainingConfig:
    """All options of ``train`` (and of ``openmm-graph train``'s JSON config)."""

    # data
    data: list = field(default_factory=list)  # paths (extxyz files, DeePMD-kit systems or folders of them)
    data_format: str = "auto"  # auto | extxyz | deepmd
    type_map: list | None = None  # type names in model order (default: elements by atomic number)
    energy_key: str = "energy"
    forces_key: str = "forces"
    length_unit: str = "angstrom"  # the data's units, written into the model
    energy_unit: str = "eV"
    # model
    cutoff: float = 6.0
    radial: str = "r"  # r | deepmd
    r_smooth: float | None = None
    n_channels: int = 16
    n_axis: int = 4
    l_max: int = 1
    descriptor_l_sum: bool = True
    n_norm: float | None = None  # default: mean neighbour count of the training frames
    embedding_widths: list = field(default_factory=lambda: [16, 32])
    embedding_activation: str = "tanh"
    n_interactions: int = 0
    node_widths: list | None = None
    fitting_widths: list = field(default_factory=lambda: [64, 64, 64])
    activation: str = "tanh"
    timestep: bool = True
    precision: str = "float64"  # float64 | float32 (training; tables are always made in float64)
    # optimisation
    epochs: int = 100
    batch_size: int = 4
    start_lr: float = 1e-3
    stop_lr: float = 1e-5
    start_pref_e: float = 0.02
    limit_pref_e: float = 1.0
    start_pref_f: float = 1000.0
    limit_pref_f: float = 1.0
    energy_weight: float | None = None  # fixed weights instead of the schedule (both or neither)
    force_weight: float | None = None
    validation_fraction: float = 0.1
    seed: int = 0
    # output
    output: str = "model.safetensors"
    output_dtype: str = "float64"
    intervals: int = 400
    r0: float | None = None  # table start (default: 0 for radial 'r', half the closest distance for 'deepmd')
    checkpoint_dir: str | None = None  # default: OUTPUT without suffix + ".checkpoints"
    checkpoint_every: int = 10  # epochs (0: only best.pt)
    progress: bool = True

    @classmethod
    def from_dict(cls, values: dict) -> "TrainingConfig":
        """A TrainingConfig from a dict of its fields, each checked for its kind (numbers finite,
        lists of the right items); the checks of values against each other are in ``check``."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"training config: unknown key {unknown[0]!r} (known keys: {', '.join(sorted(known))})")
        config = cls(**values)
        defaults = cls()
        for item in dataclasses.fields(cls):
            name = item.name
            value, default = getattr(config, name), getattr(defaults, name)
            if value is None:
                if default is not None and name not in _PATHS:
                    raise ValueError(f"training config: {name!r}: expected a value, found null (leave the key "
                                     f"out for the default {default!r})")
                if name == "output":
                    raise ValueError("training config: 'output': expected a file path, found null")
                continue
            setattr(config, name, _converted(name, value, default))
        return config

    def check(self) -> None:
        """Check the options against each other and the output paths, before any data is read
        (every option that can be checked without the data is checked here, so that a bad one
        never costs a training run)."""
        if not self.data:
            raise ValueError("training config: 'data': expected at least one path, found none")
        if (self.energy_weight is None) != (self.force_weight is None):
            raise ValueError("training config: set both 'energy_weight' and 'force_weight', or neither")
        if not 0.0 <= self.validation_fraction < 1.0:
            raise ValueError(f"training config: 'validation_fraction': expected [0, 1), found {self.validation_fraction}")
        if self.epochs < 0 or self.batch_size < 1 or self.checkpoint_every < 0:
            raise ValueError("training config: expected epochs >= 0, batch_size >= 1, checkpoint_every >= 0")
        if self.precision not in ("float64", "float32"):
            raise ValueError(f"training config: 'precision': expected float64 or float32, found {self.precision!r}")
        if not (self.start_lr > 0 and self.stop_lr > 0):
            raise ValueError("training config: expected start_lr > 0 and stop_lr > 0")
        if not 0.0 < self.stop_lr / self.start_lr < math.inf:  # the decay's ratio: its log would be +-inf (NaN rates)
            raise ValueError(f"training config: 'stop_lr' / 'start_lr' = {self.stop_lr:g} / {self.start_lr:g} is beyond the "
                             "range of floating point numbers; expected the two within a factor of about 1e308")
        weights = (("energy_weight", "force_weight") if self.energy_weight is not None else
                   ("start_pref_e", "limit_pref_e", "start_pref_f", "limit_pref_f"))
        negative = [name for name in weights if getattr(self, name) < 0]
        if negative:
            raise ValueError(f"training config: {negative[0]!r}: expected a weight >= 0, found "
                             f"{getattr(self, negative[0])}")
        if all(getattr(self, name) == 0 for name in weights):
            raise ValueError(f"training config: {', '.join(weights)} are all 0: the loss would be 0 and nothing "
                             "would be learned")
        if not 0 <= self.seed < 2**63:
            raise ValueError(f"training config: 'seed': expected an integer in [0, 2^63), found {self.seed}")
        if not self.cutoff > 0:
            raise ValueError(f"training config: 'cutoff': expected a number > 0, found {self.cutoff}")
        check_model_options("training config", cutoff=self.cutoff, radial=self.radial, r_smooth=self.r_smooth,
                            length_unit=self.length_unit, energy_unit=self.energy_unit, activation=self.activation,
                            embedding_activation=self.embedding_activation, n_channels=self.n_channels,
                            n_axis=self.n_axis, l_max=self.l_max, n_interactions=self.n_interactions,
                            n_norm=self.n_norm)
        if self.output_dtype not in _OUTPUT_DTYPES:
            raise ValueError(f"training config: 'output_dtype': expected 'float64' or 'float32', "
                             f"found {self.output_dtype!r}")
        # The format's limits (modelfile.MAX_*): a model beyond them would be refused only after the training run.
        if self.intervals < 1:
            raise ValueError(f"training config: 'intervals': expected an integer >= 1, found {self.intervals}")
        if self.intervals > MAX_INTERVALS:
            raise ValueError(f"training config: 'intervals': expected at most {MAX_INTERVALS} (the format's limit), "
                             f"found {self.intervals}")
        if self.n_channels > MAX_CHANNELS:
            raise ValueError(f"training config: 'n_channels': expected at most {MAX_CHANNELS} (the format's limit), "
                             f"found {self.n_channels}")
        if self.r0 is not None:
            if not 0.0 <= self.r0 < self.cutoff:
                raise ValueError(f"training config: 'r0': expected 0 <= r0 < cutoff = {self.cutoff}, found {self.r0}")
            if self.radial == "deepmd" and self.r0 <= 0.0:
                raise ValueError("training config: 'r0': expected r0 > 0 with radial 'deepmd' "
                                 "(s(r) = sw(r)/r diverges at 0)")
        for name in _WIDTH_LISTS:
            widths = getattr(self, name)
            if widths is not None and any(width < 1 for width in widths):
                raise ValueError(f"training config: {name!r}: expected widths >= 1, found {widths}")
            # The fitting and node networks are stored layer by layer; the embedding becomes the tables.
            if (widths is not None and name != "embedding_widths"
                    and (len(widths) > MAX_LAYERS or any(width > MAX_WIDTH for width in widths))):
                raise ValueError(f"training config: {name!r}: expected at most {MAX_LAYERS} widths of at most {MAX_WIDTH} "
                                 f"(the format's limits), found {_shortened(str(widths))}")
        if self.type_map is not None:
            if not self.type_map:
                raise ValueError("training config: 'type_map': expected at least one type name, found []")
            if len(self.type_map) > MAX_TYPES:
                raise ValueError(f"training config: 'type_map': expected at most {MAX_TYPES} type names (the format's limit), "
                                 f"found {len(self.type_map)}")
            repeated = sorted({name for name in self.type_map if self.type_map.count(name) > 1})
            if repeated:
                raise ValueError(f"training config: 'type_map': type {repeated[0]!r} is named twice in {self.type_map}")
        self.check_paths()

    def check_paths(self) -> None:
        """The output file and the checkpoint folder: writable, neither one of the data paths, and
        the output not an existing file inside a data folder (so that the model never overwrites
        the training data; a new file or folder beside the data is fine)."""
        checkpoint_dir = self.checkpoint_folder()
        for path in self.data:
            for name, target in (("output", self.output), ("checkpoint_dir", checkpoint_dir)):
                relation = same_or_inside(target, path)
                if relation == "is":
                    raise ValueError(f"training config: {name!r} {target!r} is the training data {path!r}; "
                                     "choose another path")
                if relation == "is inside" and name == "output" and os.path.exists(target):
                    raise ValueError(f"training config: {name!r} {target!r} is a file inside the training data "
                                     f"folder {path!r}; choose another path")
        if same_or_inside(self.output, checkpoint_dir) == "is":
            raise ValueError(f"training config: 'output' {self.output!r} is the checkpoint folder "
                             f"{checkpoint_dir!r}; choose another output or 'checkpoint_dir'")
        # The output's folder is made if needed (as the default checkpoint folder beside it always made it).
        check_output_path(self.output, "training config: 'output'", create_folder=True)
        check_folder_path(checkpoint_dir, "training config: 'checkpoint_dir'")
        # An earlier run's checkpoints would mix with this run's (and a failed run's message would point at the
        # earlier best.pt): refused, so that nothing is overwritten or mistaken for this run's.
        earlier = sorted(name for name in (os.listdir(checkpoint_dir) if os.path.isdir(checkpoint_dir) else ())
                         if _CHECKPOINT_NAME.fullmatch(name))
        if earlier:
            shown = ", ".join(earlier[:3]) + (f" and {len(earlier) - 3} more" if len(earlier) > 3 else "")
            raise ValueError(f"training config: the checkpoint folder {checkpoint_dir!r} already holds checkpoints of an "
                             f"earlier run ({shown}); move or delete them, or choose another 'checkpoint_dir' "
                             "(--checkpoint-dir) or output")

    def checkpoint_folder(self) -> str:
        """checkpoint_dir, or the output path without suffix + '.checkpoints'."""
        return self.checkpoint_dir or os.path.splitext(self.output)[0] + ".checkpoints"


def _converted(name: str, value, default):
    """A config value checked against the kind of its field (``default``: the field's default)."""
    where = f"training config: {name!r}"
    if name == "data":
        paths = [value] if _is_path(value) else value
        if not isinstance(paths, (list, tuple)) or not all(_is_path(path) for path in paths):
            raise ValueError(f"{where}: expected a path or a list of paths, found {value!r}")
        if not all(os.fspath(path) for path in paths):
            raise ValueError(f"{where}: expected non-empty paths, found {value!r}")
        return [os.fspath(path) for path in paths]
    if name in _PATHS:
        if not _is_path(value) or not os.fspath(value):
            raise ValueError(f"{where}: expected a path, found {value!r}")
        return os.fspath(value)
    if name == "type_map":
        if not isinstance(value, (list, tuple)) or not all(isinstance(n, str) and n.strip() == n and n
                                                           for n in value):
            raise ValueError(f"{where}: expected a list of type names (non-empty strings), found {value!r}")
        return list(value)
    if name in _WIDTH_LISTS:
        if not isinstance(value, (list, tuple)) or not all(
                isinstance(w, int) and not isinstance(w, bool) for w in value):
            raise ValueError(f"{where}: expected a list of integer widths, found {value!r}")
        return [int(w) for w in value]
    kind = type(default) if default is not None else (float if name in _OPTIONAL_FLOATS else None)
    if kind is str:
        if not isinstance(value, str):
            raise ValueError(f"{where}: expected a string, found {value!r}")
        return value
    if kind is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{where}: expected true or false, found {value!r}")
        return value
    if kind in (int, float):
        expected = "an integer" if kind is int else "a number"
        if isinstance(value, (bool, list, tuple, dict)):
            raise ValueError(f"{where}: expected {expected}, found {value!r}")
        if kind is int and isinstance(value, int):  # exact, also beyond 2^53 (the range checks come in check())
            return int(value)
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            raise ValueError(f"{where}: expected {expected}, found {_shortened(repr(value), 80)}") from None
        if not math.isfinite(number):
            raise ValueError(f"{where}: expected a finite number, found {value!r}")
        if kind is float:
            return number
        if not number.is_integer():  # 3.0 and "3" are 3; 2.5 and "2.5" are refused
            raise ValueError(f"{where}: expected an integer, found {value!r}")
        return int(number)
    return value


@dataclass
class TrainResult:
    model: EmbeddingModel
    model_file: object  # CompressedModelFile
    output: str
    history: list  # per epoch: dict(epoch, lr, train_loss, val_loss, val_rmse_e, val_rmse_f, seconds)
    initial_validation: dict
    final_validation: dict  # rmse_energy_per_atom, rmse_force, loss, frames (in the data's units)
    compression: CompressionReport
    best_epoch: int
    type_names: list


class _Frames:
    """Frames as tensors with precomputed pairs (positions never move)."""

    def __init__(self, frames, cutoff, dtype):
        self.items = []
        for frame in frames:
            try:
                i, j, shift = frame_pairs(frame.positions, frame.cell, cutoff)
            except ValueError as error:
                raise ValueError(f"training data {frame.source}: {error}") from None
            self.items.append(dict(
                positions=torch.tensor(frame.positions, dtype=dtype),
                types=torch.as_tensor(frame.types, dtype=torch.long),
                i=torch.as_tensor(i), j=torch.as_tensor(j), shift=torch.tensor(shift, dtype=dtype),
                energy=float(frame.energy), forces=torch.tensor(frame.forces, dtype=dtype), n=frame.n_atoms,
            ))

    def __len__(self):
        return len(self.items)

    def batch(self, indices):
        """Concatenate frames into one disjoint graph."""
        items = [self.items[k] for k in indices]
        offsets = np.cumsum([0] + [item["n"] for item in items[:-1]])
        dtype = items[0]["positions"].dtype
        return dict(
            positions=torch.cat([item["positions"] for item in items]),
            types=torch.cat([item["types"] for item in items]),
            pairs=(torch.cat([item["i"] + int(o) for item, o in zip(items, offsets)]),
                   torch.cat([item["j"] + int(o) for item, o in zip(items, offsets)]),
                   torch.cat([item["shift"] for item in items])),
            frame=torch.cat([torch.full((item["n"],), k, dtype=torch.long) for k, item in enumerate(items)]),
            energy=torch.tensor([item["energy"] for item in items], dtype=dtype),
            forces=torch.cat([item["forces"] for item in items]),
            n=torch.tensor([item["n"] for item in items], dtype=dtype),
        )


def _predict(model, batch, create_graph):
    positions = batch["positions"].detach().clone().requires_grad_(True)
    atom_energies = model.particle_energies(positions, batch["types"], batch["pairs"])
    energies = atom_energies.new_zeros(batch["energy"].shape[0]).index_add(0, batch["frame"], atom_energies)
    # allow_unused: a batch with no pair within the cut-off (isolated atoms) at l_max = 0 has energies that do not
    # depend on the positions; its forces are zero.
    (gradient,) = (torch.autograd.grad(energies.sum(), positions, create_graph=create_graph, allow_unused=True)
                   if energies.requires_grad else (None,))
    if gradient is None:
        gradient = torch.zeros_like(positions)
    return energies, -gradient


def _errors(model, batch, create_graph):
    energies, forces = _predict(model, batch, create_graph)
    energy_error = (energies - batch["energy"]) / batch["n"]
    force_error = forces - batch["forces"]
    return (energy_error * energy_error).mean(), (force_error * force_error).mean(), energy_error, force_error


def evaluate(model, frames: _Frames, batch_size: int, pref_e: float, pref_f: float) -> dict:
    """RMSE of the energy per atom and of the force components, and the loss, over frames."""
    if len(frames) == 0:
        return {}
    energy_sq, force_sq, force_count = 0.0, 0.0, 0
    for start in range(0, len(frames), batch_size):
        batch = frames.batch(range(start, min(len(frames), start + batch_size)))
        _, _, energy_error, force_error = _errors(model, batch, create_graph=False)
        energy_sq += float((energy_error.detach() ** 2).sum())
        force_sq += float((force_error.detach() ** 2).sum())
        force_count += force_error.numel()
    mse_e, mse_f = energy_sq / len(frames), force_sq / max(force_count, 1)
    return dict(rmse_energy_per_atom=math.sqrt(mse_e), rmse_force=math.sqrt(mse_f),
                loss=pref_e * mse_e + pref_f * mse_f, frames=len(frames))


def fit_energy_shift(model: EmbeddingModel, dataset: Dataset, indices) -> np.ndarray:
    """energy_shift by least squares of the per-type atom counts against the frame energies."""
    counts = np.array([np.bincount(dataset.frames[k].types, minlength=model.n_types) for k in indices], dtype=np.float64)
    energies = np.array([dataset.frames[k].energy for k in indices])
    shift, *_ = np.linalg.lstsq(counts, energies, rcond=None)
    with torch.no_grad():
        model.energy_shift.copy_(torch.as_tensor(shift, dtype=model.dtype))
    return shift


@torch.no_grad()
def fit_input_statistics(model: EmbeddingModel, frames: _Frames, max_frames: int = 64) -> None:
    """Set each network's input standardisation from up to ``max_frames`` training frames spread
    evenly over the set (per type:
    mean, and 1 / std with std floored at 1e-2 of the mean std; a scale of 1 where the
    mean std is below 1e-6, i.e. every input is the same in every environment seen)."""
    stages = []
    if model.node_networks is not None:
        stages.append(model.node_networks)
    stages.append(model.fitting_networks)
    # Frames spread over the whole training set (files are often ordered by condition), at most max_frames.
    sample = sorted(set(np.linspace(0, len(frames) - 1, min(len(frames), max_frames)).round().astype(int).tolist()))
    for networks in stages:
        for network in networks:
            network.recording = []
        for start in range(0, len(sample), 8):
            batch = frames.batch(sample[start:start + 8])
            model.particle_energies(batch["positions"], batch["types"], batch["pairs"])
        for network in networks:
            recorded, network.recording = network.recording, None
            if not recorded:
                continue
            inputs = torch.cat(recorded)
            mean = inputs.mean(0)
            std = inputs.std(0, unbiased=False) if inputs.shape[0] > 1 else torch.ones_like(mean)
            network.input_shift.copy_(mean)
            if float(std.mean()) < 1e-6:  # every input (nearly) constant: nothing to standardise by
                network.input_scale.fill_(1.0)
                continue
            network.input_scale.copy_(1.0 / torch.clamp(std, min=1e-2 * float(std.mean())))


def save_checkpoint(path, model: EmbeddingModel, config: TrainingConfig, epoch: int, validation: dict, optimizer=None):
    """Write a checkpoint at once (temporary file + rename): an interrupted write leaves the previous one."""
    buffer = io.BytesIO()
    torch.save(dict(model_config=model.config, state_dict=model.state_dict(), epoch=epoch, validation=validation,
                    training_config=dataclasses.asdict(config),
                    optimizer=None if optimizer is None else optimizer.state_dict()), buffer)
    write_atomically(path, buffer.getvalue())


def load_checkpoint(path) -> EmbeddingModel:
    """The EmbeddingModel saved in a checkpoint (``.pt``) by ``train`` (read without running pickled code)."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch's reader raises anything (RuntimeError, UnpicklingError, ...)
        lines = str(error).strip().splitlines()
        raise ValueError(f"checkpoint {os.fspath(path)}: cannot read it as a checkpoint of openmmgraph.training "
                         f"({type(error).__name__}: {lines[0] if lines else ''})") from None
    dtype = next(v for v in state["state_dict"].values() if v.is_floating_point()).dtype
    model = EmbeddingModel(**state["model_config"], dtype=dtype)
    model.load_state_dict(state["state_dict"])
    return model


def _diverged(what: str, lr: float, checkpoint_dir: str) -> str:
    return (f"training: {what} is not finite (learning rate {lr:.3g}): the model diverged; lower start_lr, or "
            f"check the data's energies and forces (the best model so far is in {checkpoint_dir}/best.pt "
            "when one was written)")


def _progress(total, enabled):
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit="epoch", file=sys.stderr)


def train(config: TrainingConfig | dict | None = None, *, log=print, **options) -> TrainResult:
    """Train a model, compress it and write the model file (``output``).

    config: a TrainingConfig or a dict of its fields; ``options`` override it.
    log: function receiving report lines (None for silence). Returns a
    TrainResult with the model, the written ModelFile, the history, the
    validation RMSEs before and after (energy per atom and force components,
    in the data's units) and the compression report.
    """
    values = dataclasses.asdict(config) if isinstance(config, TrainingConfig) else dict(config or {})
    values.update(options)
    config = TrainingConfig.from_dict(values)
    config.check()
    say = log or (lambda *_: None)
    dtype = torch.float64 if config.precision == "float64" else torch.float32
    torch.manual_seed(config.seed)

    dataset = load_data(config.data, config.data_format, config.type_map, config.energy_key, config.forces_key)
    count = len(dataset)
    if count == 0:
        raise ValueError("training data: no frames")
    rng = np.random.default_rng(config.seed)
    order = rng.permutation(count)
    n_val = int(round(config.validation_fraction * count))
    if config.validation_fraction > 0 and count >= 2:
        n_val = min(max(n_val, 1), count - 1)
    val_indices, train_indices = sorted(order[:n_val].tolist()), sorted(order[n_val:].tolist())
    train_frames = _Frames([dataset.frames[k] for k in train_indices], config.cutoff, dtype)
    val_frames = _Frames([dataset.frames[k] for k in val_indices], config.cutoff, dtype)
    natoms = sum(item["n"] for item in train_frames.items)
    npairs = sum(int(item["i"].shape[0]) for item in train_frames.items)
    if npairs == 0:
        # A model that sees no pair learns per-type constants and zero forces: almost always a cut-off in the wrong
        # unit.  (Frames of isolated atoms among others are fine.)
        raise ValueError(f"training data: no pair of atoms lies within the cut-off {config.cutoff:g} {config.length_unit} in "
                         f"any of the {len(train_indices)} training frames: use a larger cut-off, or check that it is in "
                         f"the data's length unit ({config.length_unit})")
    n_norm = config.n_norm if config.n_norm is not None else max(1.0, float(f"{npairs / natoms:.3g}"))
    closest = min(float(torch.linalg.vector_norm(item["positions"][item["j"]] - item["positions"][item["i"]] + item["shift"], dim=1).min())
                  for item in train_frames.items if item["i"].numel())
    r0 = config.r0
    if r0 is None:
        r0 = 0.0 if config.radial == "r" else float(f"{0.5 * closest:.3g}")
    say(f"data: {count} frames ({len(train_indices)} training, {len(val_indices)} validation), types "
        f"{dataset.type_names}, {natoms / max(len(train_indices), 1):.1f} atoms and {npairs / natoms:.1f} "
        f"neighbours per atom on average, closest pair {closest:.4g} {config.length_unit}")

    model = EmbeddingModel(
        dataset.type_names, config.cutoff, length_unit=config.length_unit, energy_unit=config.energy_unit,
        n_channels=config.n_channels, n_axis=config.n_axis, l_max=config.l_max,
        descriptor_l_sum=config.descriptor_l_sum, n_norm=n_norm, radial=config.radial, r_smooth=config.r_smooth,
        embedding_widths=config.embedding_widths, embedding_activation=config.embedding_activation,
        n_interactions=config.n_interactions, node_widths=config.node_widths,
        fitting_widths=config.fitting_widths, activation=config.activation, timestep=config.timestep,
        default_r0=r0, seed=config.seed, dtype=dtype,
    )
    shift = fit_energy_shift(model, dataset, train_indices)
    fit_input_statistics(model, train_frames)
    say(f"energy shift (least squares per type): {dict(zip(dataset.type_names, np.round(shift, 6).tolist()))}")

    fixed = config.energy_weight is not None
    val_pref_e = config.energy_weight if fixed else config.limit_pref_e
    val_pref_f = config.force_weight if fixed else config.limit_pref_f
    checkpoint_dir = config.checkpoint_folder()
    os.makedirs(checkpoint_dir, exist_ok=True)

    optimizer = torch.optim.Adam(model.parameters(), lr=config.start_lr)
    steps_per_epoch = max(1, math.ceil(len(train_frames) / config.batch_size))
    total_steps = max(1, config.epochs * steps_per_epoch)
    decay = math.log(config.stop_lr / config.start_lr) / max(1, total_steps - 1)  # stop_lr at the last step
    monitor = val_frames if len(val_frames) else train_frames
    # What the monitored loss and RMSEs are of: the validation frames, or the training frames when there are none.
    monitored = "validation" if len(val_frames) else "training-set"
    initial = evaluate(model, monitor, config.batch_size, val_pref_e, val_pref_f)
    say(f"epoch 0: {monitored} loss {initial['loss']:.4g}, RMSE energy {initial['rmse_energy_per_atom']:.4g} "
        f"{config.energy_unit}/atom, force {initial['rmse_force']:.4g} {config.energy_unit}/{config.length_unit}")
    best = dict(loss=initial["loss"], epoch=0, state={k: v.clone() for k, v in model.state_dict().items()})
    history = []
    bar = _progress(config.epochs, config.progress)
    step = 0
    shuffle = np.random.default_rng(config.seed + 1)
    for epoch in range(1, config.epochs + 1):
        started = time.time()
        model.train()
        total, batches = 0.0, 0
        permutation = shuffle.permutation(len(train_frames))
        for start in range(0, len(train_frames), config.batch_size):
            lr = config.start_lr * math.exp(decay * step)
            for group in optimizer.param_groups:
                group["lr"] = lr
            if fixed:
                pref_e, pref_f = config.energy_weight, config.force_weight
            else:
                ratio = lr / config.start_lr
                pref_e = config.limit_pref_e + (config.start_pref_e - config.limit_pref_e) * ratio
                pref_f = config.limit_pref_f + (config.start_pref_f - config.limit_pref_f) * ratio
            batch = train_frames.batch(permutation[start:start + config.batch_size].tolist())
            mse_e, mse_f, _, _ = _errors(model, batch, create_graph=True)
            loss = pref_e * mse_e + pref_f * mse_f
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += float(loss.detach())
            batches += 1
            step += 1
            if not math.isfinite(total):
                raise ValueError(_diverged(f"the training loss of epoch {epoch}, step {step}", lr, checkpoint_dir))
        validation = evaluate(model, monitor, config.batch_size, val_pref_e, val_pref_f)
        if not math.isfinite(validation["loss"]):
            raise ValueError(_diverged(f"the validation loss after epoch {epoch}", lr, checkpoint_dir))
        entry = dict(epoch=epoch, lr=lr, train_loss=total / max(batches, 1), val_loss=validation["loss"],
                     val_rmse_e=validation["rmse_energy_per_atom"], val_rmse_f=validation["rmse_force"],
                     seconds=time.time() - started)
        history.append(entry)
        if validation["loss"] < best["loss"] or not len(val_frames):
            best = dict(loss=validation["loss"], epoch=epoch, state={k: v.clone() for k, v in model.state_dict().items()})
            save_checkpoint(os.path.join(checkpoint_dir, "best.pt"), model, config, epoch, validation)
        if config.checkpoint_every and epoch % config.checkpoint_every == 0:
            save_checkpoint(os.path.join(checkpoint_dir, f"epoch-{epoch:05d}.pt"), model, config, epoch, validation,
                            optimizer)
        line = (f"epoch {epoch}/{config.epochs}: lr {lr:.3g}, train loss {entry['train_loss']:.4g}, {monitored} loss "
                f"{validation['loss']:.4g}, RMSE energy {validation['rmse_energy_per_atom']:.4g} "
                f"{config.energy_unit}/atom, force {validation['rmse_force']:.4g} {config.energy_unit}/{config.length_unit}")
        if bar is not None:
            bar.set_postfix(loss=f"{validation['loss']:.3g}", rmse_e=f"{validation['rmse_energy_per_atom']:.3g}",
                            rmse_f=f"{validation['rmse_force']:.3g}")
            bar.update(1)
        elif config.progress:
            say(line)
    if bar is not None:
        bar.close()

    model.load_state_dict(best["state"])
    final = evaluate(model, monitor, config.batch_size, val_pref_e, val_pref_f)
    which = "validation" if len(val_frames) else "training (no validation set)"
    say(f"final model (epoch {best['epoch']}), {which} RMSE over {final['frames']} frames: energy "
        f"{final['rmse_energy_per_atom']:.6g} {config.energy_unit}/atom, force components {final['rmse_force']:.6g} "
        f"{config.energy_unit}/{config.length_unit}")
    sample_frame = dataset.frames[(val_indices or train_indices)[0]]
    model_file = compress(model, config.intervals, r0,
                          sample=(sample_frame.positions, sample_frame.types, sample_frame.cell))
    os.makedirs(os.path.dirname(os.path.realpath(config.output)), exist_ok=True)
    model_file.write(config.output, dtype=config.output_dtype)
    say(model_file.report.summary(config.energy_unit, config.length_unit))
    say(f"wrote {config.output} (checkpoints in {checkpoint_dir})")
    return TrainResult(model=model, model_file=model_file, output=config.output, history=history,
                       initial_validation=initial, final_validation=final, compression=model_file.report,
                       best_epoch=best["epoch"], type_names=list(dataset.type_names))
