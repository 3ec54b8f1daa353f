"""NVE energy drift of the bundled silicon model on several OpenMM platforms.

The silicon demo's system (examples/silicon/silicon_md.py: a periodic diamond
crystal with the GraphForce of examples/models/silicon-sw.safetensors) runs
under a VerletIntegrator (NVE) from one initial state, the same on every
platform: the crystal's lattice sites and Maxwell-Boltzmann velocities drawn
by numpy with a fixed seed (centre-of-mass momentum removed).  The total
energy (kinetic + potential) is recorded every --report-every steps; for each
platform the script prints and writes (JSON) its linear drift, the RMS
fluctuation about that line, the largest excursion from the first value and
the speed.

    python bench/nve_drift.py [--platforms Reference,CUDA] [--precision mixed] [--steps 20000]

See bench/README.md ("NVE energy drift").
"""

import argparse
import datetime
import json
import math
import os
import platform as host_platform
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "examples", "silicon"))
import silicon_md  # noqa: E402  (it puts examples/ on the path for run_md, and imports sw)

run_md = silicon_md.run_md
sw = silicon_md.sw

import openmm  # noqa: E402
import openmm.unit as unit  # noqa: E402

KB = unit.MOLAR_GAS_CONSTANT_R.value_in_unit(unit.kilojoule_per_mole / unit.kelvin)  # kJ/mol/K
DEFAULT_TIMESTEP_FS = 1.0  # the silicon demo's step (examples/run_md.py make_context: 1 fs)
PRECISION_PLATFORMS = ("CUDA", "OpenCL", "HIP")  # platforms with a "Precision" property
PRECISIONS = ("single", "mixed", "double")


class InputError(Exception):
    """Bad command-line input: reported as one line, without a traceback."""


def fit_drift(times_ns, energies_kj, n_atoms=None, temperature_k=None):
    """Least-squares line through E(t); returns the drift and the spread.

    times_ns, energies_kj: the sampled times (ns) and total energies (kJ/mol).
    Returns drift_kj_per_mol_per_ns (the slope), intercept_kj_per_mol,
    fluctuation_rms_kj_per_mol (RMS of the residuals about the line) and
    max_abs_deviation_kj_per_mol (max |E - E[0]|); with n_atoms also the drift
    in meV/atom/ps and the fluctuation in meV/atom, and with temperature_k
    too the drift in kT/ns/atom (k_B T at temperature_k).
    """
    t = np.asarray(times_ns, dtype=float)
    e = np.asarray(energies_kj, dtype=float)
    if t.shape != e.shape or t.ndim != 1 or len(t) < 2:
        raise ValueError("fit_drift needs two equally long 1-D series of at least 2 points")
    # Centre both series: total energies are large (about -2e5 kJ/mol for 512 atoms) and the drift small.
    t0, e0 = t.mean(), e[0]
    dt, de = t - t0, e - e0
    denominator = float(np.sum(dt * dt))
    if denominator == 0.0:
        raise ValueError("fit_drift needs at least two distinct times")
    slope = float(np.sum(dt * (de - de.mean())) / denominator)
    intercept = float(e0 + de.mean() - slope * t0)
    residual = e - (intercept + slope * t)
    result = dict(
        drift_kj_per_mol_per_ns=slope,
        intercept_kj_per_mol=intercept,
        fluctuation_rms_kj_per_mol=float(np.sqrt(np.mean(residual * residual))),
        max_abs_deviation_kj_per_mol=float(np.max(np.abs(de))),
    )
    if n_atoms:
        # kJ/mol/ns -> meV/ps: / 1000 (ns -> ps) / EV (kJ/mol -> eV) * 1000 (eV -> meV).
        result["drift_mev_per_atom_per_ps"] = slope / (sw.EV * n_atoms)
        result["fluctuation_rms_mev_per_atom"] = result["fluctuation_rms_kj_per_mol"] * 1000.0 / (sw.EV * n_atoms)
        if temperature_k:
            result["drift_kt_per_ns_per_atom"] = slope / (KB * temperature_k * n_atoms)
    return result


def maxwell_boltzmann(masses_dalton, temperature_k, seed):
    """Velocities (nm/ps, n x 3) drawn by numpy at temperature_k, centre-of-mass momentum removed and
    scaled to a kinetic temperature of exactly temperature_k."""
    masses = np.asarray(masses_dalton, dtype=float)
    rng = np.random.default_rng(seed)
    sigma = np.sqrt(KB * temperature_k / masses)  # kJ/mol / dalton = nm^2/ps^2
    velocities = rng.standard_normal((len(masses), 3)) * sigma[:, None]
    velocities -= (masses[:, None] * velocities).sum(0) / masses.sum()
    # Scale to exactly temperature_k (3n - 3 degrees of freedom), so that every seed starts at the same energy.
    drawn = (masses[:, None] * velocities ** 2).sum() / ((3 * len(masses) - 3) * KB)
    return velocities * np.sqrt(temperature_k / drawn)


