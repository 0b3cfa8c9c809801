"""Semantics every backend shares, written once: argument checks, handle look-up errors and
the rule for exceptions raised by queued work.

The rule (CUDA's, for host functions): the *first* exception raised by work queued on a
stream (a host function, or a copy a worker thread runs) is kept, and the next
synchronization that covers that stream (``stream_synchronize``, ``stream_query``,
``event_synchronize`` of an event recorded after it, ``synchronize`` of its device) raises it
once, as a :class:`~accelrt.DeviceError` naming the stream, with the original exception as its
``__cause__``. Later exceptions on the same stream before that are dropped.

Example::

    >>> from accelrt.backends._common import KeptErrors
    >>> kept = KeptErrors()
    >>> kept.keep("s1", ValueError("first")); kept.keep("s1", KeyError("second"))
    >>> try:
    ...     kept.raise_for(["s1"], lambda key: f"test: work on stream {key} failed")
    ... except Exception as exc:
    ...     print(type(exc).__name__, exc)
    DeviceError test: work on stream s1 failed: ValueError: first
    >>> kept.has("s1")
    False
"""

from __future__ import annotations

import itertools
import operator
import os
import threading
import weakref
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any, Generic, NoReturn, Protocol, SupportsIndex, TypeVar, cast

import numpy as np

from .._device import _index_arg
from .._errors import DeviceError, caused, shown, type_shown

__all__ = ["HandleTable", "KeptErrors", "bad_handle", "capture_refuses_sync", "check_byte",
           "check_index", "check_int", "check_ptr", "check_size", "check_u64", "fill_pattern",
           "reset_in_child", "stream_failed"]

_FILL_DTYPES: dict[int, Any] = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


class HandleTable(dict[int, T]):
    """The live objects of one kind (streams, events, graphs) by handle.

    Reads are plain ``dict`` reads (no lock: a handle is added before it is handed out and
    removed after its last use); :meth:`add` and :meth:`discard` take the backend's lock.
    Tables of one backend share ``counter``, so a handle names one object of any kind.

    Example::

        >>> import itertools, threading
        >>> from accelrt.backends._common import HandleTable
        >>> events = HandleTable(threading.Lock(), itertools.count(1))
        >>> h = events.add("an event"); events[h], events.get(h + 1)
        ('an event', None)
        >>> events.discard(h); h in events
        False
    """

    def __init__(self, lock: threading.Lock | threading.RLock,
                 counter: Iterator[int] | None = None) -> None:
        super().__init__()
        self._lock = lock
        self._counter = itertools.count(1) if counter is None else counter

    def add(self, obj: T) -> int:
        """Store ``obj`` under a new handle and return it."""
        with self._lock:
            handle = next(self._counter)
            self[handle] = obj
        return handle

    def discard(self, handle: int) -> None:
        """Forget ``handle`` (nothing if it is not here)."""
        with self._lock:
            self.pop(handle, None)


class KeptErrors(Generic[K]):
    """The first exception of the work queued on each stream (keyed by ``K``) until taken.

    Thread-safe without a lock: ``dict.setdefault`` and ``dict.pop`` are atomic, so a worker
    or driver thread may :meth:`keep` while another thread takes. A forked child may inherit
    it as is (there is no lock to reset).
    """

    __slots__ = ("_errors",)

    def __init__(self) -> None:
        self._errors: dict[K, BaseException] = {}

    def __bool__(self) -> bool:
        return bool(self._errors)

    def keep(self, key: K, exc: BaseException) -> None:
        """Keep ``exc`` for ``key`` unless an earlier one is still kept (the first wins)."""
        self._errors.setdefault(key, exc)

    def has(self, key: K) -> bool:
        """True while an exception is kept for ``key``."""
        return key in self._errors

    def take(self, key: K) -> BaseException | None:
        """Return and forget the exception kept for ``key`` (``None`` if there is none)."""
        return self._errors.pop(key, None)

    def raise_for(self, keys: Iterable[K], describe: Callable[[K], str]) -> None:
        """Raise (once) the exception kept for the first of ``keys`` that has one, as a
        ``DeviceError("<describe(key)>: <type>: <message>")`` caused by it."""
        if not self._errors:
            return
        for key in keys:
            exc = self._errors.pop(key, None)
            if exc is not None:
                _raise(describe(key), exc)

    def raise_first(self, match: Callable[[K], bool], describe: Callable[[K], str]) -> None:
        """Like :meth:`raise_for`, for the first kept key that ``match`` accepts."""
        if not self._errors:
            return
        for key in [k for k in list(self._errors) if match(k)]:
            exc = self._errors.pop(key, None)
            if exc is not None:
                _raise(describe(key), exc)


