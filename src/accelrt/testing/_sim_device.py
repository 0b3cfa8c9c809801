"""The simulated device's ``vm_map`` and ``vm_unmap`` over its books of reservations and
mappings, compiled in the compiled build.

:class:`~accelrt.testing.SimulatedBackend` stays a Python class (tests and benchmarks subclass
it), and so do its devices' books (a Python class with ``__slots__``: its other operations
read and write their fields from Python, which reads a slot faster than a compiled class's
field). Its ``vm_map``/``vm_unmap`` check the backend and the device index, take its lock and
call these functions over the device's tables. A low-fragmentation replay maps and unmaps
thousands of times; as Python, the checks and the search of the sorted mappings took a fifth
of such a replay (``bench/bench_builds.py``: the page_reuse rows against the "device stubbed"
rows). The address and size arguments are typed ``object``: a caller may pass anything, and
each is checked here with accelrt's messages (never mypyc's), in both builds alike.

Example::

    >>> from accelrt.testing._sim_device import vm_map_range, vm_unmap_range
    >>> reservations, mappings, starts = {1 << 30: 8 << 20}, {}, []
    >>> page = 2 << 20
    >>> vm_map_range(reservations, mappings, starts, (1 << 30) + page, page, page, 1 << 40)
    2097152
    >>> starts == [(1 << 30) + page]
    True
    >>> vm_unmap_range(reservations, mappings, starts, (1 << 30) + page, page, page)
    2097152
    >>> mappings, starts
    ({}, [])
"""

from __future__ import annotations

import operator
from bisect import bisect_left, bisect_right
from typing import TYPE_CHECKING, cast

from .._errors import type_shown

if TYPE_CHECKING:
    from typing import SupportsIndex

__all__ = ["vm_map_range", "vm_unmap_range"]


def _as_int(value: object, name: str, what: str) -> int:
    """``value`` as an int (an integer type's ``__index__``; not a bool), else TypeError."""
    if not isinstance(value, bool):
        try:
            return operator.index(cast("SupportsIndex", value))
        except TypeError:
            pass
    raise TypeError(f"{what}: {name} must be an int, got {type_shown(value)}")


def _vm_range(reservations: dict[int, int], ptr: object, size: object, granularity: int,
              what: str) -> tuple[int, int]:
    """``(ptr, size)`` as ints if they name a non-empty ``granularity``-aligned range inside
    one reservation; TypeError or ValueError naming ``what`` otherwise."""
    p = ptr if type(ptr) is int else _as_int(ptr, "ptr", what)
    n = size if type(size) is int else _as_int(size, "size", what)
    if p % granularity or n % granularity or n <= 0:
        raise ValueError(f"{what}: [{p:#x}, +{n}) is not a non-empty range aligned to "
                         f"the {granularity}-byte granularity")
    end = p + n
    for base, rsize in reservations.items():
        if base <= p and end <= base + rsize:
            return p, n
    raise ValueError(f"{what}: [{p:#x}, +{n}) is not inside a reservation")


def vm_map_range(reservations: dict[int, int], mappings: dict[int, int], starts: list[int],
                 ptr: object, size: object, granularity: int, room: int) -> int:
    """Record one mapping of ``[ptr, ptr+size)`` (as cuMemCreate + cuMemMap would make one)
    and return its size, an int; 0, recording nothing, when it is more than ``room`` (the
    bytes the device has left). ValueError for a range that is not aligned, not inside a
    reservation, or that overlaps a mapping. ``mappings`` maps each mapping's base to its
    size; ``starts`` lists the bases, sorted."""
    p, n = _vm_range(reservations, ptr, size, granularity, "vm_map")
    i = bisect_left(starts, p)
    if i < len(starts) and starts[i] < p + n:
        raise ValueError(f"vm_map: [{p:#x}, +{n}) overlaps mapped pages")
    if i:
        before = starts[i - 1]
        if before + mappings[before] > p:
            raise ValueError(f"vm_map: [{p:#x}, +{n}) overlaps mapped pages")
    if n > room:
        return 0
    starts.insert(i, p)
    mappings[p] = n
    return n


def vm_unmap_range(reservations: dict[int, int], mappings: dict[int, int], starts: list[int],
                   ptr: object, size: object, granularity: int) -> int:
    """Remove the run of whole mappings that make up ``[ptr, ptr+size)`` and return its size,
    an int (``starts`` is shorter by the mappings removed); ValueError for a range that is not
    aligned, not inside a reservation, not entirely mapped, or that cuts a mapping (as on
    CUDA)."""
    p, n = _vm_range(reservations, ptr, size, granularity, "vm_unmap")
    end = p + n
    # the mappings meeting [p, end): from the one holding p, if any
    i = bisect_right(starts, p)
    if i:
        before = starts[i - 1]
        if before + mappings[before] > p:
            i -= 1
    j = i
    cur = p
    count = len(starts)
    while j < count:
        at = starts[j]
        if at > cur or at >= end:
            break                             # a gap (an unmapped page), or the end
        cur = at + mappings[at]
        j += 1
    if cur < end:
        raise ValueError(f"vm_unmap: [{p:#x}, +{n}) is not entirely mapped")
    if starts[i] != p or cur != end:
        cut = p if starts[i] != p else starts[j - 1]
        raise ValueError(f"vm_unmap: [{p:#x}, +{n}) cuts a mapping at "
                         f"{cut:#x}; unmap whole ranges given to vm_map")
    for k in range(i, j):
        del mappings[starts[k]]
    del starts[i:j]
    return n
