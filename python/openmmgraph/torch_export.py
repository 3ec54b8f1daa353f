"""The project's model as a TorchScript module with the graph interface of
docs/torch-models.md: the reference example of a bring-your-own-model for the
LibTorch path of the GraphForce (issue 6, part 1).

    from openmmgraph.torch_export import export_torchscript, read_metadata
    export_torchscript("model.safetensors", "model.pt")        # TorchScript archive
    module = torch.jit.load("model.pt")
    energies = module(positions, types, row_offsets, neighbors, edge_vectors, box, n_owned, 0)

The module computes the same model as ``GraphModelTorch`` (and the Reference
platform), but takes the graph from its caller, as the plugin hands it over:

positions     [n_local, 3]  model length unit; rows [0, n_owned) are the owned
              particles, the rest ghosts (copies owned by another domain)
types         [n_local]     int64, model types
row_offsets   [n_owned + 1] int64, CSR offsets of the rows of the owned centers
neighbors     [n_edges]     int64, local index (owned or ghost) of each edge's neighbour,
              rows in canonical order (fixed-point r^2, then index)
edge_vectors  [n_edges, 3]  x_neighbor - x_center with periodic shifts applied,
              model length unit (the model differentiates with respect to these)
box           [3, 3] rows a, b, c in the model length unit, or [0, 3] when not periodic
n_owned       int
communicator  int, a handle of the communicate interface (0: one domain)

It returns the energies of the owned particles, [n_owned], in the model's
energy unit (their sum is the energy of this domain); forces follow by
autograd with respect to edge_vectors (and positions).  Node features of the
interaction block reach ghost rows through ``torch.ops.openmmgraph.communicate``
when the module was exported with that operator loaded; without it a module
with an interaction block refuses ghosts with a clear error.

The archive carries ``openmmgraph.json`` (an extra file): format, version,
units, cut-off (model length unit), types, dtype and outputs; see
``read_metadata``.

``export_aoti`` writes the same model as an AOTInductor package (``.pt2``,
compiled ahead of time for the CPU) whose program returns the energies *and*
their gradients, since a package cannot run autograd:

    (energies [n], dE/d edge_vectors [n_edges, 3], dE/d positions [n, 3])
        = program(positions, types, row_offsets, neighbors, edge_vectors, box)

with one domain (n_owned = n, no ghosts) and box always [3, 3] (zeros when the
system is not periodic); particle and edge counts are dynamic.
"""

import contextlib
import inspect
import json
import math
import os
import threading
from typing import List, Optional, Tuple

import torch

from .modelfile import ModelFile, check_output_path, read_model, same_or_inside
from .torch_model import GraphModelTorch, _Network

METADATA_FILE = "openmmgraph.json"
METADATA_FORMAT = "openmm-graph-torch"
METADATA_VERSION = 1


class _ScriptNetwork(torch.nn.Module):
    """A scriptable copy of one network (hidden layers, optionally residual, then a linear output)."""

    weights: List[torch.Tensor]
    biases: List[torch.Tensor]
    timesteps: List[torch.Tensor]
    residual: List[bool]

    def __init__(self, network: _Network, dtype: torch.dtype):
        super().__init__()
        self.weights = [w.detach().to(dtype).clone() for w in network.weights]
        self.biases = [b.detach().to(dtype).clone() for b in network.biases]
        self.timesteps = []
        for index in range(len(network.weights)):
            key = str(index)
            step = network.timesteps[key].detach().to(dtype).clone() if key in network.timesteps else torch.zeros(0, dtype=dtype)
            self.timesteps.append(step)
        self.residual = [bool(r) for r in network.residual]
        self.output_weight = torch.nn.Parameter(network.output_weight.detach().to(dtype).clone(), requires_grad=False)
        self.output_bias = torch.nn.Parameter(network.output_bias.detach().to(dtype).clone(), requires_grad=False)
        self.tanh = network.activation is torch.tanh

    def _apply(self, fn, recurse=True):
        # Module.to / .cuda / .double move parameters and buffers; the scriptable tensor lists go along.
        super()._apply(fn, recurse)
        self.weights = [fn(w) for w in self.weights]
        self.biases = [fn(b) for b in self.biases]
        self.timesteps = [fn(t) for t in self.timesteps]
        return self

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        hidden = inputs
        for index in range(len(self.weights)):
            z = hidden @ self.weights[index].t() + self.biases[index]
            activated = torch.tanh(z) if self.tanh else torch.nn.functional.silu(z)
            if self.residual[index]:
                step = self.timesteps[index]
                hidden = hidden + (activated if step.numel() == 0 else step * activated)
            else:
                hidden = activated
        return hidden @ self.output_weight.t() + self.output_bias


