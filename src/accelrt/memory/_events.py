"""Stream-ordered frees of the caching allocator (``record_stream``).

A block used on other streams is reused only after events recorded on those streams at free
time complete; frees during a capture wait until it ends. A recorded stream may belong to
another device of the allocator's backend (PyTorch's ``recordStream`` takes any
``CUDAStream``): its event is made on, recorded on, queried and synchronized on that
stream's device. :class:`StreamFrees` keeps them for its allocator (called with the
allocator's ``_lock`` held).

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
from typing import TYPE_CHECKING, Any, cast

from .. import _checked, _sync_debug
from .._handles import EventHandle, StreamHandle
from ._block import Block, PrivatePool, StreamUse
from ._fit import free_block
from ._lock import StreamWait
from ._pools import in_capture_context

if TYPE_CHECKING:
    from .._backend import Backend
    from ._allocator import DeviceCachingAllocator
    from ._interface import AllocatorCore

__all__ = ["StreamFrees", "check_device", "record_stream"]


def _use_order(use: StreamUse) -> tuple[int, int]:
    """The order :meth:`StreamFrees.insert_events` records a block's events in: the streams of
    the allocator's own device first, by handle, then those of other devices by (device,
    handle)."""
    return (-1, use) if isinstance(use, int) else use


class StreamFrees:
    """The stream-ordered frees of one allocator: frees waiting for events on the streams a
    block was used on, and frees made during a capture (guarded by the allocator's lock).

    A free waiting here is *requested* but not *completed*; when its last event completes,
    the allocator's :func:`~accelrt.memory._fit.free_block`
    caches the block.

    Attributes:
        events: stream use (:data:`~._block.StreamUse`) -> queue of ``(event, block)`` in
            record order; the events of a stream of another device are that device's.
        event_pool: idle event handles of the allocator's own device, reused.
        event_pools: device index -> its idle event handles (``event_pool`` under the
            allocator's own index; another device's made at its first recorded stream).
        deferred: blocks freed during a capture, waiting for it to end.

    Example::

        >>> from accelrt.backends import get_backend
        >>> from accelrt.memory._allocator import DeviceCachingAllocator
        >>> a = DeviceCachingAllocator(get_backend("cpu"), 0)
        >>> a.free(a.malloc(512, 0)); a.stats()["num_sync_all_streams"]
        0
    """

    __slots__ = ("_alloc", "deferred", "event_pool", "event_pools", "events")

    def __init__(self, alloc: AllocatorCore) -> None:
        self._alloc = alloc
        self.events: dict[StreamUse, collections.deque[tuple[int, Block]]] = {}
        self.event_pool: list[int] = []
        self.event_pools: dict[int, list[int]] = {alloc._index: self.event_pool}
        self.deferred: list[Block] = []

    def waiting(self) -> bool:
        """True while some free waits for events or for a capture to end."""
        return bool(self.events or self.deferred)

    def free_later(self, blk: Block) -> None:
        """A free of ``blk`` (recorded on other streams; stats already counted it pending):
        defer it during a graph capture, else record its events."""
        alloc = self._alloc
        if alloc._pools.capturing and in_capture_context(alloc):
            self.deferred.append(blk)
            alloc._update_simple()
        else:
            self.insert_events(blk)

    @staticmethod
    def _new_event(b: Backend, idx: int) -> int:
        """A new event of device ``idx`` for a pool (kept until the allocator goes), checked as
        the core checks every event it keeps (:func:`accelrt._checked.event`)."""
        anyb: Any = b   # called untyped: the compiled build would cast the result
        return int(_checked.event(b, idx, anyb.event_create(idx, False, False, False)))

    def _where(self, use: StreamUse) -> tuple[int, int, list[int]]:
        """``(device, stream handle, idle events of that device)`` of a recorded stream use:
        a bare handle is a stream of the allocator's own device; another device's pool is
        made empty at its first use."""
        if isinstance(use, int):
            return self._alloc._index, use, self.event_pool
        dev, h = use
        pool = self.event_pools.get(dev)
        if pool is None:
            pool = self.event_pools[dev] = []
        return dev, h, pool

    def insert_events(self, blk: Block) -> None:
        """Record one event per recorded stream, on that stream's device (PyTorch's
        ``insert_events``: ``SetDevice(stream.device_index())`` and an event of that device);
        the pending free completes when all have.

        A stream destroyed since ``record_stream`` cannot take an event: its device is
        synchronized instead (its queued work still runs), which is safe. Any other backend
        failure leaves the allocator consistent (the block waits only for the events that were
        recorded, completing at once if none was) and is then raised.
        """
        alloc = self._alloc
        b = alloc._b
        uses = blk.stream_uses or ()
        blk.stream_uses = None
        error: BaseException | None = None
        for s in (uses if len(uses) < 2 else sorted(uses, key=_use_order)):
            dev, h, pool = self._where(s)
            try:
                ev = pool.pop() if pool else self._new_event(b, dev)
            except Exception as exc:  # noqa: BLE001 - re-raised below, state kept consistent
                error = error or exc
                continue
            try:
                b.event_record(dev, EventHandle(ev), StreamHandle(h))
            except Exception as exc:  # noqa: BLE001 - re-raised below, state kept consistent
                pool.append(ev)
                failure: BaseException | None = exc
                try:
                    if not b.stream_is_valid(dev, StreamHandle(h)):
                        with StreamWait(alloc._lock):   # a destroyed stream: wait for all
                            b.synchronize(dev)          # its device's work
                        failure = None
                        if _sync_debug.active:   # after the wait: the block is then free
                            _sync_debug.check(b.name)
                except Exception as exc2:  # noqa: BLE001 - re-raised below
                    failure = exc2
                if failure is not None:
                    error = error or failure
                continue
            blk.event_count += 1
            q = self.events.get(s)
            if q is None:
                q = self.events[s] = collections.deque()
            q.append((ev, blk))
            alloc._fast = alloc._fast_malloc = False   # (see malloc)
        if blk.event_count == 0:
            free_block(cast("DeviceCachingAllocator", alloc), blk, True)
        if error is not None:
            try:
                raise error
            finally:   # (no cycle: the error's traceback holds this frame, not the reverse)
                error = failure = None

    def insert_deferred(self) -> None:
        """Record the events of the frees deferred during a capture (it has ended)."""
        deferred = self.deferred
        self.deferred = []
        error: BaseException | None = None
        for blk in deferred:
            try:
                self.insert_events(blk)
            except Exception as exc:  # noqa: BLE001 - every block is handled, then raised
                error = error or exc
        if error is not None:
            try:
                raise error
            finally:   # (no cycle: the error's traceback holds this frame, not the reverse)
                error = None

    def process(self) -> None:
        """Complete the frees whose events have completed (PyTorch's process_events).

        The frees deferred during a capture record their events once no graph captures on
        the device: another thread processing events meanwhile leaves them deferred, since
        a stream they were used on may be the capturing one (docs/differences.md)."""
        alloc = self._alloc
        if self.deferred and not alloc._pools.capturing:
            self.insert_deferred()
        b = alloc._b
        for s in list(self.events):
            q = self.events[s]
            dev, _, pool = self._where(s)
            while q:
                ev, blk = q[0]
                if not b.event_query(dev, EventHandle(ev)):
                    break
                q.popleft()
                pool.append(ev)
                blk.event_count -= 1
                if blk.event_count == 0:
                    free_block(cast("DeviceCachingAllocator", alloc), blk, True)
            if not q:
                del self.events[s]
        if not self.events:
            alloc._update_simple()

    def synchronize_and_free(self, only: PrivatePool | None) -> None:
        """Wait for every event (of ``only``'s blocks, when given), each on its stream's
        device, and complete those frees.

        An event whose wait raises (a host function's error kept by its stream, a closed
        backend) stays queued with those after it, and the error propagates: the frees
        completed before it are off the queue, so a later call neither returns their events
        to the pool twice nor counts their blocks down again.
        """
        alloc = self._alloc
        if only is None:
            alloc._stats.num_sync_all_streams += 1
        if self.deferred and not alloc._pools.capturing:
            self.insert_deferred()
        b = alloc._b
        try:
            for s in list(self.events):
                q = self.events[s]
                dev, _, pool = self._where(s)
                keep: collections.deque[tuple[int, Block]] = collections.deque()
                try:
                    while q:
                        ev, blk = q[0]
                        if only is not None and blk.pool.owner is not only:
                            keep.append(q.popleft())
                            continue
                        with StreamWait(alloc._lock):
                            b.event_synchronize(dev, EventHandle(ev))
                        q.popleft()   # (only once waited for: an error leaves it queued)
                        pool.append(ev)
                        blk.event_count -= 1
                        if blk.event_count == 0:
                            free_block(cast("DeviceCachingAllocator", alloc), blk, True)
                finally:
                    # what stays queued, in record order: the kept, then those not reached
                    keep.extend(q)
                    if keep:
                        self.events[s] = keep
                    else:
                        del self.events[s]
        finally:
            alloc._update_simple()


def check_device(b: Backend, name: str, device: object) -> int:
    """``device``, the index of a device of backend ``b`` (named ``name``), checked: the
    ``device`` argument of an allocator's ``record_stream``.

    Raises:
        TypeError: ``device`` is not an int.
        ValueError: ``device`` is not a device index of ``b``.
    """
    if not isinstance(device, int) or isinstance(device, bool):
        raise TypeError(f"record_stream: the device index must be an int, got "
                        f"{type(device).__name__}")
    count = b.device_count()
    if not 0 <= device < count:
        raise ValueError(f"record_stream: device index {device} is out of range: "
                         f"{name} has {count} device(s)")
    return device


def record_stream(a: AllocatorCore, ptr: int, stream: int, device: int | None = None) -> None:
    """Mark the allocation at ``ptr`` as used on ``stream`` of device ``device`` (default: the
    allocator's own): its free will wait for the work queued on ``stream`` at free time
    (PyTorch's ``recordStream``, which takes a stream of any device: the event of its use is
    made and recorded on that device when the block is freed). A use of the block's own
    stream on its own device needs no event and is ignored.

    Raises:
        ValueError: ``ptr`` is not a live allocation of this allocator, ``device`` is not a
            device index of its backend, or ``stream`` is not a live stream handle of device
            ``device``.
        TypeError: ``device`` is not an int.

    Example::

        >>> from accelrt.backends import get_backend
        >>> from accelrt.memory._allocator import DeviceCachingAllocator
        >>> a = DeviceCachingAllocator(get_backend("cpu"), 0)
        >>> s = get_backend("cpu").stream_create(0, 0)
        >>> p = a.malloc(100, 0)
        >>> a.record_stream(p, s)     # p is reused only after s's work queued by free()
        >>> a.free(p)
    """
    if device is not None and device != a._index:
        _record_other_device(a, ptr, stream, device)
        return
    with a._lock:
        blk = a._block_at(ptr)
        if blk is None and a._uncached and a._uncached.record_stream(ptr, stream, a._index):
            return
        if blk is None or not blk.allocated:
            raise a._bad_ptr(ptr, blk)
        if stream == blk.stream:
            return   # the allocation stream: its own order needs no event
        if not a._b.stream_is_valid(a._index, StreamHandle(stream)):
            raise ValueError(f"record_stream: {stream!r} is not a live stream handle of "
                             f"{a._name}:{a._index}")
        if blk.stream_uses is None:
            blk.stream_uses = {stream}
        else:
            blk.stream_uses.add(stream)


def _record_other_device(a: AllocatorCore, ptr: int, stream: int, device: object) -> None:
    """:func:`record_stream` of a stream of another device of the allocator's backend: the use
    is kept as ``(device, stream)`` (never ignored: the allocation stream is another device's
    stream)."""
    dev = check_device(a._b, a._name, device)
    with a._lock:
        blk = a._block_at(ptr)
        if blk is None and a._uncached and a._uncached.record_stream(ptr, stream, dev):
            return
        if blk is None or not blk.allocated:
            raise a._bad_ptr(ptr, blk)
        if not a._b.stream_is_valid(dev, StreamHandle(stream)):
            raise ValueError(f"record_stream: {stream!r} is not a live stream handle of "
                             f"{a._name}:{dev}")
        use: StreamUse = (dev, stream)
        if blk.stream_uses is None:
            blk.stream_uses = {use}
        else:
            blk.stream_uses.add(use)
