"""The lifetime of an endpoint of the communicate interface that Python owns
(openmmgraph.communicate.Communicator, openmmgraph.mpi.Communicator)."""


class Endpoint:
    """``handle``: the integer to pass to ``torch.ops.openmmgraph.communicate`` (0 once closed).
    The endpoint goes with :meth:`close`, at the end of a ``with`` block, or when collected."""

    handle = 0

    def _destroy(self, handle):
        """Unregister or destroy ``handle`` (subclasses)."""
        raise NotImplementedError

    def close(self):
        """Unregister the endpoint (idempotent); calls with the handle fail from now on."""
        if self.handle:
            handle, self.handle = self.handle, 0
            self._destroy(handle)

    def __index__(self):
        return self.handle

    def __int__(self):
        return self.handle

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
