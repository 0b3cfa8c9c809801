"""``accelrt.Stream`` and the per-thread current stream: ``current_stream``, ``set_stream``,
``synchronize``.

Each thread has, per ``(backend, device)``, a current stream: the device's default stream
until :func:`set_stream` or ``with stream:`` changes it. Streams made by :class:`Stream` come
from a per-device pool of backend streams: a handle goes back to the pool when its
:class:`Stream` is closed (:meth:`Stream.close`) or collected, so creating streams in a loop
is cheap and never leaks.

Internal API (see ``docs/architecture.md``): ``Stream._b`` (backend), ``Stream._index`` (device
index), ``Stream._handle`` (raw handle); :func:`_current` returns the thread's current stream
of a device; :func:`_wrap` makes a non-owning :class:`Stream` for a known handle.

Example::

    >>> import accelrt as acc
    >>> s = acc.Stream("cpu")
    >>> with s:
    ...     acc.current_stream("cpu") == s
    True
    >>> acc.current_stream("cpu") == s
    False
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, ClassVar, cast

from . import _backend_registry, _checked
from . import _device as _dev
from . import _sync_debug as _sd
from ._device import (_get_device, _get_device_of, _lazy_init, _plain_int,
                      _require_current, _tls)
from ._device_form import _int64_arg
from ._errors import AcceleratorError, shown, type_shown
from ._fork import reinit_after_fork
from ._handles import StreamHandle
from . import _stream_core
from ._device_core import _key_of
from ._stream_core import _from_pool, _initialized, _release, _StreamCore

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._backend import Backend
    from ._event import Event
    from ._typing import DeviceLike

__all__ = ["Stream", "current_stream", "set_stream", "synchronize"]

class _Classes:
    """The classes of modules that import this one, set by them when they are imported (an
    import inside a method costs more than the rest of ``record_event``). A stream can be
    used before any of them was (``acc.current_stream().record_event()`` first thing in a
    process): the first lookup of a class not yet set imports its module, which sets it."""

    Event: type[Event]

    def __getattr__(self, name: str) -> Any:   # only while the attribute is not set
        if name == "Event":
            from . import _event   # sets self.Event
            return _event.Event
        raise AttributeError(name)


_classes = _Classes()



class _DevicePool:
    """Free stream handles of one device, per priority (list append/pop are atomic)."""

    __slots__ = ("b", "free", "free0", "hi", "index", "key", "lo", "owned")

    def __init__(self, b: Backend, index: int) -> None:
        got: Any = b.stream_priority_range(index)
        if type(got) is not tuple or len(got) != 2 or not all(type(v) is int for v in got):
            raise _checked.returned(b, ("stream_priority_range", (index,)), got,
                                    "not a (least, greatest) pair of ints")
        least, greatest = got
        self.b = b
        self.index = index
        self.lo = min(least, greatest)   # numerically smallest = highest priority
        self.hi = max(least, greatest)   # numerically largest = lowest priority
        self.key = _key_of(b.name, index)     # the key of its streams
        self.free0: list[StreamHandle] = []   # priority 0 (the fast path)
        self.free: dict[int, list[StreamHandle]] = {0: self.free0}
        #: handles stream_create gave and stream_destroy has not taken back (in use or free)
        self.owned: set[int] = set()

    def create(self, prio: int) -> StreamHandle:
        """A new backend stream, checked (:mod:`accelrt._checked`): a handle that is neither
        the default stream nor a stream of this device that is not destroyed.

        Raises:
            DeviceError: the backend's ``stream_create`` raised an exception that is not
                accelrt's (chained), or returned a bad handle; the message names the backend.
        """
        b = self.b
        call: _checked.Call = ("stream_create", (self.index, prio))
        value = _checked.call_raw(b, "stream_create", b.stream_create, self.index, prio)
        why = ("the handle of the default stream or of a stream it created before and has not "
               "destroyed; each new stream needs its own handle")
        handle = _checked.handle(b, call, value, "a stream handle", nonzero=False,
                                 held=self.owned, why_held=why)
        # the default stream's handle, without making its object: no lock here (an
        # allocator's free comes here holding its own lock, see _malloc_async._free_unified)
        d = _default_of(self.key[0], self.index)
        default: object = d._handle if d is not None and d._b is b else b.default_stream(
            self.index)
        if type(default) is int and handle == default:   # (not a copy of owned with it added)
            raise _checked.returned(b, call, handle, why)
        self.owned.add(handle)
        return StreamHandle(handle)

    def destroy(self, handle: StreamHandle) -> None:
        """Give a handle of :meth:`create` back to the backend."""
        self.owned.discard(handle)
        self.b.stream_destroy(self.index, handle)


# backend -> device index -> pool; guarded by _pools_lock for writes, read without it
_pools: dict[Backend, dict[int, _DevicePool]] = {}
#: Re-entrant, as :data:`_close_lock`: a collection inside a region that holds it may run a
#: finaliser (a stream's, an allocation's free) that takes it again in this thread. (Those
#: paths take it only to make a pool: :func:`_pool` and :func:`_destroy_in_pool` look pools up
#: without it.)
_pools_lock = reinit_after_fork(threading.RLock())
#: Guards the closed flags of streams, events and graphs in ``close()`` (the compiled core's
#: lock: ``with stream:`` waits on it for a racing close)
_close_lock = _stream_core._close_lock
_closing = _stream_core._closing
_ZERO = 0  # ``priority is _ZERO``: the int 0 (small ints are cached), a fast path only


def _forget_backend(name: str) -> None:
    """Called by the registry after backend ``name`` was registered again or unregistered
    (:func:`accelrt.backends.on_change`): forget what the core made of instances the name no
    longer refers to, which kept them alive: their default stream objects, their stream pools
    (the free handles in them are destroyed; streams still open keep working and keep their
    instance, and their handles are destroyed when they are closed or collected:
    :data:`_stream_core._dropped`) and their empty tables of held events and graphs. (The
    instance a replacing factory makes is not known yet: one that returns the same object
    makes its pools and default streams again.)"""
    current = _backend_registry._instances.get(name)
    with _pools_lock:
        _stream_core._forget_defaults(name, current)
        dropped = [_pools.pop(b) for b in [b for b in _pools
                                           if b.name == name and b is not current]]
        for per in dropped:
            for pool in per.values():
                for free in pool.free.values():
                    _dropped[id(free)] = pool
    for per in dropped:
        for pool in per.values():
            _drain(pool)
    _checked.forget(name, current)


#: the dropped pools' free lists (see :func:`_forget_backend`)
_dropped = _stream_core._dropped


def _drain(pool: _DevicePool) -> None:
    """Destroy the free handles of ``pool``, which :func:`_forget_backend` dropped, and forget
    it once it owns no handle (its streams were all given back) or its backend is closed.
    (No lock: a stream's finaliser may call it inside a region that holds ``_pools_lock``;
    each step is one atomic list or dict operation.)"""
    lists = list(pool.free.values())
    if not pool.b.closed:   # (close() released its handles)
        for free in lists:
            while free:
                try:
                    handle = free.pop()   # (one step: a racing user takes another)
                except IndexError:
                    break
                try:
                    pool.destroy(handle)
                except Exception:  # noqa: BLE001, S110 - a broken backend's error:
                    pass           # register()/unregister() already happened
    if not pool.owned or pool.b.closed:
        for free in lists:
            _dropped.pop(id(free), None)


def _destroy_in_pool(b: Backend, index: int, handle: StreamHandle,
                     free: list[StreamHandle]) -> bool:
    """:func:`_stream_core._give_back`'s step for a handle given back to ``free``, a full free
    list: destroy it through the pool of device ``index`` of ``b`` that ``free`` belongs to, and
    return True; False if that pool is not in :data:`_pools` (:func:`_forget_backend` dropped
    it, or is dropping it: the caller puts the handle in ``free``, where dropping destroys it).
    (No lock, and never makes a pool: a stream's finaliser comes here.)"""
    per = _pools.get(b)
    pool = per.get(index) if per is not None else None
    if pool is None or not any(f is free for f in list(pool.free.values())):
        return False
    pool.destroy(handle)
    return True


def _drain_dropped(free: list[StreamHandle]) -> None:
    """:func:`_stream_core._give_back`'s step for a handle given back to ``free``, a list of a
    dropped pool: destroy it (and whatever else is free there)."""
    pool = _dropped.get(id(free))
    if pool is not None:
        _drain(pool)


def _int_arg(name: str, value: object) -> int:
    """``value`` as a plain int (:func:`~accelrt._device._plain_int`) if it is an ``int``
    (not a ``bool``).

    Raises:
        TypeError: it is not.
    """
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type_shown(value)}")
    return _plain_int(value)


