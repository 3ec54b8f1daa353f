"""Silicon MD with the bundled trained model, compared with the classical Stillinger-Weber reference.

The README's main demo.  A periodic diamond crystal of 512 silicon atoms (4x4x4
cells, a = 5.431 angstrom) runs under Langevin NVT dynamics (1 fs, 1500 K by
default) twice: once with the GraphForce of examples/models/silicon-sw.safetensors
(a small model trained on 64-atom SW data, examples/silicon/README.md) and once
with Stillinger-Weber itself (CustomNonbondedForce + CustomManyParticleForce).
It prints the speed of both, and compares the radial distribution function g(r)
and the Si-Si-Si angle distribution within the first shell, printing the
integrated absolute difference of each and saving a plot.

    python examples/silicon/silicon_md.py [--steps 2000] [--temperature 1500] [--platform CPU]

--steps are the sampled steps of each run, after --equilibrate steps (default
steps/4).  Platform choice: the fastest platform on which a Context can be
created (CUDA, then CPU, then Reference), separately for each run; --platform
forces one for both.
"""

import argparse
import os
import sys
import time

import numpy as np
import openmm
import openmm.unit as unit

import openmmgraph

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))  # examples/, for run_md
import run_md  # noqa: E402
import sw  # noqa: E402

DEFAULT_MODEL = os.path.join(HERE, "..", "models", "silicon-sw.safetensors")
SHELL = 3.0  # angstrom: first-shell radius for the angle distribution (first minimum of g(r))
OBSERVABLE_BLOCK = 1 << 21  # (i, j) pairs a block of observables(): about 50 MB of displacements


def ml_system(model_path, n_atoms, edge):
    system = openmm.System()
    for _ in range(n_atoms):
        system.addParticle(sw.MASS_SI)
    system.setDefaultPeriodicBoxVectors(*[openmm.Vec3(*(row * edge * sw.ANGSTROM)) for row in np.eye(3)])
    force = openmmgraph.GraphForce(model_path)
    silicon = force.getTypeIndex("Si")
    for i in range(n_atoms):
        force.addParticle(i, silicon)
    force.setUsesPeriodicBoundaryConditions(True)
    system.addForce(force)
    return system


def make_context(system, platform_name, temperature, seed):
    """A Langevin Context (friction 2/ps) on the named or the fastest platform (examples/run_md.py)."""
    return run_md.make_context(system, platform_name, temperature=temperature, friction=2.0, seed=seed)


def run(label, system, positions, args):
    """Equilibrate, then sample; returns frames (angstrom), mean E/atom (eV), mean T, speed, platform."""
    context, integrator = make_context(system, args.platform, args.temperature, args.seed)
    context.setPositions(positions * sw.ANGSTROM)
    # Twice the target: a crystal started at its lattice sites gives half its kinetic energy to the potential.
    context.setVelocitiesToTemperature(2 * args.temperature * unit.kelvin, args.seed)
    n = len(positions)
    platform = context.getPlatform().getName()
    equilibrate = args.steps // 4 if args.equilibrate is None else args.equilibrate
    integrator.step(equilibrate)
    frames, energies, temperatures = [], [], []
    kb = unit.MOLAR_GAS_CONSTANT_R.value_in_unit(unit.kilojoule_per_mole / unit.kelvin)
    every = max(1, min(args.sample_every, args.steps))
    start = time.perf_counter()
    done = 0
    while done < args.steps:
        chunk = min(every, args.steps - done)
        integrator.step(chunk)
        done += chunk
        state = context.getState(getPositions=True, getEnergy=True)
        frames.append(state.getPositions(asNumpy=True).value_in_unit(unit.nanometer) / sw.ANGSTROM)
        energies.append(state.getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole) / sw.EV / n)
        temperatures.append(2 * state.getKineticEnergy().value_in_unit(unit.kilojoule_per_mole) / ((3 * n - 3) * kb))
    elapsed = time.perf_counter() - start
    if not np.all(np.isfinite(energies)):
        raise SystemExit(f"{label}: the energy became non-finite")
    speed = args.steps / elapsed
    print(f"{label:<16} {platform:<10} {speed:10.1f} {speed * n:14.4g} {speed * 86.4e-3:9.3f} "
          f"{np.mean(energies):12.4f} {np.mean(temperatures):8.0f}", flush=True)
    return dict(frames=frames, energy=float(np.mean(energies)), temperature=float(np.mean(temperatures)),
                steps_per_s=speed, atom_steps_per_s=speed * n, platform=platform)


def _vectors(frame, edge, i, j):
    d = frame[j] - frame[i]
    return d - edge * np.round(d / edge)


