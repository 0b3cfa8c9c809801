"""The books of one simulated device (:class:`SimDevice`), with its ``vm_map`` and
``vm_unmap``, compiled in the compiled build.

:class:`~accelrt.testing.SimulatedBackend` stays a Python class (tests and benchmarks subclass
it): its methods check the backend and the device index, take the backend's lock and call
these methods of the device. A low-fragmentation replay maps and unmaps thousands of times;
as Python, the checks and the search of the sorted mappings took about a fifth of such a
replay (``bench/bench_builds.py``, the page_reuse rows, against the "device stubbed" rows).
The address and size arguments are typed ``object``: a caller may pass anything, and each is
checked here with accelrt's messages (never mypyc's), in both builds alike.

Example::

    >>> from accelrt.testing._sim_device import SimDevice
    >>> dev = SimDevice(1 << 44, 1 << 43, ("vm_map", "vm_unmap", "vm_unmapped_mappings"))
    >>> dev.reservations[1 << 30] = 8 << 20
    >>> dev.vm_map((1 << 30) + (2 << 20), 2 << 20, 2 << 20, 1 << 40)
    True
    >>> dev.used, dev.map_starts == [(1 << 30) + (2 << 20)]
    (2097152, True)
    >>> dev.vm_unmap((1 << 30) + (2 << 20), 2 << 20, 2 << 20)
    >>> dev.used, dev.mappings, dev.calls["vm_unmapped_mappings"]
    (0, {}, 1)
"""

from __future__ import annotations

import operator
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from typing import TYPE_CHECKING, cast, final

from .._errors import type_shown

if TYPE_CHECKING:
    from typing import SupportsIndex

__all__ = ["SimDevice"]


def _as_int(value: object, name: str, what: str) -> int:
    """``value`` as an int (an integer type's ``__index__``; not a bool), else TypeError."""
    if not isinstance(value, bool):
        try:
            return operator.index(cast("SupportsIndex", value))
        except TypeError:
            pass
    raise TypeError(f"{what}: {name} must be an int, got {type_shown(value)}")


@final
class SimDevice:
    """Book-keeping of one simulated device (all fields guarded by the backend's lock)."""

    __slots__ = ("base", "blocks", "calls", "destroyed", "done", "host_funcs", "map_starts",
                 "mappings", "next_addr", "next_vm", "queued", "reservations", "used")

    def __init__(self, base: int, vm_offset: int, call_names: tuple[str, ...]) -> None:
        self.used = 0                                   # bytes of malloc + mapped pages
        self.base = base
        self.next_addr = base                           # bump pointer for malloc
        self.next_vm = base + vm_offset                 # bump pointer for vm_reserve
        self.blocks: dict[int, int] = {}                # malloc'd ptr -> size
        self.reservations: dict[int, int] = {}          # reserved base -> size
        self.mappings: dict[int, int] = {}              # vm_map'd base -> size
        self.map_starts: list[int] = []                 # the bases of mappings, sorted
        # successful calls at the backend boundary, by name (see SimulatedBackend.calls)
        self.calls: dict[str, int] = dict.fromkeys(call_names, 0)
        # work on each stream: numbered in submission order; done up to done[stream]
        self.queued: dict[int, int] = {}
        self.done: dict[int, int] = {}
        self.destroyed: set[int] = set()                # destroyed stream handles
        # host functions waiting for their stream: stream -> [(work number, fn)]
        self.host_funcs: dict[int, list[tuple[int, Callable[[], None]]]] = {}

    def _vm_range(self, ptr: object, size: object, granularity: int,
                  what: str) -> tuple[int, int]:
        """``(ptr, size)`` as ints if they name a non-empty ``granularity``-aligned range
        inside one reservation; TypeError or ValueError naming ``what`` otherwise."""
        p = ptr if type(ptr) is int else _as_int(ptr, "ptr", what)
        n = size if type(size) is int else _as_int(size, "size", what)
        if p % granularity or n % granularity or n <= 0:
            raise ValueError(f"{what}: [{p:#x}, +{n}) is not a non-empty range aligned to "
                             f"the {granularity}-byte granularity")
        end = p + n
        for base, rsize in self.reservations.items():
            if base <= p and end <= base + rsize:
                return p, n
        raise ValueError(f"{what}: [{p:#x}, +{n}) is not inside a reservation")

    def vm_map(self, ptr: object, size: object, granularity: int, capacity: int) -> bool:
        """Record one mapping of ``[ptr, ptr+size)`` (as cuMemCreate + cuMemMap would make
        one) and count it; False, recording nothing, when the device's ``used`` bytes would
        pass ``capacity``. ValueError for a range that is not aligned, not inside a
        reservation, or that overlaps a mapping."""
        p, n = self._vm_range(ptr, size, granularity, "vm_map")
        starts = self.map_starts
        i = bisect_left(starts, p)
        if i < len(starts) and starts[i] < p + n:
            raise ValueError(f"vm_map: [{p:#x}, +{n}) overlaps mapped pages")
        if i:
            before = starts[i - 1]
            if before + self.mappings[before] > p:
                raise ValueError(f"vm_map: [{p:#x}, +{n}) overlaps mapped pages")
        if self.used + n > capacity:
            return False
        starts.insert(i, p)
        self.mappings[p] = n
        self.used += n
        self.calls["vm_map"] += 1
        return True

    def vm_unmap(self, ptr: object, size: object, granularity: int) -> None:
        """Remove the run of whole mappings that make up ``[ptr, ptr+size)`` and count the
        call and the mappings; ValueError for a range that is not aligned, not inside a
        reservation, not entirely mapped, or that cuts a mapping (as on CUDA)."""
        p, n = self._vm_range(ptr, size, granularity, "vm_unmap")
        mappings = self.mappings
        starts = self.map_starts
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
        self.used -= n
        calls = self.calls
        calls["vm_unmap"] += 1
        calls["vm_unmapped_mappings"] += j - i
