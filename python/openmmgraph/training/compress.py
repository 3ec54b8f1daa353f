"""Compression of an EmbeddingModel into the model format, and export.

``compress`` tabulates every embedding network on the uniform grid
r_q = r_0 + q dr (q = 0..K, r_K = r_c) with value, first and second
derivative (forward-mode automatic differentiation, float64), stores an exact
0.0 at the last knot (the switch's zero), copies the fitting and node
networks (input standardisation folded into their first layer) and the energy
shift. It then measures:

- the worst error of the tabulated radial functions (quintic Hermite,
  evaluated by ``GraphModelTorch._radial``, the code path of the compressed
  model) against the networks, and of their first derivatives, on a dense
  check grid (``check_points`` points inside each interval, at (j + 1/2) / P);
- the energy and force difference between the compressed model
  (``GraphModelTorch``) and the uncompressed one on a sample configuration.
"""

from __future__ import annotations

import copy
import json
import math
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from ..modelfile import FORMAT_NAME, FORMAT_VERSION, ModelFile
from ..torch_model import GraphModelTorch
from .data import frame_pairs
from .model import EmbeddingModel


@dataclass
class CompressionReport:
    """Errors of a compression, in the model's units.

    table_error / table_relative_error: worst |R_table - R_net| on the check
    grid, absolute and relative to the largest |R_net| there (all tables);
    derivative_error / derivative_relative_error: the same for dR/dr.
    energy_difference: |E_compressed - E_uncompressed| on the sample (energy
    unit); force_difference: largest force component difference;
    energy / force_scale: the sample's energy and largest force component.
    """

    intervals: int
    r0: float
    dr: float
    check_points: int
    table_error: float
    table_relative_error: float
    derivative_error: float
    derivative_relative_error: float
    energy: float
    energy_difference: float
    force_scale: float
    force_difference: float
    sample_atoms: int

    def summary(self, energy_unit: str = "", length_unit: str = "") -> str:
        force_unit = f" {energy_unit}/{length_unit}" if energy_unit else ""
        return (
            f"compression: K = {self.intervals}, r0 = {self.r0:g}, dr = {self.dr:.4g}; table error {self.table_error:.3g} "
            f"({self.table_relative_error:.3g} relative), derivative error {self.derivative_error:.3g} "
            f"({self.derivative_relative_error:.3g} relative) on {self.check_points} points per interval; "
            f"sample of {self.sample_atoms} atoms: energy difference {self.energy_difference:.3g}"
            f"{' ' + energy_unit if energy_unit else ''} (E = {self.energy:.6g}), force difference "
            f"{self.force_difference:.3g}{force_unit} (largest force {self.force_scale:.3g})"
        )


@dataclass
class CompressedModelFile(ModelFile):
    """A ModelFile with the ``report`` of the compression that made it."""

    report: CompressionReport | None = None


def _tabulate(model: EmbeddingModel, embedding, r: torch.Tensor) -> np.ndarray:
    """[T, T, L+1, K+1, 3, M] of f, f', f'' at r (float64, forward-mode AD)."""
    t = model.n_types
    rows = []
    ones = torch.ones_like(r)
    for pair in range(t * t):
        def value(x, pair=pair):
            return model.radial_functions(embedding, pair, x)

        def first(x, pair=pair):
            return torch.func.jvp(lambda y: model.radial_functions(embedding, pair, y), (x,), (ones,))[1]

        with torch.no_grad():
            f = value(r)
            _, f1 = torch.func.jvp(value, (r,), (ones,))
            _, f2 = torch.func.jvp(first, (r,), (ones,))
        rows.append(torch.stack((f, f1, f2), dim=2))  # [K+1, L+1, 3, M]
    table = torch.stack(rows).permute(0, 2, 1, 3, 4)  # [T*T, L+1, K+1, 3, M]
    table = table.reshape(t, t, model.l_max + 1, r.shape[0], 3, model.n_channels).numpy().copy()
    table[:, :, :, -1, :, :] = 0.0
    return table


def _metadata(model: EmbeddingModel, r0: float, dr: float, intervals: int) -> dict:
    metadata = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "length_unit": model.length_unit,
        "energy_unit": model.energy_unit,
        "type_names": json.dumps(model.type_names),
        "type_atomic_numbers": json.dumps(model.type_atomic_numbers),
        "cutoff": repr(float(model.cutoff)),
        "n_channels": str(model.n_channels),
        "n_axis": str(model.n_axis),
        "l_max": str(model.l_max),
        "descriptor_l_sum": "true" if model.descriptor_l_sum else "false",
        "n_norm": repr(float(model.n_norm)),
        "radial_r0": repr(float(r0)),
        "radial_dr": repr(float(dr)),
        "radial_intervals": str(int(intervals)),
        "activation": model.activation,
        "fitting_residual": json.dumps([bool(f) for f in model.fitting_networks[0].network.residual]),
        "n_interactions": str(model.n_interactions),
    }
    if model.n_interactions == 1:
        metadata["node_residual"] = json.dumps([bool(f) for f in model.node_networks[0].network.residual])
    return metadata


