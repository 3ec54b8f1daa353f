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
    the barrier is broken and the others fail too, with a message that names
    the first failure; the engine then refuses every later call (make a new
    one).  The domains' rows must have the same width and dtype (checked after
    the first barrier, on every domain alike), and a domain's calls are made one
    at a time: a second call on a handle while one is in progress is refused.
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
        self._inCall = [threading.Lock() for _ in range(count)]  # held by a domain's call in progress
        self._failureLock = threading.Lock()
        self._failure = None  # the first failure's message: every later call is refused with it
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

    def _fail(self, message):
        """Record the engine's first failure and break the barrier, so that every domain fails now, not at its timeout."""
        with self._failureLock:
            if self._failure is None:
                self._failure = message
        self._barrier.abort()

    def _exchange(self, d, buffer, direction, body):
        if not self._inCall[d].acquire(blocking=False):
            # Refused without touching the barrier: the call in progress goes on with its partners.
            raise RuntimeError(f"domain {d}: a second {direction} call on its handle while one is in progress (a domain's "
                               "calls must be made one at a time, as in one thread)")
        try:
            if self._failure is not None:
                # This exchange or an earlier one (a domain may call after another has failed the same exchange).
                raise RuntimeError(f"domain {d}: the engine has failed (first failure: {self._failure}) and refuses every "
                                   "call from then on; make a new SimulatedDomains")
            try:
                body(d, self._table(d, buffer, direction))
            except BaseException as error:  # noqa: B036 (every failure breaks the barrier for the other domains)
                text = str(error)
                self._fail(text if text.startswith(f"domain {d}") else f"domain {d}: {text}")
                raise
        finally:
            self._inCall[d].release()

    def _table(self, d, buffer, direction):
        owned, ghosts = len(self.owned[d]), len(self.ghosts[d])
        if buffer.numOwned != owned or buffer.numGhost != ghosts:
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
            reason = self._failure or "none reported: a domain did not call communicate within the timeout"
            raise RuntimeError(f"domain {d}: another domain failed or did not call communicate in time (broken barrier; "
                               f"first failure: {reason})") from None

    def _check_rows(self, d, table):
        """After the first barrier: every domain's published rows have this domain's width and dtype (every domain
        compares the same copies, so all of them fail alike)."""
        for e, rows in enumerate(self._published):
            if rows.shape[1:] != table.shape[1:] or rows.dtype != table.dtype:
                raise ValueError(f"domain {d}: the domains' rows differ: domain {d}'s are {table.shape[1:]} {table.dtype}, "
                                 f"domain {e}'s {rows.shape[1:]} {rows.dtype} (every domain must pass the same row width "
                                 "and dtype)")

    def _forward(self, d, buffer):
        self._exchange(d, buffer, "forward", self._forward_rows)

    def _forward_rows(self, d, table):
        owned = len(self.owned[d])
        self._published[d] = table[:owned].copy()
        self._wait(d)
        self._check_rows(d, table)
        domains, rows = self._ghostSource[d]
        for g in range(len(domains)):
            table[owned + g] = self._published[domains[g]][rows[g]]
        self._wait(d)

    def _reverse(self, d, buffer):
        self._exchange(d, buffer, "reverse", self._reverse_rows)

    def _reverse_rows(self, d, table):
        owned = len(self.owned[d])
        self._published[d] = table[owned:].copy()
        self._wait(d)
        self._check_rows(d, table)
        for e, ghostRows, ownedRows in self._contributions[d]:
            for ghostRow, ownedRow in zip(ghostRows.tolist(), ownedRows.tolist()):
                table[ownedRow] += self._published[e][ghostRow]
        table[owned:] = 0
        self._wait(d)
