"""``__cuda_array_interface__`` (CAI, version 3) helpers: export an accelrt array's dict and
consume a producer's dict, honouring its ``stream`` field.

The CUDA Array Interface is the dict that CuPy, Numba, PyTorch and others exchange to share
device memory without copies. Version 3 added ``stream``: the producer's stream on which the
data may still be being written. A consumer must not touch the data until that stream's work
has completed, so :func:`consume` makes the consumer's current accelrt stream wait for it
(with an event; the host does not block). ``stream`` is ``None`` when no synchronisation is
needed, ``1`` for the legacy default stream and ``2`` for the per-thread default stream;
``0`` is forbidden because it is ambiguous.

The helpers are backend-agnostic: they work on any backend whose memory the host cannot read
directly (CUDA in practice), and the consumer side accepts a ``backend`` so the same code can
be exercised with a CPU-hosted stand-in.

Example::

    >>> import numpy as np
    >>> from accelrt.interop import parse_cuda_array_interface
    >>> host = np.zeros((2, 3), dtype=np.float32)
    >>> cai = parse_cuda_array_interface({"shape": (2, 3), "typestr": "<f4",
    ...                                   "data": (host.ctypes.data, False), "version": 3,
    ...                                   "stream": None})
    >>> cai.shape, cai.dtype.name, cai.nbytes, cai.is_c_contiguous
    ((2, 3), 'float32', 24, True)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from .._errors import type_shown

__all__ = [
    "CudaArrayInterface",
    "consume_cuda_array_interface",
    "cuda_array_interface",
    "parse_cuda_array_interface",
    "wait_for_stream",
]

#: Stream values with a fixed meaning in CAI v3.
LEGACY_DEFAULT_STREAM = 1
PER_THREAD_DEFAULT_STREAM = 2


@dataclass(frozen=True)
class CudaArrayInterface:
    """A validated ``__cuda_array_interface__`` description.

    Attributes:
        ptr: device address of the first element (``0`` allowed only for empty arrays).
        shape: the dimensions.
        dtype: the element type.
        strides: byte strides, or ``None`` for C-contiguous.
        readonly: the producer marked the data read-only.
        stream: the producer's stream handle to wait for, or ``None``.
        version: the interface version the producer declared.
    """

    ptr: int
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    strides: tuple[int, ...] | None
    readonly: bool
    stream: int | None
    version: int

    @property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the elements (for contiguous data, the extent of the buffer)."""
        return self.size * self.dtype.itemsize

    @property
    def is_c_contiguous(self) -> bool:
        """True if the elements are laid out C-contiguously (``strides`` None or equal)."""
        if self.strides is None or self.size == 0:
            return True
        expected, step = [], self.dtype.itemsize
        for n in reversed(self.shape):
            expected.append(step)
            step *= n
        return all(n == 1 or s == e
                   for n, s, e in zip(self.shape, self.strides, reversed(expected)))


