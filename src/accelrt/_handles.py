"""Distinct handle types of the backend contract (version 2).

Every handle a backend returns is an ``int`` at run time, but each kind has its own
:class:`typing.NewType`, so that a type checker rejects a stream handle passed where an event
handle is expected (or a graph handle where a device pointer is). Backends return them from
their constructors (``stream_create`` returns a :data:`StreamHandle`); code that receives a
bare ``int`` from elsewhere (a user's ``stream_id``) wraps it once, e.g. ``StreamHandle(n)``,
which costs nothing a type checker cannot see.

Example::

    >>> from accelrt.backends import StreamHandle, EventHandle
    >>> s = StreamHandle(0)
    >>> s == 0 and isinstance(s, int)
    True
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NewType

__all__ = ["DevicePtr", "EventHandle", "GraphHandle", "StreamHandle"]

if TYPE_CHECKING:
    from mypy_extensions import mypyc_attr as mypyc_attr
else:
    try:   # the compiled build's class options; a no-op decorator without mypy installed
        from mypy_extensions import mypyc_attr
    except ImportError:
        def mypyc_attr(*_args: object, **_options: object) -> object:
            return lambda cls: cls

#: A stream of one device; ``default_stream(i)`` (usually 0) is the device's default stream.
StreamHandle = NewType("StreamHandle", int)
#: An event; never 0.
EventHandle = NewType("EventHandle", int)
#: The address of device memory (what ``malloc`` and ``vm_reserve`` return).
DevicePtr = NewType("DevicePtr", int)
#: An executable graph (what ``graph_capture_end`` returns).
GraphHandle = NewType("GraphHandle", int)
