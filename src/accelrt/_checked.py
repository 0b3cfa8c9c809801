"""What the core keeps from a backend, checked where it crosses the seam: one way, here.

A backend may be a third party's, and a broken one must not corrupt accelrt: an address, a
stream, event or graph handle, an interprocess handle that the core stores is checked before
anything is recorded, with the argument checks of :mod:`accelrt.backends._common` (an exact
``int``: a subclass could lie about its value; then ``check_ptr``, ``check_u64`` or
``check_size``). A bad result raises :class:`~accelrt.DeviceError` naming the backend and the
call (``"the mydev backend's event_create(0) returned -3, not an event handle: ..."``) and
leaves the caller's state as it was; the object it was for is not made.

What a result must be:

- an **address** (``malloc``, ``mempool_alloc_async``, ``host_malloc``: ``0`` there means out
  of memory; ``vm_reserve``, ``ipc_open_mem_handle``): an ``int`` in ``[1, 2**64)``, not one
  the caller holds already (each caller passes what it holds: the allocator its blocks, ...);
- a **handle** (``stream_create``, ``default_stream``, ``graph_instantiate``'s id;
  ``event_create``, ``event_from_ipc_handle`` and ``graph_capture_end``, for which ``0`` is
  never valid): an ``int`` in ``[0, 2**64)``, not a live handle the core holds of the same
  device. The live events and graphs the core holds are kept here (:class:`Held`, per
  backend instance and device), added when made and dropped when destroyed, so a destroyed
  one's handle may come back; a temporary event the core destroys again at once is only
  checked against them (:func:`temporary_event`);
- a **size** (``vm_granularity``, also a power of two; ``ipc_open_mem_handle``'s): a positive
  ``int``;
- an **interprocess handle** (``ipc_mem_handle``, ``event_ipc_handle``): non-empty ``bytes``.

Exceptions a backend raises are its own and pass through, except where the core turns a
foreign exception into a ``DeviceError`` naming the backend (:func:`call_raw`: ``malloc``,
``stream_create``).

Example::

    >>> from accelrt import _checked
    >>> from accelrt.backends import get_backend
    >>> b = get_backend("cpu")
    >>> _checked.address(b, ("malloc", (0, 64)), 4096, oom=True)
    4096
    >>> try:
    ...     _checked.handle(b, ("event_create", (0,)), -3, "an event handle", nonzero=True)
    ... except Exception as e:
    ...     print(type(e).__name__, str(e)[:60])
    DeviceError the cpu backend's event_create(0) returned -3, not an event
"""

from __future__ import annotations

import threading
from collections.abc import Container
from typing import TYPE_CHECKING, Any, Final, NoReturn

from ._errors import AcceleratorError, DeviceError, caused, type_shown
from ._fork import reinit_after_fork
from .backends._common import check_ptr, check_size, check_u64

if TYPE_CHECKING:
    from ._backend import Backend

__all__ = ["Call", "Held", "address", "blob", "call_raw", "destroy_event", "destroy_graph",
           "duplicate", "event", "graph", "handle", "held", "opened_event", "raised", "returned",
           "size", "temporary_event"]


#: A backend call as the messages name it: the operation and its arguments, formatted only
#: when a message is made (``("malloc", (0, 512))`` reads ``malloc(0, 512)``).
Call = tuple[str, tuple[object, ...]]
#: Handles and addresses are below this (``check_u64``/``check_ptr``'s bound).
_BOUND: Final = 1 << 64


def _shown(call: Call) -> str:
    op, args = call
    return f"{op}({', '.join(repr(a) for a in args)})"


def returned(b: Backend, call: Call, value: object, why: str) -> DeviceError:
    """The error for a result of ``b``'s ``call`` that the core cannot keep: ``"the <name>
    backend's <op>(<args>) returned <value>, <why>"`` (an ``int`` >= 0 in hex, as addresses
    and handles are shown)."""
    shown = f"{value:#x}" if type(value) is int and value >= 0 else repr(value)
    return DeviceError(f"the {b.name} backend's {_shown(call)} returned {shown}, {why}")


def raised(b: Backend, call: Call, exc: Exception) -> DeviceError:
    """The error for a foreign exception of ``b``'s ``call`` (chain it with ``from exc``)."""
    return DeviceError(f"the {b.name} backend's {_shown(call)} raised "
                       f"{type(exc).__name__}: {exc}")


def duplicate(b: Backend, call: Call, value: int) -> DeviceError:
    """The error for an address ``b``'s ``call`` handed out while it is still in use."""
    return returned(b, call, value, "an address it handed out before and that is not freed; "
                                    "the backend is broken (the allocation was not recorded)")


