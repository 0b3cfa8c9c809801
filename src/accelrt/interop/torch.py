"""accelrt's caching allocator inside PyTorch, and arrays <-> tensors.

:func:`use_accelrt_allocator` installs accelrt's CUDA caching allocator, with any allocator
settings (the low-fragmentation policy ``"expandable_segments:True,page_reuse:True"``
included), as PyTorch's CUDA allocator through ``torch.cuda.memory.CUDAPluggableAllocator``: a
small shim built with the package (``accelrt/interop/_torch_shim.cpp``) forwards each of
PyTorch's allocations and frees (size, device, stream) to accelrt. Afterwards PyTorch's memory
is accelrt's: ``acc.cuda.memory_stats()``, ``memory_snapshot()``, ``_record_memory_history``,
``accelrt memory viz`` and ``accelrt memory tune`` describe it.

:func:`to_torch` and :func:`from_torch` share memory both ways through DLPack, with the
consumer's stream handed to the producer, and keep the other side's memory alive.

PyTorch is imported only when these functions run; without it they raise
:class:`accelrt.BackendUnavailableError` saying what to install.

Example::

    >>> from accelrt.interop import torch as acc_torch
    >>> try:
    ...     acc_torch.use_accelrt_allocator()    # needs PyTorch with CUDA, before its first
    ... except RuntimeError:                      # CUDA allocation
    ...     pass
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from .._errors import AcceleratorError, BackendUnavailableError, type_shown
from .._fork import reinit_after_fork
from .._typing import DeviceLike
from . import _shim
from ._common import cuda_backend, missing
from ._dlpack_in import from_dlpack

if TYPE_CHECKING:
    from .._array import Array
    from ..memory._config import AllocatorConfig

__all__ = ["from_torch", "to_torch", "use_accelrt_allocator"]

_INSTALL = "pip install torch (or pip install accelrt[torch]); see https://pytorch.org"

_lock = reinit_after_fork(threading.Lock())
_in_use: Any = None   # guarded by _lock: the CUDAPluggableAllocator installed into PyTorch


def _torch() -> Any:
    try:
        import torch  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError as exc:
        raise missing("PyTorch", _INSTALL, exc) from exc
    return torch


def use_accelrt_allocator(device: int | None = None, *, settings: str | None = None,
                          backend: str = "cuda") -> Any:
    """Make accelrt's CUDA caching allocator PyTorch's CUDA allocator.

    Call it before PyTorch's first CUDA allocation: PyTorch can change its allocator only
    while its own is unused, and only once per process (there is no way back). A later call
    keeps the installed allocator and applies its ``device`` and ``settings``. Afterwards an
    allocation accelrt cannot serve raises a ``RuntimeError`` in PyTorch carrying accelrt's
    message (``"CUDA out of memory. Tried to allocate ..."``): PyTorch's pluggable allocator
    has no out-of-memory path of its own.

    Args:
        device: serve only this CUDA device index (PyTorch asking for another gets a
            ``RuntimeError``); ``None`` serves every device.
        settings: allocator settings to apply first, in ``PYTORCH_CUDA_ALLOC_CONF`` syntax
            (e.g. ``"expandable_segments:True,page_reuse:True"``); ``None`` keeps accelrt's
            current ones (``ACCELRT_ALLOC_CONF``).
        backend: the accelrt backend that provides the memory (``"cuda"``).

    Returns:
        PyTorch's ``torch.cuda.memory.CUDAPluggableAllocator`` now in use.

    Raises:
        BackendUnavailableError: PyTorch is not installed or has no CUDA, accelrt's CUDA
            backend is not available, or the shim was not built (the message says how to
            rebuild).
        ValueError: malformed ``settings``.
        AcceleratorError: PyTorch already initialised its CUDA allocator (its reason and the
            fix are in the message). Nothing changed, settings included.
    """
    if settings is not None and not isinstance(settings, str):
        raise TypeError(f"settings must be a str or None, got {type_shown(settings)}")
    if device is not None and (not isinstance(device, int) or isinstance(device, bool)):
        raise TypeError(f"device must be an int or None, got {type_shown(device)}")
    from ..memory import _allocator, _config
    # the settings are parsed once (a bad value warns once) and applied at the end; no other
    # change of the settings comes between, as in set_allocator_settings
    with _config._set_lock:
        cfg = None
        if settings is not None:   # checked as set_allocator_settings does, before any change
            try:
                cfg = _config.parse_config(settings, _config.get_config())
                _allocator._check_config_for_all(cfg)
            except ValueError as exc:
                raise ValueError(f"use_accelrt_allocator(settings={settings!r}): "
                                 f"{exc}") from None
        allocator = _install_shim(_torch(), device, backend, cfg)
    if cfg is not None:   # (without the locks: a showwarning hook may set the settings)
        _allocator._warn_fallbacks()
    return allocator


def _install_shim(torch: Any, device: int | None, backend: str,
                  cfg: AllocatorConfig | None) -> Any:
    """:func:`use_accelrt_allocator` after its argument checks: the shim into PyTorch, then
    ``cfg`` (the parsed settings, ``None`` to keep them); the caller holds
    ``memory._config._set_lock``."""
    from ..memory import _config
    memory: Any = getattr(getattr(torch, "cuda", None), "memory", None)
    pluggable = getattr(memory, "CUDAPluggableAllocator", None)
    if pluggable is None or not torch.cuda.is_available():
        raise BackendUnavailableError(
            f"PyTorch {getattr(torch, '__version__', '?')} has no usable CUDA (a CPU-only "
            f"build, or no GPU); install a CUDA build of PyTorch on a machine with a GPU")
    cuda_backend(backend)
    path = _shim.shim_path()
    if path is None:
        raise _shim._not_built()
    global _in_use
    with _lock:
        if _in_use is not None:
            # PyTorch already allocates through the shim (an earlier call); its pluggable
            # allocator cannot be swapped again, so only the shim's target changes
            allocator = _in_use
            _shim.install(backend=backend, device=device, raise_on_failure=True)
        else:
            previous = _shim.install(backend=backend, device=device, raise_on_failure=True)
            try:
                allocator = pluggable(path, _shim.MALLOC, _shim.FREE)
                memory.change_current_allocator(allocator)
            except RuntimeError as exc:
                _shim.restore(previous)
                if isinstance(exc, AcceleratorError):
                    raise
                raise AcceleratorError(
                    f"PyTorch refused to change its CUDA allocator ({exc}): it already "
                    f"allocated CUDA memory with its own. Call "
                    f"accelrt.interop.torch.use_accelrt_allocator() at the start of the "
                    f"program, before any CUDA tensor is made") from exc
            _in_use = allocator
        if cfg is not None:   # PyTorch allocates nothing before its first tensor
            _config._install(cfg)
    return allocator


def to_torch(array: Any) -> Any:
    """A ``torch.Tensor`` sharing an :class:`accelrt.Array`'s memory (``torch.from_dlpack``).

    PyTorch passes its current stream to the array's ``__dlpack__``, which makes that stream
    wait for the array's pending work. A cpu-backend array (host memory) gives a CPU tensor.
    The tensor keeps the array's memory alive.

    Raises:
        BackendUnavailableError: PyTorch is not installed.
        TypeError: ``array`` is not an :class:`accelrt.Array`.
    """
    from .._array import Array
    if not isinstance(array, Array):
        raise TypeError(f"to_torch() takes an accelrt.Array, got {type_shown(array)}")
    return _torch().utils.dlpack.from_dlpack(array)


def _device_arg(device: Any) -> Any:
    """``from_torch``'s ``device`` as accelrt reads it: a ``torch.device``, or any object of
    its shape (a str ``type`` and an ``index`` that is an int or ``None``), is the
    :class:`accelrt.device` of that type and index; anything else is returned as it is, for
    accelrt's device normaliser to read or refuse. torch is not imported.

    Example::

        >>> from types import SimpleNamespace
        >>> from accelrt.interop.torch import _device_arg
        >>> _device_arg(SimpleNamespace(type="cpu", index=None)), _device_arg("cpu:0")
        (device(type='cpu'), 'cpu:0')
    """
    from .._device import device as _device_cls
    if device is None or isinstance(device, (int, str, bytes, _device_cls)):
        return device
    typ, index = getattr(device, "type", None), getattr(device, "index", False)
    if isinstance(typ, str) and (index is None or (isinstance(index, int)
                                                   and not isinstance(index, bool))):
        return _device_cls(typ, index)
    return device


def from_torch(tensor: Any, device: DeviceLike = None) -> Array:
    """An :class:`accelrt.Array` sharing a ``torch.Tensor``'s memory, without a copy.

    accelrt's current stream of the tensor's device is passed to the tensor's ``__dlpack__``,
    so it waits for PyTorch's pending work on the tensor. A CPU tensor gives a cpu-backend
    array (``cpu:0`` unless ``device`` names another); a CUDA tensor an array on the ``cuda``
    backend's device of the tensor. ``device`` may also be a ``torch.device`` (any object with
    its ``type`` and ``index``), read as the accelrt device of that type and index. The array keeps the tensor's memory alive, exported
    through ``tensor.detach()`` so that ``tensor.set_(...)`` cannot free it (resizing the tensor
    in place still can: don't).

    Raises:
        BackendUnavailableError: PyTorch is not installed.
        TypeError: ``tensor`` is not a ``torch.Tensor``.
        BufferError: the tensor is not contiguous, requires grad (PyTorch's refusal, "Can't
            export tensors that require gradient, use tensor.detach()"), has its negative or
            conjugate bit set (``.resolve_neg()``, ``.resolve_conj()``), is exported read-only
            (``torch.utils.dlpack.ReadOnlyTensorWrapper``), has a dtype accelrt has not
            (bfloat16, float8), or ``device`` is not the tensor's (see
            :func:`accelrt.interop._dlpack_in.from_dlpack`).
    """
    torch = _torch()
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"from_torch() takes a torch.Tensor, got {type_shown(tensor)}")
    return from_dlpack(tensor, _device_arg(device))
