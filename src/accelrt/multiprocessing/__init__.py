"""``accelrt.multiprocessing``: the standard :mod:`multiprocessing` API, whose queues, pipes
and process arguments share :class:`accelrt.Array` memory and interprocess
:class:`accelrt.Event` objects with the receiving process instead of copying them
(``torch.multiprocessing``'s model; see docs/multiprocessing.md).

Importing it registers the reductions (:func:`reductions.init_reductions`) with
``multiprocessing``'s ``ForkingPickler``. A shared array is the *same memory* in both
processes: the consumer sees the producer's data once the producer's work queued before the
send has finished (an interprocess event the consumer's current stream waits on), and writes
of either side are seen by the other. The producer keeps the memory alive while a consumer
holds it; :func:`ipc_collect` (also ``acc.cpu.ipc_collect()``, ``acc.cuda.ipc_collect()``)
returns released memory to the producer's caching allocator.

What can be shared: blocks of the caching allocator on CUDA (IPC memory handles) and on cpu
with ``ACCELRT_CPU_SHARED_MEMORY=1`` (POSIX shared memory). Everything else refuses with a
``ValueError`` naming the reason and the fix: OpenCL, expandable segments, private cpu memory,
memory borrowed from numpy or a pluggable allocator.

Example::

    >>> import accelrt as acc
    >>> import accelrt.multiprocessing as amp
    >>> amp.ipc_collect() >= 0
    True
"""

from __future__ import annotations

import multiprocessing
from multiprocessing import *  # noqa: F403 - re-export the standard API, as torch does

from . import _refs, reductions
from .reductions import init_reductions
from .spawn import (
    ProcessContext,
    ProcessExitedException,
    ProcessRaisedException,
    spawn,
    start_processes,
)

__all__ = [
    "ProcessContext",
    "ProcessExitedException",
    "ProcessRaisedException",
    "get_all_sharing_strategies",
    "get_sharing_strategy",
    "init_reductions",
    "ipc_collect",
    "reductions",
    "set_sharing_strategy",
    "spawn",
    "start_processes",
]
__all__ += multiprocessing.__all__  # type: ignore[attr-defined,unused-ignore]


_STRATEGIES = frozenset({"file_descriptor"})


def get_all_sharing_strategies() -> set[str]:
    """``{"file_descriptor"}``: accelrt shares memory only through descriptors of anonymous
    memfds (cpu) or driver handles (CUDA), so no file exists that could be left behind.

    Example::

        >>> import accelrt.multiprocessing as amp
        >>> amp.get_all_sharing_strategies()
        {'file_descriptor'}
    """
    return set(_STRATEGIES)


def get_sharing_strategy() -> str:
    """The sharing strategy, always ``"file_descriptor"``.

    Example::

        >>> import accelrt.multiprocessing as amp
        >>> amp.get_sharing_strategy()
        'file_descriptor'
    """
    return "file_descriptor"


class _InvalidStrategy(ValueError, AssertionError):
    """A sharing strategy that is not one of :func:`get_all_sharing_strategies`: torch 2.15's
    ``AssertionError``, also a ``ValueError`` (what accelrt raised before)."""


def set_sharing_strategy(new_strategy: str) -> None:
    """Accept ``"file_descriptor"`` (``torch.multiprocessing.set_sharing_strategy``).

    Raises:
        AssertionError: a strategy that is not one of :func:`get_all_sharing_strategies`, with
            torch 2.15's words ("invalid sharing strategy ..., expected one of ..."); it is a
            ``ValueError`` too. ``"file_system"`` is one: accelrt never shares through named
            files (which leak when a process crashes); descriptors are all it uses.
        TypeError: an unhashable value such as a list (as torch's set lookup raises).

    Example::

        >>> import accelrt.multiprocessing as amp
        >>> amp.set_sharing_strategy("file_descriptor")
        >>> try:
        ...     amp.set_sharing_strategy("bogus")
        ... except AssertionError as exc:
        ...     print(exc)
        invalid sharing strategy 'bogus', expected one of {'file_descriptor'}
    """
    try:
        known = new_strategy in _STRATEGIES
    except TypeError:
        raise TypeError("a sharing strategy is a string such as 'file_descriptor', got "
                        f"{type(new_strategy).__name__}") from None
    if not known:
        why = (": accelrt shares memory only through descriptors, never named files, so "
               "nothing is left behind when a process crashes"
               if new_strategy == "file_system" else "")
        raise _InvalidStrategy(f"invalid sharing strategy {new_strategy!r}, expected one of "
                               f"{set(_STRATEGIES)}{why}")


def ipc_collect() -> int:
    """Free the memory this process shared whose consumers all released it (and no pickle
    of it is still in flight); return how many shared entries are still kept.

    Called by the device modules' ``ipc_collect()`` (as ``torch.cuda.ipc_collect``). Every
    new share also frees released entries, a bounded number at a time: those of the last
    shares at once, older ones within a number of shares proportional to how many are kept.

    Example::

        >>> import accelrt.multiprocessing as amp
        >>> amp.ipc_collect() >= 0      # entries still kept for consumers
        True
    """
    return _refs.collect()


init_reductions()