def sample_configuration(model: EmbeddingModel, r0: float, seed: int = 0):
    """A deterministic open cluster (jittered cubic lattice, 27 atoms, spacing 0.4 r_c,
    nearest distances above max(r_0, 0.2 r_c)) of random types: (positions, types, None)."""
    rng = np.random.default_rng(seed)
    spacing = 0.4 * model.cutoff
    grid = np.stack(np.meshgrid(*[np.arange(3)] * 3, indexing="ij"), -1).reshape(-1, 3) * spacing
    positions = grid + rng.uniform(-0.08, 0.08, grid.shape) * model.cutoff
    if r0 > 0.2 * model.cutoff:
        positions *= r0 / (0.2 * model.cutoff)
    types = rng.integers(0, model.n_types, len(positions))
    return positions, types, None


def aligned_r0(model: EmbeddingModel, intervals: int, r0: float) -> float:
    """The table start closest to ``r0`` that puts DeePMD's r_s on a knot (radial 'deepmd').

    The polynomial switch is only C2 at r_s: inside an interval its jump in the
    third derivative limits the quintic interpolant to O(dr^3) errors; on a
    knot the interpolant is exact there and the error stays O(dr^6).
    ``r0`` is a lower bound of the distances the table must cover, so the
    start moves down (by less than one interval). Only where every lower
    start would be <= 0 (s(r) diverges at 0: r_s within a few intervals of
    r_c and a small ``r0``) does it move up, with a ``TableStartRaised``
    warning: distances between ``r0`` and the new start are then extrapolated.
    """
    if model.radial != "deepmd" or not r0 < model.r_smooth:
        return r0
    ratio = intervals * (model.cutoff - model.r_smooth) / (model.cutoff - r0)  # knots above r_s for this r0
    below = math.floor(ratio + 1e-9)
    if below >= 1:
        lowered = model.cutoff - intervals * (model.cutoff - model.r_smooth) / below
        if lowered > 0.0:
            return lowered
    raised = model.cutoff - intervals * (model.cutoff - model.r_smooth) / math.ceil(ratio - 1e-9)
    warnings.warn(TableStartRaised(
        f"the table start r0 = {r0:g} was raised to {raised:g} to put r_s = {model.r_smooth:g} on a knot (no "
        f"positive start below {r0:g} does with {intervals} intervals); distances below {raised:g} are "
        "extrapolated: use more intervals to keep the start below r0"), stacklevel=2)
    return raised


class TableStartRaised(UserWarning):
    """``aligned_r0`` had to move the table start above the requested r0."""


