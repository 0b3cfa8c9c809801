"""The random factories' per-call path: make the array (:func:`new`) and queue its fill
(:func:`fill`); compiled in the compiled build (``setup.py``'s ``COMPILED``).

``accelrt.random`` imports this module on first use (it loads the allocator). The generator
core stays in :mod:`accelrt.random._philox`, which this module reaches through the module
object at every call (so its hooks, e.g. ``_philox.fill_at``, can be replaced at run time).

Example::

    >>> import accelrt as acc
    >>> from accelrt.random import _draw
    >>> g = acc.random.Generator("cpu:0").manual_seed(3)
    >>> a = _draw.new((4,), acc.empty(1).dtype, "cpu:0", g, "uniform", (0.0, 1.0))
    >>> a.shape, g.get_offset()
    ((4,), 1)
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from .. import _backend
from .. import _device as _device_mod
from .._array import Array
from .._errors import AcceleratorValueError, type_shown
from .._placement import place, site
from .._size import storage_nbytes
from .._transfer import hold
from .. import _graph
from . import _graphsafe, _philox
from ._generator import Generator, _default_for

if TYPE_CHECKING:
    from .._backend import Backend
    from .._handles import StreamHandle

__all__ = ["check_generator", "fill", "new"]

#: Elements per Philox block of the uniform and normal requests, by distribution and element
#: size (see ``_philox.words_per_element``): saves two calls on every request.
_PER_BLOCK: Final = {("uniform", 2): 4, ("uniform", 4): 4, ("uniform", 8): 2,
              ("normal", 2): 2, ("normal", 4): 2, ("normal", 8): 2}

#: The float dtype of each part of a complex dtype, by the complex item size
_PARTS: Final[dict[int, np.dtype]] = {8: np.dtype("float32"), 16: np.dtype("float64")}
_SQRT_HALF: Final = math.sqrt(0.5)

_instances: Final = _backend._instances    # the registry's instances by name (never rebound)
_capturing: Final = _graph._capturing      # the graph captures in progress (never rebound)
_wrap: Final = Array._wrap


def _resolve(device: object, generator: object) -> object:
    if generator is not None and not isinstance(generator, Generator):
        raise TypeError(f"generator must be an accelrt.random.Generator, got "
                        f"{type_shown(generator)}")
    if device is None and generator is not None:
        return generator.device
    return device


def check_generator(generator: object, b: Backend, index: int) -> Generator:
    """``generator`` (the default one of device ``index`` for ``None``) if it is a
    :class:`Generator` of ``b``: of any of its devices, as PyTorch's ``check_generator``
    compares only the device type (``torch.rand(2, device="cuda:0",
    generator=torch.Generator("cuda:1"))`` draws from that generator; its state is host-side).

    Raises:
        TypeError: not a Generator.
        ValueError: a generator of another backend, or of a backend since replaced (an
            ``AcceleratorValueError``, also a ``RuntimeError`` as PyTorch's "Expected a
            '...' device type for generator").
    """
    if generator is None:
        return _default_for(b, index)
    if not isinstance(generator, Generator):
        raise TypeError(f"generator must be an accelrt.random.Generator, got "
                        f"{type_shown(generator)}")
    if generator._b is not b:
        raise AcceleratorValueError(
            f"Expected a '{b.name}' device type for generator but found "
            f"'{generator._b.name}': the generator belongs to {generator.device} but the "
            f"array is on {b.name}:{index}; use a Generator of the array's backend")
    return generator


def new(shape: tuple[int, ...], dtype: object, device: object, generator: object, dist: str,
        params: tuple[Any, ...]) -> Array:
    """``empty(shape, dtype=dtype, device=device)`` filled as :func:`fill` fills: the random
    factories' one path.

    ``device=None`` with a generator means the generator's device (a ``with acc.device(...)``
    block or default device, resolved by the caller, wins). The array is made as
    ``Array.__init__`` makes it (same checks, in the same order: device, dtype support; the
    same :meth:`accelrt._placement.Site.malloc`), and the generator is checked before
    anything is allocated. A ``"uniform"`` request here is ``rand``'s (standard bounds, fresh
    allocator memory), which :func:`fill` may copy from the thread's run of blocks.
    """
    if device is None and _device_mod._defaults_used:
        device = _device_mod._factory_device(None)     # a with-device block's, or the default
    if device is None and generator is not None:
        if type(generator) is Generator and _instances.get(generator._b.name) is generator._b:
            # the generator's device (what generator.device names while its backend is the
            # registered instance of its name; its index was checked when it was made)
            where = site(generator._b, generator._index)
        else:
            where = place(_resolve(device, generator))
    else:
        where = place(device)
    b, index = where.b, where.index
    dt = where.dtype(dtype)
    if generator is None:
        gen = where.default
        if gen is None:
            gen = where.default = _default_for(b, index)
    elif type(generator) is not Generator or generator._b is not b:
        gen = check_generator(generator, b, index)
    else:
        gen = generator
    n = shape[0] if len(shape) == 1 else math.prod(shape)
    mem, stream = where.malloc(storage_nbytes(shape, dt.itemsize))
    out: Array = _wrap(mem, shape, dt, b, index)
    if dt.kind == "c":
        # PyTorch's complex rand/randn: the interleaved real and imaginary parts, drawn as
        # 2n floats (randn's with standard deviation std/sqrt(2), so |z| has variance std**2)
        part = _wrap(mem, (*shape, 2), _PARTS[dt.itemsize], b, index)
        fill(part, b, index, stream, 2 * n, dist,
             (params[0], params[1] * _SQRT_HALF) if dist == "normal" else params, gen,
             dist == "uniform")
    else:
        fill(out, b, index, stream, n, dist, params, gen, dist == "uniform")
    return out


def fill(out: Array, b: Backend, index: int, stream: StreamHandle, n: int, dist: str,
         params: tuple[Any, ...], generator: object, run_copy: bool = False) -> None:
    """Fill the ``n`` elements of ``out`` (on device ``index`` of ``b``, initialised) on
    ``stream``: reserve the generator's counters, then the device's Philox, or a host fill
    queued on the stream, or numbers made on the host and uploaded.

    The host fill is one ``functools.partial`` of ``_philox.fill_at``, or, with ``run_copy``
    (``rand``'s standard uniform float32/float64 request on fresh allocator memory, at most
    ``_philox.SMALL_MAX_BLOCKS`` blocks), of the compiled build's C arithmetic
    (``_philox._kernel.uniform_at``) or of ``_philox._copy_uniform`` (a ``memmove`` from the
    thread's run of blocks), every check done here. Queued work holds memory only when it is
    borrowed (``accelrt._transfer.held``'s rule): allocator memory is freed stream-ordered,
    so ``del out`` while the fill is queued frees it at once, as for any op.
    """
    if type(generator) is not Generator or generator._b is not b:
        gen = check_generator(generator, b, index)
    else:
        gen = generator
    if n == 0:
        return
    dtype: np.dtype = out._dtype
    size = dtype.itemsize
    per = _PER_BLOCK.get((dist, size))
    nblocks = (-(-n // per) if per is not None
               else _philox.blocks_needed(n, dist, dtype, params))
    caps = b.capabilities(index)
    cell: np.ndarray | None = None
    if not _capturing or caps.device_rng:   # (device-made numbers: a capture keeps its own)
        seed, offset = gen._st.reserve(nblocks)
    else:   # a graph capture is in progress somewhere: the generator may count in a graph
        seed, offset, cell = _graphsafe.reserve(gen, b, index, stream, nblocks)
    mem = out._mem
    ptr = mem.ptr
    keep = (mem,) if mem.alloc is None and ptr else ()
    if caps.device_rng:
        b.philox_fill(index, ptr, n, dtype.name, dist, seed, offset, params, stream)
        if keep:
            hold(b, index, stream, keep)
        return
    if mem.host or caps.host_accessible:
        if cell is not None:   # a captured draw: the replay's seed and offset, read when run
            work = functools.partial(_graphsafe.fill_at, cell, offset, ptr, n, dtype, dist,
                                     params)
        elif (run_copy and size != 2 and nblocks <= _philox.SMALL_MAX_BLOCKS
                and offset + nblocks <= 1 << 64):
            kernel = _philox._kernel
            if kernel is not None:    # the compiled build: the numbers made in place, in C
                work = functools.partial(kernel.uniform_at, ptr, n, size, seed, offset)
            else:
                work = functools.partial(_philox._copy_uniform, ptr, n * size, dtype.char,
                                         seed, offset, nblocks)
        else:
            work = functools.partial(_philox.fill_at, ptr, n, dtype, dist, seed, offset,
                                     params)
        if not caps.host_functions:
            b.stream_synchronize(index, stream)
            work()
            return
        b.launch_host_func(index, work, stream)
        if keep:
            hold(b, index, stream, keep)
        return
    host = np.empty(out._shape, dtype)   # a device the host cannot address
    _philox.fill(host, dist, seed, offset, params)
    out._upload(host, False)
