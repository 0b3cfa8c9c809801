"""Stream-ordered frees of the caching allocator (``record_stream``).

A block used on other streams is reused only after events recorded on those streams at free
time complete; frees during a capture wait until it ends. Called with the allocator's
``_lock`` held.

Example::

    >>> from accelrt.backends import get_backend
    >>> from accelrt.memory._allocator import DeviceCachingAllocator
    >>> b = get_backend("cpu")
    >>> a = DeviceCachingAllocator(b, 0)
    >>> s = b.stream_create(0, 0)
    >>> p = a.malloc(512, 0)
    >>> a.record_stream(p, s); a.free(p)
    >>> a.empty_cache(); a.memory_reserved()     # waits for the event, then releases
    0
    >>> b.stream_destroy(0, s)
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING

from .. import _sync_debug
from .._handles import EventHandle, StreamHandle
from ._block import Block, PrivatePool

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._backend import Backend
    from ._stats import DeviceStats

__all__ = ["EventsMixin"]


class EventsMixin:
    """Event bookkeeping methods of the caching allocator.

    Example::

        >>> from accelrt.backends import get_backend
        >>> from accelrt.memory._allocator import DeviceCachingAllocator
        >>> a = DeviceCachingAllocator(get_backend("cpu"), 0)
        >>> a.free(a.malloc(512, 0)); a.stats()["num_sync_all_streams"]
        0
    """

    _b: Backend
    _index: int
    _stats: DeviceStats
    _events: dict[int, collections.deque[tuple[int, Block]]]
    _event_pool: list[int]
    _deferred: list[Block]
    _captures: list[tuple[tuple[int, int], Callable[[int], bool] | None]]
    _fast: bool

    if TYPE_CHECKING:  # provided by the allocator or another mixin
        def _free_block(self, blk: Block, pending: bool) -> None: ...
        def _update_simple(self) -> None: ...

    def _insert_events(self, blk: Block) -> None:
        """Record one event per recorded stream; the pending free completes when all have.

        A stream destroyed since ``record_stream`` cannot take an event: the device is
        synchronized instead (its queued work still runs), which is safe. Any other backend
        failure leaves the allocator consistent (the block waits only for the events that were
        recorded, completing at once if none was) and is then raised.
        """
        b = self._b
        idx = self._index
        uses = blk.stream_uses or ()
        blk.stream_uses = None
        error: BaseException | None = None
        for s in sorted(uses):
            try:
                ev = self._event_pool.pop() if self._event_pool else \
                    b.event_create(idx, False, False, False)
            except Exception as exc:  # noqa: BLE001 - re-raised below, state kept consistent
                error = error or exc
                continue
            try:
                b.event_record(idx, EventHandle(ev), StreamHandle(s))
            except Exception as exc:  # noqa: BLE001 - re-raised below, state kept consistent
                self._event_pool.append(ev)
                failure: BaseException | None = exc
                try:
                    if not b.stream_is_valid(idx, StreamHandle(s)):
                        b.synchronize(idx)   # a destroyed stream: wait for everything
                        failure = None
                        if _sync_debug.active:   # after the wait: the block is then free
                            _sync_debug.check(b.name)
                except Exception as exc2:  # noqa: BLE001 - re-raised below
                    failure = exc2
                if failure is not None:
                    error = error or failure
                continue
            blk.event_count += 1
            q = self._events.get(s)
            if q is None:
                q = self._events[s] = collections.deque()
            q.append((ev, blk))
            self._fast = False
        if blk.event_count == 0:
            self._free_block(blk, True)
        if error is not None:
            raise error

    def _insert_deferred(self) -> None:
        deferred = self._deferred
        self._deferred = []
        error: BaseException | None = None
        for blk in deferred:
            try:
                self._insert_events(blk)
            except Exception as exc:  # noqa: BLE001 - every block is handled, then raised
                error = error or exc
        if error is not None:
            raise error

    def _process_events(self) -> None:
        if self._deferred:
            self._insert_deferred()
        b = self._b
        idx = self._index
        for s in list(self._events):
            q = self._events[s]
            while q:
                ev, blk = q[0]
                if not b.event_query(idx, EventHandle(ev)):
                    break
                q.popleft()
                self._event_pool.append(ev)
                blk.event_count -= 1
                if blk.event_count == 0:
                    self._free_block(blk, True)
            if not q:
                del self._events[s]
        if not self._events:
            self._update_simple()

    def _synchronize_and_free_events(self, only: PrivatePool | None) -> None:
        if only is None:
            self._stats.num_sync_all_streams += 1
        if self._deferred and not self._captures:
            self._insert_deferred()
        b = self._b
        idx = self._index
        for s in list(self._events):
            q = self._events[s]
            keep: collections.deque[tuple[int, Block]] = collections.deque()
            for ev, blk in q:
                if only is not None and blk.pool.owner is not only:
                    keep.append((ev, blk))
                    continue
                b.event_synchronize(idx, EventHandle(ev))
                self._event_pool.append(ev)
                blk.event_count -= 1
                if blk.event_count == 0:
                    self._free_block(blk, True)
            if keep:
                self._events[s] = keep
            else:
                del self._events[s]
        self._update_simple()
