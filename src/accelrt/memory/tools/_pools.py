"""Private pools in the replays of ``accelrt replay`` and ``accelrt memory tune``.

A snapshot's history names the pool of each entry (``pool_id``: ``(0, 0)`` for the device's
default pool, else a ``MemPool``'s or a graph capture's private pool). :func:`snapshot_pools`
reads and checks them, :func:`pool_plan` turns them into a :class:`PoolPlan` (which replayed
allocations go to which private pool, where the history shows a pool released), and
:class:`PoolRouter` replays operations by it on a caching allocator: each private pool of the
history becomes a private pool of the replay's allocator (``create_pool``,
``begin_allocate_to_pool``), as ``MemPool`` and graph captures make them.

Example::

    >>> from accelrt.memory.tools._pools import pool_plan
    >>> from accelrt.memory.tools._replay import replay_ops
    >>> entries = [("alloc", 16, 5 << 20, 0), ("alloc", 32, 5 << 20, 0)]
    >>> plan = pool_plan(entries, [None, (0, 1)])
    >>> ops = [(True, 16, 5 << 20, 0), (True, 32, 5 << 20, 0)]
    >>> [replay_ops(ops, plan=p)["peak_reserved_bytes"] >> 20 for p in (None, plan)]
    [20, 40]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from ._files import short_repr

__all__ = ["PoolId", "PoolPlan", "PoolRouter", "pool_plan", "snapshot_pools"]

_MAX_INT = 1 << 64                 # pool ids are pairs of 64-bit unsigned ints

#: One replayed operation (``accelrt.memory.tools._replay.Op``).
_Op = tuple[bool, int, int, int]


#: A private pool's id: PyTorch's ``MempoolId_t``, a pair of unsigned 64-bit ints.
PoolId = tuple[int, int]


def _pool_id(v: Any, where: str) -> PoolId | None:
    """The private pool ``v`` names (``None``: the default pool ``(0, 0)``), checked."""
    if (isinstance(v, (tuple, list)) and len(v) == 2
            and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < _MAX_INT
                    for x in v)):
        return None if v[0] == 0 and v[1] == 0 else (v[0], v[1])
    raise ValueError(f"{where}: 'pool_id' must be a pair of ints in [0, 2**64) (PyTorch's "
                     f"(0, 0) for the default pool, else a MemPool's or graph's pool id), got "
                     f"{short_repr(v)}; the entry's pool cannot be replayed")


def snapshot_pools(trace: list[Any], path: str, device: int) -> list[PoolId | None] | None:
    """The private pool of each entry of one device's snapshot trace (``None``: the default
    pool, or an entry without ``pool_id``, as recorded before PyTorch 2.14), or ``None`` when
    no entry names a private pool.

    Raises:
        ValueError: an entry's ``pool_id`` is not a pair of ints in ``[0, 2**64)`` (the message
            names the device and the entry).

    Example::

        >>> from accelrt.memory.tools._replay import snapshot_pools
        >>> snapshot_pools([{"action": "alloc", "pool_id": (0, 0)},
        ...                 {"action": "alloc", "pool_id": (0, 1)}], "s.pickle", 0)
        [None, (0, 1)]
        >>> snapshot_pools([{"action": "alloc"}], "s.pickle", 0) is None
        True
    """
    out: list[PoolId | None] = []
    private = False
    for i, e in enumerate(trace):
        v = e.get("pool_id") if isinstance(e, dict) else None
        pool = None if v is None else _pool_id(v, f"{path}: device {device} trace entry {i}")
        private = private or pool is not None
        out.append(pool)
    return out if private else None


@dataclasses.dataclass(frozen=True, eq=False)
class PoolPlan:
    """Where a snapshot's history used private pools, for the replay (:func:`pool_plan`).

    Positions count operations (:func:`trace_ops`) and out-of-memory requests before a point,
    so that they hold with and without the requests that ran out of memory put back among the
    operations (``accelrt memory tune``).

    Attributes:
        route: ``(operations before it, out-of-memory requests before it, pool id)`` of each
            allocation made in a private pool.
        release: the same for each point where the history shows a private pool released and
            its cached memory given back (its ``segment_free`` or ``segment_unmap`` entries:
            PyTorch gives a private pool's segments back only once no reference to the pool
            is left).
        ooms: ``(operations before it, pool id or None for the default pool)`` of each
            recorded out-of-memory request, in order.

    Example::

        >>> from accelrt.memory.tools._pools import PoolPlan
        >>> PoolPlan(route=((0, 0, (0, 1)),)).routing()
        ({0: (0, 1)}, {})
    """

    route: tuple[tuple[int, int, PoolId], ...]
    release: tuple[tuple[int, int, PoolId], ...] = ()
    ooms: tuple[tuple[int, PoolId | None], ...] = ()

    def routing(self, with_ooms: bool = False
                ) -> tuple[dict[int, PoolId], dict[int, tuple[PoolId, ...]]]:
        """``(operation index -> private pool of the allocation, operation index -> pools
        released just before that operation)``. ``with_ooms``: the indexes of the operations
        with each out-of-memory request put back as an allocation and its free, where it was
        made (``accelrt memory tune``'s ``with_oom_requests``); a request made in a private
        pool is routed there too.

        Example::

            >>> from accelrt.memory.tools._replay import PoolPlan
            >>> plan = PoolPlan(route=((1, 1, (0, 1)),), release=((2, 1, (0, 1)),),
            ...                 ooms=((1, (0, 1)),))
            >>> plan.routing()
            ({1: (0, 1)}, {2: ((0, 1),)})
            >>> plan.routing(with_ooms=True)
            ({3: (0, 1), 1: (0, 1)}, {4: ((0, 1),)})
        """
        k = 2 if with_ooms else 0
        route = {n + k * m: pool for n, m, pool in self.route}
        at_points: dict[int, dict[PoolId, None]] = {}   # insertion-ordered sets: linear time
        for n, m, pool in self.release:
            at_points.setdefault(n + k * m, {})[pool] = None
        release = {at: tuple(pools) for at, pools in at_points.items()}
        if with_ooms:
            for j, (n, oom_pool) in enumerate(self.ooms):
                if oom_pool is not None:
                    route[n + 2 * j] = oom_pool
        return route, release


def pool_plan(entries: Iterable[Any], pools: Sequence[PoolId | None]) -> PoolPlan | None:
    """The :class:`PoolPlan` of raw entries (from :func:`snapshot_entries`, already accepted
    by :func:`trace_ops`) and their pools (:func:`snapshot_pools`), or ``None`` when no
    replayed allocation was made in a private pool.

    Each ``alloc`` of a private pool goes to a private pool of that id in the replay. A free
    goes to its block wherever it lives (a free entry's own ``pool_id`` is not consulted). The
    first ``segment_free`` / ``segment_unmap`` entry of a private pool after some operations
    releases the pool there (PyTorch frees a private pool's segments only once the pool is
    released: ``~MemPool``, a graph's ``reset()``, then ``empty_cache()``) and gives back its
    free cached segments; a pool whose history shows no such entry stays held to the end of
    the replay (the ``MemPool`` or graph was alive when the snapshot was taken, as far as the
    history tells).

    Example::

        >>> from accelrt.memory.tools._replay import pool_plan
        >>> entries = [("alloc", 16, 512, 0), ("free_requested", 16, 512, 0),
        ...            ("segment_free", 16, 2097152, 0)]
        >>> plan = pool_plan(entries, [(0, 1), (0, 1), (0, 1)])
        >>> plan.route, plan.release
        (((0, 0, (0, 1)),), ((2, 0, (0, 1)),))
    """
    route: list[tuple[int, int, PoolId]] = []
    release: list[tuple[int, int, PoolId]] = []
    ooms: list[tuple[int, PoolId | None]] = []
    live: set[int] = set()
    n = 0
    for e, pool in zip(entries, pools):
        action = e[0]
        if action == "alloc":
            if e[2]:
                if pool is not None:
                    route.append((n, len(ooms), pool))
                live.add(e[1])
                n += 1
        elif action in ("free_requested", "free_completed"):
            if e[1] in live:
                live.discard(e[1])
                n += 1
        elif action in ("segment_free", "segment_unmap"):
            if pool is not None:
                release.append((n, len(ooms), pool))
        elif action == "oom" and e[2]:
            ooms.append((n, pool))
    if not route and all(pool is None for _, pool in ooms):
        return None
    return PoolPlan(tuple(route), tuple(release), tuple(ooms))


class PoolRouter:
    """Replays operations whose allocations the history made in private pools
    (:meth:`PoolPlan.routing`) on allocator ``a``: each such allocation is routed to a private
    pool of its id, created at its first allocation with one reference the replay holds
    until the history shows the pool released; a free goes to its block wherever it lives.

    Example::

        >>> from accelrt.memory.tools._pools import PoolPlan, PoolRouter
        >>> from accelrt.memory.tools._replay import _make_allocator
        >>> a = _make_allocator(None)
        >>> router = PoolRouter(a, PoolPlan(route=((0, 0, (0, 1)),)).routing())
        >>> router.run([(True, 16, 512, 0), (False, 16, 0, 0)], 0, {})
        >>> router.finish(2)
        >>> [s["segment_pool_id"] for s in a.snapshot_segments()]
        [(0, 1)]
    """

    def __init__(self, a: Any, routing: tuple[dict[int, PoolId], dict[int, tuple[PoolId, ...]]]
                 ) -> None:
        self._a = a
        self._route, self._release = routing
        self._held: set[PoolId] = set()     # pools the replay holds a reference to
        self._cur: PoolId | None = None     # the pool allocations are routed to now

    def run(self, chunk: Sequence[_Op], start: int, handles: dict[int, int]) -> None:
        """Replay ``chunk``, the operations from index ``start`` on."""
        malloc, free = self._a.malloc, self._a.free
        route, release = self._route, self._release
        for k, (is_alloc, addr, size, stream) in enumerate(chunk, start):
            if k in release:
                self._release_pools(release[k])
            if is_alloc:
                pool = route.get(k)
                if pool != self._cur:
                    self._switch(pool)
                handles[addr] = malloc(size, stream)
            else:
                free(handles.pop(addr))

    def finish(self, n: int) -> None:
        """After the last of ``n`` operations: the releases the history shows after it."""
        self._switch(None)
        if n in self._release:
            self._release_pools(self._release[n])

    def _switch(self, pool: PoolId | None) -> None:
        a = self._a
        if self._cur is not None:
            a.end_allocate_to_pool(self._cur)
            a.release_pool(self._cur)         # the routing's reference
        self._cur = pool
        if pool is not None:
            if pool not in self._held:
                a.create_pool(pool)           # the pool's own reference (a MemPool's)
                self._held.add(pool)
            a.begin_allocate_to_pool(pool)

    def _release_pools(self, pools: tuple[PoolId, ...]) -> None:
        # as PyTorch's ~MemPool or a graph's reset() then empty_cache(): the last reference
        # dropped, then the pool's free cached segments given back
        for pool in pools:
            if pool == self._cur:
                self._switch(None)
            if pool in self._held:
                self._held.discard(pool)
                self._a.release_pool(pool)
            self._a.empty_cache(pool)
