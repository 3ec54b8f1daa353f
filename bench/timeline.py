"""Where the time of an OpenMM step goes on the GPU: a kernel timeline.

Runs Verlet steps of the standard benchmark system (docs/benchmarks.md) of one
grade and size on the CUDA platform under PyTorch's profiler, which records
every kernel, copy and memset of the process through CUPTI (OpenMM's context
included), and reports per step:

- the GPU's busy time (union of kernel, copy and memset intervals) and its
  idle time, i.e. how long the GPU waits for the host;
- the GraphForce's kernels (everything that is not one of OpenMM's) and
  OpenMM's own, each with its mean in-situ duration and the mean gap before it.

Unlike Nsight Compute (which serialises and replays kernels), this is the
timeline of the real run.  With ``--floor`` the same system runs without the
GraphForce (a trivial force), for OpenMM's own step alone.

    python bench/timeline.py --grade small --n 512 --steps 200
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import tempfile

from standard_context import standard_context


OPENMM_KERNELS = ("integrateVerlet", "clearBuffers", "clearTwoBuffers", "clearSixBuffers", "clearFourBuffers", "reduceForces",
                  "reduceEnergy", "computePerDof", "applyPositionDeltas", "findBlockBounds", "sortShortList", "computeCenterOfMass",
                  "removeCenterOfMass", "computeNonbonded", "findBlocks", "computeBondedForces", "computeExternalForce")


def is_openmm(name: str) -> bool:
    return any(name.startswith(k) or k in name for k in OPENMM_KERNELS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grade", default="small")
    parser.add_argument("--n", type=int, default=512)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--precision", default="mixed")
    parser.add_argument("--cuda-graph", default="auto", choices=("auto", "true", "false"))
    parser.add_argument("--property", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--floor", action="store_true", help="the same system without the GraphForce")
    parser.add_argument("--trace", help="also write the Chrome trace here")
    args = parser.parse_args()

    import time
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.init()
    context, integrator = standard_context(args.grade, args.n, args.precision, args.cuda_graph, args.property, floor=args.floor)
    integrator.step(20)
    context.getState(getEnergy=True)
    start = time.perf_counter()
    integrator.step(args.steps)
    context.getState(getEnergy=True)
    wall_plain = (time.perf_counter() - start) / args.steps
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        integrator.step(args.steps)
        context.getState(getEnergy=True)
        wall = (time.perf_counter() - start) / args.steps
    path = args.trace or os.path.join(tempfile.mkdtemp(), "trace.json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        trace = json.load(f)
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    events.sort(key=lambda e: float(e["ts"]))
    label = f"{'floor' if args.floor else args.grade} n={args.n} {args.precision} CudaGraph={args.cuda_graph} {' '.join(args.property)}"
    print(f"{label}: wall {1e3 * wall_plain:.4f} ms per step unprofiled, {1e3 * wall:.4f} ms profiled")
    if not events:
        print("no GPU activity recorded (CUPTI unavailable?)")
        return
    # Steps start at OpenMM's first integration kernel.
    starts = [i for i, e in enumerate(events) if e["name"].startswith("integrateVerletPart1")]
    if len(starts) < 3:
        print(f"only {len(starts)} step markers among {len(events)} events")
        return
    per_name = collections.defaultdict(lambda: [0, 0.0, 0.0])  # count, duration, gap before
    busy_total = span_total = 0.0
    steps = 0
    for s in range(1, len(starts) - 1):  # whole steps only, skip the first
        chunk = events[starts[s]:starts[s + 1]]
        t0 = float(chunk[0]["ts"])
        t1 = float(events[starts[s + 1]]["ts"])
        busy = 0.0
        end = t0
        for e in chunk:
            ts, dur = float(e["ts"]), float(e["dur"])
            gap = max(0.0, ts - end)
            busy += max(0.0, ts + dur - max(ts, end))
            end = max(end, ts + dur)
            entry = per_name[e["name"][:90]]
            entry[0] += 1
            entry[1] += dur
            entry[2] += gap
        busy_total += busy
        span_total += t1 - t0
        steps += 1
    print(f"{steps} steps: {span_total / steps:.1f} us per step on the GPU timeline, busy {busy_total / steps:.1f} us, "
          f"idle {(span_total - busy_total) / steps:.1f} us")
    graph_busy = sum(v[1] for k, v in per_name.items() if not is_openmm(k)) / steps
    graph_gaps = sum(v[2] for k, v in per_name.items() if not is_openmm(k)) / steps
    print(f"GraphForce: {graph_busy:.1f} us of kernels, {graph_gaps:.1f} us of gaps before them; "
          f"OpenMM: {sum(v[1] for k, v in per_name.items() if is_openmm(k)) / steps:.1f} us of kernels, "
          f"{sum(v[2] for k, v in per_name.items() if is_openmm(k)) / steps:.1f} us of gaps before them")
    print(f"{'per step':>8} {'us':>8} {'gap us':>8}  kernel")
    for name, (count, dur, gap) in sorted(per_name.items(), key=lambda kv: -kv[1][1]):
        print(f"{count / steps:8.2f} {dur / steps:8.2f} {gap / steps:8.2f}  {'' if not is_openmm(name) else '[OpenMM] '}{name}")


if __name__ == "__main__":
    main()
