"""NVTX ranges and markers (``accelrt.cuda.nvtx``) over NVIDIA's ``nvtx`` package.

Same functions as ``torch.cuda.nvtx``: :func:`range_push`, :func:`range_pop`, :func:`mark`
and the :func:`range` context manager/decorator. They show up in Nsight Systems timelines.
Without the ``nvtx`` package each call raises a :class:`~accelrt.BackendUnavailableError`
saying what to install.

Example::

    >>> from accelrt.backends.cuda import _nvtx
    >>> _nvtx.available() in (True, False)
    True
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from ..._errors import BackendUnavailableError
from . import _cu

__all__ = ["available", "mark", "range", "range_pop", "range_push"]

_depth = threading.local()


def _lib() -> Any:
    try:
        import nvtx
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


def range_push(msg: str) -> int:
    """Open a nested range; return its zero-based depth (as ``torch.cuda.nvtx``).

    Raises:
        TypeError: ``msg`` is not a str.
    """
    if not isinstance(msg, str):
        raise TypeError(f"range_push() takes a str message, got {type(msg).__name__}")
    _lib().push_range(message=msg)
    depth = getattr(_depth, "n", 0)
    _depth.n = depth + 1
    return depth


def range_pop() -> int:
    """Close the innermost range; return its depth, or ``-1`` if none was open."""
    depth = getattr(_depth, "n", 0)
    if depth == 0:
        return -1
    _lib().pop_range()
    _depth.n = depth - 1
    return depth - 1


def mark(msg: str) -> None:
    """Record an instantaneous marker.

    Raises:
        TypeError: ``msg`` is not a str.
    """
    if not isinstance(msg, str):
        raise TypeError(f"mark() takes a str message, got {type(msg).__name__}")
    _lib().mark(message=msg)


@contextlib.contextmanager
def range(msg: str, *args: Any, **kwargs: Any) -> Iterator[None]:
    """Context manager / decorator for a range named ``msg.format(*args, **kwargs)``."""
    range_push(msg.format(*args, **kwargs))
    try:
        yield
    finally:
        range_pop()
