"""The ``torch.cuda`` runtime, written once for every backend: :class:`DeviceModule` and the
classes that device modules (``accelrt.cuda``, ``accelrt.cpu``, ``accelrt.opencl``, and
:func:`device_module` for any registered backend) subclass.

A device module is a :class:`DeviceModule` bound to one backend whose methods the module binds
to module-level names (``memory_allocated = _m.memory_allocated``), plus that module's own
:class:`Stream`, :class:`Event`, :class:`device`, :class:`device_of`, :class:`StreamContext`,
``Graph`` and ``graph`` subclasses fixed to the backend. Every name keeps ``torch.cuda``'s
signature and semantics; an ``int`` device means an index of *that* backend whatever the
current accelerator is, and a device of another type raises PyTorch's ``ValueError``
(``Expected a cuda device, but got: cpu``).

Where the backend cannot be used here (no driver, no device), PyTorch's rules hold:
``is_available``, ``device_count``, ``is_initialized``, ``is_current_stream_capturing`` and
``get_arch_list`` answer without raising; the statistics getters (``memory_stats``,
``memory_allocated``, ``max_memory_reserved``, ``memory_summary``, ...) report ``{}``/``0``;
``empty_cache``, ``empty_host_cache`` and the seeding functions (``manual_seed``, ``seed``,
...) are no-ops; everything else raises :class:`~accelrt.BackendUnavailableError` with the
reason.

Example::

    >>> import accelrt as acc
    >>> from accelrt._specific import device_module
    >>> m = device_module("cpu")
    >>> m.device_count() >= 1, type(m.current_stream()).__name__
    (True, 'Stream')
    >>> with m.device(0):
    ...     m.current_device()
    0
"""

from __future__ import annotations

import collections
import contextlib
import sys
import threading
import types
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, cast

from . import _backend, _event, _graph, _stream
from . import _sync_debug as _sd
from . import _device as _dev
from ._device import _check_index, _lazy_init, _tls
from ._errors import BackendUnavailableError, OutOfMemoryError
from ._fork import reinit_after_fork
from .memory import _pluggable

if TYPE_CHECKING:
    import os
    from types import TracebackType

    import numpy as np
    import numpy.typing as npt

    from ._properties import DeviceProperties
    from ._typing import DeviceLike
    from .memory import MemPool as _MemPool
    from .memory._allocator import DeviceCachingAllocator

__all__ = [
    "DeviceModule",
    "Event",
    "Stream",
    "StreamContext",
    "device",
    "device_module",
    "device_of",
]


# ---------------------------------------------------------------------- device arguments

def _expected(name: str, got: object) -> ValueError:
    """PyTorch's error for a device of the wrong type (``torch.cuda._utils``)."""
    return ValueError(f"Expected a {name} device, but got: {got}")


def _typed(name: str, device: Any) -> _dev.device | int | None:
    """Check the type of a ``device`` argument of backend ``name``'s module without touching
    the backend: ``None``, an ``int`` index (a negative one is returned as is), or a
    :class:`accelrt.device` of that type (a ``str`` is parsed; a ``device`` context manager
    gives its index)."""
    if device is None:
        return None
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    if isinstance(device, _DeviceContext):   # torch.cuda.device(1) stands for index 1
        if device._backend_name != name:
            raise _expected(name, f"{device._backend_name}:{device.idx}")
        return device.idx
    d = _dev.device(device) if isinstance(device, str) else device
    if not isinstance(d, _dev.device):
        raise TypeError(f"expected a device, int, str or None, got {type(device).__name__}")
    if d.type != name:
        raise _expected(name, d)
    return d


def _index_of(b: _backend.Backend, d: _dev.device | int | None) -> int:
    """A checked device index of ``b`` for a :func:`_typed` argument (``None`` or a device
    without an index: the backend's current device)."""
    if d is None:
        return _tls.device.get(b.name, 0)
    if isinstance(d, int):
        if d < 0:
            raise ValueError(f"device index must not be negative, got {d}")
        return _check_index(b, d)
    if d.index is None:
        return _tls.device.get(b.name, 0)
    return _check_index(b, d.index)


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    """Flat dotted statistics (``"a.b.c": v``) as nested dicts (``{"a": {"b": {"c": v}}}``)."""
    nested: dict[str, Any] = {}
    for key, value in flat.items():
        *path, leaf = key.split(".")
        d = nested
        for part in path:
            d = d.setdefault(part, {})
        d[leaf] = value
    return nested


@contextlib.contextmanager
def _caching_disabled(dm: DeviceModule[Any, Any]) -> Iterator[None]:
    """:meth:`DeviceModule.caching_allocator_disabled`."""
    from .memory._allocator import caching_enabled
    prev = caching_enabled(dm.name)
    dm.caching_allocator_enable(False)
    try:
        yield
    finally:
        dm.caching_allocator_enable(prev)


# ---------------------------------------------------------------------- classes

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


class Stream(_stream.Stream):
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

    __slots__ = ("_origin",)
    # _origin: the stream object this one views (keeps an owned handle alive), or None

    #: The device module's ``Event`` class (what :meth:`record_event` makes).
    _event_class: ClassVar[type[Event]] = Event

    def __init__(self, device: DeviceLike = None, priority: int = 0, *,
                 stream_id: int | None = None, device_index: int | None = None,
                 device_type: str | None = None) -> None:
        name = self._backend_name
        if name is not None and stream_id is None and device_index is None \
                and device_type is None:
            d = _typed(name, device)
            device = None if isinstance(d, int) and d < 0 else d
        self._origin: _stream.Stream | None = None
        super().__init__(device, priority=priority, stream_id=stream_id,
                         device_index=device_index, device_type=device_type)

    @classmethod
    def _view(cls, s: _stream.Stream) -> Stream:
        """``s`` itself if it is of this class, else a non-owning object of this class for the
        same stream (it keeps ``s`` alive)."""
        if isinstance(s, cls):
            return s
        v = cls.__new__(cls)
        v._b, v._index, v._handle = s._b, s._index, s._handle
        v._priority, v._free, v._closed = s._priority, None, s._closed
        v._origin = s if s._free is not None else None
        return v

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

    def record_event(self, event: _event.Event | None = None) -> _event.Event:
        """Record ``event`` (a new event of this device module if ``None``) on this stream and
        return it.

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


class ExternalStream(Stream):
    """Base of the ``ExternalStream`` class of every device module
    (``torch.cuda.ExternalStream``): a stream object for a stream made elsewhere, from its
    native handle, that does not own it (closing it or collecting it leaves the stream alone;
    the stream must outlive it).

    Args:
        stream_ptr: the native handle as an ``int``: a ``CUstream``/``cudaStream_t`` on cuda
            (CuPy's, PyTorch's, cuda.core's, C code's); on cpu and opencl the
            :attr:`~Stream.cuda_stream` (``stream_id``) of a live stream of the backend, made
            by accelrt in this process (those backends have no foreign streams).
        device: the device the stream belongs to (the module's current device by default).

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
        if not isinstance(stream_ptr, int) or isinstance(stream_ptr, bool):
            raise TypeError(f"ExternalStream takes the stream handle as an int, got "
                            f"{type(stream_ptr).__name__}")
        name = self._backend_name
        if name is None:
            b, index = _dev._get_device_of(device, None)
        else:
            b, index = device_module(name)._resolve(device)
        super().__init__(stream_id=stream_ptr, device_index=index, device_type=b.name)


class _DeviceContext:
    """Shared machinery of :class:`device` and :class:`device_of`."""

    __slots__ = ("_stack", "idx", "prev_idx")

    #: The backend whose current device this context manager sets.
    _backend_name: ClassVar[str] = ""

    def __init__(self, idx: int) -> None:
        self.idx = idx
        self.prev_idx = -1
        self._stack: list[tuple[str, int]] = []   # (backend name, previous index) per entry

    def __enter__(self) -> None:
        idx = self.idx
        if idx < 0:
            self._stack.append(("", -1))
            return
        b = _backend.get_backend(self._backend_name)
        _check_index(b, idx)
        devices = _tls.device
        self.prev_idx = devices.get(b.name, 0)
        self._stack.append((b.name, self.prev_idx))
        devices[b.name] = idx

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if not self._stack:
            raise RuntimeError("device.__exit__ without a matching __enter__; use 'with'")
        name, prev = self._stack.pop()
        if name:
            _tls.device[name] = prev

    def __repr__(self) -> str:
        cls = type(self)
        return f"{cls.__module__}.{cls.__qualname__}({self.idx})"


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
        d = _typed(self._backend_name, device)
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


_DeviceCM = device
_DeviceOfCM = device_of


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
                                f"{type(stream).__name__}")
            if stream.device_type != self._backend_name:
                raise _expected(self._backend_name, stream.device)
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

