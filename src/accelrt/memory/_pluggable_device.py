"""The caching allocator's stand-in for a device whose allocator was replaced by
:func:`~accelrt.memory.change_current_allocator`: every malloc and free goes to the
:class:`~accelrt.memory.PluggableAllocator`'s library, as PyTorch's ``CUDAPluggableAllocator``.

A module of its own (not in :mod:`accelrt.memory._pluggable`) because it subclasses
:class:`~accelrt.memory._replaced.ReplacedAllocator`: the compiled build (``setup.py``)
compiles both, while ``_pluggable`` (ctypes, the process-wide registry) stays pure Python.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, SupportsIndex

from .._errors import OutOfMemoryError
from ._oom import format_size
from ._pluggable import PluggableAllocator
from ._replaced import ReplacedAllocator

if TYPE_CHECKING:
    from .._backend import Backend

__all__ = ["PluggableDeviceAllocator"]


class PluggableDeviceAllocator(ReplacedAllocator):
    """What :func:`~accelrt.memory._allocator.get_allocator` returns for a device of a backend
    whose allocator was replaced by :func:`change_current_allocator`: every malloc and free
    goes to the library (PyTorch's ``CUDAPluggableAllocator`` as the current allocator)."""

    allocator_backend = "pluggable"
    unsupported_name = "PluggableAllocator"

    def __init__(self, backend: Backend, index: int, plug: PluggableAllocator) -> None:
        super().__init__(backend, index)
        self._plug = plug

    # allocation: straight to the library
    def malloc(self, size: SupportsIndex, stream: int = 0) -> int:
        size = self.check_request(size)
        if size == 0:
            return 0
        ptr = self._plug._raw_alloc(self._b, self._index, size, stream)
        if not ptr:
            raise OutOfMemoryError(
                f"{self._name.upper()} out of memory. Tried to allocate {format_size(size)}. The "
                f"pluggable allocator {self._plug._what} returned NULL for device "
                f"{self._name}:{self._index}.", size, 0, self._device_total)
        return ptr

    def free(self, ptr: int, nonblocking: bool = False) -> None:
        self._plug._raw_free(ptr)

    def free_from_finalizer(self, ptr: int) -> None:
        try:
            self._plug._raw_free(ptr)
        except Exception:  # noqa: BLE001 - a finalizer must not raise
            import logging   # the "accelrt" logger; with no handler it reaches stderr
            logging.getLogger("accelrt.memory").exception(
                "Exception ignored in the free of pointer %#x by a pluggable allocator:", ptr)

    def record_stream(self, ptr: int, stream: int, device: int | None = None) -> None:
        """No-op, as PyTorch's pluggable allocator without a record_stream function."""

    def empty_cache(self, pool_id: tuple[int, int] | None = None) -> None:
        """No-op: nothing is cached."""

    def set_memory_fraction(self, fraction: object) -> None:
        """No-op, as PyTorch's pluggable allocator without a memory-fraction function."""

    def get_memory_fraction(self) -> float:
        raise self.unsupported("getMemoryFraction")

    # statistics (the library counts nothing: ReplacedAllocator's getters raise), snapshots,
    # history, observers: PyTorch's errors
    def reset_peak_stats(self) -> None:
        raise self.unsupported("resetPeakStats")

    def reset_accumulated_stats(self) -> None:
        raise self.unsupported("resetAccumulatedStats")

    def snapshot_segments(self, pool_id: tuple[int, int] | None = None) -> list[dict[str, Any]]:
        raise self.unsupported("snapshot")

    def trace_entries(self) -> list[dict[str, Any]]:
        raise self.unsupported("snapshot")

    # private pools: the library has no pool functions, so these do nothing (as PyTorch's)
    def begin_allocate_to_pool(self, pool_id: tuple[int, int],
                               stream_filter: Callable[[int], bool] | None = None,
                               capture: bool = False) -> None:
        """No-op."""

    def end_allocate_to_pool(self, pool_id: tuple[int, int]) -> None:
        """No-op."""

    def __repr__(self) -> str:
        return f"<pluggable allocator {self._plug._what} on {self._name}:{self._index}>"
