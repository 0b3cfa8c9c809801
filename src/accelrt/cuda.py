"""``accelrt.cuda``: the device-agnostic API bound to the CUDA backend, plus CUDA-only extras.

Every device-agnostic function (``device_count``, ``current_stream``, ``memory_stats``, ...)
is here with an ``int`` device meaning a *CUDA* index. CUDA-only extras, with
``torch.cuda``'s names and signatures: :data:`nvtx` ranges, NVML monitoring
(:func:`utilization`, :func:`temperature`, :func:`power_draw`, :func:`clock_rate`,
:func:`memory_usage`, :func:`list_gpu_processes`), :func:`get_device_name`,
:func:`get_device_capability` (a ``(major, minor)`` tuple, as in ``torch.cuda``),
:class:`ExternalStream`, ``__cuda_stream__`` interop (:func:`stream_handle`,
:func:`as_stream`), and :mod:`comm` (the same module as :mod:`accelrt.comm`, as
``torch.cuda.comm`` mirrors ``torch.nn.parallel.comm``).

Importing this module imports no NVIDIA package; each function raises
:class:`~accelrt.BackendUnavailableError` with the reason when CUDA cannot be used here.

Example::

    >>> import accelrt as acc
    >>> isinstance(acc.cuda.is_available(), bool)
    True
    >>> acc.cuda.device_count() >= 0
    True
"""

from __future__ import annotations

from typing import Any, ClassVar

from . import (
    _backend,
    _graph,
    _stream,
    comm,  # noqa: F401 - re-exported (accelrt.cuda.comm, as torch.cuda.comm)
)
from ._device import _get_device, _tls
from ._errors import BackendUnavailableError
from ._graph import graph_pool_handle  # noqa: F401 - re-exported
from ._specific import export_bound
from .backends.cuda import _nvml
from .backends.cuda import _nvtx as nvtx  # noqa: F401 - re-exported (accelrt.cuda.nvtx)

_EXTRAS = [
    "CUDAGraph",
    "ExternalStream",
    "as_stream",
    "clock_rate",
    "comm",
    "get_device_capability",
    "get_device_name",
    "graph",
    "graph_pool_handle",
    "is_current_stream_capturing",
    "list_gpu_processes",
    "memory_usage",
    "nvtx",
    "power_draw",
    "stream_handle",
    "temperature",
    "utilization",
]


def _index(device: Any) -> tuple[Any, int]:
    """(backend, index) of a CUDA device argument (``None``: the current CUDA device)."""
    b = _backend.get_backend("cuda")
    return _get_device(device, backend=b)


def _nvml_handle(device: Any) -> tuple[int, Any]:
    from .backends.cuda import _discovery
    b, idx = _index(device)
    uuid = None if _discovery.probe().nvml_indices else b.get_device_properties(idx)["uuid"]
    return idx, _nvml.handle(idx, uuid)


def get_device_name(device: Any = None) -> str:
    """Name of a CUDA device, e.g. ``"NVIDIA H100 80GB HBM3"``.

    Raises:
        BackendUnavailableError: CUDA cannot be used here.

    Example::

        >>> import accelrt as acc
        >>> acc.cuda.is_available() is False or isinstance(acc.cuda.get_device_name(0), str)
        True
    """
    b, idx = _index(device)
    return str(b.get_device_properties(idx)["name"])


def get_device_capability(device: Any = None) -> tuple[int, int]:
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


def utilization(device: Any = None) -> int:
    """Percent of the last sample period in which a kernel ran (NVML), as ``torch.cuda``.

    Example::

        >>> import accelrt as acc
        >>> acc.cuda.is_available() is False or 0 <= acc.cuda.utilization() <= 100
        True
    """
    return _nvml.utilization(_nvml_handle(device)[1])


def memory_usage(device: Any = None) -> int:
    """Percent of the last sample period in which device memory was read or written (NVML).

    Example::

        >>> import accelrt as acc
        >>> acc.cuda.is_available() is False or 0 <= acc.cuda.memory_usage() <= 100
        True
    """
    return _nvml.memory_usage(_nvml_handle(device)[1])


def temperature(device: Any = None) -> int:
    """GPU temperature in degrees Celsius (NVML).

    Example::

        >>> import accelrt as acc
        >>> acc.cuda.is_available() is False or acc.cuda.temperature() > 0
        True
    """
    return _nvml.temperature(_nvml_handle(device)[1])


def power_draw(device: Any = None) -> int:
    """Power draw in milliwatts (NVML).

    Example::

        >>> import accelrt as acc
        >>> acc.cuda.is_available() is False or acc.cuda.power_draw() > 0
        True
    """
    return _nvml.power_draw(_nvml_handle(device)[1])


def clock_rate(device: Any = None) -> int:
    """Current SM clock in MHz (NVML).

    Example::

        >>> import accelrt as acc
        >>> acc.cuda.is_available() is False or acc.cuda.clock_rate() > 0
        True
    """
    return _nvml.clock_rate(_nvml_handle(device)[1])


def list_gpu_processes(device: Any = None) -> str:
    """Human-readable list of processes using the device and their memory (NVML).

    Example::

        >>> import accelrt as acc
        >>> acc.cuda.is_available() is False or acc.cuda.list_gpu_processes().startswith("GPU:")
        True
    """
    idx, h = _nvml_handle(device)
    return _nvml.list_gpu_processes(idx, h)


class CUDAGraph(_graph.Graph):
    """A CUDA graph (``torch.cuda.CUDAGraph``): :class:`accelrt.Graph` fixed to the CUDA
    backend, whatever the current accelerator is.

    Example::

        >>> import accelrt as acc
        >>> issubclass(acc.cuda.CUDAGraph, acc.Graph)
        True
    """

    __slots__ = ()
    _backend_name: ClassVar[str | None] = "cuda"


class graph(_graph.graph):  # noqa: N801 - torch.cuda.graph's name
    """``torch.cuda.graph``: :class:`accelrt.graph` capturing on a CUDA side stream.

    Example::

        >>> import accelrt as acc
        >>> issubclass(acc.cuda.graph, acc.graph)
        True
    """

    _graph_class: ClassVar[type[_graph.Graph]] = CUDAGraph


def is_current_stream_capturing() -> bool:
    """True if the current stream of the current CUDA device is capturing a graph
    (``torch.cuda.is_current_stream_capturing``); False when CUDA was never used.

    Example::

        >>> import accelrt as acc
        >>> acc.cuda.is_available() is False or acc.cuda.is_current_stream_capturing() is False
        True
    """
    try:
        b = _backend.get_backend("cuda")
    except BackendUnavailableError:
        return False
    index = _tls.device.get("cuda", 0)
    return bool(b.stream_is_capturing(index, int(_stream._current(b, index)._handle)))


class ExternalStream(_stream.Stream):
    """Wrap a CUDA stream made elsewhere (CuPy, PyTorch, cuda.core, C code) without owning it.

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
        >>> issubclass(acc.cuda.ExternalStream, acc.Stream)
        True
    """

    __slots__ = ()

    def __init__(self, stream_ptr: int, device: Any = None) -> None:
        if not isinstance(stream_ptr, int) or isinstance(stream_ptr, bool):
            raise TypeError(f"ExternalStream takes the stream handle as an int, got "
                            f"{type(stream_ptr).__name__}")
        _, idx = _index(device)
        super().__init__(stream_id=stream_ptr, device_index=idx, device_type="cuda")


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


def as_stream(stream: Any, device: Any = None) -> _stream.Stream:
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


__all__ = sorted(set(export_bound("cuda", globals())) | set(_EXTRAS))
