"""The compiled cores of :class:`accelrt.Stream` and :class:`accelrt.Event`: their fields and
the hot methods that take no user argument (``with stream:``, ``query()``, ``synchronize()``).

The public classes (``_stream.Stream``, ``_event.Event``) stay pure Python and subclass these:
they keep every method that checks a user's argument (a compiled function would refuse a wrong
type with mypyc's own message before accelrt's check), the docstrings users and tests read,
``__weakref__`` (mypyc's classes have none) and the typing users' mypy sees. In the compiled
build these cores are native classes that allow interpreted subclasses; in the pure build
they are plain classes with ``__slots__``, so nothing changes there.

Example::

    >>> import accelrt as acc
    >>> from accelrt._stream_core import _StreamCore
    >>> isinstance(acc.Stream("cpu"), _StreamCore)
    True
"""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast

from . import _backend as _backend_mod
from . import _checked
from . import _device as _dev
from . import _sync_debug as _sd
from ._device import _lazy_init, _resolved
from ._device import device as _device_type
from ._device_core import _Key, _key_of, _needs_init_of
from ._errors import AcceleratorValueError, ClosedError, type_shown
from ._fork import reinit_after_fork
from ._handles import EventHandle, StreamHandle, mypyc_attr

if TYPE_CHECKING:
    from ._backend import Backend

__all__: list[str] = []

#: ``_sync_debug``'s globals, read by key: a compiled module reads an attribute of a Python
#: module through a generic getattr, about one empty call slower than a dict lookup.
_sd_globals: Final = vars(_sd)
_dev_globals: Final = vars(_dev)   # (``_current_backend`` is rebound: read it by key)
#: ``_backend._follows_any``: True once a backend class follows the current device (cuda)
_follows: Final = _backend_mod._follows_any
#: the per-thread state, ``Final`` (never rebound): a C variable, not a lookup in this
#: module's globals, on every current-stream read
_tls: Final = _dev._tls

_S = TypeVar("_S", bound="_StreamCore")

#: Guards the closed flags of streams, events and graphs in ``close()``; re-entrant because a
#: garbage collection inside the locked section may run a finalizer that closes another object.
_close_lock: Final = reinit_after_fork(threading.RLock())
#: How many ``Stream.close()`` calls are looking for a thread that uses their stream (changed
#: only under :data:`_close_lock`). A thread that makes a stream current writes its table
#: first and reads this (and the closed flag) after, so a racing close either finds the entry
#: or is seen by that thread, which then waits for it (:func:`_closed_after_publish`).
_closing: Final = [0]


def _no_close_in_child() -> None:
    """After ``fork``: the child has its own, free :data:`_close_lock` and no closing thread."""
    _closing[0] = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_no_close_in_child)

#: ``_device._ThreadState.hot``: the thread's current device per backend name, its current
#: streams per device and the devices it initialised, read in one thread-local lookup
_Hot = tuple[dict[str, int], dict[Any, Any], set[Any]]
#: What a caller that needs no thread state passes as one (never read)
_NO_HOT: Final[_Hot] = ({}, {}, set())


