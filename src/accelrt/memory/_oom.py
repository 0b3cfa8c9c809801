"""Out-of-memory handling of the caching allocator: PyTorch's messages and observers.

When the retry chain fails, the allocator counts the OOM, records an ``oom`` trace entry, and
raises :class:`~accelrt.OutOfMemoryError` with PyTorch's message (sizes by :func:`format_size`)
after calling the observers attached with ``attach_oom_observer``. "Tried to allocate" names
the size asked for; the hint that follows is PyTorch 2.15's, with its pointer to the
documentation of the options (see ``OomReporter._hint``; a
device without virtual memory, where expandable segments cannot help, advises
``max_split_size_mb`` instead); when the allocator needed a larger new segment for it, a
sentence says so, and a backend may append advice (``Backend.oom_advice(index)``: the cpu
backend names ``ACCELRT_CPU_MEMORY`` and its budget).

Example::

    >>> from accelrt.memory._oom import format_size
    >>> format_size(3 * 2**20)
    '3.00 MiB'
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import _backend_registry, _sync_debug
from .._errors import OutOfMemoryError, type_shown
from .._fork import reinit_after_fork
from ._config import MB, NO_SPLIT_LIMIT, reserve_bytes

if TYPE_CHECKING:
    from ._interface import AllocatorCore

__all__ = ["OomReporter", "attach_out_of_memory_observer", "format_size"]

Observer = Callable[[int, int, int, int], None]

#: the sentence that ends PyTorch 2.15's fragmentation advice, verbatim: PyTorch's page on the
#: ``PYTORCH_CUDA_ALLOC_CONF`` options, whose syntax and meaning ``ACCELRT_ALLOC_CONF`` shares
DOCS_POINTER = ("  See documentation for Memory Management  (https://docs.pytorch.org/docs/"
                "stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)")

_observers_lock = reinit_after_fork(threading.Lock())
#: backend name -> the observers :func:`attach_out_of_memory_observer` attached for every
#: device of it (guarded by _observers_lock for writes; a tuple, replaced by a longer one)
_backend_observers: dict[str, tuple[Observer, ...]] = {}


def _forget_backend(name: str) -> None:
    """As a pluggable allocator swap (``_pluggable._forget_backend``), the observers of a
    backend name outlive its registration again (``replace=True``) and end when it is
    unregistered: a backend registered under that name later starts without them."""
    if name not in _backend_registry._factories:
        with _observers_lock:
            _backend_observers.pop(name, None)


_backend_registry.on_change(_forget_backend)


def attach_out_of_memory_observer(backend: str, observer: Observer) -> None:
    """Call ``observer(device, alloc_size, limit, device_free)`` before the caching allocator
    of any device of ``backend``, started now or later, raises an out-of-memory error: what
    PyTorch's ``torch._C._cuda_attach_out_of_memory_observer`` (and the public
    ``torch.mtia.attach_out_of_memory_observer``) does for every device. ``alloc_size`` is
    the allocation the allocator tried to make, ``limit`` the per-process cap
    (``set_per_process_memory_fraction``) or else the device's capacity, ``device_free``
    the device's free memory; called without the allocator's lock, so it may take a
    snapshot (``memory._snapshot()``, ``memory._dump_snapshot()``).

    Raises:
        TypeError: ``observer`` is not callable.
        RuntimeError: the backend's allocator is not the caching allocator
            (``get_allocator_backend()`` is ``"pluggable"`` or ``"cudaMallocAsync"``):
            PyTorch's "does not yet support attachOutOfMemoryObserver".

    Example::

        >>> from accelrt.memory._oom import attach_out_of_memory_observer
        >>> attach_out_of_memory_observer("cpu", 42)
        Traceback (most recent call last):
        TypeError: the out-of-memory observer must be callable (device, alloc, device_allocated, device_free), got int
    """
    if not callable(observer):
        raise TypeError(f"the out-of-memory observer must be callable (device, alloc, "
                        f"device_allocated, device_free), got {type_shown(observer)}")
    from ._pluggable import get_allocator_backend
    kind = get_allocator_backend(backend)
    if kind != "native":
        from ._malloc_async import NAME
        # (the name PyTorch's error gives: ``unsupported_name`` of the replacing class, read
        # as a constant here, since a compiled class's attribute reads as its descriptor)
        name = "PluggableAllocator" if kind == "pluggable" else NAME
        raise RuntimeError(f"{name} does not yet support "
                           "attachOutOfMemoryObserver. If you need it, please file an issue "
                           "describing your use case.")
    with _observers_lock:
        _backend_observers[backend] = (*_backend_observers.get(backend, ()), observer)


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


class OomReporter:
    """The OOM reporting of one allocator: builds the error under the allocator's lock, calls
    the observers and raises outside it.

    Attributes:
        observers: the callables attached with :meth:`attach_observer` (guarded by the lock).

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
        CPU out of memory
        >>> len(seen)
        1
    """

    __slots__ = ("_alloc", "observers")

    def __init__(self, alloc: AllocatorCore) -> None:
        self._alloc = alloc
        self.observers: list[Callable[[int, int, int, int], None]] = []

    def _advice(self, requested: int, alloc_size: int, backend: bool = True) -> str:
        """What follows PyTorch's message: the segment the request needed when it is larger
        than the request, and the backend's own advice (the cpu backend names its budget)."""
        extra = ""
        if alloc_size > requested:
            extra += (f" The allocator needed a new {format_size(alloc_size)} segment for the "
                      f"{format_size(requested)} request.")
        alloc = self._alloc
        if not backend:
            return extra
        try:
            hint = alloc._b.oom_advice(alloc._index)
        except Exception:  # noqa: BLE001 - the OOM report must not fail
            hint = None
        if isinstance(hint, str) and hint:
            extra += " " + hint
        return extra

    def _no_vm_hint(self) -> str:
        """The fragmentation advice on a device without virtual memory, where PyTorch's
        (``expandable_segments:True``) cannot help: PyTorch's advice before expandable
        segments existed, ``max_split_size_mb`` (a smaller one when it is set), and why not
        expandable segments (whether or not they were asked for)."""
        cfg = self._alloc._cfg
        if cfg.max_split_size >= NO_SPLIT_LIMIT:   # (unlimited, or as good as)
            advice = "setting ACCELRT_ALLOC_CONF=max_split_size_mb:<MiB>"
        else:
            advice = (f"a smaller ACCELRT_ALLOC_CONF max_split_size_mb (now "
                      f"{cfg.max_split_size // MB})")
        why = ("expandable_segments:True, which is set, falls back to ordinary segments here"
               if cfg.expandable_segments else "expandable_segments:True cannot help")
        return (f" If reserved but unallocated memory is large try {advice} to avoid "
                f"fragmentation (this device has no virtual memory, so {why})." + DOCS_POINTER)

    def _hint(self, alloc_size: int) -> tuple[str, bool]:
        """The end of PyTorch 2.15's message, and whether it blames the reserve: without
        expandable segments, the advice to turn them on (on a device without virtual memory,
        where they cannot be had, :meth:`_no_vm_hint`); with them, why a request larger than
        a new segment's reservation failed (and how much to reserve), or else a pointer to the
        reserve keys for address-space (VSZ) exhaustion."""
        alloc = self._alloc
        if not alloc._expandable:
            try:
                has_vm = alloc._expandable_segments.supported()
            except Exception:  # noqa: BLE001 - the OOM report must not fail
                has_vm = True
            if not has_vm:
                return self._no_vm_hint(), False
            return ((" If reserved but unallocated memory is large try setting "
                    "ACCELRT_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
                    + DOCS_POINTER), False)
        total = alloc._device_total
        reserve = reserve_bytes(alloc._cfg, total)
        if reserve < alloc_size <= total:
            # (PyTorch's test: a request larger than the device is not the reserve's fault)
            return ((f" This allocation exceeds the expandable-segment reserve of "
                    f"{format_size(reserve)} for this stream, and a single allocation cannot "
                    "span expandable segments. Raise ACCELRT_ALLOC_CONF "
                    "expandable_segments_reserve or expandable_segments_reserve_by_class (or "
                    f"unset it) so that a segment is at least {format_size(alloc_size)}."),
                    True)
        return ((" expandable_segments is enabled. If instead the process is running out of "
                "virtual address space (VSZ), expandable segments may be over-reserving VA "
                "(each segment reserves ~9/8 of device memory, times the number of streams); "
                "reduce it via ACCELRT_ALLOC_CONF expandable_segments_reserve / "
                "expandable_segments_reserve_by_class."), False)

    def prepare_oom(self, stream: int, rounded: int, frames: list[dict[str, Any]] | None,
                    requested: int | None = None, pool_id: tuple[int, int] = (0, 0),
                    custom: object = None) -> tuple[str, int, int, int, int]:
        """Count the OOM, record its trace entry (``pool_id``: the pool the request was
        for) and build :meth:`raise_oom`'s arguments; ``custom``: the pool's pluggable
        allocator, whose NULL PyTorch 2.15's message names (None: the backend's memory)."""
        alloc = self._alloc
        st = alloc._stats
        st.num_ooms += 1
        alloc_size = alloc._allocation_size(rounded)
        try:
            dev_free, dev_total = alloc._b.get_memory_info(alloc._index)
        except Exception:  # noqa: BLE001 - the OOM report must not fail
            dev_free, dev_total = 0, alloc._device_total
        if alloc._history is not None:
            alloc._history.record("oom", 0, rounded, stream, frames, device_free=dev_free,
                                  pool_id=pool_id)
        priv = alloc._pools.free_bytes()
        allocated = st.allocated_bytes()
        reserved = st.reserved_bytes[0].current
        allowed = alloc._allowed_max
        allowed_info = f"{format_size(allowed)} allowed; " if allowed is not None else ""
        priv_msg = (f"with {format_size(priv)} allocated in private pools (e.g., "
                    f"{alloc._name.upper()} Graphs), " if priv > 0 else "")
        name = alloc._name
        asked = rounded if requested is None else requested
        msg = (f"{name.upper()} out of memory. Tried to allocate {format_size(asked)}. Device "
               f"{name}:{alloc._index} has a total capacity of {format_size(dev_total)} of "
               f"which {format_size(dev_free)} is free. {allowed_info}Of the allocated memory "
               f"{format_size(allocated + priv)} is allocated by accelrt, {priv_msg}and "
               f"{format_size(reserved - allocated - priv)} is reserved by accelrt but "
               "unallocated.")
        hint, over_reserve = self._hint(alloc_size)
        msg += hint
        if custom:
            msg += (" The custom allocator backing this MemPool returned nullptr. Check "
                    "preceding allocator warnings or logs for the underlying cause. This can "
                    "indicate an allocator-specific error or memory constraint, even when "
                    "device-wide free memory is available.")
        # (the backend's advice to give it more memory applies neither to a reserve too small
        # nor to a pool's own allocator)
        msg += self._advice(asked, alloc_size, backend=not (over_reserve or custom))
        limit = allowed if allowed is not None else dev_total
        return msg, alloc_size, allocated, limit, dev_free

    def prepare_rejection(self, rounded: int,
                          requested: int | None = None) -> tuple[str, int, int, int, int]:
        """:meth:`raise_oom`'s arguments for a request rejected by ``throw_on_malloc_oom``."""
        alloc = self._alloc
        alloc_size = alloc._allocation_size(rounded)
        asked = rounded if requested is None else requested
        allowed = alloc._allowed_max
        assert allowed is not None
        try:
            dev_free = int(alloc._b.get_memory_info(alloc._index)[0])
        except Exception:  # noqa: BLE001 - the OOM report must not fail
            dev_free = 0
        allocated = alloc._stats.allocated_bytes()
        msg = (f"{alloc._name.upper()} out of memory. Allocation was preemptively rejected because it "
               f"would exceed per_process_memory_fraction limit. Requested size: "
               f"{format_size(asked)}. Reserved: {format_size(alloc._total_reserved)}, "
               f"allowed: {format_size(allowed)} (throw_on_malloc_oom is set)."
               + self._advice(asked, alloc_size))
        return msg, alloc_size, allocated, allowed, dev_free

    def check_retry_sync(self) -> None:
        """Sync debug mode: the release before the OOM retry is about to wait for pending
        frees' events (raised with the allocator unchanged; lock held, as PyTorch warns)."""
        if _sync_debug.active and self._alloc._stream_frees.waiting():
            _sync_debug.check(self._alloc._b.name)

    def raise_oom(self, msg: str, alloc_size: int, allocated: int, limit: int,
                  dev_free: int) -> None:
        """Call the observers (lock not held), then raise :class:`OutOfMemoryError`."""
        alloc = self._alloc
        with alloc._lock:
            observers = list(self.observers)
        observers += _backend_observers.get(alloc._name, ())   # (a tuple: read atomically)
        for fn in observers:
            fn(alloc._index, alloc_size, limit, dev_free)
        raise OutOfMemoryError(msg, alloc_size, allocated, limit)

    def attach_observer(self, fn: Callable[[int, int, int, int], None]) -> None:
        """Add an observer (see ``DeviceCachingAllocator.attach_oom_observer``)."""
        if not callable(fn):
            raise TypeError(f"OOM observer must be callable, got {fn!r}")
        with self._alloc._lock:
            self.observers.append(fn)
