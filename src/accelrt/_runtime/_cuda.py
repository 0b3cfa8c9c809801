"""The CUDA-only part of ``accelrt.cuda`` (the rest is the runtime every device module has):
NVML monitoring and the CUDA profiler's switch (:class:`CudaModule`), ``torch.cuda``'s
``(major, minor)`` :func:`get_device_capability`, and ``__cuda_stream__`` interop
(:func:`stream_handle`, :func:`as_stream`). ``scripts/gen_device_modules.py`` binds these
names in the generated ``accelrt/cuda.py``.

Example::

    >>> import accelrt as acc
    >>> acc.cuda.stream_handle is stream_handle
    True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from .. import _stream
from ..backends.cuda import _nvml
from ._classes import Event, Stream
from ._module import DeviceModule
from ._registry import device_module
from .._errors import type_shown

if TYPE_CHECKING:
    from .._typing import DeviceLike
    from ..backends.cuda._backend import CudaBackend

__all__ = ["CudaModule", "as_stream", "get_device_capability", "stream_handle"]

#: The NVML query of each monitoring function that takes only the device's handle.
_NVML: dict[str, Callable[[Any], int]] = {
    "clock_rate": _nvml.clock_rate, "memory_usage": _nvml.memory_usage,
    "memory_used": _nvml.memory_used, "power_draw": _nvml.power_draw,
    "temperature": _nvml.temperature, "utilization": _nvml.utilization,
}

_S = TypeVar("_S", bound="Stream[Any]")
_E = TypeVar("_E", bound=Event)


class CudaModule(DeviceModule[_S, _E]):
    """The cuda backend's :class:`~accelrt._runtime.DeviceModule`: device monitoring through
    NVML (no CUDA context is created), the CUDA profiler's switch (``cuProfilerStart``) and
    the NVML ``device_memory_used``, as ``torch.cuda``.

    Example::

        >>> import accelrt as acc
        >>> isinstance(acc.backends.device_module("cuda"), CudaModule)
        True
    """

    def _monitor(self, what: str, device: DeviceLike) -> int | str | None:
        """NVML's answer for the device (no CUDA context is created)."""
        from ..backends.cuda import _discovery
        b, idx = self._resolve(device)
        uuid = None if _discovery.probe().nvml_indices else b.get_device_properties(idx)["uuid"]
        h = _nvml.handle(idx, uuid)
        if what == "list_gpu_processes":
            return _nvml.list_gpu_processes(idx, h)
        return _NVML[what](h)

    def list_gpu_processes(self, device: DeviceLike = None) -> str:
        """The processes using the GPU and their memory, one line each
        (``torch.cuda.list_gpu_processes``); without a usable NVIDIA driver torch 2.15's
        message, ``"cuda driver can't be loaded, is cuda enabled?"``, not an error.

        Example::

            >>> import accelrt as acc
            >>> out = acc.cuda.list_gpu_processes()
            >>> out.startswith("GPU:") or out == "cuda driver can't be loaded, is cuda enabled?"
            True
        """
        if self._usable() is None:
            return "cuda driver can't be loaded, is cuda enabled?"
        return super().list_gpu_processes(device)

    def _profiler_start(self) -> None:
        from ..backends.cuda import _profiler
        b, idx = self._resolve(None)
        _profiler.start(cast("CudaBackend", b), idx)

    def _profiler_stop(self) -> None:
        from ..backends.cuda import _profiler
        b, idx = self._resolve(None)
        _profiler.stop(cast("CudaBackend", b), idx)


def get_device_capability(device: DeviceLike = None) -> tuple[int, int]:
    """``(major, minor)`` compute capability, as ``torch.cuda.get_device_capability``.

    (``accelrt.get_device_capability`` is the device-agnostic dict form.)

    Example::

        >>> import accelrt as acc
        >>> acc.cuda.is_available() is False or len(acc.cuda.get_device_capability()) == 2
        True
    """
    b, idx = device_module("cuda")._resolve_id(device)
    props = b.get_device_properties(idx)
    return int(props["major"]), int(props["minor"])


def stream_handle(stream: Any) -> int:
    """The raw CUDA stream handle of an accelrt CUDA stream or any object implementing the


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
        name = device_module("cuda").name   # the backend this module is bound to
        if stream.device_type != name:
            raise ValueError(f"expected a {name} stream, got a {stream.device_type} stream")
        return int(stream.stream_id)
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        value = proto() if callable(proto) else proto
        if (not isinstance(value, tuple) or len(value) != 2
                or not all(isinstance(v, int) for v in value)):
            raise TypeError(f"{type_shown(stream)}.__cuda_stream__() must return a "
                            f"(version, handle) tuple of ints, got {value!r}")
        return int(value[1])
    for attr in ("cuda_stream", "ptr"):   # older torch.cuda.Stream / cupy.cuda.Stream
        value = getattr(stream, attr, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    raise TypeError(f"expected an accelrt cuda Stream or an object with __cuda_stream__ "
                    f"(CuPy, PyTorch, cuda.core), got {type_shown(stream)}")


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
    return device_module("cuda").ExternalStream(stream_handle(stream), device)
