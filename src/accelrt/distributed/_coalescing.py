"""torch.distributed's private ``_coalescing_manager``: the ``all_reduce``,
``all_gather_into_tensor`` (``all_gather_single``) and ``reduce_scatter_tensor``
(``reduce_scatter_single``) calls made on a group inside the block are recorded, not run,
and run together when the block ends (torch 2.15's "fast path" coalescing, which PyTorch's
own tests and FSDP call). As torch's: every recorded call must be of one kind (else
``RuntimeError`` "Coalescing manager requires all collectives to be the same type"); the
reductions take the first call's op; a call inside the block returns None, or with
``async_op=True`` an ``_IllegalWork`` whose methods raise ``ValueError``; with
``async_ops=True`` the manager's ``works`` holds one work for the lot (``cm.wait()``), else
the block's end waits for them. Other collectives inside the block run at once.

Example::

    >>> import accelrt as acc, accelrt.distributed as dist
    >>> dist.init_process_group("mpi")
    >>> xs = [acc.full((2,), 1.0, device="cpu"), acc.full((3,), 2.0, device="cpu")]
    >>> with dist._coalescing_manager(async_ops=True) as cm:
    ...     for x in xs:
    ...         dist.all_reduce(x)
    >>> len(cm.works), cm.wait(), [x.tolist() for x in xs]
    (1, None, [[1.0, 1.0], [2.0, 2.0, 2.0]])
    >>> dist.destroy_process_group()
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

from .._array import Array
from .._errors import type_shown
from ._group import ProcessGroup, Work
from ._world import GroupArg, _group

__all__ = ["COALESCING", "_CoalescingManager", "_IllegalWork", "_coalescing_manager", "record"]


class _CollOp(NamedTuple):
    """One recorded call: the collective's name, its input, its output (None for
    ``all_reduce``) and its reduction (None for ``all_gather_into_tensor``)."""

    op: str
    tensor: Any
    dst: Any
    redop: Any


#: the groups inside a ``_coalescing_manager`` block -> the calls recorded on each
COALESCING: dict[ProcessGroup, list[_CollOp]] = {}


class _IllegalWork(Work):
    """What an ``async_op=True`` call inside the block returns (torch's ``_IllegalWork``):
    the call has not run, so asking the work anything raises ``ValueError``."""

    _ILLEGAL = frozenset({"is_success", "exception", "wait", "source_rank", "_source_rank",
                          "result", "synchronize"})

    def __init__(self) -> None:
        # as torch's: get_future()/get_future_result() are the base Work's, which has none
        super().__init__(None, "", 0, no_result=True)

    def __getattribute__(self, name: str) -> Any:
        if name in _IllegalWork._ILLEGAL:
            raise ValueError(f"Illegal to call {name} on IllegalWork object")
        return super().__getattribute__(name)


class _CoalescedWork(Work):
    """The one work of an ``async_ops=True`` block: done when every call of it is."""

    def __init__(self, works: list[Work]) -> None:
        super().__init__(None, "coalesced", 0,
                         outputs=[o for w in works for o in w._outputs])
        self._works = works
        self._early_result = all(w._early_result for w in works)

    def wait(self, timeout: Any = None) -> bool:
        try:
            for w in self._works:
                w.wait(timeout)
            self._waited = True
        finally:
            self._observe()
        return True

    def synchronize(self) -> None:
        try:
            for w in self._works:
                w.synchronize()
            self._waited = True
        finally:
            self._observe()

    def is_completed(self) -> bool:
        return all(w.is_completed() for w in self._works)

    def exception(self) -> BaseException | None:
        return next((e for w in self._works if (e := w.exception()) is not None), None)


class _CoalescingManager:
    """What ``_coalescing_manager`` yields: ``works`` (the block's work when ``async_ops``)
    and ``wait()``."""

    def __init__(self) -> None:
        self.works: list[Work] = []

    def append(self, work: Work | None = None) -> None:
        if work:
            self.works.append(work)

    def wait(self) -> None:
        for work in self.works:
            work.wait()


def record(g: ProcessGroup, op: str, tensor: Any, dst: Any, redop: Any,
           async_op: bool) -> Work | None:
    """Record a call on ``g``, which is inside a block (the collectives' hook). Its arrays'
    types and its op are checked here, at the call, as torch's collectives check them before
    recording (its op binding refuses anything but a ``ReduceOp``): a later call's op is not
    used, so a bad one would otherwise pass unseen.

    Raises:
        TypeError: an array is not an ``accelrt.Array`` or ``numpy.ndarray``; ``redop`` is not
            a ``ReduceOp`` (or a ``PremulSum``).
    """
    from ._collectives import _op
    name = {"all_gather_single": "all_gather_into_tensor",
            "reduce_scatter_single": "reduce_scatter_tensor"}.get(op, op)
    for a in (tensor,) if dst is None else (dst, tensor):
        if not isinstance(a, (Array, np.ndarray)):
            raise TypeError(f"{name}: expected an accelrt.Array or numpy.ndarray, got "
                            f"{type_shown(a)}")
    if op != "all_gather_single":
        _op(redop)
    COALESCING[g].append(_CollOp(op, tensor, dst, redop))
    return _IllegalWork() if async_op else None


@contextlib.contextmanager
def _coalescing_manager(group: GroupArg = None, device: Any = None,
                        async_ops: bool = False) -> Iterator[_CoalescingManager]:
    """Coalesce the ``all_reduce``, ``all_gather_into_tensor`` and ``reduce_scatter_tensor``
    calls made on ``group`` (the world by default) in the block (see the module). ``device``
    is accepted for torch's signature (its backends without coalesced forms need it).

    Raises:
        ValueError: ``group`` is already inside a block, or the world is not initialized.
        RuntimeError: the block recorded collectives of more than one kind.

    Example::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> out, x = acc.empty((2,), device="cpu"), acc.full((2,), 3.0, device="cpu")
        >>> with dist._coalescing_manager():
        ...     dist.all_gather_into_tensor(out, x)
        >>> out.tolist(); dist.destroy_process_group()
        [3.0, 3.0]
    """
    g = _group(group)
    if g is None:   # not a member: torch would record on a group it cannot run
        raise ValueError("_coalescing_manager: this rank is not a member of the group")
    if COALESCING.get(g):
        raise ValueError("ProcessGroup has non-empty op list at the start of coalescing")
    COALESCING[g] = []
    cm = _CoalescingManager()
    try:
        yield cm
    finally:
        ops = COALESCING.pop(g, [])
    if not ops:
        return
    kinds = {o.op for o in ops}
    if len(kinds) > 1:
        raise RuntimeError("Coalescing manager requires all collectives to be the same type, "
                           f"but got mixed types: {kinds}")
    from . import _collectives as c
    works = []
    for o in ops:   # torch's coalesced op takes the first call's reduction
        if o.op == "all_reduce":
            w = c.all_reduce(o.tensor, ops[0].redop, g, async_op=True)
        elif o.op == "all_gather_single":
            w = c.all_gather_into_tensor(o.dst, o.tensor, g, async_op=True)
        else:
            w = c.reduce_scatter_tensor(o.dst, o.tensor, ops[0].redop, g, async_op=True)
        assert w is not None
        works.append(w)
    if async_ops:
        cm.append(_CoalescedWork(works))
    else:
        for w in works:
            w.wait()
