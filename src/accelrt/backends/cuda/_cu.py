"""Lazy access to NVIDIA's Python packages and the one CUresult check.

``cuda.bindings`` (driver, NVRTC) and ``pynvml`` are imported here on first use only, so that
``import accelrt.backends.cuda`` works (and reports a clear reason) without them. Every driver
call in this backend goes through :func:`check`, which turns a failing ``CUresult`` into
:class:`CudaError`, accelrt's :class:`~accelrt.DeviceError` carrying the CUDA error name and
description.

Example::

    >>> from accelrt.backends.cuda._cu import CudaError
    >>> from accelrt import DeviceError
    >>> issubclass(CudaError, DeviceError)
    True
"""

from __future__ import annotations

import ctypes
import importlib
from types import ModuleType
from typing import Any

from ..._errors import BackendUnavailableError, DeviceError, type_shown

__all__ = [
    "INSTALL_HINT",
    "CudaError",
    "as_handle",
    "as_int",
    "as_ptr",
    "as_size",
    "check",
    "driver",
    "error_text",
    "load_driver",
    "load_nvml",
    "load_nvrtc",
]

#: How to install everything the CUDA backend needs.
INSTALL_HINT = 'pip install "accelrt[cuda]"'

_SUCCESS_NAME = "CUDA_SUCCESS"


class CudaError(DeviceError):
    """A CUDA driver (or NVRTC) call failed.

    Attributes:
        code: the numeric ``CUresult`` (or ``nvrtcResult``).
        error_name: the enumerator name, e.g. ``"CUDA_ERROR_INVALID_VALUE"``.
        call: the API function that failed, e.g. ``"cuMemAlloc"``.

    Example::

        >>> from accelrt.backends.cuda._cu import CudaError
        >>> e = CudaError("cuda: cuMemAlloc failed", 2, "CUDA_ERROR_OUT_OF_MEMORY", "cuMemAlloc")
        >>> e.error_name, e.code
        ('CUDA_ERROR_OUT_OF_MEMORY', 2)
    """

    def __init__(self, message: str, code: int = 0, error_name: str = "", call: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.error_name = error_name
        self.call = call

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.args[0] if self.args else "", self.code, self.error_name,
                             self.call))


