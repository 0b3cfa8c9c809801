"""Finding OpenCL devices without creating contexts: lazy ``pyopencl`` import and device list.

Devices of every platform are listed in platform order, then device order. Nothing here
creates a context or a queue, so asking whether the backend is usable is cheap and fork-safe.

Example::

    >>> from accelrt.backends.opencl._discovery import unavailable_reason
    >>> reason = unavailable_reason()
    >>> reason is None or "OpenCL" in reason or "pyopencl" in reason
    True
"""

from __future__ import annotations

import importlib
import os
import threading
from typing import Any

from ..._fork import reinit_after_fork
from ..._errors import type_shown

__all__ = ["ENV_MEMORY", "FORKED_MSG", "INSTALL_HINT", "import_cl", "list_devices",
           "memory_mode_error", "memory_mode_setting", "unavailable_reason"]

#: How device memory is represented: ``auto`` (SVM where supported), ``svm`` or ``buffer``.
ENV_MEMORY = "ACCELRT_OPENCL_MEMORY"
INSTALL_HINT = 'install it with: pip install "accelrt[opencl]"'
_ICD_HINT = ("install an OpenCL driver (ICD) for your device, or PoCL for CPUs: "
             "pip install pocl-binary-distribution")
_MODES = ("auto", "svm", "buffer")

#: What every OpenCL call raises in a child forked after the parent loaded its platforms.
FORKED_MSG = ("Cannot re-initialize OpenCL in forked subprocess. To use OpenCL with "
              "multiprocessing, you must use the 'spawn' start method (this process was forked "
              "after its parent loaded the OpenCL platforms; OpenCL drivers, PoCL among them, "
              "run worker threads that do not survive fork)")

_lock = reinit_after_fork(threading.Lock())
_devices: list[Any] | None = None     # guarded by _lock: the cached device list
_error: str | None = None             # guarded by _lock: why there are no devices


def _after_fork_in_child() -> None:
    """A child of a process that loaded the OpenCL platforms cannot use them: PoCL's device
    threads (and a GPU driver's) are gone, and its first blocking command would wait forever.
    Such a child sees no devices, with :data:`FORKED_MSG` as the reason; a child of a process
    that never listed devices loads the platforms itself and works."""
    global _devices, _error
    if _devices:
        _devices, _error = [], FORKED_MSG


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def import_cl() -> Any:
    """Import and return ``pyopencl``.

    Raises:
        ImportError: pyopencl is not installed (the message says how to install it).
    """
    try:
        # by name: pyopencl is optional and need not be installed where the package is checked
        return importlib.import_module("pyopencl")
    except ImportError as exc:
        raise ImportError(f"pyopencl is not installed ({exc}); {INSTALL_HINT}") from exc


def _discover() -> tuple[list[Any], str | None]:
    try:
        cl = import_cl()
    except ImportError as exc:
        return [], str(exc)
    try:
        platforms = cl.get_platforms()
    except Exception as exc:  # noqa: BLE001 - no ICD: clGetPlatformIDs reports an error
        return [], f"no OpenCL platform found ({type(exc).__name__}: {exc}); {_ICD_HINT}"
    if not platforms:
        return [], f"no OpenCL platform found; {_ICD_HINT}"
    devices: list[Any] = []
    for p in platforms:
        try:
            found = p.get_devices()
        except Exception:  # noqa: BLE001 - DEVICE_NOT_FOUND on a platform without devices
            found = []
        devices.extend(found)
    if not devices:
        names = ", ".join(repr(p.name) for p in platforms)
        return [], f"OpenCL platform(s) {names} found but they report no devices; {_ICD_HINT}"
    return devices, None


def list_devices() -> list[Any]:
    """Every OpenCL device of every platform (cached after the first call).

    Raises:
        ImportError: pyopencl is missing (see :func:`unavailable_reason` for the message).
    """
    global _devices, _error
    with _lock:
        if _devices is None:
            _devices, _error = _discover()
        return list(_devices)


def unavailable_reason() -> str | None:
    """``None`` if at least one OpenCL device is usable, else why not and what to install.

    Example::

        >>> from accelrt.backends.opencl._discovery import unavailable_reason
        >>> isinstance(unavailable_reason(), (str, type(None)))
        True
    """
    mode_error = memory_mode_error(os.environ.get(ENV_MEMORY))
    if mode_error:
        return mode_error
    list_devices()
    with _lock:
        return _error


def memory_mode_error(value: str | None) -> str | None:
    """A sentence describing a malformed memory-mode value, or ``None`` if it is fine."""
    if value is None or value.strip().lower() in _MODES:
        return None
    return (f"{ENV_MEMORY}={value!r} is not valid; use one of {', '.join(_MODES)} "
            "(auto: shared virtual memory where the device supports it)")


def memory_mode_setting(value: str | None) -> str:
    """Resolve the memory mode from an argument or :data:`ENV_MEMORY` (default ``auto``).

    Raises:
        TypeError: ``value`` is not a str.
        ValueError: ``value`` (or the variable) is not ``auto``, ``svm`` or ``buffer``.

    Example::

        >>> from accelrt.backends.opencl._discovery import memory_mode_setting
        >>> memory_mode_setting("Buffer")
        'buffer'
    """
    if value is None:
        value = os.environ.get(ENV_MEMORY, "auto")
        err = memory_mode_error(value)
        if err:
            raise ValueError(err)
    elif not isinstance(value, str):
        raise TypeError(f"memory_mode must be a str, got {type_shown(value)}")
    mode = value.strip().lower()
    if mode not in _MODES:
        raise ValueError(f"memory_mode={value!r} must be one of {', '.join(_MODES)}")
    return mode
