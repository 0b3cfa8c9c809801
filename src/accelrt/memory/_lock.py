"""A mutex whose uncontended acquire and release are single cheap C calls.

``threading.Lock.acquire`` parses its optional arguments on every call, which makes
``with lock:`` cost about as much as the rest of a cached allocation. :class:`FastLock` holds
one token in a :class:`queue.SimpleQueue`: taking the token (``get``) acquires the lock,
putting it back (``put``) releases it. Both are C methods that run under the GIL, so they are
atomic; ``get`` on an empty queue blocks (releasing the GIL) until another thread puts the
token back, so a contended acquire waits without spinning.

Like :class:`threading.Lock` it is not reentrant: a thread that acquires it twice deadlocks.
Only the thread that acquired it may release it. Code that may run while its own thread holds
the lock (finalizers run by the garbage collector) must use :meth:`FastLock.try_acquire`,
which never blocks.

A thread that runs a host function in stream order (``accelrt._stream_callback``) must not
wait for a holder that waits for streams: that holder waits for the host function's stream,
which waits for the thread. The holder counts such waits in :attr:`FastLock.stream_waits`
(``with StreamWait(lock):``), and a contended acquire asks the contention hook
(:func:`set_contention_hook`, ``_stream_callback.contended``), which raises there; in a host
function it asks again every :data:`POLL` seconds while it waits (the holder may start
waiting for streams after the thread began to wait). Other threads wait as before.

This is the pure build's ``FastLock``. The compiled build's is the same type in C
(``_lock_c.c``, built with the mypyc modules): a ``PyThread`` lock and a flag, whose
uncontended acquire and release stay in C (the queue's argument parsing and work were about
a third of a compiled cached malloc + free). ``FastLock`` here names whichever is loaded (this
one stays :data:`PyFastLock`); ``tests/memory/test_memory_lock.py`` runs both. Both refuse
:meth:`~FastLock.release` (and the end of a ``with`` block) of a lock no thread holds; the C
type's ``put`` does too, the Python one's is the queue's own ``put`` (the hot path: unchecked).

Example::

    >>> from accelrt.memory._lock import FastLock
    >>> lock = FastLock()
    >>> with lock:
    ...     lock.locked()
    True
    >>> lock.locked()
    False
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from typing import Any

__all__ = ["POLL", "FastLock", "PyFastLock", "StreamWait", "set_contention_hook"]

#: seconds between two questions of the contention hook by a waiting host function
POLL = 0.02

#: the contention hook (see the module docstring), or None
_hook: Callable[[Any], bool] | None = None


class FastLock:
    """A non-reentrant mutex (see the module docstring).

    Attributes:
        put: ``put(None)`` gives the lock back too; a bound C method, the cheapest release.
        acquire_nowait: take the lock if it is free, else raise :class:`queue.Empty` (a bound
            C method, the cheapest non-blocking acquire; see :meth:`try_acquire`): try it
            before :meth:`acquire`, which the contention hook makes a Python call.
        stream_waits: how many waits for streams the holder is in (:class:`StreamWait`).

    Example::

        >>> from accelrt.memory._lock import FastLock
        >>> lock = FastLock()
        >>> lock.acquire(); lock.release()
    """

    __slots__ = ("__weakref__", "_q", "acquire_nowait", "put", "stream_waits")

    def __init__(self) -> None:
        self._q: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._q.put(None)
        self.acquire_nowait = self._q.get_nowait
        self.put = self._q.put
        self.stream_waits = 0

    def acquire(self) -> None:
        """Block until the lock is free, then take it.

        Raises:
            DeviceError: the contention hook's, in a host function whose wait would never end.
        """
        try:
            self._q.get_nowait()
        except queue.Empty:
            self._wait()

    def _wait(self) -> None:
        hook = _hook
        if hook is None or not hook(self):
            self._q.get()
            return
        while True:   # a host function: ask the hook again now and then
            try:
                self._q.get(timeout=POLL)
                return
            except queue.Empty:
                hook(self)

    def try_acquire(self) -> bool:
        """Take the lock if it is free, without blocking.

        Returns:
            True if the lock was taken (release it), False if some thread holds it.

        Example::

            >>> from accelrt.memory._lock import FastLock
            >>> lock = FastLock()
            >>> lock.try_acquire(), lock.try_acquire()
            (True, False)
            >>> lock.release()
        """
        try:
            self._q.get_nowait()
        except queue.Empty:
            return False
        return True

    def release(self) -> None:
        """Give the lock back.

        Raises:
            RuntimeError: no thread holds the lock (a second token would let two threads in).
        """
        if not self._q.empty():
            raise RuntimeError("FastLock: release of a lock that is not held")
        self._q.put(None)

    def locked(self) -> bool:
        """True while some thread holds the lock."""
        return self._q.empty()

    def __enter__(self) -> None:
        try:
            self._q.get_nowait()
        except queue.Empty:
            self._wait()

    def __exit__(self, *exc: object) -> None:
        # checked as release() is (and as the C type's __exit__ is): a block that released the
        # lock itself would otherwise leave two tokens, and two threads could hold the lock
        if not self._q.empty():
            raise RuntimeError("FastLock: release of a lock that is not held")
        self._q.put(None)

    def __repr__(self) -> str:
        return f"<FastLock {'locked' if self.locked() else 'unlocked'}>"


class StreamWait:
    """``with StreamWait(lock):`` around a call that waits for streams while the caller holds
    ``lock`` (a raw free, an event or device synchronize): counted in ``lock.stream_waits``
    for the contention hook.

    Example::

        >>> from accelrt.memory._lock import FastLock, StreamWait
        >>> lock = FastLock()
        >>> with lock, StreamWait(lock):
        ...     lock.stream_waits
        1
    """

    __slots__ = ("_lock",)

    def __init__(self, lock: Any) -> None:
        self._lock = lock

    def __enter__(self) -> None:
        self._lock.stream_waits += 1

    def __exit__(self, *exc: object) -> None:
        self._lock.stream_waits -= 1


#: The Python implementation (the pure build's ``FastLock``).
PyFastLock = FastLock

_set_c_hook: Callable[[Callable[[Any], bool] | None], None] | None = None
try:   # the compiled build's C type, where it is built
    from ._lock_c import FastLock  # noqa: F811
    from ._lock_c import set_contention_hook as _set_c_hook  # noqa: F811
except ImportError:
    pass


def set_contention_hook(hook: Callable[[Any], bool] | None) -> None:
    """Install the contention hook of both lock types: ``hook(lock)``, called by a thread that
    finds ``lock`` held, returns whether the thread must ask again while it waits (every
    :data:`POLL` seconds), or raises to give up waiting.

    Example::

        >>> from accelrt.memory import _lock
        >>> from accelrt import _stream_callback
        >>> _lock.set_contention_hook(_stream_callback.contended)   # (what accelrt installs)
    """
    global _hook
    _hook = hook
    if _set_c_hook is not None:
        _set_c_hook(hook)


def _install() -> None:
    from .._stream_callback import contended
    set_contention_hook(contended)


_install()