class ForkReset(Protocol):
    """An object with per-process state (a worker thread, a driver context)."""

    def _after_fork(self) -> None:
        """Forget what the parent's threads or driver held (runs in a forked child)."""


#: The objects whose ``_after_fork`` runs in a forked child (weakly held).
_fork_resets: weakref.WeakSet[Any] = weakref.WeakSet()
F = TypeVar("F", bound=ForkReset)


def reset_in_child(obj: F) -> F:
    """Have ``obj._after_fork()`` run in a child made by ``os.fork()`` while ``obj`` lives
    (the cpu's streams forget their worker threads, the opencl backend its contexts); return
    ``obj``."""
    _fork_resets.add(obj)
    return obj


def _after_fork_in_child() -> None:
    for obj in list(_fork_resets):
        obj._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _raise(what: str, exc: BaseException) -> NoReturn:
    raise caused(DeviceError(f"{what}: {type(exc).__name__}: {exc}"), exc) from exc


def check_int(value: object, what: str) -> int:
    """``value`` as a plain int if it is an int (``bool`` is not); TypeError ``"<what> must be
    an int, got <type>"`` otherwise. An instance of a subclass of ``int`` is read by its value,
    whatever its ``__index__`` or ``__int__`` say, as this module's compiled build (mypyc)
    and PyTorch's C++ read it: the pure build passed the instance on, and numpy's conversion
    of it (OpenCL's ``memset`` value) called those methods.

    Example::

        >>> from accelrt.backends._common import check_int
        >>> check_int(-1, "stream priority")
        -1
        >>> class Lying(int):
        ...     def __index__(self) -> int:
        ...         return 2**64
        >>> type(check_int(Lying(7), "memset value")), check_int(Lying(7), "memset value")
        (<class 'int'>, 7)
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, got {type_shown(value)}")
    return value if type(value) is int else int.__index__(value)


def check_u64(value: Any, what: str) -> int:
    """``value`` as an int in ``[0, 2**64)`` (numpy integers too, ``bool`` not): a Philox seed
    or counter offset; TypeError or ValueError naming ``what`` otherwise.

    Example::

        >>> from accelrt.backends._common import check_u64
        >>> check_u64(2**64 - 1, "offset") == 2**64 - 1
        True
    """
    v = _index_arg(value, what)
    if not 0 <= v < 1 << 64:
        raise ValueError(f"{what} must be in [0, 2**64), got {shown(v)}")
    return v


def check_index(index: object, n: int, family: str, detail: str) -> int:
    """``index`` if it is an int in ``[0, n)``; TypeError for a non-int (``bool`` included),
    IndexError ``"<family> device index <i> is out of range; <detail>"`` otherwise.

    Example::

        >>> from accelrt.backends._common import check_index
        >>> check_index(1, 2, "cpu", "there are 2 devices")
        1
    """
    i = check_int(index, "device index")
    if not 0 <= i < n:
        raise IndexError(f"{family} device index {i} is out of range; {detail}")
    return i


def check_ptr(ptr: object, what: str = "pointer") -> int:
    """``ptr`` if it is a positive int address below ``2**64``; TypeError or ValueError naming
    ``what``. (A larger int is no address: ctypes would wrap it modulo ``2**64``, so a host
    copy through it would write to a small, unmapped address and crash the process.)

    Example::

        >>> from accelrt.backends._common import check_ptr
        >>> check_ptr(4096)
        4096
    """
    if isinstance(ptr, bool) or not isinstance(ptr, int):   # (inline: every memcpy runs it)
        raise TypeError(f"{what} must be an int address, got {type_shown(ptr)}")
    if ptr <= 0 or ptr >> 64:
        raise ValueError(f"{what}={ptr} is not a valid address; an address is an int in "
                         "[1, 2**64)")
    return ptr


def check_size(size: object, what: str = "size", allow_zero: bool = False) -> int:
    """Return ``size`` as an int, checking its type and value.

    Raises:
        TypeError: ``size`` is not an integer.
        ValueError: ``size`` is negative (or zero when ``allow_zero`` is False).

    Example::

        >>> from accelrt.backends._common import check_size
        >>> check_size(8)
        8
    """
    if type(size) is int:   # the common case: no numpy attribute read on every backend call
        value = size
    else:
        if isinstance(size, (bool, np.bool_)):   # numpy < 2.4 indexes np.bool_
            raise TypeError(f"{what} must be an int, got bool")
        try:
            value = operator.index(cast("SupportsIndex", size))
        except TypeError:
            raise caused(TypeError(f"{what} must be an int, got {type_shown(size)}"),
                         None) from None
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{what}={value} must be {bound}")
    return int(value)


def bad_handle(kind: str, handle: object, where: str, fix: str) -> Exception:
    """The error for a ``kind`` handle (``"stream"``, ``"event"``) that names nothing live:
    TypeError for a non-int, else ValueError ``"<kind> handle <h> is not a live <kind><where>;
    <fix>"``.

    Example::

        >>> from accelrt.backends._common import bad_handle
        >>> str(bad_handle("event", 7, " of cpu:0", "use a handle from event_create"))
        'event handle 7 is not a live event of cpu:0; use a handle from event_create'
    """
    if isinstance(handle, bool) or not isinstance(handle, int):
        return TypeError(f"{kind} handle must be an int, got {type_shown(handle)}")
    return ValueError(f"{kind} handle {handle} is not a live {kind}{where}; {fix}")


def stream_failed(name: str, handle: int, device: int) -> str:
    """How a failure of the work of stream ``handle`` of device ``device`` of the backend
    registered as ``name`` begins (kept errors, ``DeviceError``).

    Example::

        >>> from accelrt.backends._common import stream_failed
        >>> stream_failed("cpu", 3, 1)
        'cpu: work on stream 3 of cpu:1 failed'
    """
    return f"{name}: work on stream {handle} of {name}:{device} failed"


def check_byte(value: object) -> int:
    """``value`` if it is an int byte (``memset``'s value); TypeError or ValueError otherwise.

    Example::

        >>> from accelrt.backends._common import check_byte
        >>> check_byte(255)
        255
    """
    byte = check_int(value, "memset value")
    if not 0 <= byte <= 255:
        raise ValueError(f"memset value={byte} must be a byte value in [0, 255]")
    return byte


def fill_pattern(pattern: object) -> tuple[bytes, Any]:
    """``(pattern as bytes, the numpy unsigned dtype of its width)`` for ``fill``: TypeError
    for a non-bytes pattern, ValueError unless it is 1, 2, 4 or 8 bytes long.

    Example::

        >>> from accelrt.backends._common import fill_pattern
        >>> fill_pattern(b"ab")
        (b'ab', <class 'numpy.uint16'>)
    """
    if not isinstance(pattern, (bytes, bytearray, memoryview)):
        raise TypeError(f"fill pattern must be bytes, got {type_shown(pattern)}")
    data = bytes(pattern)
    dtype = _FILL_DTYPES.get(len(data))
    if dtype is None:
        raise ValueError(f"fill pattern is {len(data)} bytes long; it must be 1, 2, 4 or 8 bytes")
    return data, dtype


def capture_refuses_sync(backend: str, device: str, stream: str, began_in: int, mode: str,
                         thread: int) -> str | None:
    """Why a capture of ``stream`` (on ``device`` of ``backend``), begun in thread
    ``began_in`` in capture ``mode``, forbids thread ``thread`` a synchronize of the device,
    or None where it does not: CUDA's rule for a thread in the default (global) interaction
    mode (docs/graphs.md): its own capture forbids it unless begun ``"relaxed"``, another
    thread's only if begun ``"global"``. The cpu and cuda backends refuse with it.

    Example::

        >>> from accelrt.backends._common import capture_refuses_sync
        >>> capture_refuses_sync("cpu", "cpu:0", "7", 1, "thread_local", 2) is None
        True
        >>> capture_refuses_sync("cpu", "cpu:0", "7", 1, "global", 2)[:40]
        'cpu: synchronize is not permitted while '
    """
    own = began_in == thread
    if (mode == "relaxed") if own else (mode != "global"):
        return None
    whose = ("begun in this thread" if own else
             "begun in another thread with capture_error_mode 'global'")
    fix = ("capture with capture_error_mode 'relaxed' to allow it" if own else
           "or capture with 'thread_local' to allow other threads' calls")
    return (f"{backend}: synchronize is not permitted while stream {stream} of {device} is "
            f"capturing a graph ({whose}); end the capture first, {fix}")
