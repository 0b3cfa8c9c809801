"""``accelrt.Array``: just enough of an array to hold device memory, and its factories
``empty``, ``zeros``, ``ones``, ``full`` and ``asarray``.

An :class:`Array` is a C-contiguous block of device memory with a shape and a numpy dtype.
Its memory comes from the device's caching allocator, allocated on the calling thread's
current stream of that device, and goes back to the allocator when the array's memory owner
is garbage collected (the array, every ``numpy()`` view and every DLPack export share it).
It is not a numerical library: it fills, copies, moves between devices and hands its memory
to numpy and DLPack consumers.

Stream semantics follow PyTorch: every operation is enqueued on the current stream of the
array's device. Copies that touch host memory wait for completion unless
``non_blocking=True``; device-to-device copies are ordered on the streams but never block
the host. ``numpy()`` and ``__dlpack__`` synchronize the current stream first.

Copies between numpy memory and a device the host cannot read (CUDA, OpenCL in buffer mode)
go through pinned blocks of the backend's host caching pool, as PyTorch's do (see
:mod:`accelrt._transfer`, which plans and runs every copy): an upload first copies the data into a block (so the numpy source
may change as soon as ``copy_`` returns, even with ``non_blocking=True``), and the block is
reused only after the copy's event has completed; a download lands in a block and is copied
out after the stream is synchronized. Blocking and non-blocking uploads take the same path
(the blocking one then synchronizes). Backends without pinned host memory, out-of-pinned-memory
and graph capture fall back to copying directly from or to the numpy memory. The pool shows in
``accelrt.memory.host_memory_stats()`` and is emptied by ``accelrt.memory.empty_host_cache()``.
Host-accessible devices (the CPU backend) copy directly too; everywhere, a non-blocking upload
reads the numpy data at the call (a direct one copies it to a private buffer first), except
under graph capture, where the captured copy reads the numpy memory at every replay, and from
a pinned host array (:func:`accelrt.pin_memory`), which is copied straight from its pinned
block, asynchronously, as PyTorch copies from pinned memory (see :mod:`accelrt._pinned`).

Lifetimes of queued work (see ``docs/architecture.md``): an array may be dropped while work
on it is queued. Caching-allocator memory is then freed at once, stream-ordered; memory not
from the allocator (borrowed by :func:`asarray`, or a host buffer a copy reads) is held by the
queued work until it has run: every enqueue passes what it touches to
:func:`accelrt._transfer.held` and holds the result with :func:`~accelrt._transfer.hold` (one
rule for every operation, random fills and collectives included). The memory owner is
:class:`accelrt._memory_owner._Memory`; the factories live in :mod:`accelrt._factories`.

Internal API (used by ``accelrt.random`` and ``accelrt.comm``): ``Array._b`` (backend),
``Array._index`` (device index), ``Array._mem`` (the memory owner: ``ptr``, ``nbytes``,
``alloc``, ``host``), ``_host_ok()`` (host can read the memory), ``_view()`` (zero-copy numpy
view, no synchronization), ``_sync_current()``, ``_upload(host, non_blocking)`` (copy a
C-contiguous same-dtype host array in, on the current stream), ``_download()`` (synchronizing
host copy) and ``Array._wrap(mem, shape, dtype, backend, index)``.

Example::

    >>> import numpy as np
    >>> import accelrt as acc
    >>> a = acc.zeros((2, 3), dtype="int32", device="cpu:0")
    >>> a.fill_(7)
    accelrt.Array(shape=(2, 3), dtype=int32, device='cpu:0')
    >>> a.numpy().tolist()
    [[7, 7, 7], [7, 7, 7]]
    >>> b = acc.asarray(np.arange(4.0), device="cpu:0", copy=True)
    >>> b.dtype, b.nbytes
    (dtype('float64'), 32)
"""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING, Any, NoReturn, overload

import numpy as np

from . import _dlpack
from . import _sync_debug as _sd
from ._device import _device_obj, _get_device, _lazy_init
from ._array_values import ArrayValues, _int64, _number
from ._convert import cast, int_bounds
from ._errors import (
    AcceleratorError,
    AcceleratorTypeError,
    AcceleratorValueError,
    shown,
    type_shown,
)
from ._device import device as _device_cls
from ._handles import StreamHandle
from ._memory_owner import _CLOSED, _SOLE_REFS, _HostView
from ._memory_owner import _Memory as _Memory  # re-exported: random, interop, multiprocessing
from ._placement import _check_dtype as _check_dtype  # re-exported: factories, pinned memory
from ._placement import init_array, new_array
from ._size import factory_args
from ._stream import _current, _wait_raw
from ._stream_core import _instances_differ
from ._transfer import (broadcast_on_device, broadcast_runs, execute, held, hold, plan_array_copy,
                        plan_download, plan_upload)

if TYPE_CHECKING:
    from ._backend import Backend
    from ._stream import Stream
    from ._typing import DeviceLike, DTypeLike, ScalarLike, SizeLike

__all__ = ["Array", "asarray", "empty", "full", "ones", "zeros"]

_getrefcount = sys.getrefcount


# ---------------------------------------------------------------------- argument checks

def _check_flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type_shown(value)}")
    return value


def _stream_handle(b: Backend, index: int) -> StreamHandle:
    return _current(b, index)._handle


# ---------------------------------------------------------------------- the array

