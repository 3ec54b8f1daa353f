"""Read and change what OpenMM holds, without copies, from NumPy and PyTorch.

    python examples/dlpack_views.py [--platform CUDA|CPU|Reference]

A periodic box of particles with the bundled GraphForce model and a soft
repulsion.  The script
  1. takes the forces of the current state through DLPack (zero copy) and
     checks them against State.getForces(),
  2. reads the positions as a PyTorch tensor on the Context's device,
  3. moves one particle by writing into the positions view (on host platforms;
     on CUDA it writes the x of posq, OpenMM's own array) and shows that the
     Context sees the move.
The Julia version of the same task is examples/julia_forces.jl.
"""

import argparse
import os
import sys

import numpy as np
import openmm
import openmm.unit as unit
import torch

from openmmgraph import dlpack

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_md import DEFAULT_MODEL, build_system, check_particles, check_platform, platform_names, report_errors  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platform", default=None, help="CUDA, CPU or Reference (default: CUDA if available, else CPU)")
    parser.add_argument("--particles", type=int, default=512)
    args = parser.parse_args(argv)
    platform_name = args.platform or ("CUDA" if "CUDA" in platform_names() else "CPU")
    check_platform(parser, platform_name)
    if args.particles < 2:
        parser.error(f"--particles: expected an integer >= 2, found {args.particles}")
    check_particles(parser, DEFAULT_MODEL, args.particles)

    _, system, positions = build_system(DEFAULT_MODEL, args.particles, seed=1)
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName(platform_name))
    context.setPositions(positions)

    # 1. Forces through DLPack, in System order and kJ/mol/nm, against OpenMM's own.
    state = context.getState(getForces=True, getPositions=True)
    expected = state.getForces(asNumpy=True).value_in_unit(unit.kilojoule_per_mole / unit.nanometer)
    forces = np.asarray(dlpack.forces(context))
    error = np.max(np.abs(forces - expected)) / np.max(np.abs(expected))
    print(f"{platform_name}: forces through DLPack match State.getForces() to {error:.1e} (relative to the largest force)")
    assert error < 1e-6, error

    # 2. The raw view in PyTorch, on the Context's device, without a copy.
    view = dlpack.views(context)
    raw = torch.from_dlpack(view.positions)
    print(f"positions view: {tuple(raw.shape)} {raw.dtype} on {raw.device} (OpenMM's own memory)")

    # 3. Move particle 0 by +0.01 nm in x through the view; the Context sees it.
    order = torch.from_dlpack(view.atom_order).cpu().numpy()  # sorted slot -> System index
    slot = int(np.nonzero(order == 0)[0][0])
    raw[slot, 0] += 0.01
    moved = context.getState(getPositions=True).getPositions(asNumpy=True).value_in_unit(unit.nanometer)
    shift = moved[0, 0] - np.asarray(state.getPositions(asNumpy=True).value_in_unit(unit.nanometer))[0, 0]
    print(f"particle 0 moved by {shift:.4f} nm in x through the view")
    assert abs(shift - 0.01) < 1e-5, shift
    return 0


if __name__ == "__main__":
    sys.exit(report_errors(main))
