"""Training data: extended XYZ (through ASE) and DeePMD-kit's npy systems.

See docs/training.md for the formats. Everything is kept in the data's own
units (by default angstrom and eV, forces in eV/angstrom); the trained model
is written in those units.
"""

from __future__ import annotations

import glob
import math
import os
import warnings
from dataclasses import dataclass, field

import numpy as np

from ..grades import ELEMENT_SYMBOLS, atomic_number
from ..torch_model import same_position_tolerance_squared

# Limits of the periodic image search (frame_pairs): a cell height (distance
# between opposite faces) below MIN_HEIGHT_FRACTION * cutoff, or a search over
# more than MAX_IMAGES periodic images, is refused (docs/training.md, "Types,
# cells and neighbours"). Real cells are far from both: a one-atom primitive
# cell with a 1 angstrom height and a 10 angstrom cut-off needs 21^3 images.
MIN_HEIGHT_FRACTION = 0.01
MAX_IMAGES = 100_000
# frame_pairs takes its rows in blocks of about this many (i, j) entries (float64 arrays of [rows, n]: 16 MiB each).
PAIR_BLOCK_ELEMENTS = 1 << 21
MAX_UNNAMED_TYPE = 1024  # type.raw indices without a type map must be below this


def _reason(error: BaseException) -> str:
    """An exception as one line for a message: 'Type: first line' (or just the type)."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


@dataclass
class Frame:
    """One labelled configuration (data units).

    positions [n, 3]; types [n] (indices into the dataset's type_names);
    energy (total); forces [n, 3]; cell: None (open boundaries) or [3, 3]
    lattice vectors as rows (periodic in all three directions).
    """

    positions: np.ndarray
    types: np.ndarray
    energy: float
    forces: np.ndarray
    cell: np.ndarray | None = None
    source: str = ""

    @property
    def n_atoms(self) -> int:
        return int(self.positions.shape[0])


@dataclass
class Dataset:
    frames: list[Frame] = field(default_factory=list)
    type_names: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.frames)


def _sort_type_names(names) -> list[str]:
    """Element symbols by atomic number, then other names alphabetically."""
    names = set(names)
    return sorted(names, key=lambda n: (atomic_number(n) == 0, atomic_number(n), n))


def _energy_number(value) -> float:
    """An energy label as a float; TypeError for a boolean (ASE reads a comment's energy=T as True)."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError("a boolean is not an energy")
    return float(value)


def _remap(frames_with_names, type_map):
    """[(frame with types indexing local names, local names)] -> Dataset with one type list."""
    all_names = {name for _, names in frames_with_names for name in names if name is not None}
    if type_map is None:
        type_map = _sort_type_names(all_names)
    type_map = list(type_map)
    missing = sorted(all_names - set(type_map))
    if missing:
        raise ValueError(f"training data: types {missing} are not in type_map {type_map}")
    index = {name: i for i, name in enumerate(type_map)}
    frames = []
    for frame, names in frames_with_names:
        lookup = np.array([index.get(name, -1) for name in names], dtype=np.int64)  # None: an index never used
        frame.types = lookup[frame.types] if len(frame.types) else frame.types
        frames.append(frame)
    return Dataset(frames, type_map)


def read_extxyz(path, type_map=None, energy_key: str = "energy", forces_key: str = "forces", index=":") -> Dataset:
    """Read labelled frames from an extended XYZ file (or any format ASE reads).

    Energy: ``atoms.info[energy_key]`` if present, else
    ``atoms.get_potential_energy()`` (ASE puts an ``energy=`` comment key on a
    calculator). Forces: ``atoms.arrays[forces_key]`` if present, else
    ``atoms.get_forces()``. Periodic frames need pbc in all three directions
    (the cell rows are the lattice vectors); frames without pbc are open.
    """
    try:
        import ase.io
    except ImportError:  # pragma: no cover - ase is in scripts/requirements.txt
        raise ValueError("reading extended XYZ needs ASE: pip install ase") from None
    try:
        images = ase.io.read(str(path), index=index)
    except Exception as error:  # ASE's readers raise anything (AttributeError, XYZError, UnknownFileTypeError, ...)
        raise ValueError(f"training data {path}: cannot read it as extended XYZ (or another format ASE reads): "
                         f"{_reason(error)}") from None
    if not isinstance(images, list):
        images = [images]
    if not images:
        raise ValueError(f"training data {path}: no frames")
    frames = []
    for number, atoms in enumerate(images):
        where = f"{path} frame {number}"
        # Before the energy: ASE's single-point calculator refuses atoms with non-finite positions as "changed", which
        # would be reported as a missing energy.
        for name, values in (("positions", atoms.positions), ("cell", atoms.cell[:])):
            values = np.asarray(values, dtype=np.float64)
            if not np.isfinite(values).all():
                raise ValueError(f"training data {where}: {name}: expected finite numbers, found "
                                 f"{float(values[~np.isfinite(values)][0])} in row {int(np.argwhere(~np.isfinite(values))[0][0])}")
        if energy_key in atoms.info:
            try:
                energy = _energy_number(atoms.info[energy_key])
            except (TypeError, ValueError):
                raise ValueError(f"training data {where}: info['{energy_key}']: expected a number, found "
                                 f"{atoms.info[energy_key]!r}") from None
        else:
            try:
                energy = atoms.get_potential_energy()
            except Exception:
                raise ValueError(f"training data {where}: no energy (expected info['{energy_key}'] or a calculator energy)") from None
            try:
                energy = _energy_number(energy)
            except (TypeError, ValueError):
                raise ValueError(f"training data {where}: energy: expected a number, found {energy!r}") from None
        if forces_key in atoms.arrays:
            try:
                forces = np.asarray(atoms.arrays[forces_key], dtype=np.float64)
            except (TypeError, ValueError):
                raise ValueError(f"training data {where}: arrays['{forces_key}']: expected numbers") from None
        else:
            try:
                forces = np.asarray(atoms.get_forces(), dtype=np.float64)
            except Exception:
                raise ValueError(f"training data {where}: no forces (expected arrays['{forces_key}'] or calculator forces)") from None
        pbc = np.asarray(atoms.pbc, dtype=bool)
        if pbc.any() and not pbc.all():
            raise ValueError(f"training data {where}: pbc {pbc.tolist()}: expected all True or all False")
        symbols = atoms.get_chemical_symbols()
        names = sorted(set(symbols))
        local = {name: i for i, name in enumerate(names)}
        frame = Frame(
            positions=np.asarray(atoms.positions, dtype=np.float64).copy(),
            types=np.array([local[s] for s in symbols], dtype=np.int64),
            energy=energy,
            forces=(forces.reshape(-1, 3) if forces.size % 3 == 0 else forces).copy(),
            cell=np.asarray(atoms.cell.array, dtype=np.float64).copy() if pbc.all() else None,
            source=where,
        )
        _check_frame(frame)
        frames.append((frame, names))
    return _remap(frames, type_map)


def _deepmd_systems(path) -> list[str]:
    """The DeePMD-kit systems at or under ``path`` (folders holding type.raw)."""
    if os.path.isfile(os.path.join(path, "type.raw")):
        return [path]
    found = sorted(os.path.dirname(p) for p in glob.glob(os.path.join(path, "**", "type.raw"), recursive=True))
    if not found:
        raise ValueError(f"training data {path}: no DeePMD-kit system (no type.raw at or under it)")
    return found


def read_deepmd(path, type_map=None) -> Dataset:
    """Read DeePMD-kit npy systems: ``path`` is a system or a folder of systems.

    A system has type.raw (one integer per atom), optionally type_map.raw (one
    name per line; without it the types that occur are named T0, T1, ... by
    their index unless ``type_map`` names them), and set.*/ folders with
    coord.npy [nf, 3n], energy.npy [nf], force.npy [nf, 3n] and box.npy
    [nf, 9] (rows a, b, c), which is required unless the system has a file
    ``nopbc`` (open boundaries), as in DeePMD-kit.
    """
    return _read_deepmd_systems(_deepmd_systems(str(path)), type_map)


def _read_deepmd_systems(systems, type_map) -> Dataset:
    """read_deepmd of the given system folders."""
    frames = []
    for system in systems:
        type_file = os.path.join(system, "type.raw")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # "input contained no data": reported below
                atom_types = np.loadtxt(type_file, dtype=np.int64, ndmin=1).reshape(-1)
        except (OSError, ValueError, OverflowError, MemoryError) as error:
            raise ValueError(f"training data {type_file}: expected one integer type per atom ({_reason(error)})") from None
        if atom_types.size == 0:
            raise ValueError(f"training data {type_file}: no atoms (expected one integer type per atom)")
        map_path = os.path.join(system, "type_map.raw")
        if os.path.isfile(map_path):
            try:
                with open(map_path, encoding="utf-8") as stream:
                    names = [line.strip() for line in stream if line.strip()]
            except (OSError, ValueError) as error:
                raise ValueError(f"training data {map_path}: expected one type name per line "
                                 f"({_reason(error)})") from None
            if not names:
                raise ValueError(f"training data {map_path}: no type names (expected one name per line)")
        elif type_map is not None:
            names = list(type_map)
        else:
            if atom_types.max() >= MAX_UNNAMED_TYPE:
                raise ValueError(f"training data {type_file}: type index {int(atom_types.max())} without a "
                                 f"type_map.raw (expected indices 0, 1, ... into a type map, below "
                                 f"{MAX_UNNAMED_TYPE}; atomic numbers are not type indices): add type_map.raw "
                                 "or the 'type_map' option")
            # Only the indices that occur become types (no phantom types for the gaps).
            used = set(np.unique(atom_types).tolist())
            names = [f"T{i}" if i in used else None for i in range(int(atom_types.max()) + 1)]
        if atom_types.min() < 0 or atom_types.max() >= len(names):
            raise ValueError(f"training data {system}: type.raw has types outside [0, {len(names)})")
        n = len(atom_types)
        nopbc = os.path.isfile(os.path.join(system, "nopbc"))
        sets = sorted(glob.glob(os.path.join(system, "set.*")))
        if not sets:
            raise ValueError(f"training data {system}: no set.* folder")
        for set_dir in sets:
            def load(name, per_frame, what, count=None, required=True):
                """The array of set_dir/name as float64 [frames, per_frame] (None if absent and optional)."""
                file = os.path.join(set_dir, name)
                if not os.path.isfile(file):
                    if required:
                        raise ValueError(f"training data {set_dir}: missing {name}")
                    return None
                try:
                    array = np.load(file, allow_pickle=False)
                except (OSError, ValueError, EOFError, OverflowError, MemoryError) as error:  # a header can claim TiB
                    raise ValueError(f"training data {file}: not a readable .npy file ({_reason(error)})") from None
                if not isinstance(array, np.ndarray) or array.dtype.kind not in "iuf":
                    raise ValueError(f"training data {file}: expected a numeric array, found "
                                     f"{getattr(array, 'dtype', type(array).__name__)}")
                frames_found = array.size // per_frame if per_frame else 0
                # Frames along the first axis, as DeePMD-kit writes them ([frames, 3n] or [frames, n, 3]): an array
                # of the right size in another layout ([3n, frames]) would scramble the frames.
                frames_first = (array.shape[0] == frames_found if array.ndim >= 2 else
                                per_frame == 1 or array.size == per_frame)
                if array.size % per_frame or (count is not None and frames_found != count) or not frames_first:
                    expected = f"{count} x {per_frame}" if count is not None else f"frames x {per_frame}"
                    raise ValueError(f"training data {file}: expected {expected} values ({what}; {n} atoms in "
                                     f"type.raw), found an array of shape {list(array.shape)}")
                return array.astype(np.float64).reshape(frames_found, per_frame)

            coord = load("coord.npy", 3 * n, "3 coordinates per atom").reshape(-1, n, 3)
            count = coord.shape[0]
            energy = load("energy.npy", 1, "one energy per frame", count).reshape(count)
            force = load("force.npy", 3 * n, "3 force components per atom", count).reshape(count, n, 3)
            if not nopbc and not os.path.isfile(os.path.join(set_dir, "box.npy")):
                raise ValueError(f"training data {set_dir}: missing box.npy (periodic frames need their cell; "
                                 f"for open boundaries put an empty file named nopbc in {system}, as in DeePMD-kit)")
            box = None if nopbc else load("box.npy", 9, "the 9 cell components per frame", count)
            if box is not None:
                box = box.reshape(count, 3, 3)
            for f in range(count):
                frame = Frame(coord[f].copy(), atom_types.copy(), float(energy[f]), force[f].copy(),
                              None if box is None else box[f].copy(), f"{set_dir} frame {f}")
                _check_frame(frame)
                frames.append((frame, names))
    return _remap(frames, type_map)


def _check_frame(frame: Frame) -> None:
    n = frame.positions.shape[0]
    if frame.positions.shape != (n, 3) or frame.forces.shape != (n, 3) or n == 0:
        raise ValueError(f"training data {frame.source}: expected positions and forces [n, 3] with n > 0, found "
                         f"{list(frame.positions.shape)} and {list(frame.forces.shape)}")
    values = [frame.positions, frame.forces, np.array([frame.energy])] + ([frame.cell] if frame.cell is not None else [])
    if not all(np.all(np.isfinite(v)) for v in values):
        raise ValueError(f"training data {frame.source}: non-finite positions, forces, energy or cell")
    if frame.cell is not None and abs(np.linalg.det(frame.cell)) < 1e-12:
        raise ValueError(f"training data {frame.source}: singular cell {frame.cell.tolist()}")


def load_data(paths, data_format: str = "auto", type_map=None, energy_key="energy", forces_key="forces") -> Dataset:
    """Read one or more data sources and merge them (one type list).

    data_format: 'auto' (a folder is DeePMD-kit npy, a file extended XYZ),
    'extxyz' or 'deepmd'.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if data_format not in ("auto", "extxyz", "deepmd"):
        raise ValueError(f"data_format: expected 'auto', 'extxyz' or 'deepmd', found {data_format!r}")
    parts = []
    sources = {}  # real path of every system or file read -> the data path it came from
    for path in paths:
        path = str(path)
        if not os.path.exists(path):
            raise ValueError(f"training data {path}: no such file or folder")
        kind = data_format if data_format != "auto" else ("deepmd" if os.path.isdir(path) else "extxyz")
        sources_of_path = _deepmd_systems(path) if kind == "deepmd" else [path]
        for source in sources_of_path:
            real = os.path.realpath(source)
            if real in sources:
                raise ValueError(f"training data {source}: read twice (through {sources[real]!r} and {path!r}); "
                                 "its frames would count twice and could land in both the training and the "
                                 "validation set")
            sources[real] = path
        if kind == "deepmd":
            parts.append(_read_deepmd_systems(sources_of_path, type_map))  # the systems found above, not searched again
        else:
            parts.append(read_extxyz(path, type_map, energy_key, forces_key))
    merged = [(frame, part.type_names) for part in parts for frame in part.frames]
    return _remap(merged, type_map)


def _check_image_search(heights, cutoff: float) -> None:
    """Refuse a cell whose image search would be huge (a height far below the cut-off)."""
    if not (math.isfinite(cutoff) and cutoff > 0):
        raise ValueError(f"cutoff: expected a finite number > 0, found {cutoff}")
    axis = int(np.argmin(heights))
    height = float(heights[axis])
    ratios = [cutoff / h if h > 0 else math.inf for h in heights]
    # As a float: with an absurd cut-off the product of integers is too large for the message's format.
    images = math.prod(2.0 * math.ceil(r) + 1 for r in ratios) if all(map(math.isfinite, ratios)) else math.inf
    if not height >= MIN_HEIGHT_FRACTION * cutoff or images > MAX_IMAGES:
        raise ValueError(
            f"the periodic cell's height along lattice vector {'abc'[axis]} (the distance between its opposite "
            f"faces) is {height:.6g}, against a cut-off of {cutoff:g}: the pair search would visit "
            f"{images:.3g} periodic images; expected every height >= {MIN_HEIGHT_FRACTION:g} * cutoff and at most "
            f"{MAX_IMAGES} images (is the cell flat, or in other units than the positions?)")


def frame_pairs(positions: np.ndarray, cell: np.ndarray | None, cutoff: float):
    """All ordered pairs (i, j) within ``cutoff``, every periodic image counted.

    positions [n, 3]; cell None or [3, 3] lattice vectors as rows (any shape,
    even smaller than the cut-off). Returns (i [P], j [P], shifts [P, 3]) as
    numpy int64, int64, float64 with d_ij = x_j - x_i + shift. Raises
    ValueError for two particles (or a particle and an image) at distance 0,
    and for a cell with a height below MIN_HEIGHT_FRACTION * cutoff or whose
    search would visit more than MAX_IMAGES periodic images.
    """
    positions = np.asarray(positions, dtype=np.float64)
    n = positions.shape[0]
    cutoff_sq = cutoff * cutoff
    if cell is None:
        images = np.zeros((1, 3))
    else:
        cell = np.asarray(cell, dtype=np.float64)
        volume = abs(np.linalg.det(cell))
        heights = [volume / np.linalg.norm(np.cross(cell[(k + 1) % 3], cell[(k + 2) % 3])) for k in range(3)]
        _check_image_search(heights, cutoff)
        # Displacements are taken between wrapped positions (fractional differences in (-1, 1)).
        fractional = positions @ np.linalg.inv(cell)
        wrap = -np.floor(fractional)
        # |n_k| <= |f_k + n_k| + |f_k| < r_c / h_k + 1 for a pair within r_c (wrapped f_k in (-1, 1))
        span = [int(math.ceil(cutoff / h)) for h in heights]
        grid = np.meshgrid(*[np.arange(-s, s + 1) for s in span], indexing="ij")
        counts = np.stack([g.ravel() for g in grid], axis=1).astype(np.float64)
        images = counts @ cell
    base = positions if cell is None else positions + wrap @ cell
    magnitude_i = np.abs(base).max(axis=1)
    # Rows of i in blocks, so that the [rows, n] distance arrays stay near PAIR_BLOCK_ELEMENTS entries whatever the
    # frame's size (a 12,000-atom frame otherwise asked for 3.2 GiB at once); the pairs come in the same order.
    rows = max(1, PAIR_BLOCK_ELEMENTS // max(n, 1))
    i_list, j_list, s_list = [], [], []
    for image in images:
        zero_image = not np.any(image)
        shifted = base + image[None, :]
        magnitude_j = np.abs(shifted).max(axis=1)
        for first in range(0, n, rows):
            last = min(n, first + rows)
            d = shifted[None, :, :] - base[first:last, None, :]  # [i - first, j, 3]
            dist_sq = np.einsum("ijk,ijk->ij", d, d)
            if zero_image:
                dist_sq[np.arange(last - first), np.arange(first, last)] = np.inf
            # Distance 0 up to the rounding of the coordinates: the rule of every platform (GraphSamePosition.h).
            tolerance_sq = same_position_tolerance_squared(cutoff_sq, magnitude_i[first:last, None] ** 2,
                                                           magnitude_j[None, :] ** 2)
            coincident = dist_sq <= tolerance_sq
            if np.any(coincident):
                a, j = (int(v) for v in np.argwhere(coincident)[0])
                # The tolerance grows with the cut-off and the coordinates' magnitude: name it, since an absurd
                # cut-off (a unit mistake) makes ordinary neighbours "coincident".
                raise ValueError(f"particles {first + a} and {j} are at distance 0 (their distance "
                                 f"{math.sqrt(dist_sq[a, j]):.3g} is within the same-position tolerance "
                                 f"{math.sqrt(tolerance_sq[a, j]):.3g}, which grows with the cut-off "
                                 f"{math.sqrt(cutoff_sq):g}: is the cut-off in the positions' unit?)")
            i, j = np.nonzero(dist_sq < cutoff_sq)
            if i.size:
                i += first
                shift = image[None, :] + (0.0 if cell is None else (wrap[j] - wrap[i]) @ cell)
                i_list.append(i)
                j_list.append(j)
                s_list.append(np.broadcast_to(shift, (i.size, 3)))
    if not i_list:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 3))
    return (np.concatenate(i_list).astype(np.int64), np.concatenate(j_list).astype(np.int64),
            np.concatenate(s_list).astype(np.float64))


__all__ = ["Frame", "Dataset", "read_extxyz", "read_deepmd", "load_data", "frame_pairs", "ELEMENT_SYMBOLS",
           "MIN_HEIGHT_FRACTION", "MAX_IMAGES"]
