"""The PyTorch allocator shim (``accelrt.interop._shim``) forwarding to a cpu backend's
allocators for a test, driven through its C entry points with ctypes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from accelrt import backends
from accelrt.interop import _shim
from accelrt.memory._allocator import get_allocator

__all__ = ["reset_shim", "shim_forwarding_to"]


def reset_shim(backend: str, devices: int) -> None:
    """Uninstall the shim and empty the caches of ``backend``'s first ``devices`` devices."""
    _shim.uninstall()
    b = backends.get_backend(backend)
    for i in range(devices):
        get_allocator(b, i).empty_cache()


@contextmanager
def shim_forwarding_to(backend: str, devices: int) -> Iterator[Any]:
    """The loaded shim, installed for ``backend`` (NULL on failure, as for ctypes callers);
    :func:`reset_shim` afterwards."""
    lib = _shim.load()
    _shim.install(backend=backend)
    try:
        yield lib
    finally:
        reset_shim(backend, devices)
