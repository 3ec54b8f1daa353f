"""bench/knot_sharing.py's counts of shared table knots (CPU only)."""

import numpy as np


def test_knots_are_shared_only_within_one_table(load_script):
    sharing = load_script("bench/knot_sharing.py")
    # One center (0) with a row of four edges in order: neighbours 1-4 of types 0, 0, 0, 1 in intervals 5, 5, 6, 6.
    i = np.zeros(4, dtype=np.int64)
    j = np.array([1, 2, 3, 4])
    types = np.array([0, 0, 0, 0, 1])
    interval = np.array([5, 5, 6, 6])
    # Lane groups of one edge share nothing: two knots an edge.
    assert sharing.knots_per_edge(i, j, interval, types, groups=1, warps=1) == (2.0, 2.0)
    # Pairs (1, 2): the same interval, two knots for both either way; (3, 4): other tables, four knots.
    assert sharing.knots_per_edge(i, j, interval, types, groups=2, warps=1) == (1.5, 1.5)
    # All four at once: knots 5, 6 of table 0 as first and second knots of edges 1-2, 6 and 7 of edge 3 (6 shared by
    # parity only), 6 and 7 of table 1.
    now, parity = sharing.knots_per_edge(i, j, interval, types, groups=4, warps=1)
    assert (now, parity) == (6 / 4, 5 / 4)


def test_rows_are_canonical(load_script):
    sharing = load_script("bench/knot_sharing.py")
    box = 2.0
    positions = np.array([[0.1, 0.1, 0.1], [1.9, 0.1, 0.1], [0.1, 0.4, 0.1], [0.1, 0.1, 0.45], [1.0, 1.0, 1.0]])
    i, j, r = sharing.canonical_rows(positions, box, cutoff=0.6)
    # Particle 0's row: 1 through the boundary (0.2), then 2 (0.3), then 3 (0.35); particle 4 has no neighbours.
    assert list(j[i == 0]) == [1, 2, 3]
    np.testing.assert_allclose(r[i == 0], [0.2, 0.3, 0.35])
    assert not np.any(i == 4) and not np.any(j == 4)
    assert np.all(np.diff(i) >= 0)
