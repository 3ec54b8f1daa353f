"""The uncompressed model: embedding networks in place of the radial tables.

``EmbeddingModel`` is the trainable form of the model of docs/model-format.md.
Everything except the radial functions is the compressed model's code:
the harmonics, moments, invariants, interaction block, per-type networks and
energy sum are ``GraphModelTorch.particle_energies_model_units`` (bound here
as a method; it only needs the attributes this class sets), and the fitting
and node networks are ``torch_model._Network``. Only ``_radial`` differs: it
evaluates embedding networks instead of the quintic Hermite tables, so that a
model compressed by ``compress`` differs from this one by table error only.

Radial functions (per ordered type pair (a, b), degree l, channel k):

- ``radial="r"`` (default): R(r) = sw(r) G_abl(r / r_c)_k with the switch
  sw(r) = (1 - (r / r_c)^2)^3 for r < r_c and 0 beyond (the switch of the
  generated models, openmmgraph.grades).
- ``radial="deepmd"``: DeePMD-kit's se_e2_a form R(r) = s(r) G_abl(s(r))_k
  with s(r) = sw(r) / r and sw DeePMD's polynomial switch: 1 for
  r < r_s (``r_smooth``), u^3 (-6 u^2 + 15 u - 10) + 1 with
  u = (r - r_s) / (r_c - r_s) between r_s and r_c, 0 beyond. (No
  environment-matrix normalisation: the format has none.) s(r) grows as 1/r,
  so compression needs r_0 > 0.

Both switches have value, first and second derivative equal to zero at r_c,
so R, R' and R'' vanish there for any network G. G is an MLP 1 -> widths ->
M (activation ``embedding_activation``, tanh by default; a hidden layer whose
width equals its input's is residual); the L+1 degrees of a pair have
independent networks, evaluated together by batched matrix products.

Fitting and node networks follow section 7 of the format. Hidden layer 0 is
never residual and the others are residual when their width equals their
input's (with a trainable timestep when ``timestep`` is true, initialised to
0.1 as in DeePMD-kit's resnet_dt). Each network has a fixed input
standardisation (x - shift) * scale (set from data by ``fit_input_statistics``,
the identity by default) that ``compress`` folds into the first layer.

Units: everything in this class is in the model's units (``length_unit``,
``energy_unit``, normally the training data's), not OpenMM's.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..grades import atomic_number
from ..modelfile import ACTIVATIONS, ENERGY_UNITS_KJ_PER_MOL, LENGTH_UNITS_NM, DenseLayer
from ..torch_model import _DEGREE_OF_HARMONIC, GraphModelTorch, _Network

RADIAL_FORMS = ("r", "deepmd")
EMBEDDING_ACTIVATIONS = {"tanh": torch.tanh, "silu": torch.nn.functional.silu}


def cubic_switch(r: torch.Tensor, cutoff: float) -> torch.Tensor:
    """(1 - (r / r_c)^2)^3 for r < r_c, 0 beyond (C2 at r_c)."""
    x = torch.clamp(r / cutoff, max=1.0)
    return (1.0 - x * x) ** 3


def deepmd_switch(r: torch.Tensor, r_smooth: float, cutoff: float) -> torch.Tensor:
    """DeePMD-kit's switch: 1 below r_s, u^3 (-6u^2 + 15u - 10) + 1 between, 0 beyond r_c."""
    u = torch.clamp((r - r_smooth) / (cutoff - r_smooth), min=0.0, max=1.0)
    return u * u * u * (-6.0 * u * u + 15.0 * u - 10.0) + 1.0


