"""The compute part of :class:`~accelrt.backends.cuda.CudaBackend`: the optional backend hooks
``philox_fill`` (``accelrt.random`` on the GPU, kernels of ``kernels/philox.cu``) and
``elementwise_add`` (``accelrt.comm.reduce_add``, kernels of ``kernels/reduce.cu``).

The argument packing is a pure function of the request (:func:`philox_launch`,
:func:`add_launch`), so it is checked without a GPU: the kernel name, the numpy scalars of
the parameters' exact C types in order, and the grid.

Example::

    >>> from accelrt.backends.cuda._ops import philox_launch
    >>> kernel, args, grid = philox_launch(0x1000, 10, "float32", "uniform", 7, 0, (0.0, 1.0),
    ...                                    sms=132)
    >>> kernel, [type(a).__name__ for a in args][:4], grid
    ('accelrt_philox_uniform_f32', ['uint64', 'uint64', 'uint64', 'uint64'], 1)
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..._handles import StreamHandle
from .._common import check_u64
from ._cu import as_size
from ..._errors import type_shown

if TYPE_CHECKING:
    from ._backend import _Device
    from ._memory import CudaMemory
    from ._streams import CudaStreams

__all__ = ["BLOCK", "CudaOps", "add_launch", "grid_for", "philox_launch"]

#: Threads per block of every kernel launched here.
BLOCK = 256
_M64 = (1 << 64) - 1
_FLOATS = {"float16": "f16", "float32": "f32", "float64": "f64"}
#: randint ``kind`` codes of ``accelrt_philox_randint``.
_RANDINT_KIND = {"bool": 1, "float16": 2, "float32": 3, "float64": 4}
_ADD_KERNEL = {
    "bool": ("accelrt_add_bool", 1),
    "float16": ("accelrt_add_f16", 1),
    "float32": ("accelrt_add_f32", 1),
    "float64": ("accelrt_add_f64", 1),
    "complex64": ("accelrt_add_f32", 2),     # real and imaginary parts added independently
    "complex128": ("accelrt_add_f64", 2),
}
_UINT_KERNEL = {1: "accelrt_add_u8", 2: "accelrt_add_u16", 4: "accelrt_add_u32",
                8: "accelrt_add_u64"}


def grid_for(work: int, sms: int) -> int:
    """Blocks of :data:`BLOCK` threads for ``work`` items in a grid-stride kernel:
    ``min(ceil(work / BLOCK), 4 * sms)``, at least 1.

    Example::

        >>> from accelrt.backends.cuda._ops import grid_for
        >>> grid_for(1, 132), grid_for(10**9, 132)
        (1, 528)
    """
    return max(1, min(-(-work // BLOCK), 4 * max(1, sms)))


def _real(value: Any, what: str, finite: bool = True) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{what} must be a real number, got {type_shown(value)}")
    v = float(value)
    if finite and not math.isfinite(v):
        raise ValueError(f"{what} must be finite, got {v}")
    return v


def _dtype(dtype: Any) -> np.dtype[Any]:
    if not isinstance(dtype, str):
        raise TypeError(f"dtype must be a numpy dtype name such as 'float32', got "
                        f"{type_shown(dtype)}")
    try:
        return np.dtype(dtype)
    except TypeError:
        raise ValueError(f"unknown dtype name {dtype!r}") from None


def _pair(params: Any, what: str) -> tuple[Any, Any]:
    if not isinstance(params, (tuple, list)) or len(params) != 2:
        raise TypeError(f"params must be a pair {what}, got {params!r}")
    return params[0], params[1]


def _check_aligned(ptr: int, align: int, what: str, dtype: str) -> None:
    """``ValueError`` unless ``ptr`` is a multiple of ``align``: the kernels access whole
    elements, and a misaligned access is a sticky error that ruins the CUDA context."""
    if ptr % align:
        raise ValueError(f"{what} {ptr:#x} is not aligned to {align} bytes, as {dtype} "
                         "elements must be on the GPU; use an address that is a multiple of "
                         "the element size")


def philox_launch(ptr: int, n: int, dtype: str, dist: str, seed: int, offset: int,
                  params: Any, *, sms: int) -> tuple[str, list[np.generic], int]:
    """Kernel, arguments and grid that fill ``n`` elements of ``dtype`` at ``ptr``.

    The arguments follow ``docs/random.md`` ("Backends"): ``(out, n, seed, offset)`` as
    uint64, then for ``uniform`` ``(double a, double range = b - a, double b, int standard)``,
    for ``normal`` ``(double mean, double std, int standard)``, for ``randint``
    ``(long long low, u64 range_lo, u32 range_hi, int kind, int itemsize, int is_signed)``.

    Args:
        ptr: device address of the first element.
        n: number of elements (``> 0``).
        dtype: numpy dtype name: float16/32/64 for ``uniform``/``normal``; any integer, bool or
            float dtype for ``randint``.
        dist: ``"uniform"`` (``params = (a, b)``), ``"normal"`` (``(mean, std)``) or
            ``"randint"`` (``(low, high - low)``, the range in ``[1, 2**64]``).
        seed: the generator's seed, a uint64.
        offset: the first Philox block of the request, a uint64.
        params: the distribution's parameters (above).
        sms: the device's multiprocessor count (sizes the grid).

    Returns:
        ``(kernel name, numpy scalars of the parameters' C types, grid size)``.

    Raises:
        TypeError: a wrong argument type.
        ValueError: a bad value, or a dtype the distribution does not produce.

    Example::

        >>> from accelrt.backends.cuda._ops import philox_launch
        >>> k, args, grid = philox_launch(0x1000, 5, "int32", "randint", 1, 0, (-3, 10),
        ...                               sms=132)
        >>> k, [int(a) for a in args[4:]], grid
        ('accelrt_philox_randint', [-3, 10, 0, 0, 4, 1], 1)
    """
    dt = _dtype(dtype)
    n = as_size(n, "philox_fill n", positive=True)
    seed_ = check_u64(seed, "seed")
    offset_ = check_u64(offset, "offset")
    head: list[np.generic] = [np.uint64(ptr), np.uint64(n), np.uint64(seed_), np.uint64(offset_)]
    if dist in ("uniform", "normal"):
        suffix = _FLOATS.get(dt.name)
        if suffix is None:
            raise ValueError(f"philox_fill: {dist} numbers are float16, float32 or float64, "
                             f"got {dt.name}")
        first, second = _pair(params, "(a, b)" if dist == "uniform" else "(mean, std)")
        if dist == "uniform":
            a, b = _real(first, "a"), _real(second, "b")
            standard = (a, b) == (0.0, 1.0)
            args = head + [np.float64(a), np.float64(b - a), np.float64(b),
                           np.int32(standard)]
            per_block = 2 if dt.itemsize == 8 else 4
        else:
            # (as PyTorch's normal_: any mean, nan and infinities included, and an
            # infinite std; the kernel's IEEE arithmetic makes nan or infinite numbers)
            mean, std = _real(first, "mean", False), _real(second, "std", False)
            if not std >= 0:
                raise ValueError(f"normal std must be >= 0 (not nan), got {std}")
            standard = (mean, std) == (0.0, 1.0)
            args = head + [np.float64(mean), np.float64(std), np.int32(standard)]
            per_block = 2
        kernel = f"accelrt_philox_{dist}_{suffix}"
    elif dist == "randint":
        low_, rng_ = _pair(params, "(low, high - low)")
        low = operator.index(low_) if not isinstance(low_, (bool, np.bool_)) else None
        rng = operator.index(rng_) if not isinstance(rng_, (bool, np.bool_)) else None
        if low is None or rng is None:
            raise TypeError("randint params (low, high - low) must be ints, got bool")
        if not -(1 << 63) <= low <= _M64:
            raise ValueError(f"randint low {low} is out of the int64/uint64 range")
        if not 1 <= rng <= 1 << 64:
            raise ValueError(f"randint range high - low = {rng} must be in [1, 2**64]")
        if dt.kind in "iu":
            kind = 0
        elif dt.name in _RANDINT_KIND:
            kind = _RANDINT_KIND[dt.name]
        else:
            raise ValueError(f"philox_fill: randint makes integer, bool or float numbers, got "
                             f"{dt.name}")
        low64 = low & _M64
        args = head + [np.int64(low64 - (1 << 64) if low64 >= 1 << 63 else low64),
                       np.uint64(rng & _M64), np.uint32(rng >> 64), np.int32(kind),
                       np.int32(dt.itemsize), np.int32(dt.kind == "i" or low < 0)]
        per_block = 2 if rng <= 1 << 32 else 1
        kernel = "accelrt_philox_randint"
    else:
        raise ValueError(f"unknown distribution {dist!r}; expected 'uniform', 'normal' or "
                         "'randint'")
    return kernel, args, grid_for(-(-n // per_block), sms)


def add_launch(out: int, a: int, b: int, count: int, dtype: str, *,
               sms: int) -> tuple[str, list[np.generic], int]:
    """Kernel, arguments and grid of ``out = a + b`` for ``count`` elements of ``dtype``.

    Integers of every width use the unsigned kernel of their size (two's complement wraps
    like numpy); complex numbers add their float parts (``2 * count`` of them).

    Raises:
        TypeError: ``dtype`` is not a str.
        ValueError: a dtype with no kernel (e.g. structured or object dtypes).

    Example::

        >>> from accelrt.backends.cuda._ops import add_launch
        >>> k, args, grid = add_launch(16, 32, 48, 3, "complex64", sms=132)
        >>> k, [int(x) for x in args], grid
        ('accelrt_add_f32', [16, 32, 48, 6], 1)
    """
    dt = _dtype(dtype)
    count = as_size(count, "elementwise_add count")
    if dt.kind in "iu":
        kernel, parts = _UINT_KERNEL[dt.itemsize], 1
    elif dt.name in _ADD_KERNEL:
        kernel, parts = _ADD_KERNEL[dt.name]
    else:
        raise ValueError(f"elementwise_add supports bool, integer, float16/32/64 and complex "
                         f"dtypes, got {dt.name}")
    n = count * parts
    args: list[np.generic] = [np.uint64(out), np.uint64(a), np.uint64(b), np.uint64(n)]
    return kernel, args, grid_for(n, sms)


class CudaOps:
    """``philox_fill`` and ``elementwise_add`` over the kernel cache: the device-side compute
    part of :class:`~accelrt.backends.cuda.CudaBackend`.

    Args:
        use: makes a device's primary context current and returns its state.
        streams: the backend's streams part (stream checks).
        memory: the backend's memory part (device pointer range checks).
        launch_kernel: launches one of accelrt's kernels (``CudaBackend.launch_kernel``).
        sms: the number of multiprocessors of a device (``CudaBackend._sms``: from its cached
            properties), which sizes the grids.
    """

    def __init__(self, use: Callable[[int], _Device], streams: CudaStreams, memory: CudaMemory,
                 launch_kernel: Callable[..., None], sms: Callable[[int], int]) -> None:
        self._use = use
        self._streams = streams
        self._memory = memory
        self._launch_kernel = launch_kernel
        self._sms = sms

    def philox_fill(self, index: int, ptr: int, n: int, dtype: str, dist: str, seed: int,
                    offset: int, params: tuple[float, float], stream: StreamHandle) -> None:
        d = self._use(index)
        stream = self._streams.check_stream(d, stream)
        n = as_size(n, "philox_fill n")
        if n == 0:
            return
        dt = _dtype(dtype)
        ptr = self._memory.check_device_range(d, ptr, n * dt.itemsize, "philox_fill pointer")
        _check_aligned(ptr, dt.itemsize, "philox_fill pointer", dt.name)
        kernel, args, grid = philox_launch(ptr, n, dt.name, dist, seed, offset, params,
                                           sms=self._sms(index))
        self._launch_kernel(index, stream, "philox", kernel, grid, BLOCK, args)

    def elementwise_add(self, index: int, out: int, a: int, b: int, count: int, dtype: str,
                        stream: StreamHandle) -> None:
        d = self._use(index)
        stream = self._streams.check_stream(d, stream)
        count = as_size(count, "elementwise_add count")
        dt = _dtype(dtype)
        kernel, args, grid = add_launch(1, 1, 1, count, dt.name, sms=1)   # checks the dtype
        if count == 0:
            return
        nbytes = count * dt.itemsize
        out = self._memory.check_device_range(d, out, nbytes, "elementwise_add out")
        a = self._memory.check_device_range(d, a, nbytes, "elementwise_add a")
        b = self._memory.check_device_range(d, b, nbytes, "elementwise_add b")
        align = dt.itemsize // 2 if dt.kind == "c" else dt.itemsize
        for name, p in (("out", out), ("a", a), ("b", b)):
            _check_aligned(p, align, f"elementwise_add {name}", dt.name)
        kernel, args, grid = add_launch(out, a, b, count, dt.name, sms=self._sms(index))
        self._launch_kernel(index, stream, "reduce", kernel, grid, BLOCK, args)
