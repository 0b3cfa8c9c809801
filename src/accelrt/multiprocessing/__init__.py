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

import ctypes
import multiprocessing
import sys
import threading
from multiprocessing import *  # noqa: F403 - re-export the standard API, as torch does

from . import _refs, reductions
from .reductions import init_reductions
from .spawn import (
    ENV_VAR_PARALLEL_START as ENV_VAR_PARALLEL_START,
    ProcessContext,
    ProcessExitedException,
    ProcessRaisedException,
    SpawnContext,
    spawn,
    start_processes,
)

__all__ = [
    "ProcessContext",
    "ProcessExitedException",
    "ProcessRaisedException",
    "SpawnContext",
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


#: torch's strategies on Linux. A strategy chooses how torch shares *host* tensors; device
#: memory is shared through the backend's handles whatever it is (torch's CUDA tensors through
#: CUDA IPC), and accelrt shares device arrays only: it is recorded, and changes nothing.
_STRATEGIES = ("file_descriptor", "file_system")
_strategy = "file_descriptor"


def get_all_sharing_strategies() -> set[str]:
    """``{"file_descriptor", "file_system"}``, as ``torch.multiprocessing`` on Linux.

    Example::

        >>> import accelrt.multiprocessing as amp
        >>> sorted(amp.get_all_sharing_strategies())
        ['file_descriptor', 'file_system']
    """
    return set(_STRATEGIES)


def get_sharing_strategy() -> str:
    """The strategy last set by :func:`set_sharing_strategy` (``"file_descriptor"`` until
    then), as ``torch.multiprocessing.get_sharing_strategy``.

    Example::

        >>> import accelrt.multiprocessing as amp
        >>> amp.get_sharing_strategy() in amp.get_all_sharing_strategies()
        True
    """
    return _strategy


class _InvalidStrategy(ValueError, AssertionError):
    """A sharing strategy that is not one of :func:`get_all_sharing_strategies`: torch 2.15's
    ``AssertionError``, also a ``ValueError`` (what accelrt raised before)."""


def set_sharing_strategy(new_strategy: str) -> None:
    """Set the strategy :func:`get_sharing_strategy` answers
    (``torch.multiprocessing.set_sharing_strategy``): ``"file_descriptor"`` or
    ``"file_system"``.

    In torch the strategy chooses how *host* tensors are shared (descriptors or named files
    in ``/dev/shm``); CUDA tensors go through CUDA IPC whatever it is. accelrt shares device
    arrays only (numpy arrays are pickled as numpy pickles them), always through descriptors
    of anonymous memfds (cpu) or driver handles (CUDA), so the strategy is recorded and
    changes nothing: no named file is ever made, and code that sets ``"file_system"`` (to
    avoid running out of descriptors with many host tensors) ports unchanged.

    Raises:
        AssertionError: a strategy that is not one of :func:`get_all_sharing_strategies`, with
            torch 2.15's words ("invalid sharing strategy ..., expected one of ..."); it is a
            ``ValueError`` too.
        TypeError: an unhashable value such as a list (as torch's set lookup raises).

    Example::

        >>> import accelrt.multiprocessing as amp
        >>> amp.set_sharing_strategy("file_system")
        >>> amp.get_sharing_strategy()
        'file_system'
        >>> amp.set_sharing_strategy("file_descriptor")
        >>> try:
        ...     amp.set_sharing_strategy("bogus")
        ... except AssertionError as exc:
        ...     print(exc)
        invalid sharing strategy 'bogus', expected one of {'file_descriptor', 'file_system'}
    """
    global _strategy
    try:
        known = new_strategy in set(_STRATEGIES)
    except TypeError:
        raise TypeError("a sharing strategy is a string such as 'file_descriptor', got "
                        f"{type(new_strategy).__name__}") from None
    if not known:
        expected = "{" + ", ".join(repr(n) for n in _STRATEGIES) + "}"
        raise _InvalidStrategy(f"invalid sharing strategy {new_strategy!r}, expected one of "
                               f"{expected}")
    _strategy = new_strategy


_PR_SET_NAME, _PR_GET_NAME = 15, 16    # <linux/prctl.h>
_names = threading.local()             # where the OS has no thread names accelrt sets


def _set_thread_name(name: str | bytes) -> None:
    """Name the calling OS thread, as ``torch.multiprocessing._set_thread_name`` (what
    torch's DataLoader pin-memory thread calls with ``"pt_data_pin"``): what ``top -H``,
    ``ps -L`` and ``/proc/<pid>/task/<tid>/comm`` show. As torch's (``c10::setThreadName``),
    the name ends at a NUL and is cut to 15 bytes (Linux's limit); a new thread starts with
    its creator's OS name, not its ``threading`` name, which this does not change.

    Raises:
        TypeError: ``name`` is not a ``str`` or ``bytes`` (torch 2.15 aborts the process).

    Example::

        >>> import threading, accelrt.multiprocessing as amp
        >>> def named():
        ...     amp._set_thread_name("accelrt_worker_thread")
        ...     print(amp._get_thread_name())
        >>> t = threading.Thread(target=named); t.start(); t.join()
        accelrt_worker_
    """
    if isinstance(name, str):
        raw = name.encode("utf-8", "surrogateescape")
    elif isinstance(name, bytes):
        raw = name
    else:
        raise TypeError(f"_set_thread_name() takes a str (the thread's name), got "
                        f"{type(name).__name__}")
    raw = raw.split(b"\0", 1)[0][:15]
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_NAME, ctypes.c_char_p(raw), 0, 0, 0)
    else:
        _names.name = raw


def _get_thread_name() -> str:
    """The calling OS thread's name (``torch.multiprocessing._get_thread_name``): what
    :func:`_set_thread_name` set, else the name the thread was started with (on Linux its
    creator's, ``"python"`` for a Python program's threads).

    Example::

        >>> import accelrt.multiprocessing as amp
        >>> isinstance(amp._get_thread_name(), str)
        True
    """
    if sys.platform.startswith("linux"):
        buf = ctypes.create_string_buffer(16)
        ctypes.CDLL(None, use_errno=True).prctl(_PR_GET_NAME, buf, 0, 0, 0)
        raw = buf.value
    else:
        raw = getattr(_names, "name", b"")
    return raw.decode("utf-8", "replace")


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