_S = TypeVar("_S", bound=Stream)
_E = TypeVar("_E", bound=Event)


class DeviceModule(Generic[_S, _E]):
    """The ``torch.cuda`` runtime bound to one backend; device modules bind its methods to
    module-level names.

    Args:
        backend_name: a registered backend name (it need not be usable here).
        module: the name of the device module, e.g. ``"accelrt.cuda"``.
        stream_class: the module's :class:`Stream` subclass.
        external_stream: the module's :class:`ExternalStream` (a subclass of it and of the
            module's ``Stream``).
        event_class: the module's :class:`Event` subclass.
        stream_context_class: the module's :class:`StreamContext` subclass.
        graph_class: the module's graph class (``accelrt.cuda.CUDAGraph``).

    Example::

        >>> from accelrt._specific import device_module
        >>> device_module("cpu").memory_allocated(0) >= 0
        True
    """

    #: ``torch.cuda.OutOfMemoryError`` (the one :class:`accelrt.OutOfMemoryError`).
    OutOfMemoryError = OutOfMemoryError
    #: ``torch.cuda.memory.CUDAPluggableAllocator`` (:class:`accelrt.memory.PluggableAllocator`).
    CUDAPluggableAllocator = _pluggable.PluggableAllocator
    PluggableAllocator = _pluggable.PluggableAllocator

    def __init__(self, backend_name: str, module: str, *, stream: type[_S],
                 external_stream: type[ExternalStream], event: type[_E],
                 stream_context: type[StreamContext], device: type[_DeviceCM],
                 device_of: type[_DeviceOfCM], device_index: type[_dev.device_index],
                 graph_class: type[_graph.DeviceGraph], graph: type[_graph.graph]) -> None:
        if not isinstance(backend_name, str):
            raise TypeError(f"backend_name must be a str, got {type(backend_name).__name__}")
        self.name = backend_name
        self.module = module
        self.Stream = stream
        self.ExternalStream = external_stream
        self.Event = event
        self.StreamContext = stream_context
        self.device = device
        self.device_of = device_of
        self.device_index = device_index
        self.Graph = self.CUDAGraph = graph_class
        self.graph = graph
        self.export_dot = _graph.export_dot
        #: ``torch.cuda.memory`` of this module (:class:`MemoryModule`).
        self.memory = MemoryModule(self)
        #: ``torch.cuda.random`` and ``torch.cuda.streams`` of this module.
        self.random = RandomModule(self)
        self.streams = StreamsModule(self)
        #: ``torch.cuda.profiler`` of this module (:class:`ProfilerModule`).
        self.profiler = ProfilerModule(self)
        #: ``torch.cuda.nvtx``: NVTX annotates host threads, the same on every module.
        from .backends.cuda import _nvtx
        self.nvtx = _nvtx
        #: ``torch.cuda.graphs`` of this module (:class:`GraphsModule`).
        self.graphs = GraphsModule(self)

    @property
    def MemPool(self) -> type[_MemPool]:  # noqa: N802 - torch.cuda.MemPool's name
        """:class:`accelrt.memory.MemPool` (pools are per device; pass a device of this
        backend to ``use_mem_pool``).

        Example::

            >>> import accelrt as acc
            >>> acc.backends.device_module("cpu").MemPool is acc.memory.MemPool
            True
        """
        from .memory import MemPool
        return MemPool

    @staticmethod
    def get_allocator_settings() -> str:
        """The process-wide allocator settings (:func:`accelrt.memory.get_allocator_settings`).

        Example::

            >>> import accelrt as acc
            >>> isinstance(acc.backends.device_module("cpu").get_allocator_settings(), str)
            True
        """
        from .memory import get_allocator_settings
        return get_allocator_settings()

    @staticmethod
    def set_allocator_settings(settings: str) -> None:
        """Change the process-wide allocator settings
        (:func:`accelrt.memory.set_allocator_settings`).

        Example::

            >>> import accelrt as acc
            >>> m = acc.backends.device_module("cpu")
            >>> m.set_allocator_settings(m.get_allocator_settings())
        """
        from .memory import set_allocator_settings
        set_allocator_settings(settings)

    def __repr__(self) -> str:
        return f"<accelrt device module {self.module!r} for backend {self.name!r}>"

    # ------------------------------------------------------------------ helpers
    def _b(self) -> _backend.Backend:
        return _backend.get_backend(self.name)

    def _resolve(self, device: Any) -> tuple[_backend.Backend, int]:
        """``(backend, checked index)`` of a device argument (``None``: current device)."""
        d = _typed(self.name, device)
        b = self._b()
        return b, _index_of(b, d)

    def _device(self, device: Any) -> _dev.device:
        """The :class:`accelrt.device` (with index) of a device argument."""
        b, index = self._resolve(device)
        return _dev._device_obj(b.name, index)

    def _peek(self, device: Any) -> DeviceCachingAllocator | None:
        """The allocator of a device if it was started; ``None`` before that or where the
        backend cannot be used (never starts anything)."""
        d = _typed(self.name, device)
        try:
            b = self._b()
        except BackendUnavailableError:
            return None
        from .memory._allocator import peek_allocator
        return peek_allocator(b.name, _index_of(b, d))

    def _usable(self) -> _backend.Backend | None:
        try:
            return self._b()
        except BackendUnavailableError:
            return None

    # ------------------------------------------------------------------ availability
    def is_available(self) -> bool:
        """True if the backend is usable here (installed, a driver, at least one device).
        Never raises and never creates a device context.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.is_available()
            True
        """
        try:
            return _backend.unavailable_reason(self.name) is None
        except Exception:  # noqa: BLE001 - availability probes never raise
            return False

    def unavailable_reason(self) -> str | None:
        """Why the backend cannot be used here, or ``None`` if it can.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.unavailable_reason() is None
            True
        """
        return _backend.unavailable_reason(self.name)

    def device_count(self) -> int:
        """Number of devices of the backend (0 if it cannot be used). Never raises.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.device_count() >= 1
            True
        """
        try:
            return self._b().device_count()
        except Exception:  # noqa: BLE001 - an unusable backend has no devices
            return 0

    def is_initialized(self) -> bool:
        """True once some device of the backend was initialised in this process (by
        :meth:`init` or any use). Never raises.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.init()
            >>> acc.cpu.is_initialized()
            True
        """
        return any(name == self.name for name, _ in list(_dev._initialized))

    def init(self) -> None:
        """Initialise the backend's current device now (``torch.cuda.init``); other calls do
        it lazily. Does nothing more if it is initialised already.

        Raises:
            BackendUnavailableError: the backend cannot be used here.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.init()
        """
        b = self._b()
        _lazy_init(b, _tls.device.get(b.name, 0))

    def ipc_collect(self) -> None:
        """``torch.cuda.ipc_collect``: free the memory this process shared with other processes
        through :mod:`accelrt.multiprocessing` once every consumer released it (returning it to
        the caching allocator); initialises the backend, as PyTorch's does.

        Raises:
            BackendUnavailableError: the backend cannot be used here.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.ipc_collect()
        """
        self.init()
        refs = sys.modules.get("accelrt.multiprocessing._refs")
        if refs is not None:   # nothing was shared unless accelrt.multiprocessing is loaded
            refs.collect()

    # ------------------------------------------------------------------ current device
    def current_device(self) -> int:
        """Index of the calling thread's current device of the backend.

        Raises:
            BackendUnavailableError: the backend cannot be used here.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.current_device()
            0
        """
        b = self._b()
        return _tls.device.get(b.name, 0)

    def current_device_index(self) -> int:
        """Same as :meth:`current_device` (``torch.accelerator``'s name).

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.current_device_index()
            0
        """
        return self.current_device()

    def set_device(self, device: DeviceLike) -> None:
        """Set the calling thread's current device of the backend; a negative index is a
        no-op (``torch.cuda.set_device``).

        Raises:
            ValueError: the device is of another backend, or is ``None``/has no index.
            IndexError: the index is out of range.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.set_device(0)
            >>> acc.cpu.current_device()
            0
        """
        d = _typed(self.name, device)
        if isinstance(d, int) and d < 0:
            return
        b = self._b()
        if d is None or (isinstance(d, _dev.device) and d.index is None):
            raise ValueError(f"Expected a device with a specified index or an integer, but "
                             f"got: {device}")
        _tls.device[b.name] = _index_of(b, d)

    def set_device_index(self, device: DeviceLike, /) -> None:
        """Same as :meth:`set_device` (``torch.accelerator``'s name).

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.set_device_index(0)
        """
        self.set_device(device)

    # ------------------------------------------------------------------ streams
    def current_stream(self, device: DeviceLike = None) -> _S:
        """The calling thread's current stream of a device (the current one by default), as
        an object of the module's ``Stream`` class.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.current_stream()
            <accelrt.cpu.Stream device=cpu:0 stream_id=0x0 priority=0>
        """
        b, index = self._resolve(device)
        return cast("_S", self.Stream._view(_stream._current(b, index)))

    def default_stream(self, device: DeviceLike = None) -> _S:
        """The default stream of a device (the current one by default).

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.default_stream() == acc.cpu.current_stream()
            True
        """
        b, index = self._resolve(device)
        return cast("_S", self.Stream._view(_stream._default(b, (b.name, index))))

    def set_stream(self, stream: _stream.Stream | None) -> None:
        """Make ``stream`` current on its device and its device the current device of the
        backend; ``None`` is a no-op (``torch.cuda.set_stream``).

        Raises:
            TypeError: ``stream`` is not a Stream.
            ValueError: ``stream`` belongs to another backend.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.set_stream(acc.cpu.current_stream())
        """
        if stream is None:
            return
        if isinstance(stream, _stream.Stream) and stream.device_type != self.name:
            raise ValueError(f"set_stream() of {self.module} takes a {self.name} stream, got a "
                             f"{stream.device_type} stream; use accelrt.set_stream()")
        _stream.set_stream(stream)

    def stream(self, stream: _stream.Stream | None) -> StreamContext:
        """``with stream(s):`` makes ``s`` current (and its device), restoring both on exit;
        ``None`` is a no-op (``torch.cuda.stream``).

        Example::

            >>> import accelrt as acc
            >>> s = acc.cpu.Stream()
            >>> with acc.cpu.stream(s):
            ...     acc.cpu.current_stream() == s
            True
            >>> with acc.cpu.stream(None):
            ...     pass
        """
        return self.StreamContext(stream)

    def synchronize(self, device: DeviceLike = None) -> None:
        """Wait for all streams of a device (the current one by default); a no-op before the
        device is initialised.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.synchronize()
        """
        b, index = self._resolve(device)
        if _dev._is_initialized(b, index):
            b.synchronize(index)
            if _sd.active:
                _sd.check(b.name)

    def is_current_stream_capturing(self) -> bool:
        """True if the current stream of the backend's current device is capturing a graph;
        False where the backend was never used or cannot be used (no context is created).

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.is_current_stream_capturing()
            False
        """
        b = self._usable()
        if b is None:
            return False
        index = _tls.device.get(b.name, 0)
        if not _dev._is_initialized(b, index):
            return False
        return bool(b.stream_is_capturing(index, _stream._current(b, index)._handle))

    def graph_pool_handle(self) -> tuple[int, int]:
        """A new memory-pool id that graphs can share (``torch.cuda.graph_pool_handle``).

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.graph_pool_handle() != acc.cpu.graph_pool_handle()
            True
        """
        return _graph.graph_pool_handle()

    # ------------------------------------------------------------------ properties
    def get_device_properties(self, device: DeviceLike = None) -> DeviceProperties:
        """Properties of a device with PyTorch's attributes (``name``, ``total_memory``,
        ``multi_processor_count``, ``major``, ``minor``, ``uuid``, ...) and the backend's extras
        by item: :func:`accelrt.get_device_properties` for this backend.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.get_device_properties().total_memory > 0
            True
        """
        return _dev.get_device_properties(self._device(device))

    def get_device_capability(self, device: DeviceLike = None) -> dict[str, Any]:
        """Capabilities of a device (at least ``supported_dtypes``), as
        :func:`accelrt.get_device_capability` (``accelrt.cuda`` returns PyTorch's
        ``(major, minor)`` instead).

        Example::

            >>> import accelrt as acc
            >>> "float32" in acc.cpu.get_device_capability()["supported_dtypes"]
            True
        """
        return _dev.get_device_capability(self._device(device))

    def get_device_name(self, device: DeviceLike = None) -> str:
        """The name of a device (``get_device_properties(device)["name"]``).

        Example::

            >>> import accelrt as acc
            >>> isinstance(acc.cpu.get_device_name(), str)
            True
        """
        b, index = self._resolve(device)
        return str(b.get_device_properties(index)["name"])

    def can_device_access_peer(self, device: DeviceLike, peer_device: DeviceLike) -> bool:
        """True if ``device`` can access memory of ``peer_device`` directly.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.can_device_access_peer(0, 0)
            True
        """
        b, index = self._resolve(device)
        _, peer = self._resolve(peer_device)
        return bool(b.can_access_peer(index, peer))

    def get_arch_list(self) -> list[str]:
        """The architectures accelrt's device kernels are built for (``torch.cuda``'s
        ``sm_XY``/``compute_XY`` names; on CUDA: NVRTC's target for each visible device and
        the committed PTX's virtual architecture); ``[]`` where the backend cannot be used or
        compiles no kernels of its own (cpu, opencl).

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.get_arch_list()
            []
        """
        b = self._usable()
        if b is None:
            return []
        return [str(a) for a in b.arch_list()]

    def get_gencode_flags(self) -> str:
        """:meth:`get_arch_list` as ``nvcc`` ``-gencode`` flags (``""`` when it is empty).

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.get_gencode_flags()
            ''
        """
        flags = []
        for arch in self.get_arch_list():
            kind, _, number = arch.partition("_")
            flags.append(f"-gencode compute=compute_{number},code={kind}_{number}")
        return " ".join(flags)

    # ------------------------------------------------------------------ random
    def manual_seed(self, seed: int) -> None:
        """Seed the default generator of the backend's current device; silently ignored where
        the backend cannot be used (as in PyTorch).

        Raises:
            TypeError/ValueError: ``seed`` is not an int in ``[-2**63, 2**64)``.

        Example::

            >>> import accelrt as acc
            >>> saved = acc.cpu.get_rng_state()
            >>> acc.cpu.manual_seed(7)
            >>> acc.cpu.initial_seed()
            7
            >>> acc.cpu.set_rng_state(saved)
        """
        from .random import _generator as g
        value = g._check_seed(seed)
        b = self._usable()
        if b is not None:
            g._set(b, _tls.device.get(b.name, 0), value, 0)

    def manual_seed_all(self, seed: int) -> None:
        """Seed the default generators of every device of the backend; silently ignored where
        the backend cannot be used.

        Example::

            >>> import accelrt as acc
            >>> saved = acc.cpu.get_rng_state_all()
            >>> acc.cpu.manual_seed_all(7)
            >>> acc.cpu.set_rng_state_all(saved)
        """
        from .random import _generator as g
        value = g._check_seed(seed)
        b = self._usable()
        if b is not None:
            for index in range(b.device_count()):
                g._set(b, index, value, 0)

    def seed(self) -> None:
        """Seed the current device's default generator with a random number (see
        :meth:`initial_seed`); silently ignored where the backend cannot be used.

        Example::

            >>> import accelrt as acc
            >>> saved = acc.cpu.get_rng_state()
            >>> acc.cpu.seed()
            >>> acc.cpu.set_rng_state(saved)
        """
        import secrets
        self.manual_seed(secrets.randbits(64))

    def seed_all(self) -> None:
        """Seed every device's default generator with one random number; silently ignored
        where the backend cannot be used.

        Example::

            >>> import accelrt as acc
            >>> saved = acc.cpu.get_rng_state_all()
            >>> acc.cpu.seed_all()
            >>> acc.cpu.set_rng_state_all(saved)
        """
        import secrets
        self.manual_seed_all(secrets.randbits(64))

    def initial_seed(self) -> int:
        """The seed of the current device's default generator.

        Raises:
            BackendUnavailableError: the backend cannot be used here.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.initial_seed() >= 0
            True
        """
        from .random import _generator as g
        b = self._b()
        return g._get(b, _tls.device.get(b.name, 0))[0]

    def get_rng_state(self, device: DeviceLike = None) -> npt.NDArray[np.uint8]:
        """The 16-byte state of a device's default generator (``numpy.uint8``).

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.get_rng_state().shape
            (16,)
        """
        from .random import _generator as g
        b, index = self._resolve(device)
        return g._pack_state(*g._get(b, index))

    def set_rng_state(self, new_state: Any, device: DeviceLike = None) -> None:
        """Restore a device's default generator from :meth:`get_rng_state`.

        Raises:
            TypeError/ValueError: the state is not 16 uint8 bytes.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.set_rng_state(acc.cpu.get_rng_state())
        """
        from .random import _generator as g
        seed_, offset = g._unpack_state(new_state)
        b, index = self._resolve(device)
        g._set(b, index, seed_, offset)

    def get_rng_state_all(self) -> list[npt.NDArray[np.uint8]]:
        """The states of every device of the backend, by index.

        Example::

            >>> import accelrt as acc
            >>> len(acc.cpu.get_rng_state_all()) == acc.cpu.device_count()
            True
        """
        from .random import _generator as g
        b = self._b()
        return [g._pack_state(*g._get(b, i)) for i in range(b.device_count())]

    def set_rng_state_all(self, new_states: Iterable[Any]) -> None:
        """Set the state of device ``i`` to ``new_states[i]``.

        Raises:
            IndexError: more states than devices.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.set_rng_state_all(acc.cpu.get_rng_state_all())
        """
        from .random import _generator as g
        b = self._b()
        parsed = [g._unpack_state(s) for s in new_states]   # validate all before changing any
        n = b.device_count()
        if len(parsed) > n:
            raise IndexError(f"set_rng_state_all got {len(parsed)} states but {b.name!r} has "
                             f"only {n} device(s)")
        for index, (seed_, offset) in enumerate(parsed):
            g._set(b, index, seed_, offset)

    # ------------------------------------------------------------------ memory statistics
    def memory_stats(self, device: DeviceLike = None) -> collections.OrderedDict[str, int]:
        """The allocator statistics of a device (PyTorch's flat keys, sorted); empty before
        the first allocation and where the backend cannot be used.

        Example::

            >>> import accelrt as acc
            >>> isinstance(acc.cpu.memory_stats(), dict)
            True
        """
        a = self._peek(device)
        return collections.OrderedDict() if a is None else a.sorted_stats()

    def memory_stats_as_nested_dict(self, device: DeviceLike = None) -> dict[str, Any]:
        """:meth:`memory_stats` as nested dicts; ``{}`` before the first allocation and where
        the backend cannot be used.

        Example::

            >>> import accelrt as acc
            >>> isinstance(acc.cpu.memory_stats_as_nested_dict(), dict)
            True
        """
        return _nest(self.memory_stats(device))

    def memory_allocated(self, device: DeviceLike = None) -> int:
        """Bytes handed out by the caching allocator on a device (0 where the backend cannot
        be used).

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.memory_allocated() >= 0
            True
        """
        a = self._peek(device)
        return 0 if a is None else a.memory_allocated()

    def max_memory_allocated(self, device: DeviceLike = None) -> int:
        """Peak of :meth:`memory_allocated` (0 where the backend cannot be used).

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.max_memory_allocated() >= acc.cpu.memory_allocated()
            True
        """
        a = self._peek(device)
        return 0 if a is None else a.max_memory_allocated()

    def memory_reserved(self, device: DeviceLike = None) -> int:
        """Bytes the caching allocator holds from a device (0 where the backend cannot be
        used).

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.memory_reserved() >= acc.cpu.memory_allocated()
            True
        """
        a = self._peek(device)
        return 0 if a is None else a.memory_reserved()

    def max_memory_reserved(self, device: DeviceLike = None) -> int:
        """Peak of :meth:`memory_reserved` (0 where the backend cannot be used).

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.max_memory_reserved() >= acc.cpu.memory_reserved()
            True
        """
        a = self._peek(device)
        return 0 if a is None else a.max_memory_reserved()

    def memory_cached(self, device: DeviceLike = None) -> int:
        """Deprecated: :meth:`memory_reserved` (emits ``FutureWarning``)."""
        warnings.warn(f"{self.module}.memory_cached has been renamed to "
                      f"{self.module}.memory_reserved", FutureWarning, stacklevel=2)
        return self.memory_reserved(device)

    def max_memory_cached(self, device: DeviceLike = None) -> int:
        """Deprecated: :meth:`max_memory_reserved` (emits ``FutureWarning``)."""
        warnings.warn(f"{self.module}.max_memory_cached has been renamed to "
                      f"{self.module}.max_memory_reserved", FutureWarning, stacklevel=2)
        return self.max_memory_reserved(device)

    def reset_peak_memory_stats(self, device: DeviceLike = None) -> None:
        """Set every ``peak`` statistic of a device to its ``current`` value.

        Raises:
            BackendUnavailableError: the backend cannot be used here.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.reset_peak_memory_stats()
        """
        self._resolve(device)
        a = self._peek(device)
        if a is not None:
            a.reset_peak_stats()

    def reset_accumulated_memory_stats(self, device: DeviceLike = None) -> None:
        """Zero the totals and ``num_*`` counters of a device.

        Raises:
            BackendUnavailableError: the backend cannot be used here.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.reset_accumulated_memory_stats()
        """
        self._resolve(device)
        a = self._peek(device)
        if a is not None:
            a.reset_accumulated_stats()

    def reset_max_memory_allocated(self, device: DeviceLike = None) -> None:
        """Deprecated: :meth:`reset_peak_memory_stats`, which resets *all* peaks (emits
        ``FutureWarning``)."""
        warnings.warn(f"{self.module}.reset_max_memory_allocated now calls "
                      f"{self.module}.reset_peak_memory_stats, which resets /all/ peak memory "
                      "stats.", FutureWarning, stacklevel=2)
        self.reset_peak_memory_stats(device)

    def reset_max_memory_cached(self, device: DeviceLike = None) -> None:
        """Deprecated: :meth:`reset_peak_memory_stats`, which resets *all* peaks (emits
        ``FutureWarning``)."""
        warnings.warn(f"{self.module}.reset_max_memory_cached now calls "
                      f"{self.module}.reset_peak_memory_stats, which resets /all/ peak memory "
                      "stats.", FutureWarning, stacklevel=2)
        self.reset_peak_memory_stats(device)

    def memory_summary(self, device: DeviceLike = None, abbreviated: bool = False) -> str:
        """A human-readable table of :meth:`memory_stats` (all zeros where the backend cannot
        be used).

        Example::

            >>> import accelrt as acc
            >>> "memory summary" in acc.cpu.memory_summary()
            True
        """
        from .memory._summary import format_summary
        d = _typed(self.name, device)
        b = self._usable()
        if b is not None:
            index = _index_of(b, d)
        elif isinstance(d, _dev.device):
            index = d.index or 0
        else:
            index = max(d or 0, 0)
        return format_summary(self.memory_stats(device), index, self.name, abbreviated)

    def mem_get_info(self, device: DeviceLike = None) -> tuple[int, int]:
        """``(free, total)`` bytes of a device as the device reports them
        (``torch.cuda.mem_get_info``).

        Raises:
            BackendUnavailableError: the backend cannot be used here.

        Example::

            >>> import accelrt as acc
            >>> free, total = acc.cpu.mem_get_info()
            >>> 0 <= free <= total
            True
        """
        b, index = self._resolve(device)
        free, total = b.get_memory_info(index)
        return int(free), int(total)

    def get_memory_info(self, device: DeviceLike = None) -> tuple[int, int]:
        """Same as :meth:`mem_get_info` (:func:`accelrt.memory.get_memory_info`'s name).

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.get_memory_info() == acc.cpu.mem_get_info()
            True
        """
        return self.mem_get_info(device)

    # ------------------------------------------------------------------ sync debug mode
    def set_sync_debug_mode(self, debug_mode: int | str) -> None:
        """Warn (``"warn"``/1) or raise (``"error"``/2) on every synchronizing operation of this
        backend, or stop (``"default"``/0): ``torch.cuda.set_sync_debug_mode``. See
        :func:`accelrt.set_sync_debug_mode`.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.set_sync_debug_mode("warn"); acc.cpu.get_sync_debug_mode()
            1
            >>> acc.cpu.set_sync_debug_mode(0)
        """
        from ._sync_debug import set_sync_debug_mode
        set_sync_debug_mode(debug_mode, self.name)

    def get_sync_debug_mode(self) -> int:
        """This backend's sync debug mode: 0 (default), 1 (warn) or 2 (error).

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.get_sync_debug_mode()
            0
        """
        from ._sync_debug import get_sync_debug_mode
        return get_sync_debug_mode(self.name)

    # ------------------------------------------------------------------ pluggable allocators
    def change_current_allocator(self, allocator: _pluggable.PluggableAllocator) -> None:
        """Replace this backend's caching allocator by ``allocator`` (a
        :class:`accelrt.memory.PluggableAllocator`) before any allocation:
        ``torch.cuda.memory.change_current_allocator``. See
        :func:`accelrt.memory.change_current_allocator`.

        Raises:
            RuntimeError: an allocator of this backend was already initialised.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.get_allocator_backend()
            'native'
        """
        from .memory._pluggable import change_current_allocator
        change_current_allocator(allocator, self.name)

    def get_allocator_backend(self) -> str:
        """``"native"`` (accelrt's caching allocator) or ``"pluggable"`` (replaced by
        :meth:`change_current_allocator`): ``torch.cuda.get_allocator_backend``.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.get_allocator_backend()
            'native'
        """
        from .memory._pluggable import get_allocator_backend
        return get_allocator_backend(self.name)

    # ------------------------------------------------------------------ memory control
    def empty_cache(self) -> None:
        """Release every unused cached block of every started device of the backend; a no-op
        before any allocation and where the backend cannot be used (as in PyTorch).

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.empty_cache()
        """
        from .memory._allocator import peek_allocator
        for i in range(self.device_count()):
            a = peek_allocator(self.name, i)
            if a is not None:
                a.empty_cache()

    def set_per_process_memory_fraction(self, fraction: float,
                                        device: DeviceLike = None) -> None:
        """Cap what the caching allocator may reserve on a device at ``fraction`` of it.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.set_per_process_memory_fraction(1.0)
        """
        from . import memory
        memory.set_per_process_memory_fraction(fraction, self._device(device))

    def get_per_process_memory_fraction(self, device: DeviceLike = None) -> float:
        """The fraction set by :meth:`set_per_process_memory_fraction` (1.0: no cap).

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.get_per_process_memory_fraction()
            1.0
        """
        from . import memory
        return memory.get_per_process_memory_fraction(self._device(device))

    def caching_allocator_alloc(self, size: int, device: DeviceLike = None,
                                stream: Any = None) -> int:
        """Allocate ``size`` bytes from a device's caching allocator; returns the pointer.

        Example::

            >>> import accelrt as acc
            >>> p = acc.cpu.caching_allocator_alloc(512)
            >>> acc.cpu.caching_allocator_delete(p)
        """
        from . import memory
        return memory.caching_allocator_alloc(size, self._device(device), stream)

    def caching_allocator_delete(self, mem_ptr: int) -> None:
        """Free memory from :meth:`caching_allocator_alloc` (back to the cache).

        Raises:
            TypeError: ``mem_ptr`` is not an int.
            ValueError: ``mem_ptr`` was allocated on another backend's device, did not come
                from ``caching_allocator_alloc``, or was already deleted.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.caching_allocator_delete(acc.cpu.caching_allocator_alloc(64))
        """
        from . import memory
        owner = memory._raw_owner.get(mem_ptr) if isinstance(mem_ptr, int) else None
        b = getattr(owner, "_b", None)
        if b is not None and b.name != self.name:
            where = f"{b.name}:{getattr(owner, '_index', '?')}"
            raise ValueError(f"pointer {mem_ptr:#x} was allocated on {where}, not on a "
                             f"{self.name} device; free it with "
                             "accelrt.memory.caching_allocator_delete()")
        memory.caching_allocator_delete(mem_ptr)

    def use_mem_pool(self, pool: _MemPool, device: DeviceLike = None
                     ) -> contextlib.AbstractContextManager[None]:
        """Route the calling thread's allocations on a device (the current one by default)
        into ``pool`` (``torch.cuda.use_mem_pool``).

        Example::

            >>> import accelrt as acc
            >>> pool = acc.cpu.MemPool()
            >>> with acc.cpu.use_mem_pool(pool):
            ...     x = acc.zeros(4, device="cpu")
            >>> del x
        """
        from . import memory
        return memory.use_mem_pool(pool, self._device(device))

    # ------------------------------------------------------------------ history, snapshots
    def _snapshot(self, augment_with_fx_traces: bool = False) -> dict[str, Any]:
        from . import memory
        self._b()
        return memory._snapshot(_dev._type_device(self.name), augment_with_fx_traces)

    def memory_snapshot(self, mempool_id: tuple[int, int] | None = None,
                        include_traces: bool = True) -> list[dict[str, Any]]:
        """The segments of every started device of the backend, sorted by address.

        Args:
            mempool_id: only the segments of this private pool (a ``MemPool.id``).
            include_traces: torch 2.14's switch for gathering trace entries, which the
                segments never carry (in PyTorch neither): ``False`` returns the same list.

        Raises:
            TypeError: ``include_traces`` is not a bool.
            BackendUnavailableError: the backend cannot be used here.

        Example::

            >>> import accelrt as acc
            >>> isinstance(acc.cpu.memory_snapshot(), list)
            True
        """
        from .memory import _check_include_traces
        _check_include_traces(include_traces)
        segments: list[dict[str, Any]] = self._snapshot()["segments"]
        if mempool_id is None:
            return segments
        want = tuple(mempool_id)
        return [s for s in segments if tuple(s.get("segment_pool_id", (0, 0))) == want]

    def dump_snapshot(self, filename: str | os.PathLike[str] = "dump_snapshot.pickle",
                      augment_with_fx_traces: bool = False) -> None:
        """Pickle the backend's full memory snapshot (every device) to ``filename``
        (PyTorch's ``_dump_snapshot``; ``augment_with_fx_traces=True`` is a ``ValueError``:
        accelrt runs no torch.fx code).

        Example::

            >>> import accelrt as acc, os, tempfile
            >>> with tempfile.TemporaryDirectory() as d:
            ...     acc.cpu.dump_snapshot(os.path.join(d, "snap.pickle"))
        """
        from .memory._snapshot import dump_snapshot
        dump_snapshot(filename, self._snapshot(augment_with_fx_traces))

    def record_memory_history(self, enabled: str | bool | None = "all",
                              context: str | None = "all", stacks: str = "all",
                              max_entries: int = sys.maxsize, device: DeviceLike = None,
                              clear_history: bool = False, compile_context: bool = False,
                              global_record_annotations: bool = False,
                              skip_actions: list[str] | None = None,
                              record_pinned_host_memory: bool = False,
                              record_cuda: bool = True) -> None:
        """:func:`accelrt.memory.record_memory_history` on the backend's devices; ``device=None``
        means every device of the backend.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.record_memory_history(max_entries=100)
            >>> acc.cpu.record_memory_history(None)
        """
        from . import memory
        memory._torch_only(compile_context=compile_context,
                           global_record_annotations=global_record_annotations)
        memory._device_history_only(record_pinned_host_memory, record_cuda)
        if device is not None:
            targets = [self._device(device)]
        else:
            targets = [_dev._device_obj(self.name, i) for i in range(self._b().device_count())]
        for d in targets:
            memory.record_memory_history(enabled, context, stacks, max_entries, d,
                                         clear_history, compile_context,
                                         global_record_annotations, skip_actions)

    # ------------------------------------------------------------------ pinned host pool
    def empty_host_cache(self) -> None:
        """Return the backend's cached pinned host blocks to the OS (a no-op before the first
        pinned allocation and where the backend cannot be used).

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.empty_host_cache()
        """
        from .memory import _host
        pool = _host.peek_host_allocator(self.name)
        if pool is not None:
            pool.empty_cache()

    def host_memory_stats(self) -> collections.OrderedDict[str, int]:
        """Statistics of the backend's pinned host pool (flat, sorted; empty before use).

        Raises:
            BackendUnavailableError: the backend cannot be used here.

        Example::

            >>> import accelrt as acc
            >>> isinstance(acc.cpu.host_memory_stats(), dict)
            True
        """
        from .memory import _host
        self._b()
        pool = _host.peek_host_allocator(self.name)
        if pool is None:
            return collections.OrderedDict()
        return collections.OrderedDict(sorted(pool.stats().items()))

    def reset_peak_host_memory_stats(self) -> None:
        """Set every ``peak`` of :meth:`host_memory_stats` to its ``current`` value.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.reset_peak_host_memory_stats()
        """
        from .memory import _host
        self._b()
        pool = _host.peek_host_allocator(self.name)
        if pool is not None:
            pool.reset_peak_stats()

    def reset_accumulated_host_memory_stats(self) -> None:
        """Zero the totals, call counts and durations of :meth:`host_memory_stats`.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.reset_accumulated_host_memory_stats()
        """
        from .memory import _host
        self._b()
        pool = _host.peek_host_allocator(self.name)
        if pool is not None:
            pool.reset_accumulated_stats()

    # ------------------------------------------------------------------ torch 2.14: memory,
    # monitoring and profiling surface (issue 23 §3; kept together to ease merges)
    def caching_allocator_enable(self, value: bool = True) -> None:
        """Turn the caching allocator of every device of the backend on or off
        (``torch.cuda.caching_allocator_enable``). While it is off, each allocation comes
        straight from the backend at its exact size and each free of one gives it back at once
        (after the work of the streams that used it), as PyTorch's uncached path: neither
        shows in the statistics, snapshots or history, which stay PyTorch-exact for what the
        cache served. Blocks cached before stay cached (``empty_cache`` releases them).

        Raises:
            TypeError: ``value`` is not a bool.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.caching_allocator_enable(False)
            >>> x = acc.zeros(256, device="cpu")    # not counted in memory_allocated()
            >>> del x
            >>> acc.cpu.caching_allocator_enable(True)
        """
        if not isinstance(value, bool):
            raise TypeError(f"caching_allocator_enable() takes a bool, got "
                            f"{type(value).__name__}")
        from .memory._allocator import set_caching
        set_caching(self.name, value)

    def caching_allocator_disabled(self) -> contextlib.AbstractContextManager[None]:
        """Context manager that turns the caching allocator off and restores its previous
        state on exit (``torch.cuda.caching_allocator_disabled``); see
        :meth:`caching_allocator_enable`.

        Example::

            >>> import accelrt as acc
            >>> before = acc.cpu.memory_allocated()
            >>> with acc.cpu.caching_allocator_disabled():
            ...     x = acc.zeros(256, device="cpu")
            ...     acc.cpu.memory_allocated() == before
            True
            >>> del x
        """
        return _caching_disabled(self)

    def host_memory_stats_as_nested_dict(self) -> dict[str, Any]:
        """:meth:`host_memory_stats` as nested dicts (``torch.cuda``'s name); ``{}`` before
        the first pinned allocation.

        Example::

            >>> import accelrt as acc
            >>> isinstance(acc.cpu.host_memory_stats_as_nested_dict(), dict)
            True
        """
        return _nest(self.host_memory_stats())

    def get_stream_from_external(self, data_ptr: int, device: DeviceLike = None) -> _S:
        """A stream object of this module for a stream made elsewhere, from its raw handle
        (``torch.cuda.get_stream_from_external``); it does not own the stream, which must
        outlive it. On cuda the handle is a ``CUstream``/``cudaStream_t``; on other backends
        it is the ``stream_id`` of a live stream of theirs.

        Raises:
            TypeError: ``data_ptr`` is not an int.
            ValueError: the backend does not know the stream on that device.

        Example::

            >>> import accelrt as acc
            >>> s = acc.cpu.Stream()
            >>> acc.cpu.get_stream_from_external(s.stream_id) == s
            True
        """
        if not isinstance(data_ptr, int) or isinstance(data_ptr, bool):
            raise TypeError(f"get_stream_from_external() takes the stream handle as an int, "
                            f"got {type(data_ptr).__name__}")
        b, index = self._resolve(device)
        return self.Stream(stream_id=data_ptr, device_index=index, device_type=b.name)

    def is_bf16_supported(self, including_emulation: bool = True) -> bool:
        """Whether the current device computes in bfloat16 (``torch.cuda.is_bf16_supported``):
        natively per its properties (``has_bfloat16``: CUDA compute capability 8.0 or newer;
        OpenCL's ``cl_intel_bfloat16_conversions``; a CPU's AVX512-BF16, AMX-BF16 or Arm BF16
        instructions), or, with ``including_emulation``, in software on any device. False
        where the backend cannot be used. Never raises for that.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.is_bf16_supported()
            True
        """
        if not self.is_available():
            return False
        if self.get_device_properties().get("has_bfloat16", False):
            return True
        return bool(including_emulation)

    def is_tf32_supported(self) -> bool:
        """Whether the current device has TensorFloat-32 matrix units
        (``torch.cuda.is_tf32_supported``), per its properties (``has_tf32``: CUDA compute
        capability 8.0 or newer; OpenCL's ``cl_intel_subgroup_matrix_multiply_accumulate``;
        never a CPU). False where the backend cannot be used.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.is_tf32_supported()
            False
        """
        if not self.is_available():
            return False
        return bool(self.get_device_properties().get("has_tf32", False))

    def device_memory_used(self, device: DeviceLike = None) -> int:
        """Bytes of a device's memory in use, as the device reports them
        (``torch.cuda.device_memory_used``): NVML's on cuda (every process's, as
        ``nvidia-smi``), ``total - free`` of :meth:`mem_get_info` elsewhere (on opencl, which
        has no such query, what this process allocated).

        Raises:
            BackendUnavailableError: the backend cannot be used here.

        Example::

            >>> import accelrt as acc
            >>> 0 <= acc.cpu.device_memory_used() <= acc.cpu.mem_get_info()[1]
            True
        """
        free, total = self.mem_get_info(device)
        return total - free

    def _no_monitoring(self, what: str, device: DeviceLike) -> BackendUnavailableError:
        self._resolve(device)   # a bad device argument is reported first
        return BackendUnavailableError(
            f"{self.name}: {what}() needs a device monitoring library for {self.name} "
            f"devices, which accelrt does not have (NVML answers it for NVIDIA GPUs: "
            f"accelrt.cuda.{what}())")

    def utilization(self, device: DeviceLike = None) -> int:
        """Percent of the last sample period in which a kernel ran
        (``torch.cuda.utilization``; NVML on cuda).

        Raises:
            BackendUnavailableError: the backend has no device monitoring (cpu, opencl), or
                cannot be used here.
        """
        raise self._no_monitoring("utilization", device)

    def memory_usage(self, device: DeviceLike = None) -> int:
        """Percent of the last sample period in which device memory was read or written
        (``torch.cuda.memory_usage``; NVML on cuda).

        Raises:
            BackendUnavailableError: the backend has no device monitoring (cpu, opencl), or
                cannot be used here.
        """
        raise self._no_monitoring("memory_usage", device)

    def temperature(self, device: DeviceLike = None) -> int:
        """Device temperature in degrees Celsius (``torch.cuda.temperature``; NVML on cuda).

        Raises:
            BackendUnavailableError: the backend has no device monitoring (cpu, opencl), or
                cannot be used here.
        """
        raise self._no_monitoring("temperature", device)

    def power_draw(self, device: DeviceLike = None) -> int:
        """Power draw in milliwatts (``torch.cuda.power_draw``; NVML on cuda).

        Raises:
            BackendUnavailableError: the backend has no device monitoring (cpu, opencl), or
                cannot be used here.
        """
        raise self._no_monitoring("power_draw", device)

    def clock_rate(self, device: DeviceLike = None) -> int:
        """Current clock of the device's cores in MHz (``torch.cuda.clock_rate``; NVML on
        cuda).

        Raises:
            BackendUnavailableError: the backend has no device monitoring (cpu, opencl), or
                cannot be used here.
        """
        raise self._no_monitoring("clock_rate", device)

    def list_gpu_processes(self, device: DeviceLike = None) -> str:
        """The processes using the device and their memory, one line each
        (``torch.cuda.list_gpu_processes``; NVML on cuda).

        Raises:
            BackendUnavailableError: the backend has no device monitoring (cpu, opencl), or
                cannot be used here.
        """
        raise self._no_monitoring("list_gpu_processes", device)

    def _profiler_start(self) -> None:
        """``profiler.start()`` on the current device (the cuda module overrides it)."""
        raise self._no_profiler("start")

    def _profiler_stop(self) -> None:
        """``profiler.stop()`` on the current device (the cuda module overrides it)."""
        raise self._no_profiler("stop")

    def _no_profiler(self, what: str) -> BackendUnavailableError:
        self._b()
        return BackendUnavailableError(
            f"{self.name}: profiler.{what}() switches a device profiler's collection "
            f"(cuProfilerStart/cuProfilerStop on cuda: accelrt.cuda.profiler), and {self.name} "
            "devices have none; profile host code with cProfile or a sampling profiler, and "
            "annotate it with nvtx ranges")


