"""Host functions (``launch_host_func``) running on a stream's own thread, and the runtime
calls they must not make.

A host function runs in stream order: the stream cannot go on until it returns. CUDA forbids
it any CUDA call (``cudaErrorNotPermitted``, or a deadlock): a call that waits for streams
(``synchronize``, ``Stream.synchronize``, ``Event.synchronize``, ``empty_cache``) would wait
for the stream that runs it, or for a thread that holds the caching allocator's lock while it
waits for that stream. accelrt turns those into a :class:`~accelrt.DeviceError` raised inside
the host function (kept by the stream and raised by its next synchronization, as a host
function's other errors), never a hang.

The backends mark the threads that run host functions in stream order (the cpu backend's
asynchronous stream workers, the OpenCL backend's host workers, CUDA's driver thread while it
runs one): :func:`current` names the stream there, and is ``None`` elsewhere, in the cpu
backend's synchronous mode included, where a host function runs at once in the thread that
launched it (nothing waits there, so those calls work).

Example::

    >>> from accelrt import _stream_callback
    >>> _stream_callback.current() is None
    True
    >>> prev = _stream_callback.enter("stream 0x1 of cpu:0")
    >>> try:
    ...     _stream_callback.refuse("synchronize")
    ... except Exception as e:
    ...     print(type(e).__name__, str(e)[:49])
    ... finally:
    ...     _stream_callback.leave(prev)
    DeviceError synchronize() is not permitted in a host function
"""

from __future__ import annotations

import threading
from typing import Any

from ._errors import DeviceError

__all__ = ["contended", "current", "enter", "leave", "refuse"]

_tls = threading.local()


def current() -> str | None:
    """The stream whose host function this thread runs (``"stream 0x1 of cpu:0"``), or
    ``None``."""
    return getattr(_tls, "stream", None)


def enter(where: str) -> str | None:
    """Mark this thread as running host functions of stream ``where`` (until :func:`leave`);
    returns the previous mark, for :func:`leave`."""
    prev = current()
    _tls.stream = where
    return prev


def leave(prev: str | None) -> None:
    """Restore the mark :func:`enter` returned."""
    _tls.stream = prev


def _not_permitted(call: str, where: str, why: str) -> DeviceError:
    return DeviceError(
        f"{call} is not permitted in a host function running in stream order on {where} "
        f"(launch_host_func): {why}, so the call would never return. As in CUDA, which "
        "forbids runtime calls in host functions (cudaErrorNotPermitted), make the call on "
        "the host after the stream's work instead (e.g. after stream.synchronize()), or "
        "record an event in the host function's place and wait for it there")


def refuse(what: str) -> None:
    """Raise :class:`~accelrt.DeviceError` if this thread runs a host function: ``what``
    waits for streams (a backend's ``synchronize``, ``stream_synchronize``,
    ``event_synchronize``, the allocators' ``empty_cache``)."""
    where = current()
    if where is not None:
        raise _not_permitted(f"{what}()", where, "it waits for streams, and the stream running the "
                             "host function cannot go on until the host function returns")


def contended(lock: Any) -> bool:
    """The contention hook of the caching allocator's lock (``memory._lock.FastLock``): called
    by a thread that finds ``lock`` held. False in a thread that runs no host function (it
    waits as usual); in one that does, raises :class:`~accelrt.DeviceError` if the holder
    waits for streams meanwhile (``lock.stream_waits``: it waits for this host function's
    stream, which waits for this thread), else True: the thread waits in short slices and
    asks again."""
    where = current()
    if where is None:
        return False
    if lock.stream_waits:
        raise _not_permitted(
            "a call of the caching allocator (an allocation, a free, a statistic)", where,
            "another thread holds the allocator's lock while it waits for the streams (an "
            "empty_cache() or a release of cached memory), the stream running the host "
            "function among them")
    return True
