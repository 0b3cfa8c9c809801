"""Make Numba (``numba.cuda``) allocate device memory through accelrt's caching allocator.

:class:`AccelrtEMMPlugin` is a Numba *External Memory Management* plugin (interface version
1): device allocations (``cuda.device_array``, ``to_device``, ...) become blocks of accelrt's
CUDA caching allocator, taken on accelrt's current stream of the device and returned to the
pool when Numba frees them, so they show up in ``acc.memory.memory_stats("cuda")`` and in
snapshots. Host (pinned/mapped) memory stays Numba's, as with every
``HostOnlyCUDAMemoryManager`` plugin. IPC handles come from Numba's ``GetIpcHandleMixin``
(the handle covers the allocator segment, with the block's offset).

Install the plugin before Numba touches the GPU, with :func:`use_accelrt_memory_manager`, or
set ``NUMBA_CUDA_MEMORY_MANAGER=accelrt.interop.numba``.

Numba is imported lazily: reading :class:`AccelrtEMMPlugin` without it raises
:class:`accelrt.BackendUnavailableError` saying what to install.

Example::

    >>> from accelrt.interop import numba as acc_numba
    >>> try:
    ...     acc_numba.use_accelrt_memory_manager()   # needs numba-cuda
    ... except RuntimeError:                        # BackendUnavailableError here
    ...     pass
"""

from __future__ import annotations

import contextlib
import ctypes
import warnings
from collections.abc import Iterator
from typing import Any

from ._common import BlockOwner, cuda_backend, missing

__all__ = ["AccelrtEMMPlugin", "use_accelrt_memory_manager"]  # noqa: F822 - lazy (PEP 562)

_INSTALL = "pip install numba-cuda (Numba's CUDA target)"
_plugin_class: type | None = None


def _numba_cuda() -> Any:
    try:
        with warnings.catch_warnings():
            # numba-cuda's import warns under newer NumPy (np.timedelta64("nat")); a warning
            # filter set to "error" must not turn Numba's own import noise into a failure
            warnings.simplefilter("ignore", DeprecationWarning)
            from numba import cuda  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError as exc:
        raise missing("numba.cuda", _INSTALL, exc) from exc
    return cuda


def _device_pointer(ptr: int) -> Any:
    """A device pointer in the form Numba's driver layer expects."""
    from numba.cuda.cudadrv import (  # type: ignore[import-untyped,import-not-found,unused-ignore]
        driver as drv)
    if getattr(drv, "USE_NV_BINDING", True) and hasattr(drv, "binding"):
        return drv.binding.CUdeviceptr(ptr)
    return ctypes.c_uint64(ptr)


def _build() -> type:
    from .._device import _lazy_init
    from .._stream import _current
    from ..memory._allocator import get_allocator

    cuda = _numba_cuda()
    mixin: Any = cuda.GetIpcHandleMixin
    base: Any = cuda.HostOnlyCUDAMemoryManager

    class AccelrtEMMPlugin(mixin, base):  # type: ignore[misc]
        """Numba EMM plugin backed by accelrt's CUDA caching allocator.

        Example::

            >>> from numba import cuda
            >>> from accelrt.interop.numba import AccelrtEMMPlugin
            >>> cuda.set_memory_manager(AccelrtEMMPlugin)   # doctest: +SKIP
        """

        #: The accelrt backend providing the memory (tests substitute a cpu backend).
        backend_name = "cuda"

        def _index(self) -> int:
            return int(self.context.device.id)

        def initialize(self) -> None:
            """Prepare accelrt's CUDA backend for this context's device."""
            super().initialize()
            b = cuda_backend(self.backend_name)
            _lazy_init(b, self._index())

        def memalloc(self, size: int) -> Any:
            """Allocate ``size`` bytes from accelrt's caching allocator on the current
            accelrt stream of the device; the block returns to the pool when Numba frees
            the pointer."""
            b = cuda_backend(self.backend_name)
            index = self._index()
            _lazy_init(b, index)
            alloc = get_allocator(b, index)
            ptr = alloc.malloc(int(size), _current(b, index)._handle)
            owner = BlockOwner(alloc, ptr, int(size))
            allocations = self.allocations
            if ptr:
                # Numba's context reset clears ``allocations``: dropping the owner frees it
                allocations[ptr] = owner

            def finalizer() -> None:
                if allocations.get(ptr) is owner:   # not a later block at the same address
                    del allocations[ptr]
                owner.free()

            return cuda.MemoryPointer(self.context, _device_pointer(ptr), int(size),
                                      finalizer=finalizer)

        def get_memory_info(self) -> Any:
            """``MemoryInfo(free, total)`` of the device as accelrt's backend reports it."""
            free, total = cuda_backend(self.backend_name).get_memory_info(self._index())
            return cuda.MemoryInfo(free=free, total=total)

        def reset(self) -> None:
            """Free every block this plugin handed out in the context (Numba resets a
            context only when its memory is no longer used) and release accelrt's unused
            cached blocks to the driver."""
            for owner in list(self.allocations.values()):
                if isinstance(owner, BlockOwner):
                    owner.free()          # idempotent: a later finalizer is a no-op
            super().reset()
            from ..memory._allocator import peek_allocator
            alloc = peek_allocator(self.backend_name, self._index())
            if alloc is not None:
                alloc.empty_cache()

        @contextlib.contextmanager
        def defer_cleanup(self) -> Iterator[None]:
            """Numba's critical section: accelrt frees to its pool (never to the driver)
            immediately, so nothing needs deferring beyond Numba's own host memory."""
            with super().defer_cleanup():
                yield

        @property
        def interface_version(self) -> int:
            """The EMM interface version this plugin implements (1)."""
            return 1

    AccelrtEMMPlugin.__module__ = __name__
    return AccelrtEMMPlugin


def __dir__() -> list[str]:
    # the lazy names of __all__ (PEP 562 __getattr__) too, as tab completion expects
    return sorted(set(globals()) | set(__all__))


def __getattr__(name: str) -> Any:
    global _plugin_class
    if name in ("AccelrtEMMPlugin", "_numba_memory_manager"):
        if _plugin_class is None:
            _plugin_class = _build()
        return _plugin_class
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def use_accelrt_memory_manager() -> type:
    """Install :class:`AccelrtEMMPlugin` with ``numba.cuda.set_memory_manager``.

    Call it before Numba creates a CUDA context (the first GPU operation).

    Returns:
        The plugin class.

    Raises:
        BackendUnavailableError: Numba's CUDA target is not installed.

    Example::

        >>> from accelrt.interop.numba import use_accelrt_memory_manager
        >>> try:
        ...     use_accelrt_memory_manager()
        ... except RuntimeError:   # no numba-cuda here
        ...     pass
    """
    cuda = _numba_cuda()
    plugin: type = __getattr__("AccelrtEMMPlugin")
    cuda.set_memory_manager(plugin)
    return plugin
