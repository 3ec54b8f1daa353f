#!/usr/bin/env python
"""Verlet steps, resident evaluations and getState evaluations of one standard case, interleaved in short blocks, with
the GPU's SM clock and power read between blocks (nvidia-smi): whether the benchmark's step time of a large case is
lower than its evaluation time for the code's sake or for the clock's (bench/NOTES.md v37).

    python bench/step_vs_resident.py --grade medium --n 100800 --rounds 6 --steps 100 --evaluations 20 [--long-steps 1000] [--edges]

Each round times `--steps` steps, `--evaluations` resident evaluations (run_benchmarks.time_resident_force's
integrator) and as many getState(getForces=True) calls; `--long-steps` then times one block as long as the standard
benchmark's step timing, sampling the clock during it. Prints one line a block (ms per step or evaluation, clock MHz,
power W) and writes them as JSON to --out.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def load_bench():
    spec = importlib.util.spec_from_file_location("run_benchmarks", os.path.join(HERE, "run_benchmarks.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gpu_sample(bench) -> dict:
    """The first GPU's SM clock (MHz), power (W) and temperature (C) from nvidia-smi (run_benchmarks.nvidia_smi_query);
    empty without nvidia-smi (the timings still count)."""
    values = bench.nvidia_smi_query(0, "clocks.sm,power.draw,temperature.gpu")
    try:
        clock, power, temperature = (float(x) for x in values[:3])
    except (TypeError, ValueError):
        return {}
    return {"sm_mhz": clock, "power_w": power, "temperature_c": temperature}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--grade", default="medium")
    parser.add_argument("--n", type=int, default=100800)
    parser.add_argument("--platform", default="CUDA")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--evaluations", type=int, default=20)
    parser.add_argument("--long-steps", type=int, default=1000)
    parser.add_argument("--edges", action="store_true",
                        help="also count the ordered pairs within the cut-off after each block (run_benchmarks.count_edges of "
                             "final_positions_nm, in PyTorch, on the GPU when there is one): whether the rows grow along "
                             "the trajectory")
    parser.add_argument("--out", default="step_vs_resident.json")
    args = parser.parse_args()
    if min(args.rounds, args.steps, args.evaluations) < 1 or args.long_steps < 0:
        raise SystemExit("--rounds, --steps and --evaluations must be >= 1, --long-steps >= 0")

    bench = load_bench()
    import tempfile

    from openmmgraph.grades import lattice_system, make_model

    model = make_model(grade=args.grade, seed=0)
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, f"{args.grade}.safetensors")
        model.write(path)
        positions, types, box = lattice_system(args.n, n_types=len(model.type_names), seed=0)
        system = bench.make_openmm_system(args.n, box, False, path, types)
        properties = {"Precision": "mixed"} if args.platform == "CUDA" else {}
        context, integrator = bench.make_context(system, positions, args.platform, properties, bench.GRAPH_FORCE_GROUP)
    groups = {bench.GRAPH_FORCE_GROUP}
    records = []

    def count_edges() -> int | None:
        if not args.edges:
            return None
        import numpy as np
        import torch

        from openmmgraph.grades import DEFAULT_CUTOFF_NM

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return bench.count_edges(bench.final_positions_nm(context), np.asarray(box, dtype=np.float64), DEFAULT_CUTOFF_NM,
                                 torch, device)

    def block(kind: str, count: int):
        before = gpu_sample(bench)
        start = time.perf_counter()
        if kind == "step":
            integrator.step(count)
            context.getState(getPositions=True)
        elif kind == "resident":
            integrator.setCurrentIntegrator(1)
            integrator.step(count)
            integrator.setCurrentIntegrator(0)
            context.getState(getPositions=True)
        else:
            for _ in range(count):
                context.getState(getForces=True, groups=groups)
        ms = (time.perf_counter() - start) / count * 1e3
        record = {"kind": kind, "count": count, "ms": ms, "before": before, "after": gpu_sample(bench), "edges_after": count_edges()}
        records.append(record)
        print(f"{kind:>9} x{count:<5} {ms:8.4f} ms   clock {before.get('sm_mhz')} -> {record['after'].get('sm_mhz')} MHz, "
              f"power {before.get('power_w')} -> {record['after'].get('power_w')} W"
              + (f", edges after {record['edges_after']:,}" if args.edges else ""), flush=True)

    for kind in ("step", "resident", "getstate"):  # warm-up: kernels, graphs
        block(kind, 3)
    records.clear()
    for _ in range(args.rounds):
        block("step", args.steps)
        block("resident", args.evaluations)
        block("getstate", args.evaluations)
    if args.long_steps:
        samples, stop = [], threading.Event()

        def sample():
            while not stop.wait(1.0):
                samples.append(gpu_sample(bench))

        sampler = threading.Thread(target=sample)
        sampler.start()
        block("step", args.long_steps)
        stop.set()
        sampler.join()
        records[-1]["during"] = samples
        print("  during:", ", ".join(f"{s.get('sm_mhz')} MHz/{s.get('power_w')} W" for s in samples))
        block("resident", args.evaluations)
    with open(args.out, "w") as handle:
        json.dump({"grade": args.grade, "n": args.n, "records": records}, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
