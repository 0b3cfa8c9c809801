"""What every part of a device module shares: the backend it is bound to, whether that
backend can be used here, and its device arguments (through :mod:`._args`, the one normaliser).

:class:`DeviceModule` (in :mod:`._module`) is this base with the functions of each concept:
the memory functions (:mod:`._memory`), the random ones (:mod:`._random`), and devices,
streams, properties and monitoring (:mod:`._module`).

Example::

    >>> import accelrt as acc
    >>> m = acc.backends.device_module("cpu")
    >>> m._resolve("cpu:0")[1], m.device_count() >= 1
    (0, True)
"""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any

from .. import _backend
from .. import _device as _dev
from .._errors import (
    AcceleratorIndexError,
    AcceleratorValueError,
    BackendUnavailableError,
    _InvalidIdIndexError,
    _InvalidIdValueError,
    type_shown,
)
from ._args import index_of, resolve, typed

if TYPE_CHECKING:
    from ..memory._allocator import DeviceCachingAllocator
    from ._memory import MemoryFunctions
    from ._random import RandomFunctions

__all__ = ["ModuleBase", "TypedMemoryModule", "TypedRandomModule"]

if TYPE_CHECKING:
    # For type checkers only: the names a device module's ``memory`` / ``random`` submodule
    # copies from the device module have its signatures (a bare module's attributes are Any).
    class TypedMemoryModule(types.ModuleType, MemoryFunctions):
        """The base of ``_memory.MemoryModule`` for type checkers."""

    class TypedRandomModule(types.ModuleType, RandomFunctions):
        """The base of ``_random.RandomModule`` for type checkers."""
else:
    TypedMemoryModule = TypedRandomModule = types.ModuleType


class ModuleBase:
    """The backend of a device module and its device arguments.

    Every method of a device module (this class, :class:`MemoryFunctions`,
    :class:`RandomFunctions`, :class:`DeviceModule`) that needs its backend raises
    :class:`~accelrt.BackendUnavailableError` where the backend cannot be used here; the
    methods that read ``0``/``{}``, do nothing or return False instead say so.

    Args:
        backend_name: a registered backend name (it need not be usable here).
        module: the name of the device module, e.g. ``"accelrt.cuda"``.

    Example::

        >>> from accelrt._runtime._base import ModuleBase
        >>> ModuleBase("cpu", "accelrt.cpu").device_count() >= 1
        True
    """

    def __init__(self, backend_name: str, module: str) -> None:
        if not isinstance(backend_name, str):
            raise TypeError(f"backend_name must be a str, got {type_shown(backend_name)}")
        self.name = backend_name
        self.module = module

    # ------------------------------------------------------------------ device arguments
    def _b(self) -> _backend.Backend:
        return _backend.get_backend(self.name)

    def _resolve(self, device: Any) -> tuple[_backend.Backend, int]:
        """``(backend, checked index)`` of a device argument (``None``: current device)."""
        return resolve(self.name, device)

    def _resolve_id(self, device: Any, what: str = "device", *,
                    optional: bool = True) -> tuple[_backend.Backend, int]:
        """:meth:`_resolve` as ``torch.cuda.get_device_properties`` and
        ``can_device_access_peer`` check their device: ``None`` (or a device without an
        index) is the current device only where ``optional``, else PyTorch's ``ValueError``
        ("Expected a device with a specified index or an integer, but got: None"); a negative
        or out-of-range index raises accelrt's error, made an ``AssertionError`` too with
        torch's "Invalid device id" ("Invalid peer device id" for ``what="peer device"``)
        at the front of the message."""
        d = typed(self.name, device)
        b = _backend.get_backend(self.name)
        if not optional and (d is None or (isinstance(d, _dev.device) and d.index is None)):
            raise ValueError(f"Expected a device with a specified index or an integer, but "
                             f"got: {device}")
        try:
            return b, index_of(b, d)
        except AcceleratorIndexError as e:
            raise _InvalidIdIndexError(f"Invalid {what} id: {e}") from None
        except AcceleratorValueError as e:
            raise _InvalidIdValueError(f"Invalid {what} id: {e}") from None

    def _device(self, device: Any) -> _dev.device:
        """The :class:`accelrt.device` (with index) of a device argument."""
        b, index = self._resolve(device)
        return _dev._device_obj(b.name, index)

    def _peek(self, device: Any) -> DeviceCachingAllocator | None:
        """The allocator of a device if it was started; ``None`` before that or where the
        backend cannot be used (never starts anything)."""
        d = typed(self.name, device)
        b = self._usable()
        if b is None:
            return None
        from ..memory._allocator import peek_allocator
        return peek_allocator(b.name, index_of(b, d))

    def _usable(self) -> _backend.Backend | None:
        try:
            return self._b()
        except BackendUnavailableError:
            return None

    # ------------------------------------------------------------------ availability
    def is_available(self) -> bool:
        """True if the backend is usable here (installed, a driver, at least one device).
        Never raises and never creates a device context.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.is_available()
            True
        """
        try:
            return (_backend.unavailable_reason(self.name) is None
                    and self._b().device_count() > 0)
        except Exception:  # noqa: BLE001 - availability probes never raise
            return False

    def unavailable_reason(self) -> str | None:
        """Why the backend cannot be used here, or ``None`` if it can.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.unavailable_reason() is None
            True
        """
        return _backend.unavailable_reason(self.name)

    def device_count(self) -> int:
        """Number of devices of the backend (0 if it cannot be used). Never raises.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.device_count() >= 1
            True
        """
        try:
            return self._b().device_count()
        except Exception:  # noqa: BLE001 - an unusable backend has no devices
            return 0
