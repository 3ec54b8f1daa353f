"""Reference data for the silicon model: Stillinger-Weber MD with OpenMM itself.

64 silicon atoms (2x2x2 diamond cells), periodic, Langevin NVT at 1 fs on the
best OpenMM platform, at several temperatures and box strains (crystal near
1000 K, hot crystal / melting at 2000 K, liquid at 3000 K).  Frames
(positions, total energy, forces) are written as extended XYZ in eV and
angstrom, ready for `openmm-graph train`.

    python examples/silicon/generate_data.py [-o examples/silicon/data/sw-64.extxyz] [--frames 40]

Each condition: `--equilibrate` steps, then `--frames` frames every `--stride`
steps.  Defaults (10 conditions x 2500 steps, 300 frames) take about 2.5 minutes on a 2-core CPU.
"""

import argparse
import os
import sys
import time

import numpy as np
import openmm
import openmm.unit as unit
from ase import Atoms
from ase.calculators.singlepoint import SinglePointCalculator
import ase.io

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sw  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

# (temperature K, linear box scale relative to the 5.431 angstrom crystal)
CONDITIONS = [
    (300, 1.00), (1000, 1.00), (1000, 0.98), (1000, 1.02),
    (1500, 1.00), (2000, 1.00), (2000, 0.98),
    (3000, 1.00), (3000, 0.97), (3000, 1.02),
]


def run_condition(temperature, scale, frames, stride, equilibrate, seed, platform, cells=2):
    """Frames (list of ase.Atoms with energy and forces in eV, angstrom) of one NVT run."""
    positions, edge = sw.diamond(cells, sw.LATTICE_A * scale)
    system = sw.sw_system(len(positions), edge)
    integrator = openmm.LangevinMiddleIntegrator(temperature * unit.kelvin, 2.0 / unit.picosecond, 0.001 * unit.picosecond)
    integrator.setRandomNumberSeed(seed)
    context = openmm.Context(system, integrator, platform)
    context.setPositions(positions * sw.ANGSTROM)
    context.setVelocitiesToTemperature(temperature * unit.kelvin, seed)
    integrator.step(equilibrate)
    out = []
    for _ in range(frames):
        integrator.step(stride)
        state = context.getState(getPositions=True, enforcePeriodicBox=True)
        xyz = state.getPositions(asNumpy=True).value_in_unit(unit.nanometer) / sw.ANGSTROM
        energy, forces = sw.energy_forces(context)
        atoms = Atoms("Si" * len(xyz), positions=xyz, cell=np.eye(3) * edge, pbc=True)
        atoms.calc = SinglePointCalculator(atoms, energy=energy, forces=forces)
        atoms.info["temperature"] = temperature
        atoms.info["box_scale"] = scale
        out.append(atoms)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", default=os.path.join(HERE, "data", "sw-64.extxyz"))
    parser.add_argument("--frames", type=int, default=30, help="frames per condition")
    parser.add_argument("--stride", type=int, default=50, help="steps between frames (1 fs each)")
    parser.add_argument("--equilibrate", type=int, default=1000, help="steps before the first frame")
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--platform", default=None)
    args = parser.parse_args(argv)

    platform = sw.best_platform([args.platform] if args.platform else ("CUDA", "CPU", "Reference"))
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    start = time.perf_counter()
    frames = []
    for index, (temperature, scale) in enumerate(CONDITIONS):
        part = run_condition(temperature, scale, args.frames, args.stride, args.equilibrate, args.seed + index, platform)
        energies = np.array([a.get_potential_energy() / len(a) for a in part])
        print(f"T = {temperature:5d} K, box x{scale:.2f}: {len(part)} frames, E/atom {energies.mean():.4f} "
              f"+- {energies.std():.4f} eV", flush=True)
        frames.extend(part)
    ase.io.write(args.output, frames, format="extxyz")
    print(f"wrote {len(frames)} frames of {len(frames[0])} atoms to {args.output} "
          f"({time.perf_counter() - start:.0f} s, {platform.getName()} platform)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