# ---------------------------------------------------------------------- registry

_modules: dict[str, DeviceModule[Any, Any]] = {}
_modules_lock = reinit_after_fork(threading.Lock())
_BUILTIN = {"cpu": "accelrt.cpu", "cuda": "accelrt.cuda", "opencl": "accelrt.opencl"}


#: ``torch.cuda.memory``'s public names that a :class:`MemoryModule` takes from its device
#: module (those the device module has).
_MEMORY_NAMES = (
    "caching_allocator_alloc", "caching_allocator_delete", "change_current_allocator",
    "empty_cache", "get_allocator_backend", "get_per_process_memory_fraction",
    "host_memory_stats", "list_gpu_processes", "max_memory_allocated", "max_memory_cached",
    "max_memory_reserved", "mem_get_info", "memory_allocated", "memory_cached",
    "memory_reserved", "memory_snapshot", "memory_stats", "memory_stats_as_nested_dict",
    "memory_summary", "reset_accumulated_host_memory_stats", "reset_accumulated_memory_stats",
    "reset_max_memory_allocated", "reset_max_memory_cached", "reset_peak_host_memory_stats",
    "reset_peak_memory_stats", "set_per_process_memory_fraction", "use_mem_pool", "MemPool",
    "CUDAPluggableAllocator", "OutOfMemoryError", "caching_allocator_disabled",
    "caching_allocator_enable", "host_memory_stats_as_nested_dict",
)


