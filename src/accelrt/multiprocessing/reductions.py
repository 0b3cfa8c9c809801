"""Pickling reductions that share :class:`accelrt.Array` memory and interprocess
:class:`accelrt.Event` objects with other processes of this machine.

:func:`init_reductions` registers them with :class:`multiprocessing.reduction.ForkingPickler`
(what ``multiprocessing`` queues, pipes and process arguments use), as
``torch.multiprocessing`` does; :mod:`accelrt.multiprocessing` calls it on import. Plain
:mod:`pickle` is unchanged: it still copies an array's contents.

An array travels as ``(device, segment handle, segment size, offset, shape, dtype, reference,
readiness event)``: the interprocess handle of the caching allocator's *segment* that holds
the block (``cuIpcGetMemHandle`` of the ``cudaMalloc`` base on CUDA, a shared-memory
``memfd`` on cpu) plus the block's offset in it, a slot in the producer's reference file (see
:mod:`accelrt.multiprocessing._refs`) and, where the backend has interprocess events, the
handle of an event recorded on the producer's current stream after the work queued so far.

Example::

    >>> import pickle, accelrt as acc
    >>> from accelrt.multiprocessing.reductions import reduce_array
    >>> a = acc.zeros(4, device="cpu")      # private memory unless ACCELRT_CPU_SHARED_MEMORY=1
    >>> acc.backends.get_backend("cpu").config.shared_memory or reduce_array(a)
    Traceback (most recent call last):
        ...
    ValueError: cannot share memory between processes: ...
    >>> del a
"""

from __future__ import annotations

import math
import threading
from multiprocessing.reduction import ForkingPickler
from typing import Any

from .. import _checked, _event
from .._array import Array
from .._memory_owner import _Memory
from .._device import _get_device, _lazy_init
from .._errors import AcceleratorError, _WrongKindError, type_shown
from .._placement import _check_dtype
from .._fork import reinit_after_fork
from .._stream import _current
from . import _refs

__all__ = ["init_reductions", "rebuild_array", "rebuild_event", "reduce_array",
           "reduce_event", "reduce_tensor"]

_VERSION = 1


class _Opened:
    """One mapping of another process's segment in this process (one per handle, as CUDA
    allows a handle to be opened once per context), shared by the arrays received in it and
    unmapped when the last of them is collected: ``users`` counts their holds (changed under
    ``_lock``; :func:`_use`, :func:`_unuse`)."""

    __slots__ = ("__weakref__", "b", "base", "handle", "index", "key", "size", "users")

    def __init__(self, b: Any, index: int, handle: bytes) -> None:
        self.b, self.index, self.handle = b, index, handle
        self.key = (b.name, index, handle)
        self.users = 0
        self.base = 0
        call = ("ipc_open_mem_handle", (index, handle))
        got = b.ipc_open_mem_handle(index, handle)
        if type(got) is not tuple or len(got) != 2:
            raise _checked.returned(b, call, got, "not a (pointer, size) pair")
        # (a mapping it gave for another handle and did not close cannot be this one's)
        base = _checked.address(b, call, got[0], held=_open_bases(b, index))
        try:
            self.size = _checked.size(b, call, got[1])
        except BaseException:
            # the backend did map something at `base`: close it, or it stays mapped for good
            try:
                b.ipc_close_mem_handle(index, base)
            except Exception:  # noqa: BLE001, S110 - the size's error is the one to raise
                pass
            raise
        self.base = base

    def close(self) -> None:
        """Unmap (once). Only :func:`_unuse` calls it: no finaliser of this object does, so
        that clearing ``_mappings`` at interpreter exit unmaps nothing an array still uses."""
        base, self.base = self.base, 0
        if base:
            try:
                self.b.ipc_close_mem_handle(self.index, base)
            except Exception:  # noqa: BLE001, S110 - called from finalisers
                pass