class Array(ArrayValues):
    """A C-contiguous block of device memory with a shape and a numpy dtype.

    ``Array(*size, dtype="float32", device=None)`` is :func:`empty`. Arrays are usually made
    with :func:`empty`, :func:`zeros`, :func:`ones`, :func:`full` or :func:`asarray`.

    Args:
        *size: the shape, as non-negative ints (``Array(2, 3)``) or one sequence of them
            (``Array((2, 3))``); ``size=`` also works.
        dtype: a numpy dtype (bool, integer, floating or complex) the device supports
            (``None``: float32, PyTorch's default dtype); keyword-only, as in PyTorch.
        device: where to allocate (keyword-only); ``None`` is the default device
            (:func:`accelrt.get_default_device`: a ``with acc.device(...)`` block, else
            :func:`accelrt.set_default_device`, else the current device of the current
            accelerator).

    Raises:
        TypeError: a wrong type (a size entry that is not an int, ints mixed with a
            sequence), or an unknown or unsupported dtype.
        ValueError: a negative dimension, or a size whose bytes overflow int64 (an
            ``AcceleratorValueError``, also a ``RuntimeError`` as in PyTorch).
        IndexError: the device index is out of range.
        OutOfMemoryError: the caching allocator could not satisfy the request.

    Example::

        >>> import accelrt as acc
        >>> a = acc.Array(2, 2, dtype="float64", device="cpu:0")
        >>> a.shape, a.ndim, a.size, a.nbytes, str(a.device)
        ((2, 2), 2, 4, 32, 'cpu:0')
    """

    __slots__ = ("__weakref__", "_b", "_dtype", "_index", "_mem", "_shape")

    _mem: _Memory
    _shape: tuple[int, ...]
    _dtype: np.dtype
    _b: Backend
    _index: int

    def __init__(self, *size: SizeLike, dtype: DTypeLike | None = "float32",
                 device: DeviceLike = None, **kw: SizeLike) -> None:
        init_array(self, *factory_args(size, kw, dtype, device, "Array"))

    @classmethod
    def _wrap(cls, mem: _Memory, shape: tuple[int, ...], dtype: np.dtype, b: Backend,
              index: int) -> Array:
        self = object.__new__(cls)
        self._mem, self._shape, self._dtype, self._b, self._index = mem, shape, dtype, b, index
        return self

    # ------------------------------------------------------------------ metadata
    @property
    def shape(self) -> tuple[int, ...]:
        """The dimensions, a tuple of ints."""
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        """The element type, a :class:`numpy.dtype`."""
        return self._dtype

    @property
    def device(self) -> _device_cls:
        """The device holding the memory, an :class:`accelrt.device` with an index."""
        return _device_obj(self._b.name, self._index)

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self._shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self._shape)

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self._dtype.itemsize

    @property
    def nbytes(self) -> int:
        """Bytes of memory the elements occupy."""
        return self._mem.nbytes

    def data_ptr(self) -> int:
        """Address of the first element (``0`` for an empty array).

        Example::

            >>> import accelrt as acc
            >>> acc.empty(4, device="cpu:0").data_ptr() != 0
            True
        """
        return self._mem.ptr

    def __repr__(self) -> str:
        closed = ", closed" if self._mem is _CLOSED else ""
        return (f"accelrt.Array(shape={self._shape}, dtype={self._dtype.name}, "
                f"device='{self._b.name}:{self._index}'{closed})")

    # ------------------------------------------------------------------ helpers
    def _host_ok(self) -> bool:
        """True if the host can read this array's memory at its address."""
        return self._mem.host or self._b.capabilities(self._index).host_accessible

    def _view(self) -> np.ndarray:
        """A zero-copy numpy view (host-accessible memory only; no synchronization)."""
        if self._mem.ptr == 0:
            return np.empty(self._shape, self._dtype)
        return np.asarray(_HostView(self._mem, self._shape, self._dtype))

    def _sync_current(self) -> None:
        b, index = self._b, self._index
        if _sd.active:
            _sd.check(b.name)
        _lazy_init(b, index)
        b.stream_synchronize(index, _stream_handle(b, index))

    def _upload(self, host: np.ndarray, non_blocking: bool, private: bool = False) -> None:
        """Copy a C-contiguous host array of the same dtype and size into this array.

        The values ``host`` has now are copied (PyTorch reads pageable host memory at call
        time), unless ``private`` says nobody else can write it; a pinned ``host`` is copied
        directly, as PyTorch copies from pinned memory (:func:`accelrt._transfer.plan_upload`
        says which)."""
        if not self._mem.nbytes:
            return
        b = self._b
        if _sd.active and not non_blocking:   # before the copy is enqueued, as PyTorch
            _sd.check(b.name)
        _lazy_init(b, self._index)
        execute(plan_upload(self, host, non_blocking, private))

    def _download(self) -> np.ndarray:
        """A host copy of the contents (synchronizing)."""
        out = np.empty(self._shape, self._dtype)
        if not self._mem.nbytes:
            return out
        b = self._b
        if _sd.active:
            _sd.check(b.name)
        _lazy_init(b, self._index)
        execute(plan_download(self, out))
        return out

    def _host_array(self) -> np.ndarray:
        """The contents on the host, synchronized: a view when possible, else a copy."""
        if self._host_ok():
            self._sync_current()
            return self._view()
        return self._download()

    # ------------------------------------------------------------------ host access
    def numpy(self, *, force: bool = False) -> np.ndarray:
        """The contents as a numpy array.

        On host-accessible backends (the CPU backend) this is a zero-copy, writable view of
        the array's memory: writes through it change the array, and the view keeps the
        memory alive after the array itself is gone. Elsewhere it is a synchronizing copy.
        Either way the current stream of the array's device is synchronized first.

        Args:
            force: accepted for PyTorch's ``Tensor.numpy(force=True)``, which copies a device
                tensor to the host where ``force=False`` refuses; accelrt copies in either case.

        Raises:
            TypeError: ``force`` is not a bool.

        Example::

            >>> import accelrt as acc
            >>> a = acc.full((3,), 2.5, device="cpu:0")
            >>> v = a.numpy(); v[0] = 1.0
            >>> a.numpy(force=True).tolist()
            [1.0, 2.5, 2.5]
        """
        _check_flag("force", force)
        return self._host_array()

    def tolist(self) -> Any:
        """The contents as (nested) Python lists (synchronizing).

        Example::

            >>> import accelrt as acc
            >>> acc.zeros(2, dtype="int8", device="cpu:0").tolist()
            [0, 0]
        """
        return self._host_array().tolist()

    def _item(self) -> Any:
        """The one element as a Python number (synchronizing), as ``Tensor.item()``."""
        if self.size != 1:
            raise AcceleratorValueError(f"a Tensor with {self.size} elements cannot be "
                                        "converted to Scalar")
        return self._host_array().reshape(()).item()

    def __len__(self) -> int:
        """The size of the first dimension, as ``len()`` of a ``torch.Tensor``.

        Raises:
            TypeError: the array is 0-d (PyTorch's "len() of a 0-d tensor").

        Example::

            >>> import accelrt as acc
            >>> len(acc.zeros((4, 2), device="cpu:0"))
            4
        """
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def __bool__(self) -> bool:
        """The truth value of a one-element array (``bool(a)``, ``if a:``), read from the
        device after synchronizing its current stream, as ``torch.Tensor.__bool__``.

        Raises:
            ValueError: the array has no element or more than one (an
                ``AcceleratorValueError``, also a ``RuntimeError``, with PyTorch's message
                "Boolean value of Tensor with ... is ambiguous"); test ``a is None`` for
                presence, ``a.size`` for emptiness.
            RuntimeError: a uint64 value beyond int64 (an ``AcceleratorValueError``:
                PyTorch reads the value through int64, "value cannot be converted to type
                int64_t without overflow").

        Example::

            >>> import accelrt as acc
            >>> bool(acc.zeros(1, device="cpu:0")), bool(acc.full((), 2.5, device="cpu:0"))
            (False, True)
        """
        n = self.size
        if n != 1:
            raise AcceleratorValueError("Boolean value of Tensor with "
                                        f"{'no values' if not n else 'more than one value'} "
                                        "is ambiguous")
        value = self._item()
        if self._dtype.kind == "u":
            _int64(value)    # torch's item() of a uint64 tensor goes through int64
        return bool(value)

    def __iter__(self) -> NoReturn:
        """Not supported: iterating a ``torch.Tensor`` yields views of its rows
        (``unbind(0)``), which write through to the tensor, and an :class:`Array` has no
        views; a copy per row would silently drop such writes. Iterate over :meth:`numpy` or
        :meth:`tolist` instead.

        Raises:
            TypeError: always: PyTorch's "iteration over a 0-d tensor" for a 0-d array, else
                what to use instead.
        """
        if not self._shape:
            raise TypeError("iteration over a 0-d tensor")
        raise TypeError(f"iteration over an accelrt.Array is not supported: PyTorch iterates "
                        f"a tensor as views of its rows, and an Array has no views; iterate "
                        f"over a.numpy() or a.tolist() (shape {self._shape})")

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """``np.asarray(array)``: :meth:`numpy` (a view where possible), honouring numpy's
        ``dtype`` and ``copy`` arguments (``copy=False`` raises if a copy is needed).

        Example::

            >>> import numpy as np
            >>> import accelrt as acc
            >>> np.asarray(acc.full(2, 1, dtype="int8", device="cpu:0"), dtype=np.float32)
            array([1., 1.], dtype=float32)
        """
        if self._host_ok() and copy is not True:
            out = self._host_array()
        elif copy is False:
            raise ValueError(f"{self.device} memory is not host-accessible, so converting "
                             "it to numpy needs a copy; pass copy=None or copy=True")
        else:
            out = self._host_array().copy() if self._host_ok() else self._download()
        if dtype is not None and np.dtype(dtype) != out.dtype:
            if copy is False:
                raise ValueError("converting to another dtype needs a copy; pass copy=None")
            out = out.astype(dtype)
        return out

    def __reduce__(self) -> tuple[Any, ...]:
        # pickling (and copy.deepcopy) carries the contents, never the raw pointer
        return (_rebuild, (np.array(self._host_array(), copy=True), str(self.device)))

    # ------------------------------------------------------------------ copies
    @overload
    def to(self, device: DeviceLike | Array = ..., non_blocking: bool = ..., *,
           dtype: DTypeLike | None = ..., copy: bool = ...) -> Array: ...
    @overload
    def to(self, dtype: np.dtype[Any] | type, /, non_blocking: bool = ..., *,
           copy: bool = ...) -> Array: ...
    def to(self, device: DeviceLike | Array | np.dtype[Any] | type = None,
           non_blocking: bool = False, *, dtype: DTypeLike | None = None,
           copy: bool = False) -> Array:
        """This array on ``device`` with ``dtype`` (``Tensor.to``): ``self`` if it is
        already both and ``copy`` is false, else a new array.

        Between devices of one backend the copy is a peer copy ordered after the current
        streams of both devices (the destination's current stream waits for it); across
        backends it is staged through host memory. A new dtype is cast as :meth:`copy_`
        casts (on the host, unchecked: PyTorch's C casts).

        Args:
            device: the destination device; ``None`` keeps the array's (as PyTorch's
                ``to(None)``, not the default device). As PyTorch's ``to(dtype)`` and
                ``to(other)``, a dtype given as a numpy dtype or a type (``np.float64``,
                ``float``) is the ``dtype``, and an :class:`Array` gives its device and dtype.
                A string always names a device.
            non_blocking: do not wait for copies that involve host memory to finish.
            dtype: the dtype of the result (``None``: the array's).
            copy: make a new array even if nothing changes.

        Raises:
            TypeError: ``non_blocking`` or ``copy`` is not a bool, a bad device or dtype type,
                or the dtype given twice.

        Example::

            >>> import accelrt as acc
            >>> import numpy as np
            >>> a = acc.full(3, 1.5, device="cpu:0")
            >>> a.to("cpu:0") is a, a.to() is a, a.to(copy=True) is a
            (True, True, False)
            >>> a.to("cpu:0", non_blocking=True).tolist()
            [1.5, 1.5, 1.5]
            >>> a.to(np.int32).tolist(), a.to(dtype="float64").dtype
            ([1, 1, 1], dtype('float64'))
        """
        if type(device) is not str and isinstance(device, _NOT_DEVICES):
            if dtype is not None:
                raise TypeError(f"to() got the dtype twice ({device!r} positionally and "
                                f"dtype={dtype!r}); pass it once")
            if isinstance(device, Array):           # to(other): its device and dtype
                dtype, device = device._dtype, device.device
            else:                                   # to(dtype): PyTorch's second form
                dtype, device = device, None
        if device is None:
            b, index = self._b, self._index
        else:
            b, index = _get_device(device, torch_parser=True)
        if non_blocking is not False:
            _check_flag("non_blocking", non_blocking)
        if copy is not False:
            _check_flag("copy", copy)
        want = self._dtype if dtype is None else _check_dtype(dtype, b, index)
        if (b is self._b and index == self._index and not copy
                and (want is self._dtype or want == self._dtype)):
            if self._mem is _CLOSED:
                self._mem.ptr   # noqa: B018 - raises ClosedError
            return self
        out = new_array(Array, self._shape, want, _device_cls(b.name, index))
        return out.copy_(self, non_blocking)

    def copy_(self, src: Any, non_blocking: bool = False) -> Array:
        """Copy ``src`` into this array and return ``self``.

        ``src`` is broadcast to this array's shape as PyTorch's ``copy_`` broadcasts it: its
        dimensions, aligned right, are each 1 or this array's (``(3,)`` or ``(2, 1)`` into
        ``(2, 3)``; a scalar into any shape). A device source is broadcast on the device by
        copies of byte runs (:func:`accelrt._transfer.broadcast_runs`), in stream order,
        unless they would take too many backend calls on memory the host cannot read (a
        column broadcast on CUDA: :func:`accelrt._transfer.broadcast_on_device`); that
        source, and a host source, one of another dtype or on another backend, is expanded
        once on the host and uploaded.

        Args:
            src: an :class:`Array` (any device, any backend) or anything numpy can convert
                (an ndarray, a nested list, a scalar), of a shape that broadcasts to this
                array's. A different dtype is cast with numpy on the host.
            non_blocking: do not wait for copies that involve host memory to finish (the
                host source is kept alive until the copy has run).

        Raises:
            TypeError: ``src`` cannot be converted to a numeric array, or ``non_blocking`` is
                not a bool.
            ValueError: ``src`` does not broadcast to this array's shape (an
                ``AcceleratorValueError``, also a ``RuntimeError`` with PyTorch's message);
                nothing is written.

        Example::

            >>> import numpy as np
            >>> import accelrt as acc
            >>> a = acc.empty((2, 2), dtype="int64", device="cpu:0")
            >>> a.copy_([[1, 2], [3, 4]]).tolist()
            [[1, 2], [3, 4]]
            >>> acc.zeros((2, 2), device="cpu:0").copy_(a).tolist()
            [[1.0, 2.0], [3.0, 4.0]]
            >>> acc.zeros((2, 3), device="cpu:0").copy_(acc.full((3,), 5.0, device="cpu:0")).tolist()
            [[5.0, 5.0, 5.0], [5.0, 5.0, 5.0]]
        """
        _check_flag("non_blocking", non_blocking)
        if isinstance(src, Array):
            if src._shape != self._shape:      # src is self: equal shapes, no check
                _check_broadcast(self._shape, src._shape)
            if src is self or (src._mem is self._mem and src._b is self._b):
                return self
            if src._dtype != self._dtype:
                self._put(src._host_array(), non_blocking)      # converted: a new array
            else:
                self._copy_from(src, non_blocking)
            return self
        host = _to_numpy(src, "copy_()")
        if host.shape != self._shape:
            _check_broadcast(self._shape, host.shape)
        self._put(host, non_blocking, isinstance(src, (list, tuple, int, float, complex)))
        return self

    def _put(self, host: np.ndarray, non_blocking: bool, owned: bool = False) -> None:
        """Upload ``host`` broadcast to this array's shape (checked by the caller) and cast to
        its dtype: expanded once on the host, then the one upload path. A non-blocking upload
        snapshots ``host`` at the call, unless the expansion or the cast made a new array or
        ``owned`` says nobody else can write ``host``."""
        data = host if host.shape == self._shape else np.broadcast_to(host, self._shape)
        data = cast(data, self._dtype)
        self._upload(data, non_blocking, private=owned or (data is not host
                                                           and data.base is None))

    def _copy_from(self, src: Array, non_blocking: bool) -> None:
        """Copy ``src``, of this array's dtype and of its shape or one that broadcasts to it
        (checked by the caller), into ``self``."""
        if not self._mem.nbytes:
            return
        if src._b is not self._b or (
                src._index != self._index and not (src._mem.host or self._mem.host)
                and not self._b.capabilities(src._index).peer_copies):
            # across backends, or two devices of a backend without memcpy_peer: through the
            # host
            self._put(src._host_array(), non_blocking)
            return
        if src._shape == self._shape:
            execute(plan_array_copy(self, src, non_blocking))
            return
        bc = broadcast_runs(self._shape, src._shape, self._dtype.itemsize)
        if broadcast_on_device(self, src, bc):
            execute(plan_array_copy(self, src, non_blocking, bc))
        else:                                             # too many runs: through the host
            self._put(src._host_array(), non_blocking)

    def fill_(self, value: ScalarLike) -> Array:
        """Set every element to ``value`` (enqueued on the current stream); return ``self``.

        Values follow PyTorch's conversion rule (``c10::checked_convert``): a value the dtype
        cannot hold is refused, not rounded or clamped, except that a negative int wraps into
        an unsigned dtype (two's complement, as in C) when its magnitude fits: ``fill_(-1)``
        on uint8 gives 255, ``fill_(-256)`` is refused. A float fills an integer dtype
        truncated toward zero when it lies in ``[min, max + 1)`` (127.9 fills int8 with 127;
        -0.5 does not fill uint8). A bool array takes any number's truth value.

        Args:
            value: a bool, int, float or complex (or a numpy scalar), or a 0-d
                :class:`Array`: on this array's device it is copied in stream order, without
                the overflow check (PyTorch's ``copy_``); elsewhere its value is read
                (synchronizing) and checked like a number.

        Raises:
            TypeError: ``value`` is not a number, or is complex with a non-zero imaginary
                part for a real dtype other than bool (then an ``AcceleratorTypeError``, also
                a ``RuntimeError`` with PyTorch's "value cannot be converted to type ...
                without overflow").
            ValueError: ``value`` does not fit in the dtype (an ``AcceleratorValueError``, also
                a ``RuntimeError``, with PyTorch's message): an int outside the integer
                dtype's range (beyond the wrap above), a float outside ``[min, max + 1)`` of
                an integer dtype, a NaN or infinity for an integer dtype, a finite value
                beyond the floating dtype's largest; or an :class:`Array` value that is not
                0-d.

        Example::

            >>> import accelrt as acc
            >>> acc.empty(3, dtype="uint16", device="cpu:0").fill_(513).tolist()
            [513, 513, 513]
            >>> acc.empty(2, dtype="uint8", device="cpu:0").fill_(-1).tolist()
            [255, 255]
        """
        if isinstance(value, Array):
            if value._shape:
                raise AcceleratorValueError(f"fill_ only supports 0-dimension value tensor but "
                                            f"got tensor with {len(value._shape)} dimensions.")
            if value._b is self._b and value._index == self._index:
                return self.copy_(value)
            value = value._item()
        scalar = _fill_scalar(value, self._dtype)
        n = self._mem.nbytes
        if not n:
            return self
        b, index = self._b, self._index
        _lazy_init(b, index)
        stream = _stream_handle(b, index)
        pattern = scalar.tobytes()
        if self._mem.host:
            self._upload(np.full(self._shape, scalar, self._dtype), True, private=True)
            return self
        if pattern.count(pattern[:1]) == len(pattern):
            b.memset(index, self._mem.ptr, pattern[0], n, stream)
        elif len(pattern) in (2, 4, 8) and b.capabilities(index).device_fill:
            b.fill(index, self._mem.ptr, pattern, self.size, stream)
        else:
            self._upload(np.full(self._shape, scalar, self._dtype), True, private=True)
            return self
        hold(b, index, stream, held(self))
        return self

    def record_stream(self, stream: Stream) -> None:
        """Mark the memory as in use by ``stream``: when the array is collected, the allocator
        reuses the block only after the work enqueued on ``stream`` so far has completed.

        ``stream`` may belong to another device of the array's backend (work there reading the
        memory peer to peer), as PyTorch's ``Tensor.record_stream`` allows: the free then
        records its event on that device.

        Raises:
            TypeError: ``stream`` is not an :class:`accelrt.Stream`.
            ValueError: ``stream`` belongs to another backend.

        Example::

            >>> import accelrt as acc
            >>> a = acc.empty(16, device="cpu:0")
            >>> s = acc.Stream("cpu:0")
            >>> a.record_stream(s)
        """
        from ._stream import Stream
        if not isinstance(stream, Stream):
            raise TypeError(f"record_stream() takes an accelrt.Stream, got "
                            f"{type_shown(stream)}")
        if stream._b is not self._b:
            why = _instances_differ(self._b, "array", stream._b, "stream")
            raise ValueError(f"record_stream(): the stream is on "
                             f"{stream._b.name}:{stream._index} but the array is on "
                             f"{self._b.name}:{self._index}"
                             + ("." + why if why else
                                "; pass a stream of the array's backend (any of its devices)"))
        mem = self._mem
        stream._check_open()
        if mem.alloc is not None and mem.ptr:
            mem.alloc.record_stream(mem.ptr, stream._handle, stream._index)

    # ------------------------------------------------------------------ lifetime
    def close(self, stream: Stream | None = None) -> None:
        """Give the memory back now instead of when the array is collected (cuda.core's
        ``Buffer.close``); idempotent.

        A block of the caching allocator is freed at once, exactly as dropping the last
        reference frees it: stream-ordered, so work already queued on its stream (and on
        streams named by :meth:`record_stream`) still reads and writes it safely, and it is
        reused only after that work. ``stream`` adds one more such stream (as
        ``record_stream(stream)`` before the close). Memory that a ``numpy()`` view or a
        DLPack export of the array still shares is freed when the last of those goes (as a
        closed ``cuda.core`` buffer's memory is); borrowed memory (:func:`asarray` without a
        copy) is released to its owner. After ``close()`` every use of the array's memory
        raises :class:`accelrt.ClosedError` (shape, dtype and device stay readable).
        ``with acc.empty(...) as a:`` closes it at the end of the block.

        Args:
            stream: a stream of the array's backend (of its device or another one) whose
                queued work still uses the memory.

        Raises:
            TypeError: ``stream`` is not an :class:`accelrt.Stream`.
            ValueError: ``stream`` belongs to another backend.

        Example::

            >>> import accelrt as acc
            >>> before = acc.memory.memory_allocated("cpu:0")
            >>> with acc.empty(1024, device="cpu:0") as a:
            ...     _ = a.fill_(1.0)
            >>> acc.memory.memory_allocated("cpu:0") == before, a.is_closed
            (True, True)
        """
        mem = self._mem
        if mem is _CLOSED:
            return
        if stream is not None:
            self.record_stream(stream)
        self._mem = _CLOSED
        if mem.alloc is not None and mem.ptr and _getrefcount(mem) <= _SOLE_REFS:
            # nothing else (numpy view, DLPack export) shares it: free it here, with the
            # blocking free (a finaliser must not block; this is an ordinary call)
            alloc, mem.alloc = mem.alloc, None
            alloc.free(mem.ptr)
        # otherwise the last of the others frees it (_Memory.__del__)

    @property
    def is_closed(self) -> bool:
        """True once :meth:`close` closed the array.

        Example::

            >>> import accelrt as acc
            >>> acc.zeros(2, device="cpu:0").is_closed
            False
        """
        return self._mem is _CLOSED

    def __enter__(self) -> Array:  # noqa: PYI034 - typing.Self needs Python 3.11
        self._mem.ptr   # noqa: B018 - raises ClosedError on a closed array
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ DLPack
    def __dlpack_device__(self) -> tuple[int, int]:
        """``(device_type, device_id)``: ``(kDLCPU, 0)`` for host-accessible memory, else
        the backend's DLPack device type and the device index.

        Example::

            >>> import accelrt as acc
            >>> acc.empty(1, device="cpu:0").__dlpack_device__()
            (1, 0)
        """
        if self._host_ok():
            return (_dlpack.kDLCPU, 0)
        return (self._b.capabilities(self._index).dlpack_device_type, self._index)

    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None,
                   read_only: bool = False) -> Any:
        """Export the array as a DLPack capsule (the array API standard protocol).

        Host-accessible memory is exported through a numpy view that keeps the memory alive,
        with no copy (``stream`` must be ``None``, or ``-1`` to skip synchronization).
        Device memory is exported with a capsule built by :mod:`accelrt._dlpack`; unless
        ``stream`` is ``-1``, the consumer's stream (a raw backend stream handle, ``None``
        meaning the default stream) is made to wait for the array's current stream.

        Args:
            stream: the consumer's stream, as the DLPack protocol defines it.
            max_version: the highest DLPack version the consumer supports; ``(1, x)`` or later
                gets a versioned capsule.
            dl_device: the device the consumer wants; ``(kDLCPU, 0)`` copies to the host.
            copy: ``True`` always copies, ``False`` never does, ``None`` copies only if
                needed.
            read_only: flag the exported memory read-only (DLPack's
                ``DLPACK_FLAG_BITMASK_READ_ONLY``; the consumer must not write to it), as
                torch 2.15's ``Tensor.__dlpack__(read_only=True)``; needs a versioned capsule
                (``max_version`` ``(1, 0)`` or later).

        Raises:
            TypeError: an argument of the wrong type (``stream`` not an int or None,
                ``max_version`` or ``dl_device`` not a tuple of two ints, ``copy`` not a bool
                or None, ``read_only`` not a bool).
            BufferError: the export is impossible as asked (e.g. ``copy=False`` to another
                device, an unsupported ``dl_device``, a ``stream`` other than ``None`` and
                ``-1`` for host memory, or ``read_only`` with a legacy capsule). A
                ``dl_device`` whose type is neither the array's nor the host's is refused
                with torch 2.15's words first: "Unsupported device_type: N".

        Example::

            >>> import numpy as np
            >>> import accelrt as acc
            >>> a = acc.full((2,), 3, dtype="int32", device="cpu:0")
            >>> v = np.from_dlpack(a)
            >>> v.tolist(), v.ctypes.data == a.data_ptr()
            ([3, 3], True)
        """
        _check_dlpack_args(stream, max_version, dl_device, copy)
        _check_flag("read_only", read_only)
        if read_only and (max_version is None or max_version[0] < 1):
            raise BufferError("read_only export requires the versioned DLPack protocol; pass "
                              "max_version=(1, 0) or higher")
        own = self.__dlpack_device__()
        if dl_device is not None and tuple(dl_device) != own:
            host = (_dlpack.kDLCPU, 0)
            if tuple(dl_device) != host:
                where = f"{host} (the host)" if own == host else f"{own} or the host {host}"
                # torch's words first when the device type itself is not one it can go to
                kind = (f"Unsupported device_type: {dl_device[0]}: "
                        if dl_device[0] not in (own[0], host[0]) else "")
                raise BufferError(f"{kind}cannot export {self.device} memory to DLPack device "
                                  f"{tuple(dl_device)}; it can go to {where}")
            if copy is False:
                raise BufferError(f"exporting {self.device} memory to the host needs a copy; "
                                  "pass copy=None or copy=True")
            return _dlpack.numpy_capsule(self._download(), max_version, None, read_only,
                                         copied=True)
        if self._host_ok():
            if stream is not None and stream != -1:
                raise BufferError(f"stream must be None (or -1) for host memory, got "
                                  f"{shown(stream)}")
            if stream is None:
                self._sync_current()
            return _dlpack.numpy_capsule(self._view(), max_version, copy, read_only)
        return self._device_capsule(stream, max_version, copy, read_only)

    def _device_capsule(self, stream: Any, max_version: tuple[int, int] | None,
                        copy: bool | None, read_only: bool) -> Any:
        """DLPack capsule of device memory (non-host-accessible backends), made by
        :func:`accelrt._dlpack.make_capsule`."""
        src = self
        if copy:
            src = new_array(Array, self._shape, self._dtype, self.device)
            src._copy_from(self, non_blocking=False)
        b, index = self._b, self._index
        _lazy_init(b, index)
        if stream != -1:
            consumer = b.default_stream(index) if stream is None else StreamHandle(stream)
            _wait_raw(b, index, consumer, index, _stream_handle(b, index))
        versioned = max_version is not None and int(max_version[0]) >= 1
        if copy and not versioned:
            copy = None
        return _dlpack.make_capsule(src._mem.ptr, src._shape, src._dtype,
                                    src.__dlpack_device__(), owner=src._mem,
                                    versioned=versioned, read_only=read_only,
                                    copied=bool(copy))

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """CUDA Array Interface (version 3) of arrays on the ``cuda`` backend, from
        :func:`accelrt.interop.cuda_array_interface` (``stream`` is the current stream, ``1``
        for the legacy default one); other backends have no such attribute."""
        if self._mem.host or not self._b.capabilities(self._index).cuda_array_interface:
            raise AttributeError(f"__cuda_array_interface__ exists only for cuda arrays; "
                                 f"this array is on {self.device}")
        from .interop._cai import cuda_array_interface
        return cuda_array_interface(self)