class MemoryModule(types.ModuleType):
    """``torch.cuda.memory`` for one device module: ``accelrt.cuda.memory`` (importable as
    ``import accelrt.cuda.memory``) has the device module's memory functions and PyTorch's
    private-but-used ``_record_memory_history``, ``_snapshot`` and ``_dump_snapshot``, fixed
    to the module's backend.

    Example::

        >>> import accelrt as acc
        >>> acc.cpu.memory._record_memory_history(max_entries=100)
        >>> sorted(acc.cpu.memory._snapshot())[:2]
        ['allocator_settings', 'device_traces']
        >>> acc.cpu.memory._record_memory_history(None)
    """

    def __init__(self, dm: DeviceModule[Any, Any]) -> None:
        super().__init__(f"{dm.module}.memory", f"``torch.cuda.memory`` of {dm.module}.")
        self._dm = dm
        for name in _MEMORY_NAMES:
            if hasattr(dm, name):
                setattr(self, name, getattr(dm, name))

    def _record_memory_history(self, enabled: str | bool | None = "all",
                               context: str | None = "all", stacks: str = "all",
                               max_entries: int = sys.maxsize, device: DeviceLike = None,
                               clear_history: bool = False, compile_context: bool = False,
                               global_record_annotations: bool = False,
                               skip_actions: list[str] | None = None,
                               record_pinned_host_memory: bool = False,
                               record_cuda: bool = True) -> None:
        """``torch.cuda.memory._record_memory_history`` (see
        :func:`accelrt.memory.record_memory_history`); ``device=None``: every device of the
        backend."""
        self._dm.record_memory_history(enabled, context, stacks, max_entries, device,
                                       clear_history, compile_context,
                                       global_record_annotations, skip_actions,
                                       record_pinned_host_memory, record_cuda)

    def _snapshot(self, device: DeviceLike = None, augment_with_fx_traces: bool = False
                  ) -> dict[str, Any]:
        """``torch.cuda.memory._snapshot``: the backend's full snapshot (every device, as
        PyTorch's; ``device`` is checked to be one of the backend's)."""
        if device is not None:
            self._dm._device(device)
        return self._dm._snapshot(augment_with_fx_traces)

    def _dump_snapshot(self, filename: str | os.PathLike[str] = "dump_snapshot.pickle",
                       augment_with_fx_traces: bool = False) -> None:
        """``torch.cuda.memory._dump_snapshot``: pickle :meth:`_snapshot` to ``filename``."""
        self._dm.dump_snapshot(filename, augment_with_fx_traces)

    def _memory_metadata_supported(self) -> bool:
        """``torch.cuda.memory._memory_metadata_supported``: True while the backend's
        allocator is the caching allocator (``get_allocator_backend() == "native"``), the only
        one that records metadata."""
        return bool(self._dm.get_allocator_backend() == "native")

    def _set_memory_metadata(self, metadata: str) -> None:
        """``torch.cuda.memory._set_memory_metadata``: the ``user_metadata`` of the history
        trace entries that the calling thread's allocations and frees on this backend record
        from now on (``""`` clears it); thread-local, for every device of the backend. It shows
        in :meth:`_snapshot`'s ``device_traces`` only, never on segments, blocks or
        statistics; with an allocator other than the caching one it is ignored.

        Raises:
            TypeError: ``metadata`` is not a str.
        """
        from .memory._history import set_metadata
        if not isinstance(metadata, str):
            raise TypeError(f"memory metadata must be a str, got {type(metadata).__name__}; "
                            "pass '' to clear it")
        if self._memory_metadata_supported():
            set_metadata(self._dm.name, metadata)

    def _get_memory_metadata(self) -> str:
        """``torch.cuda.memory._get_memory_metadata``: the calling thread's metadata of this
        backend (``""`` when none is set, and always with an allocator other than the caching
        one)."""
        from .memory._history import get_metadata
        if not self._memory_metadata_supported():
            return ""
        return get_metadata(self._dm.name)