@mypyc_attr(allow_interpreted_subclasses=True)
class _StreamCore:
    """The fields of :class:`accelrt.Stream` and its argument-free hot methods.

    Fields: ``_key`` is (backend name, device index); ``_free`` (the pool list an owned handle
    returns to) is None for foreign streams and once closed; ``_closed`` is True after
    ``close()``; ``_origin`` is the stream a device module's view stands for (None otherwise),
    read by the closed checks of the hot paths so that a view also checks what it views. The
    open ``with stream:`` blocks live in the entering thread's state
    (``_ThreadState.entered``), not on the object.
    """

    __slots__ = ("_b", "_closed", "_free", "_handle", "_index", "_key", "_origin", "_priority",
                 "_view_cache")

    _b: Backend
    _index: int
    _handle: StreamHandle
    _priority: int
    _free: list[StreamHandle] | None
    _closed: bool
    _origin: _StreamCore | None
    _key: _Key
    _view_cache: _StreamCore | None

    def _set(self, b: Backend, key: _Key, handle: StreamHandle, priority: int,
             free: list[StreamHandle] | None) -> None:
        """Set the fields of a new stream object of device ``key`` of ``b`` (every constructor
        comes here)."""
        self._b = b
        self._index = key[1]
        self._handle = handle
        self._priority = priority
        self._free = free
        self._closed = False
        self._origin = None
        self._key = key
        self._view_cache = None

    @classmethod
    def _view(cls: type[_S], s: _StreamCore) -> _S:
        """``s`` itself if it is of this class, else a non-owning object of this class for the
        same stream (it keeps ``s`` alive): a device module's ``Stream`` (``acc.cpu.Stream``)
        viewing an :class:`accelrt.Stream`."""
        if isinstance(s, cls):
            return s
        # a view of a stream that owns no handle (a default or foreign stream: the current
        # stream, mostly) holds nothing of it, so the stream keeps its one view: a device
        # module's current_stream() then makes no object (a view of an owned stream holds
        # its origin, and keeping it there would make a cycle)
        cached = s._view_cache
        if (cached is not None and type(cached) is cls and not cached._closed
                and not s._closed):   # (a view may be closed alone: then a new one)
            return cached
        # the fields of _set, copied inline: the call made acc.cpu.current_stream() 12% slower
        # in the pure build (31.8 vs 28.2 calls, bench_runtime_calls, same run)
        v: _S = cast("Any", cls).__new__(cls)   # mypyc: no typed __new__
        v._b, v._index, v._handle, v._key = s._b, s._index, s._handle, s._key
        v._priority, v._free, v._closed = s._priority, None, s._closed
        v._view_cache = None
        if s._free is not None:
            v._origin = s
        else:
            v._origin = None
            if not s._closed:
                s._view_cache = v
        return v

    def query(self) -> bool:
        """True if all work submitted to the stream has completed.

        Example::

            >>> import accelrt as acc
            >>> acc.Stream("cpu").query()
            True
        """
        if self._closed or self._origin is not None:   # a view also checks its origin
            self._check_open()
        return self._b.stream_query(self._index, self._handle)

    def synchronize(self) -> None:
        """Wait until all work submitted to the stream has completed.

        Example::

            >>> import accelrt as acc
            >>> acc.Stream("cpu").synchronize()
        """
        if self._closed or self._origin is not None:   # a view also checks its origin
            self._check_open()
        self._b.stream_synchronize(self._index, self._handle)
        if _sd_globals["active"]:   # after the wait: internal callers rely on it
            _sd.check(self._b.name)

    def __enter__(self: _S) -> _S:
        if self._origin is not None:   # a view checks the stream it views first
            self._check_open()
        devs, streams, entered = _tls.enter
        key = self._key
        name = key[0]
        prev = devs.get(name, 0)
        if _follows[0] and prev != key[1] and self._b.follows_current_device:
            # cuda: its device's context becomes current first (torch's setDeviceIndex); if
            # that raises, the block is not entered
            self._b.set_current_device(key[1], True)
        entered.append((self, prev, streams.get(key)))
        streams[key] = self
        devs[name] = key[1]
        if (self._closed or _closing[0] or self._origin is not None) \
                and _closed_after_publish(self):   # closed (also by a racing close()): undo
            _StreamCore.__exit__(self)   # (exactly what this entry did)
            self._check_open()
        return self

    def _wait_stream(self, stream: object) -> None:
        """:meth:`accelrt.Stream.wait_stream`, with its checks of ``stream`` (typed
        ``object``: a compiled method would refuse another type with mypyc's message)."""
        if not isinstance(stream, _StreamCore):   # (every such object is an accelrt.Stream)
            raise TypeError(f"wait_stream() takes an accelrt.Stream, got {type_shown(stream)}")
        if self._closed or self._origin is not None:   # a view also checks its origin
            self._check_open()
        if stream._closed or stream._origin is not None:
            stream._check_open()
        b = self._b
        if stream._b is not b:   # a RuntimeError too, as in PyTorch
            why = _instances_differ(stream._b, "stream to wait for", b, "waiting stream")
            raise AcceleratorValueError(
                f"Event device type {stream._b.name} does not match blocking stream's device "
                f"type {b.name}." + (why or f" (accelrt cannot make a {b.name} stream wait for "
                                     f"a {stream._b.name} stream: synchronize the other "
                                     "stream instead.)"))
        if stream is self:
            return
        # what record_event() + wait_event() do on the backend (create, record, wait,
        # destroy), without the Event object between them
        _lazy_init(b, stream._index)
        _lazy_init(b, self._index)
        _wait_raw(b, self._index, self._handle, stream._index, stream._handle)

    def _make_current(self) -> None:
        """:func:`accelrt.set_stream` once its argument is known to be a stream: make it the
        thread's current stream of its device and its device the backend's current device."""
        if self._origin is not None:   # a view checks the stream it views first
            self._check_open()
        devs, streams, _ = _tls.enter
        key = self._key
        name = key[0]
        prev_stream, prev_dev = streams.get(key), devs.get(name, 0)
        switch = _follows[0] and prev_dev != key[1] and self._b.follows_current_device
        if switch:   # cuda: its device's context becomes current first (torch's set_device)
            self._b.set_current_device(key[1], True)
        streams[key] = self   # first the entry, then the check: see _closed_after_publish
        devs[name] = key[1]
        if (self._closed or _closing[0] or self._origin is not None) \
                and _closed_after_publish(self):   # closed by a racing close(): undo, raise
            if prev_stream is None:
                del streams[key]
            else:
                streams[key] = prev_stream
            devs[name] = prev_dev
            if switch:
                self._b.set_current_device(prev_dev, False)
            self._check_open()

    def __exit__(self, exc_type: object = None, exc: object = None, tb: object = None) -> None:
        # torch's takes any number of positional arguments and no keywords: a fourth is a
        # TypeError here and keywords are taken (mypyc ignores '/'), docs/differences.md
        devs, streams, entered = _tls.enter
        if entered[-1][0] is self:   # (the bottom entry is no stream: never empty)
            _, prev_dev, prev_stream = entered.pop()
        else:   # blocks left out of order: this stream's innermost block of this thread
            _, prev_dev, prev_stream = entered.pop(self._innermost(entered))
        key = self._key
        if prev_stream is None:
            if key in streams:
                del streams[key]
        else:
            streams[key] = prev_stream
        name = key[0]
        # cuda: the previous device's context (torch's setDeviceIndex), if the device changes
        switch = _follows[0] and devs.get(name, 0) != prev_dev and self._b.follows_current_device
        devs[name] = prev_dev
        if switch:
            self._b.set_current_device(prev_dev, True)

    def _innermost(self, entered: list[tuple[Any, int, Any]]) -> int:
        """The position in the calling thread's stack of its innermost ``with self:`` block.

        Raises:
            RuntimeError: this thread is in no ``with self:`` block.
        """
        for i in range(len(entered) - 1, -1, -1):
            if entered[i][0] is self:
                return i
        raise RuntimeError("Stream.__exit__ called without a matching __enter__ in this "
                           "thread; use 'with stream:'")

    def _check_open(self) -> None:
        """Raise :class:`ClosedError` if the stream was closed."""
        if self._closed:
            raise ClosedError(
                f"this {type(self).__name__} of {self._b.name}:{self._index} was closed; "
                "create a new stream instead of using a closed one")


