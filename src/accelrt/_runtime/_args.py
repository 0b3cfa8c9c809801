"""The one normaliser of a device module's device arguments.

A device module's functions take ``torch.cuda``'s device arguments: ``None`` (the backend's
current device), an ``int`` index *of that backend* (a negative one means "none" where PyTorch
says so), a ``str`` or :class:`accelrt.device` of that backend's type, or one of the module's
``device`` context managers (``torch.cuda.device(1)`` stands for index 1). :func:`typed` checks
the type without touching the backend; :func:`resolve` gives the backend and a checked index.

Example::

    >>> from accelrt._runtime import _args
    >>> _args.typed("cpu", "cpu:0")
    device(type='cpu', index=0)
    >>> _args.resolve("cpu", None)[1]
    0
    >>> _args.typed("cuda", "cpu")
    Traceback (most recent call last):
    ...
    ValueError: Expected a cuda device, but got: cpu
"""

from __future__ import annotations

from typing import Any, ClassVar

from .. import _backend
from .. import _device as _dev
from .._device import _check_index, _plain_int, _tls
from .._device_core import _switch_index
from .._errors import shown

__all__ = ["current_if_negative", "expected", "index_of", "resolve", "typed"]


def expected(name: str, got: object) -> ValueError:
    """PyTorch's error for a device of the wrong type (``torch.cuda._utils``).

    Example::

        >>> from accelrt._runtime._args import expected
        >>> str(expected("cuda", "cpu:0"))
        'Expected a cuda device, but got: cpu:0'
    """
    return ValueError(f"Expected a {name} device, but got: {got}")


def typed(name: str, device: Any) -> _dev.device | int | None:
    """Check the type of a ``device`` argument of backend ``name``'s module without touching
    the backend: ``None``, an ``int`` index (a negative one is returned as is), or a
    :class:`accelrt.device` of that type (a ``str`` is parsed; a ``device`` context manager
    gives its index).

    Raises:
        TypeError: ``device`` is not a device, int, str or None.
        ValueError: the device is of another backend.

    Example::

        >>> from accelrt._runtime._args import typed
        >>> typed("cpu", 1), typed("cpu", None)
        (1, None)
    """
    if device is None:
        return None
    if isinstance(device, int) and not isinstance(device, bool):
        return _plain_int(device)
    if isinstance(device, _DeviceContext):   # torch.cuda.device(1) stands for index 1
        if device._backend_name != name:
            raise expected(name, f"{device._backend_name}:{device.idx}")
        return _switch_index(device, device.idx)   # the user may have assigned it
    d = _dev.device(device) if isinstance(device, str) else device
    if not isinstance(d, _dev.device):
        raise _dev._wrong_device(device)
    if d.type != name:
        raise expected(name, d)
    return d


def current_if_negative(name: str, device: Any, *, only: int | None = None
                        ) -> _dev.device | int | None:
    """``device`` checked by :func:`typed` for backend ``name``, with a negative index read as
    ``None``, the backend's current device: any negative index, as ``torch.cuda.Stream``,
    ``ExternalStream`` and ``synchronize`` read it (through ``torch.cuda.device``, a no-op for
    one), or with ``only=-1`` that index only, as c10's ``getCurrentCUDAStream(-1)`` reads it
    (another negative index stays, for :func:`index_of` to refuse).

    Example::

        >>> from accelrt._runtime._args import current_if_negative
        >>> current_if_negative("cpu", -3), current_if_negative("cpu", -3, only=-1)
        (None, -3)
    """
    d = typed(name, device)
    return None if isinstance(d, int) and d < 0 and only in (None, d) else d


def index_of(b: _backend.Backend, d: _dev.device | int | None) -> int:
    """A checked device index of ``b`` for a :func:`typed` argument (``None`` or a device
    without an index: the backend's current device).

    Raises:
        ValueError: (an :class:`~accelrt.AcceleratorValueError`, PyTorch's RuntimeError too)
            a negative index.
        IndexError: the index is out of range.

    Example::

        >>> import accelrt as acc
        >>> from accelrt._runtime._args import index_of
        >>> index_of(acc.backends.get("cpu"), None)
        0
    """
    if d is None:
        return _tls.device.get(b.name, 0)
    if isinstance(d, int):
        if d < 0:
            raise _dev._negative_index(d)
        return _check_index(b, d)
    if d.index is None:
        return _tls.device.get(b.name, 0)
    return _check_index(b, d.index)


def resolve(name: str, device: Any) -> tuple[_backend.Backend, int]:
    """``(backend, checked index)`` of a ``device`` argument of backend ``name``'s module
    (``None``: the backend's current device).

    Raises:
        TypeError/ValueError: as :func:`typed` and :func:`index_of`.
        BackendUnavailableError: the backend cannot be used here.

    Example::

        >>> from accelrt._runtime._args import resolve
        >>> b, index = resolve("cpu", "cpu:0")
        >>> b.name, index
        ('cpu', 0)
    """
    if device is None:   # the common case: what the general path below returns for None
        b = _backend._instances.get(name)
        if b is not None:
            return b, _tls.device.get(name, 0)
    d = typed(name, device)
    b = _backend.get_backend(name)
    return b, index_of(b, d)


class _DeviceContext(_dev.device_index):
    """Shared machinery of the modules' ``device`` and ``device_of`` context managers, which
    stand for their index where a device argument is taken (``torch.cuda.device(1)``): a
    :class:`accelrt.device_index` of the module's backend whose exit must match an entry of
    the calling thread."""

    __slots__ = ()

    #: The backend whose current device this context manager sets.
    _backend_name: ClassVar[str] = ""
    _strict_exit = True

    def __repr__(self) -> str:
        cls = type(self)
        return f"{cls.__module__}.{cls.__qualname__}({shown(self.idx)})"