#: ``torch.cuda.random``'s names (every one is a method of the device module).
_RANDOM_NAMES = ("get_rng_state", "get_rng_state_all", "set_rng_state", "set_rng_state_all",
                 "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed")


class RandomModule(types.ModuleType):
    """``torch.cuda.random`` for one device module: ``accelrt.cuda.random`` (importable as
    ``import accelrt.cuda.random``) has the module's seeding and RNG-state functions.

    Example::

        >>> import accelrt as acc
        >>> acc.cpu.random.initial_seed() == acc.cpu.initial_seed()
        True
    """

    def __init__(self, dm: DeviceModule[Any, Any]) -> None:
        super().__init__(f"{dm.module}.random", f"``torch.cuda.random`` of {dm.module}.")
        self.__all__ = list(_RANDOM_NAMES)
        for name in _RANDOM_NAMES:
            setattr(self, name, getattr(dm, name))


class StreamsModule(types.ModuleType):
    """``torch.cuda.streams`` for one device module: ``accelrt.cuda.streams`` (importable)
    has the module's ``Stream``, ``ExternalStream`` and ``Event`` classes.

    Example::

        >>> import accelrt as acc
        >>> acc.cpu.streams.Stream is acc.cpu.Stream
        True
    """

    def __init__(self, dm: DeviceModule[Any, Any]) -> None:
        super().__init__(f"{dm.module}.streams", f"``torch.cuda.streams`` of {dm.module}.")
        self.__all__ = ["Event", "ExternalStream", "Stream"]
        self.Stream = dm.Stream
        self.ExternalStream = dm.ExternalStream
        self.Event = dm.Event