def _known_device(device: object) -> tuple[Backend, int] | None:
    """``(backend, index)`` of ``device`` if it is a device string or :class:`accelrt.device`
    already resolved once (``_device._resolved``: no check needed), else None."""
    kind = type(device)
    if kind is not str and kind is not _device_type:
        return None
    return _resolved.get(device)


def _from_pool(s: _StreamCore, device: object, priority: object,
               pools: dict[Any, dict[int, Any]]) -> bool:
    """:class:`accelrt.Stream`'s constructor without a foreign stream's arguments: True if
    ``s`` needs nothing more, its fields being set already (:func:`_initialized`) or set here
    in the common case, ``Stream()`` or ``Stream(device)`` of priority 0, ``device`` None
    (the current device of the current accelerator) or a device string or
    :class:`accelrt.device` already resolved once (``_device._resolved``), whose device pool
    in ``pools`` (``_stream._pools``) holds a free handle: the fields of that handle's
    stream. Else False, having done nothing: the constructor's general path checks the
    arguments and makes what is missing. (Typed ``object``: a compiled function would refuse
    another type with mypyc's message.)"""
    if _initialized(s):
        return True   # as torch.cuda.Stream: a second __init__ changes nothing
    if type(priority) is not int or priority != 0:
        return False
    if device is None:
        cur: Backend | None = _dev_globals["_current_backend"]
        if cur is None:
            return False
        b = cur
        index = _tls.device.get(b.name, 0)
    else:
        hit = _known_device(device)
        if hit is None:
            return False
        b, index = hit
    per = pools.get(b)
    pool = per.get(index) if per is not None else None
    if pool is None:
        return False
    free: list[StreamHandle] = pool.free0
    try:
        handle = free.pop()
    except IndexError:   # (also when another thread took the last one first)
        return False
    s._set(b, pool.key, handle, 0, free)
    return True


