"""Elementwise sums on one device, for :func:`accelrt.comm.reduce_add`.

Where the sum runs, in order of preference:

1. **Host-accessible destination** (the CPU backend): numpy adds the inputs in place into the
   result, enqueued on the destination's current stream with ``launch_host_func`` (so it runs
   after the copies that feed it, in stream order). Inputs on peer devices the destination can
   access are read where they are (no staging copy) behind a two-way event barrier; other
   inputs are first copied to the destination.
2. **A backend kernel**: a backend that defines the optional method
   ``elementwise_add(index, out, a, b, count, dtype, stream)`` (``out = a + b`` for ``count``
   elements of numpy dtype name ``dtype``, stream-ordered) sums on the device.
3. **Host staging**: every input is copied to host memory, numpy sums them, and the result is
   uploaded (synchronous; correct everywhere, slowest).

The order of the additions is PyTorch's: ``root + other_0 + other_1 + ...`` where ``root`` is
the input already on the destination.

Example::

    >>> import accelrt as acc
    >>> from accelrt.comm import _arrays, _reduce
    >>> xs = [_arrays.describe(acc.full((2,), float(i), device="cpu:0"), "input")
    ...       for i in (1, 2)]
    >>> out = _reduce.sum_into(xs[0].place, xs[0], xs[1:])
    >>> out.tolist()
    [3.0, 3.0]
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._arrays import Info, info_of_new, new_array, whole
from .._transfer import Place, barrier, held, hold, host_view, run_on_stream, stream_of

__all__ = ["sum_into"]


def _numpy_sum(out: tuple[int, tuple[int, ...], np.dtype[Any]],
               parts: Sequence[tuple[int, tuple[int, ...], np.dtype[Any]]]) -> None:
    """``out = parts[0] + parts[1] + ...`` on host-readable memory (runs in stream order).

    Only raw addresses cross into the stream: the arrays stay owned by the calling thread
    (the caching allocator's stream semantics keep their blocks valid for work already
    enqueued), so no array is ever freed on a stream worker thread.
    """
    r = host_view(*out)
    first = host_view(*parts[0])
    np.add(first, host_view(*parts[1]), out=r)
    for p in parts[2:]:
        np.add(r, host_view(*p), out=r)


def sum_into(dest: Place, root: Info, others: Sequence[Info]) -> Any:
    """A new array on ``dest`` holding ``root + others[0] + ...`` (``root`` is on ``dest``)."""
    b = dest.backend
    assert b is not None
    result = new_array(dest, root.shape, root.dtype)
    res = info_of_new(result)
    if res.nbytes == 0:
        return result
    dst_stream = stream_of(dest)
    if b.capabilities(dest.index).host_accessible:
        _host_sum(dest, dst_stream, res, root, others)
    elif b.capabilities(dest.index).device_add:
        _kernel_sum(dest, dst_stream, res, root, others)
    else:
        _staged_sum(res, root, others)
    return result


def _host_sum(dest: Place, dst_stream: Any, res: Info, root: Info,
              others: Sequence[Info]) -> None:
    b = dest.backend
    assert b is not None
    parts = [(root.ptr, root.shape, root.dtype)]
    staged: list[Any] = []   # staging arrays: alive until the sum is enqueued
    direct: list[Any] = []   # streams of peer devices read in place
    for x in others:
        peer = x.mem
        if (peer.backend is b and peer.index != dest.index and b.capabilities(peer.index).host_accessible
                and b.can_access_peer(dest.index, peer.index)):
            s = stream_of(peer)
            barrier(s, dst_stream)          # the sum waits for the peer's pending work
            direct.append(s)
            parts.append((x.ptr, x.shape, x.dtype))
        elif peer == dest or peer.backend is None:
            parts.append((x.ptr, x.shape, x.dtype))
        else:
            tmp = new_array(dest, x.shape, x.dtype)
            t = info_of_new(tmp)
            whole(t, x)                     # stream-ordered before the sum
            parts.append((t.ptr, t.shape, t.dtype))
            staged.append(tmp)
    fn = functools.partial(_numpy_sum, (res.ptr, res.shape, res.dtype), parts)
    run_on_stream(dst_stream, fn)
    # inputs in borrowed memory (acc.asarray of numpy) are read in place by the queued sum:
    # held until it ran, the rule for all queued work (allocator memory is stream-ordered)
    hold(b, dest.index, dst_stream._handle, held(root.obj, *(x.obj for x in others)))
    # the staging arrays were allocated on dst_stream and are used only there: dropping them
    # now that the sum is enqueued is safe in stream order
    del staged
    for s in direct:
        barrier(dst_stream, s)              # peers must not overwrite inputs before the sum


def _kernel_sum(dest: Place, dst_stream: Any, res: Info, root: Info,
                others: Sequence[Info]) -> None:
    b = dest.backend
    assert b is not None
    kernel = b.elementwise_add
    count = int(np.prod(root.shape, dtype=np.int64))
    acc_ptr = root.ptr
    keep = []
    for x in others:
        if x.mem == dest:
            ptr = x.ptr
        else:
            tmp = new_array(dest, x.shape, x.dtype)
            t = info_of_new(tmp)
            whole(t, x)
            keep.append(tmp)
            ptr = t.ptr
        kernel(dest.index, res.ptr, acc_ptr, ptr, count, root.dtype.name, dst_stream._handle)
        acc_ptr = res.ptr
    # staging arrays were allocated on dst_stream and used only there: freeing them now is
    # safe in stream order
    del keep


def _staged_sum(res: Info, root: Info, others: Sequence[Info]) -> None:
    def fetch(x: Info) -> np.ndarray:
        host = np.empty(x.shape, x.dtype)
        whole(info_of_new(host), x)
        return host

    total = fetch(root)
    for x in others:
        np.add(total, fetch(x), out=total)
    whole(res, info_of_new(total))