#: The :func:`_give_back` listeners (the compiled core's, with the pool size
#: ``_stream_core._POOL_MAX``: a stream's finaliser gives its handle back there)
_given_back = _stream_core._given_back
_give_back = _stream_core._give_back


def _on_give_back(fn: Callable[[Backend, int, StreamHandle], None]) -> None:
    """Have ``fn(b, index, handle)`` called after every :func:`_give_back` (once per ``fn``)."""
    with _pools_lock:
        if fn not in _given_back:
            _given_back.append(fn)


def _in_use(b: Backend, index: int, handle: StreamHandle) -> bool:
    """True if ``handle`` is a live stream of device ``index`` of ``b`` that is not a stream
    accelrt made and took back (a closed or collected :class:`Stream`'s, free in its pool or
    destroyed): what a module may keep using that took the handle from elsewhere."""
    if not b.stream_is_valid(index, handle):
        return False
    per = _pools.get(b)
    pool = per.get(index) if per is not None else None
    if pool is None or handle not in pool.owned:
        return True   # not accelrt's: the default stream, or a foreign one the backend knows
    return not any(handle in free for free in list(pool.free.values()))


def _user(s: Stream) -> str | None:
    """Which thread uses ``s`` as a current stream, for :meth:`Stream.close`: ``"this
    thread"`` or ``"another thread"`` if a thread made a stream equal to it (``s`` itself, a
    device module's view of it, an object wrapping its handle) current with :func:`set_stream`
    or ``with``, or will make one current again at the end of a ``with`` block it is in; else
    None."""
    key = s._key
    for ref in list(_dev._all_streams):   # list(): one step, while threads come and go
        st = ref()
        if st is None:
            continue
        cur = st.stream.get(key)
        found = cur is not None and cur == s
        if not found and len(st.entered) > 1:   # (above the bottom entry)
            # (stream entered, previous device, previous stream that the exit restores)
            found = any(x is not None and x == s for e in list(st.entered) for x in (e[0], e[2]))
        if found:
            return "this thread" if st is _tls.streams else "another thread"
    return None


