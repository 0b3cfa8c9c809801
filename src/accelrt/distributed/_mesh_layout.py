"""The bookkeeping of :class:`~accelrt.distributed.device_mesh.DeviceMesh`: which entries of a
root mesh's flat rank list each dimension of a (sliced, flattened or unflattened) mesh walks.

torch 2.15 keeps it as CuTe-style layouts (``torch/distributed/_mesh_layout.py``); this is the
same arithmetic, written for what a mesh needs. A *mode* is ``(size, stride)``; an *axis* (one
mesh dimension) is a tuple of modes, outermost first, coalesced (size-1 modes dropped,
neighbours that walk on contiguously merged), so that equal walks are equal tuples; a *layout*
is a tuple of axes. The entries an axis visits are its modes' offsets in lexicographic order
(the last mode innermost), as a row-major array is walked.

Example::

    >>> from accelrt.distributed._mesh_layout import from_sizes, remap
    >>> import numpy as np
    >>> layout = from_sizes((2, 3))
    >>> layout
    (((2, 3),), ((3, 1),))
    >>> remap(layout[:1], np.arange(6)).tolist()       # dim 0's groups: one per column
    [[0, 3], [1, 4], [2, 5]]
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

from ._errors import _AssertValueError

#: ``(size, stride)``
Mode = tuple[int, int]
#: one mesh dimension: its modes, outermost first, coalesced
Axis = tuple[Mode, ...]
#: a mesh: one axis per dimension
Layout = tuple[Axis, ...]


def coalesce(modes: Iterable[Mode]) -> Axis:
    """The canonical form of a walk: size-1 modes dropped, and a mode merged into the one
    inside it where it continues that walk (its stride is the inner one's size times stride).
    """
    out: list[list[int]] = []   # innermost first
    for size, stride in reversed(list(modes)):
        if size == 1:
            continue
        if out and out[-1][0] * out[-1][1] == stride:
            out[-1][0] *= size
        else:
            out.append([size, stride])
    return tuple((s, d) for s, d in reversed(out))


def from_sizes(sizes: Sequence[int]) -> Layout:
    """The layout of a row-major (C-contiguous) array of shape ``sizes``."""
    strides = [math.prod(sizes[k + 1:]) for k in range(len(sizes))]
    return tuple(coalesce([(s, d)]) for s, d in zip(sizes, strides))


def numel(axis: Axis) -> int:
    return math.prod(s for s, _ in axis)


def sizes_of(layout: Layout) -> tuple[int, ...]:
    """The mesh's shape: each dimension's size."""
    return tuple(numel(a) for a in layout)


def collapse(layout: Layout) -> Axis:
    """The whole layout as one walk (its dimensions flattened in order)."""
    return coalesce(m for axis in layout for m in axis)


def cosize(layout: Layout) -> int:
    """One past the furthest entry the layout visits."""
    return sum((s - 1) * d for axis in layout for s, d in axis) + 1


def orthogonal(axis: Axis) -> bool:
    """Whether the walk visits no entry twice (each mode's stride clears the modes inside)."""
    pairs = sorted(((d, s) for s, d in axis), reverse=True)
    return all(pairs[k][0] % (pairs[k + 1][0] * pairs[k + 1][1]) == 0
               for k in range(len(pairs) - 1))


def descending(axis: Axis) -> bool:
    """Whether the strides never grow inwards (the dimensions keep the root's order)."""
    strides = [d for _, d in axis]
    return strides == sorted(strides, reverse=True)


def complement(axis: Axis, total: int) -> Axis:
    """The walk over the starting points of ``axis``'s copies that tile ``total`` entries
    (the gaps between its modes, then the repeats beyond it), largest stride outermost."""
    out: list[Mode] = []
    cur = 1
    for d, s in sorted((d, s) for s, d in axis):
        if d == 0 or s == 1:
            continue
        if cur > s * d:
            raise _AssertValueError(f"the mesh layout {axis} overlaps itself")
        out.append((d // cur, cur))
        cur = s * d
    out.append(((total + cur - 1) // cur, cur))
    return coalesce(reversed(out))


def offsets(axis: Axis) -> npt.NDArray[np.int64]:
    """The entries ``axis`` visits from 0, in walk order."""
    off = np.zeros(1, dtype=np.int64)
    for s, d in axis:
        off = (off[:, None] + np.arange(s, dtype=np.int64) * d).ravel()
    return off


def remap(layout: Layout, rank_map: npt.NDArray[np.int32]) -> npt.NDArray[np.int32]:
    """The ranks of every copy of ``layout`` that tiles ``rank_map``: an array of shape
    ``(copies, *sizes_of(layout))`` (torch's ``_MeshLayout.remap_to_tensor``)."""
    flat = collapse(layout)
    rows = complement(flat, int(rank_map.size))
    index = offsets(rows)[:, None] + offsets(flat)[None, :]
    out: npt.NDArray[np.int32] = rank_map[index].reshape(-1, *sizes_of(layout))
    return out


def split(axis: Axis, sizes: Sequence[int]) -> Layout:
    """``axis`` cut into dimensions of ``sizes`` (their product is its size), outermost
    first: torch's composition of the axis with a row-major layout of ``sizes``.

    Raises:
        ValueError: a size does not divide the part of the walk it falls on (torch 2.15:
            ``AssertionError``; this error is both).
    """
    rest = list(axis)
    out: list[Axis] = []
    for n in reversed(sizes):
        taken: list[Mode] = []
        while n > 1:
            if not rest:   # (the caller checked that the sizes multiply to the axis's)
                raise _AssertValueError(f"cannot cut the mesh dimension {axis} into "
                                        f"{tuple(sizes)}")
            s, d = rest[-1]
            if n % s == 0:
                taken.append(rest.pop())
                n //= s
            elif s % n == 0:
                taken.append((n, d))
                rest[-1] = (s // n, d * n)
                n = 1
            else:
                raise _AssertValueError(
                    f"cannot cut the mesh dimension of size {numel(axis)} into sizes "
                    f"{tuple(sizes)}: {n} does not divide the part of size {s} it falls on "
                    "(that dimension was flattened from dimensions that are not neighbours; "
                    "choose sizes that follow them)")
        out.append(coalesce(reversed(taken)))
    return tuple(reversed(out))


def stride_shown(axis: Axis) -> int | tuple[int, ...]:
    """An axis's stride as torch's ``DeviceMesh.__repr__`` shows it: one int for a plain walk,
    a tuple for a flattened one, ``()`` for a dimension of size 1."""
    strides = tuple(d for _, d in axis)
    return strides[0] if len(strides) == 1 else strides
