"""A broadcast as data: the byte runs that fill a C-contiguous array from a smaller one.

``Array.copy_(src)`` broadcasts ``src`` to the destination's shape, as PyTorch's ``copy_`` does
(``x.copy_(y)`` with ``y`` of shape ``(3,)`` and ``x`` of shape ``(2, 3)``). Arrays have no
views and accelrt has no kernels, so :func:`broadcast_runs` describes the copy as runs of bytes
that :func:`~accelrt._transfer.plan_array_copy` turns into ordinary copy steps:

* ``scatter``: runs from the source into the destination, one per block of the source that
  is contiguous in both (the positions where every broadcast index is 0);
* ``fill``: runs inside the destination, in order, that replicate what is already written
  along each broadcast dimension, innermost first, doubling the written part each time (so a
  dimension of ``n`` takes ``ceil(log2(n))`` runs per position of the outer dimensions).

Runs count bytes from the start of each array; a fill run's source is the destination.
Dimensions of size 1 are dropped and neighbouring dimensions of the same kind (broadcast or
not) are merged first, so ``(3,) -> (2, 3)`` is one scatter run and one fill run, and a scalar
into ``n`` elements is one scatter run and ``ceil(log2(n))`` fill runs.

Example::

    >>> from accelrt._transfer import broadcast_runs
    >>> b = broadcast_runs((2, 3), (3,), 4)
    >>> b.scatter, b.fill
    (((0, 0, 12, 1, 0, 0),), ((12, 0, 12, 1, 0, 0),))
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple, TypeAlias

__all__ = ["Broadcast", "Runs", "broadcast_runs"]


#: ``(dst, src, run, nruns, dst_pitch, src_pitch)``: ``nruns`` runs of ``run`` bytes from
#: ``src + k * src_pitch`` to ``dst + k * dst_pitch`` (offsets in bytes from the start of each
#: array), as a :class:`~accelrt._transfer.Copy` step copies them.
Runs: TypeAlias = tuple[int, int, int, int, int, int]


class Broadcast(NamedTuple):
    """The copy of a broadcast source: ``scatter`` (source -> destination), then ``fill``
    (destination -> destination, in order, after the scatter)."""

    scatter: tuple[Runs, ...]
    fill: tuple[Runs, ...]


def _groups(dst: tuple[int, ...], src: tuple[int, ...]) -> list[list[int]]:
    """``[size, broadcast]`` of the destination's dimensions, outermost first: dimensions of
    size 1 dropped, neighbours of the same kind merged (``broadcast`` 1: the source has 1)."""
    padded = (1,) * (len(dst) - len(src)) + src
    out: list[list[int]] = []
    for n, s in zip(dst, padded):
        if n == 1:
            continue
        kind = int(s != n)
        if out and out[-1][1] == kind:
            out[-1][0] *= n
        else:
            out.append([n, kind])
    return out


def _positions(outer: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
    """``(dst, src)`` byte offsets of every combination of the ``(count, dst_stride,
    src_stride)`` dimensions (one ``(0, 0)`` without any)."""
    out = []
    for idx in itertools.product(*(range(n) for n, _, _ in outer)):
        out.append((sum(i * d for i, (_, d, _) in zip(idx, outer)),
                    sum(i * s for i, (_, _, s) in zip(idx, outer))))
    return out


def broadcast_runs(dst: tuple[int, ...], src: tuple[int, ...], itemsize: int) -> Broadcast:
    """The runs that copy a C-contiguous ``src``-shaped array into a C-contiguous
    ``dst``-shaped one of the same ``itemsize`` (the caller checked that ``src`` broadcasts to
    ``dst``: every dimension of ``src``, aligned right, is 1 or ``dst``'s).

    Example::

        >>> from accelrt._transfer import broadcast_runs
        >>> b = broadcast_runs((4, 2), (4, 1), 8)     # a column into every column
        >>> b.scatter, b.fill
        (((0, 0, 8, 4, 16, 8),), ((8, 0, 8, 4, 16, 16),))
    """
    if math.prod(dst) == 0:
        return Broadcast((), ())
    groups = _groups(dst, src)
    block = itemsize                 # the innermost run contiguous in both arrays
    if groups and not groups[-1][1]:
        block *= groups.pop()[0]
    # byte strides of the remaining groups in the destination and (0 if broadcast) the source
    dims: list[tuple[int, int, int, bool]] = []     # (size, dst stride, src stride, broadcast)
    dstride, sstride = block, block
    for n, bc in reversed(groups):
        dims.append((n, dstride, 0 if bc else sstride, bool(bc)))
        dstride *= n
        if not bc:
            sstride *= n
    dims.reverse()
    kept = [(n, d, s) for n, d, s, bc in dims if not bc]
    scatter = tuple((do, so, block, *_inner(kept)) for do, so in _positions(kept[:-1]))
    fill: list[Runs] = []
    for k in range(len(dims) - 1, -1, -1):
        n, stride, _, bc = dims[k]
        if not bc:
            continue
        outer = [(m, d, d) for m, d, _, b in dims[:k] if not b]   # destination to itself
        nruns, pitch = (outer[-1][0], outer[-1][1]) if outer else (1, 0)
        done = 1
        while done < n:
            step = min(done, n - done)
            for base, _ in _positions(outer[:-1]):
                fill.append((base + done * stride, base, step * stride, nruns, pitch, pitch))
            done += step
    return Broadcast(scatter, tuple(fill))


def _inner(kept: list[tuple[int, int, int]]) -> tuple[int, int, int]:
    """``(nruns, dst_pitch, src_pitch)`` of the innermost source dimension left (one run
    without any)."""
    if not kept:
        return 1, 0, 0
    n, d, s = kept[-1]
    return n, d, s