def _is_int(x: object) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def parse_cuda_array_interface(desc: Any) -> CudaArrayInterface:
    """Validate a ``__cuda_array_interface__`` dict (versions 0 to 3).

    Args:
        desc: the dict a producer exposes.

    Returns:
        A :class:`CudaArrayInterface`.

    Raises:
        TypeError: ``desc`` is not a mapping, or a field has the wrong type.
        ValueError: a field has a bad value (negative dimension, unknown or object ``typestr``,
            a mask, ``stream`` equal to 0, strides of the wrong length, a null pointer for
            non-empty data, ...).

    Example::

        >>> from accelrt.interop import parse_cuda_array_interface
        >>> parse_cuda_array_interface({"shape": (4,), "typestr": "|u1", "data": (0, False),
        ...                             "version": 3})
        Traceback (most recent call last):
        ...
        ValueError: __cuda_array_interface__: data pointer is 0 but the array has 4 elements
    """
    if not isinstance(desc, Mapping):
        raise TypeError(f"__cuda_array_interface__ must be a dict, got {type_shown(desc)}")
    for key in ("shape", "typestr", "data", "version"):
        if key not in desc:
            raise ValueError(f"__cuda_array_interface__ lacks the required key {key!r}")
    version = desc["version"]
    if not _is_int(version):
        raise TypeError(f"__cuda_array_interface__: version must be an int, got {version!r}")
    if not 0 <= int(version) <= 3:
        raise ValueError(f"__cuda_array_interface__: version {version} is not supported "
                         "(accelrt reads versions 0 to 3)")
    shape = desc["shape"]
    if not isinstance(shape, (tuple, list)) or not all(_is_int(n) for n in shape):
        raise TypeError(f"__cuda_array_interface__: shape must be a tuple of ints, got "
                        f"{shape!r}")
    shape = tuple(int(n) for n in shape)
    if any(n < 0 for n in shape):
        raise ValueError(f"__cuda_array_interface__: shape {shape} has a negative dimension")
    typestr = desc["typestr"]
    if not isinstance(typestr, str):
        raise TypeError(f"__cuda_array_interface__: typestr must be a str such as '<f4', got "
                        f"{typestr!r}")
    try:
        dtype = np.dtype(typestr)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"__cuda_array_interface__: unknown typestr {typestr!r}") from exc
    if dtype.hasobject:
        raise ValueError(f"__cuda_array_interface__: typestr {typestr!r} means Python objects, "
                         "which device memory cannot hold; export a numeric typestr")
    if dtype.subdtype is not None:
        raise ValueError(f"__cuda_array_interface__: typestr {typestr!r} is a sub-array type; "
                         "put its extra dimensions in shape instead")
    if not dtype.isnative:
        raise ValueError(f"__cuda_array_interface__: typestr {typestr!r} is not in native byte "
                         "order")
    data = desc["data"]
    if (not isinstance(data, (tuple, list)) or len(data) != 2 or not _is_int(data[0])
            or not isinstance(data[1], (bool, np.bool_))):
        raise TypeError(f"__cuda_array_interface__: data must be a (pointer: int, read_only: "
                        f"bool) tuple, got {data!r}")
    ptr, readonly = int(data[0]), bool(data[1])
    if ptr < 0:
        raise ValueError(f"__cuda_array_interface__: data pointer {ptr} is negative")
    size = math.prod(shape)
    if ptr == 0 and size:
        raise ValueError(f"__cuda_array_interface__: data pointer is 0 but the array has "
                         f"{size} elements")
    strides = desc.get("strides")
    if strides is not None:
        if not isinstance(strides, (tuple, list)) or not all(_is_int(s) for s in strides):
            raise TypeError(f"__cuda_array_interface__: strides must be None or a tuple of "
                            f"ints, got {strides!r}")
        if len(strides) != len(shape):
            raise ValueError(f"__cuda_array_interface__: strides {tuple(strides)} do not match "
                             f"the {len(shape)} dimensions of shape {shape}")
        strides = tuple(int(s) for s in strides)
    if desc.get("mask") is not None:
        raise ValueError("__cuda_array_interface__: masked arrays are not supported; the "
                         "producer must export mask=None")
    stream = desc.get("stream")
    if stream is not None:
        if not _is_int(stream):
            raise TypeError(f"__cuda_array_interface__: stream must be None or an int, got "
                            f"{stream!r}")
        stream = int(stream)
        if stream == 0:
            raise ValueError("__cuda_array_interface__: stream 0 is disallowed (ambiguous); "
                             "use 1 for the legacy default stream, 2 for the per-thread "
                             "default stream, or None when no synchronisation is needed")
        if stream < 0:
            raise ValueError(f"__cuda_array_interface__: stream {stream} is negative")
    return CudaArrayInterface(ptr, shape, dtype, strides, readonly, stream, int(version))


def _backend_index(backend: Any, device: Any) -> tuple[Any, int]:
    from .. import _backend
    from .._device import _get_device
    _check_backend_arg(backend)
    b = _backend.get_backend(backend) if isinstance(backend, str) else backend
    return _get_device(device, backend=b)


def _check_backend_arg(backend: Any) -> None:
    from .. import _backend
    if not (backend is None or isinstance(backend, (str, _backend.Backend))):
        raise TypeError(f"backend must be a backend name such as 'cuda' (or an accelrt "
                        f"Backend instance), got {type_shown(backend)}")


def wait_for_stream(stream: int, *, backend: Any = "cuda", device: Any = None) -> None:
    """Make the calling thread's current accelrt stream of ``device`` wait (without blocking
    the host) for the work enqueued so far on the foreign stream handle ``stream``.

    Args:
        stream: a raw stream handle of the backend (for CUDA also ``1``/``2``, the legacy and
            per-thread default streams, which the driver understands).
        backend: the backend name (or instance); ``"cuda"`` by default.
        device: the device (an index or a device of that backend); default its current one.

    Raises:
        TypeError: ``stream`` is not an int.
        ValueError: ``stream`` is not a live stream of the device.

    Example::

        >>> import accelrt as acc
        >>> from accelrt.interop import wait_for_stream
        >>> producer = acc.Stream("cpu:0")
        >>> wait_for_stream(producer.stream_id, backend="cpu")
    """
    from .._device import _lazy_init
    from .._handles import StreamHandle
    from .._stream import _current, _wait_raw
    b, index = _backend_index(backend, device)
    if isinstance(stream, bool) or not isinstance(stream, int):
        raise TypeError(f"stream must be an int handle, got {type_shown(stream)}")
    _lazy_init(b, index)
    current = _current(b, index)._handle
    if stream == current:
        return
    # validates the handle, and lets backends that track foreign streams (cuda) accept it
    stream = StreamHandle(stream)
    if not b.stream_is_valid(index, stream):
        raise ValueError(f"stream {stream:#x} is not a live stream of {b.name}:{index}; the "
                         "producer's stream must belong to the device its data is on")
    _wait_raw(b, index, current, index, stream)


