"""``accelrt.random``: counter-based Philox4x32-10 random numbers, bit-identical on every backend.

PyTorch's ``torch.cuda.random`` names (``manual_seed``, ``manual_seed_all``, ``seed``,
``seed_all``, ``initial_seed``, ``get_rng_state``, ``set_rng_state``, ``get_rng_state_all``,
``set_rng_state_all``), a :class:`Generator` per device, and the factories ``rand``, ``randn``,
``randint`` plus in-place ``uniform_`` and ``normal_``.

Counter layout (the contract every backend implements; ``docs/random.md`` has the details):
a generator is ``(seed, offset)``; block ``j`` of a request uses key
``(seed & 0xFFFFFFFF, seed >> 32)`` and counter ``(b & 0xFFFFFFFF, b >> 32, 0, 0)`` with
``b = offset + j``, and yields four uint32 words. Element ``i`` of a request reads words
``w*i .. w*i + w - 1`` of the request's word stream (``w`` = 1, 2 or 4 words per element,
by distribution and dtype), so it depends only on ``(seed, offset, i)``; the offset then
advances by the number of blocks used (rounded up). Uniform floats and integers are
bit-identical everywhere; normals use the host/device ``log``/``sin``/``cos`` and agree to a
few float64 ulp across backends (bit-identical across devices and chunkings of one backend).

The CPU backend generates with numpy straight into the array's memory, in stream order. A
non-host backend generates on the device when it implements the optional
``philox_fill(index, ptr, n, dtype, dist, seed, offset, params, stream)``; otherwise the
numbers are made on the host and copied (slower, same bits).

Example::

    >>> import accelrt as acc
    >>> a = acc.rand(4, device="cpu:0", generator=acc.random.Generator("cpu:0").manual_seed(0))
    >>> b = acc.rand(4, device="cpu:0", generator=acc.random.Generator("cpu:0").manual_seed(0))
    >>> a.tolist() == b.tolist()
    True
    >>> g = acc.random.Generator("cpu:0")
    >>> acc.randint(0, 10, (5,), device="cpu:0", generator=g).dtype
    dtype('int64')
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Literal, SupportsIndex, cast, overload

import numpy as np

from .. import _pinned
from .._placement import check_dtype_form, dtype_cache_key
from .._device import _get_device, _index_arg, _lazy_init
from .._errors import AcceleratorTypeError, AcceleratorValueError, shown, type_shown
from .._size import normalize_size, one_sequence_size, size_keyword
from .._stream import _current
from ._generator import (
    DEFAULT_SEED,
    STATE_SIZE,
    Generator,
    _get,
    _pack_state,
    _seed_arg,
    _set,
    _unpack_state,
    default_generator,
    nondeterministic_seed,
)

if TYPE_CHECKING:
    from .._array import Array
    from .._typing import DeviceLike, DTypeLike, HostArray, RngState, RngStateLike, SizeLike

__all__ = [
    "DEFAULT_SEED",
    "STATE_SIZE",
    "Generator",
    "default_generator",
    "fork_rng",
    "get_rng_state",
    "get_rng_state_all",
    "initial_seed",
    "manual_seed",
    "manual_seed_all",
    "normal_",
    "rand",
    "randint",
    "randn",
    "seed",
    "seed_all",
    "set_rng_state",
    "set_rng_state_all",
    "uniform_",
]

_FLOAT_DTYPES = ("float16", "float32", "float64")
#: The dtypes of rand and randn: a complex number's parts are drawn as floats, as in PyTorch
_RAND_DTYPES = (*_FLOAT_DTYPES, "complex64", "complex128")
#: The largest finite value of each float dtype, by item size.
_FLOAT_MAX = {2: float(np.finfo(np.float16).max), 4: float(np.finfo(np.float32).max),
              8: float(np.finfo(np.float64).max)}


# ---------------------------------------------------------------------- seeds and states

def manual_seed(seed: int) -> None:
    """Seed the default generator of the current device (remembered if not yet created).

    Args:
        seed: an int in ``[-2**63, 2**64)``; negative values wrap to uint64 as in PyTorch.
            As ``torch.manual_seed`` and ``torch.cuda.manual_seed``, the seed is read with
            ``int(seed)``: a bool, a float (truncated) or a numeric string is taken
            (:meth:`Generator.manual_seed` refuses them, as ``torch.Generator``'s does).

    Raises:
        TypeError: ``int()`` does not take ``seed`` (``None``, a list).
        ValueError: ``seed`` is out of range (also a ``RuntimeError``, as in PyTorch), or
            ``int()`` refuses its value (``"x"``, nan; an infinity: ``OverflowError``).

    Example::

        >>> import accelrt as acc
        >>> saved = acc.random.get_rng_state()
        >>> acc.random.manual_seed(42)
        >>> acc.random.initial_seed()
        42
        >>> acc.random.set_rng_state(saved)  # put the previous state back
    """
    value = _seed_arg(seed)
    b, index = _get_device(None)
    _set(b, index, value)


def manual_seed_all(seed: int) -> None:
    """Seed the default generators of every device of the current accelerator; ``seed`` is
    read as :func:`manual_seed` reads it.

    Example::

        >>> import accelrt as acc
        >>> saved = acc.random.get_rng_state_all()
        >>> acc.random.manual_seed_all(5)
        >>> all(int.from_bytes(s[:8].tobytes(), "little") == 5
        ...     for s in acc.random.get_rng_state_all())
        True
        >>> acc.random.set_rng_state_all(saved)  # put the previous states back
    """
    value = _seed_arg(seed)
    b, _ = _get_device(None)
    for index in range(b.device_count()):
        _set(b, index, value)


def seed() -> int:
    """Seed the current device's default generator non-deterministically; return the seed
    (below ``2**53``, as ``torch.cuda.seed()``'s: :meth:`Generator.seed`).

    Example::

        >>> import accelrt as acc
        >>> saved = acc.random.get_rng_state()
        >>> s = acc.random.seed()
        >>> acc.random.initial_seed() == s
        True
        >>> acc.random.set_rng_state(saved)  # put the previous state back
    """
    value = nondeterministic_seed()
    manual_seed(value)
    return value


def seed_all() -> int:
    """Seed every device of the current accelerator with one random seed (below ``2**53``,
    as :func:`seed`); return it.

    Example::

        >>> import accelrt as acc
        >>> saved = acc.random.get_rng_state_all()
        >>> s = acc.random.seed_all()
        >>> all(acc.random.initial_seed(i) == s for i in range(acc.device_count()))
        True
        >>> acc.random.set_rng_state_all(saved)  # put the previous states back
    """
    value = nondeterministic_seed()
    manual_seed_all(value)
    return value


def initial_seed(device: DeviceLike = None, /) -> int:
    """The seed of ``device``'s default generator (the current device's by default), as
    ``torch.accelerator.random.initial_seed(device=None, /)``.

    Example::

        >>> import accelrt as acc
        >>> acc.random.initial_seed() == int.from_bytes(acc.random.get_rng_state()[:8], "little")
        True
        >>> acc.random.initial_seed("cpu:0") == acc.cpu.initial_seed()
        True
    """
    b, index = _get_device(device)
    return _get(b, index)[0]


def get_rng_state(device: DeviceLike = None, /) -> RngState:
    """The 16-byte state of ``device``'s default generator (seed then offset, little-endian
    uint64 each) as a ``numpy.uint8`` array. Does not create the generator. ``device`` is
    positional-only, as in ``torch.accelerator.get_rng_state(device=None, /)``.

    Example::

        >>> import accelrt as acc
        >>> acc.random.get_rng_state("cpu:0").shape
        (16,)
    """
    b, index = _get_device(device)
    return _pack_state(*_get(b, index))


def set_rng_state(new_state: RngStateLike, device: DeviceLike = None) -> None:
    """Restore ``device``'s default generator from :func:`get_rng_state` (remembered if the
    generator does not exist yet).

    Raises:
        TypeError: the state is not a uint8 array (``bytes`` too, as ``torch.set_rng_state``).
        ValueError: the state is not C-contiguous, or not 16 bytes (also a ``RuntimeError``).

    Example::

        >>> import accelrt as acc
        >>> s = acc.random.get_rng_state("cpu:0")
        >>> x = acc.rand(2, device="cpu:0").tolist()
        >>> acc.random.set_rng_state(s, "cpu:0")
        >>> acc.rand(2, device="cpu:0").tolist() == x
        True
    """
    seed_, offset = _unpack_state(new_state)
    b, index = _get_device(device)
    _set(b, index, seed_, offset)


def get_rng_state_all() -> list[RngState]:
    """The states of every device of the current accelerator, by index.

    Example::

        >>> import accelrt as acc
        >>> len(acc.random.get_rng_state_all()) == acc.device_count()
        True
    """
    b, _ = _get_device(None)
    return [_pack_state(*_get(b, i)) for i in range(b.device_count())]


def set_rng_state_all(new_states: Iterable[RngStateLike]) -> None:
    """Set the state of device ``i`` of the current accelerator to ``new_states[i]``.

    Raises:
        IndexError: more states than devices.

    Example::

        >>> import accelrt as acc
        >>> acc.random.set_rng_state_all(acc.random.get_rng_state_all())
    """
    b, _ = _get_device(None)
    parsed = [_unpack_state(s) for s in new_states]  # validate all before changing any
    n = b.device_count()
    if len(parsed) > n:
        raise IndexError(f"set_rng_state_all got {len(parsed)} states but {b.name!r} has only "
                         f"{n} device(s)")
    for index, (seed_, offset) in enumerate(parsed):
        _set(b, index, seed_, offset)


#: Set once :func:`fork_rng` has warned about forking every device (torch.random's flag).
_fork_rng_warned_already = False


@contextlib.contextmanager
def fork_rng(devices: Iterable[DeviceLike] | None = None, enabled: bool = True,
             _caller: str = "fork_rng", _devices_kw: str = "devices",
             device_type: str | None = None) -> Iterator[None]:
    """Fork the default generators of some devices: on exit (also by an exception) each one
    is set back to the state it had on entry, as ``torch.random.fork_rng``.

    accelrt has no host generator, so only the devices' default generators are forked (torch
    also forks its CPU generator every time); other generators are left alone, as in PyTorch.

    Args:
        devices: the devices to fork (indices or device strings of ``device_type``); ``None``:
            every device of the backend, with a one-time ``UserWarning`` where it has more than
            one (as PyTorch warns: name the devices to silence it). Any iterable, read once.
        enabled: ``False`` forks nothing (the body runs as it is).
        _caller, _devices_kw: the function and keyword named in that warning (PyTorch's
            internal arguments, for wrappers).
        device_type: the backend whose devices are forked (``None``: the current
            accelerator, :func:`accelrt.current_accelerator`; ``"cuda"`` if there is none);
            ``"meta"`` forks nothing, as in PyTorch.

    Raises:
        TypeError: ``device_type`` is not a str, an :class:`accelrt.device` or ``None`` (an
            ``AcceleratorTypeError``, also a ``RuntimeError``, PyTorch's class).
        ValueError: no backend of that name is registered (an ``AcceleratorValueError``,
            also a ``RuntimeError``, PyTorch's class).

    Example::

        >>> import accelrt as acc
        >>> before = acc.cpu.get_rng_state(0)
        >>> with acc.random.fork_rng(devices=[0], device_type="cpu"):
        ...     _ = acc.rand(8, device="cpu:0")
        >>> bool((acc.cpu.get_rng_state(0) == before).all())
        True
    """
    global _fork_rng_warned_already
    if device_type == "meta":
        yield
        return
    device_type = _fork_device_type(device_type)
    from .._runtime import device_module
    try:
        dm = device_module(device_type)
    except ValueError as e:
        raise AcceleratorValueError(f"fork_rng(device_type={device_type!r}): {e}") from None
    if not enabled:
        yield
        return
    if devices is None:
        n = dm.device_count()
        if n > 1 and not _fork_rng_warned_already:
            kind = device_type.upper()
            warnings.warn(
                f"{kind} reports that you have {n} available devices, and you have used "
                f"{_caller} without explicitly specifying which devices are being used. For "
                f"safety, the default generator of *every* {kind} device is forked. If you "
                f"only use a few of them, pass them with the '{_devices_kw}' keyword argument "
                f"of {_caller} (e.g. {_devices_kw}=[0]); to fork all of them and silence this "
                f"warning, pass {_devices_kw}=range({n}).", UserWarning, stacklevel=3)
            _fork_rng_warned_already = True
        chosen: list[Any] = list(range(n))
    else:
        chosen = list(devices)   # an iterator is read once: it is used twice below
    states = [dm.get_rng_state(d) for d in chosen]
    try:
        yield
    finally:
        for d, state in zip(chosen, states):
            dm.set_rng_state(state, d)


def _fork_device_type(device_type: Any) -> str:
    """The backend name of :func:`fork_rng`'s ``device_type``, read as torch 2.15's
    ``fork_rng`` reads it: a false value (``None``, ``""``) is the current accelerator's type
    (``"cuda"`` if there is none); then, as ``torch.get_device_module``, a device's type or a
    device string's (``"cuda:1"`` is ``"cuda"``)."""
    if not device_type:
        from .._device import current_accelerator
        current = current_accelerator()
        return current.type if current is not None else "cuda"
    from .._device import device as device_cls
    if isinstance(device_type, device_cls):
        return device_type.type
    if not isinstance(device_type, str):
        raise AcceleratorTypeError(
            f"fork_rng() device_type must be a backend name (a str), an accelrt.device or "
            f"None, got {type_shown(device_type)} (PyTorch: \"Invalid value of device "
            f"'{device_type}', expect torch.device, str, or None\")")
    if ":" in device_type:
        try:
            return device_cls(device_type).type
        except RuntimeError as e:     # (accelrt's device errors are RuntimeErrors)
            raise AcceleratorValueError(f"fork_rng(device_type={device_type!r}): {e}") from None
    return device_type


# ---------------------------------------------------------------------- argument checks

def _real(name: str, value: Any) -> float:
    """``value`` as a float, as PyTorch's argument parser reads a ``double``
    (``THPUtils_checkDouble``: a Python int or float, a bool included since it is an int, or a
    numpy scalar: integer, bool or floating; or a 0-d tensor, here a 0-d real
    :class:`accelrt.Array`, whose value is read); ``TypeError`` for anything else,
    ``OverflowError`` for an int beyond the float64 range (Python's and PyTorch's "int too
    large to convert to float"). nan and the infinities are returned: the callers check
    them as PyTorch does."""
    if type(value) is float:
        return value    # the common case: a Python float
    if isinstance(value, (int, float, np.integer, np.floating, np.bool_)):
        pass
    elif (_Array is not None and isinstance(value, _Array) and value.ndim == 0
            and value.dtype.kind in "biuf"):
        pass            # PyTorch's parser takes a 0-d tensor as a double too
    else:
        raise TypeError(f"{name} must be a real number, got {type_shown(value)}")
    try:
        return float(value)
    except OverflowError:
        raise OverflowError(f"{name}: int too large to convert to float (it lies beyond the "
                            "float64 range)") from None


#: dtype argument -> its float dtype, for the arguments seen so far (``np.dtype()`` and
#: ``dtype.name`` cost microseconds, more than a small request's arithmetic).
_float_dtype_cache: dict[Any, np.dtype] = {}


def _float_dtype(dtype: Any, fname: str) -> np.dtype:
    """The checked dtype of :func:`rand`/:func:`randn`: a floating or complex one (PyTorch
    draws each part of a complex number as a float); ``None`` is float32, PyTorch's default.

    Raises:
        TypeError: an unknown dtype; another kind (an ``AcceleratorTypeError``, also a
            ``RuntimeError``, as PyTorch's ``NotImplementedError`` "... not implemented for
            'Long'").
    """
    try:
        return _float_dtype_cache[dtype]
    except (KeyError, TypeError):   # TypeError: an unhashable argument
        pass
    if dtype is not None:
        check_dtype_form(dtype)
    try:
        dt: np.dtype[Any] = np.dtype("float32" if dtype is None else dtype)
    except (TypeError, ValueError):     # ValueError: numpy cannot print a huge int
        raise TypeError(f"{fname}(): unknown dtype {shown(dtype)}") from None
    if dt.name not in _RAND_DTYPES:
        raise AcceleratorTypeError(f"{fname}() makes floating numbers; dtype must be one of "
                                   f"{', '.join(_RAND_DTYPES)}, got {dt.name}")
    if len(_float_dtype_cache) < 64 and dtype_cache_key(dtype):
        _float_dtype_cache[dtype] = dt
    return dt


# ---------------------------------------------------------------------- generation

_STANDARD = (0.0, 1.0)

#: The per-call path (:mod:`accelrt.random._draw`: ``new``, ``fill``) and ``Array``, bound on
#: first use by :func:`_bind` (importing them here would load the allocator whenever anything
#: imports ``accelrt.random``, e.g. for ``manual_seed``).
_new: Callable[..., Array] | None = None
_fill: Any = None
_Array: Any = None


def _bind() -> Callable[..., Array]:
    """Bind :data:`_new`, :data:`_fill` and :data:`_Array`; return ``_new``."""
    global _new, _fill, _Array
    from .._array import Array
    from ._draw import fill, new
    _fill, _Array = fill, Array
    _new = new
    return new


def _generate(out: Array, dist: str, params: tuple[Any, ...], generator: Generator | None) -> None:
    """Reserve counters from the generator and fill ``out`` in stream order. A complex array
    is filled as PyTorch fills one (``view_as_real``): its ``2n`` float parts in memory order,
    a normal one with standard deviation ``std / sqrt(2)`` per part (as :func:`randn`)."""
    b, index = out._b, out._index
    _lazy_init(b, index)
    if _fill is None:
        _bind()
    n = math.prod(out._shape)
    if out._dtype.kind == "c":      # (the factories' rule: accelrt.random._draw.new)
        from ._draw import _PARTS, _SQRT_HALF
        out = _Array._wrap(out._mem, (*out._shape, 2), _PARTS[out._dtype.itemsize], b, index)
        n *= 2
        if dist == "normal":
            params = (params[0], params[1] * _SQRT_HALF)
    _fill(out, b, index, _current(b, index)._handle, n, dist, params, generator)


def _check_float_array(array: Any, fname: str) -> Array:
    if _Array is None:
        _bind()
    if not isinstance(array, _Array):
        raise TypeError(f"{fname}() needs an accelrt.Array, got {type_shown(array)}")
    if array.dtype.name not in _RAND_DTYPES:
        from .._factories import _TORCH_NAMES     # (only on this error path)
        kernel = "check_uniform_bounds" if fname == "uniform_" else "normal_kernel_cpu"
        raise AcceleratorTypeError(
            f"{fname}() needs a floating array ({', '.join(_FLOAT_DTYPES)}) or a complex one "
            f"(complex64, complex128), got {array.dtype.name} (PyTorch: \"{kernel}\" not "
            f"implemented for "
            f"'{_TORCH_NAMES.get(array.dtype.name, array.dtype.name)}')")
    return cast("Array", array)


def uniform_(array: Array, a: float = 0.0, b: float = 1.0, *,
             generator: Generator | None = None) -> Array:
    """Fill ``array`` in place with uniform numbers in ``[a, b)``; return it.

    Args:
        array: a float16/float32/float64 :class:`accelrt.Array`, or a complex64/complex128
            one, whose real and imaginary parts are each drawn in ``[a, b)`` (PyTorch's
            ``view_as_real`` rule).
        a: lower bound (inclusive).
        b: upper bound (exclusive; a draw that rounds to ``b`` becomes ``a``, as PyTorch).
        generator: a generator of the array's backend (default: the device's default one).

    Raises:
        TypeError: not an Array, or a wrong argument type; an array of another dtype (an
            ``AcceleratorTypeError``, also a ``RuntimeError`` as PyTorch's
            ``NotImplementedError``).
        ValueError: non-finite bounds, a bound outside the (part) dtype's finite range,
            ``a > b``, ``b - a`` overflows the dtype, or a generator of another backend (each
            an ``AcceleratorValueError``, also a ``RuntimeError`` as in PyTorch).
        OverflowError: an int bound beyond the float64 range, as in PyTorch.

    Example::

        >>> import accelrt as acc
        >>> x = acc.random.uniform_(acc.empty(1000, device="cpu:0"), -2, 3)
        >>> v = x.numpy(); bool(v.min() >= -2 and v.max() < 3)
        True
    """
    array = _check_float_array(array, "uniform_")
    lo, hi = _real("a", a), _real("b", b)
    dt = array.dtype if array.dtype.kind == "f" else np.dtype(f"f{array.dtype.itemsize // 2}")
    top = _FLOAT_MAX[dt.itemsize]
    for name, bound in (("a", lo), ("b", hi)):
        if not -top <= bound <= top:     # (nan too: PyTorch's "from is out of bounds")
            raise AcceleratorValueError(
                f"uniform_: {name}={bound} is out of bounds for {dt.name}: it must be finite "
                f"and within [{-top}, {top}]")
    if lo > hi:
        raise AcceleratorValueError(f"uniform_ expects to return a [a, b) range, but found "
                                    f"a={lo} > b={hi}")
    if hi - lo > top:
        raise AcceleratorValueError(f"uniform_ expects b - a <= {np.finfo(dt).max} "
                                    f"for {dt.name}, got b - a = {hi - lo}")
    _generate(array, "uniform", (lo, hi), generator)
    return array


def normal_(array: Array, mean: float = 0.0, std: float = 1.0, *,
            generator: Generator | None = None) -> Array:
    """Fill ``array`` in place with normal numbers of ``mean`` and ``std``; return it.

    Numbers beyond the dtype's range become infinities, as in PyTorch (no warning); as
    PyTorch's, ``mean`` may be nan or infinite and ``std`` infinite (the numbers are then
    ``mean + std * z`` in IEEE arithmetic: nan or infinite). A complex64/complex128 array
    gets normal real and imaginary parts with mean ``mean`` and standard deviation
    ``std / sqrt(2)`` each, as in PyTorch (so ``abs(z - mean)`` has variance ``std**2``).

    Raises:
        TypeError: not an Array, or a wrong argument type; an array of another dtype (an
            ``AcceleratorTypeError``, also a ``RuntimeError`` as PyTorch's
            ``NotImplementedError``).
        ValueError: ``std < 0`` or nan, or a generator of another backend (each an
            ``AcceleratorValueError``, also a ``RuntimeError`` as in PyTorch).
        OverflowError: an int ``mean`` or ``std`` beyond the float64 range, as in PyTorch.

    Example::

        >>> import accelrt as acc
        >>> x = acc.random.normal_(acc.empty(10000, device="cpu:0"), 5.0, 0.5)
        >>> abs(float(x.numpy().mean()) - 5.0) < 0.05
        True
    """
    array = _check_float_array(array, "normal_")
    m, s = _real("mean", mean), _real("std", std)
    if not s >= 0:      # (nan too, as PyTorch's "normal expects std >= 0.0, but found std nan")
        raise AcceleratorValueError(f"normal expects std >= 0.0, but found std {s}")
    _generate(array, "normal", (m, s), generator)
    return array


def _pinned_draw(shape: tuple[int, ...], dt: np.dtype, device: DeviceLike,
                 generator: Generator | None, dist: str, params: tuple[Any, ...],
                 fname: str) -> np.ndarray:
    """``pin_memory=True`` of :func:`rand`/:func:`randn`/:func:`randint`: the numbers
    ``generator`` (default: the current device's default generator) draws, in a pinned host
    array of its backend.
    accelrt has no host generator, so they are drawn on the generator's device and copied."""
    _pinned.factory_backend(device, fname)        # no device may be given or be the default
    drawn = (_new or _bind())(shape, dt, None, generator, dist, params)
    host = _pinned.new_pinned(drawn._b, shape, dt)
    host[...] = drawn.numpy()
    return host


@overload
def rand(*size: SizeLike, generator: Generator | None = ..., dtype: DTypeLike | None = ...,
         device: DeviceLike = ..., pin_memory: Literal[False] | None = ...,
         **kw: SizeLike) -> Array: ...
@overload
def rand(*size: SizeLike, generator: Generator | None = ..., dtype: DTypeLike | None = ...,
         device: DeviceLike = ..., pin_memory: Literal[True], **kw: SizeLike) -> HostArray: ...
@overload
def rand(*size: SizeLike, generator: Generator | None = ..., dtype: DTypeLike | None = ...,
         device: DeviceLike = ..., pin_memory: bool | None,
         **kw: SizeLike) -> Array | HostArray: ...
def rand(*size: SizeLike, generator: Generator | None = None, dtype: DTypeLike | None = "float32",
         device: DeviceLike = None, pin_memory: bool | None = False,
         **kw: SizeLike) -> Array | HostArray:
    """An array of uniform numbers in ``[0, 1)`` (PyTorch's ``rand``).

    Args:
        *size: the shape, as ints or one sequence (``size=`` also works).
        generator: a generator of ``device``'s backend (default: the device's default
            generator; as PyTorch's, one of another device of that backend draws there too);
            with ``device=None`` the generator's device is used, unless a ``with
            acc.device(...)`` block or :func:`accelrt.set_default_device` names the default
            device (then the generator must be of its backend, as in PyTorch).
        dtype: float16, float32 (the default; ``None`` too) or float64, or complex64 or
            complex128 (the real and imaginary parts drawn as floats, as in PyTorch:
            uniform in ``[0, 1)`` each, or normal with variance 1/2 each); keyword-only.
        device: where to make the array (keyword-only; ``None``: the default device,
            :func:`accelrt.get_default_device`).
        pin_memory: return a pinned host ``numpy.ndarray`` instead (as
            :func:`accelrt.empty`): the numbers are drawn by ``generator`` (default: the
            current device's default generator) and the array is pinned for its backend.
            Then no device may be given or be the default.

    Raises:
        TypeError: bad size or dtype.
        ValueError: a negative dimension, a generator of another backend, or
            ``pin_memory=True`` with a device.

    Example::

        >>> import accelrt as acc
        >>> acc.rand(2, 3, device="cpu:0").shape
        (2, 3)
    """
    if kw or len(size) != 1 or type(size[0]) is not int or size[0] < 0:
        size = normalize_size(size, size_keyword(kw, "rand"), "rand")
    try:
        dt = _float_dtype_cache[dtype]          # _float_dtype's cache, without the call
    except (KeyError, TypeError):
        dt = _float_dtype(dtype, "rand")
    if pin_memory is not False and _pinned.pin_flag(pin_memory):
        return _pinned_draw(size, dt, device, generator, "uniform",  # type: ignore[arg-type]
                            _STANDARD, "rand")
    return (_new or _bind())(size, dt, device, generator, "uniform", _STANDARD)


@overload
def randn(*size: SizeLike, generator: Generator | None = ..., dtype: DTypeLike | None = ...,
          device: DeviceLike = ..., pin_memory: Literal[False] | None = ...,
          **kw: SizeLike) -> Array: ...
@overload
def randn(*size: SizeLike, generator: Generator | None = ..., dtype: DTypeLike | None = ...,
          device: DeviceLike = ..., pin_memory: Literal[True], **kw: SizeLike) -> HostArray: ...
@overload
def randn(*size: SizeLike, generator: Generator | None = ..., dtype: DTypeLike | None = ...,
          device: DeviceLike = ..., pin_memory: bool | None,
          **kw: SizeLike) -> Array | HostArray: ...
def randn(*size: SizeLike, generator: Generator | None = None, dtype: DTypeLike | None = "float32",
          device: DeviceLike = None, pin_memory: bool | None = False,
          **kw: SizeLike) -> Array | HostArray:
    """An array of standard normal numbers (PyTorch's ``randn``); arguments as :func:`rand`.

    Example::

        >>> import accelrt as acc
        >>> acc.randn((4,), dtype="float64", device="cpu:0").dtype
        dtype('float64')
    """
    if kw or len(size) != 1 or type(size[0]) is not int or size[0] < 0:
        size = normalize_size(size, size_keyword(kw, "randn"), "randn")
    if pin_memory is not False and _pinned.pin_flag(pin_memory):
        return _pinned_draw(size, _float_dtype(dtype, "randn"),  # type: ignore[arg-type]
                            device, generator, "normal", _STANDARD, "randn")
    return (_new or _bind())(size, _float_dtype(dtype, "randn"), device, generator,
                "normal", _STANDARD)


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def _int_bound(name: str, value: Any) -> int:
    # as torch 2.15's parser reads a SymInt: an exception of the argument's __index__ makes
    # it no int (a TypeError), whatever its class
    if type(value) is int:
        return value
    if isinstance(value, (bool, np.bool_)) or (
            isinstance(getattr(value, "dtype", None), np.dtype) and value.dtype.kind == "b"):
        # (a one-element bool Array too, which __index__ reads as 0 or 1: torch 2.15 refuses
        # a bool tensor, "scalar.isIntegral(false)", as the factories' sizes do)
        raise TypeError(f"randint() {name} must be an int, got bool")
    return _index_arg(value, f"randint() {name}", parser=True)


@overload
def randint(*args: SizeLike, size: SizeLike | None = ..., low: SupportsIndex | None = ...,
            high: SupportsIndex | None = ..., generator: Generator | None = ...,
            dtype: DTypeLike | None = ..., device: DeviceLike = ...,
            pin_memory: Literal[False] | None = ...) -> Array: ...
@overload
def randint(*args: SizeLike, size: SizeLike | None = ..., low: SupportsIndex | None = ...,
            high: SupportsIndex | None = ..., generator: Generator | None = ...,
            dtype: DTypeLike | None = ..., device: DeviceLike = ...,
            pin_memory: Literal[True]) -> HostArray: ...
@overload
def randint(*args: SizeLike, size: SizeLike | None = ..., low: SupportsIndex | None = ...,
            high: SupportsIndex | None = ..., generator: Generator | None = ...,
            dtype: DTypeLike | None = ..., device: DeviceLike = ...,
            pin_memory: bool | None) -> Array | HostArray: ...
def randint(*args: SizeLike, size: SizeLike | None = None, low: SupportsIndex | None = None,
            high: SupportsIndex | None = None, generator: Generator | None = None,
            dtype: DTypeLike | None = "int64", device: DeviceLike = None,
            pin_memory: bool | None = False) -> Array | HostArray:
    """Uniform integers in ``[low, high)``: ``randint(high, size)`` or
    ``randint(low, high, size)`` (PyTorch's argument conventions; keywords also work).

    Each element is ``low + floor(V * (high - low) / 2**(32 w))`` for a 64-bit (``w=2``, when
    ``high - low <= 2**32``) or 128-bit (``w=4``) Philox integer ``V``: no rejection loop,
    so results are bit-identical everywhere, with a bias below ``2**-32`` (``2**-64``).

    Args:
        low, high: ints or numpy integers (never bools or floats), as PyTorch's ``SymInt``.
        size: one sequence of ints (a tuple, a list, a 1-D numpy array); a bare int is
            refused, as ``torch.randint(1, 3)`` refuses it.
        dtype: an integer dtype (default int64; ``None`` too), bool, or a float dtype.
        pin_memory: return a pinned host ``numpy.ndarray`` instead, as :func:`rand` does.

    Raises:
        TypeError: wrong argument types (an int as the size included) or an unsupported
            dtype.
        ValueError: ``low >= high``, or bounds that do not fit ``dtype`` (``low`` and
            ``high - 1`` must be values of it; for a float dtype: its finite range, within
            int64), each an ``AcceleratorValueError``, also a ``RuntimeError`` as in PyTorch.
            ``high`` may be ``2**63`` (int64, float64) or ``2**64`` (uint64), so that every
            value of the dtype can be drawn, where PyTorch's parser refuses any bound outside
            int64 ("Overflow when unpacking long long", which accelrt's message starts with
            for a bound outside int64 that it refuses).

    Example::

        >>> import accelrt as acc
        >>> x = acc.randint(3, 7, (1000,), device="cpu:0").numpy()
        >>> int(x.min()), int(x.max())
        (3, 6)
    """
    low, high, size = _randint_args(args, low, high, size)
    lo = 0 if low is None else _int_bound("low", low)
    hi = _int_bound("high", high)
    shape = one_sequence_size(size, "randint")
    if dtype is not None:
        check_dtype_form(dtype)
    try:
        dt = np.dtype("int64" if dtype is None else dtype)
    except TypeError:
        raise TypeError(f"randint(): unknown dtype {dtype!r}") from None
    if dt.kind not in "biuf":
        raise AcceleratorTypeError("check_random_bounds handles only integral, floating-point "
                                   "and boolean types: randint() dtype must be an integer, bool "
                                   f"or float dtype, got {dt.name}")
    if lo >= hi:
        raise AcceleratorValueError(f"random_ expects 'from' to be less than 'to', but got "
                                    f"from={lo} >= to={hi}")
    if dt.kind == "b":
        fmin, fmax = 0, 1
    elif dt.kind in "iu":
        fmin, fmax = int(np.iinfo(dt).min), int(np.iinfo(dt).max)
    else:   # a float dtype: its finite range (float16's 65504), within int64
        fmax = min(int(np.finfo(dt).max), (1 << 63) - 1)
        fmin = max(-int(np.finfo(dt).max), -(1 << 63))
    if lo < fmin or hi - 1 > fmax:
        # (torch 2.15's parser refuses any bound outside int64 with ValueError "Overflow when
        # unpacking long long"; accelrt takes high = 2**63 or 2**64 where the dtype needs it
        # to draw its every value: docs/differences.md)
        unpack = ("Overflow when unpacking long long: " if not (
            _INT64_MIN <= lo <= _INT64_MAX and _INT64_MIN <= hi <= _INT64_MAX) else "")
        # (in int64: torch 2.15's "from is out of bounds for signed char", which it checks
        # first, on either side of the range: randint(300, 301, ..., dtype=uint8) names from)
        torch_text = unpack or (f"{'to - 1' if fmin <= lo <= fmax else 'from'} is out of "
                                f"bounds for {_C_TYPES.get(dt.name, dt.name)}: ")
        raise AcceleratorValueError(f"{torch_text}randint() bounds [{shown(lo)}, {shown(hi)}) "
                                    f"do not fit dtype {dt.name} (values {fmin}..{fmax})")
    if dt.kind == "f":
        _warn_float_bounds(lo, hi, dt)
    if pin_memory is not False and _pinned.pin_flag(pin_memory):
        return _pinned_draw(shape, dt, device, generator, "randint", (lo, hi - lo), "randint")
    return (_new or _bind())(shape, dt, device, generator, "randint", (lo, hi - lo))


def _randint_args(args: tuple[Any, ...], low: Any, high: Any, size: Any
                  ) -> tuple[Any, Any, Any]:
    """``(low, high, size)`` of :func:`randint` from its positional arguments and keywords,
    as PyTorch's parser matches ``randint(high, size)`` and ``randint(low, high, size)``
    (``low`` ``None``: 0; the values are checked by the caller)."""
    pos: list[Any] = list(args)   # checked by the caller
    low_passed = False            # low came positionally (None is then refused)
    if len(pos) > 3:
        raise TypeError(f"randint() takes at most 3 positional arguments, got {len(pos)}")
    if len(pos) == 3:
        if low is not None or high is not None or size is not None:
            raise TypeError("randint() got low/high/size both positionally and by keyword")
        low, high, size = pos
        low_passed = True
    elif len(pos) == 2:
        if size is None and low is None and high is None:
            high, size = pos
        elif size is not None and low is None and high is None:
            low, high = pos
            low_passed = True
        else:
            raise TypeError("randint() arguments are randint(high, size) or "
                            "randint(low, high, size)")
    elif len(pos) == 1:
        if high is None:
            high = pos[0]
        elif low is None:
            low = pos[0]
            low_passed = True
        else:
            raise TypeError("randint() got an extra positional argument")
    if low is None and low_passed:
        # a None passed for low (torch's parser refuses it; only an omitted low is 0)
        raise TypeError("randint() low must be an int, got None; leave it out for 0: "
                        "randint(high, size)")
    if high is None:
        if args:    # a None passed for high (torch's parser: "must be int, not NoneType")
            raise TypeError("randint() high must be an int, got None")
        raise TypeError("randint() missing the upper bound 'high'")
    if size is None:
        raise TypeError("randint() missing the 'size' argument, e.g. randint(10, (3,))")
    return low, high, size


#: the C++ type names torch 2.15's "from/to - 1 is out of bounds for ..." prints per dtype
_C_TYPES = {"bool": "bool", "uint8": "unsigned char", "int8": "signed char",
            "int16": "short int", "int32": "int", "uint16": "short unsigned int",
            "uint32": "unsigned int", "uint64": "long unsigned int", "float16": "c10::Half"}


def _warn_float_bounds(lo: int, hi: int, dt: np.dtype[Any]) -> None:
    """Warn, as torch 2.15's ``random_`` does, when ``lo`` or ``hi - 1`` lies beyond
    ``2**digits`` of the float dtype ``dt`` (float16 11, float32 24, float64 53): past it the
    dtype cannot hold every integer of the range, so the draws are not uniform over it."""
    digits = int(np.finfo(dt).nmant) + 1
    bound = 1 << digits
    for name, value in (("from", lo), ("to - 1", hi - 1)):
        if value < -bound or value > bound:
            warnings.warn(f"{name} is out of bounds [-(2^{digits}), 2^{digits}]. Due to "
                          f"precision limitations {dt.name} can hold every integer only "
                          f"within this range, so randint() cannot draw uniformly beyond it "
                          f"(PyTorch warns the same and says it will become an error)",
                          UserWarning, stacklevel=3)
