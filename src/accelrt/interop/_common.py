"""Shared pieces of the CuPy and Numba plugins: the CUDA backend, and an owner object that
returns a block to accelrt's caching allocator when the foreign library lets go of it.

Example::

    >>> import accelrt as acc
    >>> from accelrt.interop._common import BlockOwner
    >>> from accelrt.memory._allocator import get_allocator
    >>> alloc = get_allocator(acc.backends.get_backend("cpu"), 0)
    >>> owner = BlockOwner(alloc, alloc.malloc(512, 0), 512)
    >>> owner.free()   # or let it be collected
"""

from __future__ import annotations

import sys
import weakref
from typing import Any

from .._errors import BackendUnavailableError

__all__ = ["BlockOwner", "cuda_backend", "missing"]


def missing(library: str, install: str, exc: BaseException) -> BackendUnavailableError:
    """The error raised when an optional library is not importable."""
    return BackendUnavailableError(
        f"{library} is not available ({type(exc).__name__}: {exc}); install it with: "
        f"{install}")


def cuda_backend(name: str = "cuda") -> Any:
    """accelrt's CUDA backend, or the backend ``name`` (tests substitute the cpu backend);
    ``BackendUnavailableError`` saying why if it cannot be used."""
    from .. import _backend
    return _backend.get_backend(name)


def _free(alloc: Any, ptr: int) -> None:
    if sys.is_finalizing():
        return   # the process is exiting: the driver reclaims everything
    alloc.free(ptr, True)   # runs from a finalizer: never block on the allocator's lock


class BlockOwner:
    """Owns one block of accelrt's caching allocator; frees it exactly once, when
    :meth:`free` is called or the owner is collected.

    Attributes:
        ptr: the block's address.
        size: the requested size in bytes.
    """

    __slots__ = ("__weakref__", "_fin", "ptr", "size")

    def __init__(self, alloc: Any, ptr: int, size: int) -> None:
        self.ptr = ptr
        self.size = size
        self._fin = weakref.finalize(self, _free, alloc, ptr) if ptr else None

    def free(self) -> None:
        """Return the block to the allocator now (idempotent)."""
        if self._fin is not None:
            self._fin()

    def __call__(self) -> None:   # usable as a Numba finalizer
        self.free()

    def __repr__(self) -> str:
        return f"<accelrt block {self.ptr:#x} ({self.size} bytes)>"