def consume_cuda_array_interface(obj: Any, *, backend: Any = "cuda",
                                 device: Any = None) -> CudaArrayInterface:
    """Read and validate a producer's ``__cuda_array_interface__`` and honour its ``stream``.

    Args:
        obj: an object with ``__cuda_array_interface__``, or the dict itself.
        backend: the backend whose current stream must wait (``"cuda"``).
        device: the device the data lives on (default: the backend's current device).

    Returns:
        The validated :class:`CudaArrayInterface`; the caller may use ``ptr`` on the current
        stream of ``device`` from now on.

    Raises:
        TypeError: ``obj`` has no ``__cuda_array_interface__``, or malformed fields.
        ValueError: bad field values (see :func:`parse_cuda_array_interface`).

    Example::

        >>> import accelrt as acc
        >>> from accelrt.interop import consume_cuda_array_interface
        >>> s = acc.Stream("cpu:0")
        >>> class Producer:  # a CPU-hosted stand-in for a CUDA library's array
        ...     __cuda_array_interface__ = {"shape": (0,), "typestr": "<f8", "version": 3,
        ...                                 "data": (0, False), "stream": s.stream_id}
        >>> consume_cuda_array_interface(Producer(), backend="cpu").stream == s.stream_id
        True
    """
    _check_backend_arg(backend)     # (used only when the producer names a stream)
    if isinstance(obj, Mapping):
        desc = obj
    else:
        try:
            desc = obj.__cuda_array_interface__
        except AttributeError:
            raise TypeError(f"{type_shown(obj)} object has no __cuda_array_interface__; "
                            "pass a CUDA array (CuPy, Numba, PyTorch) or its interface dict"
                            ) from None
    cai = parse_cuda_array_interface(desc)
    if cai.stream is not None:
        wait_for_stream(cai.stream, backend=backend, device=device)
    return cai


def cuda_array_interface(array: Any, *, synchronize: bool = False) -> dict[str, Any]:
    """The ``__cuda_array_interface__`` (version 3) dict of an accelrt array in device memory.

    Args:
        array: an :class:`accelrt.Array` on a backend whose memory the host cannot read
            (CUDA).
        synchronize: if True, wait for the array's current stream now and export
            ``stream=None``; otherwise export the current stream's handle (``1`` for the
            legacy default stream) so the consumer waits for it.

    Returns:
        ``{"shape", "typestr", "descr", "data": (ptr, False), "strides": None, "version": 3,
        "stream"}``.

    Raises:
        TypeError: ``array`` is not an :class:`accelrt.Array`.
        ValueError: the array is in host-accessible memory (use ``numpy()`` or DLPack).

    Example::

        >>> import accelrt as acc
        >>> from accelrt.interop import cuda_array_interface
        >>> try:
        ...     cuda_array_interface(acc.zeros(2, device="cpu:0"))
        ... except ValueError as e:
        ...     print("host memory:", "DLPack" in str(e))
        host memory: True
    """
    from .._array import Array
    from .._device import _lazy_init
    from .._stream import _current
    if not isinstance(array, Array):
        raise TypeError(f"cuda_array_interface() takes an accelrt.Array, got "
                        f"{type_shown(array)}")
    if not isinstance(synchronize, bool):
        raise TypeError(f"synchronize must be a bool, got {type_shown(synchronize)}")
    from .._device import _get_device
    b, index = _get_device(array.device)
    if b.capabilities(index).host_accessible:
        raise ValueError(f"{array.device} memory is host memory; share it with numpy() or "
                         "DLPack (np.from_dlpack) instead of __cuda_array_interface__")
    _lazy_init(b, index)
    s = _current(b, index)
    if synchronize:
        s.synchronize()
        stream: int | None = None
    else:
        stream = s._handle or LEGACY_DEFAULT_STREAM
    dt = np.dtype(array.dtype)
    return {
        "shape": tuple(array.shape),
        "typestr": dt.str,
        "descr": dt.descr,
        "data": (array.data_ptr(), False),
        "strides": None,
        "version": 3,
        "stream": stream,
    }
