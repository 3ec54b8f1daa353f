"""A reference engine of the communicate interface in pure Python: several
spatial domains simulated in one process, one thread per domain (as OpenMM
runs one thread per device), exchanging host (CPU) buffers through shared
memory with barriers, with the collective semantics of docs/communicate.md.

    from openmmgraph.simulated_domains import SimulatedDomains

    # particles 0..5; domain 0 owns 0, 1, 2 and has ghosts 3, 4; domain 1 owns 3, 4, 5 and has ghost 2
    with SimulatedDomains(owned=[[0, 1, 2], [3, 4, 5]], ghosts=[[3, 4], [2]]) as domains:
        handle0, handle1 = domains.handles
        # run domain d's model in thread d with torch.ops.openmmgraph.communicate(h, handles[d], len(owned[d]))

A ghost may also be owned by its own domain (a periodic image): one domain
alone is then a meaningful engine, usable from a single thread (e.g. for
torch.autograd.gradcheck).  It is both a test fixture and the example of
docs/communicate.md; an MPI engine has the same structure with the barriers
and the shared lists replaced by messages.
"""

import threading

import numpy as np

from .communicate import Communicator

__all__ = ["SimulatedDomains"]


class SimulatedDomains:
    """``owned[d]``: the global indices of the particles domain d owns (its
    rows 0..len(owned[d])-1, in that order); ``ghosts[d]``: the global indices
    of its ghost rows, in order.  Every global index is owned by exactly one
    domain.  ``timeout``: seconds a domain waits for the others at a barrier
    before the exchange fails (an error, never a hang).

    forward: every domain publishes a copy of its owned rows; after a barrier
    each fills its ghost rows from the owners' copies.  reverse: every domain
    publishes a copy of its ghost rows; after a barrier each adds, into its
    owned rows, the ghost rows that copy them, in a fixed order (domains in
    ascending order, ghost rows in ascending order, so results are
    reproducible), then zeroes its ghost rows.  A second barrier keeps the
    published copies until every domain has read them.  If one domain fails,
    the barrier is broken and the others fail too, with a message that says so.
    """

    def __init__(self, owned, ghosts, timeout=60.0, name="simulated domain"):
        self.owned = [np.asarray(o, dtype=np.int64).reshape(-1) for o in owned]
        self.ghosts = [np.asarray(g, dtype=np.int64).reshape(-1) for g in ghosts]
        if len(self.owned) != len(self.ghosts) or not self.owned:
            raise ValueError(f"SimulatedDomains: {len(self.owned)} owned lists and {len(self.ghosts)} ghost lists; expected the same number >= 1")
        count = len(self.owned)
        ownerDomain, ownerRow = {}, {}
        for d, rows in enumerate(self.owned):
            for row, particle in enumerate(rows.tolist()):
                if particle in ownerDomain:
                    raise ValueError(f"SimulatedDomains: particle {particle} is owned by domains {ownerDomain[particle]} and {d}")
                ownerDomain[particle], ownerRow[particle] = d, row
        for d, rows in enumerate(self.ghosts):
            missing = [p for p in rows.tolist() if p not in ownerDomain]
            if missing:
                raise ValueError(f"SimulatedDomains: ghosts {missing[:5]} of domain {d} are owned by no domain")
        # Per domain: where each ghost comes from.
        self._ghostSource = [
            (np.array([ownerDomain[p] for p in g.tolist()], dtype=np.int64), np.array([ownerRow[p] for p in g.tolist()], dtype=np.int64))
            for g in self.ghosts
        ]
        # Per domain d: for every domain e, the ghost rows of e that d owns and the rows of d they add into.
        self._contributions = []
        for d in range(count):
            perDomain = []
            for e in range(count):
                domains, rows = self._ghostSource[e]
                ghostRows = np.nonzero(domains == d)[0]
                perDomain.append((e, ghostRows, rows[ghostRows]))
            self._contributions.append(perDomain)
        self._barrier = threading.Barrier(count, timeout=timeout)
        self._published = [None] * count
        self.calls = [[] for _ in range(count)]  # ("forward" | "reverse", numOwned, numGhost) per call, per domain
        self._communicators = [
            Communicator(
                lambda buffer, d=d: self._forward(d, buffer),
                lambda buffer, d=d: self._reverse(d, buffer),
                name=f"{name} {d} of {count}",
            )
            for d in range(count)
        ]
        self.handles = [c.handle for c in self._communicators]

    def close(self):
        """Unregister every domain's handle."""
        for c in self._communicators:
            c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _table(self, d, buffer, direction):
        owned, ghosts = len(self.owned[d]), len(self.ghosts[d])
        if buffer.numOwned != owned or buffer.numGhost != ghosts:
            self._barrier.abort()
            raise ValueError(
                f"domain {d} has {owned} owned and {ghosts} ghost rows, the {direction} buffer "
                f"{buffer.numOwned} and {buffer.numGhost}"
            )
        self.calls[d].append((direction, owned, ghosts))
        return buffer.as_numpy()

    def _wait(self, d):
        try:
            self._barrier.wait()
        except threading.BrokenBarrierError:
            raise RuntimeError(f"domain {d}: another domain failed or did not call communicate in time (broken barrier)") from None

    def _forward(self, d, buffer):
        table = self._table(d, buffer, "forward")
        owned = len(self.owned[d])
        self._published[d] = table[:owned].copy()
        self._wait(d)
        domains, rows = self._ghostSource[d]
        for g in range(len(domains)):
            table[owned + g] = self._published[domains[g]][rows[g]]
        self._wait(d)

    def _reverse(self, d, buffer):
        table = self._table(d, buffer, "reverse")
        owned = len(self.owned[d])
        self._published[d] = table[owned:].copy()
        self._wait(d)
        for e, ghostRows, ownedRows in self._contributions[d]:
            for ghostRow, ownedRow in zip(ghostRows.tolist(), ownedRows.tolist()):
                table[ownedRow] += self._published[e][ghostRow]
        table[owned:] = 0
        self._wait(d)
