"""Streams, events and host functions of :class:`~accelrt.backends.cuda.CudaBackend` (its
streams part; graph capture is :mod:`._graphs`).

``stream_create`` makes one driver stream per call: the one stream pool is the core's (an
:class:`accelrt.Stream` returns its handle to it when collected), as for every backend.

Example::

    >>> from accelrt.backends.cuda._streams import CudaStreams
    >>> callable(CudaStreams.stream_create)
    True
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import threading
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ... import _stream_callback
from ..._errors import DeviceError, type_shown
from ..._fork import reinit_after_fork
from ..._handles import EventHandle, StreamHandle
from .._common import KeptErrors, capture_refuses_sync
from . import _cu
from ._cu import as_handle, as_int, check

if TYPE_CHECKING:
    from ._backend import _Device

__all__ = ["CudaStreams", "address_is_mapped"]

#: Always-valid special stream handles: the NULL stream, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD.
_SPECIAL_STREAMS = (0, 1, 2)


def address_is_mapped(addr: int) -> bool:
    """True if ``addr`` lies in memory mapped into this process (``/proc/self/mem`` answers
    a read of one byte there; an unmapped address answers ``EIO``).

    Asked before an unknown stream handle goes to the driver: ``cuStreamGetCtx`` dereferences
    its argument, and a made-up handle at an unmapped address (``0xDEAD0``) killed the
    interpreter with SIGSEGV on an H200. A mapped address that is not a stream can still
    mislead the driver; only real handles should be passed, as with PyTorch's
    ``ExternalStream``. Where ``/proc/self/mem`` cannot be opened the answer is ``True``
    (the driver decides, as before).

    Example::

        >>> import ctypes
        >>> from accelrt.backends.cuda._streams import address_is_mapped
        >>> buf = ctypes.create_string_buffer(8)
        >>> address_is_mapped(ctypes.addressof(buf)), address_is_mapped(8)
        (True, False)
    """
    if addr <= 0 or addr >= 1 << 63:
        return False
    try:
        fd = os.open("/proc/self/mem", os.O_RDONLY)
    except OSError:
        return True
    try:
        return len(os.pread(fd, 1, addr)) == 1
    except OSError:
        return False
    finally:
        os.close(fd)


_HOSTFN_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
#: key -> (callable, kept errors of its backend, (device index, stream)); dict ops are atomic
_host_funcs: dict[int, tuple[Callable[[], None], KeptErrors[tuple[int, int]],
                             tuple[int, int]]] = {}
_host_keys = itertools.count(1)


def _describe_host_error(key: tuple[int, int]) -> str:
    return f"cuda: a host function launched on stream {key[1]:#x} of cuda:{key[0]} raised"


def _host_trampoline(user_data: int | None) -> None:
    entry = _host_funcs.pop(int(user_data or 0), None)
    if entry is None:
        return
    fn, errors, where = entry
    # (the driver's thread runs it in stream order: what waits for streams is refused there)
    prev = _stream_callback.enter(f"stream {where[1]:#x} of cuda:{where[0]}")
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001 - a driver thread cannot propagate it
        # Kept (the first one per stream) and raised by the next synchronization.
        errors.keep(where, exc)
        if not isinstance(exc, Exception):   # KeyboardInterrupt, SystemExit: say it now too
            import logging   # the "accelrt" logger; with no handler it reaches stderr
            logging.getLogger("accelrt.cuda").exception(
                "a host function launched with launch_host_func raised:")
    finally:
        _stream_callback.leave(prev)


# One C trampoline for the whole process, kept alive forever; the callable is found by key.
_HOST_TRAMPOLINE = _HOSTFN_TYPE(_host_trampoline)

_NO_CAPTURE = contextlib.nullcontext()


class _RelaxedCapture:
    """Switch the thread to relaxed capture mode, so that allocation calls (``cuMemAlloc``,
    ``cuMemCreate``, ...) made while a graph captures neither fail nor invalidate it, whatever
    its mode (PyTorch's ``CUDAStreamCaptureModeGuard`` around ``cudaMalloc``); the previous
    mode is restored on exit, also when the call failed. A failed restore raises, or warns
    where the call's own error propagates (as the guard's destructor warns)."""

    __slots__ = ("drv", "prev")

    def __init__(self, drv: Any) -> None:
        self.drv = drv
        self.prev: Any = None

    def __enter__(self) -> None:
        relaxed = self.drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
        self.prev = check(self.drv.cuThreadExchangeStreamCaptureMode(relaxed),
                          "cuThreadExchangeStreamCaptureMode")

    def __exit__(self, exc_type: object, *exc: object) -> None:
        try:
            check(self.drv.cuThreadExchangeStreamCaptureMode(self.prev),
                  "cuThreadExchangeStreamCaptureMode")
        except Exception as err:
            if exc_type is None:
                raise
            warnings.warn(f"cuda: the capture mode was not restored after a failed call: "
                          f"{err}", RuntimeWarning, stacklevel=2)


class CudaStreams:
    """The streams, events and host functions of one :class:`~accelrt.backends.cuda.CudaBackend`
    (a part the backend holds and delegates to, after its own checks): the live events, the
    streams capturing a graph (shared with :class:`~._graphs.CudaGraphs`) and the first
    exception of each stream's host functions.

    Args:
        drv: the driver bindings (``cuda.bindings.driver``, or a test's stand-in).
        use: makes a device's primary context current in the calling thread and returns
            its state (``CudaBackend._use``).
    """

    def __init__(self, drv: Any, use: Callable[[int], _Device]) -> None:
        self._drv = drv
        self._use = use
        self._graph_lock = reinit_after_fork(threading.Lock())
        #: live events: handle -> [device index, timing, captured, last recording stream or
        #: None]; item ops are atomic
        self._events: dict[int, list[Any]] = {}
        #: streams capturing a graph: handle -> device index; guarded by _graph_lock
        self._capturing: dict[int, int] = {}
        #: their captures: handle -> (ident of the thread that began it, capture mode);
        #: guarded by _graph_lock
        self._capture_modes: dict[int, tuple[int, str]] = {}
        #: first exception of a host function per (device, stream), raised at the next sync
        self._host_errors: KeptErrors[tuple[int, int]] = KeptErrors()

    def relaxed(self) -> Any:
        """Context manager for allocation calls: relaxed capture mode while any capture runs."""
        return _RelaxedCapture(self._drv) if self._capturing else _NO_CAPTURE

    # ------------------------------------------------------------------ handle checks
    def check_stream(self, d: _Device, stream: StreamHandle) -> StreamHandle:
        """``stream`` if it is a live stream of device ``d``, else ``ValueError``: a stale or
        made-up handle given to the driver could crash the process."""
        if type(stream) is int and (stream in _SPECIAL_STREAMS or stream in d.owned_streams
                                    or stream in d.foreign_streams):
            return stream
        s = as_handle(stream, "stream")
        if s in _SPECIAL_STREAMS or s in d.owned_streams or s in d.foreign_streams:
            return StreamHandle(s)
        raise ValueError(f"stream {s:#x} is not a live stream of cuda:{d.index}; use a stream "
                         "from stream_create, or wrap a foreign one (accelrt.cuda.ExternalStream)")

    def _check_event(self, event: Any) -> list[Any]:
        rec = self._events.get(event) if type(event) is int else None
        if rec is None:
            e = as_handle(event, "event")
            rec = self._events.get(e)
            if rec is None:
                raise ValueError(f"event {e:#x} is not a live cuda event; create one with "
                                 "event_create")
        return rec

    def _raise_host_error(self, index: int, stream: int | None) -> None:
        """Raise (once) what a host function on ``stream`` (any stream if None) raised."""
        errors = self._host_errors
        if not errors:
            return
        if stream is None:
            errors.raise_first(lambda k: k[0] == index, _describe_host_error)
        else:
            errors.raise_for([(index, stream)], _describe_host_error)

    def _not_capturing(self, stream: int, what: str) -> None:
        if stream in self._capturing:
            raise DeviceError(f"cuda: cannot {what} stream {stream:#x} while it captures a "
                              "graph; end the capture first")

    # ------------------------------------------------------------------ streams
    def default_stream(self, index: int) -> StreamHandle:
        return StreamHandle(0)

    def stream_priority_range(self, index: int) -> tuple[int, int]:
        d = self._use(index)
        if d.priorities is None:
            least, greatest = check(self._drv.cuCtxGetStreamPriorityRange(),
                                    "cuCtxGetStreamPriorityRange")
            d.priorities = (int(least), int(greatest))
        return d.priorities

    def stream_create(self, index: int, priority: int) -> StreamHandle:
        priority = as_int(priority, "stream priority")
        least, greatest = self.stream_priority_range(index)
        priority = min(max(priority, greatest), least)
        d = self._use(index)
        drv = self._drv
        flags = drv.CUstream_flags.CU_STREAM_NON_BLOCKING
        made = int(check(drv.cuStreamCreateWithPriority(flags, priority),
                         "cuStreamCreateWithPriority"))
        with d.lock:
            d.owned_streams.add(made)
            d.dead_streams.discard(made)
        return StreamHandle(made)

    def stream_destroy(self, index: int, stream: StreamHandle) -> None:
        d = self._use(index)
        stream = StreamHandle(as_handle(stream, "stream"))
        if stream in _SPECIAL_STREAMS:
            raise ValueError("the default stream cannot be destroyed")
        self._not_capturing(stream, "destroy")
        with d.lock:
            if stream not in d.owned_streams:
                raise ValueError(f"stream {stream:#x} was not created by the cuda backend on "
                                 f"cuda:{index}; only streams from stream_create are destroyed")
            d.owned_streams.discard(stream)
        try:
            check(self._drv.cuStreamDestroy(stream), "cuStreamDestroy")
        except BaseException:
            with d.lock:
                d.owned_streams.add(stream)
            raise
        with d.lock:
            d.dead_streams.add(stream)

    def stream_query(self, index: int, stream: StreamHandle) -> bool:
        stream = self.check_stream(self._use(index), stream)
        self._not_capturing(stream, "query")
        if not self._done(self._drv.cuStreamQuery, stream, "cuStreamQuery"):
            return False
        if self._host_errors:   # the contract's rule (backends/_common.py), as the cpu's
            self._raise_host_error(index, stream)
        return True

    def _done(self, query: Callable[[int], tuple[Any]], handle: int, call: str) -> bool:
        """``query(handle)`` (``cuStreamQuery``, ``cuEventQuery``): True when done, False on
        ``CUDA_ERROR_NOT_READY``. Relaxed capture mode: legal for a stream or event outside
        the capture (the allocator asks)."""
        with self.relaxed():
            (err,) = query(handle)
        if not err:
            return True
        if err == self._drv.CUresult.CUDA_ERROR_NOT_READY:
            return False
        _cu.raise_error(err, call)
        return False

    def stream_synchronize(self, index: int, stream: StreamHandle) -> None:
        _stream_callback.refuse("stream_synchronize")   # (never from a host function)
        stream = self.check_stream(self._use(index), stream)
        self._not_capturing(stream, "synchronize")
        check(self._drv.cuStreamSynchronize(stream), "cuStreamSynchronize")
        self._raise_host_error(index, stream)

    def stream_wait_event(self, index: int, stream: StreamHandle, event: EventHandle) -> None:
        stream = self.check_stream(self._use(index), stream)
        self._check_event(event)
        check(self._drv.cuStreamWaitEvent(stream, event, 0), "cuStreamWaitEvent")

    def stream_is_valid(self, index: int, stream: StreamHandle) -> bool:
        d = self._use(index)
        stream = StreamHandle(as_handle(stream, "stream"))
        if stream in _SPECIAL_STREAMS or stream in d.owned_streams or \
                stream in d.foreign_streams:
            return True
        if stream % 8 or stream < 0x10000 or stream in d.dead_streams \
                or not address_is_mapped(stream):
            return False   # not a heap pointer, or destroyed here: never ask the driver
        err, ctx = self._drv.cuStreamGetCtx(stream)
        if err or int(ctx) != d.ctx_int:
            return False
        with d.lock:
            d.foreign_streams.add(stream)
        return True

    def synchronize(self, index: int) -> None:
        _stream_callback.refuse("synchronize")
        self._use(index)
        if index in self._capturing.values():
            self._check_sync_allowed(index)
        check(self._drv.cuCtxSynchronize(), "cuCtxSynchronize")
        self._raise_host_error(index, None)

    def _check_sync_allowed(self, index: int) -> None:
        """Refuse a synchronize of device ``index`` in the calling thread where a capture of
        one of its streams forbids it by its mode (the generic rule, docs/graphs.md): its own
        capture unless begun ``"relaxed"``, another thread's if begun ``"global"``."""
        me = threading.get_ident()
        with self._graph_lock:
            captures = [(s, self._capture_modes.get(s, (0, "global")))
                        for s, i in self._capturing.items() if i == index]
        for stream, (thread, mode) in captures:
            why = capture_refuses_sync("cuda", f"cuda:{index}", f"{stream:#x}", thread, mode, me)
            if why is not None:
                raise DeviceError(why)

    def launch_host_func(self, index: int, fn: Callable[[], None], stream: StreamHandle) -> None:
        if not callable(fn):
            raise TypeError(f"launch_host_func needs a callable, got {type_shown(fn)}")
        stream = self.check_stream(self._use(index), stream)
        if self._capturing and self.stream_is_capturing(index, stream):
            raise DeviceError(f"cuda: cannot launch a host function on stream {stream:#x} "
                              "while it captures a graph (cuda.bindings host functions run "
                              "once, not on every replay); launch it outside the capture")
        drv = self._drv
        key = next(_host_keys)
        _host_funcs[key] = (fn, self._host_errors, (index, stream))
        hostfn = drv.CUhostFn(ctypes.cast(_HOST_TRAMPOLINE, ctypes.c_void_p).value)
        try:
            check(drv.cuLaunchHostFunc(stream, hostfn, key), "cuLaunchHostFunc")
        except BaseException:
            _host_funcs.pop(key, None)
            raise

    # ------------------------------------------------------------------ events
    def event_create(self, index: int, enable_timing: bool, blocking: bool,
                     interprocess: bool) -> EventHandle:
        if interprocess and enable_timing:
            raise ValueError("an interprocess event cannot have enable_timing=True; CUDA "
                             "requires timing to be disabled on interprocess events")
        fl = self._drv.CUevent_flags
        flags = 0 if enable_timing else int(fl.CU_EVENT_DISABLE_TIMING)
        if blocking:
            flags |= int(fl.CU_EVENT_BLOCKING_SYNC)
        if interprocess:
            flags |= int(fl.CU_EVENT_INTERPROCESS)
        self._use(index)
        ev = int(check(self._drv.cuEventCreate(flags), "cuEventCreate"))
        self._events[ev] = [index, bool(enable_timing), False, None]
        return EventHandle(ev)

    def event_destroy(self, index: int, event: EventHandle) -> None:
        self._use(index)
        self._check_event(event)
        rec = self._events.pop(event)
        try:
            check(self._drv.cuEventDestroy(event), "cuEventDestroy")
        except BaseException:
            self._events[event] = rec
            raise

    def event_record(self, index: int, event: EventHandle, stream: StreamHandle) -> None:
        stream = self.check_stream(self._use(index), stream)
        rec = self._check_event(event)
        check(self._drv.cuEventRecord(event, stream), "cuEventRecord")
        rec[2] = stream in self._capturing
        rec[3] = stream

    def event_record_external(self, index: int, event: EventHandle,
                              stream: StreamHandle) -> None:
        stream = self.check_stream(self._use(index), stream)
        rec = self._check_event(event)
        if stream not in self._capturing:
            self.event_record(index, event, stream)
            return
        flag = int(self._drv.CUevent_record_flags.CU_EVENT_RECORD_EXTERNAL)
        check(self._drv.cuEventRecordWithFlags(event, stream, flag), "cuEventRecordWithFlags")
        rec[2] = False   # a record node: queries and waits outside the graph stay legal

    def stream_wait_event_external(self, index: int, stream: StreamHandle,
                                   event: EventHandle) -> None:
        stream = self.check_stream(self._use(index), stream)
        self._check_event(event)
        flags = 0
        if stream in self._capturing:
            flags = int(self._drv.CUevent_wait_flags.CU_EVENT_WAIT_EXTERNAL)
        check(self._drv.cuStreamWaitEvent(stream, event, flags), "cuStreamWaitEvent")

    def event_query(self, index: int, event: EventHandle) -> bool:
        self._use(index)   # a thread's first CUDA call may be this one: no context current yet
        if self._check_event(event)[2]:
            raise DeviceError("cuda: this event was last recorded inside a graph capture; "
                              "query it after recording it outside the capture")
        return self._done(self._drv.cuEventQuery, event, "cuEventQuery")

    def event_synchronize(self, index: int, event: EventHandle) -> None:
        _stream_callback.refuse("event_synchronize")
        self._use(index)
        rec = self._check_event(event)
        if rec[2]:
            raise DeviceError("cuda: this event was last recorded inside a graph capture; "
                              "synchronize on it after recording it outside the capture")
        with self.relaxed():
            check(self._drv.cuEventSynchronize(event), "cuEventSynchronize")
        if self._host_errors and rec[3] is not None:
            # the contract's rule (backends/_common.py): the wait covers the recording stream
            self._raise_host_error(index, rec[3])

    def event_elapsed_time(self, index: int, start: EventHandle, end: EventHandle) -> float:
        self._use(index)
        for e in (start, end):
            if not self._check_event(e)[1]:
                raise ValueError("elapsed_time needs both events created with "
                                 "enable_timing=True")
        return float(check(self._drv.cuEventElapsedTime(start, end), "cuEventElapsedTime"))

    def event_ipc_handle(self, index: int, event: EventHandle) -> bytes:
        self._use(index)
        self._check_event(event)
        h = check(self._drv.cuIpcGetEventHandle(event), "cuIpcGetEventHandle")
        return _cu.ipc_bytes(h)

    def event_from_ipc_handle(self, index: int, handle: bytes) -> EventHandle:
        h = _cu.ipc_struct(handle, self._drv.CUipcEventHandle, "event", "event_ipc_handle")
        self._use(index)
        ev = int(check(self._drv.cuIpcOpenEventHandle(h), "cuIpcOpenEventHandle"))
        self._events[ev] = [index, False, False, None]
        return EventHandle(ev)

    def stream_is_capturing(self, index: int, stream: StreamHandle) -> bool:
        stream = self.check_stream(self._use(index), stream)
        if stream in self._capturing:
            return True
        status = check(self._drv.cuStreamIsCapturing(stream), "cuStreamIsCapturing")
        return bool(status != self._drv.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE)