def _pool(b: Backend, index: int) -> _DevicePool:
    """The stream pool of device ``index`` of ``b``, made at its first use. Looked up without
    a lock (an allocator's free calls this, from a finaliser too); made outside the lock (it
    asks the backend for its priority range) and put in :data:`_pools` under it, where a pool
    another thread (or a finaliser of this one) put first wins."""
    per = _pools.get(b)
    p = per.get(index) if per is not None else None
    if p is not None:
        return p
    made = _DevicePool(b, index)
    new_per: dict[int, _DevicePool] = {}   # (made here too: no allocation under the lock)
    with _pools_lock:
        return _pools.setdefault(b, new_per).setdefault(index, made)


def _pool_of_current(b: Backend, index: int) -> None:
    """Make the stream pool of device ``index`` of ``b`` if ``b`` is the instance registered
    under its name now (a pool made for an instance the name no longer names would keep it
    alive for ever): what the stream-ordered allocator's ``record_stream`` calls before it
    takes its lock, so that the free after takes no other lock under its own."""
    per = _pools.get(b)
    if (per is None or index not in per) and _backend_registry._instances.get(b.name) is b:
        _pool(b, index)


class Stream(_StreamCore):
    """An ordered queue of work on one device (a CUDA stream, an OpenCL queue, ...).

    ``Stream(device=None, *, priority=0)`` makes a new stream on ``device`` (the current
    device of the current accelerator by default; ``"cpu:1"`` names another backend's device).
    ``Stream(stream_id=h, device_index=i, device_type="cpu")`` wraps an existing backend stream
    without owning it.

    Open streams compare equal when they have the same backend, device index and handle; a
    closed stream is equal only to itself (its handle may serve another stream now). Streams
    are hashable (the hash does not change on close) and cannot be ordered. ``with stream:`` makes the stream current on its device and
    makes its device the current device of its backend, restoring both on exit (re-entrant,
    nestable and per thread).

    Args:
        device: the device of the new stream.
        priority: lower numbers are higher priorities, as in CUDA; must lie in the device's
            range (``0`` always does).
        stream_id: raw handle of an existing stream to wrap (with ``device_index`` and
            ``device_type``).
        device_index: device index of the wrapped stream.
        device_type: backend name of the wrapped stream, e.g. ``"cpu"``.

    Raises:
        TypeError: an argument has the wrong type, or only some of ``stream_id``,
            ``device_index``, ``device_type`` are given.
        ValueError: ``priority`` is out of range, ``stream_id`` is not a live stream, or a
            device-specific class (``accelrt.cpu.Stream``) is asked to wrap another backend's
            stream.
        IndexError: the device index is out of range.

    Calling ``__init__`` again on a stream object does nothing (the object keeps its stream),
    as for ``torch.cuda.Stream``, which is built in ``__new__``.

    .. note:: A stream made here is returned to a per-device pool (not destroyed) when it is
        closed (:meth:`close`) or collected; its handle may later serve a new :class:`Stream`,
        exactly as a destroyed CUDA stream's handle may be reused. Wrapped streams are never
        destroyed. ``with stream:`` keeps PyTorch's meaning (make the stream current); use
        ``contextlib.closing(stream)`` to close a stream at the end of a block.

    Example::

        >>> import accelrt as acc
        >>> s = acc.Stream("cpu:0")
        >>> s.device_type, s.device_index, s.query()
        ('cpu', 0, True)
        >>> acc.Stream(stream_id=s.stream_id, device_index=0, device_type="cpu") == s
        True
    """

    __slots__ = ("__weakref__",)
    # The fields (their meaning: _stream_core._StreamCore) and the argument-free hot methods
    # (with stream:, query(), synchronize()) are the compiled core's; every method that checks
    # an argument stays here, in pure Python.

    #: Fixed backend name for device-specific subclasses (``accelrt.cpu.Stream``).
    _backend_name: ClassVar[str | None] = None

    def __init__(self, device: DeviceLike = None, *, priority: int = 0,
                 stream_id: int | None = None, device_index: int | None = None,
                 device_type: str | None = None) -> None:
        if stream_id is None and device_index is None and device_type is None \
                and self._backend_name is None and _from_pool(self, device, priority, _pools):
            return   # made already, or the common case (compiled): a pooled handle
        if _initialized(self):
            return   # as torch.cuda.Stream: a second __init__ changes nothing (see above)
        if stream_id is not None or device_index is not None or device_type is not None:
            self._init_foreign(device, priority, stream_id, device_index, device_type)
            return
        if device is None and self._backend_name is None:
            b = _dev._current_backend
            if b is None:
                b = _require_current()
            index = _tls.device.get(b.name, 0)
        else:
            b, index = _get_device_of(device, self._backend_name)
        per = _pools.get(b)
        pool = per.get(index) if per is not None else None
        if pool is None:
            pool = _pool(b, index)
        prio = 0
        if priority is _ZERO:
            free = pool.free0
        else:
            prio = _int64_arg(priority, "priority")
            if not pool.lo <= prio <= pool.hi:
                raise ValueError(
                    f"priority={shown(prio)} is out of range [{pool.lo}, {pool.hi}] for "
                    f"{b.name}:{index} (lower numbers are higher priorities)")
            found = pool.free.get(prio)
            if found is None:
                with _pools_lock:
                    found = pool.free.setdefault(prio, [])
            free = found
        try:
            handle = free.pop()
        except IndexError:
            _lazy_init(b, index)
            handle = pool.create(prio)
        self._set(b, pool.key, handle, prio, free)

    def _init_foreign(self, device: object, priority: object, stream_id: object,
                      device_index: object, device_type: object) -> None:
        if stream_id is None or device_index is None or device_type is None:
            raise TypeError("Stream(stream_id=..., device_index=..., device_type=...) needs all "
                            "three keyword arguments to wrap an existing stream")
        if device is not None or (priority is not _ZERO
                                  and _int64_arg(priority, "priority") != 0):
            raise TypeError("Stream(stream_id=...) wraps an existing stream: do not also pass "
                            "device or priority")
        sid, device_index = _int_arg("stream_id", stream_id), _int_arg("device_index", device_index)
        if not isinstance(device_type, str):
            raise TypeError(f"device_type must be a backend name such as 'cpu', got "
                            f"{type_shown(device_type)}")
        if device_index < 0:
            raise ValueError(f"device_index must not be negative, got {shown(device_index)}")
        fixed = self._backend_name
        if fixed is not None and device_type != fixed:
            raise ValueError(f"{type(self).__module__}.Stream wraps {fixed} streams, not "
                             f"{device_type} ones; use accelrt.Stream(stream_id=...)")
        # a new device, not _device_obj's cached one: the caller's index is not checked yet
        b, index = _get_device(_dev.device(device_type, device_index))
        handle = StreamHandle(sid)
        if not b.stream_is_valid(index, handle):
            raise ValueError(f"stream_id={handle:#x} is not a live stream of "
                             f"{device_type}:{device_index}")
        self._set(b, _key_of(b.name, index), handle, 0, None)

    def __del__(self) -> None:
        # Give an owned handle back to its pool, or destroy it when the pool is full. (Python,
        # not the core's: CPython's finaliser of a Python method keeps an exception being
        # raised aside while it runs, mypyc's does not; docs/memory.md.)
        try:
            _release(self)   # (compiled)
        except Exception:  # noqa: BLE001, S110 - never raise from a finaliser (at shutdown);
            pass           # AttributeError: __init__ failed before the fields were set

    # ------------------------------------------------------------------ fields
    @property
    def stream_id(self) -> int:
        """The raw backend handle of the stream (an ``int``).

        Raises:
            ClosedError: the stream was closed (its handle may serve another stream now).
        """
        if self._closed:
            self._check_open()
        return self._handle

    @property
    def native_handle(self) -> int:
        """The backend's native handle of the stream (``torch.Stream.native_handle``): the
        ``CUstream`` on cuda, the simulated stream's handle on cpu, accelrt's handle of the
        command queue on opencl; the same ``int`` as :attr:`stream_id`, so
        ``Stream(stream_id=s.native_handle, ...)`` wraps the same stream again.

        Raises:
            ClosedError: the stream was closed.

        Example::

            >>> import accelrt as acc
            >>> s = acc.Stream("cpu")
            >>> s.native_handle == s.stream_id
            True
        """
        return self.stream_id

    @property
    def device_index(self) -> int:
        """Index of the stream's device."""
        return self._index

    @property
    def device_type(self) -> str:
        """Backend name of the stream's device, e.g. ``"cpu"``."""
        return self._b.name

    @property
    def device(self) -> _dev.device:
        """The stream's device as an :class:`accelrt.device`."""
        return _dev._device_obj(self._b.name, self._index)

    @property
    def priority(self) -> int:
        """The priority the stream was made with (``0`` for wrapped and default streams)."""
        return self._priority

    @property
    def __cuda_stream__(self) -> Callable[[], tuple[int, int]]:
        """The CUDA stream protocol (CuPy, PyTorch, cuda.core): on a cuda stream, a callable
        returning ``(0, handle)`` (protocol version 0 and the raw ``CUstream``).

        Raises:
            AttributeError: the stream is not a cuda stream, so ``hasattr(s,
                "__cuda_stream__")`` is False and other libraries do not mistake it for one.

        Example::

            >>> import accelrt as acc
            >>> hasattr(acc.Stream("cpu"), "__cuda_stream__")
            False
        """
        if not self._b.capabilities(self._index).cuda_stream_protocol:
            raise AttributeError(f"a {self._b.name} stream does not implement the CUDA stream "
                                 "protocol (__cuda_stream__); only cuda streams do")
        self._check_open()
        handle = self._handle

        def __cuda_stream__() -> tuple[int, int]:
            return (0, handle)

        return __cuda_stream__

    # ------------------------------------------------------------------ operations
    def is_capturing(self) -> bool:
        """True while a graph capture records the work submitted to this stream
        (``torch.Stream.is_capturing``).

        Example::

            >>> import accelrt as acc
            >>> s, x = acc.Stream("cpu"), acc.zeros(4, device="cpu")
            >>> g = acc.cpu.Graph()
            >>> with s, acc.cpu.graph(g, stream=s):
            ...     _ = x.fill_(1.0)
            ...     s.is_capturing()
            True
            >>> s.is_capturing()
            False
        """
        self._check_open()
        return bool(self._b.stream_is_capturing(self._index, self._handle))

    def wait_event(self, event: Event) -> None:
        """Make all future work on this stream wait for ``event``'s last record.

        A no-op if the event was never recorded (as in PyTorch).

        Raises:
            TypeError: ``event`` is not an :class:`accelrt.Event`.
            ValueError: the event belongs to another backend.

        Example::

            >>> import accelrt as acc
            >>> s = acc.Stream("cpu")
            >>> s.wait_event(acc.current_stream("cpu").record_event())
        """
        if not isinstance(event, _classes.Event):
            raise TypeError(f"wait_event() takes an accelrt.Event, got {type_shown(event)}")
        event.wait(self)   # checks that both are open

    def wait_stream(self, stream: Stream) -> None:
        """Make all future work on this stream wait for the work submitted so far to ``stream``.

        Raises:
            TypeError: ``stream`` is not an :class:`accelrt.Stream`.
            ValueError: the streams belong to different backends.

        Example::

            >>> import accelrt as acc
            >>> a, b = acc.Stream("cpu"), acc.Stream("cpu")
            >>> a.wait_stream(b)
        """
        self._wait_stream(stream)   # (it checks ``stream``)

    def record_event(self, event: Event | None = None) -> Event:
        """Record ``event`` (a new one if ``None``) on this stream and return it.

        Example::

            >>> import accelrt as acc
            >>> e = acc.Stream("cpu").record_event()
            >>> e.query()
            True
        """
        self._check_open()
        if event is None:
            event = _classes.Event._on(self._b, self._index)   # Event(self.device), checked
        elif not isinstance(event, _classes.Event):
            raise TypeError(f"record_event() takes an accelrt.Event or None, got "
                            f"{type_shown(event)}")
        event.record(self)
        return event

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Give the stream back now instead of when the object is collected (cuda.core's
        ``Stream.close``); idempotent.

        A stream made by :class:`Stream` returns its handle to the per-device pool (or
        destroys it when the pool is full), as collecting it does. Work already queued on it
        is neither waited for nor lost: it still runs, in order, and
        :func:`accelrt.synchronize` of the device and frees of memory it uses wait for it as
        for any stream's work (a handle reused from the pool runs new work after it). Call
        :meth:`synchronize` first to wait for it, or to see errors raised by host functions it
        runs. A stream that accelrt does not own (one wrapped with ``stream_id=``, an
        ``ExternalStream``) is never destroyed: only this object is closed. The default
        stream objects that :func:`current_stream` shares are not closed at all (``close()``
        does nothing on them).

        After ``close()`` every operation on the object raises :class:`accelrt.ClosedError`.
        ``with stream:`` keeps PyTorch's meaning (make it current) and does not close it; use
        ``contextlib.closing(stream)`` for a block that closes it.

        Raises:
            AcceleratorError: the stream, or a stream equal to it (a device module's view,
                a wrapper of its handle), is a current stream of any thread
                (:func:`set_stream`, ``with stream:``) or becomes one again when a ``with``
                block that thread is in ends, or a graph capture is recording its work; leave
                or end that first (closing would let its handle serve another stream while
                still in use).

        Example::

            >>> import accelrt as acc
            >>> s = acc.Stream("cpu")
            >>> s.close(); s.close()
            >>> s.is_closed
            True
            >>> try:
            ...     s.synchronize()
            ... except acc.ClosedError as e:
            ...     print("closed")
            closed
        """
        key = self._key
        if self._free is not None and not self._closed \
                and self._b.stream_is_capturing(self._index, self._handle):
            raise AcceleratorError(
                f"cannot close a stream of {key[0]}:{key[1]} while a graph captures its work; "
                "end the capture (capture_end()) first")
        with _close_lock:   # two threads closing at once must not pool the handle twice
            if self._closed or _default_of(key[0], key[1]) is self:
                return   # closed already, or the shared default stream object: never closed
            _closing[0] += 1   # before looking: a thread making it current sees this
            try:
                user = _user(self)
                if user is not None:
                    raise AcceleratorError(
                        f"cannot close the current stream of {key[0]}:{key[1]} ({user}): "
                        "leave 'with stream:' or make another stream current with "
                        "set_stream() first")
                self._closed = True
            finally:
                _closing[0] -= 1
            free, self._free = self._free, None
        if free is None:
            return   # not ours: only this object is closed
        _give_back(self._b, self._index, self._handle, free)

    @property
    def is_closed(self) -> bool:
        """True once :meth:`close` closed this object (or, for a device module's view, the
        stream it views).

        Example::

            >>> import accelrt as acc
            >>> acc.Stream("cpu").is_closed
            False
        """
        origin = self._origin
        return self._closed or (origin is not None and origin._closed)

    # ------------------------------------------------------------------ identity
    def __eq__(self, other: object) -> bool:
        """Open streams are equal when they have the same backend, device and handle; a
        closed one only to itself, since its handle may serve another stream now.

        Example::

            >>> import accelrt as acc
            >>> s = acc.Stream("cpu"); s.close()
            >>> t = acc.Stream("cpu")           # may reuse s's handle
            >>> s == s, s == t
            (True, False)
        """
        if self is other:
            return True
        if isinstance(other, Stream):
            return (self._handle == other._handle and self._index == other._index
                    and self._b is other._b and not self.is_closed and not other.is_closed)
        return NotImplemented

    def __hash__(self) -> int:
        # the same over the object's lifetime (close() does not change it), so a stream put in
        # a dict or set while open is still found there after close()
        return hash((self._b.name, self._index, self._handle))

    def __repr__(self) -> str:
        # torch.cuda.Stream's shape; a device module's subclass prints as its own type (and
        # names the handle cuda_stream where that class has such an attribute, as torch does)
        cls: Any = type(self)   # Any: mypyc reads __module__ of a class object only so
        mod = "accelrt" if cls.__module__ == __name__ else cls.__module__
        field = "cuda_stream" if hasattr(cls, "cuda_stream") else "stream_id"
        closed = " closed" if self._closed else ""
        return (f"<{mod}.{cls.__qualname__} device={self._b.name}:{self._index} "
                f"{field}={self._handle:#x}{closed}>")

    def __reduce__(self) -> Any:
        raise TypeError("accelrt.Stream cannot be pickled: a stream handle is only valid in "
                        "the process that made it")


def _wrap(b: Backend, index: int, handle: StreamHandle) -> Stream:
    """A non-owning :class:`Stream` for a known-valid ``handle`` (no validation)."""
    s: Stream = cast("Any", Stream).__new__(Stream)   # mypyc: no typed Stream.__new__
    s._set(b, _key_of(b.name, index), handle, 0, None)
    return s


#: The default stream object of a device made so far (``(name, index)``), or None: the
#: compiled core's table (its current-stream reads look there), holding only Stream objects
#: (:func:`_default` fills it)
_default_of = cast("Callable[[str, int], Stream | None]", _stream_core._default_of)
#: The calling thread's current stream of device ``index`` of ``b`` (internal API), and
#: :func:`current_stream`'s common cases: the compiled core's functions, typed for this module
#: (its streams are :class:`Stream` objects)
_current = cast("Callable[[Backend, int], Stream]", _stream_core._current)
_current_hit = cast("Callable[[object], Stream | None]", _stream_core._current_hit)
#: Make future work on one raw stream wait for the work queued so far on another (the
#: compiled core's): the one helper arrays, collectives and interop order raw streams with
_wait_raw = _stream_core._wait_raw


def _default(b: Backend, key: tuple[str, int]) -> Stream:
    """The default stream of device ``key[1]`` of ``b``: cached in the table of default
    streams (``_stream_core._defaults``) if ``b`` is the instance registered under its name
    now; an instance that name no longer refers to gets a new object each time, never stored
    there (its entry would replace the registered instance's, and the entry flip between the
    two)."""
    s = _default_of(key[0], key[1])
    if s is None or s._b is not b:
        handle = _checked.handle(b, ("default_stream", (key[1],)), b.default_stream(key[1]),
                                 "a stream handle", nonzero=False)
        made = _wrap(b, key[1], StreamHandle(handle))
        with _pools_lock:   # threads using it first at once share one object (never closed)
            s = _default_of(key[0], key[1])
            if s is None or s._b is not b:
                s = made
                # (under the lock: a register() that comes after this test drops the entry
                # in _forget_backend, which takes the lock too)
                if _backend_registry._instances.get(key[0]) is b:
                    _stream_core._set_default(key[0], key[1], s)
    return s


def current_stream(device: DeviceLike = None, /) -> Stream:
    """The calling thread's current stream of ``device``.

    Args:
        device: an index of the current accelerator, a device or string (``"cpu:1"``; may
            name another backend), or ``None`` or -1 for the current device (as
            ``torch.accelerator.current_stream(-1)``).

    Returns:
        the stream set by :func:`set_stream` or ``with stream:``, else the default stream.

    Example::

        >>> import accelrt as acc
        >>> acc.current_stream("cpu").device_type
        'cpu'
    """
    s = _current_hit(device)   # the common cases (compiled in the compiled build)
    if s is not None:
        return s
    b, index = _get_device(device, minus_one=True)
    return _current(b, index)


def set_stream(stream: Stream) -> None:
    """Make ``stream`` the calling thread's current stream of its device, and make its device
    the current device of its backend (as PyTorch does).

    Raises:
        TypeError: ``stream`` is not an :class:`accelrt.Stream`.
        ClosedError: ``stream`` was closed (also by another thread's :meth:`Stream.close`
            during this call: the previous stream stays current).

    Example::

        >>> import accelrt as acc
        >>> previous = acc.current_stream("cpu")
        >>> s = acc.Stream("cpu")
        >>> acc.set_stream(s)
        >>> acc.current_stream("cpu") == s
        True
        >>> acc.set_stream(previous)  # put the previous stream back
    """
    if not isinstance(stream, Stream):
        raise TypeError(f"set_stream() takes an accelrt.Stream, got {type_shown(stream)}")
    stream._make_current()


def synchronize(device: DeviceLike = None, /) -> None:
    """Wait for all work on every stream of ``device`` to complete.

    Args:
        device: an index of the current accelerator, a device or string, or ``None`` for the
            current device.

    .. note:: A no-op on a device that has not been initialised (this function never creates
        a device context).

    Example::

        >>> import accelrt as acc
        >>> acc.synchronize()
        >>> acc.synchronize("cpu:0")
    """
    if device is None:
        b = _dev._current_backend
        if b is None:
            b = _require_current()
        index = _tls.device.get(b.name, 0)
    else:
        b, index = _get_device(device)
    if _dev._is_initialized(b, index):
        b.synchronize(index)
        if _sd.active:
            _sd.check(b.name)


def _synchronize(b: Backend, index: int) -> None:
    """:func:`synchronize` for accelrt's own use (graph capture): never sync-debug checked."""
    if _dev._is_initialized(b, index):
        b.synchronize(index)


_backend_registry.on_change(_forget_backend)
