"""The raw operations the cpu and opencl backends run the same way, written once.

Both keep their own tables of streams and events by handle (:class:`~._common.HandleTable`),
number their devices ``0 .. n-1``, serve ``host_malloc`` from :class:`~.cpu._memory.HostMemory`
and check each operation's arguments before queueing work on a stream. :class:`TableBackend`
holds that part: the device-index check and :meth:`~TableBackend.capabilities`, host memory,
the argument checks and range checks of ``memcpy``/``memset``/``fill``/``launch_host_func``,
and the event operations that only look handles up. What differs is how work is queued (a
worker thread or the caller for the cpu, an OpenCL command queue) and where device memory
lives: each backend implements the small hooks below (``_stream``, ``_event``, ``_memory``,
``_queue_copy``, ``_queue_memset``, ``_queue_fill``, ``_host_call``, ``_timestamp``).

Example::

    >>> from accelrt.backends._table_backend import TableBackend
    >>> from accelrt.backends.cpu import CpuBackend
    >>> issubclass(CpuBackend, TableBackend), CpuBackend.family
    (True, 'cpu')
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from .._backend import _NAME_RE, Backend, Capabilities
from .._handles import EventHandle, StreamHandle
from ._common import (HandleTable, check_byte, check_index, check_ptr, check_size,
                      fill_pattern)
from .._errors import type_shown

if TYPE_CHECKING:   # (the cpu package imports this module)
    from .cpu._memory import HostMemory

__all__ = ["DeviceRanges", "TableBackend", "check_backend_name"]

_KINDS = frozenset(("h2d", "d2h", "d2d", "h2h"))

S = TypeVar("S")
E = TypeVar("E")


class DeviceRanges(Protocol):
    """The memory of one device, as the argument checks see it."""

    def check_range(self, ptr: int, nbytes: int, what: str) -> None:
        """ValueError unless ``[ptr, ptr+nbytes)`` lies in one live allocation (``what``
        names the operation in the message)."""


def check_backend_name(name: object, example: str) -> str:
    """``name`` if it is a lower-case identifier (a backend instance's registry name);
    TypeError or ValueError (suggesting ``example``) otherwise.

    Example::

        >>> from accelrt.backends._table_backend import check_backend_name
        >>> check_backend_name("cpu2", "cpu2")
        'cpu2'
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type_shown(name)}")
    if _NAME_RE.fullmatch(name) is None:   # the registry's rule (_backend._check_name)
        raise ValueError(f"name={name!r} must be a lower-case identifier like {example!r}, "
                         "in ASCII")
    return name