#: What ``Array.to``'s first argument may be besides a device: a dtype or another array
_NOT_DEVICES = (np.dtype, type, Array)


def _check_broadcast(dst: tuple[int, ...], src: tuple[int, ...]) -> None:
    """PyTorch's shape rule of ``copy_`` (its ``TensorIterator``): the broadcast of ``dst``
    and ``src`` (``infer_size``) must exist and be ``dst``; else an ``AcceleratorValueError``
    (a ``RuntimeError``, as PyTorch raises) with PyTorch's message."""
    n = max(len(dst), len(src))
    a = (1,) * (n - len(dst)) + dst
    b = (1,) * (n - len(src)) + src
    for i in range(n - 1, -1, -1):       # infer_size reports the last mismatch first
        if a[i] != b[i] and a[i] != 1 and b[i] != 1:
            raise _no_broadcast(f"The size of tensor a ({a[i]}) must match the size of tensor "
                                f"b ({b[i]}) at non-singleton dimension {i}", dst, src)
    shape = tuple(y if x == 1 else x for x, y in zip(a, b))
    if shape != dst:
        raise _no_broadcast(f"output with shape {list(dst)} doesn't match the broadcast shape "
                            f"{list(shape)}", dst, src)


def _no_broadcast(torch_text: str, dst: tuple[int, ...],
                  src: tuple[int, ...]) -> AcceleratorValueError:
    return AcceleratorValueError(f"{torch_text} (copy_(): shape mismatch: destination has shape "
                                 f"{dst} but source has shape {src}, which does not broadcast "
                                 "to it: each source dimension, aligned right, must be 1 or "
                                 "the destination's)")


