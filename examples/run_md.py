"""Molecular dynamics with a GraphForce on the best platform present.

A second example (the README's main demo is examples/silicon/silicon_md.py).  It builds a periodic box of particles at liquid
density (100 particles/nm^3), gives them the bundled model (an untrained model
of the benchmark "small" grade with types O and H: its weights are random,
so the physics is not that of any real substance, but the cost per step is that
of a real model of this shape) plus a short-range classical repulsion, and runs
Langevin dynamics, reporting the energy and the speed.

    python examples/run_md.py [--particles 512] [--steps 500] [--platform CUDA]

Platform choice: the fastest platform on which a Context with the GraphForce
can be created (CUDA, then CPU, then Reference); --platform forces one.
"""

import argparse
import math
import os
import sys
import time

import numpy as np
import openmm
import openmm.app as app
import openmm.unit as unit

import openmmgraph
from openmmgraph.grades import lattice_system

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_MODEL = os.path.join(HERE, "models", "small-random.safetensors")
DENSITY = 100.0  # particles / nm^3 (liquid water's number density)
REPULSION_CUTOFF = 0.4  # nm, the classical repulsion's cut-off


def minimum_particles(cutoff):
    """The fewest particles whose periodic box at DENSITY is at least twice `cutoff` (nm) across: OpenMM and the
    GraphForce refuse a cut-off beyond half the box."""
    n = max(2, math.ceil(DENSITY * (2 * cutoff) ** 3))
    while (n / DENSITY) ** (1.0 / 3.0) < 2 * cutoff:  # the box's side as lattice_system computes it
        n += 1
    return n


def check_particles(parser, model_path, n_particles):
    """Refuse a particle count whose box the model's cut-off (or the repulsion's) does not fit, naming the fewest that
    fit, before any work (the GraphForce's own message came at the first evaluation and spoke of the box)."""
    cutoff = max(openmmgraph.GraphForce(model_path).getCutoff(), REPULSION_CUTOFF)
    needed = minimum_particles(cutoff)
    if n_particles < needed:
        parser.error(f"--particles: expected at least {needed}, found {n_particles}: at this example's density of "
                     f"{DENSITY:g} nm^-3 the periodic box must be at least twice the cut-off ({cutoff:g} nm) across")


def build_system(model_path, n_particles, seed):
    """A Topology, System and positions (nm) of n particles with the GraphForce and a repulsion."""
    force = openmmgraph.GraphForce(model_path)
    positions, types, box = lattice_system(n_particles, density=DENSITY, n_types=force.getNumTypes(), seed=seed)
    topology = app.Topology()
    chain = topology.addChain()
    for t in range(force.getNumTypes()):
        if force.getTypeAtomicNumber(t) == 0:
            raise SystemExit(f"{model_path}: type {t} ({force.getTypeName(t)!r}) has no atomic number; this example "
                             "builds its Topology by element (use a model whose types are elements)")
    for i in range(n_particles):
        residue = topology.addResidue("MOL", chain)
        element = app.Element.getByAtomicNumber(force.getTypeAtomicNumber(int(types[i])))
        topology.addAtom(element.symbol, element, residue)
    topology.setPeriodicBoxVectors([openmm.Vec3(*row) for row in box] * unit.nanometer)

    system = openmm.System()
    for atom in topology.atoms():
        system.addParticle(atom.element.mass)
    system.setDefaultPeriodicBoxVectors(*[openmm.Vec3(*row) for row in box])
    # The model, built from the Topology by element.
    system.addForce(openmmgraph.createGraphForce(topology, model_path))
    # A soft classical repulsion keeps particles apart (the random model has no repulsive core).
    repulsion = openmm.CustomNonbondedForce("epsilon*(sigma/r)^12; sigma=0.16; epsilon=2.0")
    repulsion.setNonbondedMethod(openmm.CustomNonbondedForce.CutoffPeriodic)
    repulsion.setCutoffDistance(REPULSION_CUTOFF)
    for _ in range(n_particles):
        repulsion.addParticle([])
    system.addForce(repulsion)
    return topology, system, positions