#: Free backend stream handles kept per (backend, device, priority) beyond which a collected
#: stream is destroyed instead of pooled (not ``Final``: a test lowers it).
_POOL_MAX = 64

#: Called as ``fn(b, index, handle)`` once a stream handle accelrt owned was given back (to its
#: pool or destroyed: :func:`_give_back`), so that a module caching streams it checked (the
#: PyTorch shim) forgets it; appended by ``_stream._on_give_back``, read without a lock.
_given_back: Final[list[Callable[[Backend, int, StreamHandle], None]]] = []


#: The free lists of the stream pools ``_stream._forget_backend`` dropped (an instance the
#: backend's name no longer refers to) while streams taken from them were open, by ``id`` of
#: the list, and their pool: a handle given back to one of them is destroyed, not kept there
#: for ever (no one takes it again). Written under ``_stream._pools_lock``; an entry goes once
#: its pool owns no handle.
_dropped: Final[dict[int, Any]] = {}


def _give_back(b: Backend, index: int, handle: StreamHandle, free: list[StreamHandle]) -> None:
    """Give the handle of a closed or collected stream made by :class:`accelrt.Stream` back
    to its pool list ``free``, or destroy it when the pool is full (or was dropped); then
    tell the :data:`_given_back` listeners (after: a check made in between sees it given
    back). Takes no lock: a stream's finaliser comes here, and a collection may run it in
    the middle of any region of this thread that holds one (``_stream._pools_lock``)."""
    destroyed = False
    if len(free) >= _POOL_MAX:
        from ._stream import _destroy_in_pool   # (a full pool; _stream imports this module)
        destroyed = _destroy_in_pool(b, index, handle, free)
    if not destroyed:   # (a full list of a dropped pool too: dropping destroys it)
        free.append(handle)
        # appended, then looked up: a racing _forget_backend adds the list to _dropped before
        # it empties the list, so one of the two destroys the handle
        if _dropped and id(free) in _dropped:
            from ._stream import _drain_dropped
            _drain_dropped(free)
    for fn in _given_back:
        fn(b, index, handle)


def _release(s: _StreamCore) -> None:
    """``Stream.__del__``'s work: give the handle of ``s``, if ``s`` owns one, back to its pool
    (:func:`_give_back`). (The finaliser itself stays Python: CPython's finaliser of a Python
    ``__del__`` keeps an exception being raised aside while it runs, mypyc's does not.)"""
    free = s._free
    if free is not None:
        _give_back(s._b, s._index, s._handle, free)


