"""``accelrt.comm``: single-process collectives across the devices of one process.

The functions of ``torch.cuda.comm`` (``torch.nn.parallel.comm``) with its argument rules,
for any backend: :func:`broadcast`, :func:`broadcast_coalesced`, :func:`reduce_add`,
:func:`reduce_add_coalesced`, :func:`scatter`, :func:`gather`, plus
:func:`can_device_access_peer`.

Copies between devices of one backend are peer copies (``memcpy_peer``) on the source
device's current stream, ordered with events both ways against the destination's current
stream (PyTorch's cross-device ``copy_``); they never block the host. Copies that involve plain
host memory (numpy arrays) or cross backends are synchronous. See ``docs/comm.md``.

Devices: an ``int`` is an index on the backend of the arrays involved (``reduce_add`` and
``gather``: of the inputs; ``broadcast``/``scatter``: of the source array, or the current
accelerator for a numpy source); strings (``"cpu:1"``) and :class:`accelrt.device` name their
own backend. Argument errors raise what PyTorch raises, with its messages ("tensor" reads
"array"): where PyTorch raises ``RuntimeError`` the exception is a ``RuntimeError`` that is also
a ``ValueError`` or ``TypeError`` (``accelrt._errors.AcceleratorValueError`` /
``AcceleratorTypeError``). Differences from PyTorch: dtypes are never converted; outputs
are new arrays except where PyTorch returns the input itself (``broadcast`` to the source's
own device, ``reduce_add`` of one input) — a ``scatter`` chunk for the source's device is a
copy, not a view.

Example::

    >>> import numpy as np
    >>> import accelrt as acc
    >>> a = acc.asarray(np.arange(6.0).reshape(3, 2), device="cpu:0", copy=True)
    >>> [x.tolist() for x in acc.comm.scatter(a, devices=[0, 0], dim=0)]
    [[[0.0, 1.0], [2.0, 3.0]], [[4.0, 5.0]]]
    >>> acc.comm.reduce_add([a, a], destination=0).tolist()
    [[0.0, 2.0], [4.0, 6.0], [8.0, 10.0]]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

import numpy as np

from .._errors import AcceleratorTypeError, AcceleratorValueError, shown, type_shown
from .._stream import Stream
from . import _args, _arrays, _coalesce, _reduce
from ._arrays import (
    Info,
    copy_region,
    describe,
    info_of_new,
    new_array,
    shape_str,
    whole,
)
from .._transfer import Place

if TYPE_CHECKING:
    from .._array import Array
    from .._typing import DeviceLike, DeviceSpec, HostArray

_OutT = TypeVar("_OutT", "Array", "HostArray")

__all__ = [
    "broadcast",
    "broadcast_coalesced",
    "can_device_access_peer",
    "gather",
    "reduce_add",
    "reduce_add_coalesced",
    "scatter",
]

_DEFAULT_BUFFER = 10485760


def _seq(obj: Any, what: str) -> list[Any]:
    """A list from a sequence/iterable argument (TypeError for a single array or string)."""
    if _arrays.is_array(obj) or isinstance(obj, (np.ndarray, str, bytes)) or not isinstance(
            obj, Iterable):
        raise TypeError(f"'{what}' must be a sequence of arrays, got {type_shown(obj)}")
    return list(obj)


def _not_device_array(all_of: str, one: str, i: int, obj: Any) -> AcceleratorTypeError:
    """torch.cuda.comm's "Expected all output tensors to be CUDA tensors, but output tensor at
    index 1 has device 'cpu'", for arrays: ``obj`` (at index ``i``) is no accelrt array. A
    numpy array's device is the host; another object's is its ``device`` attribute, if any."""
    if isinstance(obj, np.ndarray):
        where = "host"
    else:
        dev = getattr(obj, "device", None)
        where = "none" if dev is None or callable(dev) else str(dev)
    kind = type(obj)
    name = kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__name__}"
    return AcceleratorTypeError(
        f"Expected all {all_of} to be accelrt arrays, but {one} at index {i} has device "
        f"'{where}' (a {name}; pass an accelrt.Array on a device)")


class _NoDevicesError(AcceleratorValueError, TypeError):
    """``scatter`` with neither ``devices`` nor ``out``: torch's ``TypeError`` (its Python
    iterates over ``devices=None``), also the ``RuntimeError``/``ValueError`` accelrt raised."""


class _NoInputsError(AcceleratorValueError, IndexError):
    """``reduce_add([])``: torch's ``IndexError`` (its Python reads ``inputs[0]``), also the
    ``RuntimeError``/``ValueError`` accelrt raised, with a message that says what is wrong."""


class _HostInputError(TypeError, AssertionError):
    """A ``reduce_add`` input in host memory (a numpy array): torch's ``AssertionError`` for a
    CPU tensor, also the ``TypeError`` accelrt raised."""


def _refuse_host_input(obj: Any, i: int) -> None:
    """torch's "reduce_add expects all inputs to be on GPUs, but input 0 is on CPU", for a
    numpy array (host memory, a CPU tensor's counterpart) at index ``i``."""
    if isinstance(obj, np.ndarray):
        raise _HostInputError(
            f"reduce_add expects all inputs to be on devices, but input {i} is on the host "
            f"(a numpy.ndarray, not an accelrt.Array); copy it to a device first, e.g. "
            f"acc.asarray(x, device='cpu:0')")


def _check_same(ref: Info, x: Info, what: str, i: int) -> None:
    if x.dtype != ref.dtype:
        raise AcceleratorValueError(
            f"Expected all {what} to have dtype {ref.dtype.name}, but {what[:-1]} "
            f"at index {i} has dtype {x.dtype.name} (comm never converts dtypes)")


# ---------------------------------------------------------------------- peer access

def can_device_access_peer(device: DeviceLike, peer_device: DeviceLike) -> bool:
    """True if ``device`` can directly access memory of ``peer_device``.

    Args:
        device: a device (``"cpu:0"``, an :class:`accelrt.device`, or an int on the current
            accelerator).
        peer_device: the device whose memory would be accessed, of the same backend.

    Raises:
        ValueError: the two devices belong to different backends.
        IndexError: an index is out of range.

    Example::

        >>> import accelrt as acc
        >>> acc.can_device_access_peer("cpu:0", "cpu:0")
        True
    """
    a = _args.one_device(device, None, "device", optional=True)
    p = _args.one_device(peer_device, a.backend, "peer_device", optional=True)
    if a.backend is not p.backend:
        assert a.backend is not None and p.backend is not None
        raise AcceleratorValueError(
            f"device {a} and peer_device {p} belong to different backends "
            f"({a.backend.name!r} and {p.backend.name!r}); peer access is between "
            "devices of one backend")
    assert a.backend is not None
    return bool(a.backend.can_access_peer(a.index, p.index))


# ---------------------------------------------------------------------- broadcast

def broadcast(tensor: Array | HostArray, devices: Iterable[DeviceSpec] | None = None, *,
              out: Sequence[Array] | None = None) -> tuple[Array, ...]:
    """Copy ``tensor`` (an array; torch's parameter name) to several devices.

    Args:
        tensor: the array to broadcast: an :class:`accelrt.Array` on any device, or a numpy
            array (host memory).
        devices: the destination devices. For the source array's own device, the result is
            ``tensor`` itself (no copy), as in PyTorch.
        out: keyword-only; arrays to copy into (same shape and dtype as ``tensor``).

    Exactly one of ``devices`` and ``out`` must be given.

    Returns:
        A tuple with one array per device (or the ``out`` arrays, filled).

    Raises:
        TypeError: wrong argument types.
        ValueError: both or neither of ``devices``/``out``; a shape or dtype mismatch with
            ``out``.

    An empty ``devices`` or ``out`` gives ``()``, as PyTorch's.
        IndexError: a device index is out of range.

    Example::

        >>> import accelrt as acc
        >>> a = acc.full((2,), 7, dtype="int32", device="cpu:0")
        >>> [x.tolist() for x in acc.comm.broadcast(a, devices=["cpu:0", 0])]
        [[7, 7], [7, 7]]
    """
    if (devices is None) == (out is None):
        raise AcceleratorValueError(
            f"Exactly one of 'devices' and 'out' must be specified, but got "
            f"devices={devices!r} and out={out!r}")
    src = describe(tensor, "the array to broadcast", host_ok=True)
    if devices is not None:
        places = _args.device_list(devices, src.place.backend)
        results: list[Any] = []   # no devices: no copies, as PyTorch's (an empty tuple)
        for p in places:
            if p == src.place and src.place.backend is not None:
                results.append(tensor)
                continue
            dst = info_of_new(new_array(p, src.shape, src.dtype))
            whole(dst, src)
            results.append(dst.obj)
        return tuple(results)
    outs = _seq(out, "out")   # empty: nothing to fill, as PyTorch's (an empty tuple)
    infos = []
    for i, o in enumerate(outs):
        if not _arrays.is_array(o):
            raise _not_device_array("output arrays", "output array", i, o)
        x = describe(o, "output", i)
        if x.shape != src.shape:
            raise AcceleratorValueError(
                f"Expected all output arrays to have same shape as the source "
                f"array {shape_str(src.shape)}, but output array at index {i} has "
                f"shape {shape_str(x.shape)}")
        if x.dtype != src.dtype:
            raise AcceleratorValueError(
                f"Expected all output arrays to have the source's dtype "
                f"{src.dtype.name}, but output array at index {i} has dtype "
                f"{x.dtype.name} (comm never converts dtypes)")
        infos.append(x)
    for x in infos:
        if x.ptr != src.ptr or x.mem != src.mem:
            whole(x, src)
    return tuple(outs)


def broadcast_coalesced(tensors: Sequence[Array], devices: Iterable[DeviceSpec],
                        buffer_size: int = _DEFAULT_BUFFER) -> list[list[Array]]:
    """Broadcast several arrays to several devices, coalescing small ones.

    Arrays of one dtype are packed into flat buffers of at most ``buffer_size`` bytes, each
    buffer is broadcast as one array (one peer copy per device instead of one per array), and
    split again on every destination.

    Args:
        tensors: arrays, all on ``devices[0]`` (torch's parameter name).
        devices: the destination devices; ``devices[0]`` must be where ``tensors`` are.
        buffer_size: the largest flat buffer in bytes.

    Returns:
        A list with, per device, a list of arrays in the order of ``tensors``; the first entry
        is ``tensors`` itself.

    Raises:
        TypeError: wrong argument types.
        ValueError: no devices; an array not on ``devices[0]``; a bad ``buffer_size``.

    Example::

        >>> import accelrt as acc
        >>> xs = [acc.full((2,), 1.0, device="cpu:0"), acc.full((3,), 2, dtype="int8",
        ...       device="cpu:0")]
        >>> outs = acc.comm.broadcast_coalesced(xs, ["cpu:0", "cpu:0"])
        >>> [[x.tolist() for x in row] for row in outs]
        [[[1.0, 1.0], [2, 2, 2]], [[1.0, 1.0], [2, 2, 2]]]
    """
    items = _seq(tensors, "tensors")
    buffer_size = _args.check_buffer_size(buffer_size)
    infos = [describe(a, "array", i) for i, a in enumerate(items)]
    default = infos[0].place.backend if infos else None
    places = _args.device_list(devices, default)
    if not places:
        raise AcceleratorValueError(
            "Expected at least one device to broadcast to, but 'devices' is empty")
    root = places[0]
    for i, x in enumerate(infos):
        if x.place != root:
            raise AcceleratorValueError(
                f"All arrays must be on devices[0] ({root}), but array at index "
                f"{i} is on {x.place}")
    outputs: list[list[Any]] = [list(items)] + [[None] * len(items) for _ in places[1:]]
    for chunk in _coalesce.take_chunks([(x.dtype, x.nbytes) for x in infos], buffer_size):
        parts = [infos[i] for i in chunk]
        flat = parts[0] if len(parts) == 1 else _coalesce.flatten(parts, root)
        for k, p in enumerate(places[1:], start=1):
            dst = info_of_new(new_array(p, flat.shape, flat.dtype))
            whole(dst, flat)
            pieces = [dst.obj] if len(parts) == 1 else _coalesce.unflatten(dst, parts)
            for i, piece in zip(chunk, pieces):
                outputs[k][i] = piece
    return outputs


# ---------------------------------------------------------------------- reduce

def _reduce_inputs(inputs: Any, what: str = "inputs") -> list[Info]:
    items = _seq(inputs, what)
    if not items:
        raise _NoInputsError(
            f"Expected at least one input to reduce_add, but '{what}' is empty")
    for i, a in enumerate(items):
        _refuse_host_input(a, i)
    infos = [describe(a, "input", i) for i, a in enumerate(items)]
    b = infos[0].place.backend
    for i, x in enumerate(infos):
        if x.place.backend is not b:
            raise AcceleratorValueError(f"reduce_add expects all inputs on devices of one backend "
                                        f"({infos[0].place}), but input {i} is on {x.place}")
    return infos


def _sum_infos(infos: Sequence[Info], destination: Any) -> Any:
    """PyTorch's ``reduce_add`` checks and sum over described inputs."""
    dest = _args.one_device(destination, infos[0].place.backend, "destination",
                            optional=True)
    size = infos[0].shape
    root_index = None
    for i, x in enumerate(infos):
        if x.place == dest:
            root_index = i
        if x.shape != size:
            got = "x".join(str(s) for s in x.shape)
            expected = "x".join(str(s) for s in size)
            raise ValueError(f"input {i} has invalid size: got {got}, but expected {expected}")
        _check_same(infos[0], x, "inputs", i)
    if root_index is None:
        raise AcceleratorValueError(
            f"reduce_add expects destination to be on the same device with one of the "
            f"arrays (destination: {dest}); copy one input there first or pick such a "
            "destination")
    if len(infos) == 1:
        return infos[0].obj
    root = infos[root_index]
    others = [x for i, x in enumerate(infos) if i != root_index]
    return _reduce.sum_into(dest, root, others)


def reduce_add(inputs: Sequence[Array], destination: DeviceLike = None) -> Array:
    """Sum arrays that live on several devices; the sum is placed on ``destination``.

    Args:
        inputs: arrays of one backend with the same shape and dtype.
        destination: the device of the result; it must hold one of the inputs (PyTorch's
            rule). Default: the current device of the inputs' backend.

    Returns:
        A new array on ``destination`` (``inputs[0]`` itself when there is one input).

    Raises:
        TypeError: wrong argument types.
        ValueError: mismatched shapes or dtypes; inputs on several backends; no input on
            ``destination``.
        IndexError: no inputs (torch's class; also a ``ValueError``).
        AssertionError: an input in host memory (a numpy array), torch's class for a CPU
            tensor; it is a ``TypeError`` too.

    .. note:: On host-accessible backends (the CPU backend) numpy does the sum, enqueued on
        the destination's current stream; elsewhere a backend kernel
        (``elementwise_add``) when the backend has one, else a synchronous host staging sum.

    Example::

        >>> import accelrt as acc
        >>> xs = [acc.full((2,), v, dtype="int64", device="cpu:0") for v in (1, 2, 3)]
        >>> acc.comm.reduce_add(xs, destination="cpu:0").tolist()
        [6, 6]
    """
    result: Array = _sum_infos(_reduce_inputs(inputs), destination)
    return result


def reduce_add_coalesced(inputs: Sequence[Sequence[Array]], destination: DeviceLike = None,
                         buffer_size: int = _DEFAULT_BUFFER) -> tuple[Array, ...]:
    """Sum lists of arrays across devices, coalescing small arrays into flat buffers.

    Args:
        inputs: one list of arrays per device; the lists have the same length and the arrays
            at each position have the same shape and dtype.
        destination: the device of the results (must hold one of the lists); default the
            current device.
        buffer_size: the largest flat buffer in bytes.

    Returns:
        A tuple of sums, one per position, on ``destination``.

    Raises:
        TypeError: wrong argument types.
        ValueError: lists of different lengths; mismatched shapes or dtypes.
        AssertionError: an input in host memory (a numpy array), torch's class for a CPU
            tensor; it is a ``TypeError`` too.

    No lists (``inputs=[]``) give ``()``, as PyTorch's.

    Example::

        >>> import accelrt as acc
        >>> per_dev = [[acc.full((2,), 1.0, device="cpu:0"), acc.full(3, 5, dtype="int32",
        ...             device="cpu:0")] for _ in range(2)]
        >>> [x.tolist() for x in acc.comm.reduce_add_coalesced(per_dev, destination=0)]
        [[2.0, 2.0], [10, 10, 10]]
    """
    groups = _seq(inputs, "inputs")
    buffer_size = _args.check_buffer_size(buffer_size)
    if not groups:
        return ()   # no device lists: no sums, as PyTorch's
    seqs = [_seq(grp, f"inputs[{g}]") for g, grp in enumerate(groups)]
    for g, seq in enumerate(seqs):
        for a in seq:
            _refuse_host_input(a, g)   # torch reduces device g's flat buffer: its input g
    lists = [[describe(a, f"inputs[{g}] entry", i) for i, a in enumerate(seq)]
             for g, seq in enumerate(seqs)]
    n = len(lists[0])
    for g, lst in enumerate(lists):
        if len(lst) != n:
            raise AcceleratorValueError(
                f"Expected every device's list to hold the same number of arrays, "
                f"but inputs[0] has {n} and inputs[{g}] has {len(lst)}")
        for i, x in enumerate(lst):
            ref = lists[0][i]
            if x.shape != ref.shape or x.dtype != ref.dtype:
                raise AcceleratorValueError(
                    f"inputs[{g}][{i}] has shape {shape_str(x.shape)} and dtype "
                    f"{x.dtype.name}, but inputs[0][{i}] has shape "
                    f"{shape_str(ref.shape)} and dtype {ref.dtype.name}")
    b = lists[0][0].place.backend if n else None
    for g, lst in enumerate(lists):
        for x in lst:
            if x.place.backend is not b:
                raise AcceleratorValueError(
                    f"reduce_add expects all inputs on devices of one backend, "
                    f"but inputs[{g}] has an array on {x.place}")
    results: list[Any] = [None] * n
    for chunk in _coalesce.take_chunks([(x.dtype, x.nbytes) for x in lists[0]], buffer_size):
        if len(chunk) == 1:
            flats = [lst[chunk[0]] for lst in lists]
        else:
            flats = [_coalesce.flatten([lst[i] for i in chunk], lst[chunk[0]].place)
                     for lst in lists]
        summed = _sum_infos(flats, destination)
        if len(chunk) == 1:
            results[chunk[0]] = summed
            continue
        pieces = _coalesce.unflatten(info_of_new(summed), [lists[0][i] for i in chunk])
        for i, piece in zip(chunk, pieces):
            results[i] = piece
    return tuple(results)


# ---------------------------------------------------------------------- scatter / gather

def _chunk_sizes(size: int, n: int) -> list[int]:
    """``torch.chunk``'s sizes: ``ceil(size / n)`` each, the last smaller, maybe fewer than
    ``n`` chunks (``n`` empty chunks for an empty dimension)."""
    if size == 0:
        return [0] * n
    step = -(-size // n)
    return [min(step, size - s) for s in range(0, size, step)]


def _check_streams(streams: Any, places: Sequence[Place],
                   same: Place | None = None) -> list[Stream | None]:
    """The per-piece streams (``None``: the device's current one), checked against
    ``places``; a stream of another device at a piece whose place is ``same`` is not an
    error there (it is ignored)."""
    if streams is None:
        return [None] * len(places)
    if isinstance(streams, (Stream, str, bytes)) or not isinstance(streams, Iterable):
        raise TypeError(f"streams must be a sequence of accelrt.Stream (or None) entries, got "
                        f"{type_shown(streams)}")
    lst = list(streams)
    out: list[Stream | None] = []
    for i, p in enumerate(places):
        s = lst[i] if i < len(lst) else None
        if s is None:
            out.append(None)
            continue
        if not isinstance(s, Stream):
            raise TypeError(f"streams[{i}] must be an accelrt.Stream or None, got "
                            f"{type_shown(s)}")
        s._check_open()
        if s._b is not p.backend or s._index != p.index:
            if p == same:
                out.append(None)
                continue
            raise AcceleratorValueError(
                f"Expected the device associated with the stream at index {i} "
                f"(was {s._b.name}:{s._index}) to match the device supplied at "
                f"that index (expected {p})")
        out.append(s)
    return out


def scatter(tensor: Array | HostArray, devices: Iterable[DeviceSpec] | None = None,
            chunk_sizes: Sequence[int] | None = None, dim: int = 0,
            streams: Sequence[Stream | None] | None = None, *,
            out: Sequence[Array] | None = None) -> tuple[Array, ...]:
    """Split ``tensor`` (an array; torch's parameter name) along ``dim`` and copy the pieces to
    several devices.

    Args:
        tensor: an :class:`accelrt.Array` on any device, or a numpy array (host memory).
        devices: the destination devices.
        chunk_sizes: the size of each piece along ``dim`` (one per device, summing to
            ``tensor.shape[dim]``); default: ``torch.chunk``'s equal pieces, which gives fewer
            pieces than devices when ``tensor.shape[dim] < len(devices)`` (or not divisible
            that way), exactly as PyTorch.
        dim: the dimension to split (negative counts from the end).
        streams: optional per-piece streams of the destination devices; a piece is allocated
            and made ready on its stream instead of the device's current stream. With
            ``devices``, a stream of another device at a piece on the source's own device is
            ignored, as torch's (that piece does not move there).
        out: keyword-only; arrays to copy the pieces into; their sizes along ``dim`` give the
            split and must sum to ``tensor.shape[dim]``.

    Exactly one of ``devices`` and ``out`` must be given; ``chunk_sizes`` only with
    ``devices``.

    Returns:
        A tuple of the pieces (or the ``out`` arrays, filled).

    Raises:
        TypeError: wrong argument types; neither ``devices`` nor ``out`` (torch's class, also
            a ``ValueError``).
        ValueError: conflicting arguments, chunk sizes that do not sum to the dimension, a
            negative size (torch 2.15's ``split_with_sizes`` messages), wrong ``out`` shapes
            or dtypes, a stream on the wrong device.
        IndexError: ``dim`` or a device index out of range.

    Example::

        >>> import numpy as np
        >>> import accelrt as acc
        >>> a = acc.asarray(np.arange(4).reshape(2, 2), device="cpu:0", copy=True)
        >>> [x.tolist() for x in acc.comm.scatter(a, ["cpu:0", "cpu:0"], dim=1)]
        [[[0], [2]], [[1], [3]]]
    """
    src = describe(tensor, "the array to scatter", host_ok=True)
    if out is None:
        if devices is None:
            # torch iterates over devices=None: a TypeError ("'NoneType' object is not
            # iterable"); this one is a RuntimeError and a ValueError too, as it was
            raise _NoDevicesError(
                "Exactly one of 'devices' and 'out' must be specified, but got "
                "devices=None and out=None")
        places = _args.device_list(devices, src.place.backend)
        if not places:
            raise AcceleratorValueError(
                "Expected at least one device to scatter to, but 'devices' is "
                "empty")
        d = _scatter_dim(src, dim)
        sizes = _scatter_sizes(src.shape[d], places, chunk_sizes, d)
        # torch 2.15's comm.cpp scatter checks (and uses) a piece's stream only when the
        # piece moves: a piece on the source's own device is a view there, its stream unread
        strm = _check_streams(streams, places[:len(sizes)], same=src.place)
        pieces = []
        start = 0
        for p, n, s in zip(places, sizes, strm):
            shape = src.shape[:d] + (n,) + src.shape[d + 1:]
            dst = info_of_new(new_array(p, shape, src.dtype, s))
            copy_region(dst, 0, src, start, n, d, stream=s)
            pieces.append(dst.obj)
            start += n
        return tuple(pieces)

    if devices is not None:
        raise AcceleratorValueError(
            f"'devices' must not be specified when 'out' is specified, but got "
            f"devices={devices!r}")
    if chunk_sizes is not None:
        raise AcceleratorValueError(
            f"'chunk_sizes' must not be specified when 'out' is specified, but "
            f"got chunk_sizes={chunk_sizes!r}")
    outs = _seq(out, "out")
    if not outs:
        raise AcceleratorValueError(
            "Expected at least one output array to scatter to, but 'out' is empty")
    d = _scatter_dim(src, dim)
    infos = _scatter_outputs(src, outs, d)
    strm = _check_streams(streams, [x.place for x in infos])
    start = 0
    for x, s in zip(infos, strm):
        copy_region(x, 0, src, start, x.shape[d], d, stream=s)
        start += x.shape[d]
    return tuple(outs)


def _scatter_dim(src: Info, dim: int) -> int:
    """``dim`` of ``src`` wrapped, or PyTorch's error for a 0-d array."""
    if not src.shape:
        raise AcceleratorValueError(
            "chunk expects at least a 1-dimensional array (scatter splits along a "
            "dimension; a 0-d array has none)")
    return _args.wrap_dim(dim, len(src.shape))


def _scatter_sizes(size: int, places: Sequence[Place],
                   chunk_sizes: Sequence[int] | None, dim: int) -> list[int]:
    """The checked ``chunk_sizes`` for ``places`` (default: ``torch.chunk``'s), split along
    ``dim`` of size ``size``; the errors are torch 2.15's ``split_with_sizes``'s."""
    if chunk_sizes is None:
        return _chunk_sizes(size, len(places))
    sizes = _args.int_list(chunk_sizes, "chunk_sizes")
    if len(sizes) != len(places):
        raise AcceleratorValueError(
            f"Expected devices and chunk_sizes to be of same length, but "
            f"got len(devices) = {len(places)} and len(chunk_sizes) = "
            f"{len(sizes)}")
    if any(s < 0 for s in sizes):
        raise AcceleratorValueError(
            f"split_with_sizes expects split_sizes have only non-negative entries, but got "
            f"split_sizes={shown(sizes)} (chunk_sizes must be sizes >= 0)")
    if sum(sizes) != size:
        raise AcceleratorValueError(
            f"split_with_sizes expects split_sizes to sum exactly to {size} (input array's "
            f"size at dimension {dim}), but got split_sizes={shown(sizes)} (chunk_sizes must "
            f"sum to the array's size along dim)")
    return sizes


def _scatter_outputs(src: Info, outs: list[Any], d: int) -> list[Info]:
    """The checked ``out`` arrays of a scatter along ``d``."""
    infos = []
    total = 0
    for i, o in enumerate(outs):
        if not _arrays.is_array(o):
            raise _not_device_array("output arrays", "output array", i, o)
        x = describe(o, "output", i)
        same = len(x.shape) == len(src.shape) and all(
            a == b for k, (a, b) in enumerate(zip(x.shape, src.shape)) if k != d)
        if not same:
            raise AcceleratorValueError(
                f"Output array at index {i} has incorrect shape: "
                f"{shape_str(x.shape)}. Expected same shape except for scatter "
                f"dim {d} as the source array: {shape_str(src.shape)}")
        if x.dtype != src.dtype:
            raise AcceleratorValueError(
                f"Output array at index {i} has dtype {x.dtype.name}, but the "
                f"source has {src.dtype.name} (comm never converts dtypes)")
        total += x.shape[d]
        infos.append(x)
    if total != src.shape[d]:
        raise AcceleratorValueError(
            f"Total size for output arrays along scatter dim {d} does not match "
            f"the source array size at dim {d}. Expected {src.shape[d]}, but got "
            f"total size {total}")
    return infos


# destination=-1 (host memory) gives a numpy array: the first two overloads are narrower than
# the third and take precedence (as typeshed does for such literals)
@overload
def gather(tensors: Sequence[Array], dim: int = 0, *,  # type: ignore[overload-overlap]
           destination: Literal[-1], out: None = None) -> HostArray: ...
@overload
def gather(tensors: Sequence[Array], dim: int,  # type: ignore[overload-overlap]
           destination: Literal[-1], *, out: None = None) -> HostArray: ...
@overload
def gather(tensors: Sequence[Array], dim: int = 0, destination: DeviceLike = None, *,
           out: None = None) -> Array: ...
@overload
def gather(tensors: Sequence[Array], dim: int = 0, destination: None = None, *,
           out: _OutT) -> _OutT: ...
def gather(tensors: Sequence[Array], dim: int = 0, destination: DeviceLike = None, *,
           out: Array | HostArray | None = None) -> Array | HostArray:
    """Concatenate arrays from several devices along ``dim`` on one device.

    Args:
        tensors: :class:`accelrt.Array` inputs of one dtype whose shapes agree except along
            ``dim``.
        dim: the dimension to concatenate along (negative counts from the end).
        destination: the device of the result: an int (index on the inputs' backend; default
            the current device), a string or :class:`accelrt.device` (any backend, e.g.
            ``"cpu"`` for the CPU backend's current device), or ``-1`` for a plain numpy array
            in host memory.
        out: keyword-only; an :class:`accelrt.Array` or a numpy array to fill instead; its
            shape must equal the result's.

    ``destination`` must not be given together with ``out``.

    Returns:
        The gathered array (``out`` itself when given).

    Raises:
        TypeError: wrong argument types.
        ValueError: no inputs, mismatched shapes/dimensions/dtypes, a wrong ``out`` shape,
            ``destination`` with ``out``.
        IndexError: ``dim`` or a device index out of range.

    Example::

        >>> import accelrt as acc
        >>> xs = [acc.full((1, 2), v, dtype="int32", device="cpu:0") for v in (1, 2)]
        >>> acc.comm.gather(xs, dim=0, destination=-1).tolist()
        [[1, 1], [2, 2]]
    """
    items = _seq(tensors, "tensors")
    if not items:
        raise AcceleratorValueError(
            "Expected at least one array to gather from, but 'tensors' is empty")
    infos = []
    for i, a in enumerate(items):
        if not _arrays.is_array(a):
            raise _not_device_array("input arrays", "array", i, a)
        infos.append(describe(a, "input", i))
    first = infos[0]
    if not first.shape:
        raise AcceleratorValueError("gather expects arrays with at least one dimension; 0-d arrays "
                                    "cannot be concatenated")
    d = _args.wrap_dim(dim, len(first.shape))
    total = 0
    for i, x in enumerate(infos):
        if len(x.shape) != len(first.shape):
            raise AcceleratorValueError(f"Expected all input arrays to have the same number of "
                                        f"dimensions, but array at index {i} has {len(x.shape)} "
                                        f"dimensions (expected {len(first.shape)})")
        expected = first.shape[:d] + (x.shape[d],) + first.shape[d + 1:]
        if x.shape != expected:
            raise AcceleratorValueError(
                f"Input array at index {i} has invalid shape {shape_str(x.shape)}, "
                f"but expected {shape_str(expected)}")
        _check_same(first, x, "inputs", i)
        total += x.shape[d]
    shape = first.shape[:d] + (total,) + first.shape[d + 1:]
    if out is None:
        dest = _args.one_device(destination, first.place.backend, "destination",
                                optional=True, allow_host=True)
        res = info_of_new(new_array(dest, shape, first.dtype))
    else:
        if destination is not None:
            raise AcceleratorValueError(
                f"'destination' must not be specified when 'out' is specified, "
                f"but got destination={destination!r}")
        if isinstance(out, np.ndarray) and not (out.flags.c_contiguous
                                                and out.flags.writeable):
            raise AcceleratorValueError("out must be a C-contiguous, writable numpy array")
        res = describe(out, "out", host_ok=True)
        if res.shape != shape:
            raise AcceleratorValueError(
                f"Expected out array to have shape {shape_str(shape)}, but got "
                f"{shape_str(res.shape)}")
        if res.dtype != first.dtype:
            raise AcceleratorValueError(
                f"Expected out array to have dtype {first.dtype.name}, but got "
                f"{res.dtype.name} (comm never converts dtypes)")
    start = 0
    for x in infos:
        copy_region(res, start, x, 0, x.shape[d], d)
        start += x.shape[d]
    return res.obj if out is None else out