def _refuse(b: Backend, call: Call, value: object, what: str, exc: Exception) -> NoReturn:
    raise caused(returned(b, call, value, f"not {what}: {exc}"), None) from None


def address(b: Backend, call: Call, value: object, *, oom: bool = False,
            held: Container[int] = ()) -> int:
    """``value`` as an address ``b``'s ``call`` gave: an ``int`` in ``[1, 2**64)`` not in
    ``held`` (addresses the caller holds), or ``0`` where ``oom`` (out of memory).

    Raises:
        DeviceError: anything else (nothing recorded).
    """
    if type(value) is int and 0 < value < _BOUND and value not in held:
        return value   # (the common case, tested below too, without making a message)
    if type(value) is not int:
        _refuse(b, call, value, "an address", TypeError(f"expected an int, got {type_shown(value)}"))
    if oom and value == 0:
        return 0
    try:
        check_ptr(value, "address")
    except ValueError as exc:
        _refuse(b, call, value, "an address" + (" (0 when out of memory)" if oom else ""), exc)
    if value in held:
        raise duplicate(b, call, value)
    return value


def handle(b: Backend, call: Call, value: object, what: str, *, nonzero: bool,
           held: Container[int] = (), why_held: str = "") -> int:
    """``value`` as a handle (``what``: ``"a stream handle"``) ``b``'s ``call`` gave: an
    ``int`` in ``[0, 2**64)`` (``[1, 2**64)`` if ``nonzero``) not in ``held``.

    Raises:
        DeviceError: anything else, naming ``why_held`` for a handle in ``held``.
    """
    if type(value) is not int:
        _refuse(b, call, value, what, TypeError(f"expected an int, got {type_shown(value)}"))
    try:
        check_u64(value, "handle")
        if nonzero and not value:
            raise ValueError("0 is never a valid one")
    except ValueError as exc:
        _refuse(b, call, value, what, exc)
    if value in held:
        raise returned(b, call, value, why_held or "a handle it gave before and that is "
                                                   "still live; each new one needs its own")
    return value


def size(b: Backend, call: Call, value: object) -> int:
    """``value`` as a positive size in bytes ``b``'s ``call`` gave.

    Raises:
        DeviceError: anything else.
    """
    if type(value) is not int:
        _refuse(b, call, value, "a size", TypeError(f"expected an int, got {type_shown(value)}"))
    try:
        return check_size(value, "size")
    except ValueError as exc:
        _refuse(b, call, value, "a size", exc)


def blob(b: Backend, call: Call, value: object) -> bytes:
    """``value`` as an interprocess handle ``b``'s ``call`` gave: non-empty ``bytes``.

    Raises:
        DeviceError: anything else.
    """
    if type(value) is not bytes or not value:
        raise returned(b, call, value, "not an interprocess handle (non-empty bytes)")
    return value


class Held:
    """The live events and graphs the core holds of one device of one backend instance: what
    a new handle must not be. Each maps a handle to the token of the call that added it:
    ``dict.setdefault`` adds a handle and says whether it was there in one atomic step, so
    two threads given the same handle by a broken backend cannot both keep it (no lock)."""

    __slots__ = ("events", "graphs")

    def __init__(self) -> None:
        self.events: dict[int, object] = {}
        self.graphs: dict[int, object] = {}


#: backend instance -> what the core holds of each of its devices (by index), kept as the
#: stream pools keep a backend (``_stream._pools``): read without a lock; written under
#: :data:`_lock`, where entries and lists only grow (``forget`` drops whole entries).
_held: Final[dict[Backend, list[Held]]] = {}
#: Re-entrant, as ``_stream._pools_lock``: a collection inside a region that holds it may run
#: a finaliser (an allocation's free ordering raw streams, :func:`temporary_event`) that needs
#: the table of a device not in :data:`_held` yet, in this thread. (What is put in the table is
#: made before the lock is taken.)
_lock: Final = reinit_after_fork(threading.RLock())


def held(b: Backend, index: int) -> Held:
    """What the core holds of device ``index`` of ``b``, made at its first use: outside the
    lock, then put in :data:`_held` under it, where tables another thread (or a finaliser of
    this one) put first win."""
    per = _held.get(b)
    if per is not None and index < len(per):
        return per[index]
    made = [Held() for _ in range(index + 1)]
    fresh: list[Held] = []
    with _lock:
        per = _held.setdefault(b, fresh)
        while len(per) <= index:
            per.append(made[len(per)])
        return per[index]


