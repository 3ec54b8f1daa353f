"""The lifetime of an endpoint of the communicate interface that Python owns
(openmmgraph.communicate.Communicator, openmmgraph.mpi.Communicator)."""


class Endpoint:
    """``handle``: the integer to pass to ``torch.ops.openmmgraph.communicate``.
    The endpoint goes with :meth:`close`, at the end of a ``with`` block, or when collected;
    after that ``handle`` (and ``int()``/``operator.index()`` of the endpoint) raise ValueError:
    handing on 0 would mean "one domain" and silently skip the exchange."""

    _handle = 0
    _closed = False

    @property
    def handle(self):
        if self._closed:
            raise ValueError(f"{type(self).__module__}.{type(self).__name__}: the endpoint is closed; its handle is no "
                             "longer valid (create a new endpoint)")
        return self._handle

    @handle.setter
    def handle(self, value):
        self._handle = value

    def _destroy(self, handle):
        """Unregister or destroy ``handle`` (subclasses)."""
        raise NotImplementedError

    def close(self):
        """Unregister the endpoint (idempotent); the handle is invalid from now on."""
        if self._closed:
            return
        self._closed = True
        handle, self._handle = self._handle, 0
        if handle:
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
