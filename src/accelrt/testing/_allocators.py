"""Allocators for tests and benchmarks of the caching allocator (not for other use).

:class:`GeneralPathAllocator` is :class:`~accelrt.memory._allocator.DeviceCachingAllocator`
with its named fast paths off: the differential tests run both on the same call sequences and
compare their state, and ``bench/bench_allocator.py`` times both.

It subclasses a class that the compiled build compiles, so ``setup.py``'s ``COMPILED`` names
this module too.
"""

from __future__ import annotations

from ..memory._allocator import DeviceCachingAllocator

__all__ = ["GeneralPathAllocator"]


class GeneralPathAllocator(DeviceCachingAllocator):
    """The allocator with its hand-inlined fast paths off: every :meth:`malloc` runs
    ``_malloc_locked`` and every :meth:`free` runs ``_free_locked``, the general code that the
    fast paths mirror. The fast-path tests run both on the same sequences and compare their
    state, and ``bench/bench_allocator.py`` times both; not meant for other use.

    Example::

        >>> from accelrt.backends import get_backend
        >>> from accelrt.testing._allocators import GeneralPathAllocator
        >>> a = GeneralPathAllocator(get_backend("cpu"), 0)
        >>> a.free(a.malloc(1000, 0)); a.stats()["allocation.all.allocated"]
        1
    """

    def _update_simple(self) -> None:
        super()._update_simple()
        self._fast = self._fast_malloc = False

    def _fast_flags(self) -> None:
        # free takes the general code (_free_locked) for every block, as with history on
        super()._fast_flags()
        self._fast_malloc = False
        self._free_slow = True
