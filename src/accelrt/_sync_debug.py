"""Sync debug mode: warn or raise on every operation that makes the host wait for a device.

``set_sync_debug_mode("default" | "warn" | "error")`` (or 0, 1, 2) sets the mode of one
backend (``device_type``; the current accelerator's by default), as
``torch.cuda.set_sync_debug_mode`` does for CUDA. In ``"warn"`` mode every synchronizing
operation on that backend issues a :class:`UserWarning` "called a synchronizing CUDA
operation" (naming the backend); in ``"error"`` mode it raises
:class:`~accelrt.AcceleratorError` (a :class:`RuntimeError`) with that text.

The operations checked, on every backend: :func:`accelrt.synchronize`,
:meth:`Stream.synchronize <accelrt.Stream.synchronize>`, :meth:`Event.synchronize
<accelrt.Event.synchronize>` of a recorded event, blocking copies between host and device
memory (``Array.numpy()``, ``tolist()``, ``np.asarray(array)``, DLPack export to the host,
``copy_``/``to``/``asarray`` with ``non_blocking=False``), the caching allocator's wait for
pending frees before its out-of-memory retry, and the device synchronization a free makes when
a stream recorded with ``record_stream`` was destroyed. Collectives of :mod:`accelrt.comm`
that wait for a stream are covered through ``Stream.synchronize``.

The hot paths read one module global (:data:`active`) while every mode is ``"default"``.

Example::

    >>> import warnings
    >>> import accelrt as acc
    >>> acc.set_sync_debug_mode("warn", "cpu")
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     acc.Stream("cpu").synchronize()
    >>> str(caught[0].message)
    'called a synchronizing CPU operation'
    >>> acc.set_sync_debug_mode("default", "cpu"); acc.get_sync_debug_mode("cpu")
    0
"""

from __future__ import annotations

import operator
import os
import sys
import threading
import warnings

import numpy as np

from ._errors import AcceleratorError, type_shown
from ._fork import reinit_after_fork

__all__ = ["get_sync_debug_mode", "set_sync_debug_mode"]

#: True while some backend's mode is not "default" (the one global the hot paths read).
active = False
_modes: dict[str, int] = {}          # backend name -> 1 (warn) or 2 (error); guarded by _lock
_lock = reinit_after_fork(threading.Lock())
_NAMES = {"default": 0, "warn": 1, "error": 2}
_PKG = os.path.dirname(os.path.abspath(__file__)) + os.sep
#: How messages spell a backend (PyTorch's text says "CUDA").
_LABELS = {"cuda": "CUDA", "opencl": "OpenCL", "cpu": "CPU"}


class _ModeError(AcceleratorError, ValueError):
    """An invalid sync debug mode (a RuntimeError, as PyTorch raises, and a ValueError)."""


class _ModeTypeError(AcceleratorError, TypeError):
    """A sync debug mode of the wrong type (a RuntimeError, as PyTorch raises, and a
    TypeError)."""


def _backend_name(device_type: object, validate: bool) -> str:
    if device_type is None:
        from ._device import _current, _require_current
        b = _current()
        if b is None:
            b = _require_current()
        return b.name
    if not isinstance(device_type, str):
        raise TypeError(f"device_type must be a backend name such as 'cuda' or None, got "
                        f"{type_shown(device_type)}")
    from . import _backend
    if validate:
        return _backend.get_backend(device_type).name   # BackendUnavailableError names the fix
    if device_type not in _modes and device_type not in _backend.registered():
        _backend.get_backend(device_type)   # raises the registry's "Unknown backend" error
    return device_type


def set_sync_debug_mode(debug_mode: int | str, device_type: str | None = None) -> None:
    """Set the debug mode for synchronizing operations of one backend.

    Args:
        debug_mode: ``"default"`` or ``0``: neither warn nor raise on synchronizing
            operations; ``"warn"`` or ``1``: warn; ``"error"`` or ``2``: raise.
        device_type: the backend name (``"cuda"``, ``"cpu"``, ...); ``None`` is the current
            accelerator. Device modules (``accelrt.cuda``) bind their own.

    Raises:
        RuntimeError: ``debug_mode`` is an unknown string or an int out of range (an
            :class:`~accelrt.AcceleratorError` that is also a ValueError), or not an int, a
            numpy integer or a string (also a TypeError: a bool, a float, a one-element
            :class:`~accelrt.Array`, as PyTorch refuses a tensor); PyTorch's messages.
        TypeError: ``device_type`` is not a string or None.
        BackendUnavailableError: the backend cannot be used here.

    .. note:: The checked operations are listed in :mod:`accelrt._sync_debug`
        (``docs/sync_debug.md``). The mode is process-wide, per backend.

    Example::

        >>> import accelrt as acc
        >>> acc.set_sync_debug_mode("error", "cpu")
        >>> try:
        ...     acc.zeros(2, device="cpu:0").tolist()
        ... except RuntimeError as e:
        ...     print(e)
        called a synchronizing CPU operation
        >>> acc.set_sync_debug_mode(0, "cpu")
    """
    global active
    if isinstance(debug_mode, str):
        mode = _NAMES.get(debug_mode)
        if mode is None:
            raise _ModeError("invalid value of debug_mode, expected one of `default`, `warn`, "
                             "`error`")
    else:
        # torch's THPUtils_checkLong: an int or a numpy integer, never a bool (numpy < 2.4
        # indexes np.bool_) nor another object with __index__ (a one-element accelrt.Array,
        # whose reading would synchronize, or a 0-d numpy array)
        if isinstance(debug_mode, (bool, np.bool_)) or not isinstance(debug_mode,
                                                                      (int, np.integer)):
            raise _ModeTypeError("invalid argument to set_sync_debug_mode")
        mode = operator.index(debug_mode)
        if not 0 <= mode <= 2:
            raise _ModeError("invalid value of debug_mode, expected one of 0,1,2")
    name = _backend_name(device_type, validate=True)
    with _lock:
        if mode:
            _modes[name] = mode
        else:
            _modes.pop(name, None)
        active = bool(_modes)


def get_sync_debug_mode(device_type: str | None = None) -> int:
    """The debug mode for synchronizing operations of one backend: 0, 1 or 2.

    Args:
        device_type: the backend name; ``None`` is the current accelerator.

    Raises:
        TypeError: ``device_type`` is not a string or None.
        BackendUnavailableError: ``device_type`` names no registered backend (a registered
            backend that cannot be used here reads as ``0``).

    Example::

        >>> import accelrt as acc
        >>> acc.get_sync_debug_mode("cpu")
        0
    """
    return _modes.get(_backend_name(device_type, validate=False), 0)


def check(name: str) -> None:
    """Warn or raise for a synchronizing operation of backend ``name`` (callers test
    :data:`active` first, so this runs only while some mode is set).

    Raises:
        AcceleratorError: the backend's mode is ``"error"``.
    """
    mode = _modes.get(name, 0)
    if not mode:
        return
    msg = f"called a synchronizing {_LABELS.get(name, name.upper())} operation"
    if mode == 2:
        raise AcceleratorError(msg)
    # point the warning at the user's frame, past accelrt's own
    level = 2
    f = sys._getframe(1)
    while f.f_back is not None and f.f_code.co_filename.startswith(_PKG):
        f = f.f_back
        level += 1
    warnings.warn(msg, UserWarning, stacklevel=level)
