"""The cpu backend's events and the fast paths of its hot raw operations (``event_record``,
``event_query``, ``event_synchronize``, ``event_create``, ``event_destroy``,
``stream_query``, ``stream_synchronize``, ``stream_wait_event``), compiled in the compiled
build.

:class:`~accelrt.backends.cpu.CpuBackend` subclasses the pure :class:`~accelrt.backends.Backend`
that third-party backends subclass, so its methods stay Python (a native class cannot subclass
a Python one); they call these plain functions over the backend's tables, which the methods
pass in (a Python method reads an attribute of its instance faster than compiled code reads an
attribute of a Python object, a generic getattr). :class:`CpuEvent` is a native class here, so
the record's fields are C fields to these functions. Every handle argument is typed
``object``: a caller may pass anything (a bool, an ``int`` subclass, ``None``), and each check
answers "not live" for it, so that the backend's full check (``_event``, ``_stream``) raises
accelrt's own error, never mypyc's.

Example::

    >>> from accelrt.backends.cpu import CpuBackend
    >>> from accelrt.backends.cpu._live import (drop_event, event_idle, live_event,
    ...                                         live_stream, new_event, record_idle, wait_idle)
    >>> b = CpuBackend()
    >>> e = new_event(b._events, 1, 0, False, False)
    >>> e > 0, new_event(b._events, 1, 1, False, False)   # device 1 of 1: the general path
    (True, 0)
    >>> live_event(b._events, 0, e) is b._events[e], live_event(b._events, 0, True)
    (True, None)
    >>> live_stream(b._valid, 0, 0), live_stream(b._valid, 0, 7), live_stream(b._valid, "0", 0)
    (True, False, False)
    >>> record_idle(b._events, b._valid, 0, e, 0), b._events[e].ts   # recorded: ts 0
    (True, 0)
    >>> event_idle(b._events, 0, e), wait_idle(b._events, b._valid, 0, 0, e)
    (True, True)
    >>> drop_event(b._events, 0, e), drop_event(b._events, 0, e)
    (True, False)
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Final, cast

from ..._errors import DeviceError

if TYPE_CHECKING:   # (mypyc keeps an instance of a Python class as an object: no import)
    from .._common import HandleTable
    from ._ipc import IpcEventState
    from ._streams import Capture, Record

__all__ = ["CpuEvent", "drop_event", "event_idle", "live_event", "live_stream", "new_event",
           "record_idle", "wait_idle"]

_now: Final = time.perf_counter_ns


class CpuEvent:
    """An event: its device, timing flag, and its last record.

    In synchronous mode a record is just the timestamp ``ts`` (``record`` stays ``None``); in
    asynchronous mode ``record`` is a :class:`~accelrt.backends.cpu._streams.Record`.
    ``capture`` is the capture session (:class:`~accelrt.backends.cpu._streams.Capture`) the
    event was last recorded in while that session is open. An interprocess event keeps its
    state in ``ipc`` (:class:`~accelrt.backends.cpu._ipc.IpcEventState`) instead.
    """

    __slots__ = ("capture", "device", "ipc", "record", "timing", "ts")

    device: int
    timing: bool
    ts: int | None
    record: Record | None
    ipc: IpcEventState | None
    capture: Capture | None

    def __init__(self, device: int, timing: bool, ipc: IpcEventState | None = None) -> None:
        self.device = device
        self.timing = timing
        self.ts = None
        self.record = None
        self.ipc = ipc   # an IpcEventState for interprocess events
        self.capture = None

    def timestamp(self, handle: int, name: str) -> int:
        """When the last record completed (``perf_counter_ns``), for ``event_elapsed_time``;
        ``DeviceError`` if the event has no timing, sits in an open capture, is pending or
        was never recorded (``handle`` names it, ``name`` the backend's registered name)."""
        if not self.timing:
            raise DeviceError(f"{name}: event {handle} was created without timing; create both "
                              "events with enable_timing=True to measure elapsed time")
        if self.capture is not None:
            raise DeviceError(f"{name}: event {handle} was recorded in an open graph capture; "
                              "end the capture first")
        rec = self.record
        ts: int | None
        if rec is None:
            ts = self.ts
        elif not rec.done():
            raise DeviceError(f"{name}: event {handle} has not completed yet; synchronize it "
                              "(or its stream) before asking for elapsed time")
        else:
            ts = rec.ts
        if ts is None:
            raise DeviceError(f"{name}: event {handle} was never recorded; record both events "
                              "before asking for elapsed time")
        return ts


def live_stream(valid: list[set[Any]], index: object, stream: object) -> bool:
    """True if ``stream`` is a live stream handle (0: the default stream) of device
    ``index``, both exact ``int``; ``valid`` is the backend's table of live stream handles,
    indexed by device."""
    kind = type(stream)   # (not narrowed: the handle stays a Python int, no unboxing)
    if kind is int and type(index) is int and 0 <= index < len(valid):
        return stream in valid[index]
    return False


def live_event(events: dict[Any, CpuEvent], index: object, event: object) -> CpuEvent | None:
    """The live event ``event`` of device ``index`` in ``events`` (the backend's table by
    handle), both exact ``int``; else None, and the caller's full check raises."""
    kind = type(event)   # (not narrowed: the handle stays a Python int, no unboxing)
    if kind is int and type(index) is int:
        ev = events.get(event)
        if ev is not None and ev.device == index:
            return ev
    return None


def record_idle(events: dict[Any, CpuEvent], valid: list[set[Any]], index: object,
                event: object, stream: object) -> bool:
    """``event_record`` while no stream holds queued work (the caller read the backend's
    ``streams_idle``): True once ``event`` (live, of device ``index``, not interprocess) is
    recorded on the live ``stream``: the work before it is done, so the record is complete
    now (only a timing event needs the time); False, having done nothing, where the
    backend's general path decides (and its checks raise)."""
    if live_stream(valid, index, stream):
        ev = live_event(events, index, event)
        if ev is not None and ev.ipc is None:
            ev.ts = _now() if ev.timing else 0
            return True
    return False


def event_idle(events: dict[Any, CpuEvent], index: object, event: object) -> bool:
    """``event_synchronize``'s common case: True if ``event`` is a live event of device
    ``index`` (both exact ``int``), not interprocess, with no pending record and not recorded
    in an open capture, so there is nothing to wait for (a record of the synchronous mode is
    complete at once: its ``record`` stays None); False where the backend's general path
    decides (and its checks raise)."""
    ev = live_event(events, index, event)
    return ev is not None and ev.ipc is None and ev.record is None and ev.capture is None


def wait_idle(events: dict[Any, CpuEvent], valid: list[set[Any]], index: object,
              stream: object, event: object) -> bool:
    """``stream_wait_event`` while no stream holds queued work and no capture is open (the
    caller read the backend's ``streams_idle``): True if ``stream`` is a live stream of device
    ``index`` and ``event`` a live event (of any device), not interprocess, both exact
    ``int``: the work before the event's record is done, so the wait is a no-op; False where
    the backend's general path decides (and its checks raise)."""
    if live_stream(valid, index, stream) and type(event) is int:
        ev = events.get(event)
        return ev is not None and ev.ipc is None
    return False


def new_event(events: HandleTable[CpuEvent], n: int, index: object, timing: object,
              interprocess: object) -> int:
    """``event_create``'s common case: the handle of a new event of device ``index`` (an
    exact ``int`` below ``n``, the backend's device count) with timing ``timing``, added to
    ``events``; 0 for an interprocess event or another ``index``, where the backend's general
    path decides (and its checks raise)."""
    if type(index) is int and 0 <= index < n and not interprocess:
        return events.add(CpuEvent(index, bool(timing)))
    return 0


def drop_event(events: HandleTable[CpuEvent], index: object, event: object) -> bool:
    """``event_destroy``'s common case: True once the live event ``event`` of device ``index``
    (both exact ``int``) is forgotten; False, having done nothing, where the backend's general
    path decides (and its checks raise)."""
    if live_event(events, index, event) is None:
        return False
    events.discard(cast("int", event))   # (an exact int: live_event checked it)
    return True
