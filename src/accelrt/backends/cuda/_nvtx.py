"""NVTX ranges and markers (``accelrt.cuda.nvtx``) over NVIDIA's ``nvtx`` package.

Same functions as ``torch.cuda.nvtx``: :func:`range_push`, :func:`range_pop`,
:func:`range_start`, :func:`range_end`, :func:`mark` and the :func:`range` context
manager/decorator. They show up in Nsight Systems timelines. NVTX annotates host threads, so
the same functions serve every device module (``accelrt.cpu.nvtx`` is this module too): no GPU
is needed. Without the ``nvtx`` package each call raises a
:class:`~accelrt.BackendUnavailableError` saying what to install.

Example::

    >>> from accelrt.backends.cuda import _nvtx
    >>> _nvtx.available() in (True, False)
    True
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Iterator
from typing import Any

from ..._errors import BackendUnavailableError, type_shown
from . import _cu

__all__ = ["available", "mark", "range", "range_end", "range_pop", "range_push", "range_start"]

_depth = threading.local()
_ranges_lock = threading.Lock()
_ranges: dict[int, Any] = {}   # guarded by _ranges_lock: open range_start ids -> nvtx handle
_next_id = 1                   # guarded by _ranges_lock


def _lib() -> Any:
    try:
        # users' type checkers read this module (acc.cuda.nvtx is typed as it) without
        # accelrt's mypy settings: the untyped (or missing) nvtx package is no error there
        import nvtx  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError as exc:
        raise BackendUnavailableError(
            "NVTX ranges need NVIDIA's nvtx package; install it with: "
            f"{_cu.INSTALL_HINT} (or pip install nvtx)") from exc
    return nvtx


def available() -> bool:
    """True if the ``nvtx`` package is installed."""
    try:
        _lib()
    except BackendUnavailableError:
        return False
    return True


#: what ``nvtxRangePushA``/``nvtxRangePop`` return while no tool is attached
#: (``NVTX_NO_PUSH_POP_TRACKING``), and so ``torch.cuda.nvtx.range_push``/``range_pop``
_NO_PUSH_POP_TRACKING = -2


def _tool_attached() -> bool:
    """True if an NVTX tool (Nsight Systems, ...) is attached: NVTX's own answer, as the
    ``nvtx`` package reads it (its default domain is enabled; NVTX loaded a tool once, at
    its first call, from ``NVTX_INJECTION64_PATH`` in a 64-bit process). Without a tool
    NVTX's calls do nothing and push/pop answer -2; a variable naming no loadable library,
    or set after that first call, attaches none."""
    nvtx = _lib()
    try:   # nvtx >= 0.2.12: a disabled domain's class (a Cython module, no type stubs)
        dummy: type = importlib.import_module("nvtx._lib.lib").DummyDomain
    except (ImportError, AttributeError):   # older nvtx: the variable NVTX reads here
        import os
        import struct
        bits = 8 * struct.calcsize("P")
        return bool(os.environ.get(f"NVTX_INJECTION{bits}_PATH"))
    return not isinstance(nvtx.get_domain(), dummy)


def _check_message(msg: object, fn: str) -> None:
    if not isinstance(msg, str):
        raise TypeError(f"{fn}() takes a str message, got {type_shown(msg)}")


def range_push(msg: str) -> int:
    """Open a nested range; return what ``torch.cuda.nvtx.range_push`` returns (NVTX's
    ``nvtxRangePushA``): the range's zero-based depth in this thread while a tool is attached
    (NVTX loaded the library ``NVTX_INJECTION64_PATH`` names, as under Nsight Systems),
    ``-2`` otherwise (NVTX's ``NVTX_NO_PUSH_POP_TRACKING``).

    Raises:
        TypeError: ``msg`` is not a str.

    Example::

        >>> import os
        >>> from accelrt.backends.cuda import _nvtx
        >>> if _nvtx.available() and "NVTX_INJECTION64_PATH" not in os.environ:
        ...     assert _nvtx.range_push("step") == -2 and _nvtx.range_pop() == -2
    """
    _check_message(msg, "range_push")
    _lib().push_range(message=msg)
    depth = getattr(_depth, "n", 0)
    _depth.n = depth + 1
    return depth if _tool_attached() else _NO_PUSH_POP_TRACKING


def range_pop() -> int:
    """Close the innermost range; return what ``torch.cuda.nvtx.range_pop`` returns: with a
    tool attached the ended range's depth, or ``-1`` if none was open; ``-2`` without one."""
    depth = getattr(_depth, "n", 0)
    if depth == 0:
        return -1 if _tool_attached() else _NO_PUSH_POP_TRACKING
    _lib().pop_range()
    _depth.n = depth - 1
    return depth - 1 if _tool_attached() else _NO_PUSH_POP_TRACKING


def range_start(msg: str) -> int:
    """Open a range that any thread may end (``torch.cuda.nvtx.range_start``); return its id
    for :func:`range_end`. Unlike :func:`range_push` ranges, these need not nest.

    Raises:
        TypeError: ``msg`` is not a str.

    Example::

        >>> from accelrt.backends.cuda import _nvtx
        >>> if _nvtx.available():
        ...     rid = _nvtx.range_start("load")
        ...     _nvtx.range_end(rid)
    """
    global _next_id
    _check_message(msg, "range_start")
    handle = _lib().start_range(message=msg)
    with _ranges_lock:
        rid = _next_id
        _next_id += 1
        _ranges[rid] = handle
    return rid


def range_end(range_id: int) -> None:
    """End the range that :func:`range_start` opened and whose id it returned.

    Raises:
        TypeError: ``range_id`` is not an int.
        ValueError: no range with that id is open (never started, or ended already).
    """
    if not isinstance(range_id, int) or isinstance(range_id, bool):
        raise TypeError(f"range_end() takes the int id that range_start() returned, got "
                        f"{type_shown(range_id)}")
    with _ranges_lock:
        if range_id not in _ranges:
            raise ValueError(f"no NVTX range with id {range_id} is open: pass the id that "
                             "range_start() returned, once")
        handle = _ranges.pop(range_id)
    if handle is not None:   # (None: no tool is attached, and nvtx recorded nothing)
        _lib().end_range(handle)


def mark(msg: str) -> None:
    """Record an instantaneous marker.

    Raises:
        TypeError: ``msg`` is not a str.
    """
    _check_message(msg, "mark")
    _lib().mark(message=msg)


@contextlib.contextmanager
def range(msg: str, *args: Any, **kwargs: Any) -> Iterator[None]:
    """Context manager / decorator for a range named ``msg.format(*args, **kwargs)``."""
    range_push(msg.format(*args, **kwargs))
    try:
        yield
    finally:
        range_pop()