def _import(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


_driver: ModuleType | None = None


def load_driver() -> ModuleType | None:
    """``cuda.bindings.driver``, or ``None`` when cuda-bindings is not installed.

    Importing it does not load ``libcuda``; that happens on the first driver call.
    """
    return _import("cuda.bindings.driver")


def driver() -> ModuleType:
    """``cuda.bindings.driver``; raises :class:`BackendUnavailableError` if it is missing."""
    global _driver
    mod = _driver
    if mod is None:
        mod = _driver = load_driver()
    if mod is None:
        raise BackendUnavailableError(
            f"Backend 'cuda' is not available: cuda-bindings is not installed; install it "
            f"with: {INSTALL_HINT}")
    return mod


def load_nvrtc() -> ModuleType | None:
    """``cuda.bindings.nvrtc``, or ``None`` when cuda-bindings is missing.

    The NVRTC *library* may still be missing; :mod:`._kernels` finds out on first use.
    """
    return _import("cuda.bindings.nvrtc")


def load_nvml() -> ModuleType | None:
    """``pynvml`` (package ``nvidia-ml-py``), or ``None`` when it is not installed."""
    return _import("pynvml")


def error_text(code: Any, drv: Any = None) -> tuple[str, str]:
    """``(name, description)`` of a ``CUresult``; works even when ``libcuda`` is missing.

    ``drv`` is the driver module to ask (default: the one the backend uses).

    Example::

        >>> from accelrt.backends.cuda._cu import error_text
        >>> error_text(123456)[0]
        'CUresult(123456)'
    """
    if drv is None:
        try:
            drv = driver()
        except BackendUnavailableError:
            drv = None
    name = getattr(code, "name", None)
    if name is None and drv is not None:
        try:
            name = drv.CUresult(int(code)).name
        except (ValueError, TypeError):
            name = None
    if name is None:
        name = f"CUresult({int(code)})"
    desc = ""
    if drv is not None and not name.startswith("CUresult("):
        try:
            err, raw = drv.cuGetErrorString(drv.CUresult(int(code)))
            if int(err) == 0 and raw:
                desc = raw.decode() if isinstance(raw, bytes) else str(raw)
        except Exception:  # noqa: BLE001 - no driver library: the name alone must do
            desc = ""
    return name, desc


def raise_error(code: Any, call: str) -> None:
    """Raise :class:`CudaError` for a failed ``CUresult`` returned by ``call``."""
    name, desc = error_text(code)
    msg = f"cuda: {call} failed: {name}"
    if desc:
        msg += f" ({desc})"
    raise CudaError(msg, int(code), name, call)


def check(ret: Any, call: str) -> Any:
    """Check the result of a ``cuda.bindings`` call and return its value(s).

    ``cuda.bindings`` returns ``(CUresult, *values)``. A non-success result raises
    :class:`CudaError` naming ``call`` and the error; otherwise the single value, a tuple of
    values, or ``None`` is returned.

    Args:
        ret: what the binding returned.
        call: the API function name, for the message.

    Raises:
        CudaError: the result is not ``CUDA_SUCCESS``.

    Example::

        >>> from accelrt.backends.cuda._cu import check
        >>> check((0, 42), "cuFake")
        42
        >>> try:
        ...     check((1,), "cuFake")
        ... except Exception as e:
        ...     print(type(e).__name__, e.code, e.call)
        CudaError 1 cuFake
    """
    err = ret[0]
    if err:
        raise_error(err, call)
    n = len(ret)
    if n == 2:
        return ret[1]
    if n == 1:
        return None
    return ret[1:]


# ---------------------------------------------------------------------- argument checks
# Bad values must become Python errors here: handed to the driver they could fault the GPU
# context (a bad pointer) or crash the process (a bad handle).

_U64 = 1 << 64


def as_int(value: Any, what: str) -> int:
    """``value`` as an ``int``; ``TypeError`` for anything else (bool included)."""
    if type(value) is int:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    raise TypeError(f"{what} must be an int, got {type_shown(value)}")


def as_ptr(value: Any, what: str) -> int:
    """A non-null 64-bit address.

    Example::

        >>> from accelrt.backends.cuda._cu import as_ptr
        >>> as_ptr(0x1000, "dst")
        4096
    """
    v = as_int(value, what)
    if not 0 < v < _U64:
        raise ValueError(f"{what} must be a non-null 64-bit address, got {v:#x}"
                         if v >= 0 else f"{what} must be a non-null 64-bit address, got {v}")
    return v


def as_size(value: Any, what: str, *, positive: bool = False) -> int:
    """A byte or element count: ``>= 0`` (``> 0`` if ``positive``) and below ``2**63``."""
    v = as_int(value, what)
    if v < (1 if positive else 0) or v >= 1 << 63:
        raise ValueError(f"{what} must be {'positive' if positive else 'non-negative'} and "
                         f"below 2**63, got {v}")
    return v


def as_handle(value: Any, what: str) -> int:
    """A driver handle value (stream, event, graph): an int in ``[0, 2**64)``."""
    v = as_int(value, what)
    if not 0 <= v < _U64:
        raise ValueError(f"{what} handle must be in [0, 2**64), got {v}")
    return v


#: ``sizeof(CUipcMemHandle)``, also ``sizeof(CUipcEventHandle)``
IPC_HANDLE_SIZE = 64


def ipc_struct(handle: Any, struct: Any, what: str, source: str) -> Any:
    """A new ``struct()`` (``CUipcMemHandle``/``CUipcEventHandle``) holding the
    :data:`IPC_HANDLE_SIZE` bytes of ``handle``: the bytes ``source()`` gave for an IPC
    ``what`` handle (``"memory"``/``"event"``, for messages); TypeError or ValueError."""
    if not isinstance(handle, (bytes, bytearray)):
        raise TypeError(f"an IPC {what} handle is the bytes from {source}(), got "
                        f"{type_shown(handle)}")
    if len(handle) != IPC_HANDLE_SIZE:
        raise ValueError(f"an IPC {what} handle is {IPC_HANDLE_SIZE} bytes from "
                         f"{source}(), got {len(handle)} bytes")
    h = struct()
    ctypes.memmove(h.getPtr(), bytes(handle), IPC_HANDLE_SIZE)
    return h


def ipc_bytes(h: Any) -> bytes:
    """The bytes of an IPC handle struct (what :func:`ipc_struct` reads back)."""
    return ctypes.string_at(h.getPtr(), IPC_HANDLE_SIZE)