def forget(name: str, current: object) -> None:
    """Drop the entries of the instances of backend ``name`` other than ``current`` (the one
    registered under ``name`` now, or None) that hold no live event or graph: after
    ``unregister`` or ``register(..., replace=True)`` they kept the old instance alive. (An
    instance with a live event or graph is alive through that object anyway.) Walks a copy
    of the table: a finaliser run inside this region may add an entry."""
    with _lock:
        for b in list(_held):
            if b.name == name and b is not current:
                per = _held.get(b)
                if per is not None and not any(h.events or h.graphs for h in list(per)):
                    _held.pop(b, None)


_LIVE_EVENT: Final = ("the handle of an event that is still live; each new event needs its own "
               "handle")
_LIVE_GRAPH: Final = ("the handle of a captured graph that is still live; each capture needs its "
               "own handle")


def _keep(b: Backend, call: Call, value: object, what: str, live: dict[int, object],
          why_held: str) -> Any:
    """``value`` checked as a nonzero handle (:func:`handle`), then added to ``live`` unless
    it is there. (The callers test the common case first, an ``int`` in ``[1, 2**64)`` that
    is not there, without making a message: the same test.)"""
    h = handle(b, call, value, what, nonzero=True)
    token = object()
    if live.setdefault(h, token) is not token:
        raise returned(b, call, h, why_held)
    return h


def event(b: Backend, index: int, value: object, timing: bool = False, blocking: bool = False,
          interprocess: bool = False) -> Any:
    """``value``, what ``b.event_create(index, timing, blocking, interprocess)`` gave for an
    event the core keeps, checked and recorded as held until :func:`destroy_event`.

    Raises:
        DeviceError: not an event handle, or one the core holds already on this device.
    """
    live = held(b, index).events
    if type(value) is int and 0 < value < _BOUND:
        token = object()
        if live.setdefault(value, token) is token:
            return value
    return _keep(b, ("event_create", (index, timing, blocking, interprocess)), value,
                 "an event handle", live, _LIVE_EVENT)


def opened_event(b: Backend, index: int, ipc_handle: bytes, value: object) -> Any:
    """:func:`event` for what ``b.event_from_ipc_handle(index, ipc_handle)`` gave."""
    return _keep(b, ("event_from_ipc_handle", (index, ipc_handle)), value, "an event handle",
                 held(b, index).events, _LIVE_EVENT)


def temporary_event(b: Backend, index: int, value: object) -> Any:
    """``value``, what ``b.event_create(index, False, False, False)`` gave for an event the
    core destroys again before it returns (between two raw streams): checked against the held
    ones, not kept."""
    live = held(b, index).events
    if type(value) is int and 0 < value < _BOUND and value not in live:
        return value
    return handle(b, ("event_create", (index, False, False, False)), value, "an event handle",
                  nonzero=True, held=live, why_held=_LIVE_EVENT)


def destroy_event(b: Backend, index: int, value: Any) -> None:
    """Destroy a held event: forgotten first, so that a backend that gives the handle to its
    next event at once is not taken for a broken one."""
    per = _held.get(b)
    if per is not None and index < len(per):
        per[index].events.pop(value, None)
    b.event_destroy(index, value)


def graph(b: Backend, index: int, stream: int, value: object) -> Any:
    """``value``, what ``b.graph_capture_end(index, stream)`` gave, checked and recorded as
    held until :func:`destroy_graph`.

    Raises:
        DeviceError: not a graph handle, or one a live graph of this device has.
    """
    return _keep(b, ("graph_capture_end", (index, stream)), value, "a graph handle",
                 held(b, index).graphs, _LIVE_GRAPH)


def destroy_graph(b: Backend, index: int, value: Any) -> None:
    """Destroy a held graph (forgotten first, as :func:`destroy_event`)."""
    per = _held.get(b)
    if per is not None and index < len(per):
        per[index].graphs.pop(value, None)
    b.graph_destroy(index, value)


def call_raw(b: Backend, op: str, fn: Any, *args: Any) -> Any:
    """``fn(*args)``, ``b``'s operation ``op`` (``fn`` is ``b.malloc``), with a foreign
    exception turned into :func:`raised`'s ``DeviceError`` (chained); accelrt's own errors
    pass through. ``fn`` is called untyped: a compiled caller would cast its result."""
    try:
        return fn(*args)
    except AcceleratorError:
        raise
    except Exception as exc:
        raise caused(raised(b, (op, args), exc), exc) from exc
