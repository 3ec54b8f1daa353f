"""The small System the DLPack conformance tests share (host: test_dlpack.py,
CUDA: test_dlpack_gpu.py), and its state read through Context.getState()."""

import numpy as np
import openmm
from openmm import unit

NUM_PARTICLES = 5
BOX = np.array([[2.0, 0.0, 0.0], [0.3, 2.1, 0.0], [-0.2, 0.4, 2.2]])
POSITIONS = np.array(
    [[0.10, 0.20, 0.30], [0.25, 0.21, 0.33], [1.00, 1.10, 0.90], [1.05, 1.20, 1.00], [0.50, 1.70, 1.60]]
)
VELOCITIES = np.array(
    [[0.1, -0.2, 0.3], [-0.4, 0.5, -0.6], [0.7, 0.8, -0.9], [1.0, -1.1, 1.2], [-0.3, 0.0, 0.25]]
)


def makeSystem():
    """NUM_PARTICLES particles of masses 1, 2, ... in the triclinic BOX, two harmonic bonds and a harmonic well."""
    system = openmm.System()
    for i in range(NUM_PARTICLES):
        system.addParticle(1.0 + i)
    system.setDefaultPeriodicBoxVectors(*(openmm.Vec3(*row) for row in BOX))
    bonds = openmm.HarmonicBondForce()
    bonds.addBond(0, 1, 0.1, 5000.0)
    bonds.addBond(2, 3, 0.12, 4000.0)
    system.addForce(bonds)
    external = openmm.CustomExternalForce("0.5*k*((x-1)^2 + 2*(y-1)^2 + 3*(z-1)^2)")
    external.addGlobalParameter("k", 100.0)
    for i in range(NUM_PARTICLES):
        external.addParticle(i, [])
    system.addForce(external)
    return system


def statePositions(context):
    return context.getState(getPositions=True).getPositions(asNumpy=True).value_in_unit(unit.nanometer)


def stateVelocities(context):
    return context.getState(getVelocities=True).getVelocities(asNumpy=True).value_in_unit(
        unit.nanometer / unit.picosecond
    )


def stateForces(context):
    return context.getState(getForces=True).getForces(asNumpy=True).value_in_unit(
        unit.kilojoule_per_mole / unit.nanometer
    )
