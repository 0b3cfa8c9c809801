"""``accelrt.cuda``: the ``torch.cuda`` runtime of the CUDA backend, plus CUDA-only extras.

Every ``torch.cuda`` runtime name (``set_device``, ``current_stream``, ``with stream(s):``,
``memory_stats``, ``manual_seed``, ``graph``, ...) is here with ``torch.cuda``'s signature and
semantics and an ``int`` device meaning a *CUDA* index (see
:class:`accelrt._specific.DeviceModule`, which implements them once for every backend).
CUDA-only extras, with
``torch.cuda``'s names and signatures: :data:`nvtx` ranges, NVML monitoring
(:func:`utilization`, :func:`temperature`, :func:`power_draw`, :func:`clock_rate`,
:func:`memory_usage`, :func:`list_gpu_processes`), :func:`get_device_name`,
:func:`get_device_capability` (a ``(major, minor)`` tuple, as in ``torch.cuda``),
:class:`ExternalStream`, ``__cuda_stream__`` interop (:func:`stream_handle`,
:func:`as_stream`), and :mod:`comm` (the same module as :mod:`accelrt.comm`, as
``torch.cuda.comm`` mirrors ``torch.nn.parallel.comm``).

Importing this module imports no NVIDIA package. Where CUDA cannot be used, PyTorch's rules
hold: ``is_available()`` is False, statistics are ``0``/``{}``, seeding is ignored, and the
rest raises :class:`~accelrt.BackendUnavailableError` with the reason.

Example::

    >>> import accelrt as acc
    >>> isinstance(acc.cuda.is_available(), bool)
    True
    >>> acc.cuda.device_count() >= 0
    True
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, cast

from . import (
    _backend,
    _device,
    _graph,
    _specific,
    _stream,
    comm,  # noqa: F401 - re-exported (accelrt.cuda.comm, as torch.cuda.comm)
)
from ._typing import DeviceLike
from ._errors import OutOfMemoryError
from ._specific import DeviceModule
from .backends.cuda import _nvml
from .backends.cuda import _nvtx as nvtx  # noqa: F401 - re-exported (accelrt.cuda.nvtx)
from .memory import MemPool, get_allocator_settings, set_allocator_settings
from .memory._pluggable import PluggableAllocator
from .memory._pluggable import PluggableAllocator as CUDAPluggableAllocator

if TYPE_CHECKING:
    from .backends.cuda._backend import CudaBackend

__all__ = [
    "CUDAGraph",
    "CUDAPluggableAllocator",
    "Event",
    "ExternalStream",
    "Graph",
    "MemPool",
    "OutOfMemoryError",
    "PluggableAllocator",
    "Stream",
    "StreamContext",
    "as_stream",
    "caching_allocator_alloc",
    "caching_allocator_delete",
    "caching_allocator_disabled",
    "caching_allocator_enable",
    "can_device_access_peer",
    "change_current_allocator",
    "clock_rate",
    "comm",
    "current_device",
    "current_device_index",
    "current_stream",
    "default_stream",
    "device",
    "device_count",
    "device_index",
    "device_memory_used",
    "device_of",
    "dump_snapshot",
    "empty_cache",
    "empty_host_cache",
    "export_dot",
    "get_allocator_backend",
    "get_allocator_settings",
    "get_arch_list",
    "get_device_capability",
    "get_device_name",
    "get_device_properties",
    "get_gencode_flags",
    "get_memory_info",
    "get_per_process_memory_fraction",
    "get_rng_state",
    "get_rng_state_all",
    "get_stream_from_external",
    "get_sync_debug_mode",
    "graph",
    "graph_pool_handle",
    "host_memory_stats",
    "host_memory_stats_as_nested_dict",
    "init",
    "initial_seed",
    "ipc_collect",
    "is_available",
    "is_bf16_supported",
    "is_current_stream_capturing",
    "is_initialized",
    "is_tf32_supported",
    "list_gpu_processes",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_cached",
    "max_memory_reserved",
    "mem_get_info",
    "memory",
    "memory_allocated",
    "memory_cached",
    "memory_reserved",
    "memory_snapshot",
    "memory_stats",
    "memory_stats_as_nested_dict",
    "memory_summary",
    "memory_usage",
    "nvtx",
    "power_draw",
    "profiler",
    "random",
    "record_memory_history",
    "reset_accumulated_host_memory_stats",
    "reset_accumulated_memory_stats",
    "reset_max_memory_allocated",
    "reset_max_memory_cached",
    "reset_peak_host_memory_stats",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_allocator_settings",
    "set_device",
    "set_device_index",
    "set_per_process_memory_fraction",
    "set_rng_state",
    "set_rng_state_all",
    "set_stream",
    "set_sync_debug_mode",
    "stream",
    "stream_handle",
    "streams",
    "synchronize",
    "temperature",
    "unavailable_reason",
    "use_mem_pool",
    "utilization",
]


class Event(_specific.Event):
    """An event of a cuda device (``torch.cuda.Event`` for this backend): an
    :class:`accelrt.Event` whose ``int`` device is a cuda index.

    Example::

        >>> import accelrt as acc
        >>> issubclass(acc.cuda.Event, acc.Event)
        True
    """

    __slots__ = ()
    _backend_name = "cuda"


class Stream(_specific.Stream):
    """A stream of a cuda device (``torch.cuda.Stream`` for this backend): an
    :class:`accelrt.Stream` whose ``int`` device is a cuda index (``None`` or a negative
    index: the current cuda device), with :meth:`is_capturing` and :meth:`priority_range`.

    Example::

        >>> import accelrt as acc
        >>> issubclass(acc.cuda.Stream, acc.Stream)
        True
    """

    __slots__ = ()
    _backend_name = "cuda"
    _event_class = Event


class ExternalStream(_specific.ExternalStream, Stream):
    """Wrap a CUDA stream made elsewhere (CuPy, PyTorch, cuda.core, C code) without owning it
    (``torch.cuda.ExternalStream``; see :class:`accelrt._specific.ExternalStream`).

    Args:
        stream_ptr: the ``cudaStream_t``/``CUstream`` value as an ``int``.
        device: the CUDA device the stream belongs to (the current CUDA device by default).

    Raises:
        TypeError: ``stream_ptr`` is not an int.
        ValueError: the driver does not know the stream on that device.

    .. note:: As with ``torch.cuda.ExternalStream``, the stream must outlive this object, and
        a value that was never a stream may crash the driver.

    Example::

        >>> import accelrt as acc
        >>> issubclass(acc.cuda.ExternalStream, acc.cuda.Stream)
        True
    """

    __slots__ = ()


class StreamContext(_specific.StreamContext):
    """``with StreamContext(stream):`` makes a cuda stream and its device current,
    restoring both on exit; ``None`` is a no-op (``torch.cuda.StreamContext``).

    Example::

        >>> import accelrt as acc
        >>> with acc.cuda.StreamContext(None):
        ...     pass
    """

    __slots__ = ()
    _backend_name = "cuda"


class device(_specific.device):  # noqa: N801 - torch.cuda.device's name
    """Context manager that makes a cuda device current and restores the previous one
    (``torch.cuda.device``); ``None`` or a negative index is a no-op.

    Example::

        >>> import accelrt as acc
        >>> with acc.cuda.device(None):
        ...     pass
    """

    __slots__ = ()
    _backend_name = "cuda"


class device_of(_specific.device_of):  # noqa: N801 - torch.cuda.device_of's name
    """Context manager that makes the device of an array, stream or event current if it is a
    cuda device (a no-op otherwise), as ``torch.cuda.device_of``.

    Example::

        >>> import accelrt as acc
        >>> with acc.cuda.device_of(None):   # no device: no-op
        ...     pass
    """

    __slots__ = ()
    _backend_name = "cuda"


class device_index(_device.device_index):  # noqa: N801 - torch.accelerator's name
    """Context manager that sets the calling thread's current cuda device index and
    restores the previous one (``None`` or a negative index: no-op).

    Example::

        >>> import accelrt as acc
        >>> with acc.cuda.device_index(None):
        ...     pass
    """

    __slots__ = ()
    _backend_name = "cuda"


class CUDAGraph(_graph.DeviceGraph):
    """A graph of cuda stream work (``torch.cuda.CUDAGraph`` for this backend):
    :class:`accelrt.Graph` fixed to the cuda backend.

    Example::

        >>> import accelrt as acc
        >>> issubclass(acc.cuda.CUDAGraph, acc.Graph)
        True
    """

    __slots__ = ()
    _backend_name: ClassVar[str | None] = "cuda"


class graph(_graph.graph):  # noqa: N801 - torch.cuda.graph's name
    """``with graph(g):`` captures the body's cuda work into ``g`` on a side stream
    (``torch.cuda.graph`` for this backend).

    Example::

        >>> import accelrt as acc
        >>> issubclass(acc.cuda.graph, acc.graph)
        True
    """

    _graph_class: ClassVar[type[_graph.Graph]] = CUDAGraph


class _CudaModule(DeviceModule[Stream, Event]):
    """The cuda backend's :class:`~accelrt._specific.DeviceModule`: device monitoring through
    NVML (no CUDA context is created), the CUDA profiler's switch (``cuProfilerStart``) and
    the NVML ``device_memory_used``, as ``torch.cuda``."""

    def _nvml_handle(self, device: DeviceLike) -> tuple[int, Any]:
        from .backends.cuda import _discovery
        b, idx = self._resolve(device)
        uuid = None if _discovery.probe().nvml_indices else b.get_device_properties(idx)["uuid"]
        return idx, _nvml.handle(idx, uuid)

    def utilization(self, device: DeviceLike = None) -> int:
        """Percent of the last sample period in which a kernel ran (NVML), as ``torch.cuda``.

        Example::

            >>> import accelrt as acc
            >>> acc.cuda.is_available() is False or 0 <= acc.cuda.utilization() <= 100
            True
        """
        return _nvml.utilization(self._nvml_handle(device)[1])

    def memory_usage(self, device: DeviceLike = None) -> int:
        """Percent of the last sample period in which device memory was read or written
        (NVML).

        Example::

            >>> import accelrt as acc
            >>> acc.cuda.is_available() is False or 0 <= acc.cuda.memory_usage() <= 100
            True
        """
        return _nvml.memory_usage(self._nvml_handle(device)[1])

    def temperature(self, device: DeviceLike = None) -> int:
        """GPU temperature in degrees Celsius (NVML).

        Example::

            >>> import accelrt as acc
            >>> acc.cuda.is_available() is False or acc.cuda.temperature() > 0
            True
        """
        return _nvml.temperature(self._nvml_handle(device)[1])

    def power_draw(self, device: DeviceLike = None) -> int:
        """Power draw in milliwatts (NVML).

        Example::

            >>> import accelrt as acc
            >>> acc.cuda.is_available() is False or acc.cuda.power_draw() > 0
            True
        """
        return _nvml.power_draw(self._nvml_handle(device)[1])

    def clock_rate(self, device: DeviceLike = None) -> int:
        """Current SM clock in MHz (NVML).

        Example::

            >>> import accelrt as acc
            >>> acc.cuda.is_available() is False or acc.cuda.clock_rate() > 0
            True
        """
        return _nvml.clock_rate(self._nvml_handle(device)[1])

    def list_gpu_processes(self, device: DeviceLike = None) -> str:
        """Human-readable list of processes using the device and their memory (NVML).

        Example::

            >>> import accelrt as acc
            >>> acc.cuda.is_available() is False or acc.cuda.list_gpu_processes().startswith("GPU:")
            True
        """
        idx, h = self._nvml_handle(device)
        return _nvml.list_gpu_processes(idx, h)

    def device_memory_used(self, device: DeviceLike = None) -> int:
        """Bytes of device memory in use by every process, as ``nvidia-smi`` reports them
        (NVML's ``nvmlDeviceGetMemoryInfo().used``; ``torch.cuda.device_memory_used``).

        Example::

            >>> import accelrt as acc
            >>> acc.cuda.is_available() is False or acc.cuda.device_memory_used() > 0
            True
        """
        return _nvml.memory_used(self._nvml_handle(device)[1])

    def _profiler_start(self) -> None:
        from .backends.cuda import _profiler
        b, idx = self._resolve(None)
        _profiler.start(cast("CudaBackend", b), idx)

    def _profiler_stop(self) -> None:
        from .backends.cuda import _profiler
        b, idx = self._resolve(None)
        _profiler.stop(cast("CudaBackend", b), idx)


_m: _CudaModule = _specific._register(_CudaModule(
    "cuda", __name__, stream=Stream, external_stream=ExternalStream, event=Event,
    stream_context=StreamContext, device=device, device_of=device_of,
    device_index=device_index, graph_class=CUDAGraph, graph=graph))

# The torch.cuda runtime of the cuda backend (documented on accelrt._specific.DeviceModule).


Graph = CUDAGraph

is_available = _m.is_available
unavailable_reason = _m.unavailable_reason
device_count = _m.device_count
is_initialized = _m.is_initialized
init = _m.init
ipc_collect = _m.ipc_collect
current_device = _m.current_device
current_device_index = _m.current_device_index
set_device = _m.set_device
set_device_index = _m.set_device_index
current_stream = _m.current_stream
default_stream = _m.default_stream
set_stream = _m.set_stream
stream = _m.stream
synchronize = _m.synchronize
is_current_stream_capturing = _m.is_current_stream_capturing
graph_pool_handle = _m.graph_pool_handle
get_device_properties = _m.get_device_properties
get_device_name = _m.get_device_name
can_device_access_peer = _m.can_device_access_peer
get_arch_list = _m.get_arch_list
get_gencode_flags = _m.get_gencode_flags
manual_seed = _m.manual_seed
manual_seed_all = _m.manual_seed_all
seed = _m.seed
seed_all = _m.seed_all
initial_seed = _m.initial_seed
get_rng_state = _m.get_rng_state
set_rng_state = _m.set_rng_state
get_rng_state_all = _m.get_rng_state_all
set_rng_state_all = _m.set_rng_state_all
memory_stats = _m.memory_stats
memory_stats_as_nested_dict = _m.memory_stats_as_nested_dict
memory_allocated = _m.memory_allocated
max_memory_allocated = _m.max_memory_allocated
memory_reserved = _m.memory_reserved
max_memory_reserved = _m.max_memory_reserved
memory_cached = _m.memory_cached
max_memory_cached = _m.max_memory_cached
reset_peak_memory_stats = _m.reset_peak_memory_stats
reset_accumulated_memory_stats = _m.reset_accumulated_memory_stats
reset_max_memory_allocated = _m.reset_max_memory_allocated
reset_max_memory_cached = _m.reset_max_memory_cached
memory_summary = _m.memory_summary
mem_get_info = _m.mem_get_info
get_memory_info = _m.get_memory_info
empty_cache = _m.empty_cache
set_sync_debug_mode = _m.set_sync_debug_mode
get_sync_debug_mode = _m.get_sync_debug_mode
change_current_allocator = _m.change_current_allocator
get_allocator_backend = _m.get_allocator_backend
set_per_process_memory_fraction = _m.set_per_process_memory_fraction
get_per_process_memory_fraction = _m.get_per_process_memory_fraction
caching_allocator_alloc = _m.caching_allocator_alloc
caching_allocator_delete = _m.caching_allocator_delete
use_mem_pool = _m.use_mem_pool
memory_snapshot = _m.memory_snapshot
dump_snapshot = _m.dump_snapshot
record_memory_history = _m.record_memory_history
memory = _m.memory
graphs = _m.graphs
export_dot = _graph.export_dot
empty_host_cache = _m.empty_host_cache
host_memory_stats = _m.host_memory_stats
reset_peak_host_memory_stats = _m.reset_peak_host_memory_stats
reset_accumulated_host_memory_stats = _m.reset_accumulated_host_memory_stats
# torch 2.14's memory, monitoring and profiling surface (issue 23 §3)
random = _m.random
streams = _m.streams
profiler = _m.profiler
caching_allocator_enable = _m.caching_allocator_enable
caching_allocator_disabled = _m.caching_allocator_disabled
host_memory_stats_as_nested_dict = _m.host_memory_stats_as_nested_dict
get_stream_from_external = _m.get_stream_from_external
is_bf16_supported = _m.is_bf16_supported
is_tf32_supported = _m.is_tf32_supported
device_memory_used = _m.device_memory_used
utilization = _m.utilization
memory_usage = _m.memory_usage
temperature = _m.temperature
power_draw = _m.power_draw
clock_rate = _m.clock_rate
list_gpu_processes = _m.list_gpu_processes


def _index(device: DeviceLike) -> tuple[_backend.Backend, int]:
    """(backend, index) of a CUDA device argument (``None``: the current CUDA device)."""
    return _m._resolve(device)


def get_device_capability(device: DeviceLike = None) -> tuple[int, int]:
    """``(major, minor)`` compute capability, as ``torch.cuda.get_device_capability``.

    (``accelrt.get_device_capability`` is the device-agnostic dict form.)

    Example::

        >>> import accelrt as acc
        >>> acc.cuda.is_available() is False or len(acc.cuda.get_device_capability()) == 2
        True
    """
    b, idx = _index(device)
    props = b.get_device_properties(idx)
    return int(props["major"]), int(props["minor"])


def stream_handle(stream: Any) -> int:
    """The raw CUDA stream handle of an accelrt CUDA stream or any object implementing the
    ``__cuda_stream__`` protocol (CuPy, PyTorch, cuda.core), so such objects can be passed
    wherever accelrt takes a stream.

    Raises:
        TypeError: the object is not a stream.
        ValueError: it is an accelrt stream of another backend.

    Example::

        >>> import accelrt as acc
        >>> class Foreign:
        ...     def __cuda_stream__(self):
        ...         return (0, 0x1234)
        >>> hex(acc.cuda.stream_handle(Foreign()))
        '0x1234'
    """
    if isinstance(stream, _stream.Stream):
        if stream.device_type != "cuda":
            raise ValueError(f"expected a cuda stream, got a {stream.device_type} stream")
        return int(stream.stream_id)
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        value = proto() if callable(proto) else proto
        if (not isinstance(value, tuple) or len(value) != 2
                or not all(isinstance(v, int) for v in value)):
            raise TypeError(f"{type(stream).__name__}.__cuda_stream__() must return a "
                            f"(version, handle) tuple of ints, got {value!r}")
        return int(value[1])
    for attr in ("cuda_stream", "ptr"):   # older torch.cuda.Stream / cupy.cuda.Stream
        value = getattr(stream, attr, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    raise TypeError(f"expected an accelrt cuda Stream or an object with __cuda_stream__ "
                    f"(CuPy, PyTorch, cuda.core), got {type(stream).__name__}")


def as_stream(stream: Any, device: DeviceLike = None) -> _stream.Stream:
    """An :class:`accelrt.Stream` for ``stream``: itself if it already is one, else an
    :class:`ExternalStream` over its ``__cuda_stream__`` handle on ``device``.

    Example::

        >>> import accelrt as acc
        >>> s = acc.Stream("cpu")
        >>> acc.cuda.as_stream(s) is s
        True
    """
    if isinstance(stream, _stream.Stream):
        return stream
    return ExternalStream(stream_handle(stream), device)

