"""Grouping, flattening and splitting for the ``*_coalesced`` collectives.

Arrays are grouped by dtype into chunks of at most ``buffer_size`` bytes (an array larger than
the buffer gets a chunk of its own), as PyTorch's ``_take_tensors`` does. A chunk of several
arrays is copied into one flat buffer of its dtype, moved or reduced as one array, and copied
back out into separate arrays.

Example::

    >>> import numpy as np
    >>> from accelrt.comm._coalesce import take_chunks
    >>> f4, f8 = np.dtype("float32"), np.dtype("float64")
    >>> take_chunks([(f4, 8), (f8, 8), (f4, 8)], buffer_size=16)
    [[0, 2], [1]]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._arrays import Info, copy_region, info_of_new, new_array
from .._transfer import Place

__all__ = ["flatten", "take_chunks", "unflatten"]


def take_chunks(items: Sequence[tuple[np.dtype[Any], int]], buffer_size: int) -> list[list[int]]:
    """Group positions of ``(dtype, nbytes)`` items into same-dtype chunks of at most
    ``buffer_size`` bytes (each chunk holds at least one item), in PyTorch's order: a chunk is
    emitted when it would overflow, the partially filled ones at the end."""
    open_: dict[np.dtype[Any], tuple[list[int], int]] = {}
    out: list[list[int]] = []
    for i, (dt, nbytes) in enumerate(items):
        idxs, size = open_.get(dt, ([], 0))
        if size > 0 and size + nbytes > buffer_size:
            out.append(idxs)
            idxs, size = [], 0
        idxs.append(i)
        open_[dt] = (idxs, size + nbytes)
    out.extend(idxs for idxs, _ in open_.values() if idxs)
    return out


def flatten(parts: Sequence[Info], place: Place) -> Info:
    """A new 1-d array on ``place`` holding the elements of ``parts`` back to back."""
    dt = parts[0].dtype
    total = sum(math.prod(p.shape) for p in parts)
    flat = info_of_new(new_array(place, (total,), dt))
    off = 0
    for p in parts:
        n = math.prod(p.shape)
        src = p._replace(shape=(n,))
        copy_region(flat, off, src, 0, n, 0)
        off += n
    return flat


def unflatten(flat: Info, like: Sequence[Info]) -> list[Any]:
    """New arrays on ``flat``'s device with the shapes of ``like``, filled from ``flat``."""
    out = []
    off = 0
    for p in like:
        n = math.prod(p.shape)
        arr = new_array(flat.place, p.shape, p.dtype)
        dst = info_of_new(arr)
        copy_region(dst._replace(shape=(n,)), 0, flat, off, n, 0)
        off += n
        out.append(arr)
    return out