class TableBackend(Backend, Generic[S, E]):
    """A backend with numbered devices, handle tables of streams (``S``) and events (``E``),
    and :class:`HostMemory` for ``host_malloc``: the shared half of the cpu and opencl
    backends (see the module docstring)."""

    #: the device family in messages (``"cpu:0"``), whatever name an instance is registered
    #: under
    family: ClassVar[str] = ""
    #: ``fill`` needs ``ptr`` aligned to the pattern size (OpenCL's ``clEnqueueFillBuffer``)
    fill_aligned: ClassVar[bool] = False

    _n: int
    _caps: Capabilities
    _host: HostMemory
    _events: HandleTable[E]
    #: the end of an out-of-range device index message: how many devices there are
    _index_detail: str

    _check_ptr = staticmethod(check_ptr)

    def _set_name(self, name: str | None) -> None:
        """Give this instance its own registry name (``None``: the class default)."""
        if name is not None:
            # the instance name shadows the class default
            self.__dict__["name"] = check_backend_name(name, f"{self.family}2")

    # ------------------------------------------------------------------ devices
    def capabilities(self, index: int) -> Capabilities:
        """The same answer for every device (checked: an out-of-range index raises)."""
        if type(index) is int and 0 <= index < self._n:
            return self._caps
        self._check_index(index)
        return self._caps

    def _check_index(self, index: object) -> int:
        if type(index) is int and 0 <= index < self._n:
            return index
        return check_index(index, self._n, self.family, self._index_detail)

    def device_count(self) -> int:
        """Number of devices."""
        return self._n

    # ------------------------------------------------------------------ host memory
    def host_malloc(self, size: int) -> int:
        """Aligned host memory (not charged to a device); ``0`` when out of memory."""
        if self._closed:
            raise self._closed_error("host_malloc")
        return self._host.malloc(check_size(size))

    def host_free(self, ptr: int) -> None:
        """Release :meth:`host_malloc` memory."""
        if self._closed:
            raise self._closed_error("host_free")
        self._host.free(self._check_ptr(ptr))

    # ------------------------------------------------------------------ hooks
    def _stream(self, index: int, stream: int) -> S:
        """The live stream ``stream`` of device ``index``; TypeError/ValueError/IndexError."""
        raise NotImplementedError

    def _event(self, event: int, index: int) -> E:
        """The live event ``event`` of device ``index``; TypeError/ValueError/IndexError."""
        raise NotImplementedError

    def _memory(self, index: int) -> DeviceRanges:
        """The memory of device ``index`` (a checked index)."""
        raise NotImplementedError

    def _queue_copy(self, s: S, kind: str, dst: int, src: int, nbytes: int) -> None:
        """Queue a checked, non-empty copy of ``kind`` on ``s``."""
        raise NotImplementedError

    def _queue_memset(self, s: S, ptr: int, value: int, nbytes: int) -> None:
        """Queue a checked, non-empty byte fill on ``s``."""
        raise NotImplementedError

    def _queue_fill(self, s: S, ptr: int, pattern: bytes, dtype: Any, nbytes: int) -> None:
        """Queue a checked, non-empty fill of ``nbytes`` with ``pattern`` (of ``dtype``)."""
        raise NotImplementedError

    def _new_event(self, index: int, timing: bool, interprocess: bool) -> E:
        """A new event of device ``index`` (checked here: TypeError, IndexError, or
        ValueError for an ``interprocess`` event the backend cannot make)."""
        raise NotImplementedError

    def _host_call(self, s: S, fn: Callable[[], object]) -> None:
        """Run ``fn`` on the host in the order of ``s``."""
        raise NotImplementedError

    def _timestamp(self, ev: E, handle: int) -> int:
        """The nanosecond time of the completed timing event ``ev`` (``handle``, for
        messages)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ copies
    def memcpy(self, index: int, dst: int, src: int, nbytes: int, kind: str,
               stream: StreamHandle) -> None:
        """Stream-ordered copy; the device side(s) of ``kind`` must be memory of ``index``
        (any address inside an allocation)."""
        if self._closed:
            raise self._closed_error("memcpy")
        s = self._stream(index, stream)
        if kind not in _KINDS:
            raise ValueError(f"memcpy kind {kind!r} must be one of 'h2d', 'd2h', 'd2d', 'h2h'")
        n = check_size(nbytes, "nbytes", allow_zero=True)
        dst, src = self._check_ptr(dst, "dst"), self._check_ptr(src, "src")
        if kind != "h2h":
            mem = self._memory(index)
            if kind != "d2h":
                mem.check_range(dst, n, f"memcpy {kind} dst")
            if kind != "h2d":
                mem.check_range(src, n, f"memcpy {kind} src")
        if n:
            self._queue_copy(s, kind, dst, src, n)

    def memset(self, index: int, ptr: int, value: int, nbytes: int,
               stream: StreamHandle) -> None:
        """Stream-ordered byte fill of device memory."""
        if self._closed:
            raise self._closed_error("memset")
        s = self._stream(index, stream)
        value = check_byte(value)
        nbytes = check_size(nbytes, "nbytes", allow_zero=True)
        ptr = self._check_ptr(ptr)
        self._memory(index).check_range(ptr, nbytes, "memset")
        if nbytes:
            self._queue_memset(s, ptr, value, nbytes)

    def fill(self, index: int, ptr: int, pattern: bytes, count: int,
             stream: StreamHandle) -> None:
        """Stream-ordered fill of ``count`` copies of a 1, 2, 4 or 8 byte ``pattern`` (on
        OpenCL, ``ptr`` must be aligned to the pattern size)."""
        if self._closed:
            raise self._closed_error("fill")
        s = self._stream(index, stream)
        pattern, dtype = fill_pattern(pattern)
        count = check_size(count, "count", allow_zero=True)
        ptr = self._check_ptr(ptr)
        if self.fill_aligned and ptr % len(pattern):
            raise ValueError(f"fill: pointer {ptr:#x} must be aligned to the {len(pattern)}-byte "
                             "pattern size")
        nbytes = count * len(pattern)
        self._memory(index).check_range(ptr, nbytes, "fill")
        if nbytes:
            self._queue_fill(s, ptr, pattern, dtype, nbytes)

    def launch_host_func(self, index: int, fn: Callable[[], None], stream: StreamHandle) -> None:
        """Run ``fn()`` in stream order; its exception surfaces as :class:`DeviceError` (at
        once in the cpu's synchronous mode, else at the next synchronization of the
        stream)."""
        if self._closed:
            raise self._closed_error("launch_host_func")
        s = self._stream(index, stream)
        if not callable(fn):
            raise TypeError(f"launch_host_func needs a callable, got {type_shown(fn)}")
        self._host_call(s, fn)

    # ------------------------------------------------------------------ events
    def event_create(self, index: int, enable_timing: bool, blocking: bool,
                     interprocess: bool) -> EventHandle:
        """Create an event; an ``interprocess`` one (cpu only) keeps its state in shared
        memory."""
        if self._closed:
            raise self._closed_error("event_create")
        return EventHandle(self._events.add(self._new_event(index, bool(enable_timing),
                                                            interprocess)))

    def event_destroy(self, index: int, event: EventHandle) -> None:
        """Destroy an event (a pending record still completes harmlessly)."""
        if self._closed:
            raise self._closed_error("event_destroy")
        self._event(event, index)
        self._events.discard(event)

    def event_elapsed_time(self, index: int, start: EventHandle, end: EventHandle) -> float:
        """Milliseconds from ``start``'s record to ``end``'s (both timing, both complete)."""
        if self._closed:
            raise self._closed_error("event_elapsed_time")
        t0 = self._timestamp(self._event(start, index), start)
        t1 = self._timestamp(self._event(end, index), end)
        return (t1 - t0) / 1e6
