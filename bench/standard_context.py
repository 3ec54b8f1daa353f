"""The standard benchmark system of one grade and size in an OpenMM Context.

Shared by bench/profile_kernels.py, bench/timeline.py and bench/accuracy.py: the grade's model
(``openmmgraph.grades.make_model(grade, seed=0)``) in a GraphForce on the
standard lattice system of docs/benchmarks.md (``lattice_system(n, seed=0)``,
periodic, mass 28), a 1 fs VerletIntegrator, on the CUDA platform.
"""

from __future__ import annotations

import os
import tempfile


def standard_system(force, n: int):
    """(system, positions): the standard lattice system of n particles with `force` (a GraphForce, its particles added here)."""
    import openmm
    from openmmgraph.grades import lattice_system

    positions, types, box = lattice_system(n, n_types=force.getNumTypes(), seed=0)
    system = openmm.System()
    for i in range(n):
        system.addParticle(16.0)  # run_benchmarks.MASS_AMU: the same trajectories as the benchmark's
        force.addParticle(i, int(types[i]))
    force.setUsesPeriodicBoundaryConditions(True)
    system.setDefaultPeriodicBoxVectors(*[openmm.Vec3(*map(float, row)) for row in box])
    return system, positions


def key_values(settings, what: str) -> dict:
    """{KEY: VALUE} of "KEY=VALUE" strings (ValueError naming `what` when one has no "=")."""
    values = {}
    for setting in settings:
        key, separator, value = setting.partition("=")
        if not separator or not key:
            raise ValueError(f"{what} {setting!r}: expected KEY=VALUE")
        values[key] = value
    return values


def standard_context(grade: str, n: int, precision: str = "mixed", cuda_graph: str = "auto", properties=(),
                     device_index: str = "0", floor: bool = False, platform_properties=()):
    """(context, integrator) of the standard system.

    properties: "KEY=VALUE" strings, more GraphForce properties (ValueError when
    one has no "="); floor: the same System with a trivial force in place of the
    GraphForce (OpenMM's own step alone); platform_properties: "KEY=VALUE"
    strings, more CUDA platform properties (e.g. UseBlockingSync=false).
    """
    import openmm
    import openmmgraph
    from openmmgraph.grades import make_model

    model = make_model(grade=grade, seed=0)
    path = os.path.join(tempfile.mkdtemp(), f"{grade}.safetensors")
    model.write(path)
    force = openmmgraph.GraphForce(path)
    force.setProperty("CudaGraph", cuda_graph)
    for key, value in key_values(properties, "property").items():
        force.setProperty(key, value)
    context_properties = {"Precision": precision, "DeviceIndex": device_index}
    context_properties.update(key_values(platform_properties, "platform property"))
    system, positions = standard_system(force, n)
    system.addForce(openmm.CustomExternalForce("0") if floor else force)
    integrator = openmm.VerletIntegrator(0.001)
    platform = openmm.Platform.getPlatformByName("CUDA")
    context = openmm.Context(system, integrator, platform, context_properties)
    context.setPositions(positions)
    return context, integrator
