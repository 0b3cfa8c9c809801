"""The caching allocator's free lists: the free blocks of one pool on one stream, ordered by
(size, address), PyTorch's ``BlockComparatorSize``, so that the first block at or above
``(rounded, 0)`` is the best fit of a request.

This module's :class:`FreeList` is the pure build's; the compiled build's is the same type in C
(``_free_list_c.c``, built with the mypyc modules), whose keys are two 64-bit integers where
this one builds a 128-bit integer ``size << 64 | address`` per key. ``FreeList`` here names
whichever is loaded (the Python one stays :data:`PyFreeList`);
``tests/memory/test_free_list.py`` runs both against a model. Every method below is the C
type's too, with the same results and exceptions.

Entries sit in sorted buckets of at most ``bucket_max`` keys: a lookup is a bisection over
the buckets' last keys and one inside a bucket, an insertion or removal moves at most one
bucket's keys, and a bucket splits in two when it grows past the limit (dropped when it
empties). So every operation costs O(log n) in the number of free blocks.

Example::

    >>> from accelrt.memory._free_list import FreeList
    >>> fl = FreeList()
    >>> for size, addr in [(1024, 0x3000), (512, 0x1000), (1024, 0x2000)]:
    ...     fl.add(size, addr, f"block@{addr:#x}")
    >>> fl.first_ge(600), fl.pop_ge(600), len(fl)       # the best fit of 600 bytes
    ('block@0x2000', 'block@0x2000', 2)
    >>> fl.keys(), list(fl.iter_lt(1024))
    ([(512, 4096), (1024, 12288)], ['block@0x1000'])
"""

from __future__ import annotations

import operator
import sys
from bisect import bisect_left
from collections.abc import Iterator
from typing import Generic, TypeVar
from .._errors import type_shown

__all__ = ["DEFAULT_BUCKET_MAX", "FreeList", "PyFreeList"]

#: A bucket splits in two when it grows past this many keys (the C type's default too).
DEFAULT_BUCKET_MAX = 512

_SHIFT = 64
_END = 1 << 64
_KEY_END = 1 << 128

#: What a free list holds: the allocator's blocks (any object, to the list).
B = TypeVar("B")


def _key(size: int, addr: int, names: tuple[str, str] = ("size", "addr")) -> int:
    """``size << 64 | addr``, each checked in turn to be an int in ``[0, 2**64)``, as the C
    type reads its arguments: the first bad one is the one reported, and an int subclass
    counts by its int value (its own operators are not called; a numpy integer is no int).

    The allocator's calls (``add``, ``remove``, ``replace``, ``pop_ge``, ``first_ge``) build
    their keys inline from exact ints and come here only for another type or an argument that
    fails the inline range check: a call of this function each cost the pure build's default
    replays 1.07x (same run); ``tests/memory/test_free_list.py`` sends bad arguments through
    every one of them."""
    vals = []
    for name, v in zip(names, (size, addr)):
        n = v
        if type(v) is not int:
            if not isinstance(v, int):
                raise TypeError(f"FreeList: {name} must be an int, not {type_shown(v)}")
            n = int.__index__(v)   # (the int value, whatever the subclass's operators do)
        if not 0 <= n < _END:
            raise OverflowError(f"FreeList: {name} must be in [0, 2**64), got {v!r}")
        vals.append(n)
    return (vals[0] << _SHIFT) | vals[1]


def _listed(key: int) -> ValueError:
    """The error of an ``add`` (or ``replace``) of a key that is listed already."""
    return ValueError(f"FreeList.add: a block of {key >> _SHIFT} bytes at "
                      f"{key & (_END - 1):#x} is already listed")