def cells_for_atoms(n_atoms):
    """Diamond cells per edge for n_atoms = 8 cells^3 (at least 2 cells: the box must hold twice the cut-off)."""
    cells = round((n_atoms / 8) ** (1 / 3)) if n_atoms > 0 else 0
    if n_atoms <= 0 or 8 * cells ** 3 != n_atoms or cells < 2:
        valid = ", ".join(str(8 * c ** 3) for c in range(2, 9))
        raise InputError(f"--atoms {n_atoms}: the diamond crystal has 8 x cells^3 atoms with at least 2 cells "
                         f"per edge ({valid}, ...)")
    return cells


def available_platforms():
    return [openmm.Platform.getPlatform(i).getName() for i in range(openmm.Platform.getNumPlatforms())]


def run_command(arguments):
    try:
        out = subprocess.run(arguments, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_revision():
    revision = run_command(["git", "-C", REPO, "rev-parse", "--short=12", "HEAD"])
    if revision is None:
        return None
    status = run_command(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"])
    return revision + ("-dirty" if status else "")


def gpu_name_fallback():
    """The first GPU's name from nvidia-smi, else torch; None when neither answers."""
    text = run_command(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"])
    if text:
        return text.splitlines()[0].strip()
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
    except Exception:  # noqa: BLE001 - torch is optional
        pass
    return None


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platforms", default=None,
                        help="comma-separated OpenMM platforms (default: Reference, plus CUDA when present)")
    parser.add_argument("--precision", default="mixed", help=f"{'/'.join(PRECISION_PLATFORMS)} Precision "
                        f"property: single, mixed or double [mixed]; Reference computes in double, CPU at its own")
    parser.add_argument("--atoms", type=int, default=512, help="atoms, 8 x cells^3 (64, 216, 512, ...) [512]")
    parser.add_argument("--temperature", type=float, default=1000.0,
                        help="K: of the initial velocities and of k_B T in the normalised drift [1000]")
    parser.add_argument("--timestep-fs", type=float, default=DEFAULT_TIMESTEP_FS, help="fs [1.0, the demo's]")
    parser.add_argument("--steps", type=int, default=20000, help="steps per platform [20000]")
    parser.add_argument("--reference-steps", type=int, default=None,
                        help="steps on the Reference platform (about 100 steps/s for 512 atoms on a CPU core) [--steps]")
    parser.add_argument("--report-every", type=int, default=20, help="steps between total-energy samples [20]")
    parser.add_argument("--seed", type=int, default=1, help="numpy seed of the initial velocities [1]")
    parser.add_argument("--model", default=silicon_md.DEFAULT_MODEL, help="model file [the bundled silicon model]")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "nve_drift.json"),
                        help="JSON output [bench/results/nve_drift.json]; '' for none")
    parser.add_argument("--no-series", action="store_true", help="leave the energy series out of the JSON")
    parser.add_argument("--compare", default=None, metavar="JSON",
                        help="an earlier run of this script (e.g. bench/reference/nve_drift_reference_*.json, "
                             "Reference measured on a CPU machine) to compare every run with; it must have the same "
                             "atoms, seed, time step, temperature, model and steps")
    parser.add_argument("--forces", default="graph", choices=("graph", "native"),
                        help="graph: the GraphForce of --model [default]; native: Stillinger-Weber, the potential "
                             "the bundled model was trained on, as OpenMM's own CustomNonbondedForce + "
                             "CustomManyParticleForce (examples/silicon/sw.py), without the plugin: a control for "
                             "what a platform's precision does to the drift of ordinary OpenMM forces")
    parser.add_argument("--rescore", default=None, choices=PRECISIONS, metavar="PRECISION",
                        help="also evaluate the potential energy of every sampled frame in a second Context of the "
                             "same platform at this Precision (e.g. double) and fit the drift of kinetic + rescored "
                             "potential: the run's dynamics measured without its own energy readout's rounding "
                             "(CUDA/OpenCL/HIP; Reference rescores on Reference)")
    args = parser.parse_args(argv)
    if args.steps <= 0:
        raise InputError(f"--steps {args.steps}: give a positive number of steps")
    if args.reference_steps is None:
        args.reference_steps = args.steps
    if args.reference_steps <= 0:
        raise InputError(f"--reference-steps {args.reference_steps}: give a positive number of steps")
    if args.report_every <= 0:
        raise InputError(f"--report-every {args.report_every}: give a positive number of steps")
    if not (args.timestep_fs > 0 and math.isfinite(args.timestep_fs)):
        raise InputError(f"--timestep-fs {args.timestep_fs}: give a positive time step")
    if not (args.temperature > 0 and math.isfinite(args.temperature)):
        raise InputError(f"--temperature {args.temperature}: give a positive temperature in K")
    if args.precision not in PRECISIONS:
        raise InputError(f"--precision {args.precision}: use one of {', '.join(PRECISIONS)}")
    if not os.path.isfile(args.model):
        raise InputError(f"--model {args.model}: no such file")
    args.cells = cells_for_atoms(args.atoms)
    args.compared = None if args.compare is None else load_comparison(args.compare, args)
    return args


# What two runs must share for their drifts to compare: the same trajectory start and the same length
# (the shift of the first ~0.2 ps dominates short fits, so drifts of runs of different lengths do not compare).
COMPARED_KEYS = ("atoms", "seed", "timestep_fs", "temperature_k", "model")


