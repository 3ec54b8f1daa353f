#!/usr/bin/env python
"""The standard benchmarks of docs/benchmarks.md, with their peers, in one run.

    python bench/run_benchmarks.py                       # every grade and size, CUDA if present
    python bench/run_benchmarks.py --largest             # ... and the largest system that fits
    python bench/run_benchmarks.py --quick --platform CPU --grades small --sizes 250 --peers torch-eager

For each grade (openmmgraph.grades.make_model(grade, seed=0)) and each size
(openmmgraph.grades.lattice_system(n, n_types=T, seed=0)) it measures

- openmm-graph: the GraphForce alone in an OpenMM Context on the chosen
  platform: the force time (getState(getForces=True, getEnergy=True) of its own force group),
  the step time (VerletIntegrator, 1 fs, GraphForce the only force) and the
  device memory it took (nvidia-smi / NVML, before and after the Context);
- the floor: OpenMM's step time for the same particles with a trivial force;
- the peers: the project's PyTorch implementation (GraphModelTorch, float32)
  eager and under torch.compile, forces by autograd, without and with
  building the neighbour pairs inside the timed region (``+pairs``), and
  openm-torch's TorchForce when openmmtorch can be imported;
- with --peer-chunks K (one or more counts), the same torch peers evaluated in
  K ranges of particles, each range's energy and its gradient on their own
  (``PEER/K``), for systems whose one evaluation does not fit the device's
  memory (medium 100,800 on an 80 GB card); calibrate them against the whole
  peer where both fit, in the same run;
- with --largest, the largest system on which the GraphForce runs.

Results: a JSON file (header with the device and versions, one record per
grade, size and implementation, ratios against the peers, the step overhead),
a plot of atom-steps per second against size, and a table on stdout. A failure
in one case is recorded in that record's "error" and the run goes on. The
JSON file is rewritten after every record, so a run that is stopped keeps what
it measured. See bench/README.md.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import os
import platform as host_platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

STANDARD_SIZES = (512, 10296, 100800, 1000000)
QUICK_SIZES = (250, 500)
ALL_GRADES = ("small", "medium", "large")
PEER_CHOICES = ("torch-eager", "torch-compile", "openmm-torch")

# fp32 peak of an NVIDIA H200 (docs/benchmarks.md): 132 SMs x 128 lanes x 2 flops x 1.98 GHz.
H200_FP32_PEAK_FLOPS = 132 * 128 * 2 * 1.98e9
# FP32 lanes per SM by compute capability (major, minor); 128 for everything newer than listed.
_FP32_LANES_PER_SM = {(6, 0): 64, (7, 0): 64, (7, 2): 64, (7, 5): 64, (8, 0): 64}

MASS_AMU = 16.0
TIMESTEP_PS = 0.001
GRAPH_FORCE_GROUP = 1
# The openmm-torch export builds pairs with the project's O(n^2) search; above this it is skipped.
OPENMM_TORCH_MAX_N = 20000
# Sizes up to this have their cell-list pairs checked against the project's neighbor_pairs.
PAIR_CHECK_MAX_N = 5000


def openmm_cuda_particle_limit(precision: str) -> int:
    """The most particles OpenMM 8.6.1's CUDA platform can hold in one Context at this precision.

    Its arrays copy from the host with a byte count formed in 32-bit int (CudaArray::uploadSubArray's
    ``elements * elementSize``), so no per-particle array may exceed 2^31 - 1 bytes. The widest are double4
    (32 bytes a particle: posDelta and velm) in mixed and double precision and float4 (16 bytes) in single,
    over OpenMM's padded particle count (a multiple of 32). 70,000,000 particles in mixed precision failed
    with "Error uploading array posDelta: CUDA_ERROR_INVALID_VALUE" before any GraphForce work (bench/NOTES.md
    v41); 67,100,000 ran."""
    bytes_per_particle = 16 if precision == "single" else 32
    return ((2**31 - 1) // bytes_per_particle) // 32 * 32


def search_largest(attempt_size, start_n: int, *, largest_max: int, openmm_limit: int | None, bisections: int,
                   seconds_left) -> dict:
    """The largest system search: from start_n, double while attempt_size(n) runs, then bisect between the last n
    that ran and the first that failed. attempt_size(n) -> {"ok", "error", "seconds", ...}; seconds_left() -> the
    time budget left (an attempt is made only when it exceeds 2.5x the last one's time, 1.5x in the bisection).
    Never tries more than largest_max, nor more than openmm_limit (openmm_cuda_particle_limit): a doubling past
    that limit tries the limit itself. Returns {"largest_n", "smallest_failed_n", "limited_by", "attempts"}."""
    attempts: list[dict] = []
    good, bad, n, limited_by = None, None, start_n, None
    last_seconds = 0.0

    def attempt_at(size: int) -> dict:
        nonlocal last_seconds
        attempt = attempt_size(size)
        attempts.append(attempt)
        last_seconds = attempt["seconds"]
        return attempt

    while True:
        if openmm_limit is not None and n > openmm_limit:
            if good is not None and good >= openmm_limit:
                limited_by = f"OpenMM's CUDA platform: at most {openmm_limit:,} particles (2 GiB arrays)"
                break
            n = openmm_limit
        if n > largest_max:
            limited_by = f"cap --largest-max {largest_max}"
            break
        if seconds_left() <= 2.5 * last_seconds:
            limited_by = "time budget"
            break
        attempt = attempt_at(n)
        if attempt["ok"]:
            good = n
            n *= 2
        else:
            bad = n
            limited_by = "out of memory" if attempt["error"].startswith("out of memory") else "error"
            break
    if good is not None and bad is not None:
        for _ in range(bisections):
            if bad - good <= max(1, good // 100):
                break
            middle = (good + bad) // 2
            if seconds_left() <= 1.5 * last_seconds:
                break
            if attempt_at(middle)["ok"]:
                good = middle
            else:
                bad = middle
    return {"largest_n": good, "smallest_failed_n": bad, "limited_by": limited_by, "attempts": attempts}


def log(message: str = "") -> None:
    print(message, flush=True)


def short_error(error: BaseException, limit: int = 600) -> str:
    text = f"{type(error).__name__}: {error}".strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def is_out_of_memory(error: BaseException | str) -> bool:
    text = str(error).lower()
    return any(key in text for key in ("out of memory", "outofmemory", "cuda_error_out_of_memory",
                                       "memory allocation", "bad_alloc", "cannot allocate"))


# ----------------------------------------------------------------------------------------------
# Time budget and repetition counts
# ----------------------------------------------------------------------------------------------
class Budget:
    """Wall-clock budget of the whole run (seconds)."""

    def __init__(self, seconds: float):
        self.seconds = float(seconds)
        self.start = time.perf_counter()

    def elapsed_s(self) -> float:
        return time.perf_counter() - self.start

    def left_s(self) -> float:
        return self.seconds - self.elapsed_s()

    def exhausted(self) -> bool:
        return self.left_s() <= 0


class Settings:
    """Repetition policy. Standard: >= 100 force evaluations (ours and the torch peers', as docs/benchmarks.md
    asks; 3 for an evaluation longer than huge_eval_s), >= 1000 steps."""

    def __init__(self, quick: bool):
        self.quick = quick
        self.force_min_reps = 5 if quick else 100
        self.step_min_steps = 20 if quick else 1000
        self.torch_min_reps = 3 if quick else 100
        self.torch_min_reps_huge = 3  # when one evaluation takes more than huge_eval_s
        self.huge_eval_s = 1.0
        self.target_s = 0.2 if quick else 2.0  # time a measurement aims to fill beyond its minimum
        self.max_reps = 100000
        self.warmup_reps = 1 if quick else 3


def repetitions(single_s: float, min_reps: int, settings: Settings, budget: Budget, share: float) -> tuple[int, str | None]:
    """How many repetitions to time: at least min_reps, enough to fill settings.target_s,
    but no more than `share` of the budget left allows (then below the minimum, with a note)."""
    single_s = max(single_s, 1e-7)
    reps = max(min_reps, int(math.ceil(settings.target_s / single_s)))
    reps = min(reps, settings.max_reps)
    allowed = int(max(0.0, budget.left_s()) * share / single_s)
    if reps > allowed:
        reps = max(1, allowed)
        if reps < min_reps:
            return reps, f"only {reps} repetitions (minimum {min_reps}): time budget"
    return reps, None


# ----------------------------------------------------------------------------------------------
# Device information
# ----------------------------------------------------------------------------------------------
def run_command(arguments: list[str], timeout_s: float = 20.0) -> str | None:
    if shutil.which(arguments[0]) is None:
        return None
    try:
        result = subprocess.run(arguments, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


class DeviceMemory:
    """Device memory in use on one GPU, from NVML (pynvml) or nvidia-smi; None without a GPU.

    This is what the whole device has in use (all processes and contexts), so
    differences around a Context's creation measure what that Context took,
    OpenMM's own CUDA context included.
    """

    def __init__(self, nvidia_smi_index: int | None):
        self.index = nvidia_smi_index
        self.handle = None
        if nvidia_smi_index is None:
            return
        try:
            import pynvml  # optional (package nvidia-ml-py)

            pynvml.nvmlInit()
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(nvidia_smi_index)
            self._pynvml = pynvml
        except Exception:
            self.handle = None

    def used_bytes(self) -> int | None:
        if self.index is None:
            return None
        if self.handle is not None:
            try:
                return int(self._pynvml.nvmlDeviceGetMemoryInfo(self.handle).used)
            except Exception:
                pass
        text = run_command(["nvidia-smi", f"--id={self.index}", "--query-gpu=memory.used",
                            "--format=csv,noheader,nounits"])
        try:
            return int(float(text.splitlines()[0])) * 1024 * 1024  # MiB
        except (AttributeError, IndexError, ValueError):
            return None


def nvidia_smi_query(index: int | None, fields: str) -> list[str] | None:
    if index is None:
        return None
    text = run_command(["nvidia-smi", f"--id={index}", f"--query-gpu={fields}", "--format=csv,noheader,nounits"])
    if not text:
        return None
    return [value.strip() for value in text.splitlines()[0].split(",")]


def nvidia_smi_index_of(torch_module, cuda_index: int) -> int | None:
    """nvidia-smi's index of the GPU that CUDA calls `cuda_index` (nvidia-smi ignores
    CUDA_VISIBLE_DEVICES): matched by UUID when torch reports it, else by CUDA_VISIBLE_DEVICES."""
    listing = run_command(["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"])
    if listing is None:
        return None
    rows = [[value.strip() for value in line.split(",")] for line in listing.splitlines() if line.strip()]
    try:
        uuid = str(torch_module.cuda.get_device_properties(cuda_index).uuid).lower().replace("gpu-", "")
        for index, smi_uuid in rows:
            if smi_uuid.lower().replace("gpu-", "") == uuid:
                return int(index)
    except Exception:
        pass
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        entries = [entry.strip() for entry in visible.split(",") if entry.strip()]
        if cuda_index < len(entries):
            entry = entries[cuda_index]
            if entry.isdigit():
                return int(entry)
            for index, smi_uuid in rows:
                if smi_uuid == entry or smi_uuid.replace("GPU-", "") == entry.replace("GPU-", ""):
                    return int(index)
            return None
    return cuda_index if cuda_index < len(rows) else None


def fp32_peak_flops(torch_module, cuda_index: int, smi_index: int | None) -> tuple[float, str]:
    """fp32 peak (FLOP/s) = SMs x FP32 lanes per SM x 2 x max SM clock; the H200 figure by default."""
    try:
        properties = torch_module.cuda.get_device_properties(cuda_index)
        sm_count = int(properties.multi_processor_count)
        lanes = _FP32_LANES_PER_SM.get((properties.major, properties.minor), 128)
        clock = nvidia_smi_query(smi_index, "clocks.max.sm")
        clock_hz = float(clock[0]) * 1e6 if clock and clock[0].replace(".", "", 1).isdigit() else None
        if clock_hz is None:
            clock_rate_khz = getattr(properties, "clock_rate", None)  # present in some torch builds
            clock_hz = float(clock_rate_khz) * 1e3 if clock_rate_khz else None
        if clock_hz:
            peak = sm_count * lanes * 2 * clock_hz
            return peak, f"{sm_count} SMs x {lanes} lanes x 2 x {clock_hz / 1e9:.3g} GHz"
    except Exception:
        pass
    return H200_FP32_PEAK_FLOPS, "H200 default: 132 SMs x 128 lanes x 2 x 1.98 GHz"


# What source_digest() reads: the plugin's sources (paths relative to the repository) and the files of these kinds in them.
SOURCE_PATHS = ("CMakeLists.txt", "cmake", "openmmapi", "platforms", "serialization", "wrappers", "python/CMakeLists.txt",
                "python/openmmgraph")
SOURCE_SUFFIXES = (".h", ".hpp", ".cpp", ".cu", ".cuh", ".c", ".i", ".py", ".txt", ".cmake")


def source_digest(root: str = REPO) -> str:
    """SHA-256 (the first 16 hex digits) of the plugin's sources (SOURCE_PATHS: each file's path relative to `root` and
    its contents, in path order; folders named build*, results or __pycache__ skipped), so that a result can be matched
    with the commit whose code ran: a device machine's copy of the repository may carry stale git metadata
    (bench/NOTES.md v11). `python bench/run_benchmarks.py --source-digest` prints it for the working tree."""
    import hashlib

    files = []
    for entry in SOURCE_PATHS:
        path = os.path.join(root, entry)
        if os.path.isfile(path):
            files.append(entry)
        for folder, subfolders, names in os.walk(path):
            subfolders[:] = [d for d in subfolders if not (d.startswith("build") or d in ("results", "__pycache__"))]
            for name in names:
                if name.endswith(SOURCE_SUFFIXES):
                    files.append(os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/"))
    digest = hashlib.sha256()
    for relative in sorted(set(files)):
        with open(os.path.join(root, relative), "rb") as f:
            content = f.read()
        digest.update(relative.encode() + b"\0" + str(len(content)).encode() + b"\0" + content)
    return digest.hexdigest()[:16]


def git_revision() -> str | None:
    revision = run_command(["git", "-C", REPO, "rev-parse", "--short=12", "HEAD"])
    if revision is None:
        return None
    dirty = run_command(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"])
    return revision + ("+dirty" if dirty else "")


# ----------------------------------------------------------------------------------------------
# Neighbour pairs
# ----------------------------------------------------------------------------------------------
def cell_list_pairs(positions, box, cutoff: float, chunk_elements: int = 1 << 25):
    """All ordered pairs (i, j), i != j, within `cutoff` (minimum image in an orthorhombic
    periodic box), by a cell list with 27 neighbour cells; O(n) on the positions' device.

    The same result, in the same format, as openmmgraph.torch_model.neighbor_pairs
    (i [P] long, j [P] long, image counts [P, 3] in the positions' dtype, with
    d_ij = x_j - x_i + n_a a + n_b b + n_c c), which is O(n^2) and so unusable
    for a million particles. Falls back to neighbor_pairs for a triclinic box or
    when a side holds fewer than 3 cells (small boxes), where 27 neighbour cells
    would visit a cell twice.
    """
    import torch

    from openmmgraph.torch_model import neighbor_pairs

    device, dtype = positions.device, positions.dtype
    box = box.to(device=device, dtype=dtype)
    sides = torch.diagonal(box)
    off_diagonal = box - torch.diag(sides)
    cells = [int(math.floor(float(side) / cutoff)) for side in sides]
    if bool((off_diagonal != 0).any()) or min(cells) < 3:
        return neighbor_pairs(positions, box, cutoff)
    n = positions.shape[0]
    cell_counts = torch.tensor(cells, device=device)
    fractional = positions / sides
    fractional = fractional - torch.floor(fractional)
    cell_xyz = torch.minimum((fractional * cell_counts).long(), cell_counts - 1)
    cell_id = (cell_xyz[:, 0] * cells[1] + cell_xyz[:, 1]) * cells[2] + cell_xyz[:, 2]
    n_cells = cells[0] * cells[1] * cells[2]
    order = torch.argsort(cell_id)
    sorted_cells = cell_id[order]
    occupancy = torch.bincount(cell_id, minlength=n_cells)
    first = torch.cumsum(occupancy, 0) - occupancy
    capacity = int(occupancy.max())
    table = torch.full((n_cells, capacity), -1, dtype=torch.long, device=device)
    table[sorted_cells, torch.arange(n, device=device) - first[sorted_cells]] = order
    offsets = torch.tensor([(a, b, c) for a in (-1, 0, 1) for b in (-1, 0, 1) for c in (-1, 0, 1)], device=device)
    cutoff_squared = cutoff * cutoff
    rows = max(1, chunk_elements // (27 * capacity))
    i_chunks, j_chunks, shift_chunks = [], [], []
    with torch.no_grad():
        for start in range(0, n, rows):
            stop = min(n, start + rows)
            centers = torch.arange(start, stop, device=device)
            neighbour_xyz = (cell_xyz[start:stop, None, :] + offsets[None, :, :]) % cell_counts
            neighbour_id = (neighbour_xyz[..., 0] * cells[1] + neighbour_xyz[..., 1]) * cells[2] + neighbour_xyz[..., 2]
            candidates = table[neighbour_id].reshape(stop - start, -1)  # [rows, 27 * capacity]
            valid = (candidates >= 0) & (candidates != centers[:, None])
            safe = torch.where(valid, candidates, centers[:, None])
            displacement = positions[safe] - positions[start:stop, None, :]
            shifts = -torch.floor(displacement / sides + 0.5)
            displacement = displacement + shifts * sides
            inside = valid & ((displacement * displacement).sum(-1) < cutoff_squared)
            row, column = torch.nonzero(inside, as_tuple=True)
            i_chunks.append(row + start)
            j_chunks.append(safe[row, column])
            shift_chunks.append(shifts[row, column])
    return torch.cat(i_chunks), torch.cat(j_chunks), torch.cat(shift_chunks)


# ----------------------------------------------------------------------------------------------
# OpenMM systems and contexts
# ----------------------------------------------------------------------------------------------
def count_edges(positions, box, cutoff_nm: float, torch=None, device=None) -> int:
    """Ordered pairs (i, j) within cutoff_nm of positions (n x 3, nm) in the periodic box, by cell_list_pairs in
    PyTorch on `device` (default the CPU), checked pair for pair against the project's neighbor_pairs up to
    PAIR_CHECK_MAX_N particles."""
    if torch is None:
        import torch  # noqa: F811
    device = device if device is not None else torch.device("cpu")
    p = torch.as_tensor(positions, dtype=torch.float64, device=device)
    b = torch.as_tensor(box, dtype=torch.float64, device=device)
    edges = int(cell_list_pairs(p, b, cutoff_nm)[0].shape[0])
    if p.shape[0] <= PAIR_CHECK_MAX_N:
        from openmmgraph.torch_model import neighbor_pairs

        reference = int(neighbor_pairs(p, b, cutoff_nm)[0].shape[0])
        if reference != edges:
            raise RuntimeError(f"cell list found {edges} pairs, neighbor_pairs {reference}")
    return edges


def torch_peer_evaluation(torch, model, x, t, b, compiled: bool, with_pairs: bool, chunks: int = 1):
    """(evaluate, fixed pairs) of a torch peer: evaluate() -> (energy kJ/mol, forces [n, 3] kJ/mol/nm) of the
    GraphModelTorch `model` at positions x [n, 3] nm (types t, box b, on the model's device) by autograd, under
    torch.compile if `compiled`, the pairs built in it if `with_pairs` (else once, here: the fixed pairs). With
    chunks > 1 the particles are cut into that many ranges of (nearly) equal size, and each range's energy and its
    gradient are formed on their own (the range's saved tensors freed before the next), forces summed over them."""
    from openmmgraph.grades import DEFAULT_CUTOFF_NM
    from openmmgraph.torch_model import pairs_of_centers

    n = x.shape[0]
    length_scale, energy_scale = model.length_scale_nm, model.energy_scale_kj_per_mol

    def total_energy(positions_nm, types_, box_nm, i, j, shifts, centers=None):
        energies = model.particle_energies_model_units(positions_nm / length_scale, types_,
                                                       box_nm / length_scale, (i, j, shifts), centers=centers)
        return energies.sum() * energy_scale

    energy_fn = torch.compile(total_energy, dynamic=False) if compiled else total_energy
    ranges = [(n * c // chunks, n * (c + 1) // chunks) for c in range(chunks)]
    ranges = [(start, stop) for start, stop in ranges if stop > start]  # none empty: each has a gradient

    def split(pairs):
        return [pairs_of_centers(pairs, start, stop) for start, stop in ranges] if chunks > 1 else [pairs]

    fixed_pairs = None if with_pairs else split(cell_list_pairs(x, b, DEFAULT_CUTOFF_NM))

    def evaluate():
        pieces = split(cell_list_pairs(x, b, DEFAULT_CUTOFF_NM)) if with_pairs else fixed_pairs
        xg = x.detach().requires_grad_(True)
        if chunks == 1:
            energy = energy_fn(xg, t, b, *pieces[0])
            (gradient,) = torch.autograd.grad(energy, xg)
            return energy.detach(), -gradient
        energy, gradient = 0.0, torch.zeros_like(x)
        for (start, stop), pairs in zip(ranges, pieces):
            part = energy_fn(xg, t, b, *pairs, centers=(start, stop))
            gradient += torch.autograd.grad(part, xg)[0]
            energy = energy + part.detach()
        return energy, -gradient

    return evaluate, fixed_pairs


def compile_limit(n_types: int, chunks: int) -> int:
    """torch._dynamo's recompile limit a torch.compile peer in `chunks` ranges needs: with dynamic=False each type's
    network compiles once per row count, T per range, and the energy function once per range; with a margin."""
    return 2 * chunks * (n_types + 1)


def make_openmm_system(n: int, box, trivial_force: bool, model_path: str | None = None, types=None, force_properties=None):
    """A System of n particles in the periodic box with, as its only force, either the
    GraphForce (group GRAPH_FORCE_GROUP, with the GraphForce properties force_properties) or a trivial
    CustomExternalForce "0" on every particle."""
    import openmm

    system = openmm.System()
    for _ in range(n):
        system.addParticle(MASS_AMU)
    system.setDefaultPeriodicBoxVectors(*[openmm.Vec3(*map(float, row)) for row in box])
    if trivial_force:
        force = openmm.CustomExternalForce("0")
        for i in range(n):
            force.addParticle(i, [])
    else:
        import openmmgraph

        force = openmmgraph.GraphForce(model_path)
        for i in range(n):
            force.addParticle(i, int(types[i]))
        force.setUsesPeriodicBoundaryConditions(True)
        for key, value in (force_properties or {}).items():
            force.setProperty(key, value)
    force.setForceGroup(GRAPH_FORCE_GROUP)
    system.addForce(force)
    return system


def parse_force_properties(pairs) -> dict:
    """{key: value} of --force-property KEY=VALUE arguments; a clear error for anything else."""
    properties = {}
    for pair in pairs or []:
        key, equals, value = pair.partition("=")
        if not equals or not key:
            raise SystemExit(f"--force-property expects KEY=VALUE (e.g. CheckFinite=deferred), got {pair!r}")
        properties[key] = value
    return properties


def resident_evaluator(group: int):
    """A CustomIntegrator whose step is one evaluation of force group `group`'s energy and forces, both left on the
    device (the forces in a per-dof variable, the energy in a global), as the PyTorch peers leave theirs. Its first
    step rewrites x with itself, which marks the forces stale, so every step evaluates again; OpenMM computes the
    forces and the energy of the next two steps in one evaluation (CustomIntegratorUtilities::analyzeComputations)."""
    import openmm

    evaluator = openmm.CustomIntegrator(TIMESTEP_PS)
    evaluator.addPerDofVariable("forceKept", 0)
    evaluator.addGlobalVariable("energyKept", 0)
    evaluator.addComputePerDof("x", "x")
    evaluator.addComputePerDof("forceKept", f"f{group}")
    evaluator.addComputeGlobal("energyKept", f"energy{group}")
    return evaluator


def make_context(system, positions, platform_name: str, properties: dict, evaluator_group: int | None = None):
    """A Context with a VerletIntegrator; with evaluator_group, a CompoundIntegrator of that Verlet integrator (index
    0, current) and resident_evaluator(evaluator_group) (index 1), so one Context serves both timings."""
    import openmm

    integrator = openmm.VerletIntegrator(TIMESTEP_PS)
    if evaluator_group is not None:
        compound = openmm.CompoundIntegrator()
        compound.addIntegrator(integrator)
        compound.addIntegrator(resident_evaluator(evaluator_group))
        compound.setCurrentIntegrator(0)
        integrator = compound
    platform = openmm.Platform.getPlatformByName(platform_name)
    context = openmm.Context(system, integrator, platform, properties)
    context.setPositions(positions)
    context.setVelocitiesToTemperature(0.0)
    return context, integrator


def time_force(context, settings: Settings, budget: Budget, share: float) -> tuple[float, int, str | None]:
    """Mean seconds of context.getState(getForces=True, getEnergy=True, groups={GRAPH_FORCE_GROUP}): one evaluation
    of energy and forces, as docs/benchmarks.md defines the force time and the torch peers compute (warm-up done).
    Until bench/NOTES.md v46 it asked for the forces alone, which skipped the energy sum."""
    groups = {GRAPH_FORCE_GROUP}
    start = time.perf_counter()
    context.getState(getForces=True, getEnergy=True, groups=groups)
    single_s = time.perf_counter() - start
    reps, note = repetitions(single_s, settings.force_min_reps, settings, budget, share)
    start = time.perf_counter()
    for _ in range(reps):
        context.getState(getForces=True, getEnergy=True, groups=groups)
    return (time.perf_counter() - start) / reps, reps, note


def time_resident_force(context, integrator, settings: Settings, budget: Budget, share: float) -> tuple[float, int, str | None]:
    """Mean seconds of one evaluation of the GraphForce's energy and forces left on the device: steps of the
    CompoundIntegrator's resident_evaluator (index 1). Each step reads the energy back (OpenMM sums it on the host), so
    the evaluations do not overlap; the forces are not downloaded (getState(getForces=True) downloads and reorders them
    on the host: time_force)."""
    integrator.setCurrentIntegrator(1)
    try:
        integrator.step(max(2, settings.warmup_reps))
        start = time.perf_counter()
        integrator.step(1)
        single_s = time.perf_counter() - start
        reps, note = repetitions(single_s, settings.force_min_reps, settings, budget, share)
        start = time.perf_counter()
        integrator.step(reps)
        context.getState(getPositions=True)
        return (time.perf_counter() - start) / reps, reps, note
    finally:
        integrator.setCurrentIntegrator(0)


def final_positions_nm(context) -> np.ndarray:
    """The Context's positions (nm, n x 3 float64) wrapped into the periodic box."""
    import openmm

    state = context.getState(getPositions=True, enforcePeriodicBox=True)
    return np.asarray(state.getPositions(asNumpy=True).value_in_unit(openmm.unit.nanometer), dtype=np.float64)


def time_steps(context, integrator, settings: Settings, budget: Budget, share: float) -> tuple[float, int, str | None]:
    """Mean seconds per step of integrator.step(N) followed by one getState(getPositions=True), which waits for the
    device without evaluating anything (an energy there would add one force evaluation to N steps)."""
    probe_steps = 10 if not settings.quick else 2
    start = time.perf_counter()
    integrator.step(probe_steps)
    context.getState(getPositions=True)
    single_s = (time.perf_counter() - start) / probe_steps
    steps, note = repetitions(single_s, settings.step_min_steps, settings, budget, share)
    start = time.perf_counter()
    integrator.step(steps)
    context.getState(getPositions=True)
    return (time.perf_counter() - start) / steps, steps, note


# ----------------------------------------------------------------------------------------------
# The benchmark run
# ----------------------------------------------------------------------------------------------
class Run:
    def __init__(self, args):
        self.args = args
        self.settings = Settings(args.quick)
        self.budget = Budget(args.time_budget)
        self.records: list[dict] = []
        self.largest: list[dict] = []
        self.notes: list[str] = []
        self.temp_dir = tempfile.mkdtemp(prefix="openmm-graph-bench-")
        self.models: dict[str, tuple] = {}  # grade -> (ModelFile, path)
        self.exports: dict[tuple, str] = {}  # (grade, "torchscript" | "aoti") -> exported model path
        self.torch_models = list(args.torch_models)
        self.systems: dict[int, dict] = {}  # n -> positions, box, edges, ...
        self._setup_platform()
        self._setup_torch()
        self.header = self._header()

    # -- setup -----------------------------------------------------------------------------
    def _setup_platform(self):
        import openmm

        args = self.args
        if args.platform is None:
            args.platform = "CUDA" if self._platform_works("CUDA") else "CPU"
            log(f"platform: {args.platform} (default: CUDA when a CUDA device works, else CPU)")
        self.platform_name = args.platform
        self.on_cuda = args.platform == "CUDA"
        if args.multi_gpu and not self.on_cuda:
            raise SystemExit(f"--multi-gpu {args.multi_gpu}: needs the CUDA platform, found {args.platform}")
        self.properties = {"Precision": args.precision, "DeviceIndex": str(args.device_index)} if self.on_cuda else {}
        self.force_properties = parse_force_properties(args.force_property)
        if args.platform in ("CUDA", "OpenCL", "HIP"):
            self.precision = args.precision
        else:
            self.precision = "double"  # the GraphForce evaluates in double on CPU and Reference
        self.graph_implementation = f"openmm-graph-{args.platform}-{self.precision}"
        openmm.Platform.getPlatformByName(args.platform)  # fails early on a name that does not exist

    @staticmethod
    def _platform_works(name: str) -> bool:
        import openmm

        try:
            platform = openmm.Platform.getPlatformByName(name)
            system = openmm.System()
            system.addParticle(1.0)
            context = openmm.Context(system, openmm.VerletIntegrator(0.001), platform)
            del context
            return True
        except Exception:
            return False

    def _setup_torch(self):
        self.torch = None
        self.torch_device = None
        self.peers = [peer for peer in self.args.peers if peer]
        if not self.peers and not self.on_cuda:
            return
        try:
            import torch

            self.torch = torch
        except ImportError as error:
            self.notes.append(f"torch not importable ({error}): PyTorch peers skipped")
            log(self.notes[-1])
            return
        if self.on_cuda or self.args.torch_device == "cuda":
            if torch.cuda.is_available():
                self.torch_device = torch.device("cuda", self.args.device_index)
                torch.cuda.init()
                torch.zeros(1, device=self.torch_device)  # create torch's CUDA context before any measurement
            else:
                self.notes.append("torch has no CUDA device: PyTorch peers run on the CPU")
                log(self.notes[-1])
                self.torch_device = torch.device("cpu")
        else:
            self.torch_device = torch.device("cpu")
        if "openmm-torch" in self.peers:
            try:
                import openmmtorch  # noqa: F401
            except Exception as error:
                self.peers.remove("openmm-torch")
                self.notes.append(f"openmm-torch peer skipped: openmmtorch not importable ({short_error(error, 200)})")
                log(self.notes[-1])

    def _header(self) -> dict:
        import openmm

        header = {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "host": socket.gethostname(),
            "cpu": host_platform.processor() or host_platform.machine(),
            "cpu_count": os.cpu_count(),
            "python": host_platform.python_version(),
            "openmm_version": openmm.Platform.getOpenMMVersion(),
            "openmm_python_version": getattr(openmm, "__version__", None),
            "openmm_graph_revision": git_revision(),
            "openmm_graph_source_digest": source_digest(),
            "torch_version": None,
            "torch_cuda_version": None,
            "platform": self.platform_name,
            "precision": self.precision,
            "platform_properties": self.properties,
            "force_properties": self.force_properties,
            "gpu_name": None,
            "gpu_driver": None,
            "cuda_driver_version": None,
            "gpu_memory_total_bytes": None,
            "fp32_peak_flops": None,
            "fp32_peak_basis": None,
            "quick": bool(self.args.quick),
            "arguments": vars(self.args),
            "notes": self.notes,
        }
        smi_index = None
        if self.torch is not None:
            header["torch_version"] = self.torch.__version__
            header["torch_cuda_version"] = self.torch.version.cuda
        if self.on_cuda:
            if self.torch is not None and self.torch.cuda.is_available():
                smi_index = nvidia_smi_index_of(self.torch, self.args.device_index)
                header["gpu_name"] = self.torch.cuda.get_device_name(self.args.device_index)
                header["gpu_memory_total_bytes"] = int(self.torch.cuda.get_device_properties(self.args.device_index).total_memory)
                peak, basis = fp32_peak_flops(self.torch, self.args.device_index, smi_index)
            else:
                smi_index = self.args.device_index
                peak, basis = H200_FP32_PEAK_FLOPS, "H200 default: 132 SMs x 128 lanes x 2 x 1.98 GHz"
            header["fp32_peak_flops"], header["fp32_peak_basis"] = peak, basis
            values = nvidia_smi_query(smi_index, "name,driver_version,memory.total")
            if values:
                header["gpu_name"] = header["gpu_name"] or values[0]
                header["gpu_driver"] = values[1]
            smi_text = run_command(["nvidia-smi"]) or ""
            for token in smi_text.split("|"):
                if "CUDA Version" in token:
                    header["cuda_driver_version"] = token.split("CUDA Version:")[-1].strip()
            try:
                import openmm

                header["openmm_cuda_compiler"] = openmm.Platform.getPlatformByName("CUDA").getPropertyDefaultValue("CudaCompiler")
            except Exception:
                pass
        header["nvidia_smi_index"] = smi_index
        self.memory = DeviceMemory(smi_index if self.on_cuda else None)
        self.peak_flops = header["fp32_peak_flops"]
        return header

    # -- models and systems ----------------------------------------------------------------
    def model(self, grade: str):
        if grade not in self.models:
            from openmmgraph.grades import make_model

            model = make_model(grade=grade, seed=0)
            path = os.path.join(self.temp_dir, f"{grade}.safetensors")
            model.write(path)
            self.models[grade] = (model, path)
        return self.models[grade]

    def system(self, n: int, n_types: int):
        """Positions, box and types (for n_types) of the benchmark system of n particles, and its
        edge count (ordered pairs inside 0.6 nm, counted once: they do not depend on the types)."""
        from openmmgraph.grades import DEFAULT_CUTOFF_NM, lattice_system

        entry = self.systems.setdefault(n, {})
        if n_types not in entry:
            positions, types, box = lattice_system(n, n_types=n_types, seed=0)
            entry[n_types] = types
            entry["positions"], entry["box"] = positions, box
        if "edges" not in entry:
            entry["edges"], entry["edges_error"] = None, None
            try:
                entry["edges"] = self.count_edges(entry["positions"], entry["box"], DEFAULT_CUTOFF_NM)
            except Exception as error:
                entry["edges_error"] = f"edge count failed: {short_error(error)}"
                log(f"  {entry['edges_error']}")
        return entry["positions"], entry[n_types], entry["box"], entry["edges"]

    def count_edges(self, positions, box, cutoff_nm: float) -> int:
        edges = count_edges(positions, box, cutoff_nm, self.torch, self.torch_device)
        self.free_torch_memory()
        return edges

    def free_torch_memory(self):
        gc.collect()
        if self.torch is not None and self.torch_device is not None and self.torch_device.type == "cuda":
            self.torch.cuda.empty_cache()

    # -- records ---------------------------------------------------------------------------
    def record(self, grade, n, implementation, **fields) -> dict:
        from openmmgraph.grades import model_flops

        entry = {
            "grade": grade, "n": n, "implementation": implementation, "gpu_name": self.header["gpu_name"],
            "platform": fields.pop("platform", self.platform_name),
            "force_time_s": None, "step_time_s": None, "atom_steps_per_s": None, "atom_steps_basis": None,
            "edges": None, "model_flops": None, "flops_per_s": None, "fraction_of_peak": None,
            "peak_memory_bytes": None, "memory_basis": None, "reps": None, "notes": [], "error": None,
        }
        entry.update(fields)
        if entry["edges"] is None and n in self.systems:
            entry["edges"] = self.systems[n].get("edges")
        if grade is not None and entry["edges"] is not None:
            model, _ = self.model(grade)
            entry["model_flops"] = int(model_flops(model, entry["edges"], n))
            if entry["force_time_s"]:
                entry["flops_per_s"] = entry["model_flops"] / entry["force_time_s"]
                if self.peak_flops and self.on_device(implementation):
                    entry["fraction_of_peak"] = entry["flops_per_s"] / self.peak_flops
        if entry["atom_steps_per_s"] is None:
            if entry["step_time_s"]:
                entry["atom_steps_per_s"], entry["atom_steps_basis"] = n / entry["step_time_s"], "step"
            elif entry["force_time_s"]:
                entry["atom_steps_per_s"], entry["atom_steps_basis"] = n / entry["force_time_s"], "force evaluation"
        self.records.append(entry)
        self.write_json()
        summary = ", ".join(
            f"{key} {entry[key]:.4g}" for key in ("force_time_s", "step_time_s", "atom_steps_per_s") if entry[key]
        )
        log(f"  {implementation:<28} {summary or ''}{'  ERROR: ' + entry['error'] if entry['error'] else ''}")
        return entry

    def on_device(self, implementation: str) -> bool:
        if implementation.startswith("openmm"):
            return self.on_cuda
        return self.torch_device is not None and self.torch_device.type == "cuda"

    def skipped(self, grade, n, implementation, reason):
        return self.record(grade, n, implementation, error=f"skipped: {reason}")

    # -- OpenMM measurements ---------------------------------------------------------------
    def multi_gpu_implementation(self) -> str | None:
        """The name of the GraphForce on the devices of --multi-gpu (None without it)."""
        if not self.args.multi_gpu:
            return None
        return f"{self.graph_implementation}-x{len(self.args.multi_gpu.split(','))}"

    def exported_model(self, grade: str, kind: str) -> str:
        """The grade's model exported for the GraphForce's LibTorch path (--torch-models): a TorchScript archive or an
        AOTInductor package for this platform's device, float32 unless the precision is double."""
        kind = kind.removesuffix("-primary")
        key = (grade, kind)
        if key not in self.exports:
            from openmmgraph.torch_export import export_aoti, export_torchscript

            model, _ = self.model(grade)
            dtype = "float64" if self.precision == "double" else "float32"
            if kind == "torchscript":
                # On CUDA with static shapes: capturable, so the plugin replays the model as a CUDA graph (docs/torch-models.md).
                path = os.path.join(self.temp_dir, f"{grade}-{dtype}.pt")
                export_torchscript(model, path, dtype=dtype, static_shapes=self.platform_name == "CUDA")
            else:
                path = os.path.join(self.temp_dir, f"{grade}-{dtype}.pt2")
                export_aoti(model, path, dtype=dtype, device="cuda" if self.platform_name == "CUDA" else "cpu")
            self.exports[key] = path
        return self.exports[key]

    def measure_openmm(self, grade, n, positions, types, box, trivial: bool, multi_gpu: bool = False, torch_model: str | None = None):
        implementation = "openmm-floor" if trivial else self.multi_gpu_implementation() if multi_gpu else self.graph_implementation
        if torch_model:
            implementation = f"{self.graph_implementation}-{torch_model}"
        properties = dict(self.properties, DeviceIndex=self.args.multi_gpu) if multi_gpu else self.properties
        if self.budget.exhausted():
            return self.skipped(grade, n, implementation, "time budget exhausted")
        notes, fields = [], {}
        context = integrator = None
        final_positions = None  # after the timed steps, for edges_after_steps
        try:
            path = None if trivial else self.exported_model(grade, torch_model) if torch_model else self.model(grade)[1]
            # "aoti": the package with the default TorchCudaContext ("auto": OpenMM's own CUDA context); "aoti-primary":
            # the same package in the device's primary context.
            force_properties = dict(self.force_properties)
            if torch_model and torch_model.endswith("-primary"):
                force_properties["TorchCudaContext"] = "primary"
            system = make_openmm_system(n, box, trivial, path, types, force_properties)
            self.free_torch_memory()
            before_bytes = self.memory.used_bytes()
            context, integrator = make_context(system, positions, self.platform_name, properties,
                                               None if trivial else GRAPH_FORCE_GROUP)
            for _ in range(self.settings.warmup_reps):
                context.getState(getForces=True, groups={GRAPH_FORCE_GROUP})
            used = [self.memory.used_bytes()]
            fields["force_time_s"], force_reps, note = time_force(context, self.settings, self.budget, 0.25)
            notes += [note] if note else []
            resident_reps = None
            if not trivial:
                fields["resident_force_time_s"], resident_reps, note = time_resident_force(
                    context, integrator, self.settings, self.budget, 0.1)
                notes += [note] if note else []
            integrator.step(self.settings.warmup_reps)
            fields["step_time_s"], steps, note = time_steps(context, integrator, self.settings, self.budget, 0.25)
            notes += [note] if note else []
            used.append(self.memory.used_bytes())
            if not trivial:
                final_positions = final_positions_nm(context)
            fields["reps"] = {"force_evaluations": force_reps, "steps": steps}
            if resident_reps is not None:
                fields["reps"]["resident_force_evaluations"] = resident_reps
            if before_bytes is not None and None not in used:
                fields["peak_memory_bytes"] = max(used) - before_bytes
                fields["memory_basis"] = "device memory in use after the timing minus before Context creation (nvidia-smi/NVML), OpenMM's CUDA context included"
                fields["memory_before_context_bytes"] = before_bytes
        except Exception as error:
            fields["error"] = ("out of memory: " if is_out_of_memory(error) else "") + short_error(error)
        finally:
            del context, integrator
            gc.collect()
        if final_positions is not None:  # counted with the Context gone, as the starting positions' edges were
            fields["edges_after_steps"] = self.edges_after_steps(final_positions, box, n)
        return self.record(grade, n, implementation, notes=notes, **fields)

    def edges_after_steps(self, positions, box, n: int) -> int | None:
        """The edges at the positions the timed steps ended on (the force times are taken at the starting positions,
        whose count is `edges`; a trajectory of the random-weight model gathers the particles, so the steps run on
        more edges: bench/NOTES.md v38), or None where they cannot be counted (the starting count failed too, or this
        one did: logged)."""
        from openmmgraph.grades import DEFAULT_CUTOFF_NM

        start = self.systems.get(n, {}).get("edges")
        if start is None:
            return None
        try:
            edges = self.count_edges(positions, box, DEFAULT_CUTOFF_NM)
            log(f"  edges after the timed steps: {edges} ({100.0 * (edges - start) / max(start, 1):+.1f}% over the start's)")
            return edges
        except Exception as error:
            log(f"  edge count after the steps failed: {short_error(error)}")
            return None

    # -- PyTorch peers ---------------------------------------------------------------------
    def measure_torch(self, grade, n, positions, types, box, compiled: bool, with_pairs: bool, chunks: int = 1):
        """One torch peer: the whole system at once (chunks 1), or the energy and its gradient of each of `chunks`
        ranges of particles on its own (``PEER/chunks``; models without an interaction block), forces summed."""
        implementation = (("torch-compile" if compiled else "torch-eager") + ("+pairs" if with_pairs else "")
                          + (f"/{chunks}" if chunks > 1 else ""))
        if self.budget.exhausted():
            return self.skipped(grade, n, implementation, "time budget exhausted")
        torch = self.torch
        device = self.torch_device
        on_cuda = device.type == "cuda"
        sync = torch.cuda.synchronize if on_cuda else (lambda: None)
        fields, notes = {"platform": f"torch-{device.type}"}, []
        model_file, _ = self.model(grade)
        if chunks > 1 and model_file.n_interactions:
            return self.skipped(grade, n, implementation, f"--peer-chunks {chunks}: the {grade} grade has an interaction "
                                "block, whose energies of a range of particles need their neighbours' node features")
        state = {}
        self.free_torch_memory()
        recompile_limit = torch._dynamo.config.cache_size_limit if compiled else None
        try:
            from openmmgraph.torch_model import GraphModelTorch

            if compiled:
                torch._dynamo.reset()
            model = GraphModelTorch(model_file, dtype=torch.float32, device=device)
            state["model"] = model
            x = torch.as_tensor(positions, dtype=torch.float32, device=device)
            t = torch.as_tensor(types, dtype=torch.long, device=device)
            b = torch.as_tensor(box, dtype=torch.float32, device=device)
            state.update(x=x, t=t, b=b)

            if compiled:  # every range's shapes compiled, none left to eager code (restored below)
                torch._dynamo.config.cache_size_limit = max(recompile_limit, compile_limit(model.n_types, chunks))
            evaluate, fixed_pairs = torch_peer_evaluation(torch, model, x, t, b, compiled, with_pairs, chunks)
            state["pairs"] = fixed_pairs

            if on_cuda:
                torch.cuda.reset_peak_memory_stats(device)
            start = time.perf_counter()
            evaluate()
            sync()
            fields["first_call_s"] = time.perf_counter() - start  # includes compilation under torch.compile
            # torch.compile compiles per graph piece (the per-type networks see different row counts)
            # and the backward lazily: a few more calls before timing
            for _ in range(max(3, self.settings.warmup_reps) if compiled else self.settings.warmup_reps):
                evaluate()
            sync()
            start = time.perf_counter()
            evaluate()
            sync()
            single_s = time.perf_counter() - start
            min_reps = self.settings.torch_min_reps_huge if single_s > self.settings.huge_eval_s else self.settings.torch_min_reps
            reps, note = repetitions(single_s, min_reps, self.settings, self.budget, 0.2)
            notes += [note] if note else []
            start = time.perf_counter()
            for _ in range(reps):
                evaluate()
            sync()
            fields["force_time_s"] = (time.perf_counter() - start) / reps
            fields["reps"] = {"evaluations": reps}
            fields["pair_builder"] = "bench cell list (neighbor_pairs below 3 cells per side)"
            if chunks > 1:
                fields["chunks"] = chunks
                notes.append(f"evaluated in {chunks} ranges of particles, each range's energy and gradient on its own")
            if on_cuda:
                fields["peak_memory_bytes"] = int(torch.cuda.max_memory_allocated(device))
                fields["memory_basis"] = "torch.cuda.max_memory_allocated (the torch allocator's peak)"
        except Exception as error:
            oom = is_out_of_memory(error) or type(error).__name__ == "OutOfMemoryError"
            fields["error"] = ("out of memory: " if oom else "") + short_error(error)
            if not oom and self.args.verbose:
                traceback.print_exc()
        finally:
            state.clear()
            if compiled:
                torch._dynamo.config.cache_size_limit = recompile_limit
                try:
                    torch._dynamo.reset()
                except Exception:
                    pass
            self.free_torch_memory()
        return self.record(grade, n, implementation, notes=notes, **fields)

    def measure_openmm_torch(self, grade, n, positions, types, box):
        implementation = f"openmm-torch-{self.platform_name}"
        if self.budget.exhausted():
            return self.skipped(grade, n, implementation, "time budget exhausted")
        if n > self.args.openmm_torch_max_n:
            return self.skipped(grade, n, implementation,
                                f"n > {self.args.openmm_torch_max_n}: the exported model searches pairs in O(n^2)")
        torch = self.torch
        fields, notes = {}, []
        context = integrator = None
        try:
            import openmm
            import openmmtorch

            from openmmgraph.torch_model import GraphModelTorch, neighbor_pairs

            model_file, _ = self.model(grade)
            # Traced on the device TorchForce runs on: tracing bakes the device of torch.arange & co. into the graph.
            device = self.torch_device

            class Exported(torch.nn.Module):
                """(positions nm, box nm) -> energy kJ/mol, pairs by the project's neighbor_pairs."""

                def __init__(self):
                    super().__init__()
                    self.model = GraphModelTorch(model_file, dtype=torch.float32, device=device)
                    self.register_buffer("types", torch.as_tensor(types, dtype=torch.long, device=device))

                def forward(self, positions, box):
                    # openmm-torch passes float64 on Reference/CPU and in double precision; the model is float32.
                    positions, box = positions.to(torch.float32), box.to(torch.float32)
                    pairs = neighbor_pairs(positions.detach(), box, self.model.cutoff_nm)
                    scale = self.model.length_scale_nm
                    energies = self.model.particle_energies_model_units(positions / scale, self.types, box / scale, pairs)
                    return energies.sum() * self.model.energy_scale_kj_per_mol

            module = Exported()
            example = (torch.as_tensor(positions, dtype=torch.float32, device=device),
                       torch.as_tensor(box, dtype=torch.float32, device=device))
            traced = torch.jit.trace(module, example, check_trace=False)
            path = os.path.join(self.temp_dir, f"openmm-torch-{grade}-{n}.pt")
            traced.save(path)
            force = openmmtorch.TorchForce(path)
            force.setUsesPeriodicBoundaryConditions(True)
            force.setForceGroup(GRAPH_FORCE_GROUP)
            system = openmm.System()
            for _ in range(n):
                system.addParticle(MASS_AMU)
            system.setDefaultPeriodicBoxVectors(*[openmm.Vec3(*map(float, row)) for row in box])
            system.addForce(force)
            self.free_torch_memory()
            before_bytes = self.memory.used_bytes()
            context, integrator = make_context(system, positions, self.platform_name, self.properties)
            for _ in range(self.settings.warmup_reps):
                context.getState(getForces=True, groups={GRAPH_FORCE_GROUP})
            fields["force_time_s"], force_reps, note = time_force(context, self.settings, self.budget, 0.15)
            notes += [note] if note else []
            fields["step_time_s"], steps, note = time_steps(context, integrator, self.settings, self.budget, 0.15)
            notes += [note] if note else []
            after_bytes = self.memory.used_bytes()
            fields["reps"] = {"force_evaluations": force_reps, "steps": steps}
            fields["pair_builder"] = "openmmgraph.torch_model.neighbor_pairs (O(n^2)), traced"
            if before_bytes is not None and after_bytes is not None:
                fields["peak_memory_bytes"] = after_bytes - before_bytes
                fields["memory_basis"] = "device memory in use after the timing minus before Context creation (nvidia-smi/NVML)"
        except Exception as error:
            fields["error"] = ("out of memory: " if is_out_of_memory(error) else "") + short_error(error)
            if self.args.verbose:
                traceback.print_exc()
        finally:
            del context, integrator
            self.free_torch_memory()
        return self.record(grade, n, implementation, notes=notes, **fields)

    # -- largest system --------------------------------------------------------------------
    def try_size(self, grade: str, n: int) -> dict:
        """One force evaluation of the GraphForce on n particles: {n, ok, error, seconds, ...}."""
        from openmmgraph.grades import lattice_system

        model, path = self.model(grade)
        attempt = {"n": n, "ok": False, "error": None, "force_time_s": None, "peak_memory_bytes": None}
        context = integrator = None
        start = time.perf_counter()
        try:
            positions, types, box = lattice_system(n, n_types=model.n_types, seed=0)
            system = make_openmm_system(n, box, False, path, types, self.force_properties)
            del types
            self.free_torch_memory()
            before_bytes = self.memory.used_bytes()
            context, integrator = make_context(system, positions, self.platform_name, self.properties)
            del positions, system
            gc.collect()
            evaluation_start = time.perf_counter()
            context.getState(getForces=True, groups={GRAPH_FORCE_GROUP})
            attempt["force_time_s"] = time.perf_counter() - evaluation_start  # first call: includes set-up work
            after_bytes = self.memory.used_bytes()
            if before_bytes is not None and after_bytes is not None:
                attempt["peak_memory_bytes"] = after_bytes - before_bytes
            attempt["ok"] = True
        except (Exception, MemoryError) as error:
            attempt["error"] = ("out of memory: " if is_out_of_memory(error) or isinstance(error, MemoryError) else "") + short_error(error)
        finally:
            del context, integrator
            gc.collect()
        attempt["seconds"] = time.perf_counter() - start
        log(f"    n = {n:>12,}: {'ok' if attempt['ok'] else 'failed'} in {attempt['seconds']:.1f} s"
            f"{'  (' + attempt['error'] + ')' if attempt['error'] else ''}")
        return attempt

    def find_largest(self, grade: str, start_n: int):
        log(f"largest system, grade {grade}, from n = {start_n:,} (x2, then bisection)")
        search = search_largest(lambda n: self.try_size(grade, n), start_n, largest_max=self.args.largest_max,
                                openmm_limit=openmm_cuda_particle_limit(self.precision) if self.on_cuda else None,
                                bisections=self.args.bisections, seconds_left=self.budget.left_s)
        result = {"grade": grade, "implementation": self.graph_implementation, **search, **self._header_keys()}
        self.largest.append(result)
        self.write_json()
        log(f"  largest that ran ({grade}): {result['largest_n'] if result['largest_n'] is not None else 'none'}"
            f" (limited by {result['limited_by']})")

    def _header_keys(self) -> dict:
        return {"gpu_name": self.header["gpu_name"], "platform": self.platform_name, "precision": self.precision}

    # -- ratios, output --------------------------------------------------------------------
    def ratios(self) -> list[dict]:
        """Per grade and size: openmm-graph against each peer and the floor, from the same run."""
        by_key = {(r["grade"], r["n"], r["implementation"]): r for r in self.records if not r["error"]}
        floors = {r["n"]: r for r in self.records if r["implementation"] == "openmm-floor" and not r["error"]}
        table = []
        for grade in self.args.grades:
            for n in self.args.sizes:
                graph = by_key.get((grade, n, self.graph_implementation))
                if graph is None:
                    continue
                row = {"grade": grade, "n": n, "implementation": self.graph_implementation,
                       "force_time_s": graph["force_time_s"], "step_time_s": graph["step_time_s"],
                       "resident_force_time_s": graph.get("resident_force_time_s"),
                       "floor_step_time_s": None, "step_overhead_s": None, "speedup_over": {}, "resident_speedup_over": {},
                       "edges": graph.get("edges"), "edges_after_steps": graph.get("edges_after_steps")}
                if row["resident_force_time_s"] and graph.get("model_flops") and self.peak_flops:
                    row["resident_fraction_of_peak"] = graph["model_flops"] / row["resident_force_time_s"] / self.peak_flops
                floor = floors.get(n)
                if floor is not None:
                    row["floor_step_time_s"] = floor["step_time_s"]
                    row["step_overhead_s"] = graph["step_time_s"] - floor["step_time_s"]
                    if graph.get("peak_memory_bytes") is not None and floor.get("peak_memory_bytes") is not None:
                        row["memory_over_floor_bytes"] = graph["peak_memory_bytes"] - floor["peak_memory_bytes"]
                for record in self.records:
                    if record["grade"] != grade or record["n"] != n or record["error"]:
                        continue
                    name = record["implementation"]
                    if name in (self.graph_implementation, "openmm-floor") or not record["force_time_s"]:
                        continue
                    # force time against force time: both one evaluation of energy and forces
                    row["speedup_over"][name] = record["force_time_s"] / graph["force_time_s"]
                    # the peers keep their forces on the device; so does the resident evaluation
                    if row["resident_force_time_s"] and not name.startswith("openmm"):
                        row["resident_speedup_over"][name] = record["force_time_s"] / row["resident_force_time_s"]
                table.append(row)
        return table

    def step_overhead(self) -> dict | None:
        """The step-time overhead of the small grade at 512 particles (GraphForce minus floor), with the edges at the
        start of the timed steps and at their end: the random-weight model's trajectory gathers the particles, so the
        steps run on more edges than the start's (bench/NOTES.md v38), and the overhead is quoted with both counts."""
        for row in self.ratios():
            if row["grade"] == "small" and row["n"] == 512:
                return {"grade": "small", "n": 512, "step_time_s": row["step_time_s"],
                        "floor_step_time_s": row["floor_step_time_s"], "step_overhead_s": row["step_overhead_s"],
                        "edges": row["edges"], "edges_after_steps": row["edges_after_steps"]}
        return None

    def write_json(self):
        document = {
            "header": self.header,
            "records": self.records,
            "ratios": self.ratios(),
            "step_overhead_small_512": self.step_overhead(),
            "largest": self.largest,
            "elapsed_s": self.budget.elapsed_s(),
        }
        out = self.args.out
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        temporary = out + ".tmp"
        with open(temporary, "w") as handle:
            json.dump(document, handle, indent=1, default=str, allow_nan=False)
        os.replace(temporary, out)

    def print_summary(self):
        log("")
        log(f"Results ({self.header['gpu_name'] or self.platform_name + ' (no GPU)'}; "
            f"OpenMM {self.header['openmm_version']}, torch {self.header['torch_version']})")
        peers = sorted({name for row in self.ratios() for name in row["speedup_over"]})
        columns = ["grade", "n", "force ms", "step ms", "floor ms", "overhead ms"] + [f"x {p}" for p in peers]
        widths = [max(8, len(c)) for c in columns]
        log("  ".join(c.rjust(w) for c, w in zip(columns, widths)))

        def ms(value):
            return f"{value * 1e3:.4g}" if value is not None else "-"

        for row in self.ratios():
            cells = [row["grade"], f"{row['n']}", ms(row["force_time_s"]), ms(row["step_time_s"]),
                     ms(row["floor_step_time_s"]), ms(row["step_overhead_s"])]
            cells += [f"{row['speedup_over'][p]:.3g}" if p in row["speedup_over"] else "-" for p in peers]
            log("  ".join(c.rjust(w) for c, w in zip(cells, widths)))
        log("(x PEER = PEER's force time / openmm-graph's force time: > 1 means openmm-graph is faster)")
        for row in self.ratios():
            if row["resident_force_time_s"]:
                against = ", ".join(f"{row['resident_speedup_over'][p]:.3g}x {p}" for p in sorted(row["resident_speedup_over"]))
                fraction = row.get("resident_fraction_of_peak")
                log(f"forces kept on the device, {row['grade']} {row['n']}: {ms(row['resident_force_time_s'])} ms"
                    + (f", {fraction:.1%} of the fp32 peak" if fraction else "") + (f"; {against}" if against else ""))
        overhead = self.step_overhead()
        if overhead and overhead["step_overhead_s"] is not None:
            edges = ""
            if overhead["edges"] is not None and overhead["edges_after_steps"] is not None:
                edges = f" (edges {overhead['edges']} at the start, {overhead['edges_after_steps']} after the steps)"
            log(f"step overhead, small grade at 512: step {overhead['step_time_s'] * 1e6:.1f} us, floor "
                f"{overhead['floor_step_time_s'] * 1e6:.1f} us, overhead {overhead['step_overhead_s'] * 1e6:.1f} us"
                + edges)
        else:
            log("step overhead, small grade at 512: not measured in this run")
        for entry in self.largest:
            log(f"largest system ({entry['grade']}): {entry['largest_n']} (limited by {entry['limited_by']})")
        multi = self.multi_gpu_implementation()
        if multi:
            by_key = {(r["grade"], r["n"], r["implementation"]): r for r in self.records if not r["error"]}
            for grade in self.args.grades:
                for n in self.args.sizes:
                    one, many = by_key.get((grade, n, self.graph_implementation)), by_key.get((grade, n, multi))
                    if one and many and one.get("step_time_s") and many.get("step_time_s"):
                        log(f"{multi} against one device, {grade} {n}: step {one['step_time_s'] / many['step_time_s']:.3g}x, "
                            f"force evaluation {one['force_time_s'] / many['force_time_s']:.3g}x")
        errors = [r for r in self.records if r["error"]]
        if errors:
            log(f"{len(errors)} record(s) with an error:")
            for r in errors:
                log(f"  {r['grade']} n={r['n']} {r['implementation']}: {r['error']}")

    def plot(self, path: str):
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            log("note: matplotlib is not installed (pip install matplotlib): no plot written")
            return
        lines: dict[tuple, list] = {}
        for r in self.records:
            if r["error"] or not r["atom_steps_per_s"]:
                continue
            grade = None if r["implementation"] == "openmm-floor" else r["grade"]
            lines.setdefault((r["implementation"], grade), []).append((r["n"], r["atom_steps_per_s"], r["atom_steps_basis"]))
        if not lines:
            log("note: nothing to plot (no successful record)")
            return
        implementations = sorted({key[0] for key in lines})
        colours = {name: f"C{index % 10}" for index, name in enumerate(implementations)}
        styles = {"small": ("-", "o"), "medium": ("--", "s"), "large": (":", "^"), None: ("-.", "x")}
        figure, axes = plt.subplots(figsize=(9, 6))
        for (name, grade), points in sorted(lines.items(), key=lambda item: (item[0][0], str(item[0][1]))):
            points.sort()
            linestyle, marker = styles.get(grade, ("-", "o"))
            label = name if grade is None else f"{name} ({grade})"
            if points[0][2] == "force evaluation":
                label += " [per evaluation]"
            axes.plot([p[0] for p in points], [p[1] for p in points], linestyle=linestyle, marker=marker,
                      color=colours[name], label=label)
        axes.set_xscale("log")
        axes.set_yscale("log")
        axes.set_xlabel("particles")
        axes.set_ylabel("atom-steps per second")
        device = self.header["gpu_name"] or f"{self.platform_name} platform, no GPU"
        axes.set_title(f"openmm-graph benchmarks: {device}" + (" (quick)" if self.args.quick else ""))
        axes.grid(True, which="both", alpha=0.3)
        axes.legend(fontsize=7, loc="best")
        figure.text(0.01, 0.005, "OpenMM lines: n / step time (VerletIntegrator 1 fs); torch peers [per evaluation]: "
                    "n / (energy + forces time)", fontsize=7)
        figure.tight_layout(rect=(0, 0.02, 1, 1))
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        figure.savefig(path, dpi=120)
        plt.close(figure)
        log(f"plot: {path}")

    # -- main loop -------------------------------------------------------------------------
    def run(self):
        args = self.args
        log(f"openmm-graph benchmarks: grades {args.grades}, sizes {args.sizes}, platform {self.platform_name} "
            f"({self.precision}), peers {self.peers or 'none'}, time budget {args.time_budget:.0f} s"
            + (" [quick]" if args.quick else ""))
        log(f"device: {self.header['gpu_name'] or 'no GPU'}; fp32 peak {self.header['fp32_peak_flops']}")
        for n in args.sizes:
            log(f"\n== n = {n:,}")
            first_model, _ = self.model(args.grades[0])
            positions, _, box, edges = self.system(n, first_model.n_types)
            log(f"  edges (ordered pairs < 0.6 nm): {edges if edges is not None else self.systems[n]['edges_error']}")
            self.measure_openmm(None, n, positions, None, box, trivial=True)
            for grade in args.grades:
                model, _ = self.model(grade)
                positions, types, box, _ = self.system(n, model.n_types)
                log(f" -- grade {grade}")
                self.measure_openmm(grade, n, positions, types, box, trivial=False)
                if args.multi_gpu:
                    self.measure_openmm(grade, n, positions, types, box, trivial=False, multi_gpu=True)
                for kind in self.torch_models:
                    self.measure_openmm(grade, n, positions, types, box, trivial=False, torch_model=kind)
                for peer in self.peers:
                    if peer in ("torch-eager", "torch-compile") and self.torch is not None:
                        for chunks in args.peer_chunks:
                            for with_pairs in (False, True):
                                self.measure_torch(grade, n, positions, types, box, peer == "torch-compile", with_pairs,
                                                   chunks)
                    elif peer == "openmm-torch" and self.torch is not None:
                        self.measure_openmm_torch(grade, n, positions, types, box)
            self.systems.pop(n, None)  # free host memory of this size
        if args.largest:
            for grade in args.grades:
                ran = [r["n"] for r in self.records
                       if r["grade"] == grade and r["implementation"] == self.graph_implementation and not r["error"]]
                start_n = args.largest_start or (max(ran) * 2 if ran else min(args.sizes))
                self.find_largest(grade, start_n)
        self.write_json()
        self.print_summary()
        if args.plot:
            self.plot(args.plot)
        log(f"results: {args.out} ({self.budget.elapsed_s():.0f} s)")
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def parse_list(text: str, kind=str) -> list:
    return [kind(item.strip().replace("_", "")) if kind is int else item.strip()
            for item in text.split(",") if item.strip()]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--grades", default=None, help="comma-separated, of small,medium,large (default: all; quick: small)")
    parser.add_argument("--sizes", default=None,
                        help="comma-separated particle counts (default 512,10296,100800,1000000; quick: 250,500)")
    parser.add_argument("--platform", default=None, help="OpenMM platform (default: CUDA if it works, else CPU)")
    parser.add_argument("--precision", default="mixed", choices=("single", "mixed", "double"),
                        help="CUDA precision (default mixed); the CPU platform's GraphForce is double")
    parser.add_argument("--device-index", type=int, default=0, help="CUDA device (OpenMM DeviceIndex and torch cuda:N)")
    parser.add_argument("--force-property", action="append", default=[], metavar="KEY=VALUE",
                        help="a GraphForce property for every openmm-graph record (repeatable), e.g. CheckFinite=deferred; "
                             "recorded in the JSON header's force_properties")
    parser.add_argument("--multi-gpu", default=None,
                        help="also run the GraphForce on these CUDA devices in one Context (OpenMM DeviceIndex, e.g. 0,1; "
                             "docs/multi-gpu.md), recorded as openmm-graph-CUDA-<precision>-x<devices>")
    parser.add_argument("--peers", default=None,
                        help="comma-separated of torch-eager,torch-compile,openmm-torch (default: all three, "
                             "openmm-torch only when importable); 'none' for no peers")
    parser.add_argument("--peer-chunks", default="1",
                        help="comma-separated counts K: the torch peers also evaluated in K ranges of particles, each "
                             "range's energy and gradient on its own, recorded as PEER/K (default 1: whole; e.g. 1,4; "
                             "K at most 16; grades without an interaction block)")
    parser.add_argument("--torch-device", default=None, choices=("cpu", "cuda"),
                        help="device of the PyTorch peers (default: cuda with the CUDA platform, else cpu)")
    parser.add_argument("--largest", action="store_true", help="also find the largest system that runs")
    parser.add_argument("--largest-start", type=int, default=None, help="first n of the search (default: 2 x the largest size run)")
    parser.add_argument("--largest-max", type=int, default=1 << 30, help="never try more particles than this")
    parser.add_argument("--bisections", type=int, default=4, help="bisection steps after the first failure (default 4)")
    parser.add_argument("--torch-models", default="",
                        help="comma-separated, of torchscript,aoti,aoti-primary: also time the GraphForce running the grade's "
                             "model exported for its LibTorch path (float32 unless --precision double), in the same run; "
                             "aoti runs the package in OpenMM's CUDA context (the default), aoti-primary in the device's "
                             "primary one (property TorchCudaContext; default: none)")
    parser.add_argument("--openmm-torch-max-n", type=int, default=OPENMM_TORCH_MAX_N,
                        help=f"largest n for the openmm-torch peer (O(n^2) pairs; default {OPENMM_TORCH_MAX_N})")
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny sizes, few repetitions, CPU allowed")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "results.json"))
    parser.add_argument("--plot", default=os.path.join(HERE, "results", "atom_steps.png"),
                        help="PNG of atom-steps/s against size ('' for none)")
    parser.add_argument("--time-budget", type=float, default=None,
                        help="seconds for the whole run (default 3600; quick: 100); later cases are skipped when spent")
    parser.add_argument("--verbose", action="store_true", help="print tracebacks of failed cases")
    parser.add_argument("--source-digest", action="store_true",
                        help="print the digest of the plugin's sources (the header's openmm_graph_source_digest) and exit")
    args = parser.parse_args(argv)
    if args.source_digest:
        print(source_digest())
        return 0

    args.grades = parse_list(args.grades) if args.grades else (["small"] if args.quick else list(ALL_GRADES))
    unknown = [g for g in args.grades if g not in ALL_GRADES]
    if unknown:
        parser.error(f"--grades: unknown {unknown}; expected some of {list(ALL_GRADES)}")
    args.sizes = parse_list(args.sizes, int) if args.sizes else list(QUICK_SIZES if args.quick else STANDARD_SIZES)
    if any(n < 2 for n in args.sizes):
        parser.error("--sizes: expected particle counts >= 2")
    if args.peers is None:
        args.peers = list(PEER_CHOICES)
    elif args.peers.strip().lower() == "none":
        args.peers = []
    else:
        args.peers = parse_list(args.peers)
        unknown = [p for p in args.peers if p not in PEER_CHOICES]
        if unknown:
            parser.error(f"--peers: unknown {unknown}; expected some of {list(PEER_CHOICES)}")
    try:
        args.peer_chunks = parse_list(args.peer_chunks, int)
    except ValueError:
        parser.error(f"--peer-chunks: expected comma-separated integers, found {args.peer_chunks!r}")
    if not args.peer_chunks or any(not 1 <= k <= 16 for k in args.peer_chunks) or len(set(args.peer_chunks)) != len(args.peer_chunks):
        parser.error(f"--peer-chunks: expected distinct counts from 1 to 16, found {args.peer_chunks}")
    args.torch_models = parse_list(args.torch_models) if args.torch_models else []
    unknown = [k for k in args.torch_models if k not in ("torchscript", "aoti", "aoti-primary")]
    if unknown:
        parser.error(f"--torch-models: unknown {unknown}; expected some of ['torchscript', 'aoti', 'aoti-primary']")
    if args.time_budget is None:
        args.time_budget = 100.0 if args.quick else 3600.0

    run = Run(args)
    run.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