def _rebuild(host: np.ndarray, device: str) -> Array:
    """Unpickle an :class:`Array`: a copy of ``host`` on ``device``."""
    return asarray(host, device=device, copy=True)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_dlpack_args(stream: Any, max_version: Any, dl_device: Any, copy: Any) -> None:
    """``TypeError`` for a ``__dlpack__`` argument of the wrong type (the array API's types)."""
    if stream is not None and not _is_int(stream):
        raise TypeError(f"stream must be an int or None, got {type_shown(stream)}")
    for name, value in (("max_version", max_version), ("dl_device", dl_device)):
        if value is not None and not (isinstance(value, tuple) and len(value) == 2
                                      and all(_is_int(v) for v in value)):
            raise TypeError(f"{name} must be a tuple of two ints or None, got {shown(value)}")
    if copy is not None and not isinstance(copy, bool):
        raise TypeError(f"copy must be a bool or None, got {type_shown(copy)}")


def _to_numpy(obj: Any, what: str) -> np.ndarray:
    try:
        host = np.asarray(obj)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} expects an accelrt.Array or an object numpy can convert to "
                        f"a numeric array, got {type_shown(obj)}: {exc}") from None
    if host.dtype.kind not in "biufc":
        raise TypeError(f"{what} expects numeric data, got {type_shown(obj)} that numpy "
                        f"converts to dtype {host.dtype}")
    return host