class GraphScriptModel(torch.nn.Module):
    """The model of docs/model-format.md on a graph given by the caller (see the module docstring)."""

    static_shapes: torch.jit.Final[bool]  # a constant of the scripted module: the other branch is not compiled
    # Whether the interaction block's exchange is a collective call made by every domain, ghosts or not
    # (GraphScriptModelWithCommunicate; docs/communicate.md, the collective rule): a constant, like static_shapes.
    exchange_always: torch.jit.Final[bool]

    def __init__(self, model: GraphModelTorch, dtype: torch.dtype = torch.float64, static_shapes: bool = False):
        super().__init__()
        # static_shapes: every type's network runs on all rows and torch.where keeps each row's own (T times the network
        # work), instead of gathering each type's rows with torch.nonzero (which waits for the device and gives shapes
        # that depend on the data); then nothing in forward or its backward synchronises with the host.
        self.static_shapes = bool(static_shapes)
        self.exchange_always = self._exchange_is_collective()
        self.n_types = int(model.n_types)
        self.l_max = int(model.l_max)
        self.n_channels = int(model.n_channels)
        self.n_axis = int(model.n_axis)
        self.descriptor_l_sum = bool(model.descriptor_l_sum)
        self.n_norm = float(model.n_norm)
        self.cutoff = float(model.cutoff)
        self.radial_r0 = float(model.radial_r0)
        self.radial_dr = float(model.radial_dr)
        self.radial_intervals = int(model.radial_intervals)
        self.n_interactions = int(model.n_interactions)
        self.register_buffer("radial_intervals_table", model.radial_intervals_table.detach().to(dtype).clone())
        self.register_buffer("harmonic_degree", model.harmonic_degree.detach().clone())
        self.register_buffer("energy_shift", model.energy_shift.detach().to(dtype).clone())
        if self.n_interactions == 1:
            self.register_buffer("interaction_intervals_table", model.interaction_intervals_table.detach().to(dtype).clone())
            self.node_networks = torch.nn.ModuleList(_ScriptNetwork(n, dtype) for n in model.node_networks)
        else:
            self.register_buffer("interaction_intervals_table", torch.zeros(0, dtype=dtype))
            self.node_networks = torch.nn.ModuleList()
        self.fitting_networks = torch.nn.ModuleList(_ScriptNetwork(n, dtype) for n in model.fitting_networks)

    def _radial(self, table: torch.Tensor, pair_types: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        """R(r) for every edge: [E, L+1, M]; zero at and beyond the cut-off."""
        s = (r - self.radial_r0) / self.radial_dr
        interval = torch.clamp(torch.floor(s.detach()), 0, self.radial_intervals - 1)
        t = (r - (self.radial_r0 + interval * self.radial_dr)) / self.radial_dr
        rows = pair_types * self.radial_intervals + interval.to(torch.long)
        t2 = t * t
        t3 = t2 * t
        t4 = t3 * t
        t5 = t4 * t
        basis = torch.stack(  # GraphModelTorch's interval table and basis: (p0, ..., p1 - p0) with (1, h1, ..., h5)
            (
                torch.ones_like(t),
                t - 6 * t3 + 8 * t4 - 3 * t5,
                (t2 - 3 * t3 + 3 * t4 - t5) / 2,
                (t3 - 2 * t4 + t5) / 2,
                -4 * t3 + 7 * t4 - 3 * t5,
                10 * t3 - 15 * t4 + 6 * t5,
            ),
            dim=-1,
        )
        values = torch.einsum("ec,eclm->elm", basis, table[rows])
        return torch.where((r < self.cutoff)[:, None, None], values, torch.zeros_like(values))

    def _harmonics(self, unit: torch.Tensor) -> torch.Tensor:
        x, y, z = unit[:, 0], unit[:, 1], unit[:, 2]
        columns = [torch.ones_like(x)]
        if self.l_max >= 1:
            columns += [x, y, z]
        if self.l_max >= 2:
            sqrt3 = math.sqrt(3.0)
            columns += [sqrt3 * x * y, sqrt3 * y * z, sqrt3 * z * x, sqrt3 / 2 * (x * x - y * y), (3 * z * z - 1) / 2]
        return torch.stack(columns, dim=-1)

    def _invariants(self, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
        n = left.shape[0]
        axis = right[:, :, : self.n_axis]
        if self.descriptor_l_sum:
            return torch.einsum("nak,naj->nkj", left, axis).reshape(n, -1)
        blocks: List[torch.Tensor] = []
        for degree in range(self.l_max + 1):
            first, last = degree * degree, (degree + 1) * (degree + 1)
            blocks.append(torch.einsum("nak,naj->nkj", left[:, first:last], axis[:, first:last]))
        return torch.stack(blocks, dim=1).reshape(n, -1)

    # The per-type networks scatter their rows back with index_add into zeros (the types' rows are disjoint, so this is
    # exact): its backward is a plain index_select, where index_copy's has an index_fill that AOTInductor's CUDA trace
    # turns into an in-place copy it refuses.
    def _node_features(self, descriptor: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
        result = descriptor.new_zeros((descriptor.shape[0], self.n_channels))
        for type_index, network in enumerate(self.node_networks):
            if self.static_shapes:
                result = torch.where((types == type_index)[:, None], network(descriptor), result)
            else:
                members = torch.nonzero(types == type_index).flatten()
                result = result.index_add(0, members, network(descriptor.index_select(0, members)))
        return result

    def _fitting(self, inputs: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
        result = inputs.new_zeros((inputs.shape[0],))
        for type_index, network in enumerate(self.fitting_networks):
            if self.static_shapes:
                result = torch.where(types == type_index, network(inputs)[:, 0], result)
            else:
                members = torch.nonzero(types == type_index).flatten()
                result = result.index_add(0, members, network(inputs.index_select(0, members))[:, 0])
        return result

    @staticmethod
    def _exchange_is_collective() -> bool:
        """False: without the operator there is nothing to join, and ghosts are refused (_exchange)."""
        return False

    def _exchange(self, features: torch.Tensor, communicator: int, n_owned: int) -> torch.Tensor:
        """Fill the ghost rows of features [n_local, M] from their owners."""
        raise RuntimeError(
            "this module has an interaction block and was given ghost particles, but it was exported without the "
            "openmmgraph::communicate operator; export it with the operator loaded (openmmgraph.communicate)"
        )

    def forward(
        self,
        positions: torch.Tensor,
        types: torch.Tensor,
        row_offsets: torch.Tensor,
        neighbors: torch.Tensor,
        edge_vectors: torch.Tensor,
        box: torch.Tensor,
        n_owned: int,
        communicator: int,
    ) -> torch.Tensor:
        n_local = positions.shape[0]
        if row_offsets.shape[0] != n_owned + 1:
            raise RuntimeError("row_offsets must have n_owned + 1 entries")
        if neighbors.shape[0] != edge_vectors.shape[0]:
            raise RuntimeError("neighbors and edge_vectors must have one row per edge")
        # The center of every edge: the last row starting at or before it (empty rows are skipped).  A search rather
        # than repeat_interleave, whose output size is data dependent: nothing here waits for the device.
        edge_index = torch.arange(edge_vectors.shape[0], device=positions.device)
        center = torch.searchsorted(row_offsets, edge_index, right=True) - 1
        r = torch.linalg.vector_norm(edge_vectors, dim=-1)
        unit = edge_vectors / r[:, None]
        harmonics = self._harmonics(unit)
        owned_types = types[:n_owned]
        pair_types = types.index_select(0, center) * self.n_types + types.index_select(0, neighbors)
        degree = self.harmonic_degree
        radial = self._radial(self.radial_intervals_table, pair_types, r)
        lm_count = harmonics.shape[1]
        edge_moments = radial[:, degree, :] * harmonics[:, :, None]
        moments = edge_vectors.new_zeros((n_owned, lm_count, self.n_channels)).index_add(0, center, edge_moments) / self.n_norm
        descriptor = self._invariants(moments, moments)
        fitting_input = descriptor
        if self.n_interactions == 1:
            features = self._node_features(descriptor, owned_types)
            # Every domain joins the exchange, also one without ghosts: the engine's call is collective (an MPI
            # domain that skipped it left the others waiting for ever).
            if n_local > n_owned or self.exchange_always:
                padded = torch.cat((features, features.new_zeros((n_local - n_owned, self.n_channels))), dim=0)
                features = self._exchange(padded, communicator, n_owned)
            radial2 = self._radial(self.interaction_intervals_table, pair_types, r)
            edge_messages = radial2[:, degree, :] * features.index_select(0, neighbors)[:, None, :] * harmonics[:, :, None]
            messages = edge_vectors.new_zeros((n_owned, lm_count, self.n_channels)).index_add(0, center, edge_messages) / self.n_norm
            fitting_input = torch.cat((descriptor, self._invariants(messages, moments)), dim=1)
        return self._fitting(fitting_input, owned_types) + self.energy_shift.index_select(0, owned_types)


class GraphScriptModelWithCommunicate(GraphScriptModel):
    """GraphScriptModel whose interaction block fills ghost node features with openmmgraph::communicate
    (scriptable only once the operator is registered: import openmmgraph.communicate first)."""

    @staticmethod
    def _exchange_is_collective() -> bool:
        return True

    def _exchange(self, features: torch.Tensor, communicator: int, n_owned: int) -> torch.Tensor:
        return torch.ops.openmmgraph.communicate(features, communicator, n_owned)


class GradientScriptModel(torch.nn.Module):
    """A module of the graph interface that differentiates itself: forward returns (energies [n_owned],
    dE/d edge_vectors [n_edges, 3], dE/d positions [n_local, 3]) of the sum of its energies (interface
    "particle_energies_and_gradients"; call it with autograd enabled, as the plugin does)."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner

    def forward(
        self,
        positions: torch.Tensor,
        types: torch.Tensor,
        row_offsets: torch.Tensor,
        neighbors: torch.Tensor,
        edge_vectors: torch.Tensor,
        box: torch.Tensor,
        n_owned: int,
        communicator: int,
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        positions = positions.detach().requires_grad_(True)
        edge_vectors = edge_vectors.detach().requires_grad_(True)
        energies = self.inner(positions, types, row_offsets, neighbors, edge_vectors, box, n_owned, communicator)
        gradients = torch.autograd.grad([energies.sum()], [edge_vectors, positions], allow_unused=True)
        grad_edges = gradients[0]
        grad_positions = gradients[1]
        if grad_edges is None:
            grad_edges = torch.zeros_like(edge_vectors)
        if grad_positions is None:
            grad_positions = torch.zeros_like(positions)
        return energies.detach(), grad_edges, grad_positions


def _communicate_available() -> bool:
    try:
        return hasattr(torch.ops.openmmgraph, "communicate") and torch.ops.openmmgraph.communicate is not None
    except (AttributeError, RuntimeError):
        return False


def _check_export_output(model, path, what: str) -> None:
    """Before any work: ``path`` can be written, and it is not the model file being exported (which the export
    replaced: the model lost, and a comparison of the two afterwards compared the export with itself)."""
    check_output_path(path, f"{what}: output", create_folder=True)
    if isinstance(model, (str, os.PathLike)) and same_or_inside(path, model) == "is":
        raise ValueError(f"{what}: the output {os.fspath(path)!r} is the model file being exported; choose another path")


def export_torchscript(model, path: str, dtype: str = "float64", use_communicate: Optional[bool] = None,
                       gradients: bool = False, static_shapes: bool = False) -> dict:
    """Write the model (a model file path, bytes, ModelFile or GraphModelTorch) as a TorchScript
    archive with the graph interface and its metadata; returns the metadata.

    dtype: "float64" or "float32", the precision of the exported computation.
    use_communicate: route ghost node features through openmmgraph::communicate (default: when the
    model has an interaction block and the operator is registered).
    gradients: the module returns (energies, dE/d edge_vectors, dE/d positions) itself (interface
    "particle_energies_and_gradients", GradientScriptModel) instead of energies for the plugin to
    differentiate.
    static_shapes: run every type's network on all rows (GraphScriptModel), so that nothing waits
    for the device; the metadata then says "capturable": true (the CUDA platform may capture the
    model into a CUDA graph). Costs n_types times the network work.
    """
    if dtype not in ("float64", "float32"):
        raise ValueError(f"dtype must be 'float64' or 'float32', found {dtype!r}")
    _check_export_output(model, path, "export_torchscript")
    torch_dtype = torch.float64 if dtype == "float64" else torch.float32
    if not isinstance(model, GraphModelTorch):
        model = GraphModelTorch(model if isinstance(model, ModelFile) else read_model(model), dtype=torch.float64)
    if use_communicate is None:
        use_communicate = model.n_interactions == 1 and _communicate_available()
    if use_communicate and not _communicate_available():
        raise RuntimeError("use_communicate=True but torch.ops.openmmgraph.communicate is not registered; import openmmgraph.communicate")
    cls = GraphScriptModelWithCommunicate if use_communicate else GraphScriptModel
    module = cls(model, torch_dtype, static_shapes).eval()
    scripted = torch.jit.script(GradientScriptModel(module).eval() if gradients else module)
    metadata = _metadata(model, dtype, use_communicate)
    if static_shapes:
        # With one domain (the CUDA platform: no ghosts, handle 0) communicate is a copy on the device, no engine call.
        metadata["capturable"] = True
    if gradients:
        metadata["interface"] = "particle_energies_and_gradients"
        metadata["program"] = "torchscript"
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    import io

    from .modelfile import write_atomically

    archive = io.BytesIO()
    torch.jit.save(scripted, archive, _extra_files={METADATA_FILE: json.dumps(metadata, indent=1)})
    write_atomically(path, archive.getvalue())  # a failure leaves an existing file at path as it was
    return metadata


def _metadata(model: GraphModelTorch, dtype: str, use_communicate: bool) -> dict:
    """openmmgraph.json of an exported model (docs/torch-models.md)."""
    return {
        "format": METADATA_FORMAT,
        "version": METADATA_VERSION,
        "interface": "particle_energies",
        "length_unit": model.metadata.get("length_unit", "nm"),
        "energy_unit": model.metadata.get("energy_unit", "kJ/mol"),
        "length_scale_nm": model.length_scale_nm,
        "energy_scale_kj_per_mol": model.energy_scale_kj_per_mol,
        "cutoff": model.cutoff,
        "types": [
            {"name": name, "atomic_number": int(z)}
            for name, z in zip(_type_names(model), _atomic_numbers(model))
        ],
        "dtype": dtype,
        "uses_communicate": bool(use_communicate),
        "n_interactions": int(model.n_interactions),
    }


def _example_graph(model: GraphModelTorch, dtype: torch.dtype):
    """A small periodic example graph (64 particles, about 25 neighbours each) in the model's units, to trace with."""
    cutoff_nm = model.cutoff * model.length_scale_nm
    side = 2.2 * cutoff_nm
    generator = torch.Generator().manual_seed(0)
    positions = torch.rand((64, 3), generator=generator, dtype=torch.float64) * side
    box = torch.eye(3, dtype=torch.float64) * side
    row_offsets, neighbors, vectors = canonical_graph(positions, box, cutoff_nm, model.length_scale_nm)
    types = torch.arange(64, dtype=torch.int64) % model.n_types
    scale = 1.0 / model.length_scale_nm
    return ((positions * scale).to(dtype), types, row_offsets, neighbors, vectors.detach().to(dtype), (box * scale).to(dtype))


# Held while a compile runs with torch's method replaced (_int_array_declarations_where_used): exports in other threads
# wait for it, and a nested one in the same thread finds the replacement in place and puts it back as it found it.
_declarations_lock = threading.RLock()


def _wrapper_with_int_array_cache():
    """torch's CppWrapperCpu where it has the cached ``codegen_int_array_var`` and the uncached
    ``_codegen_int_array_var_impl(int_array, writeline, known_statically)`` that
    _int_array_declarations_where_used relies on (torch 2.11 to at least 2.15), else None."""
    try:
        from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu

        impl = getattr(CppWrapperCpu, "_codegen_int_array_var_impl", None)
        if (impl is not None and "codegen_int_array_var" in CppWrapperCpu.__dict__
                and list(inspect.signature(impl).parameters)[:4] == ["self", "int_array", "writeline", "known_statically"]):
            return CppWrapperCpu
    except (ImportError, TypeError, ValueError):
        pass
    return None


@contextlib.contextmanager
def _int_array_declarations_where_used():
    """While AOTInductor generates a package's C++ wrapper: every size or stride array gets its own declaration where
    it is used, instead of a cached one.

    torch 2.11's ``CppWrapperCpu.codegen_int_array_var`` caches the ``int_array_N`` variable of each array under
    ``id(writeline)``, the id of a bound method that lives for one call. When CPython gives that address to the
    ``writeline`` of another buffer or scope, a cache hit returns a variable declared where the new code cannot see
    it, and the wrapper fails to compile ("'int_array_26' was not declared in this scope"; a CUDA package of the
    interaction model on an H100, bench/NOTES.md v60). Whether it happens depends on addresses, so the same export
    may pass or fail (pytorch/pytorch#140220; fixed upstream by #193621 and #193628, which key on the buffer and skip
    the cache where the key is not stable). Each call mints a new name, so declaring every array where it is used is
    always correct: the wrapper only gets more declarations. Where torch lacks the methods it relies on
    (_wrapper_with_int_array_cache), nothing is changed."""
    CppWrapperCpu = _wrapper_with_int_array_cache()
    if CppWrapperCpu is None:
        yield
        return

    def declared_where_used(self, int_array, writeline, known_statically=False, graph=None):
        return self._codegen_int_array_var_impl(int_array, writeline, known_statically)

    with _declarations_lock:
        replaced = CppWrapperCpu.__dict__["codegen_int_array_var"]
        CppWrapperCpu.codegen_int_array_var = declared_where_used
        try:
            yield
        finally:
            CppWrapperCpu.codegen_int_array_var = replaced


def export_aoti(model, path: str, dtype: str = "float64", device: str = "cpu", static_shapes: Optional[bool] = None) -> dict:
    """Write the model (a model file path, bytes, ModelFile or GraphModelTorch) as an AOTInductor
    package (``path`` ends in .pt2) whose program returns the energies and their gradients (module
    docstring), with openmmgraph.json (interface "particle_energies_and_gradients", program
    "aotinductor", device); returns the metadata.

    device: "cpu" (for the Reference and CPU platforms) or "cuda" (for the CUDA platform; compiling
    needs a CUDA GPU and Triton, and the package runs on GPUs of the kind it was compiled on).
    static_shapes: as for export_torchscript (default: for "cuda", so that the program has no
    shapes that depend on the data and never waits for the device).

    The forward and backward of GraphScriptModel are traced together into one graph of ATen
    operations (make_fx, symbolic shapes), exported with dynamic particle and edge counts and
    compiled by AOTInductor; the package runs where it was compiled (this CPU architecture or GPU).
    """
    from torch.export import Dim, export
    from torch.func import functionalize
    from torch.fx.experimental.proxy_tensor import make_fx

    if dtype not in ("float64", "float32"):
        raise ValueError(f"dtype must be 'float64' or 'float32', found {dtype!r}")
    if not str(path).endswith(".pt2"):
        raise ValueError(f"an AOTInductor package must be named *.pt2, found {path!r}")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', found {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("export_aoti(device='cuda') compiles the package for the GPU and needs one (torch.cuda.is_available() is False)")
    _check_export_output(model, path, "export_aoti")
    torch_dtype = torch.float64 if dtype == "float64" else torch.float32
    if not isinstance(model, GraphModelTorch):
        model = GraphModelTorch(model if isinstance(model, ModelFile) else read_model(model), dtype=torch.float64)
    if static_shapes is None:
        static_shapes = device == "cuda"
    module = GraphScriptModel(model, torch_dtype, static_shapes).eval().requires_grad_(False).to(device)

    def program(positions, types, row_offsets, neighbors, edge_vectors, box):
        with torch.enable_grad():
            positions = positions.detach().requires_grad_(True)
            edge_vectors = edge_vectors.detach().requires_grad_(True)
            energies = module(positions, types, row_offsets, neighbors, edge_vectors, box, positions.shape[0], 0)
            # grad_outputs materialised (not the expanded ones of sum()'s backward), for a trace without views of it.
            grad_edges, grad_positions = torch.autograd.grad(energies, (edge_vectors, positions), grad_outputs=torch.ones_like(energies),
                                                             allow_unused=True)
        if grad_positions is None:
            grad_positions = torch.zeros_like(positions)
        if grad_edges is None:
            grad_edges = torch.zeros_like(edge_vectors)
        return energies.detach(), grad_edges, grad_positions

    class _Program(torch.nn.Module):
        def __init__(self, graph):
            super().__init__()
            self.graph_module = graph

        def forward(self, positions, types, row_offsets, neighbors, edge_vectors, box):
            return self.graph_module(positions, types, row_offsets, neighbors, edge_vectors, box)

    example = tuple(tensor.to(device) for tensor in _example_graph(model, torch_dtype))
    traced = make_fx(program, tracing_mode="symbolic", _allow_non_fake_inputs=True)(*example)
    # Traced again through functionalization: no in-place operation or view mutation is left for AOTInductor (on CUDA
    # some backward decompositions otherwise leave a copy_ into a fresh tensor, which its export refuses).
    traced = make_fx(functionalize(traced, remove="mutations_and_views"), tracing_mode="symbolic", _allow_non_fake_inputs=True)(*example)
    particles, edges = Dim("particles", min=2), Dim("edges", min=1)
    exported = export(_Program(traced), example, dynamic_shapes=({0: particles}, {0: particles}, {0: particles + 1}, {0: edges},
                                                                  {0: edges}, None), strict=False)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    if os.path.isdir(path):
        raise IsADirectoryError(f"export_aoti: {path!r} is a directory")
    configs = {}
    if device == "cuda":
        # By default AOTInductor autotunes its Triton kernels at compile time on generated inputs (random floats, zero
        # integers): the graph gathers by neighbour and center indices computed from them, and the bounds asserts of
        # those gathers fail on the device (measured on an H200: a device-side assert).  Without compile-time
        # autotuning, AOTInductor runs a first JIT pass on the real example graph to choose the kernels' launch
        # configurations, then generates the package.
        configs["triton.autotune_at_compile_time"] = False
    metadata = _metadata(model, dtype, False)
    metadata["interface"] = "particle_energies_and_gradients"
    metadata["program"] = "aotinductor"
    metadata["device"] = device
    # What the program is compiled for, recorded in it: the plugin compares it with openmmgraph.json at load (an
    # edited type list or dtype would index past the program's tables, which aborts the process).
    configs["aot_inductor.metadata"] = {"openmmgraph_num_types": str(len(metadata["types"])), "openmmgraph_dtype": dtype}
    # The package is made beside `path` and moved over it only when complete: a failed compile (or an interrupt)
    # leaves an existing package at `path` as it was.
    import zipfile

    from .modelfile import replace_file, temporary_path

    temporary = temporary_path(os.path.join(directory, os.path.basename(path)), ".pt2")
    try:
        with _int_array_declarations_where_used():
            torch._inductor.aoti_compile_and_package(exported, package_path=temporary, inductor_configs=configs)
        with zipfile.ZipFile(temporary, "a", compression=zipfile.ZIP_STORED) as archive:
            folder = archive.namelist()[0].split("/")[0]
            archive.writestr(f"{folder}/extra/{METADATA_FILE}", json.dumps(metadata, indent=1))
        replace_file(temporary, path)  # an existing package keeps its mode (and a symbolic link its target)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)
    return metadata


def read_metadata(path, *, source: Optional[str] = None) -> dict:
    """The openmmgraph.json metadata of an exported TorchScript archive or AOTInductor package. Its format and
    version are checked here (ValueError naming the file); GraphForce's loader checks every key when it reads the
    model. path: the file (str or os.PathLike) or its bytes (then `source`, if given, names them in messages)."""
    import io
    import zipfile

    text = ""
    if isinstance(path, (bytes, bytearray, memoryview)):
        path, opened = (source or "the archive's bytes"), io.BytesIO(bytes(path))
    else:
        path = opened = os.fspath(path)
    try:
        with zipfile.ZipFile(opened) as archive:
            for name in archive.namelist():
                if name.endswith(f"/extra/{METADATA_FILE}"):
                    text = archive.read(name).decode()
                    break
    except (zipfile.BadZipFile, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: not a TorchScript archive or AOTInductor package ({error})") from None
    if not text:
        raise ValueError(f"{path}: no {METADATA_FILE} in the archive: not a model exported for openmm-graph")
    try:
        metadata = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: {METADATA_FILE} is not valid JSON ({error})") from None
    if not isinstance(metadata, dict):
        raise ValueError(f"{path}: {METADATA_FILE} is not a JSON object")
    version = metadata.get("version")
    # type(): 1.0 and true equal 1 in Python, and GraphForce's loader refuses both.
    if metadata.get("format") != METADATA_FORMAT or type(version) is not int or version != METADATA_VERSION:
        raise ValueError(f"{path}: {METADATA_FILE} has format {metadata.get('format')!r} version {metadata.get('version')!r}; "
                         f"expected {METADATA_FORMAT!r} version {METADATA_VERSION}")
    return metadata


def _type_names(model: GraphModelTorch):
    names = model.metadata.get("type_names")
    if isinstance(names, str):
        names = json.loads(names)
    return list(names) if names else [str(t) for t in range(model.n_types)]


def _atomic_numbers(model: GraphModelTorch):
    numbers = model.metadata.get("type_atomic_numbers")
    if isinstance(numbers, str):
        numbers = json.loads(numbers)
    return list(numbers) if numbers else [0] * model.n_types


def canonical_graph(positions_nm, box_nm, cutoff_nm: float, length_scale_nm: float = 1.0):
    """The compact canonical graph of all particles as the plugin builds it (one domain):
    (row_offsets [n+1], neighbors [E], edge_vectors [E, 3] in the model length unit), rows sorted
    by r^2 / r_c^2 in 32-bit fixed point, then neighbour index.  positions_nm [n, 3] float64 tensor
    (edge_vectors are differentiable with respect to it); box_nm [3, 3] or None."""
    from .torch_model import neighbor_pairs

    positions_nm = torch.as_tensor(positions_nm, dtype=torch.float64)
    box = None if box_nm is None else torch.as_tensor(box_nm, dtype=torch.float64)
    center, neighbor, shifts = neighbor_pairs(positions_nm.detach(), box, cutoff_nm)
    vectors = positions_nm[neighbor] - positions_nm[center]
    if box is not None and shifts.shape[0]:
        vectors = vectors + shifts.to(torch.float64) @ box
    r2 = (vectors.detach() ** 2).sum(-1)
    key = torch.clamp(r2 / (cutoff_nm * cutoff_nm) * 4294967295.0, max=4294967295.0).to(torch.int64)
    inside = r2 < cutoff_nm * cutoff_nm
    center, neighbor, vectors, key = center[inside], neighbor[inside], vectors[inside], key[inside]
    n = positions_nm.shape[0]
    order = torch.from_numpy(__import__("numpy").lexsort((neighbor.numpy(), key.numpy(), center.numpy())))
    center, neighbor, vectors = center[order], neighbor[order], vectors[order]
    row_offsets = torch.zeros(n + 1, dtype=torch.int64)
    row_offsets[1:] = torch.cumsum(torch.bincount(center, minlength=n), 0)
    return row_offsets, neighbor.to(torch.int64), vectors / length_scale_nm