def _closed_after_publish(s: _StreamCore) -> bool:
    """Whether ``s`` (or the stream a device module's view ``s`` views) is closed, once no
    ``close()`` is in progress: read by a thread that has just made ``s`` current (``with``,
    :func:`~accelrt.set_stream`), after writing its table, so that a ``close()`` racing with
    it either found the entry (and refused) or is seen here (and the caller undoes its entry
    and raises :class:`ClosedError`); never both missed."""
    if _closing[0]:
        with _close_lock:   # wait for the close() in progress to decide
            pass
    origin = s._origin
    return s._closed or (origin is not None and origin._closed)


def _wait_raw(b: Backend, waiter_index: int, waiter: StreamHandle, index: int,
              stream: StreamHandle) -> None:
    """Make future work on raw stream ``waiter`` (of device ``waiter_index``) wait for the work
    queued so far on raw stream ``stream`` (of device ``index``), through a temporary event.
    The one helper arrays, collectives and interop order raw streams with
    (``_stream._wait_raw``). Nothing to do for one stream, or while the backend's hint
    ``streams_idle`` holds (no stream holds queued or captured work: the wait is a no-op)."""
    if (waiter_index == index and waiter == stream) or b.streams_idle:
        return
    anyb: Any = b   # called untyped: a compiled caller would cast the result
    ev = _checked.temporary_event(b, index, anyb.event_create(index, False, False, False))
    try:
        b.event_record(index, ev, stream)
        b.stream_wait_event(waiter_index, waiter, ev)
    finally:
        b.event_destroy(index, ev)


def _mismatch(name: str, bound: int, index: int) -> AcceleratorValueError:
    """PyTorch's error (CUDAEvent's wording) for recording an event of device ``bound`` on a
    stream of device ``index``."""
    return AcceleratorValueError(
        f"Event device {bound} does not match recording stream's device {index}. Record on "
        f"a stream of device {name}:{bound}, or use another event for {name}:{index}.")


#: ``gc.get_referents`` as a C variable of the compiled module (a module attribute is a lookup)
_referents: Final = gc.get_referents


def _initialized(obj: object) -> bool:
    """True if the constructor of ``obj`` (a :class:`Stream`, an :class:`~accelrt.Event` or an
    :class:`~accelrt.Graph`) already set its fields: their ``__init__`` then does nothing, as
    calling ``__init__`` again on ``torch.cuda.Stream``, ``torch.cuda.Event`` or
    ``torch.cuda.CUDAGraph`` does (PyTorch builds them in ``__new__``), instead of replacing
    the handle the object holds (which was never given back: a leak) or the capture it runs.
    (Each of them sets its fields only once its arguments are checked, so an ``__init__``
    that raised leaves none and may be called again.)

    An object of a class defined in Python refers to its class and to the values of the fields
    set so far (``gc.get_referents``): more than its class means they are set. (Reading a
    field that is not set raises an ``AttributeError``, whose making costs three times as
    much: ``Stream()`` measured 9 calls slower with it, 3 with this; compiled here, the test
    costs about 2 calls, 4 in the pure build.)
    """
    return len(_referents(obj)) > 1


#: The default stream objects, by backend name and then device index (``_stream._default``
#: fills it; :func:`_default_of` reads it): a str (its hash cached) and a list index, where
#: a ``(name, index)`` key would be a new tuple to build, hash and compare on every
#: current-stream read (about one empty call of the compiled ``current_stream()``'s six).
_defaults: Final[dict[str, list[_StreamCore | None]]] = {}


def _default_of(name: str, index: int) -> _StreamCore | None:
    """The default stream object of device ``index`` of backend ``name`` made so far (of
    the instance registered under ``name`` then), or None."""
    per = _defaults.get(name)
    if per is not None and 0 <= index < len(per):
        return per[index]
    return None


def _set_default(name: str, index: int, s: _StreamCore) -> None:
    """Make ``s`` the default stream object of device ``index`` (>= 0) of backend ``name``."""
    per = _defaults.setdefault(name, [])
    if index >= len(per):
        per.extend([None] * (index + 1 - len(per)))
    per[index] = s


