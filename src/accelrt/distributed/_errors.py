"""Errors of :mod:`accelrt.distributed`, in accelrt's error tree.

::

    AcceleratorError (RuntimeError)
     └── DistError                  a collective or point-to-point operation failed
          ├── DistBackendError      the engine (MPI, NCCL) reported an error; its own exception
          │                         is kept as ``__cause__``
          ├── DistTimeoutError      an operation did not complete within the group's timeout
          ├── DistStoreError        a store operation failed or timed out (torch's name)
          │    └── QueueEmptyError  ``queue_pop(key, block=False)`` on an empty queue
          └── DistNetworkError      a store could not connect, or its connection broke

Each carries the global ``rank``, the ``op`` name and the group's ``seq`` (sequence number of
the collective) where known.

Example::

    >>> from accelrt.distributed import DistError, DistTimeoutError
    >>> e = DistTimeoutError("all_reduce did not complete", rank=1, op="all_reduce", seq=7)
    >>> isinstance(e, RuntimeError), e.rank, e.op, e.seq
    (True, 1, 'all_reduce', 7)
"""

from __future__ import annotations

from .._errors import AcceleratorError

__all__ = ["DistBackendError", "DistError", "DistNetworkError", "DistStoreError",
           "DistTimeoutError", "QueueEmptyError"]


class DistError(AcceleratorError):
    """A distributed operation failed (on this rank or on a peer)."""

    def __init__(self, message: str, *, rank: int | None = None, op: str | None = None,
                 seq: int | None = None) -> None:
        super().__init__(message)
        self.rank, self.op, self.seq = rank, op, seq

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (_rebuild, (type(self), str(self), self.rank, self.op, self.seq))


class DistBackendError(DistError):
    """The communication engine (MPI, NCCL, ...) reported an error; see ``__cause__``."""


class DistTimeoutError(DistError, TimeoutError):
    """An operation did not complete within the timeout of its process group."""


class DistStoreError(DistError):
    """A store operation failed: a key did not appear within the store's timeout, workers did
    not join a ``TCPStore`` in time, or the store was closed (torch's ``DistStoreError``)."""


class QueueEmptyError(DistStoreError):
    """``Store.queue_pop(key, block=False)`` found the queue empty."""


class DistNetworkError(DistError):
    """A ``TCPStore`` could not listen or connect, or its connection was lost (torch's
    ``DistNetworkError``)."""


def _rebuild(cls: type[DistError], msg: str, rank: int | None, op: str | None,
             seq: int | None) -> DistError:
    return cls(msg, rank=rank, op=op, seq=seq)
