"""Out-of-memory handling of the caching allocator: PyTorch's messages and observers.

When the retry chain fails, the allocator counts the OOM, records an ``oom`` trace entry, and
raises :class:`~accelrt.OutOfMemoryError` with PyTorch's message (sizes by :func:`format_size`)
after calling the observers attached with ``attach_oom_observer``. "Tried to allocate" names
the size asked for; when the allocator needed a larger new segment for it, a sentence says so,
and a backend may append advice (``Backend.oom_advice(index)``: the cpu backend names
``ACCELRT_CPU_MEMORY`` and its budget).

Example::

    >>> from accelrt.memory._oom import format_size
    >>> format_size(3 * 2**20)
    '3.00 MiB'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import _sync_debug
from .._errors import OutOfMemoryError
from ._block import KEY_SHIFT, BlockPool

if TYPE_CHECKING:
    from .._backend import Backend
    from ._block import PrivatePool
    from ._lock import FastLock
    from ._stats import DeviceStats

__all__ = ["OomMixin", "format_size"]


def format_size(n: int) -> str:
    """PyTorch's ``format_size`` for OOM messages.

    Example::

        >>> from accelrt.memory._allocator import format_size
        >>> format_size(1000), format_size(20 * 2**20), format_size(15 * 2**30)
        ('1000 bytes', '20.00 MiB', '15.00 GiB')
    """
    if n <= 1024:
        return f"{n} bytes"
    if n <= 1048576:
        return f"{n / 1024:.2f} KiB"
    if n <= 1073741824:
        return f"{n / 1048576:.2f} MiB"
    return f"{n / 1073741824:.2f} GiB"


class OomMixin:
    """OOM methods of the caching allocator: build the error under the lock, raise outside.

    Example::

        >>> import pytest
        >>> from accelrt import OutOfMemoryError
        >>> from accelrt.backends import get_backend
        >>> from accelrt.memory._allocator import DeviceCachingAllocator
        >>> a = DeviceCachingAllocator(get_backend("cpu"), 0)
        >>> seen = []
        >>> a.attach_oom_observer(lambda *args: seen.append(args))
        >>> try:
        ...     a.malloc(2**50, 0)
        ... except OutOfMemoryError as e:
        ...     print(str(e).split(".")[0])
        cpu out of memory
        >>> len(seen)
        1
    """

    _lock: FastLock
    _b: Backend
    _index: int
    _name: str
    _stats: DeviceStats
    _private: dict[tuple[int, int], PrivatePool]
    _allowed_max: int | None
    _total_reserved: int
    _device_total: int
    _history: bool
    _oom_observers: list[Callable[[int, int, int, int], None]]
    _events: dict[int, Any]
    _deferred: list[Any]

    if TYPE_CHECKING:  # provided by the allocator or another mixin
        def _allocation_size(self, rounded: int) -> int: ...
        def _record(self, action: str, addr: int, size: int, stream: int,
                    frames: list[dict[str, Any]] | None, device_free: int | None = None) -> None: ...

    def _advice(self, requested: int, alloc_size: int) -> str:
        """What follows PyTorch's message: the segment the request needed when it is larger
        than the request, and the backend's own advice (the cpu backend names its budget)."""
        extra = ""
        if alloc_size > requested:
            extra += (f" The allocator needed a new {format_size(alloc_size)} segment for the "
                      f"{format_size(requested)} request.")
        try:
            hint = self._b.oom_advice(self._index)
        except Exception:  # noqa: BLE001 - the OOM report must not fail
            hint = None
        if isinstance(hint, str) and hint:
            extra += " " + hint
        return extra

    def _prepare_oom(self, pool: BlockPool, stream: int, rounded: int,
                     frames: list[dict[str, Any]] | None,
                     requested: int | None = None) -> tuple[str, int, int, int, int]:
        st = self._stats
        st.num_ooms += 1
        alloc_size = self._allocation_size(rounded)
        try:
            dev_free, dev_total = self._b.get_memory_info(self._index)
        except Exception:  # noqa: BLE001 - the OOM report must not fail
            dev_free, dev_total = 0, self._device_total
        if self._history:
            self._record("oom", 0, rounded, stream, frames, device_free=dev_free)
        priv = 0
        for pp in self._private.values():
            for p in (pp.small, pp.large):
                for keys in p.free.values():
                    for key in keys:
                        priv += key >> KEY_SHIFT
        allocated = st.allocated_bytes()
        reserved = st.reserved_bytes[0].current
        allowed = self._allowed_max
        allowed_info = f"{format_size(allowed)} allowed; " if allowed is not None else ""
        priv_msg = (f"with {format_size(priv)} allocated in private pools, "
                    if priv > 0 else "")
        name = self._name
        asked = rounded if requested is None else requested
        msg = (f"{name} out of memory. Tried to allocate {format_size(asked)}. Device "
               f"{name}:{self._index} has a total capacity of {format_size(dev_total)} of which "
               f"{format_size(dev_free)} is free. {allowed_info}Of the allocated memory "
               f"{format_size(allocated + priv)} is allocated by accelrt, {priv_msg}and "
               f"{format_size(reserved - allocated - priv)} is reserved by accelrt but "
               "unallocated. If reserved but unallocated memory is large try setting "
               "ACCELRT_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
               + self._advice(asked, alloc_size))
        limit = allowed if allowed is not None else dev_total
        return msg, alloc_size, allocated, limit, dev_free

    def _prepare_rejection(self, rounded: int,
                           requested: int | None = None) -> tuple[str, int, int, int, int]:
        alloc_size = self._allocation_size(rounded)
        asked = rounded if requested is None else requested
        allowed = self._allowed_max
        assert allowed is not None
        try:
            dev_free = int(self._b.get_memory_info(self._index)[0])
        except Exception:  # noqa: BLE001 - the OOM report must not fail
            dev_free = 0
        allocated = self._stats.allocated_bytes()
        msg = (f"{self._name} out of memory. Allocation was preemptively rejected because it "
               f"would exceed per_process_memory_fraction limit. Requested size: "
               f"{format_size(asked)}. Reserved: {format_size(self._total_reserved)}, "
               f"allowed: {format_size(allowed)} (throw_on_malloc_oom is set)."
               + self._advice(asked, alloc_size))
        return msg, alloc_size, allocated, allowed, dev_free

    def _check_retry_sync(self) -> None:
        """Sync debug mode: the release before the OOM retry is about to wait for pending
        frees' events (raised with the allocator unchanged; lock held, as PyTorch warns)."""
        if _sync_debug.active and (self._events or self._deferred):
            _sync_debug.check(self._b.name)

    def _raise_oom(self, msg: str, alloc_size: int, allocated: int, limit: int,
                   dev_free: int) -> None:
        with self._lock:
            observers = list(self._oom_observers)
        for fn in observers:
            fn(self._index, alloc_size, limit, dev_free)
        raise OutOfMemoryError(msg, alloc_size, allocated, limit)

    def attach_oom_observer(self, fn: Callable[[int, int, int, int], None]) -> None:
        """Call ``fn(device, alloc_size, limit, device_free)`` before raising an OOM error
        (PyTorch's ``_attach_out_of_memory_observer``); called without the lock held."""
        if not callable(fn):
            raise TypeError(f"OOM observer must be callable, got {fn!r}")
        with self._lock:
            self._oom_observers.append(fn)