def compress(model: EmbeddingModel, intervals: int = 400, r0: float | None = None, *, check_points: int = 10,
             sample=None, align: bool = True, verbose: bool = False) -> CompressedModelFile:
    """Tabulate ``model`` into a model file (float64 tensors) and measure the errors.

    intervals: K; r0: the table's first knot (model length unit; default
    ``model.default_r0``); check_points: points per interval of the check
    grid; sample: (positions [n, 3], types [n], cell or None) in model units
    for the energy/force comparison (default ``sample_configuration``).
    Returns a CompressedModelFile whose ``report`` holds the errors; prints
    the report's summary when ``verbose``.
    """
    intervals = int(intervals)
    if intervals < 1:
        raise ValueError(f"compress: intervals: expected an integer >= 1, found {intervals}")
    r0 = float(model.default_r0 if r0 is None else r0)
    if not 0.0 <= r0 < model.cutoff:
        raise ValueError(f"compress: r0: expected 0 <= r0 < cutoff = {model.cutoff}, found {r0}")
    if model.radial == "deepmd" and r0 <= 0.0:
        raise ValueError("compress: r0: expected r0 > 0 with radial='deepmd' (s(r) = sw(r)/r diverges at 0)")
    if align:
        r0 = aligned_r0(model, intervals, r0)
    reference = copy.deepcopy(model).to(torch.float64)
    reference.requires_grad_(False)
    dr = (model.cutoff - r0) / intervals
    knots = r0 + torch.arange(intervals + 1, dtype=torch.float64) * dr
    knots[-1] = model.cutoff
    tensors = {"radial.table": _tabulate(reference, reference.embedding, knots)}
    if reference.n_interactions == 1:
        tensors["interaction.radial.table"] = _tabulate(reference, reference.embedding2, knots)
    tensors["energy_shift"] = reference.energy_shift.detach().numpy().copy()
    for kind, type_index, network in reference.standardized_networks():
        layers = network.folded_layers()
        prefix = f"{kind}.{type_index}"
        for index, layer in enumerate(layers[:-1]):
            tensors[f"{prefix}.{index}.weight"] = layer.weight
            tensors[f"{prefix}.{index}.bias"] = layer.bias
            if layer.timestep is not None:
                tensors[f"{prefix}.{index}.timestep"] = layer.timestep
        tensors[f"{prefix}.out.weight"] = layers[-1].weight
        tensors[f"{prefix}.out.bias"] = layers[-1].bias
    model_file = CompressedModelFile(_metadata(reference, r0, dr, intervals), tensors)
    model_file.validate()
    compressed = GraphModelTorch(model_file, dtype=torch.float64)

    # Tables against networks on the check grid.
    offsets = (torch.arange(check_points, dtype=torch.float64) + 0.5) / check_points
    dense = (r0 + (torch.arange(intervals, dtype=torch.float64)[:, None] + offsets[None, :]) * dr).reshape(-1)
    worst = dict(value=0.0, derivative=0.0, value_scale=0.0, derivative_scale=0.0)
    tables = [(reference.embedding, compressed.radial_intervals_table)]
    if reference.n_interactions == 1:
        tables.append((reference.embedding2, compressed.interaction_intervals_table))
    ones = torch.ones_like(dense)
    for embedding, table in tables:
        for pair in range(reference.n_types ** 2):
            pair_types = torch.full(dense.shape, pair, dtype=torch.long)
            with torch.no_grad():
                net, net_d = torch.func.jvp(lambda x: reference.radial_functions(embedding, pair, x), (dense,), (ones,))
                tab, tab_d = torch.func.jvp(lambda x: compressed._radial(table, pair_types, x), (dense,), (ones,))
            worst["value"] = max(worst["value"], float((tab - net).abs().max()))
            worst["derivative"] = max(worst["derivative"], float((tab_d - net_d).abs().max()))
            worst["value_scale"] = max(worst["value_scale"], float(net.abs().max()))
            worst["derivative_scale"] = max(worst["derivative_scale"], float(net_d.abs().max()))

    # Energy and forces on a sample configuration.
    positions, types, cell = sample if sample is not None else sample_configuration(reference, r0)
    positions = np.asarray(positions, dtype=np.float64)
    types = np.asarray(types, dtype=np.int64)
    pairs_np = frame_pairs(positions, None if cell is None else np.asarray(cell, np.float64), model.cutoff)
    energy, forces = reference.energy_and_forces(positions, types, cell, pairs=pairs_np)
    pairs = (torch.as_tensor(pairs_np[0]), torch.as_tensor(pairs_np[1]), torch.as_tensor(pairs_np[2]))
    x = torch.tensor(positions, requires_grad=True)
    eye = torch.eye(3, dtype=torch.float64)
    compressed_energy = compressed.particle_energies_model_units(x, torch.as_tensor(types), eye, pairs).sum()
    # A sample with no pair within the cut-off at l_max = 0 has an energy that does not depend on x: zero forces.
    (gradient,) = torch.autograd.grad(compressed_energy, x, allow_unused=True) if compressed_energy.requires_grad else (None,)
    if gradient is None:
        gradient = torch.zeros_like(x)
    compressed_forces = -gradient.detach().numpy()
    model_file.report = CompressionReport(
        intervals=intervals,
        r0=r0,
        dr=dr,
        check_points=check_points,
        table_error=worst["value"],
        table_relative_error=worst["value"] / max(worst["value_scale"], 1e-300),
        derivative_error=worst["derivative"],
        derivative_relative_error=worst["derivative"] / max(worst["derivative_scale"], 1e-300),
        energy=energy,
        energy_difference=abs(float(compressed_energy.detach()) - energy),
        force_scale=float(np.abs(forces).max()) if forces.size else 0.0,
        force_difference=float(np.abs(compressed_forces - forces).max()) if forces.size else 0.0,
        sample_atoms=int(len(types)),
    )
    if verbose:
        print(model_file.report.summary(model.energy_unit, model.length_unit))
    return model_file


def export(model_file, path, dtype: str = "float64", **compress_options) -> ModelFile:
    """Write a model file (a ModelFile, or an EmbeddingModel compressed first with
    ``compress_options``) to ``path`` in ``dtype`` ('float64' or 'float32'), validated.
    Returns the ModelFile written."""
    if isinstance(model_file, EmbeddingModel):
        model_file = compress(model_file, **compress_options)
    elif compress_options:
        raise ValueError(f"export: options {sorted(compress_options)} apply only to an EmbeddingModel")
    model_file.write(str(path), dtype=dtype)
    return model_file