class _Hold:
    """Keeps a received array's memory: the mapping and the claim on the producer's slot.
    Stored as the ``base`` of the consumer array's memory owner (never the allocator's).

    When the last consumer array goes, the device's queued work is waited for before the
    claim is released, so the producer never reuses memory this process still writes."""

    __slots__ = ("__weakref__", "claim", "desc", "opened")

    def __init__(self, opened: _Opened, claim: _refs.Claim, desc: tuple[Any, ...]) -> None:
        self.opened, self.claim, self.desc = opened, claim, desc

    def __del__(self) -> None:
        try:
            opened = self.opened
            # never from a stream's own worker thread (the cpu backend's), which would wait
            # for itself; work queued there runs before anything it could reuse anyway
            if not threading.current_thread().name.startswith("accelrt-"):
                opened.b.synchronize(opened.index)
        except Exception:  # noqa: BLE001, S110 - never raise from a finaliser
            pass
        try:
            self.claim.release()
        except Exception:  # noqa: BLE001, S110 - never raise from a finaliser
            pass
        try:
            _unuse(self.opened)
        except Exception:  # noqa: BLE001, S110 - never raise from a finaliser
            pass


#: re-entrant: a finaliser (:class:`_Hold`'s) may run inside a locked region of its thread
_lock = reinit_after_fork(threading.RLock())
#: the open mappings, by (backend name, device index, segment handle); guarded by _lock. (A
#: table of weak references handed out a mapping that its finaliser was unmapping: an array
#: received then pointed at address 0 plus its offset.)
_mappings: dict[tuple[str, int, bytes], _Opened] = {}


def _use(b: Any, index: int, handle: bytes) -> _Opened:
    """The mapping of segment ``handle`` of device ``index`` of ``b`` (opened at its first
    use), with one more user."""
    key = (b.name, index, handle)
    with _lock:
        opened = _mappings.get(key)
        if opened is None:
            opened = _Opened(b, index, handle)
            _mappings[key] = opened
        opened.users += 1
    return opened


def _unuse(opened: _Opened) -> None:
    """One user of ``opened`` fewer: the last one unmaps it, under the lock, so that the
    next array of the segment maps it again only once it is closed."""
    with _lock:
        opened.users -= 1
        if opened.users > 0:
            return
        if _mappings.get(opened.key) is opened:
            del _mappings[opened.key]
        opened.close()


def _open_bases(b: Any, index: int) -> set[int]:
    """The bases of the mappings of ``b``'s device ``index`` open in this process."""
    return {o.base for o in list(_mappings.values()) if o.b is b and o.index == index}


def _refuse(why: str) -> ValueError:
    return ValueError(f"cannot share memory between processes: {why}")


def _readiness(b: Any, index: int) -> tuple[bytes | None, Any]:
    """An interprocess event recorded on the current stream, or ``None`` when that stream has
    no unfinished work (nothing to wait for) or the backend has no interprocess events (then
    the producer waits for its queued work instead)."""
    stream = _current(b, index)
    if stream.query():
        return None, None
    if b.capabilities(index).interprocess_events:
        ev = _event.Event(f"{b.name}:{index}", interprocess=True)
        ev.record(stream)
        return ev.ipc_handle(), ev
    stream.synchronize()
    return None, None


