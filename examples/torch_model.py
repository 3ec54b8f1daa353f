"""Bring your own model: the bundled silicon model exported as a TorchScript module with the graph
interface of docs/torch-models.md, run in OpenMM through LibTorch, next to the native GraphForce.

    python examples/torch_model.py [--platform CPU] [--cells 3] [--steps 100] [--out silicon.pt] [--aoti]

With --aoti the model is exported as an AOTInductor package (silicon.pt2, compiled for this CPU,
or for the GPU with --platform CUDA; its program returns the energies and their gradients) instead
of a TorchScript archive.  On the CUDA platform (double precision, to compare with the float64
export) the TorchScript module is exported with static shapes, so the plugin captures it into a
CUDA graph (docs/torch-models.md).

It exports examples/models/silicon-sw.safetensors with openmmgraph.torch_export, builds the same
silicon crystal twice (GraphForce("silicon.pt") and GraphForce("silicon-sw.safetensors")),
compares energies and forces, and runs a few MD steps with the TorchScript model.  Write your
own module with the same forward signature and metadata and GraphForce runs it the same way.
"""

import argparse
import os
import sys
import tempfile
import time

import numpy as np
import openmm
import openmm.unit as unit

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "silicon"))

import silicon_md  # noqa: E402  (examples/silicon)
import sw  # noqa: E402

from openmmgraph.torch_export import export_aoti, export_torchscript  # noqa: E402


def energy_and_forces(context):
    state = context.getState(getEnergy=True, getForces=True)
    return (state.getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole),
            state.getForces(asNumpy=True).value_in_unit(unit.kilojoule_per_mole / unit.nanometer))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platform", default="CPU", help="Reference, CPU or CUDA (the LibTorch kernels' platforms)")
    parser.add_argument("--cells", type=int, default=3, help="diamond cells per edge (8 atoms each)")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--out", default=None, help="where to write the exported model (default: a temporary folder)")
    parser.add_argument("--aoti", action="store_true", help="export an AOTInductor package (.pt2) instead of TorchScript")
    args = parser.parse_args(argv)
    silicon_md.run_md.check_platform(parser, args.platform)
    if args.cells < 2 or args.steps < 1:
        parser.error(f"expected --cells >= 2 (the box must hold twice the cut-off) and --steps >= 1, found "
                     f"{args.cells} and {args.steps}")
    if args.aoti and args.out and not args.out.endswith(".pt2"):
        parser.error(f"--out: an AOTInductor package must be named *.pt2, found {args.out!r}")
    native = os.path.join(HERE, "models", "silicon-sw.safetensors")
    kind = "AOTInductor" if args.aoti else "TorchScript"
    exported = args.out or os.path.join(tempfile.mkdtemp(), "silicon.pt2" if args.aoti else "silicon.pt")
    # export_torchscript and export_aoti refuse an output that is the bundled model itself, or a folder.
    cuda = args.platform == "CUDA"
    if args.aoti:
        metadata = export_aoti(native, exported, device="cuda" if cuda else "cpu")
    else:
        metadata = export_torchscript(native, exported, static_shapes=cuda)
    print(f"exported {native} -> {exported} ({os.path.getsize(exported):,} bytes; cut-off {metadata['cutoff']} "
          f"{metadata['length_unit']}, types {[t['name'] for t in metadata['types']]})")

    positions, edge = sw.diamond(args.cells)
    positions_nm = positions * sw.ANGSTROM
    results = {}
    for label, path in (("native", native), (kind, exported)):
        system = silicon_md.ml_system(path, len(positions), edge)
        properties = {"Precision": "double"} if cuda else {}
        context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName(args.platform), properties)
        context.setPositions(positions_nm + 0.01 * np.random.default_rng(0).standard_normal(positions_nm.shape))
        context.setVelocitiesToTemperature(1000, 1)
        results[label] = energy_and_forces(context)
        start = time.perf_counter()
        context.getIntegrator().step(args.steps)
        context.getState(getPositions=True)  # waits for the device
        speed = args.steps / (time.perf_counter() - start)
        print(f"{label:12s} energy {results[label][0]:14.6f} kJ/mol, {speed:8.1f} steps/s on {args.platform} ({len(positions)} atoms)")
    (e0, f0), (e1, f1) = results["native"], results[kind]
    print(f"{kind} vs native: energy {abs(e1 - e0) / abs(e0):.1e} relative, forces {np.abs(f1 - f0).max() / np.abs(f0).max():.1e} "
          "of the largest")
    return 0 if abs(e1 - e0) <= 1e-9 * abs(e0) and np.abs(f1 - f0).max() <= 1e-8 * np.abs(f0).max() else 1


if __name__ == "__main__":
    sys.exit(silicon_md.run_md.report_errors(main))