def one_run(path, option):
    """(header, run) of a JSON written by this script that holds one run with a drift, its step count and its
    second-half drift; option names the command-line option in the error."""
    try:
        with open(path) as handle:
            document = json.load(handle)
        header, runs = document["header"], [r for r in document["runs"] if "drift_kj_per_mol_per_ns" in r]
        if not isinstance(header, dict):
            raise TypeError("its header is not an object")
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise InputError(f"{option} {path}: not a JSON written by this script ({error})") from None
    if len(runs) != 1:
        raise InputError(f"{option} {path}: expected one run with a drift, found {len(runs)}")
    for key in ("steps", "second_half_drift_kj_per_mol_per_ns"):
        if key not in runs[0]:
            raise InputError(f"{option} {path}: its run has no {key} (a run too short for a second half?)")
    return header, runs[0]


def check_comparable(option, path, header, steps, mine, my_steps, whose, whose_steps):
    """InputError unless the stored run (header, steps) has the settings (COMPARED_KEYS) and step count of mine."""
    for key in COMPARED_KEYS:
        if header.get(key) != mine.get(key):
            raise InputError(f"{option} {path}: its {key} is {header.get(key)!r}, {whose} {mine.get(key)!r}")
    if steps != my_steps:
        raise InputError(f"{option} {path}: it ran {steps} steps, {whose_steps} {my_steps}: drifts compare only over "
                         "the same number of steps")


def seed_of(header, option, path):
    """The header's seed (an integer), or InputError: runs are paired and told apart by it."""
    seed = header.get("seed")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise InputError(f"{option} {path}: its header has no seed (it is {seed!r})")
    return seed


def load_comparison(path, args):
    """The run of the --compare JSON (one run, with a drift), checked against this run's settings."""
    header, run = one_run(path, "--compare")
    mine = dict(atoms=8 * args.cells ** 3, seed=args.seed, timestep_fs=args.timestep_fs,
                temperature_k=args.temperature, model=model_label(args))
    check_comparable("--compare", path, header, run["steps"], mine, args.steps, "this run's", "this run --steps")
    return dict(file=path, header=header, run=run)


def pairs_by_seed(paths, against):
    """--summarize RUN.json ... --against STORED.json ...: every run paired with the stored run of its seed (any
    runs, --compare or not: e.g. CUDA runs against the stored Reference runs of the same starts), checked to have
    the same settings and steps. Returns [(seed, path, run, stored run)]."""
    if not against:
        raise InputError("--against: give the stored runs after it (one JSON a start)")
    stored = {}
    for path in against:
        header, run = one_run(path, "--against")
        seed = seed_of(header, "--against", path)
        if seed in stored:
            raise InputError(f"--against {path}: a second run of seed {seed} (the first: {stored[seed][0]})")
        stored[seed] = (path, header, run)
    entries = []
    for path in paths:
        header, run = one_run(path, "--summarize")
        seed = seed_of(header, "--summarize", path)
        if seed not in stored:
            raise InputError(f"--summarize {path}: no --against run of its seed {seed}")
        stored_path, stored_header, stored_run = stored[seed]
        check_comparable("--against", stored_path, stored_header, stored_run["steps"], header, run["steps"],
                         f"{path}'s", f"{path}'s")
        entries.append((seed, path, run, stored_run))
    return entries


NATIVE_FORCES = "native Stillinger-Weber (examples/silicon/sw.py sw_forces)"


def model_label(args):
    """What computes the forces, as the JSON header's `model` (runs compare only with the same)."""
    return NATIVE_FORCES if args.forces == "native" else os.path.relpath(os.path.abspath(args.model), REPO)


def choose_platforms(requested):
    """(names, explicit): the platforms to run; unknown names are an InputError."""
    present = available_platforms()
    if requested is None:
        return ["Reference"] + (["CUDA"] if "CUDA" in present else []), False
    names = [name.strip() for name in requested.split(",") if name.strip()]
    if not names:
        raise InputError("--platforms: name at least one platform")
    for name in names:
        if name not in present:
            raise InputError(f"--platforms: unknown or unavailable platform '{name}' "
                             f"(this OpenMM has: {', '.join(present)})")
    if len(set(names)) != len(names):
        raise InputError(f"--platforms {requested}: a platform is named twice")
    return names, True


def make_context(system, name, args, precision=None):
    """A Context with a VerletIntegrator on one platform (examples/run_md.py make_context), at args.precision
    unless precision is given."""
    properties = {"Precision": precision or args.precision} if name in PRECISION_PLATFORMS else None
    timestep = args.timestep_fs * 1e-3 * unit.picoseconds
    return run_md.make_context(system, name, make_integrator=lambda: openmm.VerletIntegrator(timestep),
                               properties=properties)


def platform_info(context):
    """Precision actually used and the device name (where the platform has these properties)."""
    platform = context.getPlatform()
    names = set(platform.getPropertyNames())
    precision = platform.getPropertyValue(context, "Precision") if "Precision" in names else (
        "double" if platform.getName() == "Reference" else "default")
    device = platform.getPropertyValue(context, "DeviceName") if "DeviceName" in names else None
    return precision, device


