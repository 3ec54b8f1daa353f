"""Per-kernel times of GraphForce evaluations, for use under Nsight Compute.

Builds the standard benchmark system of one grade and size (docs/benchmarks.md)
on the CUDA platform, warms up, then brackets ``--evaluations`` force
evaluations with cudaProfilerStart/Stop so that

    ncu --clock-control none --profile-from-start off \
        --metrics gpu__time_duration.sum --csv python bench/profile_kernels.py ...

reports the duration of every kernel of those evaluations only.  Without ncu
it prints the mean wall time of one evaluation.  Kernel times under ncu are
of serialised kernels; they show where the time goes, not the step time.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grade", default="small")
    parser.add_argument("--n", type=int, default=512)
    parser.add_argument("--evaluations", type=int, default=2)
    parser.add_argument("--precision", default="mixed")
    parser.add_argument("--steps", type=int, default=0, help="also time this many Verlet steps (outside the profiled range)")
    parser.add_argument("--cuda-graph", default="auto", choices=("auto", "true", "false"), help="the GraphForce's CudaGraph property")
    parser.add_argument("--device-index", default="0", help='OpenMM\'s DeviceIndex, e.g. "0,1" for two GPUs in one Context')
    parser.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                        help="another GraphForce property, e.g. CudaChunkRows=4096 (repeatable)")
    parser.add_argument("--platform-property", action="append", default=[], metavar="KEY=VALUE",
                        help="a CUDA platform property, e.g. UseBlockingSync=false (repeatable)")
    parser.add_argument("--floor", action="store_true",
                        help="a trivial force in place of the GraphForce: OpenMM's own step (the benchmark's floor)")
    args = parser.parse_args()

    from standard_context import standard_context

    try:
        context, integrator = standard_context(args.grade, args.n, args.precision, args.cuda_graph, args.property, args.device_index,
                                               floor=args.floor, platform_properties=args.platform_property)
    except ValueError as error:
        parser.error(str(error))
    for _ in range(3):
        context.getState(getForces=True)
    cudart = None
    for name in ("libcudart.so.13", "libcudart.so.12", ctypes.util.find_library("cudart")):
        try:
            cudart = ctypes.CDLL(name)
            break
        except (OSError, TypeError):
            continue
    if cudart is not None:
        cudart.cudaProfilerStart()
    start = time.perf_counter()
    for _ in range(args.evaluations):
        context.getState(getForces=True)
    elapsed = (time.perf_counter() - start) / args.evaluations
    if cudart is not None:
        cudart.cudaProfilerStop()
    label = " ".join([f"{args.grade} n={args.n} CudaGraph={args.cuda_graph} DeviceIndex={args.device_index}"] + args.property +
                     [f"platform:{setting}" for setting in args.platform_property] + (["floor"] if args.floor else []))
    print(f"{label}: {1e3 * elapsed:.3f} ms per evaluation (wall, {args.evaluations} evaluations)")
    if args.steps:
        integrator.step(10)
        context.getState(getEnergy=True)
        start = time.perf_counter()
        integrator.step(args.steps)
        context.getState(getEnergy=True)
        print(f"{label}: {1e3 * (time.perf_counter() - start) / args.steps:.4f} ms per step")


if __name__ == "__main__":
    main()
