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
GraphForce (a trivial force), for OpenMM's own step alone.  With
``--evaluations`` it times ``getState(getForces=True)`` calls instead of steps
(the benchmark's force time, docs/benchmarks.md), each one preceded by a
one-element PyTorch fill on the device that marks where it starts; the span
between two marks is then one evaluation with its host work (OpenMM's
download of the forces, the State), and the idle time is what the device
waited for the host.

    python bench/timeline.py --grade small --n 512 --steps 200
    python bench/timeline.py --grade medium --n 100800 --steps 10 --evaluations
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import tempfile


OPENMM_KERNELS = ("integrateVerlet", "clearBuffers", "clearTwoBuffers", "clearSixBuffers", "clearFourBuffers", "reduceForces",
                  "reduceEnergy", "computePerDof", "applyPositionDeltas", "findBlockBounds", "sortShortList", "computeCenterOfMass",
                  "removeCenterOfMass", "computeNonbonded", "findBlocks", "computeBondedForces", "computeExternalForce")


def is_openmm(name: str) -> bool:
    return any(name.startswith(k) or k in name for k in OPENMM_KERNELS)


GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
# The kernel of the one-element fill that --evaluations puts before each getState (PyTorch's elementwise kernels).
EVALUATION_MARKER = "void at::native::vectorized_elementwise_kernel"


def gpu_events(trace: dict) -> list:
    """The kernels, copies and memsets of a Chrome trace (PyTorch's profiler), by start time."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and e.get("cat") in GPU_CATEGORIES]
    return sorted(events, key=lambda e: float(e["ts"]))


def analyse(events: list, step_marker: str = "integrateVerletPart1") -> dict:
    """Per-step figures of a GPU timeline, in microseconds.

    A step starts at OpenMM's first integration kernel (step_marker); the
    first and the last (partial) steps are left out.  Per step: span (from
    one marker to the next), busy (the union of the activity intervals),
    idle = span - busy; per activity name: count, time and the gap before it
    (from the end of everything before it in the step, 0 when it overlaps).
    "graph" sums the activities that are not OpenMM's (is_openmm) nor the
    evaluation marker's, "openmm" OpenMM's.  Raises ValueError with fewer than
    three markers.
    """
    starts = [i for i, e in enumerate(events) if e["name"].startswith(step_marker)]
    if len(starts) < 3:
        raise ValueError(f"{len(starts)} step markers ({step_marker}) among {len(events)} GPU events: need at least 3")
    per_name = collections.defaultdict(lambda: [0, 0.0, 0.0])  # count, duration, gap before
    busy_total = span_total = 0.0
    steps = len(starts) - 2
    for s in range(1, len(starts) - 1):
        chunk = events[starts[s]:starts[s + 1]]
        t0 = float(chunk[0]["ts"])
        end = t0
        for e in chunk:
            ts, dur = float(e["ts"]), float(e["dur"])
            gap = max(0.0, ts - end)
            busy_total += max(0.0, ts + dur - max(ts, end))
            end = max(end, ts + dur)
            entry = per_name[e["name"][:90]]
            entry[0] += 1
            entry[1] += dur
            entry[2] += gap
        span_total += float(events[starts[s + 1]]["ts"]) - t0
    kernels = {name: {"count": c / steps, "us": d / steps, "gap_us": g / steps} for name, (c, d, g) in per_name.items()}

    def total(openmm: bool, key: str) -> float:
        return sum(v[key] for k, v in kernels.items() if is_openmm(k) == openmm and not k.startswith(EVALUATION_MARKER))

    return {"steps": steps, "span_us": span_total / steps, "busy_us": busy_total / steps, "idle_us": (span_total - busy_total) / steps,
            "graph_us": total(False, "us"), "graph_gap_us": total(False, "gap_us"), "openmm_us": total(True, "us"),
            "openmm_gap_us": total(True, "gap_us"), "kernels": kernels}


def report(label: str, wall_plain: float, wall: float, timeline) -> None:
    print(f"{label}: wall {1e3 * wall_plain:.4f} ms per step unprofiled, {1e3 * wall:.4f} ms profiled")
    if timeline is None:
        return
    t = timeline
    print(f"{t['steps']} steps: {t['span_us']:.1f} us per step on the GPU timeline, busy {t['busy_us']:.1f} us, idle {t['idle_us']:.1f} us")
    print(f"GraphForce: {t['graph_us']:.1f} us of kernels, {t['graph_gap_us']:.1f} us of gaps before them; "
          f"OpenMM: {t['openmm_us']:.1f} us of kernels, {t['openmm_gap_us']:.1f} us of gaps before them")
    print(f"{'per step':>8} {'us':>8} {'gap us':>8}  kernel")
    for name, k in sorted(t["kernels"].items(), key=lambda kv: -kv[1]["us"]):
        print(f"{k['count']:8.2f} {k['us']:8.2f} {k['gap_us']:8.2f}  {'[OpenMM] ' if is_openmm(name) else ''}{name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grade", default="small")
    parser.add_argument("--n", type=int, default=512)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--precision", default="mixed")
    parser.add_argument("--cuda-graph", default="auto", choices=("auto", "true", "false"))
    parser.add_argument("--property", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--floor", action="store_true", help="the same system without the GraphForce")
    parser.add_argument("--evaluations", action="store_true",
                        help="getState(getForces=True) calls instead of steps (--steps of them), each marked on the device")
    parser.add_argument("--trace", help="also write the Chrome trace here")
    parser.add_argument("--out", help="also write the figures here (JSON)")
    args = parser.parse_args()

    import time
    import torch
    from torch.profiler import ProfilerActivity, profile
    from standard_context import standard_context

    torch.cuda.init()
    try:
        context, integrator = standard_context(args.grade, args.n, args.precision, args.cuda_graph, args.property, floor=args.floor)
    except ValueError as error:
        parser.error(f"--property: {error}")
    marker = torch.zeros(1, device="cuda")

    def run(profiled: bool) -> float:
        """Seconds per step (or evaluation) of args.steps of them."""
        start = time.perf_counter()
        if args.evaluations:
            for k in range(args.steps):
                if profiled:
                    marker.fill_(k)
                context.getState(getForces=True)
        else:
            integrator.step(args.steps)
            context.getState(getEnergy=True)
        return (time.perf_counter() - start) / args.steps

    integrator.step(20)
    context.getState(getEnergy=True)
    run(False)
    wall_plain = run(False)
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        wall = run(True)
    path = args.trace or os.path.join(tempfile.mkdtemp(), "trace.json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        events = gpu_events(json.load(f))
    label = (f"{'floor' if args.floor else args.grade} n={args.n} {args.precision} CudaGraph={args.cuda_graph} {' '.join(args.property)}"
             + (" getState(getForces=True) evaluations" if args.evaluations else ""))
    timeline = None
    if not events:
        print("no GPU activity recorded (CUPTI unavailable?)")
    else:
        try:
            timeline = analyse(events, EVALUATION_MARKER if args.evaluations else "integrateVerletPart1")
        except ValueError as error:
            print(error)
    report(label, wall_plain, wall, timeline)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"label": label, "wall_s": wall_plain, "profiled_wall_s": wall, "timeline": timeline}, f, indent=1)


if __name__ == "__main__":
    main()