def _forget_defaults(name: str, current: object) -> None:
    """Drop the default stream objects of backend ``name`` made by another instance than
    ``current`` (the one registered under ``name`` now, or None): after ``unregister`` or a
    ``register(..., replace=True)`` they kept the old instance alive. The caller holds
    ``_stream._pools_lock``, as :func:`_set_default`'s; readers need no lock (a reader that
    got the old object checks its instance, as for any stream of the table)."""
    per = _defaults.get(name)
    if per is None:
        return
    for i in range(len(per)):
        s = per[i]
        if s is not None and s._b is not current:
            per[i] = None
    if all(s is None for s in per):
        del _defaults[name]


def _lookup(streams: dict[Any, _StreamCore], b: Backend, name: str, index: int,
            key: _Key | None = None) -> _StreamCore | None:
    """The current stream of device ``index`` of ``b`` (registered as ``name``) in
    ``streams``, the calling thread's table of current streams (by :class:`_Key`; ``key`` is
    the device's, where the caller holds it): the one set there, else the device's default
    stream if it was made; None if neither (a stream of an earlier instance of the backend's
    name does not count)."""
    if streams:   # empty unless the thread set a stream (set_stream, with stream:)
        k: object = (name, index) if key is None else key
        s = streams.get(k)
        if s is not None and s._b is b:
            return s
    s = _default_of(name, index)
    if s is not None and s._b is b:
        return s
    return None


def _current_in(streams: dict[Any, _StreamCore], b: Backend, name: str, index: int,
                key: _Key | None = None) -> _StreamCore:
    """:func:`_lookup`, making the device's default stream at its first use."""
    s = _lookup(streams, b, name, index, key)
    if s is not None:
        return s
    from ._stream import _default   # the first use of a device's default stream
    return _default(b, (name, index))


def _current(b: Backend, index: int) -> _StreamCore:
    """The calling thread's current stream of device ``index`` (checked) of ``b``: the
    internal API every module reads it with (``_stream._current`` is this function)."""
    return _current_in(_tls.hot[1], b, b.name, index)


def _current_hit(device: object) -> _StreamCore | None:
    """:func:`accelrt.current_stream` where ``device`` needs no check: None (the current
    device of the current accelerator) or a device string or :class:`accelrt.device` already
    resolved once (``_device._resolved``); or an index of the current accelerator whose
    stream the calling thread set or whose default stream exists. Else None: the caller takes
    the general path (which checks ``device`` and makes what is missing)."""
    if device is None or type(device) is int:
        b: Backend | None = _dev_globals["_current_backend"]
        if b is None:
            return None
        devs, streams, _ = _tls.hot
        name = b.name
        if device is None:
            return _current_in(streams, b, name, devs.get(name, 0))
        # an index that is not a device of ``b`` has no stream in either table: the general
        # path refuses it (and makes a default stream that does not exist yet)
        return _lookup(streams, b, name, device)
    hit = _known_device(device)
    if hit is None:
        return None
    return _current(hit[0], hit[1])


def _instances_differ(a: Backend, a_is: str, b: Backend, b_is: str) -> str:
    """What PyTorch's device type mismatch (``"Event device type X does not match ... device
    type Y."``) leaves unsaid when ``a`` (the backend of the ``a_is``, e.g. "event") and ``b``
    (the ``b_is``'s, "stream") are two instances registered under one name, one after the
    other (``register(name, ..., replace=True)``): which one the name no longer refers to, and
    what to do; "" for two backends of different names (PyTorch's message says it all)."""
    name = a.name
    if b.name != name:
        return ""
    from ._backend_registry import _instances   # (an error path only)
    current = _instances.get(name)
    gone = f"is of an instance that {name!r} no longer names. Make the"
    if current is a:
        stale = f"the {b_is} {gone} {b_is} again"
    elif current is b:
        stale = f"the {a_is} {gone} {a_is} again"
    else:
        stale = f"neither is of the instance that {name!r} names now. Make both again"
    return (f" The {a_is} and the {b_is} are of two different backend instances registered "
            f"under that one name (register({name!r}, ..., replace=True) or "
            f"unregister({name!r}) came in between): {stale}.")


