"""Fork safety: what accelrt's locks look like in a child made by ``os.fork()``.

Only the thread that calls ``fork`` exists in the child; a lock that another thread held at
that moment would stay held forever there, and the child would hang on its first allocation.
Every lock of accelrt is registered here, next to where it is made, in one of two ways:

* :func:`reinit_after_fork` (most locks: registries, handle pools, per-thread state, backend
  bookkeeping): the child gets the lock back free. What such a lock guards is a few single
  dict/list/counter updates, each complete at any moment the fork can happen.
* :func:`hold_across_fork` (the caching allocators and the pinned host pools, whose blocks and
  statistics change in several steps under the lock): the forking thread takes the lock before
  the fork and gives it back after it, in the parent and in the child, so the child never
  starts in the middle of a half-done ``malloc`` or ``free`` (glibc's ``malloc`` does the same).
  These locks are taken together without ever waiting for one while holding another, so
  taking them cannot deadlock with threads that take several of them.

Work that must see the state of the moment of the fork, in the parent and in the child, is
registered with :func:`after_fork_locked`: it runs after the fork while the forking thread
still holds the :func:`hold_across_fork` locks (the caching allocators stop handing out, in
both processes, the segments of memory that stays shared with the child: see
``memory/_pools.py``). Other per-process state is reset next to its owner: asynchronous cpu
streams forget their worker threads and the parent's queued work
(``backends/cpu/_streams.py``); CUDA and OpenCL refuse to work in a child whose parent had
initialised them (their drivers' threads and contexts do not survive ``fork``), with
PyTorch's message. See ``docs/architecture.md``.

Example::

    >>> import threading
    >>> from accelrt._fork import reinit_after_fork
    >>> lock = reinit_after_fork(threading.Lock())
    >>> with lock:
    ...     lock.locked()
    True
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["after_fork_locked", "hold_across_fork", "reinit_after_fork"]

_L = TypeVar("_L")

#: Locks reset to "free" in a forked child (``threading.Lock``/``RLock``/``Condition``).
_reinit: weakref.WeakSet[Any] = weakref.WeakSet()
#: Locks the forking thread holds across the fork (``FastLock`` or ``threading.Lock``).
_hold: weakref.WeakSet[Any] = weakref.WeakSet()
#: The locks :func:`_before` took, released by :func:`_after` (strong references).
_held: list[Any] = []
#: Called with ``in_child`` after a fork, while the forking thread holds the held locks.
_locked_hooks: list[Callable[[bool], None]] = []


def reinit_after_fork(lock: _L) -> _L:
    """Register ``lock`` (a ``threading.Lock``, ``RLock`` or ``Condition``) to be free in a
    forked child, whichever thread held it at the fork; return it.

    Example::

        >>> import threading
        >>> from accelrt._fork import reinit_after_fork
        >>> reinit_after_fork(threading.RLock()).acquire()
        True
    """
    _reinit.add(lock)
    return lock


def hold_across_fork(lock: _L) -> _L:
    """Register ``lock`` (a :class:`~accelrt.memory._lock.FastLock` or ``threading.Lock``) to
    be held by the forking thread across ``fork``, so that the state it guards is consistent
    in the child; return it.

    Example::

        >>> from accelrt._fork import hold_across_fork
        >>> from accelrt.memory._lock import FastLock
        >>> hold_across_fork(FastLock()).locked()
        False
    """
    _hold.add(lock)
    return lock


def after_fork_locked(fn: Callable[[bool], None]) -> Callable[[bool], None]:
    """Register ``fn(in_child)`` to run after every ``fork``, in the parent (``False``) and
    in the child (``True``), while the forking thread still holds every
    :func:`hold_across_fork` lock (and, in the child, after the :func:`reinit_after_fork`
    locks were freed); return it. ``fn`` must not take a held lock, nor wait for another
    thread. An exception it raises stops the hooks after it and is reported by Python as
    "Exception ignored" (the held locks are given back all the same).

    Example::

        >>> from accelrt._fork import after_fork_locked
        >>> @after_fork_locked
        ... def _note(in_child: bool) -> None:
        ...     pass
    """
    _locked_hooks.append(fn)
    return fn


def _snapshot(locks: weakref.WeakSet[Any]) -> list[Any]:
    """The registered locks (another thread may register one while this copies)."""
    while True:
        try:
            return list(locks)
        except RuntimeError:  # "set changed size during iteration": copy again
            continue


def _try_acquire(lock: Any) -> bool:
    try_acquire: Callable[[], bool] | None = getattr(lock, "try_acquire", None)
    if try_acquire is not None:
        return try_acquire()
    return bool(lock.acquire(False))


def _before() -> None:
    """Take every :func:`hold_across_fork` lock, never blocking while holding one: when a lock
    is busy, give back the ones taken, wait for that one alone, and try the others again."""
    locks = _snapshot(_hold)
    first: Any = None
    while True:
        held = [] if first is None else [first]
        for lock in locks:
            if lock is first:
                continue
            if _try_acquire(lock):
                held.append(lock)
                continue
            for h in held:
                h.release()
            lock.acquire()
            first = lock
            break
        else:
            _held[:] = held
            return


def _after() -> None:
    held = _held[:]
    _held.clear()
    for lock in held:
        lock.release()


def _after_in_parent() -> None:
    try:
        for fn in list(_locked_hooks):
            fn(False)
    finally:
        _after()


def _after_in_child() -> None:
    for lock in _snapshot(_reinit):
        lock._at_fork_reinit()
    try:
        for fn in list(_locked_hooks):
            fn(True)
    finally:
        _after()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before, after_in_parent=_after_in_parent,
                        after_in_child=_after_in_child)
