"""``accelrt.Event``: a marker in a stream, for synchronisation and timing.

As in PyTorch, the backend event is created lazily at the first :meth:`Event.record`, and an
event belongs to no device until then, whatever device it was made with (``torch.Event``
keeps only the device's type): ``Event("cpu:1").device`` is ``device(type='cpu')``, and the
first record binds the event to the recording stream's device. A device module's event
(``accelrt.cuda.Event``) has ``device`` ``None`` until then, as ``torch.cuda.Event``. Until its first
record the event counts as complete (``query()`` is True, ``synchronize()`` and ``wait()`` are
no-ops).

Internal API (see ``docs/architecture.md``): ``Event._b`` (backend), ``Event._index`` (device
index, ``None`` until the first record of an event made without one), ``Event._handle`` (raw
handle, ``0`` until the first record).

Example::

    >>> import accelrt as acc
    >>> start = acc.Event("cpu", enable_timing=True)
    >>> end = acc.Event("cpu", enable_timing=True)
    >>> start.record(); end.record(); end.synchronize()
    >>> start.elapsed_time(end) >= 0.0
    True
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, cast

from . import _backend, _checked
from . import _device as _dev
from ._device import _get_device_of, _lazy_init, _require_current, _tls
from ._errors import AcceleratorValueError, type_shown
from ._handles import EventHandle
from ._stream import Stream
from ._stream import _classes as _stream_classes
from ._stream import _close_lock
from ._stream_core import _EventCore, _initialized, _instances_differ

if TYPE_CHECKING:
    from ._backend import Backend
    from ._typing import DeviceLike

__all__ = ["Event"]

#: ``_handle`` of an event not created on the backend yet (handle 0 is never an event)
_NO_EVENT = EventHandle(0)


def _check_flag(name: str, value: object) -> bool:
    if type(value) is not bool:
        raise TypeError(f"{name} must be a bool, got {type_shown(value)}")
    return value


def _without_index(device: object) -> bool:
    """True if ``device`` is a device string or :class:`accelrt.device` that names no index
    (``"cpu"``); a string with an index is in ``_device._resolved`` once resolved, so it is
    not parsed again."""
    if isinstance(device, _dev.device):
        return device.index is None
    return isinstance(device, str) and device not in _dev._resolved and \
        _dev.device(device).index is None


class Event(_EventCore):
    """A synchronisation marker recorded in a stream of one device.

    Args:
        device: the event's backend: ``None`` (the default) means the current accelerator,
            ``"cpu"`` the cpu backend. As for ``torch.Event``, only the device's type counts:
            the event belongs to no device until its first :meth:`record`, which binds it to
            the recording stream's device, so ``"cpu:1"`` (or an ``int``, an index of the
            current accelerator) is checked to name a device and its index is not kept
            (``device.index`` is ``None`` until the first record).
        enable_timing: allow :meth:`elapsed_time` (costs a timestamp per record).
        blocking: make :meth:`synchronize` block the thread instead of spinning (a backend
            hint; the result is the same).
        interprocess: allow sharing with another process through :meth:`ipc_handle`.

    Raises:
        TypeError: a flag is not a ``bool`` or ``device`` has the wrong type.
        ValueError: ``interprocess=True`` on a backend without interprocess events (the
            opencl backend, for one). ``interprocess=True`` with ``enable_timing=True`` is
            refused when the event is created on the backend (its first :meth:`record` or
            :meth:`ipc_handle`), as CUDA refuses it then.
        IndexError: the device index is out of range.

    Calling ``__init__`` again on an event object does nothing (a recorded event keeps its
    backend event), as for ``torch.cuda.Event``, which is built in ``__new__``.

    Example::

        >>> import accelrt as acc
        >>> e = acc.Event("cpu")
        >>> e.query(), e.event_id, e.device   # never recorded: complete, no device index yet
        (True, 0, device(type='cpu'))
        >>> acc.Event("cpu:0").device.index is None   # only the type counts, as torch.Event
        True
        >>> e
        <accelrt.Event uninitialized>
        >>> e.record(acc.Stream("cpu:0"))
        >>> e.synchronize(); e.query(), e.device
        (True, device(type='cpu', index=0))
    """

    __slots__ = ("__weakref__",)
    # The fields (their meaning: _stream_core._EventCore) and the argument-free hot methods
    # (query(), synchronize()) are the compiled core's; every method that checks an argument
    # stays here, in pure Python.

    #: Fixed backend name for device-specific subclasses (``accelrt.cpu.Event``).
    _backend_name: ClassVar[str | None] = None

    def __init__(self, device: DeviceLike = None, *, enable_timing: bool = False,
                 blocking: bool = False, interprocess: bool = False) -> None:
        if _initialized(self):
            return   # as torch.cuda.Event: a second __init__ changes nothing (the handle stays)
        index: int | None
        if device is None:
            if self._backend_name is None:
                b = _dev._current_backend
                if b is None:
                    b = _require_current()
            else:
                b = _backend.get_backend(self._backend_name)
            index = None
        else:
            b, index = _get_device_of(device, self._backend_name)
            if self._backend_name is None or _without_index(device):
                # torch.Event keeps only the device's type (c10::Event's index is -1 until
                # its first record); a device module's device= (accelrt's) fixes the index
                index = None
        timing = _check_flag("enable_timing", enable_timing)
        blocking = _check_flag("blocking", blocking)
        _check_flag("interprocess", interprocess)
        if interprocess and not b.capabilities(
                _tls.device.get(b.name, 0) if index is None else index).interprocess_events:
            raise ValueError(f"the {b.name} backend cannot share events between processes; "
                             "create the event with interprocess=False")
        self._set(b, index, timing, blocking, interprocess)

    @classmethod
    def _on(cls, b: Backend, index: int) -> Event:
        """A new event of device ``index`` of ``b`` with the default flags, for accelrt's own
        use (:meth:`Stream.record_event`): what ``Event(device)`` makes, without checking the
        arguments again."""
        ev = cls.__new__(cls)
        ev._set(b, index, False, False, False)
        return ev

    def __del__(self) -> None:
        try:
            h = self._handle
            if h:
                self._handle = _NO_EVENT
                _checked.destroy_event(self._b, self._index, h)  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001, S110 - never raise from a finaliser (e.g. at shutdown)
            pass

    # ------------------------------------------------------------------ fields
    @property
    def event_id(self) -> int:
        """The raw backend handle (``0`` until the first :meth:`record`).

        Raises:
            ClosedError: the event was closed.
        """
        if self._closed:
            self._check_open()
        return self._handle

    @property
    def device(self) -> _dev.device | None:
        """The event's device as an :class:`accelrt.device`. Until the first :meth:`record` of
        an event that has no device index yet: the device without an index
        (``device(type='cpu')``) for an :class:`accelrt.Event`, as ``torch.Event.device``, and
        ``None`` for a device module's event (``accelrt.cuda.Event``), as
        ``torch.cuda.Event.device``."""
        index = self._index
        if index is None:
            return _dev.device(self._b.name) if self._backend_name is None else None
        return _dev._device_obj(self._b.name, index)

    @property
    def enable_timing(self) -> bool:
        """True if the event was made with ``enable_timing=True``."""
        return self._timing

    # ------------------------------------------------------------------ operations
    def record(self, stream: Stream | None = None) -> None:
        """Record the event at the current end of ``stream``.

        The first record of an event made without a device index binds the event to the
        stream's device; later records must use streams of that device.

        Args:
            stream: a stream of the event's device; by default the calling thread's current
                stream of the current device of the event's backend, as in PyTorch
                (``torch.cuda.Event.record``, ``torch.Event.record``).

        Raises:
            TypeError: ``stream`` is not an :class:`accelrt.Stream`.
            RuntimeError: (also a ``ValueError``) ``stream`` (by default: the current
                device's) belongs to another device than the event, with PyTorch's message
                ("Event device 0 does not match recording stream's device 1.").

        Example::

            >>> import accelrt as acc
            >>> e = acc.Event("cpu:0")
            >>> e.record(acc.Stream("cpu:0"))
            >>> e.event_id != 0
            True
        """
        self._record(stream)   # (it checks ``stream``)

    def wait(self, stream: Stream | None = None) -> None:
        """Make all future work on ``stream`` wait for the last record of this event.

        A no-op if the event was never recorded. The stream may belong to another device of
        the same backend.

        Args:
            stream: by default the calling thread's current stream of the current device of
                the event's backend (as ``torch.cuda.Event.wait`` does).

        Raises:
            TypeError: ``stream`` is not an :class:`accelrt.Stream`.
            ValueError: ``stream`` belongs to another backend.

        Example::

            >>> import accelrt as acc
            >>> e = acc.Event("cpu"); e.record()
            >>> e.wait(acc.Stream("cpu"))
        """
        self._wait(stream)   # (it checks ``stream``)

    def elapsed_time(self, end_event: Event) -> float:
        """Milliseconds between this event's and ``end_event``'s records.

        Raises:
            TypeError: ``end_event`` is not an :class:`accelrt.Event`.
            ValueError: either was made without ``enable_timing=True``, or either was never
                recorded (PyTorch's ``ValueError`` messages).
            RuntimeError: the events belong to different backends or devices (also a
                ``ValueError``), or either event has not completed yet (synchronize first).

        Example::

            >>> import accelrt as acc
            >>> a = acc.Event("cpu", enable_timing=True); b = acc.Event("cpu", enable_timing=True)
            >>> a.record(); b.record(); b.synchronize()
            >>> a.elapsed_time(b) >= 0.0
            True
        """
        if not isinstance(end_event, Event):
            raise TypeError(f"elapsed_time() takes an accelrt.Event, got "
                            f"{type_shown(end_event)}")
        self._check_open()
        end_event._check_open()
        if end_event._b is not self._b:
            raise AcceleratorValueError(
                f"Event device type {self._b.name} does not match other's device type "
                f"{end_event._b.name}." + _instances_differ(self._b, "event", end_event._b,
                                                             "end event"))
        if not (self._timing and end_event._timing):
            raise ValueError("Both events must be created with argument 'enable_timing=True'.")
        if not (self._handle and end_event._handle):
            raise ValueError("Both events must be recorded before calculating elapsed time.")
        if end_event._index != self._index:
            raise AcceleratorValueError(
                f"Both events must be on the same device to calculate elapsed time, got "
                f"{self._b.name}:{self._index} and {self._b.name}:{end_event._index}.")
        if not (self.query() and end_event.query()):
            raise RuntimeError("Both events must be completed before calculating elapsed time. "
                               "Call end_event.synchronize() first.")
        return float(self._b.event_elapsed_time(
            self._index, self._handle, end_event._handle))  # type: ignore[arg-type]

    # ------------------------------------------------------------------ interprocess
    def ipc_handle(self) -> bytes:
        """An interprocess handle of this event (it must be made with ``interprocess=True``
        and recorded once), for :meth:`from_ipc_handle` in another process.

        Raises:
            RuntimeError: the event was made without ``interprocess=True`` (which only
                backends that share events between processes accept).

        Example::

            >>> import accelrt as acc
            >>> acc.Event("cpu").ipc_handle()
            Traceback (most recent call last):
                ...
            RuntimeError: ipc_handle() needs an event made with interprocess=True
        """
        self._check_open()
        if not self._interprocess:
            raise RuntimeError("ipc_handle() needs an event made with interprocess=True")
        h = self._handle
        if not h:
            h = self._create()
        b, index = self._b, self._index
        return _checked.blob(b, ("event_ipc_handle", (index, h)),
                             b.event_ipc_handle(index, h))  # type: ignore[arg-type]

    @classmethod
    def from_ipc_handle(cls, device: DeviceLike, handle: bytes) -> Event:
        """Open an event shared by another process through :meth:`ipc_handle`.

        Raises:
            TypeError: ``handle`` is not ``bytes``.
            ValueError: the backend cannot share events between processes, or ``handle`` is
                not a valid handle.

        Example::

            >>> import accelrt as acc
            >>> e = acc.Event("cpu", interprocess=True); e.record()
            >>> acc.Event.from_ipc_handle("cpu", e.ipc_handle()).query()
            True
        """
        if not isinstance(handle, bytes):
            raise TypeError(f"handle must be bytes, got {type_shown(handle)}")
        # a device module's subclass (acc.cuda.Event) has torch.cuda.Event's signature, whose
        # first argument is enable_timing: build through this class's own __init__
        e: Event = cast("Any", cls).__new__(cls)   # mypyc: no typed Event.__new__
        Event.__init__(e, device, interprocess=True)
        index = e._index
        if index is None:   # the device named (the event there is opened), else the current
            if device is not None and not _without_index(device):
                index = _get_device_of(device, e._backend_name)[1]
            else:
                index = _tls.device.get(e._b.name, 0)
            index = e._bind(index)[1]
        b: Any = e._b   # called untyped: a compiled caller would cast the result
        _lazy_init(b, index)
        e._handle = _checked.opened_event(b, index, handle, b.event_from_ipc_handle(index, handle))
        return e

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Destroy the backend event now instead of when the object is collected (cuda.core's
        ``Event.close``); idempotent.

        Nothing already queued is lost: a pending record still completes, and a stream that
        was made to wait for the event (:meth:`wait`) still waits for that record, as when a
        CUDA event is destroyed. After ``close()`` every operation on the event raises
        :class:`accelrt.ClosedError`. ``with Event() as e:`` closes it at the end of the block.

        Example::

            >>> import accelrt as acc
            >>> with acc.Event("cpu") as e:
            ...     e.record()
            >>> e.is_closed
            True
        """
        with _close_lock:   # two threads closing at once must not destroy the handle twice
            if self._closed:
                return
            self._closed = True
            h, self._handle = self._handle, _NO_EVENT
        if h:
            _checked.destroy_event(self._b, self._index, h)  # type: ignore[arg-type]

    @property
    def is_closed(self) -> bool:
        """True once :meth:`close` closed the event.

        Example::

            >>> import accelrt as acc
            >>> acc.Event("cpu").is_closed
            False
        """
        return self._closed

    def __enter__(self) -> Event:  # noqa: PYI034 - typing.Self needs Python 3.11
        self._check_open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ identity
    def __repr__(self) -> str:
        # torch.cuda.Event's shape; a device module's subclass prints as its own type
        cls: Any = type(self)   # Any: mypyc reads __module__ of a class object only so
        mod = "accelrt" if cls.__module__ == __name__ else cls.__module__
        if self._closed:
            return f"<{mod}.{cls.__qualname__} closed>"
        if self._handle:
            return f"<{mod}.{cls.__qualname__} {self._handle:#x}>"
        return f"<{mod}.{cls.__qualname__} uninitialized>"

    def __reduce__(self) -> Any:
        raise TypeError("accelrt.Event cannot be pickled; share it between processes with "
                        "ipc_handle() and Event.from_ipc_handle()")


_stream_classes.Event = Event   # (_stream cannot import this module: it is imported here)
