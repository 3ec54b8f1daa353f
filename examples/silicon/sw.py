"""Stillinger-Weber silicon as ordinary OpenMM forces, and small helpers.

Stillinger and Weber, Phys. Rev. B 31, 5262 (1985), with the standard silicon
parameters:

    E = sum_{i<j} phi2(r_ij) + sum_i sum_{j<k} phi3(r_ij, r_ik, theta_jik)
    phi2(r) = A eps (B (sigma/r)^p - (sigma/r)^q) exp(sigma / (r - a sigma))
    phi3 = lambda eps (cos theta + 1/3)^2 exp(gamma sigma / (r_ij - a sigma)) exp(gamma sigma / (r_ik - a sigma))

both zero beyond the cut-off a sigma.  The two-body term is a CustomNonbondedForce,
the three-body term a CustomManyParticleForce in UniqueCentralParticle mode (p1
is the central atom; every pair of neighbours within the cut-off of p1 counts
once).  exp(c / min(r - a sigma, -1e-9)) is exactly 0 (value and derivatives)
at and beyond the cut-off, so nothing is NaN there.

OpenMM units: nm, kJ/mol.  Frames are written in eV and angstrom.
"""

import numpy as np
import openmm
import openmm.unit as unit

EV = 96.48533212331  # kJ/mol per eV
ANGSTROM = 0.1  # nm

# Standard SW silicon parameters (eV, angstrom).
EPSILON_EV = 2.1683
SIGMA_A = 2.0951
A_CUT = 1.8
LAMBDA = 21.0
GAMMA = 1.2
A_2B = 7.049556277
B_2B = 0.6022245584
P_EXP = 4
Q_EXP = 0
LATTICE_A = 5.431  # diamond lattice constant, angstrom
COHESIVE_EV = -4.3366  # eV/atom at LATTICE_A
MASS_SI = 28.0855  # dalton

EPSILON = EPSILON_EV * EV  # kJ/mol
SIGMA = SIGMA_A * ANGSTROM  # nm
CUTOFF = A_CUT * SIGMA  # nm (0.377118)


def sw_forces(n_atoms, periodic=True):
    """The two forces of SW silicon for n_atoms atoms (all silicon)."""
    method2 = openmm.CustomNonbondedForce.CutoffPeriodic if periodic else openmm.CustomNonbondedForce.CutoffNonPeriodic
    method3 = (openmm.CustomManyParticleForce.CutoffPeriodic if periodic
               else openmm.CustomManyParticleForce.CutoffNonPeriodic)
    two = openmm.CustomNonbondedForce(
        f"{A_2B}*{EPSILON}*({B_2B}*({SIGMA}/r)^{P_EXP} - ({SIGMA}/r)^{Q_EXP})"
        f"*exp({SIGMA}/min(r - {CUTOFF}, -1e-9))")
    two.setNonbondedMethod(method2)
    two.setCutoffDistance(CUTOFF)
    two.setUseLongRangeCorrection(False)
    three = openmm.CustomManyParticleForce(
        3,
        f"{LAMBDA}*{EPSILON}*(cos(theta) + 1/3)^2"
        f"*exp({GAMMA * SIGMA}/min(r12 - {CUTOFF}, -1e-9))*exp({GAMMA * SIGMA}/min(r13 - {CUTOFF}, -1e-9));"
        "r12 = distance(p1, p2); r13 = distance(p1, p3); theta = angle(p2, p1, p3)")
    three.setPermutationMode(openmm.CustomManyParticleForce.UniqueCentralParticle)
    three.setNonbondedMethod(method3)
    three.setCutoffDistance(CUTOFF)
    for _ in range(n_atoms):
        two.addParticle([])
        three.addParticle([])
    return two, three


def diamond(cells, lattice_a=LATTICE_A):
    """Positions (angstrom) of a cells x cells x cells diamond crystal and its cubic box edge (angstrom)."""
    basis = np.array([[0, 0, 0], [0, 0.5, 0.5], [0.5, 0, 0.5], [0.5, 0.5, 0],
                      [0.25, 0.25, 0.25], [0.25, 0.75, 0.75], [0.75, 0.25, 0.75], [0.75, 0.75, 0.25]])
    grid = np.array([[i, j, k] for i in range(cells) for j in range(cells) for k in range(cells)], dtype=float)
    positions = (grid[:, None, :] + basis[None, :, :]).reshape(-1, 3) * lattice_a
    return positions, cells * lattice_a


def jittered_diamond(cells=4, jitter_angstrom=0.08, seed=5, lattice_a=LATTICE_A):
    """diamond(cells) with each coordinate moved by a normal jitter of jitter_angstrom (numpy seed `seed`; 0.08 A is
    about 600 K's amplitude): the accuracy checks' configuration of the bundled model (bench/accuracy.py --grades
    silicon, bench/table_rounding.py, the CUDA silicon test).  Positions and box edge in angstrom."""
    positions, edge = diamond(cells, lattice_a)
    return positions + np.random.default_rng(seed).normal(0.0, jitter_angstrom, positions.shape), edge


def sw_system(n_atoms, box_angstrom):
    """An OpenMM System of n_atoms silicon atoms with the SW forces in a periodic box (3x3 angstrom rows or edge)."""
    box = np.diag([box_angstrom] * 3) if np.isscalar(box_angstrom) else np.asarray(box_angstrom, dtype=float)
    system = openmm.System()
    for _ in range(n_atoms):
        system.addParticle(MASS_SI)
    system.setDefaultPeriodicBoxVectors(*[openmm.Vec3(*(row * ANGSTROM)) for row in box])
    for force in sw_forces(n_atoms):
        system.addForce(force)
    return system


def energy_forces(context):
    """Potential energy (eV) and forces (eV/angstrom) of a Context."""
    state = context.getState(getEnergy=True, getForces=True)
    energy = state.getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole) / EV
    forces = state.getForces(asNumpy=True).value_in_unit(unit.kilojoule_per_mole / unit.nanometer) * ANGSTROM / EV
    return energy, np.asarray(forces)


def best_platform(names=("CUDA", "CPU", "Reference")):
    for name in names:
        try:
            return openmm.Platform.getPlatformByName(name)
        except openmm.OpenMMException:
            continue
    raise RuntimeError("no OpenMM platform")
