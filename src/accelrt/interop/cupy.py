"""Make CuPy allocate device memory through accelrt's caching allocator.

After :func:`use_accelrt_allocator`, every CuPy allocation is a block of accelrt's CUDA caching
allocator, taken on CuPy's current stream (so accelrt's per-stream reuse rules apply to
CuPy's work), and freed back to accelrt when CuPy drops it. Allocations appear in
``acc.memory.memory_stats("cuda")``, snapshots and ``memory_summary``; one pool serves both
libraries. :func:`restore` puts CuPy's previous allocator back.

CuPy is imported only when these functions run; without it they raise
:class:`accelrt.BackendUnavailableError` saying what to install.

Example::

    >>> from accelrt.interop import cupy as acc_cupy
    >>> try:
    ...     handle = acc_cupy.use_accelrt_allocator()   # needs CuPy and a GPU
    ... except RuntimeError:                          # BackendUnavailableError here
    ...     handle = None
    >>> if handle is not None:
    ...     handle.restore()
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from .._device import _lazy_init
from .._fork import reinit_after_fork
from ._common import BlockOwner, cuda_backend, missing
from .._errors import type_shown

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["AccelrtCupyAllocator", "AllocatorHandle", "restore", "use_accelrt_allocator"]

_INSTALL = 'pip install cupy-cuda12x (or cupy-cuda13x), matching your CUDA driver'

_lock = reinit_after_fork(threading.Lock())
_active: list[AllocatorHandle] = []   # guarded by _lock: active installs, innermost last


def _cupy() -> Any:
    try:
        import cupy  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError as exc:
        raise missing("CuPy", _INSTALL, exc) from exc
    return cupy


class AccelrtCupyAllocator:
    """The callable handed to ``cupy.cuda.set_allocator``: ``size -> cupy MemoryPointer``.

    Args:
        device: the CUDA device index to allocate on; ``None`` (recommended) follows CuPy's
            current device.
        backend: the accelrt backend that provides the memory: ``"cuda"`` (another name only
            makes sense with a stand-in for CuPy, in tests).
    """

    def __init__(self, device: int | None = None, *, backend: str = "cuda") -> None:
        if device is not None and (not isinstance(device, int) or isinstance(device, bool)):
            raise TypeError(f"device must be an int or None, got {type_shown(device)}")
        if not isinstance(backend, str):
            raise TypeError(f"backend must be a backend name, got {type_shown(backend)}")
        self.device = device
        self.backend = backend
        self._known: set[int] = set()   # stream handles already validated

    def __call__(self, size: int) -> Any:
        cupy = _cupy()
        from ..memory._allocator import get_allocator
        b = cuda_backend(self.backend)
        current = cupy.cuda.runtime.getDevice()
        index = current if self.device is None else self.device
        if index != current:
            raise RuntimeError(f"accelrt's CuPy allocator was installed for device "
                               f"{self.device} but CuPy asked for memory on device {current}; "
                               "install it with device=None to follow CuPy's current device")
        _lazy_init(b, index)
        stream_ptr = int(cupy.cuda.get_current_stream().ptr)
        # CuPy's null stream (0) is the device's default stream in accelrt's terms
        handle = stream_ptr or b.default_stream(index)
        if handle not in self._known:
            # registers CuPy's stream with the backend (cuda tracks foreign streams)
            if not b.stream_is_valid(index, handle):
                raise ValueError(f"CuPy's current stream {handle:#x} is not a live stream of "
                                 f"{b.name}:{index}")
            self._known.add(handle)
        alloc = get_allocator(b, index)
        ptr = alloc.malloc(int(size), handle)
        owner = BlockOwner(alloc, ptr, int(size))
        mem = cupy.cuda.UnownedMemory(ptr, int(size), owner, index)
        return cupy.cuda.MemoryPointer(mem, 0)

    def __repr__(self) -> str:
        where = "current device" if self.device is None else f"cuda:{self.device}"
        return f"<accelrt allocator for CuPy ({where})>"


class AllocatorHandle:
    """Returned by :func:`use_accelrt_allocator`; :meth:`restore` (or leaving a ``with``
    block) reinstates CuPy's previous allocator."""

    def __init__(self, previous: Any) -> None:
        self.previous = previous
        self._active = True

    def restore(self) -> None:
        """Put back the allocator CuPy had before (idempotent)."""
        with _lock:
            if not self._active:
                return
            self._active = False
            if self in _active:
                _active.remove(self)
        _cupy().cuda.set_allocator(self.previous)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()


def _current_allocator(cupy: Any) -> Any:
    get = getattr(cupy.cuda, "get_allocator", None)
    if get is not None:
        return get()
    return cupy.get_default_memory_pool().malloc


def use_accelrt_allocator(device: int | None = None, *,
                          backend: str = "cuda") -> AllocatorHandle:
    """Route CuPy's device allocations through accelrt's CUDA caching allocator.

    Args:
        device: allocate only for this CUDA device index (CuPy asking for another raises);
            ``None`` follows CuPy's current device.
        backend: the accelrt backend providing the memory (``"cuda"``; see
            :class:`AccelrtCupyAllocator`).

    Returns:
        An :class:`AllocatorHandle`; call ``restore()`` or use it in ``with``.

    Raises:
        BackendUnavailableError: CuPy or accelrt's CUDA backend is not available.

    Example::

        >>> from accelrt.interop.cupy import use_accelrt_allocator
        >>> try:
        ...     with use_accelrt_allocator():
        ...         pass                    # cupy.empty(...) now comes from accelrt
        ... except RuntimeError:           # no CuPy or no GPU here
        ...     pass
    """
    cupy = _cupy()
    allocator = AccelrtCupyAllocator(device, backend=backend)
    cuda_backend(backend)
    with _lock:
        handle = AllocatorHandle(_current_allocator(cupy))
        _active.append(handle)
        cupy.cuda.set_allocator(allocator)
    return handle


def restore() -> None:
    """Undo the most recent :func:`use_accelrt_allocator` that is still active (no-op if
    none is).

    Example::

        >>> from accelrt.interop.cupy import restore
        >>> restore()
    """
    with _lock:
        handle = _active[-1] if _active else None
    if handle is not None:
        handle.restore()
