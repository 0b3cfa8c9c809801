"""What the caching allocator's components may use of it: :class:`AllocatorCore`.

The components (:mod:`._events` stream-ordered frees, :mod:`._expandable` expandable
segments, :mod:`._oom` the OOM reporter, :mod:`._pools` private pools, :mod:`._release`
release and garbage collection, :mod:`._segments` snapshots, :mod:`._history` and
:mod:`._stats` the history and statistics API) take the allocator typed as this protocol,
so ``mypy --strict`` refuses any other attribute; :class:`~._allocator.DeviceCachingAllocator`
satisfies it. Members keep the allocator's underscore names: they are the package's
interface, not the public one. Every member is guarded by the allocator's lock (``_lock``)
unless it says otherwise. :mod:`._fit` and :mod:`._fast` are the allocator's own paths and
take the class itself.

Example::

    >>> from accelrt.backends import get_backend
    >>> from accelrt.memory._allocator import DeviceCachingAllocator
    >>> from accelrt.memory._interface import AllocatorCore
    >>> core: AllocatorCore = DeviceCachingAllocator(get_backend("cpu"), 0)
    >>> core._device_total > 0
    True
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .._backend import Backend
    from ._block import Block, BlockPool
    from ._block_map import BlockMap
    from ._config import AllocatorConfig
    from ._events import StreamFrees
    from ._expandable import ExpandableSegments
    from ._history import History
    from ._lock import FastLock
    from ._pools import EndRouting, PrivatePools
    from ._stats import DeviceStats
    from ._uncached import UncachedRequests

__all__ = ["AllocatorCore"]


class AllocatorCore(Protocol):
    """The allocator as its components see it (see the module docstring)."""

    # ------------------------------------------------------------------ identity (immutable)
    @property
    def _b(self) -> Backend:
        """The backend owning the device."""

    @property
    def _index(self) -> int:
        """The device index."""

    @property
    def _name(self) -> str:
        """The backend's name."""

    @property
    def _device_total(self) -> int:
        """The device's total memory in bytes."""

    @property
    def _lock(self) -> FastLock:
        """The allocator's lock (not reentrant)."""

    # ------------------------------------------------------------------ state
    #: every block by address
    _blocks: BlockMap[Block]
    #: the default small and large block pools
    _small: BlockPool
    _large: BlockPool
    #: Block objects merged away, reused by splits
    _spares: list[Block]
    #: bytes of the segments held (PyTorch's total_allocated_memory)
    _total_reserved: int
    #: the memory fraction's limit in bytes (None: none)
    _allowed_max: int | None
    #: the statistics
    _stats: DeviceStats
    #: frees and pool releases queued by finalizers (appended without the lock)
    _gc_pending: deque[int | tuple[int, int] | EndRouting]
    #: private pools to empty after their queued release (a collected MemPool's)
    _gc_empty: deque[tuple[int, int]]
    #: the history recorder while recording, else None
    _history: History | None

    # ------------------------------------------------------------------ components
    @property
    def _stream_frees(self) -> StreamFrees: ...

    @property
    def _pools(self) -> PrivatePools: ...

    @property
    def _expandable_segments(self) -> ExpandableSegments: ...

    @property
    def _uncached(self) -> UncachedRequests:
        """The allocations made while caching was off."""

    # ------------------------------------------------------------------ settings
    @property
    def _cfg(self) -> AllocatorConfig:
        """The options in force."""

    _max_split_size: int
    _large_segment_size: int
    _gc_threshold: float
    _expandable: bool
    _page_reuse: bool
    #: which fast paths apply (recomputed by ``_update_simple``; a component that changes
    #: what they depend on calls it, or clears the flags it knows are off)
    _fast: bool
    _fast_malloc: bool

    # ------------------------------------------------------------------ operations
    def _update_simple(self) -> None:
        """Recompute the fast-path flags after a change of settings or components."""

    def _flush_deferred(self) -> None:
        """Complete a deferred free (lock held)."""

    def settle_locked(self) -> None:
        """Complete a deferred free and the queued finalizer frees (lock held)."""

    def _drain_pending_locked(self) -> None:
        """Complete the frees and pool releases queued by finalizers (lock held)."""

    def _cut_block(self, blk: Block, size: int, mapped: bool = True) -> Block:
        """Split ``blk`` after ``size`` bytes; the remainder, the one split."""

    def _merge(self, b: Block) -> tuple[Block, int, int]:
        """Merge free ``b`` with its free neighbours, the one merge."""

    def _insert_free(self, b: Block) -> None:
        """Add ``b`` to its pool's free list."""

    def _remove_free(self, b: Block) -> None:
        """Take ``b`` out of its pool's free list."""

    def _allocation_size(self, rounded: int) -> int:
        """The segment size a request of ``rounded`` bytes asks the device for."""

    def _block_at(self, ptr: Any) -> Block | None:
        """The block that starts at ``ptr``, or None."""

    def _bad_ptr(self, ptr: object, blk: Block | None) -> Exception:
        """The error for a free or record of a pointer that is no live block."""
