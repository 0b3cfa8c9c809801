"""Placeholder pass-through allocator, replaced by the caching allocator (issue 4).

Contract: see docs/architecture.md ("Caching allocator").
"""

from __future__ import annotations

import threading
from typing import Any

from .._errors import OutOfMemoryError

_lock = threading.Lock()
_allocators: dict[tuple[str, int], "DeviceCachingAllocator"] = {}


class DeviceCachingAllocator:
    def __init__(self, backend: Any, index: int, config: Any = None) -> None:
        self._b = backend
        self._index = index
        self._sizes: dict[int, int] = {}

    def malloc(self, size: int, stream: int) -> int:
        if size == 0:
            return 0
        ptr = self._b.malloc(self._index, size)
        if not ptr:
            raise OutOfMemoryError(f"out of memory allocating {size} bytes", size)
        self._sizes[ptr] = size
        return ptr

    def free(self, ptr: int) -> None:
        if ptr not in self._sizes:
            raise ValueError(f"pointer {ptr:#x} was not allocated by this allocator")
        del self._sizes[ptr]
        self._b.free(self._index, ptr)

    def record_stream(self, ptr: int, stream: int) -> None:
        pass


def get_allocator(backend: Any, index: int) -> DeviceCachingAllocator:
    key = (backend.name, index)
    a = _allocators.get(key)
    if a is None:
        with _lock:
            a = _allocators.setdefault(key, DeviceCachingAllocator(backend, index))
    return a


def peek_allocator(name: str, index: int) -> DeviceCachingAllocator | None:
    return _allocators.get((name, index))