def _event_stream(b: Backend, stream: object, method: str, hot: _Hot) -> _StreamCore:
    """The stream :meth:`accelrt.Event.record` or :meth:`~accelrt.Event.wait` (``method``)
    of an event of backend ``b`` works on: ``stream`` checked (an open stream of ``b``), or
    for None the calling thread's current stream of the current device of ``b``, as in
    PyTorch (``THPEvent_record``, ``THPEvent_wait``). ``hot`` is the thread's
    ``_ThreadState.hot``, which the caller read (:data:`_NO_HOT` where ``stream`` is not
    None). (A function, not a method: a method of a class that allows interpreted subclasses
    is called through Python's method lookup.)"""
    if stream is None:
        devs, streams, _ = hot
        name = b.name
        return _current_in(streams, b, name, devs.get(name, 0))
    if not isinstance(stream, _StreamCore):
        raise TypeError(f"{method}() takes an accelrt.Stream or None, got "
                        f"{type_shown(stream)}")
    if stream._closed or stream._origin is not None:   # a view also checks its origin
        stream._check_open()
    if stream._b is not b:
        # PyTorch's InlineEvent wording (record, block), then what it means here
        why = _instances_differ(b, "event", stream._b, "stream")
        if method == "record":
            raise AcceleratorValueError(
                f"Event device type {b.name} does not match recording stream's device "
                f"type {stream._b.name}.{why}")
        raise AcceleratorValueError(
            f"Event device type {b.name} does not match blocking stream's device "
            f"type {stream._b.name}." + (why or " A stream cannot wait for another backend's "
                                         "event: synchronize the event instead."))
    return stream


