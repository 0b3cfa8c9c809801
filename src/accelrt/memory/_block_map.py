"""The caching allocator's map of every block by its address (``DeviceCachingAllocator._blocks``).

This module's :class:`BlockMap` is the pure build's: a ``dict`` of ``{address: block}``. The
compiled build's is a C type (``_block_map_c.c``, built with the mypyc modules) with the same
behaviour for what the allocator does with it: ``m[addr]``, ``m[addr] = blk``, ``del m[addr]``,
``addr in m``, ``len(m)``, ``m.get(addr[, default])``, ``m.values()`` and ``m.keys()``, in the
order addresses were first stored (a dict's order), so every walk over the blocks visits them as
the pure build does. ``BlockMap`` here names whichever is loaded (the Python one stays
:data:`PyBlockMap`); ``tests/memory/test_block_map.py`` runs both against a model.

Why a C type: a malloc that splits a block stores one entry, a free looks one up and a merge
deletes one, so the map is on every cached malloc and free. A dict hashes a Python int, whose
low bits are all zero for aligned addresses, and compares int objects; the C type keeps the
addresses unboxed in an open-addressed table (Fibonacci hashing, linear probing) and compares
64-bit integers. The differences: ``values()`` and ``keys()`` return lists (the allocator only
walks them), and an address must be an int in ``[0, 2**64)`` (any other key is absent: a lookup
raises ``KeyError``, ``get`` returns the default, a store raises ``TypeError`` or
``OverflowError``).

Example::

    >>> from accelrt.memory._block_map import BlockMap
    >>> m = BlockMap()
    >>> m[0x2000] = "second"; m[0x1000] = "first"
    >>> m[0x1000], m.get(0x3000), 0x2000 in m, len(m)
    ('first', None, True, 2)
    >>> del m[0x2000]
    >>> list(m.values())
    ['first']
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Generic, TypeVar, overload

__all__ = ["BlockMap", "PyBlockMap"]

#: What the map holds: the allocator's blocks (any object, to the map).
B = TypeVar("B")
D = TypeVar("D")

if TYPE_CHECKING:
    class BlockMap(Generic[B]):
        """The allocator's blocks by address (a ``dict`` in the pure build; see the module).

        Declared as its own class, not as ``dict``, so that mypyc compiles the allocator's
        uses as generic mapping operations, which the C type serves."""

        def __getitem__(self, addr: int) -> B: ...
        def __setitem__(self, addr: int, blk: B) -> None: ...
        def __delitem__(self, addr: int) -> None: ...
        def __contains__(self, addr: object) -> bool: ...
        def __len__(self) -> int: ...
        @overload
        def get(self, addr: object) -> B | None: ...
        @overload
        def get(self, addr: object, default: D) -> B | D: ...
        def get(self, addr: object, default: object = None) -> object: ...
        def values(self) -> Iterable[B]: ...
        def keys(self) -> Iterable[int]: ...
else:
    BlockMap = dict

#: The Python implementation (the pure build's ``BlockMap``: ``dict``).
PyBlockMap = BlockMap

try:   # the compiled build's C type, where it is built
    from ._block_map_c import BlockMap  # noqa: F811
except ImportError:
    pass
