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

__all__ = ["FastLock", "PyFastLock"]


class FastLock:
    """A non-reentrant mutex (see the module docstring).

    Attributes:
        acquire: block until the lock is free, then take it (a bound C method: hoist it).
        put: ``put(None)`` gives the lock back too; a bound C method, the cheapest release.
        acquire_nowait: take the lock if it is free, else raise :class:`queue.Empty` (a bound
            C method, the cheapest non-blocking acquire; see :meth:`try_acquire`).

    Example::

        >>> from accelrt.memory._lock import FastLock
        >>> lock = FastLock()
        >>> lock.acquire(); lock.release()
    """

    __slots__ = ("__weakref__", "_q", "acquire", "acquire_nowait", "put")

    def __init__(self) -> None:
        self._q: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._q.put(None)
        self.acquire = self._q.get
        self.acquire_nowait = self._q.get_nowait
        self.put = self._q.put

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
        self._q.get()

    def __exit__(self, *exc: object) -> None:
        # checked as release() is (and as the C type's __exit__ is): a block that released the
        # lock itself would otherwise leave two tokens, and two threads could hold the lock
        if not self._q.empty():
            raise RuntimeError("FastLock: release of a lock that is not held")
        self._q.put(None)

    def __repr__(self) -> str:
        return f"<FastLock {'locked' if self.locked() else 'unlocked'}>"


#: The Python implementation (the pure build's ``FastLock``).
PyFastLock = FastLock

try:   # the compiled build's C type, where it is built
    from ._lock_c import FastLock  # noqa: F811
except ImportError:
    pass
