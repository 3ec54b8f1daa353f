#!/usr/bin/env python3
"""How many radial-table knots the edge scans could share inside a row (a host simulation, no GPU).

The CUDA edge scans (platforms/cuda/src/EdgeScanKernels.cu) read, for every edge, the two knots of its table interval
(3 x M values each, per l) from L2; each warp of a center's block walks a contiguous chunk of the canonical row (sorted by
distance) in batches of 32 staged edges, with G lane groups taking G consecutive edges at a time (G = 2 for the medium
grade: 16 lanes x 4 floats cover M = 64).  Lanes that read the same address in one instruction share one L2 request.

This counts, over the standard lattice system (docs/benchmarks.md), the knots a group of G edges requests per edge:
- "first knot first" (the scans before v24): the loads of a knot row come in the edge's order (first knot, then
  second), so two edges share a request only when they lie in the same interval of the same table (t_i, t_j);
- "by parity" (the scans since v24, knotParity): each edge loads its even knot first and its odd one second, so every
  knot that several of the G edges need (the same interval, or neighbouring ones) is read in one instruction.
2.0 means no sharing.  Result for 10,296 particles and 4 types (bench/NOTES.md v23): G = 2 gives 1.957 first knot first and 1.926
by parity (2.2% and 3.7% of the table reads saved); G = 4: 1.931 and 1.874; G = 8: 1.916 and 1.843.  With 2 types
(the small grade, G = 4): 1.866 and 1.759.  The rows' edges spread over 400 intervals and T target types, so
consecutive edges seldom share a knot: this route to fewer L2 bytes is closed.

    python bench/knot_sharing.py [--n 10296] [--types 4]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from openmmgraph.grades import DEFAULT_CUTOFF_NM, DEFAULT_RADIAL_INTERVALS, lattice_system
from openmmgraph.torch_export import canonical_graph


def canonical_rows(positions: np.ndarray, box: float, cutoff: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(center, neighbour, distance) of every edge of the canonical graph as the plugin builds it
    (openmmgraph.torch_export.canonical_graph: rows by center, each sorted by the fixed-point distance key, then
    neighbour index), in a cubic periodic box of side `box`."""
    offsets, neighbours, vectors = canonical_graph(torch.as_tensor(positions, dtype=torch.float64),
                                                   torch.eye(3, dtype=torch.float64) * box, cutoff)
    centers = torch.repeat_interleave(torch.arange(len(offsets) - 1), offsets[1:] - offsets[:-1])
    return centers.numpy(), neighbours.numpy(), vectors.detach().norm(dim=1).numpy()


def knots_per_edge(i: np.ndarray, j: np.ndarray, interval: np.ndarray, types: np.ndarray, groups: int,
                   warps: int = 4, stage: int = 32) -> tuple[float, float]:
    """Knot requests per edge (first knot first, by parity) for lane groups of `groups` edges, as momentsKernel walks its rows."""
    n = int(i.max()) + 1
    starts = np.concatenate([[0], np.cumsum(np.bincount(i, minlength=n))])
    now = parity = edges = 0
    for c in range(n):
        a, count = starts[c], starts[c + 1] - starts[c]
        chunk = (count + warps - 1) // warps
        for w in range(warps):  # rowChunk
            first = min(count, w * chunk)
            last = min(count, first + chunk)
            for base in range(first, last, stage):  # forEachStagedEdge
                end = min(last, base + stage)
                for q0 in range(base, end, groups):
                    e = slice(a + q0, a + min(end, q0 + groups))
                    tj, q = types[j[e]], interval[e]
                    first_knots, second_knots = set(zip(tj, q)), set(zip(tj, q + 1))
                    now += len(first_knots) + len(second_knots)
                    parity += len(first_knots | second_knots)
                    edges += len(q)
    return now / edges, parity / edges


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10296, help="particles of the standard lattice system [10296]")
    parser.add_argument("--types", type=int, default=4, help="particle types (medium grade: 4) [4]")
    args = parser.parse_args()
    positions, types, box = lattice_system(args.n, n_types=args.types, seed=0)
    edge = float(box[0][0])  # a cubic box
    cutoff = DEFAULT_CUTOFF_NM
    i, j, r = canonical_rows(positions, edge, cutoff)
    dr = cutoff / DEFAULT_RADIAL_INTERVALS  # r_0 = 0
    interval = np.minimum(DEFAULT_RADIAL_INTERVALS - 1, (r / dr).astype(np.int64))
    print(f"{args.n} particles, {args.types} types: {len(i)} edges, {len(i) / args.n:.1f} a row")
    for groups in (1, 2, 4, 8):
        now, parity = knots_per_edge(i, j, interval, types, groups)
        print(f"lane groups of {groups} edges: {now:.3f} knots an edge first knot first, {parity:.3f} by parity (2.0: no sharing)")


if __name__ == "__main__":
    main()