class _EmbeddingSet(torch.nn.Module):
    """Embedding networks G_abl: 1 -> widths -> M for every ordered pair p = a T + b
    and degree l, stored as [T*T, L+1, out, in] weights."""

    def __init__(self, n_pairs, degrees, widths, n_channels, activation, dtype, generator):
        super().__init__()
        sizes = [1] + list(widths)
        self.weights = torch.nn.ParameterList()
        self.biases = torch.nn.ParameterList()
        self.residual = []
        for layer, (in_size, out_size) in enumerate(zip(sizes[:-1], sizes[1:])):
            weight = torch.randn((n_pairs, degrees, out_size, in_size), generator=generator, dtype=dtype)
            self.weights.append(torch.nn.Parameter(weight / math.sqrt(in_size)))
            self.biases.append(torch.nn.Parameter(torch.randn((n_pairs, degrees, out_size), generator=generator, dtype=dtype)))
            self.residual.append(layer > 0 and in_size == out_size)
        width = sizes[-1]
        weight = torch.randn((n_pairs, degrees, n_channels, width), generator=generator, dtype=dtype)
        self.output_weight = torch.nn.Parameter(weight / math.sqrt(width))
        self.output_bias = torch.nn.Parameter(0.1 * torch.randn((n_pairs, degrees, n_channels), generator=generator, dtype=dtype))
        self.activation = EMBEDDING_ACTIVATIONS[activation]

    def forward(self, pair: int, x: torch.Tensor) -> torch.Tensor:
        """x [E] -> G [E, L+1, M] for the networks of pair index ``pair``."""
        hidden = x[None, :, None].expand(self.output_weight.shape[1], x.shape[0], 1)  # [L+1, E, 1]
        for weight, bias, residual in zip(self.weights, self.biases, self.residual):
            activated = self.activation(torch.einsum("dei,doi->deo", hidden, weight[pair]) + bias[pair][:, None, :])
            hidden = hidden + activated if residual else activated
        output = torch.einsum("dei,doi->deo", hidden, self.output_weight[pair]) + self.output_bias[pair][:, None, :]
        return output.permute(1, 0, 2)


class _StandardizedNetwork(torch.nn.Module):
    """A section-7 network (torch_model._Network) applied to (x - shift) * scale.

    While ``recording`` is a list, every input batch is appended to it (used to
    measure input statistics through the model's own forward pass).
    """

    def __init__(self, network: _Network, input_size: int, dtype):
        super().__init__()
        self.network = network
        self.register_buffer("input_shift", torch.zeros(input_size, dtype=dtype))
        self.register_buffer("input_scale", torch.ones(input_size, dtype=dtype))
        self.recording = None

    def forward(self, inputs):
        if self.recording is not None:
            self.recording.append(inputs.detach())
        return self.network((inputs - self.input_shift) * self.input_scale)

    def folded_layers(self) -> list[DenseLayer]:
        """The network's layers (float64 numpy) with the standardisation folded into layer 0."""
        network = self.network
        layers = []
        shift = self.input_shift.detach().to(torch.float64)
        scale = self.input_scale.detach().to(torch.float64)
        for index, (weight, bias) in enumerate(zip(network.weights, network.biases)):
            weight = weight.detach().to(torch.float64)
            bias = bias.detach().to(torch.float64)
            if index == 0:
                weight, bias = weight * scale[None, :], bias - weight @ (shift * scale)
            timestep = network.timesteps[str(index)].detach().to(torch.float64).numpy() if str(index) in network.timesteps else None
            layers.append(DenseLayer(weight.numpy().copy(), bias.numpy().copy(), timestep, network.residual[index]))
        layers.append(
            DenseLayer(
                network.output_weight.detach().to(torch.float64).numpy().copy(),
                network.output_bias.detach().to(torch.float64).numpy().copy(),
                None,
                False,
            )
        )
        return layers


def _random_network(rng: np.random.Generator, input_size, widths, output_size, output_scale, timestep, activation, dtype):
    """A _Network with random weights: layer 0 never residual, equal widths residual."""
    layers = []
    in_size = input_size
    for index, width in enumerate(widths):
        residual = index > 0 and width == in_size
        layers.append(
            DenseLayer(
                weight=rng.standard_normal((width, in_size)) / math.sqrt(in_size),
                bias=rng.standard_normal(width),
                timestep=(0.1 + 0.001 * rng.standard_normal(width)) if (residual and timestep) else None,
                residual=residual,
            )
        )
        in_size = width
    layers.append(
        DenseLayer(
            weight=output_scale * rng.standard_normal((output_size, in_size)) / math.sqrt(in_size),
            bias=np.zeros(output_size),
            timestep=None,
            residual=False,
        )
    )
    return _Network(layers, activation, dtype, "cpu")