def observables(frames, edge, r_max, dr=0.05, dtheta=2.0):
    """g(r) on bins of dr up to r_max, and P(theta) (per degree) of angles j-i-k with j, k within SHELL of i."""
    n = len(frames[0])
    edges_r = np.arange(0.0, r_max + 1e-9, dr)
    edges_t = np.arange(0.0, 180.0 + 1e-9, dtheta)
    counts_r = np.zeros(len(edges_r) - 1)
    counts_t = np.zeros(len(edges_t) - 1)
    rows = max(1, OBSERVABLE_BLOCK // n)  # atoms i a block: [rows, n, 3] arrays, not [n, n, 3] (24 GiB at 16^3 cells)
    coordination = []
    for frame in frames:
        frame = np.asarray(frame)
        neighbours = 0
        for first in range(0, n, rows):
            block = np.arange(first, min(n, first + rows))
            d = frame[None, :, :] - frame[block, None, :]
            d -= edge * np.round(d / edge)
            r = np.sqrt((d * d).sum(-1))
            counts_r += np.histogram(r[np.arange(n)[None, :] > block[:, None]], bins=edges_r)[0]  # pairs j > i
            near = (r < SHELL) & (r > 0)
            neighbours += near.sum()
            for row in range(len(block)):
                v = d[row, near[row]]
                if len(v) < 2:
                    continue
                u = v / np.linalg.norm(v, axis=1, keepdims=True)
                a, b = np.triu_indices(len(u), 1)
                cos = np.clip((u[a] * u[b]).sum(-1), -1.0, 1.0)
                counts_t += np.histogram(np.degrees(np.arccos(cos)), bins=edges_t)[0]
        coordination.append(neighbours / n)
    centres_r = 0.5 * (edges_r[1:] + edges_r[:-1])
    shell_volume = 4.0 / 3.0 * np.pi * (edges_r[1:] ** 3 - edges_r[:-1] ** 3)
    density = n / edge ** 3
    g = counts_r / (len(frames) * 0.5 * n * density * shell_volume)
    p = counts_t / max(counts_t.sum() * dtheta, 1e-300)
    return dict(r=centres_r, g=g, theta=0.5 * (edges_t[1:] + edges_t[:-1]), p=p, dr=dr, dtheta=dtheta,
                coordination=float(np.mean(coordination)))


def agreement(ml, ref):
    """Integrated absolute differences: of g(r) (angstrom, and relative to the integral of g_ref) and of P(theta)."""
    rdf = float(np.sum(np.abs(ml["g"] - ref["g"])) * ref["dr"])
    rdf_relative = rdf / float(np.sum(ref["g"]) * ref["dr"])
    adf = float(np.sum(np.abs(ml["p"] - ref["p"])) * ref["dtheta"])
    return dict(rdf_iad=rdf, rdf_iad_relative=rdf_relative, adf_iad=adf)


def plot(path, ml, ref, title):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return False
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    axes[0].plot(ref["r"], ref["g"], color="black", lw=2.0, label="Stillinger-Weber (reference)")
    axes[0].plot(ml["r"], ml["g"], color="tab:red", lw=1.2, ls="--", label="GraphForce (trained model)")
    axes[0].set_xlabel("r (angstrom)")
    axes[0].set_ylabel("g(r)")
    axes[0].set_title("radial distribution function")
    axes[0].legend()
    axes[1].plot(ref["theta"], ref["p"], color="black", lw=2.0, label="Stillinger-Weber (reference)")
    axes[1].plot(ml["theta"], ml["p"], color="tab:red", lw=1.2, ls="--", label="GraphForce (trained model)")
    axes[1].axvline(109.47, color="grey", lw=0.8, ls=":")
    axes[1].set_xlabel("Si-Si-Si angle (degrees)")
    axes[1].set_ylabel("P(theta) (1/degree)")
    axes[1].set_title(f"angle distribution, neighbours within {SHELL} angstrom")
    axes[1].legend()
    figure.suptitle(title)
    figure.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def plot_path(parser, path):
    """The plot file matplotlib will write, checked before the runs (their results were lost to a bad --plot): a
    format matplotlib writes (a name without a suffix gets .png, which matplotlib adds), in a folder that can be
    made."""
    from openmmgraph.modelfile import check_output_path

    if not os.path.splitext(path)[1]:
        path += ".png"
    try:
        import matplotlib
        from matplotlib.figure import Figure

        matplotlib.use("Agg")
        formats = Figure().canvas.get_supported_filetypes()
    except ImportError:
        formats = None  # plot() says so after the runs; nothing is written
    suffix = os.path.splitext(path)[1][1:].lower()
    if formats is not None and suffix not in formats:
        parser.error(f"--plot: matplotlib cannot write .{suffix} files; use one of {', '.join(sorted(formats))}")
    try:
        check_output_path(path, "--plot", create_folder=True)
    except ValueError as error:
        parser.error(str(error))
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help="model file (default: the bundled silicon model)")
    parser.add_argument("--cells", type=int, default=4, help="diamond cells per edge (8 atoms each)")
    parser.add_argument("--temperature", type=float, default=1500.0, help="kelvin")
    parser.add_argument("--steps", type=int, default=2000, help="sampled steps of each run (1 fs)")
    parser.add_argument("--equilibrate", type=int, default=None, help="steps before sampling (default steps/4)")
    parser.add_argument("--sample-every", type=int, default=20, help="steps between sampled frames")
    parser.add_argument("--platform", default=None, help="CUDA, CPU or Reference (default: the fastest that works)")
    parser.add_argument("--plot", default=os.path.join(HERE, "results", "observables.png"),
                        help="plot file ('' for none; default examples/silicon/results/, git-ignored)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    for name in ("cells", "steps", "sample_every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: expected an integer >= 1, found {getattr(args, name)}")
    if args.equilibrate is not None and args.equilibrate < 0:
        parser.error(f"--equilibrate: expected an integer >= 0, found {args.equilibrate}")
    if not (np.isfinite(args.temperature) and args.temperature >= 0):
        parser.error(f"--temperature: expected a finite number of kelvin >= 0, found {args.temperature}")
    run_md.check_seed(parser, args.seed)
    if args.platform is not None:
        run_md.check_platform(parser, args.platform)
    if args.plot:
        args.plot = plot_path(parser, args.plot)
    # A model that cannot be read or has no type Si is refused before either run (by OpenMM's message).
    openmmgraph.GraphForce(args.model).getTypeIndex("Si")

    positions, edge = sw.diamond(args.cells)
    n = len(positions)
    if edge < 2 * sw.CUTOFF / sw.ANGSTROM:
        parser.error("--cells: the box must be at least twice the cut-off (use 2 or more)")
    equilibrate = args.steps // 4 if args.equilibrate is None else args.equilibrate
    print(f"silicon demo: {n} atoms ({args.cells}x{args.cells}x{args.cells} diamond cells, a = {sw.LATTICE_A} angstrom), "
          f"{args.temperature:g} K, {equilibrate} + {args.steps} steps of 1 fs per run, model {os.path.basename(args.model)}")
    print(f"{'run':<16} {'platform':<10} {'steps/s':>10} {'atom-steps/s':>14} {'ns/day':>9} {'<E>/atom eV':>12} {'<T> K':>8}")
    ml = run("GraphForce", ml_system(args.model, n, edge), positions, args)
    ref = run("Stillinger-Weber", sw.sw_system(n, edge), positions, args)

    r_max = min(edge / 2, 8.0)
    obs_ml = observables(ml["frames"], edge, r_max)
    obs_ref = observables(ref["frames"], edge, r_max)
    score = agreement(obs_ml, obs_ref)
    peak_ml = obs_ml["r"][np.argmax(obs_ml["g"])]
    peak_ref = obs_ref["r"][np.argmax(obs_ref["g"])]
    print(f"observables over {len(ml['frames'])} frames each (g(r) to {r_max:.2f} angstrom, angles within {SHELL} angstrom):")
    print(f"  first g(r) peak: {peak_ml:.3f} (model) vs {peak_ref:.3f} angstrom (SW); height {obs_ml['g'].max():.2f} vs "
          f"{obs_ref['g'].max():.2f}; coordination {obs_ml['coordination']:.3f} vs {obs_ref['coordination']:.3f}")
    print(f"  g(r): integrated absolute difference {score['rdf_iad']:.4f} angstrom "
          f"({100 * score['rdf_iad_relative']:.2f}% of the integral of g)")
    print(f"  angle distribution: integrated absolute difference {score['adf_iad']:.4f} (0 = identical, 2 = disjoint)")
    print(f"  mean potential energy: {ml['energy']:.4f} (model) vs {ref['energy']:.4f} eV/atom (SW)")
    print(f"speed: GraphForce {ml['steps_per_s']:.1f} steps/s ({ml['atom_steps_per_s']:.3g} atom-steps/s, {ml['platform']}); "
          f"Stillinger-Weber {ref['steps_per_s']:.1f} steps/s ({ref['atom_steps_per_s']:.3g} atom-steps/s, {ref['platform']})")
    if args.plot:
        title = (f"Si, {n} atoms, {args.temperature:g} K: g(r) IAD {score['rdf_iad']:.3f} A, "
                 f"angle IAD {score['adf_iad']:.3f}")
        if plot(args.plot, obs_ml, obs_ref, title):
            print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(run_md.report_errors(main))