def reduce_array(a: Array) -> tuple[Any, ...]:
    """Reduce ``a`` to a handle of its memory (the reducer registered for ``Array``).

    Raises:
        TypeError: ``a`` is not an :class:`~accelrt.Array` (also an ``AttributeError``, the
            class torch 2.15's ``reduce_tensor`` raises for a non-tensor).
        ValueError: the memory cannot be shared (a backend without interprocess memory such as
            OpenCL, private cpu memory without ``ACCELRT_CPU_SHARED_MEMORY=1``, an expandable
            segment, memory borrowed from numpy or a pluggable allocator); the message names
            the reason and the fix.
    """
    if not isinstance(a, Array):
        raise _WrongKindError(f"reduce_array() takes an accelrt.Array, got {type_shown(a)}")
    b, index, mem = a._b, a._index, a._mem
    device = f"{b.name}:{index}"
    meta = (device, a._shape, a._dtype.str)
    if mem.nbytes == 0:
        return (rebuild_array, (_VERSION, meta, None))
    base = mem.base
    if mem.alloc is None and isinstance(base, _Hold):
        # memory this process received: pass the producer's handle on, one more in flight
        ref, slot, token, seg, seg_size = base.desc
        _refs.add_pending(ref, slot, token)
        _current(b, index).synchronize()   # no event of ours to keep alive for the receiver
        return (rebuild_array, (_VERSION, meta, (seg, seg_size, mem.ptr - base.opened.base,
                                                 mem.nbytes, ref, slot, token, None)))
    alloc = mem.alloc
    if alloc is None:
        what = "numpy or DLPack" if mem.host or base is not None else "another library"
        raise _refuse(f"the array on {device} borrows memory from {what} (acc.asarray without "
                      "a copy), which accelrt cannot share; copy it into accelrt memory first "
                      "with acc.asarray(x, device=..., copy=True)")
    seg_of = getattr(alloc, "segment_of", None)
    found = seg_of(mem.ptr) if seg_of is not None else None
    if found is None:
        raise _refuse(f"the array's memory on {device} is not a block of accelrt's caching "
                      "allocator (a pluggable allocator's); use the caching allocator in the "
                      "producer")
    seg_base, seg_size, expandable = found
    if expandable:
        raise _refuse(f"the array on {device} lives in an expandable segment, whose memory "
                      "cannot be shared (PyTorch needs POSIX file-descriptor handles for that); "
                      "remove expandable_segments:True from ACCELRT_ALLOC_CONF in the producer")
    try:
        seg = b.ipc_mem_handle(index, seg_base)
    except ValueError as exc:
        msg = str(exc)
        raise (ValueError(msg) if msg.startswith("cannot share") else _refuse(msg)) from None
    seg = _checked.blob(b, ("ipc_mem_handle", (index, seg_base)), seg)
    ev_handle, ev = _readiness(b, index)
    ref, slot, token = _refs.share((mem, ev))
    return (rebuild_array, (_VERSION, meta, (seg, seg_size, mem.ptr - seg_base, mem.nbytes,
                                             ref, slot, token, ev_handle)))


#: ``torch.multiprocessing.reductions.reduce_tensor``'s name, which code that hands device
#: memory to another process itself imports (verl's bucketed weight transfer, vLLM, SGLang):
#: ``func, args = reduce_tensor(a)`` is a plain-picklable pair and ``func(*args)`` rebuilds the
#: array in the receiver. The layout of ``args`` is accelrt's (torch's CUDA tuple, whose
#: index 6 is the device, differs): set the receiver's device with ``set_device`` instead.
reduce_tensor = reduce_array


def rebuild_array(version: int, meta: tuple[Any, ...], shared: tuple[Any, ...] | None) -> Array:
    """Rebuild an array from :func:`reduce_array`'s output in the receiving process: map the
    producer's segment (once per handle), hold the producer's slot and make the current
    stream wait on the producer's readiness event.

    Raises:
        ValueError: the pickle is malformed, names memory that no longer exists (producer
            exited, memory released) or sizes that do not fit the segment.
    """
    if (type(version) is not int or version != _VERSION or type(meta) is not tuple
            or len(meta) != 3):
        raise ValueError(f"not an accelrt shared-array pickle (version {_shown(version)}); the "
                         "sender and receiver must run the same accelrt")
    device, shape, dtype = meta
    if type(device) is not str:
        raise _malformed("device", device, "a device string such as 'cpu:0'")
    if type(shape) is not tuple or not all(type(n) is int and n >= 0 for n in shape):
        raise _malformed("shape", shape, "a tuple of non-negative ints")
    if type(dtype) is not str:
        raise _malformed("dtype", dtype, "a numpy dtype string such as '<f4'")
    b, index = _get_device(device)
    try:
        dt = _check_dtype(dtype, b, index)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"malformed shared-array pickle: {exc}") from None
    nbytes = math.prod(shape) * dt.itemsize
    _lazy_init(b, index)
    if shared is None:
        if nbytes:
            raise ValueError("a shared-array pickle without memory must describe an empty array")
        return Array(shape, dtype=dt, device=device)
    if type(shared) is not tuple or len(shared) != 8:
        raise _malformed("memory", shared, "a tuple of 8 fields")
    seg, seg_size, offset, size, ref, slot, token, ev_handle = shared
    for name, value in (("segment handle", seg), ("reference", ref), ("token", token)):
        if type(value) is not bytes:
            raise _malformed(name, value, "bytes")
    if ev_handle is not None and type(ev_handle) is not bytes:
        raise _malformed("event handle", ev_handle, "bytes or None")
    for name, value in (("segment size", seg_size), ("offset", offset), ("size", size),
                        ("slot", slot)):
        if type(value) is not int:
            # (an offset of another type made an array at a float address; the values are
            # checked below, and a slot by the reference file)
            raise _malformed(name, value, "an int")
    if size != nbytes or offset < 0 or offset + size > seg_size:
        raise ValueError(f"inconsistent shared-array pickle: {nbytes} bytes of shape {shape} "
                         f"at offset {offset} of a {seg_size}-byte segment (block size {size})")
    claim = _refs.claim(ref, slot, token)
    try:
        opened = _use(b, index, seg)
        try:
            if opened.size < offset + size:
                raise ValueError(f"the shared segment is {opened.size} bytes, smaller than "
                                 f"the {offset + size} bytes the pickle names; the handle is "
                                 "forged")
            if ev_handle is not None:
                ev = _event.Event.from_ipc_handle(device, ev_handle)
                _current(b, index).wait_event(ev)
        except BaseException:
            _unuse(opened)
            raise
    except BaseException:
        claim.release()
        raise
    hold = _Hold(opened, claim, (ref, slot, token, seg, seg_size))
    return Array._wrap(_Memory(opened.base + offset, size, None, hold), shape, dt, b, index)