class FreeList(Generic[B]):
    """The free blocks of one pool on one stream, keyed and ordered by ``(size, address)``.

    Args:
        bucket_max: a bucket splits in two past this many keys (at least 2; tests use tiny
            buckets to reach the bucket logic with few blocks).

    Raises:
        ValueError: ``bucket_max`` below 2.
        TypeError: ``bucket_max`` is not an integer (as the C type's ``n`` argument).
        OverflowError: ``bucket_max`` does not fit a ``Py_ssize_t``.
    """

    __slots__ = ("blocks", "bucket_max", "lists", "maxes", "version")

    def __init__(self, bucket_max: int = DEFAULT_BUCKET_MAX) -> None:
        bucket_max = operator.index(bucket_max)
        if not -sys.maxsize - 1 <= bucket_max <= sys.maxsize:
            raise OverflowError("Python int too large to convert to C ssize_t")
        if bucket_max < 2:
            raise ValueError(f"FreeList: bucket_max must be at least 2, got {bucket_max}")
        self.lists: list[list[int]] = []     # sorted buckets of keys, none empty
        self.blocks: list[list[B]] = []      # the blocks of those keys, bucket by bucket
        self.maxes: list[int] = []           # the last key of each bucket
        self.bucket_max = bucket_max
        #: bumped by every change: iterators raise RuntimeError when it moved
        self.version = 0

    def __len__(self) -> int:
        lists = self.lists
        return len(lists[0]) if len(lists) == 1 else sum(map(len, lists))

    def __bool__(self) -> bool:
        return bool(self.maxes)

    def __iter__(self) -> Iterator[B]:
        """The blocks, ascending."""
        return self._walk(0, 0, False)

    def __repr__(self) -> str:
        return f"FreeList({self.keys()!r})"

    def keys(self) -> list[tuple[int, int]]:
        """The ``(size, addr)`` keys, ascending."""
        return [(k >> _SHIFT, k & (_END - 1)) for sub in self.lists for k in sub]

    def bucket_sizes(self) -> list[int]:
        """The number of keys in each bucket."""
        return [len(sub) for sub in self.lists]

    def add(self, size: int, addr: int, block: B) -> None:
        """List ``block`` under ``(size, addr)``.

        Raises:
            ValueError: the key is listed already (the list is unchanged).
        """
        if type(size) is not int or type(addr) is not int:
            key = _key(size, addr)   # (raises the C type's error, or reads an int subclass)
        else:
            key = (size << _SHIFT) | addr
            if not 0 <= key < _KEY_END or addr >= _END:
                key = _key(size, addr)   # (raises the C type's error)
        maxes = self.maxes
        j = bisect_left(maxes, key)
        if j == len(maxes):
            if not j:
                self.lists.append([key])
                self.blocks.append([block])
                maxes.append(key)
                self.version += 1
                return
            j -= 1
            sub = self.lists[j]
            sub.append(key)
            self.blocks[j].append(block)
            maxes[j] = key
        else:
            sub = self.lists[j]
            i = bisect_left(sub, key)
            if sub[i] == key:
                raise _listed(key)
            sub.insert(i, key)
            self.blocks[j].insert(i, block)
        self.version += 1
        if len(sub) > self.bucket_max:
            half = len(sub) >> 1
            self.lists.insert(j + 1, sub[half:])
            del sub[half:]
            bsub = self.blocks[j]
            self.blocks.insert(j + 1, bsub[half:])
            del bsub[half:]
            maxes.insert(j, sub[-1])

    def _take(self, j: int, i: int) -> B:
        """Take out entry ``i`` of bucket ``j``; its block."""
        sub = self.lists[j]
        del sub[i]
        bsub = self.blocks[j]
        block = bsub.pop(i)
        if not sub:
            del self.lists[j]
            del self.blocks[j]
            del self.maxes[j]
        elif i == len(sub):
            self.maxes[j] = sub[-1]
        self.version += 1
        return block

    def _find(self, key: int) -> tuple[int, int]:
        """Bucket and index of ``key``; (-1, -1) if it is not listed."""
        j = bisect_left(self.maxes, key)
        if j < len(self.maxes):
            sub = self.lists[j]
            i = bisect_left(sub, key)
            if sub[i] == key:
                return j, i
        return -1, -1

    def remove(self, size: int, addr: int) -> B:
        """Take the entry of ``(size, addr)`` out; its block.

        Raises:
            KeyError: ``(size, addr)`` is not listed.
        """
        if type(size) is not int or type(addr) is not int:
            key = _key(size, addr)
        else:
            key = (size << _SHIFT) | addr
            if not 0 <= key < _KEY_END or addr >= _END:
                key = _key(size, addr)
        j, i = self._find(key)
        if j < 0:
            raise KeyError((size, addr))
        return self._take(j, i)

    def replace(self, size: int, addr: int, new_size: int, new_addr: int, block: B) -> None:
        """``remove(size, addr)``, then ``add(new_size, new_addr, block)``, in one call (in
        place when the new key keeps the old one's position).

        Raises:
            KeyError: ``(size, addr)`` is not listed.
            ValueError: the new key is listed already (the list is unchanged).
        """
        if (type(size) is not int or type(addr) is not int or type(new_size) is not int
                or type(new_addr) is not int):
            key = _key(size, addr)
            new = _key(new_size, new_addr, ("new_size", "new_addr"))
        else:
            key = (size << _SHIFT) | addr
            new = (new_size << _SHIFT) | new_addr
            if (not 0 <= key < _KEY_END or addr >= _END or not 0 <= new < _KEY_END
                    or new_addr >= _END):
                key = _key(size, addr)
                new = _key(new_size, new_addr, ("new_size", "new_addr"))
        maxes = self.maxes
        lists = self.lists
        j = bisect_left(maxes, key)
        if j == len(maxes):
            raise KeyError((size, addr))
        sub = lists[j]
        i = bisect_left(sub, key)
        if sub[i] != key:
            raise KeyError((size, addr))
        last = len(sub) - 1
        if ((sub[i - 1] < new if i else (not j or maxes[j - 1] < new))
                and (new < sub[i + 1] if i < last else (j + 1 == len(maxes)
                                                        or new < lists[j + 1][0]))):
            # the new key keeps the old one's place (so it is no other listed key)
            sub[i] = new
            self.blocks[j][i] = block
            if i == last:
                maxes[j] = new
            self.version += 1
            return
        if self._find(new)[0] >= 0:
            raise _listed(new)
        self._take(j, i)
        self.add(new >> _SHIFT, new & (_END - 1), block)

    def pop_ge(self, size: int) -> B | None:
        """Take out the first entry at or above ``(size, 0)`` (the best fit of ``size``
        bytes) and return its block; ``None`` if there is none."""
        if type(size) is not int:
            start = _key(size, 0)
        else:
            start = size << _SHIFT
            if not 0 <= start < _KEY_END:
                start = _key(size, 0)
        maxes = self.maxes
        j = bisect_left(maxes, start)
        if j == len(maxes):
            return None
        # (_take, written out: the pure build's hottest call)
        sub = self.lists[j]
        i = bisect_left(sub, start)
        del sub[i]
        block = self.blocks[j].pop(i)
        if not sub:
            del self.lists[j]
            del self.blocks[j]
            del maxes[j]
        elif i == len(sub):
            maxes[j] = sub[-1]
        self.version += 1
        return block

    def first_ge(self, size: int, addr: int = 0) -> B | None:
        """The block of the first entry at or above ``(size, addr)``, kept; ``None`` if
        none."""
        if type(size) is not int or type(addr) is not int:
            start = _key(size, addr)
        else:
            start = (size << _SHIFT) | addr
            if not 0 <= start < _KEY_END or addr >= _END:
                start = _key(size, addr)
        maxes = self.maxes
        j = bisect_left(maxes, start)
        if j == len(maxes):
            return None
        return self.blocks[j][bisect_left(self.lists[j], start)]

    def iter_ge(self, size: int, addr: int = 0) -> Iterator[B]:
        """The blocks at or above ``(size, addr)``, ascending.

        Raises:
            RuntimeError: (while iterating) the list changed.
        """
        start = _key(size, addr)
        j = bisect_left(self.maxes, start)
        i = bisect_left(self.lists[j], start) if j < len(self.lists) else 0
        return self._walk(j, i, False)

    def iter_lt(self, size: int, addr: int = 0) -> Iterator[B]:
        """The blocks below ``(size, addr)``, descending.

        Raises:
            RuntimeError: (while iterating) the list changed.
        """
        start = _key(size, addr)
        lists = self.lists
        j = bisect_left(self.maxes, start)
        i = bisect_left(lists[j], start) - 1 if j < len(lists) else -1
        if i < 0:
            j -= 1
            i = len(lists[j]) - 1 if j >= 0 else 0
        return self._walk(j, i, True)

    def _walk(self, j: int, i: int, desc: bool) -> Iterator[B]:
        """The blocks from bucket ``j``, index ``i``, in one direction; a change of the list
        after this call raises RuntimeError at the next step (as the C type's iterators)."""
        return self._steps(j, i, desc, self.version)

    def _steps(self, j: int, i: int, desc: bool, version: int) -> Iterator[B]:
        blocks = self.blocks
        while 0 <= j < len(blocks):
            bsub = blocks[j]
            while 0 <= i < len(bsub):
                if self.version != version:
                    raise RuntimeError("FreeList changed during iteration")
                yield bsub[i]
                i += -1 if desc else 1
            if self.version != version:
                raise RuntimeError("FreeList changed during iteration")
            j += -1 if desc else 1
            i = (len(blocks[j]) - 1 if j >= 0 else 0) if desc else 0


#: The Python implementation (the pure build's ``FreeList``).
PyFreeList = FreeList

try:   # the compiled build's C type, where it is built
    from ._free_list_c import FreeList  # noqa: F811
except ImportError:
    pass
