"""The cpu backend's fast handle checks of its hot raw operations (``event_record``,
``event_query``, ``stream_query``), compiled in the compiled build.

:class:`~accelrt.backends.cpu.CpuBackend` subclasses the pure :class:`~accelrt.backends.Backend`
that third-party backends subclass, so its methods stay Python (a native class cannot subclass
a Python one); they call these plain functions over the backend's tables, which the methods
pass in (a Python method reads an attribute of its instance faster than compiled code, which
reads an attribute of a Python object with a generic getattr). Every argument is typed
``object``: a caller may pass anything (a bool, an ``int`` subclass, ``None``), and each check
answers "not live" for it, so that the backend's full check (``_event``, ``_stream``) raises
accelrt's own error, never mypyc's.

Example::

    >>> from accelrt.backends.cpu import CpuBackend
    >>> from accelrt.backends.cpu._live import event_on, live_event, live_stream
    >>> b = CpuBackend()
    >>> e = b.event_create(0, False, False, False)
    >>> live_event(b._events, 0, e) is b._events[e], live_event(b._events, 0, True)
    (True, None)
    >>> live_stream(b._valid, 0, 0), live_stream(b._valid, 0, 7), live_stream(b._valid, "0", 0)
    (True, False, False)
    >>> event_on(b._events, b._valid, 0, e, 0) is b._events[e]
    True
    >>> b.event_destroy(0, e)
"""

from __future__ import annotations

from ._streams import CpuEvent

__all__ = ["event_on", "live_event", "live_stream"]


def live_stream(valid: dict[int, set[int]], index: object, stream: object) -> bool:
    """True if ``stream`` is a live stream handle (0: the default stream) of device
    ``index``, both exact ``int``; ``valid`` is the backend's table of live stream handles by
    device index."""
    if type(stream) is int and type(index) is int:
        live = valid.get(index)
        return live is not None and stream in live
    return False


def live_event(events: dict[int, CpuEvent], index: object, event: object) -> CpuEvent | None:
    """The live event ``event`` of device ``index`` in ``events`` (the backend's table by
    handle), both exact ``int``; else None, and the caller's full check raises."""
    if type(event) is int and type(index) is int:
        ev = events.get(event)
        if ev is not None and ev.device == index:
            return ev
    return None


def event_on(events: dict[int, CpuEvent], valid: dict[int, set[int]], index: object,
             event: object, stream: object) -> CpuEvent | None:
    """:func:`live_event` where ``stream`` also is a live stream of device ``index``
    (:func:`live_stream`): the checks of ``event_record``."""
    if live_stream(valid, index, stream):
        return live_event(events, index, event)
    return None
