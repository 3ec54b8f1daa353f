"""The graph potential in PyTorch (docs/model-format.md sections 1-8).

This is the project's independent PyTorch implementation: it is what the C++
Reference platform is checked against, the peer in the benchmarks and the
starting point for training and export. It computes in the model's own units
from the model's tables exactly as the spec writes it; the public API takes
and returns OpenMM units (nm, kJ/mol, kJ/mol/nm).

    model = GraphModelTorch("model.safetensors")
    energy, forces = model.energy_and_forces(positions_nm, types, box_nm)

Forces come from autograd (the analytic derivative of the same expression),
not finite differences.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch

from .modelfile import ModelFile, read_model

# Degree l of each (l, m) entry of the real harmonics, in the spec's m order.
_DEGREE_OF_HARMONIC = (0, 1, 1, 1, 2, 2, 2, 2, 2)

# Pairs per chunk of the O(n^2) neighbour search (rows * n <= this).
_PAIR_CHUNK_ELEMENTS = 1 << 22


def _as_tensor(value, dtype=None, device=None) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.to(dtype=dtype or value.dtype, device=device or value.device)
    return torch.as_tensor(np.asarray(value), dtype=dtype, device=device)


# Pairs closer than SAME_POSITION_TOLERANCE * sqrt(r_c^2 + m_i^2 + m_j^2) (m: a particle's largest
# |coordinate|) are two particles at the same position, whose rounding residue after the minimum image
# must not be taken for a real pair (GraphSamePosition.h).
SAME_POSITION_TOLERANCE = 1e-6


def same_position_tolerance_squared(cutoff_squared, magnitude_i_squared, magnitude_j_squared):
    """The squared distance at or below which a pair is two particles at the same position (NumPy or
    torch operands; they broadcast): SAME_POSITION_TOLERANCE^2 (r_c^2 + m_i^2 + m_j^2)."""
    return SAME_POSITION_TOLERANCE**2 * (cutoff_squared + magnitude_i_squared + magnitude_j_squared)


def check_finite_positions(positions: torch.Tensor) -> None:
    """Raise ValueError naming the first particle of ``positions`` [n, 3] with a NaN or infinite coordinate
    (as the OpenMM platforms do: such a particle would silently lose its neighbours)."""
    finite = torch.isfinite(positions.detach()).all(dim=-1)
    if not bool(finite.all()):
        particle = int((~finite).nonzero()[0, 0])
        raise ValueError(f"positions: particle {particle} has a coordinate that is not finite ({positions[particle].tolist()})")


def check_box(box: torch.Tensor, cutoff: float) -> None:
    """Check that ``box`` [3, 3] (rows a, b, c) is OpenMM's reduced triclinic form
    and that ``cutoff`` (same length unit) is at most half its smallest height
    (up to a relative 1e-12, the rounding of a unit conversion; the C++ check
    GraphForceImpl::checkCutoffFitsBox allows the same).
    """
    values = box.detach().to("cpu", torch.float64).tolist()
    if not all(math.isfinite(v) for row in values for v in row):
        raise ValueError(f"box: expected finite vectors, found a = {values[0]}, b = {values[1]}, c = {values[2]}")
    (ax, ay, az), (bx, by, bz), (cx, cy, cz) = values
    if ay != 0.0 or az != 0.0 or bz != 0.0:
        raise ValueError(
            f"box: expected OpenMM's reduced triclinic form a = (ax, 0, 0), b = (bx, by, 0), c = (cx, cy, cz), "
            f"found a = {values[0]}, b = {values[1]}"
        )
    if not (ax > 0.0 and by > 0.0 and cz > 0.0):
        raise ValueError(f"box: expected ax, by, cz > 0, found {ax}, {by}, {cz}")
    slack = 1.0 + 1e-12
    if not (ax * slack >= 2 * abs(bx) and ax * slack >= 2 * abs(cx) and by * slack >= 2 * abs(cy)):
        raise ValueError(
            f"box: expected ax >= 2|bx|, ax >= 2|cx|, by >= 2|cy| (reduced form), found a = {values[0]}, "
            f"b = {values[1]}, c = {values[2]}"
        )
    smallest_height = min(ax, by, cz)
    if cutoff > 0.5 * smallest_height * slack:
        raise ValueError(
            f"box: the cut-off {cutoff} exceeds half the smallest box height {smallest_height} "
            f"(min(ax, by, cz)); use a box at least {2 * cutoff} wide or a smaller cut-off"
        )


def minimum_image(displacements: torch.Tensor, box: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Reduce displacements [..., 3] to the minimum image exactly as OpenMM does.

    d -= c * floor(d_z / c_z + 0.5); d -= b * floor(d_y / b_y + 0.5);
    d -= a * floor(d_x / a_x + 0.5). Returns (reduced displacements [..., 3],
    image counts [..., 3] as (n_a, n_b, n_c), floats, such that reduced =
    displacements + n_a a + n_b b + n_c c).
    """
    a, b, c = box[0], box[1], box[2]
    shift_c = -torch.floor(displacements[..., 2] / c[2] + 0.5)
    displacements = displacements + shift_c[..., None] * c
    shift_b = -torch.floor(displacements[..., 1] / b[1] + 0.5)
    displacements = displacements + shift_b[..., None] * b
    shift_a = -torch.floor(displacements[..., 0] / a[0] + 0.5)
    displacements = displacements + shift_a[..., None] * a
    return displacements, torch.stack((shift_a, shift_b, shift_c), dim=-1)