def run_platform(context, integrator, steps, args, n_atoms, label, rescorer=None):
    """Run NVE, sampling the energies; returns the record of this platform.

    rescorer: None, or a Context of the same System (another Precision) in which the potential energy of every
    sampled frame is evaluated again (its positions set from the run's; the run itself is untouched)."""
    dof = 3 * n_atoms - 3
    step_list, total, potential, kinetic, rescored = [], [], [], [], []

    def sample(step):
        state = context.getState(getEnergy=True, getPositions=rescorer is not None)
        pot = state.getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole)
        kin = state.getKineticEnergy().value_in_unit(unit.kilojoule_per_mole)
        step_list.append(step)
        potential.append(pot)
        kinetic.append(kin)
        total.append(pot + kin)
        if rescorer is not None:
            rescorer.setPositions(state.getPositions(asNumpy=True))
            rescored.append(rescorer.getState(getEnergy=True).getPotentialEnergy().value_in_unit(
                unit.kilojoule_per_mole))
        return math.isfinite(pot + kin)

    sample(0)
    done, error = 0, None
    start = last_print = time.perf_counter()
    try:
        while done < steps:
            chunk = min(args.report_every, steps - done)
            integrator.step(chunk)
            done += chunk
            if not sample(done):
                error = f"the total energy became {total[-1]} at step {done}"
                break
            now = time.perf_counter()
            if now - last_print > 30.0 and done < steps:
                print(f"  {label}: step {done}/{steps}, {done / (now - start):.1f} steps/s, "
                      f"E - E0 = {total[-1] - total[0]:+.4f} kJ/mol", flush=True)
                last_print = now
    except openmm.OpenMMException as exception:
        error = f"step {done}: {str(exception).strip()}"
    elapsed = time.perf_counter() - start
    timestep_ns = args.timestep_fs * 1e-6
    times_ns = np.array(step_list, dtype=float) * timestep_ns
    record = dict(steps=done, requested_steps=steps, time_ns=done * timestep_ns, reports=len(step_list),
                  wall_s=elapsed, steps_per_s=done / elapsed if elapsed > 0 else None,
                  initial_total_energy_kj_per_mol=total[0],
                  initial_potential_energy_kj_per_mol=potential[0],
                  mean_kinetic_temperature_k=float(2 * np.mean(kinetic) / (dof * KB)),
                  error=error)
    finite = [i for i, value in enumerate(total) if math.isfinite(value)]
    if len(finite) >= 2:
        whole, second = whole_and_second_half(times_ns[finite], np.array(total)[finite], n_atoms, args.temperature)
        record.update(whole)
        if second is not None:
            record["second_half_drift_kj_per_mol_per_ns"] = second["drift_kj_per_mol_per_ns"]
            record["second_half_drift_kt_per_ns_per_atom"] = second["drift_kt_per_ns_per_atom"]
        if len(finite) == len(total):
            record["wander_rms_kj_per_mol"] = energy_wander(times_ns, np.array(total))
            record.update(window_drifts(times_ns, np.array(total)))
    if rescorer is not None:
        record.update(rescored_fit(times_ns, np.array(kinetic), np.array(potential), np.array(rescored),
                                   n_atoms, args.temperature))
    if not args.no_series:
        record["series"] = dict(step=step_list, total_kj_per_mol=total, potential_kj_per_mol=potential,
                                kinetic_kj_per_mol=kinetic)
        if rescorer is not None:
            record["series"]["rescored_potential_kj_per_mol"] = rescored
    return record


def whole_and_second_half(times_ns, energies_kj, n_atoms, temperature_k):
    """fit_drift over the whole series and over its second half (None when that has fewer than 2 points): the first
    ~0.2 ps from the lattice sites (forces building up) shifts the energy once, which dominates the drift of short
    runs; the second half is free of it."""
    half = len(times_ns) // 2
    second = None
    if len(times_ns) - half >= 2:
        second = fit_drift(times_ns[half:], energies_kj[half:], n_atoms, temperature_k)
    return fit_drift(times_ns, energies_kj, n_atoms, temperature_k), second


def after_skip(times_ns, energies_kj, skip_ps):
    """The samples from skip_ps after the first on: (times in ns, energies), as float arrays."""
    t = np.asarray(times_ns, dtype=float)
    e = np.asarray(energies_kj, dtype=float)
    keep = t >= t[0] + skip_ps * 1e-3
    return t[keep], e[keep]


WANDER_LAGS_PS = (10, 50, 100)
WANDER_AVERAGE_PS = 10.0
WANDER_SKIP_PS = 1.0