class ProfilerModule(types.ModuleType):
    """``torch.cuda.profiler`` for one device module: :meth:`start`, :meth:`stop` and
    :meth:`profile` switch the collection of a device profiler started with collection off
    (cuda: ``cuProfilerStart``/``cuProfilerStop`` on the current device's context, as
    PyTorch's ``cudaProfilerStart``). Other backends have no device profiler: there they raise
    :class:`~accelrt.BackendUnavailableError`, as ``torch.cuda.profiler`` fails without CUDA.

    Example::

        >>> import accelrt as acc
        >>> try:
        ...     acc.cpu.profiler.start()
        ... except acc.BackendUnavailableError as e:
        ...     print(str(e)[:33])
        cpu: profiler.start() switches a
    """

    def __init__(self, dm: DeviceModule[Any, Any]) -> None:
        super().__init__(f"{dm.module}.profiler", f"``torch.cuda.profiler`` of {dm.module}.")
        self.__all__ = ["profile", "start", "stop"]
        self._dm = dm
        for name in self.__all__:   # module attributes, as dir() and inspect show them
            setattr(self, name, getattr(self, name))

    def start(self) -> None:
        """Start the device profiler's collection (``torch.cuda.profiler.start``).

        Raises:
            BackendUnavailableError: the backend has no device profiler, or cannot be used.
            DeviceError: the driver refused.
        """
        self._dm._profiler_start()

    def stop(self) -> None:
        """Stop the device profiler's collection (``torch.cuda.profiler.stop``)."""
        self._dm._profiler_stop()

    def profile(self) -> contextlib.AbstractContextManager[None]:
        """``with profile():`` collects for the body only (``torch.cuda.profiler.profile``)."""
        return _profiling(self)


