"""The classes every device module subclasses, fixed to its backend: ``Event``, ``Stream``,
``ExternalStream``, ``device``, ``device_of`` and ``StreamContext`` (``torch.cuda``'s).

Example::

    >>> import accelrt as acc
    >>> from accelrt._runtime import _classes
    >>> issubclass(acc.cpu.Stream, _classes.Stream), issubclass(acc.cuda.Event, _classes.Event)
    (True, True)
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, overload

from .. import _backend, _event, _stream
from .. import _device as _dev
from .._device import _tls
from .._stream_core import _initialized
from ._args import _DeviceContext, current_if_negative, expected, resolve, typed
from .._errors import type_shown

if TYPE_CHECKING:
    from types import TracebackType

    from .._typing import DeviceLike

__all__ = ["Event", "ExternalStream", "Stream", "StreamContext", "device", "device_of"]

_E = TypeVar("_E", bound=_event.Event)
#: The device module's ``Event`` class (a :class:`Stream` is generic in it for type checkers:
#: ``acc.cpu.Stream`` is ``Stream[acc.cpu.Event]``).
_ModuleEvent = TypeVar("_ModuleEvent", bound="Event")


class Event(_event.Event):
    """Base of the ``Event`` class of every device module (``accelrt.cuda.Event`` is a
    subclass fixed to the cuda backend): an :class:`accelrt.Event` with
    ``torch.cuda.Event``'s signature ``Event(enable_timing=False, blocking=False,
    interprocess=False, external=False)``; the keyword-only ``device`` (an ``int`` is an index
    of the module's backend) is accelrt's, as ``torch.Event`` has one.

    ``external=True`` changes what the event does inside a graph capture only, as in PyTorch:
    a record adds an event record node (every replay records the event, which stays usable
    outside the graph) and a wait adds an event wait node (every replay waits for the
    event's latest record), instead of an internal cross-stream dependency of the capture
    (``cudaEventRecordExternal``/``cudaEventWaitExternal``). Outside a capture it is an
    ordinary event. A backend without graphs has no capture, so nothing changes there.

    Raises:
        TypeError: a flag is not a ``bool``.

    Example::

        >>> import accelrt as acc
        >>> e = acc.cpu.Event(True)
        >>> isinstance(e, acc.Event), type(e).__module__, e.enable_timing
        (True, 'accelrt.cpu', True)
    """

    __slots__ = ()

    def __init__(self, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False, external: bool = False, *,
                 device: DeviceLike = None) -> None:
        if _initialized(self):
            return   # as torch.cuda.Event: a second __init__ changes nothing
        super().__init__(device, enable_timing=enable_timing, blocking=blocking,
                         interprocess=interprocess)
        if _event._check_flag("external", external):
            self._rec = self._b.event_record_external
            self._wt = self._b.stream_wait_event_external

    @property
    def cuda_event(self) -> int:
        """The backend's native event handle (``torch.cuda.Event.cuda_event``): the ``CUevent``
        on cuda, the simulated event's handle on cpu, accelrt's event handle on opencl; ``0``
        until the first :meth:`record` creates it (as in PyTorch). The same as
        :attr:`event_id`.

        Raises:
            ClosedError: the event was closed.

        Example::

            >>> import accelrt as acc
            >>> e = acc.cpu.Event()
            >>> e.cuda_event
            0
            >>> e.record()
            >>> e.cuda_event == e.event_id != 0
            True
        """
        return self.event_id

    @property
    def _as_parameter_(self) -> ctypes.c_void_p:
        """ctypes' hook (``torch.cuda.Event._as_parameter_``): the event passed to a foreign
        function taking a pointer is its :attr:`cuda_event` handle (``c_void_p(None)`` until
        the first :meth:`record`).

        Example::

            >>> import accelrt as acc
            >>> e = acc.cpu.Event(); e.record()
            >>> e._as_parameter_.value == e.cuda_event
            True
        """
        return ctypes.c_void_p(self.cuda_event)


class Stream(_stream.Stream, Generic[_ModuleEvent]):
    """Base of the ``Stream`` class of every device module (``accelrt.cuda.Stream`` is a
    subclass fixed to the cuda backend): an :class:`accelrt.Stream` whose ``int`` device means
    an index of that backend, with ``torch.cuda.Stream``'s extra :meth:`priority_range`. A ``None`` device or a negative index means the backend's current
    device, as in PyTorch. The signature is ``torch.cuda.Stream``'s ``Stream(device=None,
    priority=0)`` (``acc.cuda.Stream("cuda:0", -1)``); :class:`accelrt.Stream` keeps
    ``torch.Stream``'s keyword-only ``priority``.

    Example::

        >>> import accelrt as acc
        >>> s = acc.cpu.Stream()
        >>> s
        <accelrt.cpu.Stream device=cpu:0 stream_id=0x... priority=0>
        >>> s.is_capturing(), isinstance(s.record_event(), acc.cpu.Event)
        (False, True)
    """

    __slots__ = ()
    # _origin (a field of accelrt.Stream): the stream object this one views (keeps an owned
    # handle alive), or None

    #: The device module's ``Event`` class (what :meth:`record_event` makes).
    _event_class: ClassVar[type[Event]] = Event

    def __init__(self, device: DeviceLike = None, priority: int = 0, *,
                 stream_id: int | None = None, device_index: int | None = None,
                 device_type: str | None = None) -> None:
        if _initialized(self):
            return   # as torch.cuda.Stream: a second __init__ changes nothing
        name = self._backend_name
        if name is not None and stream_id is None and device_index is None \
                and device_type is None:
            device = current_if_negative(name, device)
        super().__init__(device, priority=priority, stream_id=stream_id,
                         device_index=device_index, device_type=device_type)

    @property
    def cuda_stream(self) -> int:
        """The stream's native handle (``torch.cuda.Stream.cuda_stream``): the ``CUstream`` on
        cuda, the simulated stream's handle on cpu, accelrt's command-queue handle on opencl;
        the same as :attr:`native_handle` and :attr:`stream_id`, and what
        :class:`ExternalStream` and ``get_stream_from_external`` take back.

        Raises:
            ClosedError: the stream was closed.

        Example::

            >>> import accelrt as acc
            >>> s = acc.cpu.Stream()
            >>> acc.cpu.ExternalStream(s.cuda_stream) == s
            True
        """
        return self.stream_id

    @property
    def _as_parameter_(self) -> ctypes.c_void_p:
        """ctypes' hook (``torch.cuda.Stream._as_parameter_``): the stream passed to a foreign
        function taking a pointer (a ``CUstream`` argument on cuda) is its :attr:`cuda_stream`
        handle.

        Example::

            >>> import accelrt as acc
            >>> s = acc.cpu.Stream()
            >>> s._as_parameter_.value == s.cuda_stream
            True
        """
        return ctypes.c_void_p(self.cuda_stream)

    def _check_open(self) -> None:
        """Raise :class:`~accelrt.ClosedError` if this object, or the stream it views, was
        closed."""
        origin = self._origin
        if origin is not None and origin._closed:
            origin._check_open()
        super()._check_open()

    @classmethod
    def priority_range(cls) -> tuple[int, int]:
        """``(least, greatest)`` stream priority of the backend's current device, as
        ``torch.cuda.Stream.priority_range()`` (lower numbers are higher priorities, so
        ``greatest <= least``).

        Example::

            >>> import accelrt as acc
            >>> least, greatest = acc.cpu.Stream.priority_range()
            >>> greatest <= 0 <= least
            True
        """
        name = cls._backend_name
        if name is None:
            b = _dev._require_current()
        else:
            b = _backend.get_backend(name)
        lo, hi = b.stream_priority_range(_tls.device.get(b.name, 0))
        return max(lo, hi), min(lo, hi)

    @overload
    def record_event(self, event: None = None) -> _ModuleEvent: ...
    @overload
    def record_event(self, event: _E) -> _E: ...
    @overload
    def record_event(self, event: _event.Event | None = None) -> _event.Event: ...

    def record_event(self, event: _event.Event | None = None) -> _event.Event:
        """Record ``event`` (a new event of this device module if ``None``) on this stream and
        return it (typed as the module's ``Event``, with ``cuda_event``, as
        ``torch.cuda.Stream.record_event``'s).

        Example::

            >>> import accelrt as acc
            >>> type(acc.cpu.Stream().record_event()).__module__
            'accelrt.cpu'
        """
        if event is None:
            event = self._event_class(device=self.device)
        return super().record_event(event)

    def __repr__(self) -> str:
        cls = type(self)
        closed = " closed" if self._closed else ""
        return (f"<{cls.__module__}.{cls.__qualname__} device={self._b.name}:{self._index} "
                f"stream_id={self._handle:#x} priority={self._priority}{closed}>")


class ExternalStream(Stream[_ModuleEvent]):
    """Base of the ``ExternalStream`` class of every device module
    (``torch.cuda.ExternalStream``): a stream object for a stream made elsewhere, from its
    native handle, that does not own it (closing it or collecting it leaves the stream alone;
    the stream must outlive it).

    Args:
        stream_ptr: the native handle as an ``int``: a ``CUstream``/``cudaStream_t`` on cuda
            (CuPy's, PyTorch's, cuda.core's, C code's); on cpu and opencl the
            :attr:`~Stream.cuda_stream` (``stream_id``) of a live stream of the backend, made
            by accelrt in this process (those backends have no foreign streams).
        device: the device the stream belongs to (the module's current device by default;
            a negative index means it too, as ``torch.cuda.ExternalStream(ptr, -1)`` does).

    Raises:
        TypeError: ``stream_ptr`` is not an int.
        ValueError: the backend does not know the stream on that device.

    .. note:: As with ``torch.cuda.ExternalStream``, a cuda value that was never a stream
        may crash the driver.

    Example::

        >>> import accelrt as acc
        >>> s = acc.cpu.Stream()
        >>> e = acc.cpu.ExternalStream(s.cuda_stream)
        >>> e == s, isinstance(e, acc.cpu.Stream)
        (True, True)
    """

    __slots__ = ()

    def __init__(self, stream_ptr: int, device: DeviceLike = None) -> None:
        if _initialized(self):
            return   # as torch.cuda.ExternalStream: a second __init__ changes nothing
        if not isinstance(stream_ptr, int) or isinstance(stream_ptr, bool):
            raise TypeError(f"ExternalStream takes the stream handle as an int, got "
                            f"{type_shown(stream_ptr)}")
        name = self._backend_name
        if name is None:
            b, index = _dev._get_device_of(device, None)
        else:
            b, index = resolve(name, current_if_negative(name, device))
        super().__init__(stream_id=stream_ptr, device_index=index, device_type=b.name)


class device(_DeviceContext):  # noqa: N801 - torch.cuda.device's name
    """Context manager that makes a device of the module's backend the calling thread's
    current one and restores the previous one on exit (``torch.cuda.device``).

    ``None``, a negative index, or a device without an index make it a no-op.

    Args:
        device: an index, a device or string of the module's backend, or ``None``.

    Raises:
        ValueError: the device is of another backend.
        IndexError: (on entry) the index is out of range.

    Example::

        >>> import accelrt as acc
        >>> with acc.cpu.device(0):
        ...     acc.cpu.current_device()
        0
        >>> with acc.cpu.device(None):   # no-op
        ...     pass
    """

    __slots__ = ()

    def __init__(self, device: DeviceLike) -> None:
        d = typed(self._backend_name, device)
        if isinstance(d, _dev.device):
            d = -1 if d.index is None else d.index
        super().__init__(-1 if d is None else d)


class device_of(device):  # noqa: N801 - torch.cuda.device_of's name
    """Context manager that makes the device of ``obj`` (an array, stream or event of the
    module's backend) current (``torch.cuda.device_of``); a no-op for an object of another
    backend or without a device.

    Example::

        >>> import accelrt as acc
        >>> x = acc.zeros(2, device="cpu:0")
        >>> with acc.cpu.device_of(x):
        ...     acc.cpu.current_device()
        0
    """

    __slots__ = ()

    def __init__(self, obj: Any) -> None:
        d = getattr(obj, "device", None)
        idx = -1
        if isinstance(d, _dev.device) and d.type == self._backend_name and d.index is not None:
            idx = d.index
        _DeviceContext.__init__(self, idx)



class StreamContext:
    """Context manager that makes ``stream`` current on its device, and its device current,
    restoring both on exit (``torch.cuda.StreamContext``); ``None`` makes it a no-op.

    Args:
        stream: a stream of the module's backend, or ``None``.

    Raises:
        TypeError: ``stream`` is not a Stream.
        ValueError: ``stream`` belongs to another backend.

    Example::

        >>> import accelrt as acc
        >>> s = acc.cpu.Stream()
        >>> with acc.cpu.StreamContext(s):
        ...     acc.cpu.current_stream() == s
        True
    """

    __slots__ = ("_entered", "stream")

    #: The backend whose streams this context manager takes.
    _backend_name: ClassVar[str] = ""

    def __init__(self, stream: _stream.Stream | None) -> None:
        if stream is not None:
            if not isinstance(stream, _stream.Stream):
                raise TypeError(f"StreamContext takes an accelrt.Stream or None, got "
                                f"{type_shown(stream)}")
            if stream.device_type != self._backend_name:
                raise expected(self._backend_name, stream.device)
        self.stream = stream
        self._entered = 0

    def __enter__(self) -> _stream.Stream | None:
        if self.stream is not None:
            self.stream.__enter__()
            self._entered += 1
        return self.stream

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.stream is not None and self._entered:
            self._entered -= 1
            self.stream.__exit__(exc_type, exc, tb)


# ---------------------------------------------------------------------- the runtime
