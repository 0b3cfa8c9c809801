"""Argument normalisation for :mod:`accelrt.comm` (devices, dims, sizes).

Example::

    >>> from accelrt.comm import _args
    >>> _args.wrap_dim(-1, 2)
    1
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any


from .. import _backend
from .._device import _check_index, _get_device, _index_arg, _plain_int, _require_current, device
from .._errors import AcceleratorValueError, caused, shown, type_shown
from .._transfer import HOST, Place

if TYPE_CHECKING:
    from .._backend import Backend

__all__ = ["check_buffer_size", "device_list", "one_device", "wrap_dim"]


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def one_device(d: Any, default: Backend | None, what: str, *, optional: bool = False,
               allow_host: bool = False) -> Place:
    """Normalise one device argument to a :class:`Place`.

    An ``int`` is an index on ``default`` (the backend of the arrays involved, or the current
    accelerator); a string or :class:`accelrt.device` names its own backend. ``None`` (only
    with ``optional``) is the current device of ``default``. With ``allow_host``, ``-1`` means
    plain host memory.
    """
    b = default if default is not None else None
    if d is None:
        if not optional:
            raise TypeError(f"{what} must be a device (an int, a string such as 'cpu:1', or an "
                            "accelrt.device), got None")
        b = b or _require_current()
        bb, idx = _get_device(None, backend=b)
        return Place(bb, idx)
    if _is_int(d):
        d = _plain_int(d)
        if d == -1 and allow_host:
            return HOST
        if d < 0:
            raise AcceleratorValueError(
                f"Expected non-negative device index for {what}, but got {shown(d)}")
        b = b or _require_current()
        return Place(b, _check_index(b, d))
    if isinstance(d, (str, device)):
        bb, idx = _get_device(d, optional=optional)
        return Place(bb, idx)
    raise TypeError(f"{what} must be an int, a string such as 'cpu:1', or an accelrt.device, "
                    f"got {type_shown(d)}")


def device_list(devices: Any, default: Backend | None, what: str = "devices") -> list[Place]:
    """Normalise an iterable of devices (each needs an index: ints, ``"cpu:1"``, devices)."""
    if isinstance(devices, (str, bytes, device)) or not isinstance(devices, Iterable):
        raise TypeError(f"'{what}' must be an iterable of devices (ints, strings such as "
                        f"'cpu:1', or accelrt.device objects), got {type_shown(devices)}")
    return [one_device(d, default, f"{what}[{i}]") for i, d in enumerate(devices)]


def check_buffer_size(buffer_size: Any) -> int:
    """``buffer_size`` must be a positive int."""
    size = _index_arg(buffer_size, "buffer_size", " (bytes)")
    if size <= 0:
        raise AcceleratorValueError(f"buffer_size must be positive, got {shown(size)}")
    return size


def wrap_dim(dim: Any, ndim: int) -> int:
    """PyTorch's ``maybe_wrap_dim``: ``-1`` is the last dimension.

    Raises:
        TypeError: ``dim`` is not an int (a numpy integer counts; a bool does not).
        IndexError: ``dim`` is out of range.
    """
    d = _index_arg(dim, "dim")
    if not -ndim <= d < ndim:
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-ndim}, {ndim - 1}], but got {shown(d)})")
    return d + ndim if d < 0 else d


def int_list(values: Any, what: str) -> list[int]:
    """A list of ints from a sequence (TypeError otherwise)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, Iterable)):
        raise TypeError(f"{what} must be a sequence of ints, got {type_shown(values)}")
    out = []
    for v in values:
        try:
            out.append(_index_arg(v, what))
        except TypeError:
            raise caused(TypeError(f"{what} must contain only ints, got {v!r}"),
                         None) from None
    return out


def backend_of(places: Iterable[Place]) -> Backend | None:
    """The backend of the first device place, if any."""
    for p in places:
        if p.backend is not None:
            return p.backend
    return None


def get_backend(name: str) -> Backend:
    """The backend instance named ``name``."""
    return _backend.get_backend(name)