def check_model_options(where: str, *, cutoff: float, radial: str, r_smooth: float | None, length_unit: str,
                        energy_unit: str, activation: str, embedding_activation: str, n_channels: int, n_axis: int,
                        l_max: int, n_interactions: int, n_norm: float | None) -> None:
    """Raise ValueError (prefixed ``where``) for model options that cannot make an EmbeddingModel; the
    one check of them, used by the model and, before any data is read, by the training config.
    ``r_smooth`` None means its default (half the cut-off), ``n_norm`` None one taken from the data."""
    if radial not in RADIAL_FORMS:
        raise ValueError(f"{where}: radial: expected one of {list(RADIAL_FORMS)}, found {radial!r}")
    if radial == "deepmd" and r_smooth is not None and not 0.0 <= r_smooth < cutoff:
        raise ValueError(f"{where}: r_smooth: expected 0 <= r_smooth < cutoff = {cutoff}, found {r_smooth}")
    if length_unit not in LENGTH_UNITS_NM:
        raise ValueError(f"{where}: length_unit: expected one of {list(LENGTH_UNITS_NM)}, found {length_unit!r}")
    if energy_unit not in ENERGY_UNITS_KJ_PER_MOL:
        raise ValueError(f"{where}: energy_unit: expected one of {list(ENERGY_UNITS_KJ_PER_MOL)}, found {energy_unit!r}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"{where}: activation: expected one of {list(ACTIVATIONS)}, found {activation!r}")
    if embedding_activation not in EMBEDDING_ACTIVATIONS:
        raise ValueError(f"{where}: embedding_activation: expected one of {list(EMBEDDING_ACTIVATIONS)}, "
                         f"found {embedding_activation!r}")
    if not (1 <= n_axis <= n_channels and 0 <= l_max <= 2 and n_interactions in (0, 1) and cutoff > 0
            and (n_norm is None or n_norm > 0)):
        raise ValueError(
            f"{where}: expected 1 <= n_axis <= n_channels, 0 <= l_max <= 2, n_interactions 0 or 1, "
            f"cutoff > 0, n_norm > 0; found n_axis={n_axis}, n_channels={n_channels}, l_max={l_max}, "
            f"n_interactions={n_interactions}, cutoff={cutoff}, n_norm={n_norm}")


class EmbeddingModel(torch.nn.Module):
    """The uncompressed, trainable graph potential (see the module docstring).

    type_names: the T type names (element symbols give atomic numbers unless
    ``type_atomic_numbers`` is given); cutoff: r_c in ``length_unit``;
    n_channels M, n_axis M_axis, l_max L, descriptor_l_sum, n_norm: as in the
    format; radial: 'r' or 'deepmd' (with ``r_smooth``, default r_c / 2);
    embedding_widths: hidden widths of every embedding network;
    n_interactions: 0 or 1 (a second embedding set R2 and node networks of
    hidden widths ``node_widths``, default [M, M]); fitting_widths: hidden
    widths of the fitting networks; activation: 'tanh' or 'silu' (fitting and
    node networks); timestep: trainable timesteps on residual layers; seed:
    initial weights; dtype: torch dtype of the parameters.

    ``energy_shift`` is a trainable per-type energy added to every E_i.
    ``config`` holds the constructor arguments (checkpoints rebuild the model
    from it). ``default_r0`` is the table start ``compress`` uses when given none.
    """

    # The compressed model's forward pass and helpers, reused as methods.
    particle_energies_model_units = GraphModelTorch.particle_energies_model_units
    _invariants = GraphModelTorch._invariants
    _per_type = GraphModelTorch._per_type

    def __init__(
        self,
        type_names,
        cutoff: float,
        *,
        type_atomic_numbers=None,
        length_unit: str = "angstrom",
        energy_unit: str = "eV",
        n_channels: int = 16,
        n_axis: int = 4,
        l_max: int = 1,
        descriptor_l_sum: bool = True,
        n_norm: float = 1.0,
        radial: str = "r",
        r_smooth: float | None = None,
        embedding_widths=(16, 32),
        embedding_activation: str = "tanh",
        n_interactions: int = 0,
        node_widths=None,
        fitting_widths=(64, 64, 64),
        activation: str = "tanh",
        timestep: bool = True,
        default_r0: float | None = None,
        seed: int = 0,
        dtype: torch.dtype = torch.float64,
    ):
        super().__init__()
        type_names = [str(name) for name in type_names]
        if type_atomic_numbers is None:
            type_atomic_numbers = [atomic_number(name) for name in type_names]
        cutoff = float(cutoff)
        if r_smooth is None:
            r_smooth = 0.5 * cutoff
        check_model_options("EmbeddingModel", cutoff=cutoff, radial=radial, r_smooth=r_smooth, length_unit=length_unit,
                            energy_unit=energy_unit, activation=activation, embedding_activation=embedding_activation,
                            n_channels=n_channels, n_axis=n_axis, l_max=l_max, n_interactions=n_interactions,
                            n_norm=n_norm)
        if node_widths is None:
            node_widths = [n_channels, n_channels]
        self.config = dict(
            type_names=type_names, cutoff=cutoff, type_atomic_numbers=list(type_atomic_numbers),
            length_unit=length_unit, energy_unit=energy_unit, n_channels=int(n_channels), n_axis=int(n_axis),
            l_max=int(l_max), descriptor_l_sum=bool(descriptor_l_sum), n_norm=float(n_norm), radial=radial,
            r_smooth=float(r_smooth), embedding_widths=[int(w) for w in embedding_widths],
            embedding_activation=embedding_activation, n_interactions=int(n_interactions),
            node_widths=[int(w) for w in node_widths], fitting_widths=[int(w) for w in fitting_widths],
            activation=activation, timestep=bool(timestep), default_r0=default_r0, seed=int(seed),
        )
        self.type_names = type_names
        self.type_atomic_numbers = [int(z) for z in type_atomic_numbers]
        self.length_unit = length_unit
        self.energy_unit = energy_unit
        self.n_types = len(type_names)
        self.cutoff = cutoff
        self.n_channels = int(n_channels)
        self.n_axis = int(n_axis)
        self.l_max = int(l_max)
        self.descriptor_l_sum = bool(descriptor_l_sum)
        self.n_norm = float(n_norm)
        self.radial = radial
        self.r_smooth = float(r_smooth)
        self.activation = activation
        self.n_interactions = int(n_interactions)
        self.fitting_widths = [int(w) for w in fitting_widths]
        self.node_widths = [int(w) for w in node_widths]
        if default_r0 is None:
            default_r0 = 0.0 if radial == "r" else 0.1 * cutoff
        self.default_r0 = float(default_r0)

        degrees = self.l_max + 1
        summed = 1 if self.descriptor_l_sum else degrees
        self.descriptor_size = summed * self.n_channels * self.n_axis
        generator = torch.Generator().manual_seed(int(seed))
        rng = np.random.default_rng(int(seed) + 1)
        pairs = self.n_types * self.n_types
        self.embedding = _EmbeddingSet(pairs, degrees, embedding_widths, self.n_channels, embedding_activation, dtype, generator)
        self.embedding2 = (
            _EmbeddingSet(pairs, degrees, embedding_widths, self.n_channels, embedding_activation, dtype, generator)
            if self.n_interactions == 1
            else None
        )
        self.register_buffer("harmonic_degree", torch.tensor(_DEGREE_OF_HARMONIC[: degrees * degrees], dtype=torch.long))
        self.energy_shift = torch.nn.Parameter(torch.zeros(self.n_types, dtype=dtype))
        fitting_input = self.descriptor_size * (1 + self.n_interactions)
        self.fitting_networks = torch.nn.ModuleList(
            _StandardizedNetwork(
                _random_network(rng, fitting_input, self.fitting_widths, 1, 0.1, timestep, activation, dtype),
                fitting_input,
                dtype,
            )
            for _ in range(self.n_types)
        )
        if self.n_interactions == 1:
            self.node_networks = torch.nn.ModuleList(
                _StandardizedNetwork(
                    _random_network(rng, self.descriptor_size, self.node_widths, self.n_channels, 1.0, timestep,
                                    activation, dtype),
                    self.descriptor_size,
                    dtype,
                )
                for _ in range(self.n_types)
            )
        else:
            self.node_networks = None
        self.requires_grad_(True)

    # -- what GraphModelTorch.particle_energies_model_units asks for --------------
    @property
    def radial_intervals_table(self):
        return self.embedding

    @property
    def interaction_intervals_table(self):
        return self.embedding2

    def radial_functions(self, embedding: _EmbeddingSet, pair: int, r: torch.Tensor) -> torch.Tensor:
        """R[a][b][l][k](r) of one pair index a T + b: r [E] -> [E, L+1, M] (zero at and beyond r_c)."""
        if self.radial == "r":
            prefactor = cubic_switch(r, self.cutoff)
            argument = r / self.cutoff
        else:
            prefactor = deepmd_switch(r, self.r_smooth, self.cutoff) / r
            argument = prefactor
        return prefactor[:, None, None] * embedding(pair, argument)

    def _radial(self, embedding, pair_types, r):
        values = r.new_zeros((r.shape[0], self.l_max + 1, self.n_channels))
        for pair in range(self.n_types * self.n_types):
            members = torch.nonzero(pair_types == pair, as_tuple=True)[0]
            if members.numel():
                values = values.index_copy(0, members, self.radial_functions(embedding, pair, r[members]))
        return torch.where((r < self.cutoff)[:, None, None], values, torch.zeros_like(values))

    # -- public API (model units) ------------------------------------------------------
    @property
    def dtype(self) -> torch.dtype:
        return self.energy_shift.dtype

    def particle_energies(self, positions, types, pairs) -> torch.Tensor:
        """E_i [n] (energy unit) for positions [n, 3] (length unit) and pairs
        (i [P], j [P], Cartesian shifts [P, 3]) with d_ij = x_j - x_i + shift."""
        eye = torch.eye(3, dtype=positions.dtype, device=positions.device)
        return self.particle_energies_model_units(positions, types, eye, pairs)

    def energy_and_forces(self, positions, types, cell=None, pairs=None):
        """(E as float, forces [n, 3] float64 numpy) in the model's units, by autograd.

        cell: None (open boundaries) or [3, 3] lattice vectors as rows (any
        cell; every periodic image within r_c counts). pairs: optional, as
        returned by ``data.frame_pairs``.
        """
        from .data import frame_pairs

        positions_np = np.asarray(positions, dtype=np.float64)
        if pairs is None:
            pairs = frame_pairs(positions_np, None if cell is None else np.asarray(cell, np.float64), self.cutoff)
        pairs = tuple(torch.as_tensor(p) for p in pairs)
        pairs = (pairs[0], pairs[1], pairs[2].to(self.dtype))
        x = torch.tensor(positions_np, dtype=self.dtype, requires_grad=True)
        energy = self.particle_energies(x, torch.as_tensor(np.asarray(types), dtype=torch.long), pairs).sum()
        # A frame with no pair within the cut-off at l_max = 0 has an energy that does not depend on x: zero forces.
        (gradient,) = torch.autograd.grad(energy, x, allow_unused=True) if energy.requires_grad else (None,)
        if gradient is None:
            gradient = torch.zeros_like(x)
        return float(energy.detach()), (-gradient).detach().to(torch.float64).numpy()

    def standardized_networks(self):
        """All (kind, type index, _StandardizedNetwork) of the model."""
        items = [("fitting", a, net) for a, net in enumerate(self.fitting_networks)]
        if self.node_networks is not None:
            items += [("node", a, net) for a, net in enumerate(self.node_networks)]
        return items
