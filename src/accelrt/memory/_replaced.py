"""The base of the allocators that replace the caching allocator of a device.

Two allocators take a device's memory requests in place of
:class:`~._allocator.DeviceCachingAllocator`: the device's stream-ordered pool
(``backend:cudaMallocAsync``, :mod:`._malloc_async`) and a library's functions
(:func:`~accelrt.memory.change_current_allocator`, :mod:`._pluggable_device`). Both keep no
blocks of their own, so they share what :class:`ReplacedAllocator` declares once: the check
of a request's size, PyTorch's "does not yet support" errors for what needs blocks (history,
OOM observers), the statistics getters over the few counters the memory behind them keeps
(``pool_stats``, ``pool_counter``: PyTorch's error where there are none), and private pools
that do nothing (a further reference, a release, a count of 0), as PyTorch's. Each subclass
names itself (``unsupported_name``) and defines the rest.

A module of its own because it subclasses the compiled allocator (``setup.py``'s
``COMPILED`` lists it with its subclasses).

Example::

    >>> from accelrt.backends.cpu import CpuBackend
    >>> from accelrt.memory._malloc_async import MallocAsyncAllocator
    >>> from accelrt.memory._replaced import ReplacedAllocator
    >>> a = MallocAsyncAllocator(CpuBackend(name="replaceddoc"), 0)
    >>> isinstance(a, ReplacedAllocator), a.pool_use_count((1, 1))
    (True, 0)
    >>> a.check_request(0)
    0
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any, SupportsIndex

from .._errors import OutOfMemoryError
from ._allocator import _MAX_ALLOC, DeviceCachingAllocator, _check_size

__all__ = ["ReplacedAllocator"]


class ReplacedAllocator(DeviceCachingAllocator):
    """An allocator that hands a device's requests to someone else (see the module
    docstring); not used directly."""

    #: how PyTorch's errors name this allocator ("cudaMallocAsync", "PluggableAllocator")
    unsupported_name: str = "this allocator"

    def unsupported(self, what: str) -> RuntimeError:
        """PyTorch's error for ``what`` (a C++ function name) that this allocator lacks."""
        return RuntimeError(f"{self.unsupported_name} does not yet support {what}. If you "
                            "need it, please file an issue describing your use case.")

    def check_request(self, size: SupportsIndex) -> int:
        """The size of a ``malloc`` request as an int (0 asks for nothing).

        Raises:
            TypeError: ``size`` is not an int.
            ValueError: ``size`` is negative.
            OutOfMemoryError: ``size`` is 1 EB or more.
        """
        n = size if type(size) is int else _check_size(size)
        if n < 0:
            raise ValueError(f"allocation size must be >= 0, got {n}")
        if n >= _MAX_ALLOC:
            raise OutOfMemoryError(f"{self._name.upper()} out of memory. Tried to allocate more than "
                                   "1EB memory.", n, 0, self._device_total)
        return n

    # ------------------------------------------------------------------ statistics
    # Only what the memory behind the allocator counts (the driver pool's used and reserved
    # bytes, with their high-water marks, named as CUDA's pool attributes): the getters read
    # it through ``pool_stats`` and ``pool_counter``, which a subclass defines.
    def pool_stats(self) -> dict[str, int]:
        """PyTorch's flat keys, the ones this allocator counts filled in."""
        raise self.unsupported("getDeviceStats")

    def pool_counter(self, name: str) -> int:
        """One counter: ``used_mem_current``, ``used_mem_high``, ``reserved_mem_current`` or
        ``reserved_mem_high``."""
        raise self.unsupported("getDeviceStats")

    def stats(self) -> dict[str, int]:
        """PyTorch's keys; only what the memory behind the allocator counts is non-zero."""
        return self.pool_stats()

    def sorted_stats(self) -> collections.OrderedDict[str, int]:
        vals = self.pool_stats()
        return collections.OrderedDict((k, vals[k]) for k in sorted(vals))

    def memory_allocated(self) -> int:
        return self.pool_counter("used_mem_current")

    def max_memory_allocated(self) -> int:
        return self.pool_counter("used_mem_high")

    def memory_reserved(self) -> int:
        return self.pool_counter("reserved_mem_current")

    def max_memory_reserved(self) -> int:
        return self.pool_counter("reserved_mem_high")

    # ------------------------------------------------------------------ what needs blocks
    def record_history(self, *args: Any, **kwargs: Any) -> None:
        raise self.unsupported("recordHistory")

    def attach_oom_observer(self, fn: Callable[[int, int, int, int], None]) -> None:
        raise self.unsupported("attachOutOfMemoryObserver")

    # ------------------------------------------------------------------ private pools
    def create_pool(self, pool_id: tuple[int, int], *, no_split: bool = False,
                    allocator: Any = None, use_on_oom: bool = False) -> None:
        """No-op: this allocator serves every allocation itself."""

    def release_pool(self, pool_id: tuple[int, int]) -> None:
        """No-op (PyTorch's releasePool does nothing here)."""

    def release_pool_from_finalizer(self, pool_id: tuple[int, int], *,
                                    empty_cache: bool = False) -> None:
        """No-op."""

    def end_allocate_to_pool_from_finalizer(self, pool_id: tuple[int, int]) -> None:
        """:meth:`end_allocate_to_pool`, which blocks no finalizer here (a re-entrant lock,
        or nothing to do)."""
        self.end_allocate_to_pool(pool_id)

    def pool_use_count(self, pool_id: tuple[int, int]) -> int:
        return 0
