#!/usr/bin/env python3
"""Energies and forces of one CUDA plugin build, and their bitwise comparison across builds.

An A/B of plugin builds (bench/device/plugin-ab.sh) times them; this checks that a change meant to keep every bit
(a kernel fused, a loop reordered) does: each build evaluates the same cases, and the builds' results must be equal
bit for bit.  It needs no test build on the device, so it fits a call that has no room for `ctest`; it does not
replace `ctest` (bench/README.md).

    python bench/ab_forces.py --out forces-NAME.npz          # the installed build's results
    python bench/ab_forces.py --compare forces-*.npz         # exit status 1 unless all are bitwise equal

Cases: the standard systems (docs/benchmarks.md) of --cases (grade:n[:KEY=VALUE,...], GraphForce properties after
the size) in each of --precisions on the CUDA platform (--platform: another, in its default precision, e.g. for the
CPU test of this script), two evaluations each (the second checks repeatability).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

DEFAULT_CASES = (
    "medium:10296 small:512 small:512:CudaFusedNetwork=false large:512 medium:10296:CudaChunkRows=4096 "
    "small:10296"
)


def parse_case(text: str):
    """(grade, n, {property: value}) of grade:n[:KEY=VALUE,...]; a clear error otherwise."""
    parts = text.split(":", 2)
    if len(parts) < 2 or not parts[1].isdigit() or int(parts[1]) < 2:
        raise SystemExit(f"--cases: expected grade:n[:KEY=VALUE,...] with n >= 2, got {text!r}")
    properties = {}
    if len(parts) == 3:
        for pair in parts[2].split(","):
            key, equals, value = pair.partition("=")
            if not equals or not key:
                raise SystemExit(f"--cases: {text!r}: expected KEY=VALUE, got {pair!r}")
            properties[key] = value
    return parts[0], int(parts[1]), properties


def record(cases: list[str], precisions: list[str], out: str, platform: str = "CUDA") -> None:
    import openmm
    from openmmgraph.grades import lattice_system, make_model

    from run_benchmarks import GRAPH_FORCE_GROUP, make_context, make_openmm_system

    if platform != "CUDA":
        precisions = ["default"]

    results = {}
    with tempfile.TemporaryDirectory() as temp:
        models = {}
        for text in cases:
            grade, n, properties = parse_case(text)
            if grade not in models:
                model = make_model(grade=grade, seed=0)
                path = os.path.join(temp, f"{grade}.safetensors")
                model.write(path)
                models[grade] = (model, path)
            model, path = models[grade]
            positions, types, box = lattice_system(n, n_types=model.n_types, seed=0)
            for precision in precisions:
                system = make_openmm_system(n, box, False, path, types, properties)
                context, integrator = make_context(system, positions, platform, {"Precision": precision} if platform == "CUDA" else {})
                evaluations = []
                for _ in range(2):
                    state = context.getState(getEnergy=True, getForces=True, groups={GRAPH_FORCE_GROUP})
                    forces = np.asarray(state.getForces(asNumpy=True).value_in_unit(openmm.unit.kilojoule_per_mole / openmm.unit.nanometer))
                    energy = state.getPotentialEnergy().value_in_unit(openmm.unit.kilojoule_per_mole)
                    evaluations.append((energy, forces))
                if evaluations[0][0] != evaluations[1][0] or not np.array_equal(evaluations[0][1], evaluations[1][1]):
                    raise SystemExit(f"{text} {precision}: two evaluations of the same positions differ")
                key = f"{text}|{precision}"
                results[key + "|energy"] = np.array([evaluations[0][0]])
                results[key + "|forces"] = evaluations[0][1]
                print(f"{key}: energy {evaluations[0][0]:.10g} kJ/mol, |F| max {np.abs(evaluations[0][1]).max():.6g}", flush=True)
                del context, integrator, system
    np.savez(out, **results)
    print(f"results: {out}")


def compare(paths: list[str]) -> int:
    if len(paths) < 2:
        raise SystemExit("--compare needs two or more result files")
    loaded = [(path, np.load(path)) for path in paths]
    first_path, first = loaded[0]
    status = 0
    for path, other in loaded[1:]:
        if set(first.files) != set(other.files):
            print(f"{path}: different cases from {first_path}")
            status = 1
            continue
        for key in sorted(first.files):
            a, b = first[key], other[key]
            same = a.shape == b.shape and np.array_equal(a.view(np.uint64), b.view(np.uint64))
            difference = float(np.abs(a - b).max()) if a.shape == b.shape else float("nan")
            print(f"{'same' if same else 'DIFFERENT'}  {key}  ({os.path.basename(first_path)} vs {os.path.basename(path)}, "
                  f"max |difference| {difference:.3g})")
            status |= 0 if same else 1
    print("all bitwise equal" if status == 0 else "some results differ")
    return status


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="write the installed build's results to this .npz file")
    parser.add_argument("--compare", nargs="+", metavar="NPZ", help="compare the results of two or more builds bitwise")
    parser.add_argument("--cases", default=DEFAULT_CASES, help=f"space-separated grade:n[:KEY=VALUE,...] (default: {DEFAULT_CASES})")
    parser.add_argument("--precisions", default="mixed,single,double")
    parser.add_argument("--platform", default="CUDA")
    args = parser.parse_args()
    if bool(args.out) == bool(args.compare):
        parser.error("give either --out or --compare")
    if args.compare:
        return compare(args.compare)
    record(args.cases.split(), [p for p in args.precisions.split(",") if p], args.out, args.platform)
    return 0


if __name__ == "__main__":
    sys.exit(main())