def make_context(system, platform_name, temperature=300.0, friction=1.0, seed=None,
                 make_integrator=None, properties=None):
    """A Context (Langevin, 1 fs, temperature in K, friction in 1/ps) on the
    named platform, or on the fastest one that can run the System.

    make_integrator: a function returning a fresh integrator to use instead of
    the Langevin one (bench/nve_drift.py: a VerletIntegrator); properties: the
    platform properties (e.g. {"Precision": "mixed"})."""
    names = [platform_name] if platform_name else ["CUDA", "CPU", "Reference"]
    errors = []
    for name in names:
        try:
            platform = openmm.Platform.getPlatformByName(name)
        except openmm.OpenMMException as error:
            errors.append(f"{name}: {error}")
            continue
        if make_integrator is not None:
            integrator = make_integrator()
        else:
            integrator = openmm.LangevinMiddleIntegrator(temperature * unit.kelvin, friction / unit.picosecond, 0.001 * unit.picoseconds)
            if seed is not None:
                integrator.setRandomNumberSeed(seed)
        try:
            if properties:
                return openmm.Context(system, integrator, platform, properties), integrator
            return openmm.Context(system, integrator, platform), integrator
        except openmm.OpenMMException as error:
            errors.append(f"{name}: {error}")
    raise SystemExit("no platform could run the System:\n  " + "\n  ".join(errors))


MAX_SEED = 2**31 - 1  # OpenMM's random number seeds are C ints


def check_seed(parser, seed):
    """Refuse a seed OpenMM cannot take (numpy refused negative ones, OpenMM ones beyond a C int, after the work)."""
    if not 0 <= seed <= MAX_SEED:
        parser.error(f"--seed: expected an integer in [0, {MAX_SEED}], found {seed}")


def platform_names():
    """The names of this OpenMM's platforms."""
    return [openmm.Platform.getPlatform(i).getName() for i in range(openmm.Platform.getNumPlatforms())]


def check_platform(parser, name):
    """Refuse a platform this OpenMM does not have (OpenMM's exception came after the work before it)."""
    names = platform_names()
    if name not in names:
        parser.error(f"--platform: {name!r} is not one of this OpenMM's platforms ({', '.join(names)})")


def report_errors(main, argv=None):
    """Run an example's main: a user's error that surfaces while it runs (a model file that cannot be read, a box
    the model does not fit, a platform that is not there, too little memory) ends it with one line and status 2,
    not a traceback."""
    try:
        return main(argv)
    except (openmm.OpenMMException, ValueError, OSError, MemoryError) as error:
        lines = str(error).strip().splitlines()
        sys.stderr.write(f"{os.path.basename(sys.argv[0])}: error: {lines[0] if lines else type(error).__name__}\n")
        return 2


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help="model file (default: the bundled small model)")
    parser.add_argument("--particles", type=int, default=512)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--platform", default=None, help="CUDA, CPU or Reference (default: the fastest that works)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if args.particles < 2 or args.steps < 1:
        parser.error(f"expected --particles >= 2 and --steps >= 1, found {args.particles} and {args.steps}")
    check_seed(parser, args.seed)
    check_particles(parser, args.model, args.particles)

    topology, system, positions = build_system(args.model, args.particles, args.seed)
    context, integrator = make_context(system, args.platform)
    context.setPositions(positions)
    openmm.LocalEnergyMinimizer.minimize(context, 10.0, 200)
    context.setVelocitiesToTemperature(300 * unit.kelvin, args.seed)
    platform = context.getPlatform().getName()
    print(f"openmm-graph demo: {args.particles} particles, model {os.path.basename(args.model)}, platform {platform}")
    print(f"{'step':>8} {'potential (kJ/mol)':>20} {'temperature (K)':>16}")
    dof = 3 * args.particles - 3
    report_every = max(1, args.steps // 5)
    start = time.perf_counter()
    done = 0
    while done < args.steps:
        chunk = min(report_every, args.steps - done)
        integrator.step(chunk)
        done += chunk
        state = context.getState(getEnergy=True)
        potential = state.getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole)
        kinetic = state.getKineticEnergy().value_in_unit(unit.kilojoule_per_mole)
        temperature = 2 * kinetic / (dof * unit.MOLAR_GAS_CONSTANT_R.value_in_unit(unit.kilojoule_per_mole / unit.kelvin))
        if not np.isfinite(potential):
            raise SystemExit(f"the energy became {potential} at step {done}")
        print(f"{done:>8} {potential:>20.3f} {temperature:>16.1f}")
    elapsed = time.perf_counter() - start
    steps_per_second = args.steps / elapsed
    ns_per_day = steps_per_second * 0.001 * 86400 / 1000
    print(f"speed: {steps_per_second:.1f} steps/s, {steps_per_second * args.particles:.3g} atom-steps/s, "
          f"{ns_per_day:.3f} ns/day at 1 fs ({platform} platform)")
    return 0


if __name__ == "__main__":
    sys.exit(report_errors(main))