@contextlib.contextmanager
def _profiling(p: ProfilerModule) -> Iterator[None]:
    p.start()
    try:
        yield
    finally:
        p.stop()


class GraphsModule(types.ModuleType):
    """``torch.cuda.graphs`` for one device module: ``accelrt.cuda.graphs`` (importable as
    ``import accelrt.cuda.graphs``) has the module's ``CUDAGraph`` (its graph class),
    ``graph``, ``graph_pool_handle``, ``is_current_stream_capturing``, ``export_dot`` and the
    ``register_graph_*_hook`` functions, whose hooks run for every graph capturing this
    backend's work (an :class:`accelrt.Graph` too). ``make_graphed_callables`` and
    ``export_graph_data`` need PyTorch's autograd and CUDA tools ids (docs/differences.md).

    Example::

        >>> import accelrt as acc
        >>> seen = []
        >>> h = acc.cpu.graphs.register_graph_instantiate_hook(seen.append)
        >>> x = acc.zeros(4, device="cpu")
        >>> g = acc.cpu.graphs.CUDAGraph()
        >>> with acc.cpu.graphs.graph(g):
        ...     _ = x.fill_(1.0)
        >>> seen == [g]
        True
        >>> h.remove()
    """

    def __init__(self, dm: DeviceModule[Any, Any]) -> None:
        super().__init__(f"{dm.module}.graphs", f"``torch.cuda.graphs`` of {dm.module}.")
        self._name = dm.name
        self.CUDAGraph = dm.Graph
        self.graph = dm.graph
        self.graph_pool_handle = dm.graph_pool_handle
        self.is_current_stream_capturing = dm.is_current_stream_capturing
        self.export_dot = _graph.export_dot
        self.RemovableHandle = _graph.RemovableHandle
        self.__all__ = ["CUDAGraph", "export_dot", "graph", "graph_pool_handle",
                        "is_current_stream_capturing", "register_graph_capture_end_hook",
                        "register_graph_capture_start_hook", "register_graph_destroy_hook",
                        "register_graph_instantiate_hook", "register_graph_replay_end_hook",
                        "register_graph_replay_start_hook"]

    def register_graph_capture_start_hook(
            self, fn: Callable[[_graph.Graph], None]) -> _graph.RemovableHandle:
        """Run ``fn(graph)`` as each graph's capture begins (the capture is live: work ``fn``
        submits to the capturing stream is captured). A failing hook is ignored. Returns a
        handle whose ``remove()`` unregisters it."""
        return _graph.register_global_hook(self._name, "capture_start", fn)

    def register_graph_capture_end_hook(
            self, fn: Callable[[_graph.Graph], None]) -> _graph.RemovableHandle:
        """Run ``fn(graph)`` as each graph's capture ends, while the captured graph is
        readable (before instantiation). A failing hook is ignored. Returns a handle."""
        return _graph.register_global_hook(self._name, "capture_end", fn)

    def register_graph_instantiate_hook(
            self, fn: Callable[[_graph.Graph], None]) -> _graph.RemovableHandle:
        """Run ``fn(graph)`` right after each graph is instantiated. A failing hook is
        ignored. Returns a handle."""
        return _graph.register_global_hook(self._name, "instantiate", fn)

    def register_graph_replay_start_hook(
            self, fn: Callable[[_graph.Graph], None]) -> _graph.RemovableHandle:
        """Run ``fn(graph)`` at the start of every replay of every graph, before the launch
        (keep it cheap). A failing hook is ignored. Returns a handle."""
        return _graph.register_global_hook(self._name, "replay_start", fn)

    def register_graph_replay_end_hook(
            self, fn: Callable[[_graph.Graph], None]) -> _graph.RemovableHandle:
        """Run ``fn(graph)`` at the end of every replay, once submitted (not finished), even
        if the launch failed. A failing hook is ignored. Returns a handle."""
        return _graph.register_global_hook(self._name, "replay_end", fn)

    def register_graph_destroy_hook(
            self, fn: Callable[[set[int]], None]) -> _graph.RemovableHandle:
        """Run ``fn(exec_ids)`` when a graph is destroyed (``reset``, ``close``, or
        collected), with the ids of the executable graphs it instantiated since its capture
        (CUDA's ``cuGraphExecGetId``). A failing hook is ignored. Returns a handle."""
        return _graph.register_global_hook(self._name, "destroy", fn)