@torch.no_grad()
def neighbor_pairs(positions, box, cutoff: float):
    """All ordered pairs (i, j), i != j, with minimum-image |x_j - x_i| < cutoff.

    positions: [n, 3] (torch tensor or numpy array); box: None or [3, 3] with
    rows a, b, c in OpenMM's reduced triclinic form; cutoff: the same length
    unit as positions. O(n^2) in chunks on the positions' device.
    Returns (i_index [P] long, j_index [P] long, shifts [P, 3]) on that device,
    sorted by i then j, where shifts are the integer image counts
    (n_a, n_b, n_c), stored in the positions' dtype, such that
    d_ij = x_j - x_i + n_a a + n_b b + n_c c.
    Raises ValueError when cutoff exceeds half the smallest box height or when
    two particles are at distance 0, up to the rounding of their coordinates
    (SAME_POSITION_TOLERANCE; naming both).
    """
    if isinstance(cutoff, bool) or not isinstance(cutoff, numbers.Real) or not (math.isfinite(cutoff) and cutoff > 0):
        # A negative cut-off searched as its square (the pairs of -cutoff), a NaN one found no pair: both silently.
        raise ValueError(f"cutoff: expected a finite number > 0, found {cutoff!r}")
    positions = _as_tensor(positions)
    if not positions.is_floating_point():
        positions = positions.to(torch.float64)
    device, dtype = positions.device, positions.dtype
    n = positions.shape[0]
    check_finite_positions(positions)
    if box is not None:
        box = _as_tensor(box, dtype=dtype, device=device)
        check_box(box, cutoff)
    cutoff_squared = cutoff * cutoff
    magnitude_squared = positions.abs().amax(dim=-1) ** 2 if n > 0 else positions.new_zeros(0)
    rows = max(1, _PAIR_CHUNK_ELEMENTS // max(n, 1))
    columns = torch.arange(n, device=device)
    i_chunks, j_chunks, shift_chunks = [], [], []
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        centers = positions[start:stop]
        displacements = positions[None, :, :] - centers[:, None, :]  # [rows, n, 3]
        if box is not None:
            displacements, shifts = minimum_image(displacements, box)
        distance_squared = (displacements * displacements).sum(-1)
        row_ids = torch.arange(start, stop, device=device)
        not_self = row_ids[:, None] != columns[None, :]
        # Distance 0 up to the rounding of the coordinates, the rule of every platform
        # (openmmapi/include/internal/GraphSamePosition.h).
        tolerance_squared = same_position_tolerance_squared(
            cutoff_squared, magnitude_squared[start:stop, None], magnitude_squared[None, :]
        )
        coincident = (distance_squared <= tolerance_squared) & (distance_squared < cutoff_squared) & not_self
        if bool(coincident.any()):
            row, column = (int(v) for v in coincident.nonzero()[0])
            raise ValueError(f"particles {start + row} and {column} are at distance 0 (the same position)")
        row, column = torch.nonzero((distance_squared < cutoff_squared) & not_self, as_tuple=True)
        i_chunks.append(row + start)
        j_chunks.append(column)
        if box is not None:
            shift_chunks.append(shifts[row, column])
        else:
            shift_chunks.append(torch.zeros((row.shape[0], 3), dtype=dtype, device=device))
    if not i_chunks:
        empty = torch.zeros(0, dtype=torch.long, device=device)
        return empty, empty.clone(), torch.zeros((0, 3), dtype=dtype, device=device)
    return torch.cat(i_chunks), torch.cat(j_chunks), torch.cat(shift_chunks)


@torch.no_grad()
def check_pairs(pairs, positions, box, cutoff: float) -> None:
    """Raise ValueError unless ``pairs`` is (i [P], j [P], image counts [P, 3]) of integer indices into
    ``positions`` [n, 3] and no pair is at distance 0 (a particle and itself in the same image, or two particles at
    the same position, up to the rounding of their coordinates as in ``neighbor_pairs``): its direction is then
    undefined and the energy was NaN.  ``box`` [3, 3] or None; same length unit throughout."""
    if not isinstance(pairs, (tuple, list)) or len(pairs) != 3:
        raise ValueError("pairs: expected (i [P], j [P], image counts [P, 3]) as neighbor_pairs returns them")
    center, neighbor, shifts = (torch.as_tensor(x) for x in pairs)
    count, n = center.shape[0] if center.ndim == 1 else -1, positions.shape[0]
    if center.ndim != 1 or neighbor.shape != center.shape or shifts.shape != (count, 3):
        raise ValueError(f"pairs: expected shapes [P], [P] and [P, 3], found {list(center.shape)}, "
                         f"{list(neighbor.shape)} and {list(shifts.shape)}")
    for name, index in (("i", center), ("j", neighbor)):
        if index.is_floating_point() or index.is_complex() or index.dtype == torch.bool:
            raise ValueError(f"pairs: expected integer indices {name}, found dtype {index.dtype}")
        if count and (int(index.min()) < 0 or int(index.max()) >= n):
            raise ValueError(f"pairs: indices {name} must lie in [0, {n}) (the particles), found "
                             f"{int(index.min())}..{int(index.max())}")
    if not count:
        return
    center, neighbor = center.to(positions.device, torch.long), neighbor.to(positions.device, torch.long)
    displacement = positions[neighbor] - positions[center]
    if box is not None:
        displacement = displacement + shifts.to(positions.device, positions.dtype) @ box
    magnitude_squared = positions.abs().amax(dim=-1) ** 2
    tolerance_squared = same_position_tolerance_squared(cutoff * cutoff, magnitude_squared[center],
                                                        magnitude_squared[neighbor])
    coincident = (displacement * displacement).sum(-1) <= tolerance_squared
    if bool(coincident.any()):
        k = int(coincident.nonzero()[0, 0])
        i, j = int(center[k]), int(neighbor[k])
        what = "a particle and itself" if i == j else "two particles at the same position"
        raise ValueError(f"pairs: pair {k} ({i}, {j}, image {shifts[k].tolist()}) is at distance 0 ({what}): its "
                         "direction is undefined; leave it out")


def pairs_of_centers(pairs, start: int, stop: int):
    """The pairs (i, j, image counts) whose centre i lies in [start, stop): the pairs of one range
    of ``GraphModelTorch.particle_energies_model_units(..., centers=(start, stop))``."""
    center, neighbor, shifts = pairs
    keep = (center >= start) & (center < stop)
    return center[keep], neighbor[keep], shifts[keep]


class _Network(torch.nn.Module):
    """A network of section 7: hidden layers (optionally residual) then a linear layer."""

    def __init__(self, layers, activation: str, dtype, device):
        super().__init__()
        hidden, output = layers[:-1], layers[-1]
        self.weights = torch.nn.ParameterList()
        self.biases = torch.nn.ParameterList()
        self.timesteps = torch.nn.ParameterDict()
        self.residual = [layer.residual for layer in hidden]

        def parameter(array):
            values = torch.as_tensor(np.asarray(array), dtype=dtype, device=device).clone()
            return torch.nn.Parameter(values, requires_grad=False)

        for index, layer in enumerate(hidden):
            self.weights.append(parameter(layer.weight))
            self.biases.append(parameter(layer.bias))
            if layer.timestep is not None:
                self.timesteps[str(index)] = parameter(layer.timestep)
        self.output_weight = parameter(output.weight)  # [outputs, width]
        self.output_bias = parameter(output.bias)  # [outputs]
        self.activation = torch.tanh if activation == "tanh" else torch.nn.functional.silu

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        """inputs [rows, in] -> outputs [rows, outputs]."""
        hidden = inputs
        for index, (weight, bias) in enumerate(zip(self.weights, self.biases)):
            activated = self.activation(hidden @ weight.T + bias)
            if self.residual[index]:
                timestep = self.timesteps[str(index)] if str(index) in self.timesteps else None
                hidden = hidden + (activated if timestep is None else timestep * activated)
            else:
                hidden = activated
        return hidden @ self.output_weight.T + self.output_bias


def _hermite_interval_table(table: np.ndarray, dr: float, dtype, device) -> torch.Tensor:
    """Rearrange a radial table [T, T, L+1, K+1, 3, M] (f, f', f'') into per-interval
    coefficients [T * T * K, 6, L+1, M] = (p0, v0, a0, a1, v1, p1 - p0) of section 3,
    with v = f' dr and a = f'' dr^2, so that one gather per edge fetches an interval.

    The last slot is the difference of the interval's two values, formed in float64
    before the cast to dtype, and goes with the basis (1, h1, ..., h5) of
    ``_hermite_basis`` (h0 + h5 = 1): p0 h0 + p1 h5 as two products of about |p| that
    cancel to about |f'| dr lost |p| / (|f'| dr) times their rounding in float32,
    most in the forces (bench/NOTES.md v47).
    """
    knots = torch.as_tensor(np.asarray(table, dtype=np.float64))
    t_count, _, degrees, knot_count, _, channels = knots.shape
    value, slope, curvature = knots[..., 0, :], knots[..., 1, :] * dr, knots[..., 2, :] * dr * dr
    # each [T, T, L+1, K+1, M]; lower knot q = 0..K-1, upper knot q+1
    lower, upper = slice(0, knot_count - 1), slice(1, knot_count)
    coefficients = torch.stack(
        (
            value[:, :, :, lower],
            slope[:, :, :, lower],
            curvature[:, :, :, lower],
            curvature[:, :, :, upper],
            slope[:, :, :, upper],
            value[:, :, :, upper] - value[:, :, :, lower],
        ),
        dim=3,
    )  # [T, T, L+1, 6, K, M]
    coefficients = coefficients.permute(0, 1, 4, 3, 2, 5).contiguous()  # [T, T, K, 6, L+1, M]
    return coefficients.reshape(t_count * t_count * (knot_count - 1), 6, degrees, channels).to(dtype=dtype, device=device)


def _hermite_basis(t: torch.Tensor) -> torch.Tensor:
    """The quintic Hermite basis of section 3 for the coefficients of
    ``_hermite_interval_table``: (1, h1, h2, h3, h4, h5), t [E] -> [E, 6]; the first
    value's h0 = 1 - h5 is folded into the last slot's difference p1 - p0."""
    t2 = t * t
    t3 = t2 * t
    t4 = t3 * t
    t5 = t4 * t
    h0 = torch.ones_like(t)
    h1 = t - 6 * t3 + 8 * t4 - 3 * t5
    h2 = (t2 - 3 * t3 + 3 * t4 - t5) / 2
    h3 = (t3 - 2 * t4 + t5) / 2
    h4 = -4 * t3 + 7 * t4 - 3 * t5
    h5 = 10 * t3 - 15 * t4 + 6 * t5
    return torch.stack((h0, h1, h2, h3, h4, h5), dim=-1)


def real_harmonics(unit_vectors: torch.Tensor, l_max: int) -> torch.Tensor:
    """Racah-normalised real harmonics of section 4: u [E, 3] -> Y [E, (l_max+1)^2], spec m order."""
    x, y, z = unit_vectors[:, 0], unit_vectors[:, 1], unit_vectors[:, 2]
    columns = [torch.ones_like(x)]
    if l_max >= 1:
        columns += [x, y, z]
    if l_max >= 2:
        sqrt3 = math.sqrt(3.0)
        columns += [
            sqrt3 * x * y,
            sqrt3 * y * z,
            sqrt3 * z * x,
            sqrt3 / 2 * (x * x - y * y),
            (3 * z * z - 1) / 2,
        ]
    return torch.stack(columns, dim=-1)


class GraphModelTorch(torch.nn.Module):
    """The graph potential of docs/model-format.md in PyTorch.

    model_file_or_path: a ModelFile, a path, or the file's bytes.
    dtype: the precision of every computation (whatever the file holds).
    device: where the parameters and tables live.

    Network weights and energy_shift are ``torch.nn.Parameter``s, created with
    requires_grad False (call ``model.requires_grad_(True)`` to train them;
    export with ``to_model_file``); the radial tables are buffers. Inside, everything is
    in the model's length and energy units; the API converts from nm and to
    kJ/mol with the factors of section 8.
    """

    def __init__(self, model_file_or_path, dtype: torch.dtype = torch.float64, device="cpu"):
        super().__init__()
        model = model_file_or_path if isinstance(model_file_or_path, ModelFile) else read_model(model_file_or_path)
        shape = model.validate()
        self.shape = shape
        self.metadata = dict(model.metadata)
        self.dtype = dtype
        self.n_types = shape.n_types
        self.l_max = shape.l_max
        self.n_channels = shape.n_channels
        self.n_axis = shape.n_axis
        self.descriptor_l_sum = shape.descriptor_l_sum
        self.n_norm = shape.n_norm
        self.cutoff = shape.cutoff  # model length unit
        self.radial_r0 = shape.radial_r0
        self.radial_dr = shape.radial_dr
        self.radial_intervals = shape.radial_intervals
        self.n_interactions = shape.n_interactions
        self.length_scale_nm = model.length_scale_nm
        self.energy_scale_kj_per_mol = model.energy_scale_kj_per_mol
        self.cutoff_nm = self.cutoff * self.length_scale_nm

        self.register_buffer(
            "radial_intervals_table",
            _hermite_interval_table(model.tensors["radial.table"], self.radial_dr, dtype, device),
        )
        self.register_buffer(
            "radial_table", torch.as_tensor(model.tensors["radial.table"]).to(dtype=torch.float64, device=device)
        )
        self.register_buffer(
            "harmonic_degree",
            torch.tensor(_DEGREE_OF_HARMONIC[: (self.l_max + 1) ** 2], dtype=torch.long, device=device),
        )
        self.energy_shift = torch.nn.Parameter(
            torch.as_tensor(model.tensors["energy_shift"]).to(dtype=dtype, device=device).clone(),
            requires_grad=False,
        )
        self.fitting_networks = torch.nn.ModuleList(
            _Network(model.fitting_layers(a), shape.activation, dtype, device) for a in range(self.n_types)
        )
        if self.n_interactions == 1:
            self.register_buffer(
                "interaction_intervals_table",
                _hermite_interval_table(model.tensors["interaction.radial.table"], self.radial_dr, dtype, device),
            )
            self.register_buffer(
                "interaction_table",
                torch.as_tensor(model.tensors["interaction.radial.table"]).to(dtype=torch.float64, device=device),
            )
            self.node_networks = torch.nn.ModuleList(
                _Network(model.node_layers(a), shape.activation, dtype, device) for a in range(self.n_types)
            )
        else:
            self.interaction_intervals_table = None
            self.node_networks = None

    # -- pieces of the model (model units) ----------------------------------------
    def _radial(self, intervals_table, pair_types, r):
        """R(r) of section 3 for every edge: -> [E, L+1, M]; zero for r >= r_c."""
        knot_intervals = self.radial_intervals
        s = (r - self.radial_r0) / self.radial_dr
        interval = torch.clamp(torch.floor(s.detach()), 0, knot_intervals - 1)
        t = (r - (self.radial_r0 + interval * self.radial_dr)) / self.radial_dr
        rows = pair_types * knot_intervals + interval.to(torch.long)
        coefficients = intervals_table[rows]  # [E, 6, L+1, M]
        basis = _hermite_basis(t)  # [E, 6]
        values = torch.einsum("ec,eclm->elm", basis, coefficients)
        # Pairs handed in from outside (e.g. a list with a skin) may reach past r_c,
        # where the last polynomial would extrapolate; the model is zero there.
        return torch.where((r < self.cutoff)[:, None, None], values, torch.zeros_like(values))

    def _invariants(self, moments_left, moments_right):
        """D[l][k][k'] = sum_m left[l][m][k] right[l][m][k'] for k' < M_axis, flattened (section 5).

        moments_* [n, (L+1)^2, M] -> [n, descriptor size].
        """
        axis = moments_right[:, :, : self.n_axis]
        if self.descriptor_l_sum:
            return torch.einsum("nak,naj->nkj", moments_left, axis).flatten(1)
        per_degree = []
        for degree in range(self.l_max + 1):
            block = slice(degree * degree, (degree + 1) * (degree + 1))
            per_degree.append(torch.einsum("nak,naj->nkj", moments_left[:, block], axis[:, block]))
        return torch.stack(per_degree, dim=1).flatten(1)

    def _per_type(self, networks, inputs, types, outputs):
        """Apply the network of each particle's type: inputs [n, in] -> [n, outputs]."""
        result = inputs.new_zeros((inputs.shape[0], outputs))
        for type_index, network in enumerate(networks):
            members = torch.nonzero(types == type_index, as_tuple=True)[0]
            if members.numel():
                result = result.index_copy(0, members, network(inputs[members]))
        return result

    def particle_energies_model_units(self, positions, types, box, pairs, centers=None):
        """E_i [n] in the model's energy unit; positions [n, 3], box [3, 3] in the model's
        length unit; pairs = (i [P], j [P], image counts [P, 3]).

        centers: None, or (start, stop) for the energies of particles start..stop-1 alone
        ([stop - start]), from pairs whose centers i all lie in that range (not checked here:
        the caller selects them, e.g. ``pairs_of_centers``). A system's energy is then the sum
        over ranges that cover it, each evaluated (and differentiated) on its own, so that a
        system too large for one evaluation's memory runs in pieces. Models without an
        interaction block only: with one, E_i needs its neighbours' node features, which
        need their own pairs.
        """
        center, neighbor, shifts = pairs
        if centers is None:
            first, n, center_types = 0, positions.shape[0], types
        else:
            if self.n_interactions:
                raise ValueError("centers: energies of a range of particles need a model without an interaction "
                                 "block (a centre's energy depends on its neighbours' node features)")
            bounds = tuple(centers) if isinstance(centers, (tuple, list)) else ()
            integral = len(bounds) == 2 and all(isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in bounds)
            if not (integral and 0 <= bounds[0] <= bounds[1] <= positions.shape[0]):
                raise ValueError(f"centers: expected (start, stop) integers with 0 <= start <= stop <= "
                                 f"{positions.shape[0]} (the particles), found {centers!r}")
            first, stop = int(bounds[0]), int(bounds[1])
            n, center_types = stop - first, types[first:stop]
        displacement = positions[neighbor] - positions[center]
        if box is not None and shifts.shape[0]:
            displacement = displacement + shifts.to(positions.dtype) @ box
        r = torch.linalg.vector_norm(displacement, dim=-1)
        unit = displacement / r[:, None]
        harmonics = real_harmonics(unit, self.l_max)  # [E, (L+1)^2]
        pair_types = types[center] * self.n_types + types[neighbor]
        radial = self._radial(self.radial_intervals_table, pair_types, r)  # [E, L+1, M]
        degree = self.harmonic_degree
        edge_moments = radial[:, degree, :] * harmonics[:, :, None]  # [E, (L+1)^2, M]
        lm_count = harmonics.shape[1]
        rows = center if first == 0 else center - first
        moments = positions.new_zeros((n, lm_count, self.n_channels)).index_add(0, rows, edge_moments)
        moments = moments / self.n_norm
        descriptor = self._invariants(moments, moments)
        fitting_input = descriptor
        if self.n_interactions == 1:
            node_features = self._per_type(self.node_networks, descriptor, types, self.n_channels)  # [n, M]
            radial2 = self._radial(self.interaction_intervals_table, pair_types, r)
            edge_messages = radial2[:, degree, :] * node_features[neighbor][:, None, :] * harmonics[:, :, None]
            messages = positions.new_zeros((n, lm_count, self.n_channels)).index_add(0, center, edge_messages)
            messages = messages / self.n_norm
            fitting_input = torch.cat((descriptor, self._invariants(messages, moments)), dim=1)
        energies = self._per_type(self.fitting_networks, fitting_input, center_types, 1)[:, 0]
        return energies + self.energy_shift[center_types]

    # -- public API (OpenMM units) ---------------------------------------------------
    def _prepare(self, positions_nm, types, box_nm):
        positions_nm = _as_tensor(positions_nm, dtype=self.dtype, device=self.radial_intervals_table.device)
        types = _as_tensor(types)
        if types.is_floating_point() or types.is_complex() or types.dtype == torch.bool:
            raise ValueError(f"types: expected integers, found dtype {types.dtype}")
        types = types.to(dtype=torch.long, device=positions_nm.device)
        if positions_nm.ndim != 2 or positions_nm.shape[1] != 3:
            raise ValueError(f"positions: expected shape [n, 3], found {list(positions_nm.shape)}")
        check_finite_positions(positions_nm)
        if types.shape != (positions_nm.shape[0],):
            raise ValueError(f"types: expected shape [{positions_nm.shape[0]}], found {list(types.shape)}")
        if types.numel() and (int(types.min()) < 0 or int(types.max()) >= self.n_types):
            raise ValueError(f"types: expected values in [0, {self.n_types}), found {types.min()}..{types.max()}")
        if box_nm is not None:
            box_nm = _as_tensor(box_nm, dtype=self.dtype, device=positions_nm.device)
            if box_nm.shape != (3, 3):
                raise ValueError(f"box: expected shape [3, 3], found {list(box_nm.shape)}")
        return positions_nm, types, box_nm

    def energy(self, positions_nm, types, box_nm=None, particle_energies: bool = False, pairs=None):
        """Potential energy in kJ/mol (a 0-d tensor, or [n] per-particle energies).

        positions_nm: [n, 3] in nm (differentiable); types: [n] integers in
        [0, T); box_nm: None or [3, 3] in nm, rows a, b, c in OpenMM's reduced
        triclinic form; pairs: optional (i [P], j [P], image counts [P, 3]) as
        returned by ``neighbor_pairs`` (built here when None). Pairs at or
        beyond the cut-off contribute nothing.
        """
        positions_nm, types, box_nm = self._prepare(positions_nm, types, box_nm)
        if pairs is None:
            pairs = neighbor_pairs(positions_nm.detach(), box_nm, self.cutoff_nm)
        else:
            check_pairs(pairs, positions_nm, box_nm, self.cutoff_nm)
        positions = positions_nm / self.length_scale_nm
        box = None if box_nm is None else box_nm / self.length_scale_nm
        energies = self.particle_energies_model_units(positions, types, box, pairs) * self.energy_scale_kj_per_mol
        return energies if particle_energies else energies.sum()

    def forward(self, positions_nm, types, box_nm=None, pairs=None):
        """Total energy in kJ/mol (see ``energy``)."""
        return self.energy(positions_nm, types, box_nm, pairs=pairs)

    def energy_and_forces(self, positions_nm, types, box_nm=None, pairs=None):
        """(energy in kJ/mol as float, forces [n, 3] in kJ/mol/nm as float64 numpy), by autograd."""
        positions = _as_tensor(positions_nm, dtype=self.dtype, device=self.radial_intervals_table.device)
        positions = positions.detach().clone().requires_grad_(True)
        energy = self.energy(positions, types, box_nm, pairs=pairs)
        (gradient,) = torch.autograd.grad(energy, positions)
        return float(energy.detach()), (-gradient).detach().to("cpu", torch.float64).numpy()

    def to_model_file(self, dtype: str = "float64") -> ModelFile:
        """Export the current parameters (and the original tables) as a ModelFile."""
        tensors = {
            "radial.table": self.radial_table.cpu().numpy().astype(dtype),
            "energy_shift": self.energy_shift.detach().cpu().numpy().astype(dtype),
        }
        networks = [("fitting", self.fitting_networks)]
        if self.n_interactions == 1:
            tensors["interaction.radial.table"] = self.interaction_table.cpu().numpy().astype(dtype)
            networks.append(("node", self.node_networks))
        for kind, per_type in networks:
            for type_index, network in enumerate(per_type):
                prefix = f"{kind}.{type_index}"
                for index, (weight, bias) in enumerate(zip(network.weights, network.biases)):
                    tensors[f"{prefix}.{index}.weight"] = weight.detach().cpu().numpy().astype(dtype)
                    tensors[f"{prefix}.{index}.bias"] = bias.detach().cpu().numpy().astype(dtype)
                    if str(index) in network.timesteps:
                        tensors[f"{prefix}.{index}.timestep"] = (
                            network.timesteps[str(index)].detach().cpu().numpy().astype(dtype)
                        )
                tensors[f"{prefix}.out.weight"] = network.output_weight.detach().cpu().numpy().astype(dtype)
                tensors[f"{prefix}.out.bias"] = network.output_bias.detach().cpu().numpy().astype(dtype)
        model = ModelFile(dict(self.metadata), tensors)
        model.validate()
        return model