@mypyc_attr(allow_interpreted_subclasses=True)
class _EventCore:
    """The fields of :class:`accelrt.Event` and its argument-free hot methods.

    Fields: ``_index`` is None until the first record of an event made without a device index,
    ``_handle`` 0 until the first record (and once closed); ``_key`` is (backend name, device
    index) once the device is known; ``_rec``, ``_wt``, ``_q`` are the backend's
    ``event_record``, ``stream_wait_event`` and ``event_query``, bound once.
    """

    __slots__ = ("_b", "_blocking", "_closed", "_handle", "_index", "_init", "_interprocess",
                 "_key", "_q", "_rec", "_timing", "_wt")

    _b: Backend
    _index: int | None
    _handle: EventHandle
    _key: _Key | None
    _closed: bool
    _timing: bool
    _blocking: bool
    _interprocess: bool
    _init: bool
    _rec: Callable[[int, EventHandle, StreamHandle], None]
    _wt: Callable[[int, StreamHandle, EventHandle], None]
    _q: Callable[[int, EventHandle], bool]

    def _set(self, b: Backend, index: int | None, timing: bool, blocking: bool,
             interprocess: bool) -> None:
        """Set the fields of a new event object of device ``index`` (None: bound at the first
        record) of ``b`` with checked flags (every constructor comes here)."""
        self._handle = EventHandle(0)
        self._closed = False
        self._timing = timing
        self._blocking = blocking
        self._interprocess = interprocess
        # a record or wait tests the thread's init only where the backend needs one per
        # thread (init_device): the thread-local lookup is a fifth of Event.record(s)
        self._init = _needs_init_of(b)
        self._b = b
        self._index = index
        self._key = None if index is None else _key_of(b.name, index)
        self._rec = b.event_record
        self._wt = b.stream_wait_event
        self._q = b.event_query

    def _record(self, stream: object) -> None:
        """:meth:`accelrt.Event.record`, with its check that ``stream`` is a stream or None
        (typed ``object``: a compiled method would refuse another type with mypyc's message)."""
        key = self._key
        b = self._b
        # the thread's state, for the current stream or the per-thread init test below
        need = stream is None or self._init
        hot = _tls.hot if need else _NO_HOT
        s = _event_stream(b, stream, "record", hot)
        index = s._index
        if key is not None and index != key[1]:
            raise _mismatch(b.name, key[1], index)
        sh = s._handle
        h = self._handle
        if not h or key is None:   # the first record (or one racing with it): binds the event
            h = self._create(index)
        elif need and key not in hot[2]:
            _lazy_init(b, index)
        self._rec(index, h, sh)

    def _wait(self, stream: object) -> None:
        """:meth:`accelrt.Event.wait`, with its checks of ``stream`` (a stream of the event's
        backend, or None: the calling thread's current stream of the current device of the
        event's backend)."""
        if self._closed:
            self._check_open()
        need = stream is None or self._init
        hot = _tls.hot if need else _NO_HOT
        s = _event_stream(self._b, stream, "wait", hot)
        h = self._handle
        if h:
            index = s._index
            # (the stream's key is its device's: _lazy_init's test)
            if need and s._key not in hot[2]:
                _lazy_init(self._b, index)
            self._wt(index, s._handle, h)

    def _bind(self, index: int) -> _Key:
        """Make ``index`` the event's device (at its first record)."""
        key = _key_of(self._b.name, index)
        self._index = index
        self._key = key
        return key

    def _create(self, index: int = -1) -> EventHandle:
        """Create the backend event on device ``index`` and bind an event made without a
        device to it: at the first record (the recording stream's device), or for
        :meth:`accelrt.Event.ipc_handle` before any (-1: the event's device, else the current
        device, as PyTorch). Threads that record a new event at once make one handle: the
        first to install its handle (under the close lock, which also orders a racing
        ``close()``) wins, the others destroy theirs and use it, or raise PyTorch's device
        mismatch when it was bound to another device."""
        if self._closed:   # a closed event's handle is 0: every first use comes here
            self._check_open()
        b = self._b
        if index < 0:
            bound = self._index
            index = _tls.device.get(b.name, 0) if bound is None else bound
        h = self._handle   # nonzero: another thread's first record made it (check its device)
        made = not h
        if made:
            _lazy_init(b, index)
            timing, blocking, ipc = self._timing, self._blocking, self._interprocess
            anyb: Any = b   # called untyped: the compiled build would cast the result
            h = _checked.event(b, index, anyb.event_create(index, timing, blocking, ipc),
                               timing, blocking, ipc)
        _close_lock.acquire()   # (not ``with``: half the cost, on every new event)
        try:
            won = made and not self._closed and not self._handle and (
                self._index is None or self._index == index)
            if won:
                if self._index is None:
                    self._bind(index)
                self._handle = h
            bound, current = self._index, self._handle
        finally:
            _close_lock.release()
        if won:
            return h
        if made:
            _checked.destroy_event(b, index, h)
        if self._closed:
            self._check_open()
        if bound is not None and bound != index:
            raise _mismatch(b.name, bound, index)
        return current

    def query(self) -> bool:
        """True if all work before the last record has completed (True if never recorded).

        Example::

            >>> import accelrt as acc
            >>> e = acc.Event("cpu")
            >>> e.query()   # never recorded
            True
            >>> e.record(acc.Stream("cpu")); e.synchronize()
            >>> e.query()
            True
        """
        h = self._handle
        if not h:
            if self._closed:
                self._check_open()
            return True
        if self._b.streams_idle and not self._interprocess:
            # the backend's hint (Backend.streams_idle): no stream holds queued work, so the
            # work before the record is done; an interprocess event may be recorded by
            # another process, so the backend is asked
            return True
        return self._q(self._index, h)  # type: ignore[arg-type]

    def synchronize(self) -> None:
        """Block until all work before the last record has completed (no-op if never
        recorded).

        Example::

            >>> import accelrt as acc
            >>> e = acc.Event("cpu"); e.record(); e.synchronize()
        """
        h = self._handle
        if h:
            self._b.event_synchronize(self._index, h)  # type: ignore[arg-type]
            if _sd_globals["active"]:   # after the wait, as Stream.synchronize
                _sd.check(self._b.name)
        elif self._closed:
            self._check_open()

    def _check_open(self) -> None:
        """Raise :class:`ClosedError` if the event was closed."""
        if self._closed:
            raise ClosedError(f"this {type(self).__name__} was closed; create a new event "
                              "instead of using a closed one")