def energy_wander(times_ns, energies_kj, lags_ps=WANDER_LAGS_PS, average_ps=WANDER_AVERAGE_PS, skip_ps=WANDER_SKIP_PS):
    """The slow wander of the total energy: {"<lag>ps": RMS of S(t + lag) - S(t) in kJ/mol}, S the running mean of E
    over average_ps (which removes Verlet's fast, bounded oscillation, about 0.18 kJ/mol RMS here), over every pair of
    samples lag apart, after the first skip_ps (the one-off shift from the lattice sites).  Unlike a drift it does
    not hinge on where a run's slow wander happens to end, so runs compare on it with less noise; a drift or a random
    walk grows it with the lag.  Lags the run is too short or too coarsely sampled for are left out."""
    t, e = after_skip(times_ns, energies_kj, skip_ps)
    t = t * 1e3  # ps
    result = {}
    if len(t) < 2:
        return result
    spacing = float(np.median(np.diff(t)))
    width = max(1, int(round(average_ps / spacing)))
    if width > len(e):
        return result
    smooth = np.convolve(e, np.ones(width) / width, mode="valid")
    for lag in lags_ps:
        k = int(round(lag / spacing))
        if k >= 1 and abs(k * spacing - lag) <= 1e-6 * lag and k < len(smooth):
            result[f"{lag:g}ps"] = float(np.sqrt(np.mean((smooth[k:] - smooth[:-k]) ** 2)))
    return result


WINDOW_OFFSETS = 20


def window_drifts(times_ns, energies_kj, skip_ps=WANDER_SKIP_PS, offsets=WINDOW_OFFSETS):
    """The drift fitted to every window of half the run (after the first skip_ps), the windows' starts spread evenly
    over the other half (offsets + 1 of them): {"window_ns", "windows", "window_drift_mean_abs_kj_per_mol_per_ns",
    "window_drift_rms_kj_per_mol_per_ns"}, or {} for a run too short.  The second-half drift is one of these windows;
    how much the others differ from it is the noise of that figure (within one stored Reference run the 0.1-ns drifts
    span up to 1.5 kJ/mol/ns, -0.67 to +0.88 for seed 2, bench/NOTES.md v48), and their mean |drift| compares runs
    with less of it."""
    t, e = after_skip(times_ns, energies_kj, skip_ps)
    width = len(t) // 2
    if width < 10:
        return {}
    starts = sorted({int(round(i * (len(t) - width) / offsets)) for i in range(offsets + 1)})
    slopes = np.array([fit_drift(t[a:a + width], e[a:a + width])["drift_kj_per_mol_per_ns"] for a in starts])
    return dict(window_ns=float(t[width - 1] - t[0]), windows=len(starts),
                window_drift_mean_abs_kj_per_mol_per_ns=float(np.mean(np.abs(slopes))),
                window_drift_rms_kj_per_mol_per_ns=float(np.sqrt(np.mean(slopes ** 2))))


def rescored_fit(times_ns, kinetic, potential, rescored, n_atoms, temperature_k):
    """The drift of kinetic + rescored potential (whole run and second half), and the readout: the run's own
    potential minus the rescored one (its mean, RMS about the mean and drift). Arrays of the sampled frames."""
    finite = np.flatnonzero(np.isfinite(kinetic + potential + rescored))
    if len(finite) < 4:
        return dict(rescored_error="fewer than 4 finite frames")
    t, total = times_ns[finite], (kinetic + rescored)[finite]
    whole, second = whole_and_second_half(t, total, n_atoms, temperature_k)
    readout = (potential - rescored)[finite]
    readout_fit = fit_drift(t, readout)
    return dict(rescored_drift_kj_per_mol_per_ns=whole["drift_kj_per_mol_per_ns"],
                rescored_second_half_drift_kj_per_mol_per_ns=second["drift_kj_per_mol_per_ns"],
                rescored_fluctuation_rms_kj_per_mol=whole["fluctuation_rms_kj_per_mol"],
                readout_mean_kj_per_mol=float(readout.mean()),
                readout_rms_kj_per_mol=float(readout.std()),
                readout_drift_kj_per_mol_per_ns=readout_fit["drift_kj_per_mol_per_ns"])


def print_table(runs, n_atoms):
    header = (f"{'platform':<10} {'precision':<10} {'steps':>7} {'ns':>8} {'kJ/mol/ns':>11} {'kT/ns/atom':>11} "
              f"{'meV/atom/ps':>12} {'rms kJ/mol':>11} {'max|dE|':>9} {'steps/s':>9}")
    print(f"NVE drift, {n_atoms} atoms (drift: linear fit of the total energy; rms: about the fit; "
          f"max|dE|: largest |E - E0|, kJ/mol)")
    print(header)
    for run in runs:
        if "drift_kj_per_mol_per_ns" not in run:
            print(f"{run['platform']:<10} {run.get('precision') or '-':<10} {run.get('steps', 0):>7}  {run['error']}")
            continue
        print(f"{run['platform']:<10} {run['precision']:<10} {run['steps']:>7} {run['time_ns']:>8.4g} "
              f"{run['drift_kj_per_mol_per_ns']:>11.4g} {run['drift_kt_per_ns_per_atom']:>11.3e} "
              f"{run['drift_mev_per_atom_per_ps']:>12.3e} {run['fluctuation_rms_kj_per_mol']:>11.4g} "
              f"{run['max_abs_deviation_kj_per_mol']:>9.4g} {run['steps_per_s']:>9.1f}")
        if run.get("error"):
            print(f"{'':<10} stopped: {run['error']}")


