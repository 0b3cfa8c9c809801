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

from .._errors import AcceleratorError, AcceleratorValueError

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


# Misuse errors that carry torch 2.14.1's class besides accelrt's own, so that an ``except``
# written for either catches them (observed by running torch.distributed with gloo, one
# process, world_size=1). Private: users catch the builtin classes.

class _AssertValueError(ValueError, AssertionError):
    """A misuse that ``torch.distributed`` refuses with ``AssertionError`` (a store with
    ``init_method``, a store without a rank or world size, an unknown backend at
    ``init_process_group``/``new_group``, ``destroy_process_group()`` without a default
    group) and accelrt with ``ValueError``."""


class _AssertTypeError(TypeError, AssertionError):
    """A wrong argument type that torch reports with ``AssertionError`` (``DeviceMesh.get_group``
    of a ``mesh_dim`` that is neither a name nor an int: "mesh_dim must be an int") and
    accelrt with ``TypeError``."""


class _NotRegisteredError(ValueError, KeyError):
    """A group that is not (or no longer) registered: ``ValueError`` as torch's
    ``get_rank``/``get_group_rank`` raise it, and ``KeyError`` as its
    ``get_process_group_ranks`` (``_world.pg_group_ranks[group]``) does."""

    __str__ = ValueError.__str__     # KeyError's would quote the message


class _TypeValueError(TypeError, ValueError):
    """A wrong argument type that torch reports with ``ValueError`` (``batch_isend_irecv``
    of something else than ``P2POp``s) and accelrt with ``TypeError``, or one torch reports
    with ``TypeError`` and Python's ``Enum`` with ``ValueError`` (``ReduceOp("sum")``)."""


class _EmptyListError(IndexError, TypeError):
    """``barrier(device_ids=[])``: torch 2.15 reads the first item (``IndexError`` "list
    index out of range"), and the ``TypeError`` accelrt raised for it before."""


class _NotAListError(AcceleratorValueError, TypeError):
    """An array list argument (``all_gather``'s ``tensor_list``, ...) that is not a list:
    torch 2.14.1 raises ``TypeError`` (``Invalid function argument. Expected parameter
    `tensor_list` of type List[torch.Tensor]``), or ``RuntimeError`` where it tests the
    tensor's truth (``gather``, ``scatter``); accelrt's
    :class:`~accelrt.AcceleratorValueError` is kept."""


class _DtypeMismatchError(AcceleratorValueError, TypeError):
    """The output of ``all_gather_into_tensor`` / ``reduce_scatter_tensor`` (and their
    ``*_single`` names) of another dtype than the input: torch 2.15's NCCL raises
    ``TypeError`` ("output tensor must have the same type as input tensor"), its gloo
    ``RuntimeError``; :class:`~accelrt.AcceleratorValueError` (also the ``ValueError`` of
    accelrt's other dtype checks) is kept."""


class _WrongGroupError(_TypeValueError, KeyError):
    """A ``group`` that is not a ``ProcessGroup``: torch looks it up and raises
    ``ValueError`` (``get_rank``, ``destroy_process_group``, ``get_backend``) or
    ``KeyError`` (``get_process_group_ranks``); accelrt's ``TypeError``."""

    __str__ = ValueError.__str__


class _RankNotInGroupError(AcceleratorValueError):
    """A ``src``/``dst`` global rank outside the group: ``ValueError`` as torch's rank
    translation of a subgroup, and ``RuntimeError`` as gloo's "invalid root rank" for the
    default group (:class:`~accelrt.AcceleratorValueError` is both)."""


class _DeviceRangeError(AcceleratorValueError, IndexError):
    """``init_process_group(device_id=)`` of an index its backend does not have: torch
    2.15's ``ValueError`` ("device_id cuda:1 is out of range"), and an ``IndexError`` as
    accelrt's device checks (:class:`~accelrt.AcceleratorIndexError`) raise."""