def _malformed(field: str, value: object, want: str) -> ValueError:
    """The error of a shared-array pickle whose ``field`` is not ``want`` (a pickle accelrt
    did not make, or one of another accelrt version)."""
    return ValueError(f"malformed shared-array pickle: its {field} is {_shown(value)}, not "
                      f"{want}; the sender and receiver must run the same accelrt")


def _shown(value: object) -> str:
    """``value`` for a message: the repr of a plain value, else the type's name."""
    if value is None or type(value) in (bool, int, float, str, bytes):
        text = repr(value)
        return text if len(text) <= 80 else text[:77] + "..."
    return type_shown(value)


def reduce_event(e: _event.Event) -> tuple[Any, ...]:
    """Reduce an ``interprocess=True`` event to ``(device, ipc_handle, type(e))``, as torch
    2.15's ``_reduce_event``: it rebuilds as its own class (``acc.cpu.Event``, ...).

    Raises:
        TypeError: ``e`` is not an accelrt event (also an ``AttributeError``, the class torch
            2.15's ``_reduce_event`` raises for a non-event).
        RuntimeError: the event was made without ``interprocess=True``.
    """
    if not isinstance(e, _event.Event):
        raise _WrongKindError(f"reduce_event() takes an accelrt Event, got {type_shown(e)}")
    handle = e.ipc_handle()
    return (rebuild_event, (f"{e._b.name}:{e._index}", handle, type(e)))


def rebuild_event(device: str, handle: bytes, cls: type[_event.Event] = _event.Event
                  ) -> _event.Event:
    """Open the event another process reduced with :func:`reduce_event`."""
    if not (isinstance(cls, type) and issubclass(cls, _event.Event)):
        raise ValueError("not an accelrt event pickle")
    return cls.from_ipc_handle(device, handle)


_registered = False


def init_reductions() -> None:
    """Register the reducers with ``multiprocessing``'s :class:`ForkingPickler` (idempotent).

    Example::

        >>> from accelrt.multiprocessing.reductions import init_reductions
        >>> init_reductions()
    """
    global _registered
    if _registered:
        return
    ForkingPickler.register(Array, reduce_array)
    seen: list[type] = [_event.Event]
    import importlib
    for mod in ("accelrt.cpu", "accelrt.cuda", "accelrt.opencl"):
        try:
            cls = getattr(importlib.import_module(mod), "Event", None)
        except (ImportError, AcceleratorError):   # pragma: no cover - defensive
            continue
        if isinstance(cls, type) and issubclass(cls, _event.Event):
            seen.append(cls)
    for cls in seen:
        ForkingPickler.register(cls, reduce_event)
    _registered = True