def write_json(path, document):
    if not path:
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w") as handle:
        json.dump(document, handle, indent=1, allow_nan=True)
        handle.write("\n")
    os.replace(path + ".tmp", path)


BOOTSTRAP_SAMPLES = 10000


def ratio(a, b):
    """a / b in float64: inf for a positive a over 0, nan for 0 / 0 (no warning, no exception)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.float64(a) / np.float64(b))


def bootstrap_ratio(mine, theirs, statistic=np.mean, samples=BOOTSTRAP_SAMPLES, seed=0):
    """The 95% interval of statistic(mine) / statistic(theirs) when the starts are drawn again with replacement,
    the same draw for both (a start's run and its stored run stay paired: they share the initial state), or None
    for fewer than 3 starts or no draw with a ratio. mine, theirs: one value a start, in the same order. The ends
    are the 2.5th percentile rounded down and the 97.5th rounded up to a draw's ratio (no interpolation), so a
    draw whose stored statistic is 0 (ratio inf) makes the upper end inf once it is among the top 2.5%; draws of
    0 / 0 say nothing and are left out."""
    mine, theirs = np.asarray(mine, dtype=float), np.asarray(theirs, dtype=float)
    if len(mine) < 3 or len(mine) != len(theirs):
        return None
    draws = np.random.default_rng(seed).integers(0, len(mine), size=(samples, len(mine)))
    ratios = np.array([ratio(statistic(mine[d]), statistic(theirs[d])) for d in draws])
    ratios = ratios[~np.isnan(ratios)]
    if len(ratios) == 0:
        return None
    return float(np.percentile(ratios, 2.5, method="lower")), float(np.percentile(ratios, 97.5, method="higher"))


def format_ratio(value):
    return "unbounded" if value == math.inf else f"{value:.3g}"


def ratio_line(label, mine, theirs, n_starts, unit, statistic=np.mean):
    """'<label> over <n> starts: <mine> against <theirs> <unit> (<ratio>x, 95% interval over the starts a-b)'."""
    a, b = statistic(np.asarray(mine, dtype=float)), statistic(np.asarray(theirs, dtype=float))
    interval = bootstrap_ratio(mine, theirs, statistic)
    spread = (f", 95% interval over the starts {format_ratio(interval[0])}-{format_ratio(interval[1])}"
              if interval else "")
    return f"{label} over {n_starts} starts: {a:.4g} against {b:.4g} {unit} ({format_ratio(ratio(a, b))}x{spread})"


def root_mean_square(values):
    return float(np.sqrt(np.mean(np.square(values))))


def summarize(paths, against=None):
    """The verdict over several starts: the mean |drift| (whole run and second half) of the compared runs against
    the mean of their stored runs (the --compare run of each, or with against, the run of its seed there). One
    start says little: Reference's own drift over 200,000 steps changes sign between starts (-0.25, +0.18, -0.10
    kJ/mol/ns for seeds 1-3), so a per-start ratio can be large by chance when the stored drift is near zero.
    Every ratio but the rescored ones comes with its bootstrap interval over the starts (bootstrap_ratio); the
    verdict stays on the point estimates. Returns (lines, verdict) with verdict True, False or None (nothing to
    compare)."""
    if not paths:
        raise InputError("--summarize: give the runs to summarize (JSON files)")
    if against is not None:
        entries = pairs_by_seed(paths, against)
    else:  # each run against its own --compare run
        entries = []
        for path in paths:
            with open(path) as handle:
                document = json.load(handle)
            stored_file = document["header"].get("compared_with")
            if stored_file is None:
                raise InputError(f"--summarize {path}: not a run made with --compare")
            _, stored = one_run(stored_file, f"--summarize {path}: its --compare run")
            seed = seed_of(document["header"], "--summarize", path)
            entries.extend((seed, path, run, stored) for run in document["runs"] if "compared_with" in run)
    # In the order of their starts (not the files'), so that the bootstrap's draws, and so its intervals, depend
    # on the set of starts alone; a start given twice would count twice.
    def start(entry):  # (seed, platform, precision): one run a start
        return entry[0], entry[2]["platform"], str(entry[2].get("precision"))

    entries.sort(key=start)
    for first, second in zip(entries, entries[1:]):
        if start(first) == start(second):
            raise InputError(f"--summarize {second[1]}: a second {second[2]['platform']} run of seed {second[0]} "
                             f"(the first: {first[1]})")
    pairs = [(path, run, stored) for _, path, run, stored in entries]
    if not pairs:
        return [], None
    lines, verdict = [], True
    for key, label in (("drift_kj_per_mol_per_ns", "drift"), ("second_half_drift_kj_per_mol_per_ns", "second-half drift")):
        mine = [abs(run[key]) for _, run, _ in pairs]
        theirs = [abs(stored[key]) for _, _, stored in pairs]
        lines.append(ratio_line(f"mean |{label}|", mine, theirs, len(pairs), "kJ/mol/ns"))
        verdict = verdict and np.mean(mine) <= np.mean(theirs)
    # The drifts of every half-length window (window_drifts), averaged over the starts, where all runs have them.
    key = "window_drift_mean_abs_kj_per_mol_per_ns"
    if all(key in run and key in stored for _, run, stored in pairs):
        lines.append(ratio_line(f"mean |drift| of every half-length window ({pairs[0][1]['windows']} a run)",
                                [run[key] for _, run, _ in pairs], [stored[key] for _, _, stored in pairs],
                                len(pairs), "kJ/mol/ns"))
    # The wander (energy_wander), pooled over the starts (root mean square), where every run and stored run has it.
    lags = [lag for lag in (f"{lag:g}ps" for lag in WANDER_LAGS_PS)
            if all(lag in run.get("wander_rms_kj_per_mol", {}) and lag in stored.get("wander_rms_kj_per_mol", {})
                   for _, run, stored in pairs)]
    for lag in lags:
        lines.append(ratio_line(f"wander at {lag} (RMS change of the {WANDER_AVERAGE_PS:g}-ps mean energy)",
                                [run["wander_rms_kj_per_mol"][lag] for _, run, _ in pairs],
                                [stored["wander_rms_kj_per_mol"][lag] for _, _, stored in pairs], len(pairs),
                                "kJ/mol", statistic=root_mean_square))
    rescored = [run for _, run, _ in pairs if "rescored_drift_kj_per_mol_per_ns" in run]
    if len(rescored) == len(pairs):  # the dynamics alone, the runs' energies evaluated again (--rescore)
        for key, stored_key, label in (("rescored_drift_kj_per_mol_per_ns", "drift_kj_per_mol_per_ns", "drift"),
                                       ("rescored_second_half_drift_kj_per_mol_per_ns",
                                        "second_half_drift_kj_per_mol_per_ns", "second-half drift")):
            mine = float(np.mean([abs(run[key]) for run in rescored]))
            theirs = float(np.mean([abs(stored[stored_key]) for _, _, stored in pairs]))
            lines.append(f"rescored in {rescored[0]['rescore_precision']}: mean |{label}| {mine:.4g} against "
                         f"{theirs:.4g} kJ/mol/ns ({format_ratio(ratio(mine, theirs))}x)")
        lines.append("readout (own - rescored potential): rms "
                     + ", ".join(f"{run['readout_rms_kj_per_mol']:.3g}" for run in rescored) + " kJ/mol; drift "
                     + ", ".join(f"{run['readout_drift_kj_per_mol_per_ns']:+.3g}" for run in rescored) + " kJ/mol/ns")
    lines.append("no worse than the stored runs" if verdict else "worse than the stored runs")
    return lines, verdict


def main(argv=None):
    arguments = sys.argv[1:] if argv is None else list(argv)
    # python bench/nve_drift.py --summarize RUN.json ... (runs made with --compare) [--against STORED.json ...]
    if arguments[:1] == ["--summarize"]:
        runs, against = arguments[1:], None
        if "--against" in runs:
            runs, against = runs[:runs.index("--against")], runs[runs.index("--against") + 1:]
        try:
            lines, verdict = summarize(runs, against)
        except (InputError, OSError, ValueError, KeyError) as error:
            print(f"nve_drift: {error}", file=sys.stderr)
            return 2
        print("\n".join(lines) if lines else "nothing compared")
        return 0 if verdict is not None else 2
    try:
        args = parse_args(argv)
        names, explicit = choose_platforms(args.platforms)
    except InputError as error:
        print(f"nve_drift: {error}", file=sys.stderr)
        return 2

    positions, edge = sw.diamond(args.cells)
    n_atoms = len(positions)
    if args.forces == "native":
        system = sw.sw_system(n_atoms, edge)
    else:
        system = silicon_md.ml_system(args.model, n_atoms, edge)  # loads the GraphForce plugins too
    masses = [system.getParticleMass(i).value_in_unit(unit.dalton) for i in range(n_atoms)]
    velocities = maxwell_boltzmann(masses, args.temperature, args.seed)
    initial_temperature = float((np.asarray(masses)[:, None] * velocities ** 2).sum() / ((3 * n_atoms - 3) * KB))

    # Every Context first, so that a platform that cannot run the System fails before hours of Reference steps.
    contexts = []
    for name in names:
        try:
            context, integrator = make_context(system, name, args)
        except SystemExit as error:  # run_md.make_context's message
            if explicit:
                print(f"nve_drift: {error}", file=sys.stderr)
                return 2
            print(f"note: skipping {name}: {error}", flush=True)
            continue
        context.setPositions(positions * sw.ANGSTROM)
        context.setVelocities(velocities)
        rescorer = None
        if args.rescore is not None:
            try:
                rescorer = make_context(system, name, args, precision=args.rescore)[0]
            except SystemExit as error:
                print(f"nve_drift: --rescore {args.rescore} on {name}: {error}", file=sys.stderr)
                return 2
        contexts.append((name, context, integrator, rescorer))

    gpu_name = None
    header = dict(
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        host=host_platform.node(),
        openmm_version=openmm.__version__,
        git_revision=git_revision(),
        gpu_name=None,
        model=model_label(args),
        atoms=n_atoms, cells=args.cells, box_edge_nm=edge * sw.ANGSTROM,
        temperature_k=args.temperature, kt_kj_per_mol=KB * args.temperature,
        initial_kinetic_temperature_k=initial_temperature,
        timestep_fs=args.timestep_fs, report_every=args.report_every, seed=args.seed,
        steps=args.steps, reference_steps=args.reference_steps, platforms=[c[0] for c in contexts],
        precision_requested=args.precision, rescore_precision=args.rescore,
        command=["bench/nve_drift.py"] + list(sys.argv[1:] if argv is None else argv),
        integrator="VerletIntegrator (NVE); initial state: diamond lattice sites, numpy Maxwell-Boltzmann "
                   "velocities, centre-of-mass momentum removed",
    )
    document = dict(header=header, runs=[])
    print(f"NVE drift: {n_atoms} Si atoms ({args.cells}^3 diamond cells), {args.temperature:g} K initial velocities "
          f"(seed {args.seed}, kinetic {initial_temperature:.1f} K), dt {args.timestep_fs:g} fs, "
          f"forces {model_label(args)}, platforms {', '.join(c[0] for c in contexts) or 'none'}", flush=True)
    for name, context, integrator, rescorer in contexts:
        precision, device = platform_info(context)
        if name in PRECISION_PLATFORMS and gpu_name is None:
            gpu_name = device or gpu_name_fallback()
            header["gpu_name"] = gpu_name
        steps = args.reference_steps if name == "Reference" else args.steps
        print(f"running {name} ({precision}{', ' + device if device else ''}): {steps} steps", flush=True)
        record = dict(platform=name, precision=precision, device_name=device)
        record.update(run_platform(context, integrator, steps, args, n_atoms, name, rescorer))
        if rescorer is not None:
            record["rescore_precision"] = platform_info(rescorer)[0]
        document["runs"].append(record)
        write_json(args.out, document)  # after every platform: a killed run keeps what it measured
    print()
    print_table(document["runs"], n_atoms)
    for run in document["runs"]:
        if "rescored_drift_kj_per_mol_per_ns" in run:
            print(f"{run['platform']} ({run['precision']}) rescored in {run['rescore_precision']}: drift "
                  f"{run['rescored_drift_kj_per_mol_per_ns']:.4g} (second half "
                  f"{run['rescored_second_half_drift_kj_per_mol_per_ns']:.4g}) kJ/mol/ns; readout (own - rescored "
                  f"potential) mean {run['readout_mean_kj_per_mol']:+.4g}, rms {run['readout_rms_kj_per_mol']:.3g} "
                  f"kJ/mol, drift {run['readout_drift_kj_per_mol_per_ns']:+.4g} kJ/mol/ns")
    reference = next((r for r in document["runs"] if r["platform"] == "Reference"), None)
    if reference is not None:
        for run in document["runs"]:
            if run is not reference:
                difference = run["initial_total_energy_kj_per_mol"] - reference["initial_total_energy_kj_per_mol"]
                run["initial_energy_minus_reference_kj_per_mol"] = difference
                print(f"{run['platform']} ({run['precision']}): initial total energy - Reference's = {difference:+.6g} kJ/mol")
    if args.compared is not None:
        other = args.compared["run"]
        print(f"against {args.compared['file']} ({other['platform']}, {other['precision']}, {other['steps']} steps, "
              f"drift {other['drift_kj_per_mol_per_ns']:.4g}, second half "
              f"{other['second_half_drift_kj_per_mol_per_ns']:.4g} kJ/mol/ns):")
        for run in document["runs"]:
            if "drift_kj_per_mol_per_ns" not in run or run["steps"] != other["steps"]:
                continue
            ratio = abs(run["drift_kj_per_mol_per_ns"]) / abs(other["drift_kj_per_mol_per_ns"])
            half = abs(run["second_half_drift_kj_per_mol_per_ns"]) / abs(other["second_half_drift_kj_per_mol_per_ns"])
            run["compared_with"] = dict(file=args.compared["file"], platform=other["platform"], steps=other["steps"],
                                        abs_drift_ratio=ratio, abs_second_half_drift_ratio=half)
            print(f"  {run['platform']} ({run['precision']}): |drift| {ratio:.3g}x, |second-half drift| {half:.3g}x "
                  f"({'no worse' if ratio <= 1.0 and half <= 1.0 else 'worse'})")
            if "rescored_drift_kj_per_mol_per_ns" in run:
                whole = abs(run["rescored_drift_kj_per_mol_per_ns"]) / abs(other["drift_kj_per_mol_per_ns"])
                second = (abs(run["rescored_second_half_drift_kj_per_mol_per_ns"])
                          / abs(other["second_half_drift_kj_per_mol_per_ns"]))
                print(f"  {run['platform']} ({run['precision']}) rescored in {run['rescore_precision']}: |drift| "
                      f"{whole:.3g}x, |second-half drift| {second:.3g}x")
        document["header"]["compared_with"] = args.compared["file"]
    write_json(args.out, document)
    if args.out:
        print(f"results: {args.out}")
    return 0 if all(not r.get("error") for r in document["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
