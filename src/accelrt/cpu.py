"""``accelrt.cpu``: the ``torch.cuda`` runtime of the cpu backend, plus its settings.

The cpu backend simulates accelerator devices in host memory. Every function here takes an
``int`` device as a *cpu* index, whatever the current accelerator is, so ``acc.cpu`` works next
to ``acc.cuda`` in one process. The names and their semantics are ``torch.cuda``'s (see
:class:`accelrt._specific.DeviceModule`, which implements them once for every backend).

Settings (read when the backend is first used):

``ACCELRT_CPU_DEVICES``
    number of simulated devices, an integer >= 1 (default ``1``).
``ACCELRT_CPU_MEMORY``
    memory budget of *each* device: a byte count or a number with a unit, e.g. ``8GiB``,
    ``512MiB``, ``1.5GB`` (default: the physical memory). :func:`memory_limit` reports it; the
    caching allocator raises :class:`accelrt.OutOfMemoryError` beyond it.
``ACCELRT_CPU_STREAMS``
    ``sync`` (work runs at submission) or ``async`` (each stream has a worker thread).

Example::

    >>> import accelrt as acc
    >>> acc.cpu.is_available(), acc.cpu.device_count() >= 1
    (True, True)
    >>> with acc.cpu.Stream() as s:
    ...     acc.cpu.current_stream() == s
    True
    >>> acc.cpu.memory_limit() > 0
    True
"""

from __future__ import annotations

from typing import ClassVar

from . import _device, _graph, _specific
from ._errors import OutOfMemoryError
from ._specific import DeviceModule
from ._typing import DeviceLike
from .memory import MemPool, get_allocator_settings, set_allocator_settings
from .memory._pluggable import PluggableAllocator
from .memory._pluggable import PluggableAllocator as CUDAPluggableAllocator

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
    "caching_allocator_alloc",
    "caching_allocator_delete",
    "caching_allocator_disabled",
    "caching_allocator_enable",
    "can_device_access_peer",
    "change_current_allocator",
    "clock_rate",
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
    "memory_limit",
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
    "streams",
    "synchronize",
    "temperature",
    "unavailable_reason",
    "use_mem_pool",
    "utilization",
]


class Event(_specific.Event):
    """An event of a cpu device (``torch.cuda.Event`` for this backend): an
    :class:`accelrt.Event` whose ``int`` device is a cpu index.

    Example::

        >>> import accelrt as acc
        >>> issubclass(acc.cpu.Event, acc.Event)
        True
    """

    __slots__ = ()
    _backend_name = "cpu"


class Stream(_specific.Stream):
    """A stream of a cpu device (``torch.cuda.Stream`` for this backend): an
    :class:`accelrt.Stream` whose ``int`` device is a cpu index (``None`` or a negative
    index: the current cpu device), with :meth:`is_capturing` and :meth:`priority_range`.

    Example::

        >>> import accelrt as acc
        >>> issubclass(acc.cpu.Stream, acc.Stream)
        True
    """

    __slots__ = ()
    _backend_name = "cpu"
    _event_class = Event


class ExternalStream(_specific.ExternalStream, Stream):
    """A non-owning stream object for a cpu stream from its handle
    (``torch.cuda.ExternalStream`` for this backend): ``stream_ptr`` is the
    :attr:`~accelrt.cpu.Stream.cuda_stream` of a live stream of the cpu backend, made by accelrt in this process (the backend has no foreign streams;
    see :class:`accelrt._specific.ExternalStream`).

    Raises:
        TypeError: ``stream_ptr`` is not an int.
        ValueError: the backend does not know the stream on that device.

    Example::

        >>> import accelrt as acc
        >>> issubclass(acc.cpu.ExternalStream, acc.cpu.Stream)
        True
    """

    __slots__ = ()


class StreamContext(_specific.StreamContext):
    """``with StreamContext(stream):`` makes a cpu stream and its device current,
    restoring both on exit; ``None`` is a no-op (``torch.cuda.StreamContext``).

    Example::

        >>> import accelrt as acc
        >>> with acc.cpu.StreamContext(None):
        ...     pass
    """

    __slots__ = ()
    _backend_name = "cpu"


class device(_specific.device):  # noqa: N801 - torch.cuda.device's name
    """Context manager that makes a cpu device current and restores the previous one
    (``torch.cuda.device``); ``None`` or a negative index is a no-op.

    Example::

        >>> import accelrt as acc
        >>> with acc.cpu.device(None):
        ...     pass
    """

    __slots__ = ()
    _backend_name = "cpu"


class device_of(_specific.device_of):  # noqa: N801 - torch.cuda.device_of's name
    """Context manager that makes the device of an array, stream or event current if it is a
    cpu device (a no-op otherwise), as ``torch.cuda.device_of``.

    Example::

        >>> import accelrt as acc
        >>> with acc.cpu.device_of(None):   # no device: no-op
        ...     pass
    """

    __slots__ = ()
    _backend_name = "cpu"


class device_index(_device.device_index):  # noqa: N801 - torch.accelerator's name
    """Context manager that sets the calling thread's current cpu device index and
    restores the previous one (``None`` or a negative index: no-op).

    Example::

        >>> import accelrt as acc
        >>> with acc.cpu.device_index(None):
        ...     pass
    """

    __slots__ = ()
    _backend_name = "cpu"


class Graph(_graph.DeviceGraph):
    """A graph of cpu stream work (``torch.cuda.CUDAGraph`` for this backend):
    :class:`accelrt.Graph` fixed to the cpu backend.

    Example::

        >>> import accelrt as acc
        >>> issubclass(acc.cpu.Graph, acc.Graph)
        True
    """

    __slots__ = ()
    _backend_name: ClassVar[str | None] = "cpu"


class graph(_graph.graph):  # noqa: N801 - torch.cuda.graph's name
    """``with graph(g):`` captures the body's cpu work into ``g`` on a side stream
    (``torch.cuda.graph`` for this backend).

    Example::

        >>> import accelrt as acc
        >>> issubclass(acc.cpu.graph, acc.graph)
        True
    """

    _graph_class: ClassVar[type[_graph.Graph]] = Graph


#: ``torch.cuda.CUDAGraph``'s name (every device module carries torch.cuda's names).
CUDAGraph = Graph

_m: DeviceModule[Stream, Event] = _specific._register(DeviceModule(
    "cpu", __name__, stream=Stream, external_stream=ExternalStream, event=Event,
    stream_context=StreamContext,
    device=device, device_of=device_of, device_index=device_index, graph_class=Graph, graph=graph))

# The torch.cuda runtime of the cpu backend (documented on accelrt._specific.DeviceModule).

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
get_device_capability = _m.get_device_capability
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
nvtx = _m.nvtx
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


def memory_limit(device: DeviceLike = None, /) -> int:
    """The memory budget in bytes of a simulated cpu device (``ACCELRT_CPU_MEMORY``).

    Args:
        device: a cpu index, device or string (the current cpu device by default).

    Raises:
        ValueError: ``device`` is not a cpu device.
        IndexError: the index is out of range.

    Example::

        >>> import accelrt as acc
        >>> acc.cpu.memory_limit(0) == acc.cpu.get_device_properties(0)["total_memory"]
        True
    """
    return int(get_device_properties(device)["total_memory"])
