"""Release and garbage-collection policies of the caching allocator.

PyTorch's ways of giving cached memory back to the device: ``release_available_cached_blocks``
(free oversize blocks before a retry), ``release_cached_blocks`` (``empty_cache`` and the last
retry), and the garbage collector that frees the oldest cached segments once reserved memory
passes ``garbage_collection_threshold`` of the memory-fraction limit.

Example::

    >>> from accelrt.backends import get_backend
    >>> from accelrt.memory._allocator import DeviceCachingAllocator
    >>> a = DeviceCachingAllocator(get_backend("cpu"), 0)
    >>> a.free(a.malloc(512, 0)); a.memory_reserved()
    2097152
    >>> a.empty_cache(); a.stats()["num_device_free"]
    1
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._block import (
    ADDR_MASK,
    DEFAULT_POOL,
    KEY_SHIFT,
    Block,
    BlockPool,
    fl_iter_ge,
    fl_iter_lt,
)
from ._config import SIZE_MAX
from ._history import CTX_ALL, capture_frames

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._backend import Backend
    from ._block import PrivatePool
    from ._stats import DeviceStats

__all__ = ["ReleaseMixin"]


class ReleaseMixin:
    """Release/GC methods of the caching allocator (called with its ``_lock`` held).

    Example::

        >>> from accelrt.backends import get_backend
        >>> from accelrt.memory._allocator import DeviceCachingAllocator
        >>> a = DeviceCachingAllocator(get_backend("cpu"), 0)
        >>> a.empty_cache(); a.memory_reserved()
        0
    """

    _b: Backend
    _index: int
    _blocks: dict[int, Block]
    _stats: DeviceStats
    _small: BlockPool
    _large: BlockPool
    _max_split_size: int
    _history: bool
    _ctx: int
    _captures: list[tuple[tuple[int, int], Callable[[int], bool] | None]]
    _freeable: dict[tuple[int, int], PrivatePool]
    _private: dict[tuple[int, int], PrivatePool]
    _total_reserved: int
    _allowed_max: int | None
    _gc_threshold: float

    if TYPE_CHECKING:  # provided by the allocator or another mixin
        def _remove_free(self, b: Block) -> None: ...
        def _record(self, action: str, addr: int, size: int, stream: int,
                    frames: list[dict[str, Any]] | None, device_free: int | None = None) -> None: ...
        def _synchronize_and_free_events(self, only: PrivatePool | None) -> None: ...
        def _unmap_block(self, blk: Block) -> Block | None: ...
        def _release_expandable_segment(self, u: Block) -> None: ...
        def _raw_free(self, blk: Block) -> None: ...

    def _release_block(self, blk: Block) -> None:
        """cudaFree of a whole free unsplit non-expandable segment (in its free list)."""
        self._remove_free(blk)
        st = self._stats
        size = blk.size
        st.num_device_free += 1
        if self._history:
            self._record("segment_free", blk.addr, size, blk.stream, capture_frames()
                         if self._ctx >= CTX_ALL else blk.seg_frames)
        self._raw_free(blk)
        del self._blocks[blk.addr]
        self._total_reserved -= size
        pool = blk.pool
        if pool.owner is not None:
            pool.owner.reserved -= size
        ti = pool.type_index
        st.segment[0].decrease(1)
        st.segment[ti].decrease(1)
        st.reserved_bytes[0].decrease(size)
        st.reserved_bytes[ti].decrease(size)
        if size >= self._max_split_size:
            st.oversize_segments.decrease(1)

    def _release_available_cached_blocks(self, pool: BlockPool, stream: int,
                                         rounded: int) -> bool:
        mss = self._max_split_size
        if mss >= SIZE_MAX:
            return False
        fl = pool.free.get(stream)
        if not fl:
            return False
        target = max(mss, rounded)
        key = next(fl_iter_ge(fl, target << KEY_SHIFT), -1)
        if key >= 0:
            blk = self._blocks[key & ADDR_MASK]
            if blk.exp is None:
                if blk.prev is None and blk.next is None:
                    self._release_block(blk)
                    return True
                return False
        # No single block is large enough: free oversize blocks, largest first.
        released = 0
        for k in list(fl_iter_lt(fl, target << KEY_SHIFT)):
            if released >= target:
                break
            blk = self._blocks[k & ADDR_MASK]
            if blk.size < mss:
                break
            if blk.exp is None and blk.prev is None and blk.next is None:
                released += blk.size
                self._release_block(blk)
        return released >= target

    def _release_cached_blocks(self, pool_id: tuple[int, int]) -> bool:
        if pool_id == DEFAULT_POOL and not self._captures:
            self._synchronize_and_free_events(None)
            self._release_blocks(self._large)
            self._release_blocks(self._small)
        for pid in list(self._freeable):
            pp = self._freeable[pid]
            if pool_id != DEFAULT_POOL:
                if pid != pool_id:
                    continue
                self._synchronize_and_free_events(pp)
            self._release_blocks(pp.small)
            self._release_blocks(pp.large)
            if pp.reserved == 0:
                del self._private[pid]
                del self._freeable[pid]
        return True

    def _release_blocks(self, pool: BlockPool) -> None:
        to_unmap: list[Block] = []
        for stream in sorted(pool.free):
            for key in list(pool.free[stream]):
                blk = self._blocks[key & ADDR_MASK]
                if blk.exp is not None:
                    to_unmap.append(blk)
                elif blk.prev is None and blk.next is None:
                    self._release_block(blk)
        for blk in to_unmap:
            u = self._unmap_block(blk)
            if u is not None:
                self._release_expandable_segment(u)
        # reservations left fully unmapped earlier (page_reuse) go back as well
        for stream in sorted(pool.unmapped):
            for addr in list(pool.unmapped[stream]):
                u = self._blocks[addr]
                if u.prev is None and u.next is None:
                    self._release_expandable_segment(u)

    def _garbage_collect(self) -> None:
        assert self._allowed_max is not None
        gc_threshold = int(self._gc_threshold * self._allowed_max)
        if self._total_reserved <= gc_threshold:
            return
        target = self._total_reserved - gc_threshold
        pool = self._large
        calls = pool.gc_calls

        def candidates() -> list[Block]:
            out = []
            for stream in sorted(pool.free):
                for key in pool.free[stream]:
                    b = self._blocks[key & ADDR_MASK]
                    if b.prev is None and b.next is None:
                        out.append(b)
            return out

        cands = candidates()
        total_age = sum(calls - b.gc_base for b in cands)
        count = len(cands)
        if count == 0:
            return
        reclaimed = 0
        freed = True
        while reclaimed < target and freed and count > 0:
            threshold = total_age / count
            freed = False
            for b in candidates():
                age = calls - b.gc_base
                if b.exp is None and age >= threshold:
                    freed = True
                    reclaimed += b.size
                    total_age -= age
                    count -= 1
                    self._release_block(b)
