"""A pluggable allocator over numpy buffers, for the tests that swap a device's allocator or
give a ``MemPool`` one (torch's ``CUDAPluggableAllocator`` built from two functions)."""

from __future__ import annotations

import numpy as np

from accelrt.memory import PluggableAllocator

__all__ = ["numpy_allocator"]


def numpy_allocator() -> tuple[PluggableAllocator, dict[int, np.ndarray]]:
    """A :class:`~accelrt.memory.PluggableAllocator` (``from_callables``) whose memory is numpy
    buffers, and the buffers it has handed out and not had back, by address (empty once every
    block it made is freed)."""
    held: dict[int, np.ndarray] = {}

    def alloc(size: int, device: int, stream: int) -> int:
        buf = np.zeros(size, np.uint8)
        held[buf.ctypes.data] = buf
        return int(buf.ctypes.data)

    def free(ptr: int, size: int, device: int, stream: int) -> None:
        del held[ptr]

    return PluggableAllocator.from_callables(alloc, free), held