#: The C++ type names of PyTorch's overflow message (``c10::Scalar``'s accessors)
_CTYPES = {"uint8": "uint8_t", "int8": "int8_t", "int16": "int16_t", "int32": "int",
           "int64": "int64_t", "uint16": "uint16_t", "uint32": "uint32_t",
           "uint64": "uint64_t", "float16": "c10::Half", "float32": "float",
           "float64": "double", "complex64": "c10::complex<float>",
           "complex128": "c10::complex<double>"}

def _overflow(dt: np.dtype, why: str,
              error: type[AcceleratorError] = AcceleratorValueError) -> AcceleratorError:
    """Why a value does not fill ``dt``, then PyTorch's ``report_overflow`` message."""
    return error(f"{why}; value cannot be converted to type {_CTYPES.get(dt.name, dt.name)} "
                 "without overflow")


def _fill_scalar(value: Any, dt: np.dtype) -> np.ndarray:
    """``value`` as a 0-d array of ``dt`` by PyTorch's rule for ``fill_``/``full``
    (``c10::checked_convert``, ``c10::overflows``, torch >= 2.14):

    * bool arrays take any number's truth value (PyTorch never checks a conversion to bool);
    * a complex value fills a real dtype only with a zero imaginary part;
    * an int fills an integer dtype in its range; a negative int also fills an unsigned dtype
      when its magnitude is at most the dtype's largest value, wrapping in two's complement
      (``-1`` -> 255 for uint8), as C's conversion from int64 does;
    * a float fills an integer dtype when ``min <= value < max + 1`` (the bound exact in
      floating point), truncated toward zero; NaN and infinity never do;
    * a floating or complex dtype takes infinities and NaN, and finite values up to its
      largest (each part of a complex value).

    Python ints beyond int64 (PyTorch cannot parse them) are checked the same way, except
    that those below int64's minimum never wrap."""
    value = _number(value)
    kind = dt.kind
    if kind == "b" or isinstance(value, bool):
        return np.array(bool(value) if kind == "b" else value, dtype=dt)
    if isinstance(value, complex) and kind != "c":
        if value.imag != 0:     # nan too
            raise _overflow(dt, f"cannot fill a {dt.name} array with the complex value "
                            f"{value!r} (use a complex dtype)", AcceleratorTypeError)
        value = value.real
    if kind in "iu":
        lowest, highest, upper = int_bounds(dt)
        least = lowest if kind == "i" else 0
        if isinstance(value, float):
            if not math.isfinite(value):
                raise _overflow(dt, f"cannot fill a {dt.name} array with {value!r}")
            if not least <= value < upper:
                raise _overflow(dt, f"fill value {value!r} does not fit in {dt.name} "
                                f"(floats in [{least}, {upper}) do)")
            value = int(value)
        elif kind == "u" and value < 0:
            if value < lowest:
                raise _overflow(dt, f"fill value {shown(value)} does not fit in {dt.name} (range "
                                f"0..{highest}; negative ints down to {lowest} wrap)")
            value += 1 << (8 * dt.itemsize)              # two's complement
        elif not least <= value <= highest:
            raise _overflow(dt, f"fill value {shown(value)} does not fit in {dt.name} (range "
                            f"{least}..{highest})")
    else:
        top = float(np.finfo(dt).max)
        for part in (value.real, value.imag) if isinstance(value, complex) else (value,):
            if isinstance(part, float):     # inf and nan fill a floating array
                big = math.isfinite(part) and abs(part) > top
            else:
                try:
                    big = abs(float(part)) > top
                except OverflowError:       # an int beyond float64
                    big = True
            if big:
                raise _overflow(dt, f"fill value {shown(value)} overflows {dt.name} (largest "
                                f"finite value {top!r})")
    with np.errstate(over="ignore", invalid="ignore"):
        return np.array(value, dtype=dt)


# the factories make Arrays: imported last, so that they can import Array from here
from ._factories import asarray, empty, full, ones, zeros  # noqa: E402