_M = TypeVar("_M", bound="DeviceModule[Any, Any]")


def _register(m: _M) -> _M:
    """Record the :class:`DeviceModule` of a built-in device module (called at its import)
    and make its submodules importable (``import accelrt.cuda.memory``, ``.graphs``,
    ``.random``, ``.streams``, ``.profiler``, ``.nvtx``)."""
    with _modules_lock:
        _modules[m.name] = m
    for sub in (m.memory, m.graphs, m.random, m.streams, m.profiler):
        sys.modules[sub.__name__] = sub
    sys.modules[f"{m.module}.nvtx"] = m.nvtx
    return m


def device_module(name: str) -> DeviceModule[Stream, Event]:
    """The ``torch.cuda``-style runtime of a registered backend: for ``"cpu"``, ``"cuda"`` and
    ``"opencl"`` the object behind ``accelrt.cpu`` etc.; for a third-party backend, one made
    on first use with its own ``Stream``/``Event``/``Graph`` classes (printed as
    ``accelrt.<name>.Stream``). Re-exported as :func:`accelrt.backends.device_module`.

    Raises:
        TypeError: ``name`` is not a str.
        ValueError: no backend of that name is registered.

    Example::

        >>> import accelrt as acc
        >>> m = acc.backends.device_module("cpu")
        >>> m.current_stream() == acc.cpu.current_stream()
        True
    """
    if not isinstance(name, str):
        raise TypeError(f"device_module() takes a backend name, got {type(name).__name__}")
    m = _modules.get(name)
    if m is not None:
        return m
    builtin = _BUILTIN.get(name)
    if builtin is not None:
        import importlib
        importlib.import_module(builtin)
        return _modules[name]
    if name not in _backend.registered():
        raise ValueError(f"no backend named {name!r} is registered (registered: "
                         f"{sorted(_backend.registered())}); register it with "
                         "accelrt.backends.register() first")
    module = f"accelrt.{name}"

    def make(base: type, cls_name: str, **extra: Any) -> Any:
        return type(cls_name, (base,), {"__slots__": (), "__module__": module,
                                        "__qualname__": cls_name, "_backend_name": name,
                                        **extra})

    ev = make(Event, "Event")
    stream_cls = make(Stream, "Stream", _event_class=ev)
    ext = type("ExternalStream", (ExternalStream, stream_cls),
               {"__slots__": (), "__module__": module, "__qualname__": "ExternalStream"})
    dev_cls = make(device, "device")
    graph_cls = make(_graph.DeviceGraph, "Graph")
    with _modules_lock:
        m = _modules.get(name)
        if m is None:
            m = _modules[name] = DeviceModule(
                name, module, stream=stream_cls, external_stream=ext, event=ev,
                stream_context=make(StreamContext, "StreamContext"), device=dev_cls,
                device_of=make(device_of, "device_of"),
                device_index=make(_dev.device_index, "device_index"), graph_class=graph_cls,
                graph=type("graph", (_graph.graph,), {"__module__": module,
                                                      "_graph_class": graph_cls}))
    return m
