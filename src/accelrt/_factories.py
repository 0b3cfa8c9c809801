"""The factories of :class:`accelrt.Array`: ``empty``, ``zeros``, ``ones``, ``full`` and
``asarray`` (numpy data, DLPack producers, ``__cuda_array_interface__`` producers).

Example::

    >>> import accelrt as acc
    >>> acc.full((2,), 3, dtype="int8", device="cpu:0").tolist()
    [3, 3]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np

from . import _dlpack, _pinned
from . import _sync_debug as _sd
from ._array import Array, _check_dtype, _check_flag, _fill_scalar, _stream_handle, _to_numpy
from ._array_values import _number
from ._convert import cast, from_python, infer_dtype, plain_data
from ._device import _factory_device, _get_device, _lazy_init
from ._device import device as _device_cls
from ._memory_owner import _Memory
from ._placement import new_array
from ._size import factory_args, normalize_size, size_keyword
from ._stream import _current
from ._transfer import Copy, Hold, Plan, Stage, Sync, execute, held
from ._errors import AcceleratorValueError, type_shown

if TYPE_CHECKING:
    from ._backend import Backend
    from ._typing import DeviceLike, DTypeLike, HostArray, ScalarLike, SizeLike

__all__ = ["asarray", "empty", "full", "ones", "zeros"]


# ---------------------------------------------------------------------- factories

def _pinned_new(shape: tuple[int, ...], dtype: DTypeLike | None, device: DeviceLike,
                fname: str) -> np.ndarray:
    """A factory's ``pin_memory=True`` result: an uninitialised pinned host (numpy) array,
    pinned for the current accelerator (see :mod:`accelrt._pinned`)."""
    b, index = _pinned.factory_backend(device, fname)
    return _pinned.new_pinned(b, shape, _check_dtype(dtype, b, index))


@overload
def empty(*size: SizeLike, dtype: DTypeLike | None = ..., device: DeviceLike = ...,
          pin_memory: Literal[False] | None = ..., **kw: SizeLike) -> Array: ...
@overload
def empty(*size: SizeLike, dtype: DTypeLike | None = ..., device: DeviceLike = ...,
          pin_memory: Literal[True], **kw: SizeLike) -> HostArray: ...
@overload
def empty(*size: SizeLike, dtype: DTypeLike | None = ..., device: DeviceLike = ...,
          pin_memory: bool | None, **kw: SizeLike) -> Array | HostArray: ...
def empty(*size: SizeLike, dtype: DTypeLike | None = "float32", device: DeviceLike = None,
          pin_memory: bool | None = False, **kw: SizeLike) -> Array | HostArray:
    """An uninitialised array from the device's caching allocator (``torch.empty``).

    Args:
        *size: the shape, as non-negative ints (``empty(2, 3)``) or one sequence of them
            (``empty((2, 3))``, ``empty([2, 3])``); ``size=(2, 3)`` also works.
        dtype: a numpy dtype (bool, integer, floating or complex); ``None`` is float32,
            PyTorch's default dtype; keyword-only (0.1's ``empty(shape, dtype, device)``
            still works, with a ``FutureWarning``).
        device: where to allocate (keyword-only); ``None`` is the default device
            (:func:`accelrt.get_default_device`).
        pin_memory: return a pinned host array instead: a ``numpy.ndarray`` in the pinned
            host pool of the current accelerator (as PyTorch's ``pin_memory=True`` returns
            a pinned CPU tensor; see :func:`accelrt.pin_memory`). Then no device may be
            given or be the default. ``None`` is ``False``, as PyTorch's ``Optional[bool]``.

    Raises:
        TypeError: a wrong type (a size entry that is not an int, such as a dtype passed
            positionally; ints mixed with a sequence; a ``pin_memory`` neither a bool nor
            None), or an unknown or unsupported dtype.
        ValueError: a negative dimension or a size whose bytes overflow int64 (also a
            ``RuntimeError``, as in PyTorch), or ``pin_memory=True`` with a device (an
            ``AcceleratorValueError``).
        AcceleratorError: ``pin_memory=True`` but the backend cannot pin host memory.
        OutOfMemoryError: the allocator could not satisfy the request.

    Example::

        >>> import accelrt as acc
        >>> acc.empty(2, 3, dtype="int16", device="cpu:0").nbytes
        12
        >>> acc.empty((2, 3), device="cpu:0").shape == acc.empty(size=[2, 3], device="cpu:0").shape
        True
        >>> acc.is_pinned(acc.empty(2, 3, pin_memory=True))
        True
    """
    shape, dtype, device = factory_args(size, kw, dtype, device, "empty")
    if pin_memory is not False and _pinned.pin_flag(pin_memory):
        return _pinned_new(shape, dtype, device, "empty")
    return new_array(Array, shape, dtype, device)


def _memset0(out: Array) -> Array:
    if out.nbytes:
        b, index = out._b, out._index
        b.memset(index, out._mem.ptr, 0, out.nbytes, _stream_handle(b, index))
    return out


@overload
def zeros(*size: SizeLike, dtype: DTypeLike | None = ..., device: DeviceLike = ...,
          pin_memory: Literal[False] | None = ..., **kw: SizeLike) -> Array: ...
@overload
def zeros(*size: SizeLike, dtype: DTypeLike | None = ..., device: DeviceLike = ...,
          pin_memory: Literal[True], **kw: SizeLike) -> HostArray: ...
@overload
def zeros(*size: SizeLike, dtype: DTypeLike | None = ..., device: DeviceLike = ...,
          pin_memory: bool | None, **kw: SizeLike) -> Array | HostArray: ...
def zeros(*size: SizeLike, dtype: DTypeLike | None = "float32", device: DeviceLike = None,
          pin_memory: bool | None = False, **kw: SizeLike) -> Array | HostArray:
    """An array of zeros (a stream-ordered memset on the current stream); arguments as
    :func:`empty` (``pin_memory=True``: a pinned host array of zeros).

    Example::

        >>> import accelrt as acc
        >>> acc.zeros(3, device="cpu:0").tolist()
        [0.0, 0.0, 0.0]
    """
    try:
        shape, dtype, device = factory_args(size, kw, dtype, device, "zeros")
    except AcceleratorValueError as exc:
        if "negative dimension" not in str(exc):
            raise
        # torch.zeros checks its sizes itself, with its own words
        raise AcceleratorValueError(f"zeros: Dimension size must be non-negative. ({exc})") \
            from None
    if pin_memory is not False and _pinned.pin_flag(pin_memory):
        host = _pinned_new(shape, dtype, device, "zeros")
        host.fill(0)
        return host
    return _memset0(new_array(Array, shape, dtype, device))


@overload
def ones(*size: SizeLike, dtype: DTypeLike | None = ..., device: DeviceLike = ...,
         pin_memory: Literal[False] | None = ..., **kw: SizeLike) -> Array: ...
@overload
def ones(*size: SizeLike, dtype: DTypeLike | None = ..., device: DeviceLike = ...,
         pin_memory: Literal[True], **kw: SizeLike) -> HostArray: ...
@overload
def ones(*size: SizeLike, dtype: DTypeLike | None = ..., device: DeviceLike = ...,
         pin_memory: bool | None, **kw: SizeLike) -> Array | HostArray: ...
def ones(*size: SizeLike, dtype: DTypeLike | None = "float32", device: DeviceLike = None,
         pin_memory: bool | None = False, **kw: SizeLike) -> Array | HostArray:
    """An array of ones (``torch.ones``); arguments as :func:`empty` (``pin_memory=True``: a
    pinned host array of ones).

    Example::

        >>> import accelrt as acc
        >>> acc.ones(2, 2, dtype="int32", device="cpu:0").tolist()
        [[1, 1], [1, 1]]
    """
    shape = normalize_size(size, size_keyword(kw, "ones"), "ones")
    if _pinned.pin_flag(pin_memory):
        host = _pinned_new(shape, dtype, device, "ones")
        host.fill(1)
        return host
    out = new_array(Array, shape, dtype, device)
    return out.fill_(True if out._dtype.kind == "b" else 1)


@overload
def full(size: SizeLike, fill_value: ScalarLike, *, dtype: DTypeLike | None = ...,
         device: DeviceLike = ..., pin_memory: Literal[False] | None = ...) -> Array: ...
@overload
def full(size: SizeLike, fill_value: ScalarLike, *, dtype: DTypeLike | None = ...,
         device: DeviceLike = ..., pin_memory: Literal[True]) -> HostArray: ...
@overload
def full(size: SizeLike, fill_value: ScalarLike, *, dtype: DTypeLike | None = ...,
         device: DeviceLike = ..., pin_memory: bool | None) -> Array | HostArray: ...
def full(size: SizeLike, fill_value: ScalarLike, *, dtype: DTypeLike | None = None,
         device: DeviceLike = None, pin_memory: bool | None = False) -> Array | HostArray:
    """An array filled with ``fill_value`` (``torch.full``).

    Args:
        size: the shape: one sequence of non-negative ints (or one int), as in PyTorch
            (``full((2, 3), 1.5)``; not ``full(2, 3, 1.5)``).
        fill_value: a bool, int, float or complex (or a numpy scalar), or a 0-d
            :class:`Array`, whose value is read (synchronizing), as PyTorch reads a 0-d
            tensor passed as a number.
        dtype: the dtype (keyword-only); ``None`` infers it from ``fill_value`` as PyTorch
            does (bool -> bool, int -> int64, float -> float32, complex -> complex64).
        device: where to allocate (keyword-only); ``None`` is the default device
            (:func:`accelrt.get_default_device`).
        pin_memory: return a pinned host ``numpy.ndarray`` instead (see :func:`empty`).

    Raises:
        TypeError: a bad size or dtype, or a fill value that is not a number (an
            :class:`Array` that is not 0-d included).
        ValueError: a negative dimension, a size whose bytes overflow int64, a fill value
            the dtype cannot hold (:meth:`Array.fill_`'s rule, PyTorch's), or
            ``pin_memory=True`` with a device.

    Example::

        >>> import accelrt as acc
        >>> a = acc.full((2,), 7, device="cpu:0")
        >>> a.dtype, a.tolist()
        (dtype('int64'), [7, 7])
    """
    shape = normalize_size((size,), None, "full")
    if isinstance(fill_value, Array):
        if fill_value.ndim:
            raise TypeError(f"full(): fill_value must be a number or a 0-d accelrt.Array, got "
                            f"an array of shape {fill_value.shape}")
        fill_value = fill_value._item()
    if dtype is None:
        dtype = infer_dtype(_number(fill_value))
    if _pinned.pin_flag(pin_memory):
        host = _pinned_new(shape, dtype, device, "full")
        host[...] = _fill_scalar(fill_value, host.dtype)
        return host
    out = new_array(Array, shape, dtype, device)
    return out.fill_(fill_value)


_HOST_DLPACK = (_dlpack.kDLCPU, _dlpack.kDLCUDAHost, _dlpack.kDLROCMHost)


def asarray(obj: object, device: DeviceLike = None, dtype: DTypeLike | None = None, *,
            copy: bool | None = None) -> Array:
    """Convert ``obj`` to an :class:`Array`, sharing memory when possible (``torch.asarray``).

    Args:
        obj: an :class:`Array`, a numpy array, a (nested) Python sequence or scalar, a
            buffer (``bytes``, ``bytearray``, ``memoryview``, ``array.array``: its bytes as a
            1-d array, in its own format or reinterpreted in ``dtype``, as
            ``torch.asarray`` reads one), any DLPack producer (an object with ``__dlpack__`` and ``__dlpack_device__``) or
            capsule (as ``torch.asarray`` takes one), or a
            ``__cuda_array_interface__`` producer without ``__dlpack__`` (Numba, older CuPy).
        device: the target device; ``None`` keeps an :class:`Array`'s (or a CUDA array
            interface producer's) device and otherwise means the current device.
        dtype: the target dtype; ``None`` is the dtype PyTorch infers: an array's or numpy
            scalar's own, for Python numbers bool, int64, float32 or complex64, for a
            sequence the promotion of its items (``[np.float16(1), 2]`` is float16;
            :func:`accelrt._convert.infer_dtype`). Python numbers are converted as PyTorch
            converts them: checked into an integer dtype (``fill_``'s rule), unchecked into a
            floating one; arrays are cast unchecked, as ``copy_`` casts.
        copy: ``True`` always copies; ``False`` raises instead of copying; ``None`` shares
            memory when it can: an :class:`Array` already on ``device``, or host memory
            (numpy, a ``kDLCPU`` DLPack producer) that is C-contiguous, of the wanted dtype
            and writable (DLPack memory counts as writable unless the producer flags it
            read-only), when ``device`` is host-accessible (the CPU backend); a
            ``__cuda_array_interface__`` producer's
            memory when it is C-contiguous, writable, of the wanted dtype and on ``device``
            (after the current stream waits for the producer's ``stream``).

    .. note:: Shared host memory is borrowed, not taken from the caching allocator: it is not
        counted by ``memory_allocated`` and stays valid while the array or the producer lives.

    Raises:
        TypeError: ``obj`` is not numeric data (an ``AcceleratorTypeError``, also a
            ``RuntimeError``: PyTorch's "Could not infer dtype of ..."), a string, a sequence
            mixing numbers and sequences, a complex number for a real dtype, or a wrong
            argument type.
        ValueError: ``copy=False`` but a copy is needed; ragged sequences; a Python number
            the integer dtype cannot hold, or an int beyond int64 for one (an
            ``AcceleratorValueError``, also a ``RuntimeError``, with PyTorch's "value cannot
            be converted to type ... without overflow").
        BufferError: a DLPack producer on a device accelrt cannot read, one whose
            ``__dlpack__`` returns no unused DLPack capsule, or a PyTorch tensor with its
            negative bit set (PyTorch would export it unnegated).
        ValueError: a malformed ``__cuda_array_interface__``, or one whose pointer is not CUDA
            device memory.
        BackendUnavailableError: a ``__cuda_array_interface__`` producer but no usable CUDA.

    Example::

        >>> import numpy as np
        >>> import accelrt as acc
        >>> host = np.arange(3, dtype=np.float32)
        >>> a = acc.asarray(host, device="cpu:0")
        >>> a.fill_(1.0); host.tolist()
        accelrt.Array(shape=(3,), dtype=float32, device='cpu:0')
        [1.0, 1.0, 1.0]
        >>> acc.asarray([1, 2], device="cpu:0").dtype
        dtype('int64')
    """
    if copy is not None:
        _check_flag("copy", copy)
    device = _factory_device(device)
    if isinstance(obj, Array):
        if device is None:
            b, index = obj._b, obj._index
        else:
            b, index = _get_device(device, torch_parser=True)
        want = obj._dtype if dtype is None else _check_dtype(dtype, b, index)
        if b is obj._b and index == obj._index and want == obj._dtype and not copy:
            return obj
        if copy is False:
            same_device = b is obj._b and index == obj._index
            raise ValueError(_no_alias(obj._dtype if same_device else want, want,
                                       str(obj.device), f"{b.name}:{index}")
                             + f"; asarray(copy=False): converting the {obj._dtype.name} array "
                             f"on {obj.device} to {want.name} on {b.name}:{index} needs a copy")
        out = new_array(Array, obj._shape, want, _device_cls(b.name, index))
        return out.copy_(obj)
    obj = _dlpack.capsule_producer(obj, "asarray()")
    from_dlpack = not isinstance(obj, np.ndarray) and hasattr(obj, "__dlpack__") and hasattr(
        obj, "__dlpack_device__")
    if not from_dlpack and not isinstance(obj, np.ndarray) and hasattr(
            obj, "__cuda_array_interface__"):
        return _import_cai(obj, device, dtype, copy)
    b, index = _get_device(device, torch_parser=True)
    python_data = not from_dlpack and _python_data(obj)
    if copy is False:
        _check_aliasable(obj, python_data)
    writable = True   # a DLPack producer may forbid writes (a DLPack >= 1.0 flag)
    if python_data:   # PyTorch's dtype inference and checked conversion of each number
        obj = plain_data(obj)
        inferred = infer_dtype(obj)
        dt = _check_dtype(inferred if dtype is None else dtype, b, index)
        host = from_python(obj, dt, inferred)
    else:
        buf = None if from_dlpack else _buffer_of(obj)
        if buf is not None:   # PyTorch's buffer path: the bytes, in the dtype asked for
            host = _from_buffer(buf, None if dtype is None else _check_dtype(dtype, b, index))
            dt = _check_dtype(host.dtype, b, index)
        else:
            if from_dlpack:
                obj, writable = _import_dlpack(obj, copy)
            host = _to_numpy(obj, "asarray()")
            dt = _check_dtype(host.dtype if dtype is None else dtype, b, index)
    # numpy marks imports of legacy (unversioned) DLPack capsules read-only because they
    # carry no read-only flag; such memory is shared as PyTorch's from_dlpack does, memory
    # a producer flags read-only is copied (an accelrt array is always writable).
    shareable = (not python_data and host.dtype == dt and host.size > 0
                 and host.flags.c_contiguous and host.flags.aligned
                 and (host.flags.writeable or (from_dlpack and writable))
                 and b.capabilities(index).host_accessible)
    if shareable and not copy:
        return _borrow_host(host, dt, b, index)
    if copy is False:
        raise _unshared(host.dtype, dt, b, index)
    out = new_array(Array, host.shape, dt, _device_cls(b.name, index))
    out._upload(cast(host, dt), non_blocking=False)
    return out


#: PyTorch's names of the dtypes (``c10::ScalarType``), as its messages print them
_TORCH_NAMES = {"bool": "Bool", "uint8": "Byte", "int8": "Char", "int16": "Short",
                "int32": "Int", "int64": "Long", "float16": "Half", "float32": "Float",
                "float64": "Double", "complex64": "ComplexFloat", "complex128": "ComplexDouble",
                "uint16": "UInt16", "uint32": "UInt32", "uint64": "UInt64"}


def _no_alias(have: np.dtype, want: np.dtype, source: str, target: str) -> str:
    """``torch.asarray``'s words for a ``copy=False`` that needs a copy: of the dtype when
    ``have`` and ``want`` differ, else of the device."""
    if have != want:
        return (f"can't alias tensor with dtype '{_TORCH_NAMES.get(have.name, have.name)}' "
                f"into dtype '{_TORCH_NAMES.get(want.name, want.name)}'.")
    return f"can't alias tensor from device '{source}' to '{target}'."


def _check_aliasable(obj: object, python_data: bool) -> None:
    """Refuse ``asarray(obj, copy=False)`` of data that has no memory to share, with
    ``torch.asarray``'s words: a numpy scalar (an ``AcceleratorValueError``, a
    ``RuntimeError`` as PyTorch's) or Python data (a ``ValueError``)."""
    if isinstance(obj, np.generic):
        raise AcceleratorValueError("can't alias NumPy scalars. Either remove copy=False or "
                                    "transform it in a ndarray. (asarray(copy=False) of a "
                                    f"{type_shown(obj)}: a scalar has no memory to share)")
    if python_data:
        raise ValueError("can't alias arbitrary sequence into a tensor. (asarray(copy=False) "
                         f"of {type_shown(obj)} data: only an array, a buffer or a DLPack "
                         "producer has memory to share; pass copy=None)")


def _unshared(have: np.dtype, dt: np.dtype, b: Backend, index: int) -> ValueError:
    """The error of ``asarray(copy=False)`` whose host data cannot be shared with device
    ``index`` of ``b`` as ``dt``: ``torch.asarray``'s words first where PyTorch has them (a
    dtype conversion, a device that cannot read host memory)."""
    if have != dt:
        torch_text = _no_alias(have, dt, "cpu", "cpu") + "; "
    elif not b.capabilities(index).host_accessible:
        torch_text = _no_alias(dt, dt, "cpu", f"{b.name}:{index}") + "; "
    else:
        torch_text = ""
    return ValueError(f"{torch_text}asarray(copy=False): the data cannot be shared with "
                      f"{b.name}:{index} (it needs a dtype conversion, is not C-contiguous or "
                      "writable, or the device cannot read host memory); pass copy=None")


def _python_data(obj: object) -> bool:
    """Whether :func:`asarray` reads ``obj`` as PyTorch reads Python data (numbers and nested
    sequences, :mod:`accelrt._convert`): anything but a numpy array or scalar, an object numpy
    reads as an array (``__array__``, ``__array_interface__``) or a buffer (``bytearray``,
    ``memoryview``: read through numpy, with their own dtype)."""
    if type(obj) in (list, tuple):
        return True
    if isinstance(obj, (np.ndarray, np.generic)) or hasattr(obj, "__array__") or hasattr(
            obj, "__array_interface__"):
        return False
    try:
        memoryview(obj)   # type: ignore[arg-type]
    except TypeError:
        return True
    return False


def _buffer_of(obj: object) -> memoryview | None:
    """``obj``'s buffer when ``torch.asarray`` reads it as one (``bytes``, ``bytearray``,
    ``memoryview``, ``array.array``, ctypes arrays: an object with the buffer protocol that is
    not a numpy array or scalar and that numpy would not read through ``__array__`` or
    ``__array_interface__``); ``None`` for anything else."""
    if isinstance(obj, (np.ndarray, np.generic)) or hasattr(obj, "__array__") or hasattr(
            obj, "__array_interface__"):
        return None
    try:
        view = memoryview(obj)  # type: ignore[arg-type]
    except TypeError:
        return None
    try:
        np.dtype(view.format)
    except TypeError:   # a format numpy cannot name (a struct): numpy's path refuses it
        return None
    return view


def _from_buffer(view: memoryview, dt: np.dtype | None) -> np.ndarray:
    """A 1-d numpy view of ``view``'s bytes, as ``torch.asarray`` reads a buffer
    (``torch.frombuffer``): in ``dt``, the bytes reinterpreted, not converted, or in the
    buffer's own format when ``dt`` is ``None``; read-only when the buffer is.

    Raises:
        ValueError: an empty buffer, or one whose length is not a multiple of ``dt``'s
            itemsize (an ``AcceleratorValueError``, also a ``RuntimeError``; PyTorch's
            messages); a non-contiguous buffer (PyTorch's ``RuntimeError`` message).
    """
    if not view.c_contiguous:
        raise AcceleratorValueError("could not retrieve a contiguous buffer from the given "
                                    "object (non-contiguous buffers are not supported)")
    n = view.nbytes
    if not n:
        raise AcceleratorValueError("both buffer length (0) and count (-1) must not be 0")
    want = np.dtype(view.format) if dt is None else dt
    if n % want.itemsize:
        raise AcceleratorValueError(f"buffer length ({n} bytes) after offset (0 bytes) must be "
                                    f"a multiple of element size ({want.itemsize})")
    return np.frombuffer(view.cast("B") if view.ndim != 1 or view.format != "B" else view,
                         dtype=want)


def _borrow_host(host: np.ndarray, dt: np.dtype, b: Backend, index: int) -> Array:
    """An array on host-accessible device ``index`` of ``b`` over ``host``'s memory (a
    C-contiguous, aligned, non-empty numpy array of dtype ``dt``), keeping ``host`` alive."""
    _lazy_init(b, index)
    mem = _Memory(host.ctypes.data, host.nbytes, None, base=host, host=True)
    return Array._wrap(mem, host.shape, dt, b, index)


def _import_dlpack(obj: Any, copy: bool | None) -> tuple[np.ndarray, bool]:
    """A numpy array of a DLPack producer's data: a view for host memory, else a copy made
    by the producer (DLPack ``dl_device`` request); and whether it may be written to
    (:func:`accelrt._dlpack.host_view`)."""
    obj = _dlpack.producer_of(obj)
    dev = _dlpack.producer_device(obj)
    if dev[0] in _HOST_DLPACK:
        return _dlpack.host_view(obj, "asarray()")
    if copy is False:
        raise ValueError(f"asarray(copy=False): the DLPack producer's memory is on device "
                         f"{dev}, which accelrt cannot share; pass copy=None")
    try:
        return np.from_dlpack(obj, device="cpu", copy=True), True
    except (BufferError, TypeError, ValueError, RuntimeError, NotImplementedError) as exc:
        raise BufferError(f"asarray(): cannot import DLPack data on device {dev}: the "
                          f"producer could not copy it to the host ({exc}); move it to the "
                          "host first") from exc


def _cai_reader(device: DeviceLike) -> Any:
    """The backend that locates and reads ``__cuda_array_interface__`` memory: the target
    device's backend when it is a device backend that can look pointers up (capability
    ``pointer_lookup``), else ``cuda``."""
    if device is not None:
        b, index = _get_device(device, torch_parser=True)
        caps = b.capabilities(index)
        if not caps.host_accessible and caps.pointer_lookup:
            return b
    from ._backend import get_backend
    from ._errors import BackendUnavailableError
    try:
        return get_backend("cuda")
    except BackendUnavailableError as exc:
        raise BackendUnavailableError(f"asarray(): the object exposes __cuda_array_interface__ "
                                      f"(CUDA GPU memory), which needs the cuda backend: {exc}"
                                      ) from exc


def _cai_host_copy(reader: Any, index: int, cai: Any) -> np.ndarray:
    """A C-contiguous host copy of a (possibly strided) CAI array on ``reader``'s device
    ``index``, read on the current stream (which already waits for the producer)."""
    shape, dt = cai.shape, cai.dtype
    strides = cai.strides
    if strides is None or cai.is_c_contiguous:
        lo, hi, strides = 0, cai.nbytes, None
    else:
        lo = sum(min(0, (n - 1) * s) for n, s in zip(shape, strides))
        hi = sum(max(0, (n - 1) * s) for n, s in zip(shape, strides)) + dt.itemsize
    raw = np.empty(hi - lo, np.uint8)
    if _sd.active:
        _sd.check(reader.name)
    stream = _current(reader, index)
    direct = (Copy(stream, "d2h", raw.ctypes.data, cai.ptr + lo, hi - lo),
              Sync(stream, report=False))
    execute(Plan((Stage(stream, "d2h", raw.ctypes.data, cai.ptr + lo, hi - lo, False,
                        direct),)))
    view = np.ndarray(shape, dt, buffer=raw, offset=-lo, strides=strides)
    return np.ascontiguousarray(view)


def _import_cai(obj: Any, device: DeviceLike, dtype: Any, copy: bool | None) -> Array:
    """:func:`asarray` of a ``__cuda_array_interface__`` producer (see its docstring)."""
    from .interop._cai import consume_cuda_array_interface, parse_cuda_array_interface
    desc = obj.__cuda_array_interface__
    cai = parse_cuda_array_interface(desc)
    reader = _cai_reader(device)
    src = reader.pointer_device(cai.ptr) if cai.ptr else None
    if src is None and cai.size:
        raise ValueError(f"asarray(): the __cuda_array_interface__ of {type_shown(obj)} "
                         f"points at {cai.ptr:#x}, which is not device memory of "
                         f"{reader.name}; the CUDA array interface is for GPU memory, so pass "
                         "host data as a numpy array (or through DLPack) instead")
    if device is None:
        b, index = _get_device(src, backend=reader)
    else:
        b, index = _get_device(device, torch_parser=True)
    dt = cai.dtype if dtype is None else _check_dtype(dtype, b, index)
    shareable = (b is reader and index == src and dt == cai.dtype and cai.is_c_contiguous
                 and not cai.readonly)
    if copy is False and not shareable:
        raise ValueError(f"asarray(copy=False): the __cuda_array_interface__ data on "
                         f"{reader.name}:{src} cannot be shared as {dt.name} on "
                         f"{b.name}:{index} (it needs a dtype conversion or a device move, is "
                         "not C-contiguous, or is read-only); pass copy=None")
    if not cai.size:
        return new_array(Array, cai.shape, dt, _device_cls(b.name, index))
    assert src is not None
    _lazy_init(reader, src)
    # the current stream of the data's device waits for the producer's stream (CAI v3)
    consume_cuda_array_interface(desc, backend=reader, device=src)
    if shareable and not copy:
        mem = _Memory(cai.ptr, cai.nbytes, None, base=obj)
        return Array._wrap(mem, cai.shape, dt, b, index)
    if b is reader and index == src and dt == cai.dtype and cai.is_c_contiguous:
        out = new_array(Array, cai.shape, dt, _device_cls(b.name, index))
        stream = _current(reader, index)
        execute(Plan((Copy(stream, "d2d", out._mem.ptr, cai.ptr, cai.nbytes),
                      Hold(stream, held(obj)))))   # the producer outlives the copy
        return out
    host = _cai_host_copy(reader, src, cai)
    return asarray(host, device=_device_cls(b.name, index), dtype=dt, copy=True)
