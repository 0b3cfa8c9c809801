"""``accelrt.device``, the current accelerator, per-thread current device, and the one device
normaliser every public function uses.

Example::

    >>> import accelrt as acc
    >>> d = acc.device("cpu:0")
    >>> d.type, d.index, str(d)
    ('cpu', 0, 'cpu:0')
    >>> d == acc.device("cpu", 0)
    True
"""

from __future__ import annotations

import os
import threading
import warnings
from typing import TYPE_CHECKING, Any

from . import _backend
from ._errors import BackendUnavailableError

if TYPE_CHECKING:
    from ._backend import Backend
    from ._typing import DeviceLike

__all__ = [
    "current_accelerator",
    "current_device_idx",
    "current_device_index",
    "device",
    "device_count",
    "device_index",
    "get_device_capability",
    "get_device_properties",
    "is_available",
    "set_current_accelerator",
    "set_device_idx",
    "set_device_index",
]


class device:
    """An immutable, hashable device: a backend type and an optional index.

    ``device("cuda:1")``, ``device("cuda", 1)``, ``device("cpu")`` (no index: "the current
    one"), ``device(1)`` (index 1 of the current accelerator), ``device(other_device)``.

    Raises:
        TypeError: the argument types are wrong.
        ValueError: the string is malformed, the index is negative, or an index is given twice.

    Example::

        >>> import accelrt as acc
        >>> acc.device("cpu", 0)
        device(type='cpu', index=0)
        >>> {acc.device("cpu:0"), acc.device("cpu", 0)} == {acc.device("cpu:0")}
        True
    """

    __slots__ = ("_type", "_index")

    _type: str
    _index: int | None

    def __init__(self, type_or_str: device | str | int, index: int | None = None) -> None:
        if index is not None and (not isinstance(index, int) or isinstance(index, bool)):
            raise TypeError(f"device index must be an int or None, got {type(index).__name__}")
        if isinstance(type_or_str, device):
            if index is not None:
                raise ValueError("device(device, index): the index is already part of the device")
            typ, idx = type_or_str._type, type_or_str._index
        elif isinstance(type_or_str, bool):
            raise TypeError("device() takes a str, int or device, not bool")
        elif isinstance(type_or_str, int):
            if index is not None:
                raise TypeError("device(int, index): pass either an index or a type and index")
            acc = current_accelerator()
            if acc is None:
                raise RuntimeError("device(int) needs a current accelerator, and none is available")
            typ, idx = acc.type, type_or_str
        elif isinstance(type_or_str, str):
            typ, idx = _parse(type_or_str)
            if idx is not None and index is not None:
                raise ValueError(f"type (string) must not include an index because index was "
                                 f"passed explicitly: {type_or_str}")
            if index is not None:
                idx = index
        else:
            raise TypeError(f"device() takes a str, int or device, not {type(type_or_str).__name__}")
        if idx is not None and idx < 0:
            raise ValueError(f"Device index must not be negative, got {idx}")
        object.__setattr__(self, "_type", typ)
        object.__setattr__(self, "_index", idx)

    @property
    def type(self) -> str:
        """The backend name, e.g. ``"cuda"``."""
        return self._type

    @property
    def index(self) -> int | None:
        """The device index, or ``None`` for "the current device of that type"."""
        return self._index

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("accelrt.device is immutable")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, device):
            return self._type == other._type and self._index == other._index
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self._type, self._index))

    def __str__(self) -> str:
        return self._type if self._index is None else f"{self._type}:{self._index}"

    def __repr__(self) -> str:
        if self._index is None:
            return f"device(type={self._type!r})"
        return f"device(type={self._type!r}, index={self._index})"

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (device, (self._type, self._index))


_parse_cache: dict[str, tuple[str, int | None]] = {}


def _parse(s: str) -> tuple[str, int | None]:
    hit = _parse_cache.get(s)
    if hit is not None:
        return hit
    typ, sep, rest = s.partition(":")
    if not typ or not typ.replace("_", "a").isalnum() or not typ[0].isalpha() or typ != typ.strip():
        raise ValueError(f"Invalid device string: {s!r}; expected 'type' or 'type:index', "
                         "e.g. 'cuda:0' or 'cpu'")
    idx: int | None = None
    if sep:
        if not rest.isdigit() or (len(rest) > 1 and rest[0] == "0"):
            raise ValueError(f"Invalid device string: {s!r}; the index after ':' must be a "
                             "non-negative integer, e.g. 'cuda:1'")
        idx = int(rest)
    if len(_parse_cache) < 1024:
        _parse_cache[s] = (typ, idx)
    return typ, idx


# ---------------------------------------------------------------------- current accelerator

_acc_lock = threading.Lock()
_current_name: str | None = None          # guarded by _acc_lock; None = not chosen yet
_current_backend: Backend | None = None   # guarded by _acc_lock


def _choose_default() -> str | None:
    env = os.environ.get("ACCELRT_ACCELERATOR", "").strip()
    if env:
        reason = _backend.unavailable_reason(env)
        if reason is not None:
            raise BackendUnavailableError(
                f"ACCELRT_ACCELERATOR={env!r} names a backend that cannot be used: {reason}")
        return env
    for name in _backend.BACKENDS:
        if _backend.unavailable_reason(name) is None:
            return name
    return None


def _current() -> Backend | None:
    """The current accelerator's backend (chosen on first use), or None."""
    global _current_name, _current_backend
    if _current_backend is not None:
        return _current_backend
    with _acc_lock:
        if _current_backend is None and _current_name is None:
            name = _choose_default()
            if name is not None:
                _current_backend = _backend.get_backend(name)
                _current_name = name
    return _current_backend


def _require_current() -> Backend:
    b = _current()
    if b is None:
        raise BackendUnavailableError("No accelerator backend is available; the cpu backend "
                                      "should always be: check ACCELRT_CPU_DEVICES")
    return b


def set_current_accelerator(name: str) -> None:
    """Make backend ``name`` the current accelerator (the one ``int`` devices refer to).

    Args:
        name: a backend name from :func:`accelrt.backends.available`.

    Raises:
        BackendUnavailableError: the backend is unknown or cannot be used here.

    Example::

        >>> import accelrt as acc
        >>> acc.set_current_accelerator("cpu")
        >>> acc.current_accelerator()
        device(type='cpu')
    """
    global _current_name, _current_backend
    if isinstance(name, device):
        name = name.type
    if not isinstance(name, str):
        raise TypeError(f"set_current_accelerator() takes a backend name, got {type(name).__name__}")
    backend = _backend.get_backend(name)
    with _acc_lock:
        _current_name = name
        _current_backend = backend


def current_accelerator(check_available: bool = False) -> device | None:
    """The current accelerator as a :class:`device` without index, or ``None``.

    Args:
        check_available: if True, return ``None`` when the accelerator is not usable now.

    Example::

        >>> import accelrt as acc
        >>> acc.current_accelerator() is not None
        True
    """
    b = _current()
    if b is None:
        return None
    return _type_device(b.name)


_type_devices: dict[str, device] = {}


def _type_device(name: str) -> device:
    d = _type_devices.get(name)
    if d is None:
        d = _type_devices[name] = device(name)
    return d


def is_available() -> bool:
    """True if an accelerator backend is usable now. Never creates a driver context.

    Example::

        >>> import accelrt as acc
        >>> acc.is_available()
        True
    """
    try:
        return _current() is not None
    except BackendUnavailableError:
        return False


def device_count() -> int:
    """Number of devices of the current accelerator (0 if there is none).

    Example::

        >>> import accelrt as acc
        >>> acc.device_count() >= 1
        True
    """
    try:
        b = _current()
    except BackendUnavailableError:
        return 0
    return 0 if b is None else b.device_count()


# ---------------------------------------------------------------------- per-thread device

class _ThreadState(threading.local):
    def __init__(self) -> None:
        self.device: dict[str, int] = {}                 # backend name -> current index
        self.stream: dict[tuple[str, int], Any] = {}     # (backend, index) -> current Stream


_tls = _ThreadState()


def _current_index(b: Backend) -> int:
    return _tls.device.get(b.name, 0)


def _check_index(b: Backend, index: int) -> int:
    n = b.device_count()
    if index >= n:
        raise IndexError(f"device index {index} is out of range for backend {b.name!r}, "
                         f"which has {n} device(s) (valid: 0..{n - 1})")
    return index


def _get_device(dev: DeviceLike, *, optional: bool = True,
                backend: Backend | None = None) -> tuple[Backend, int]:
    """The one normaliser: turn any ``DeviceLike`` into ``(backend, checked index)``.

    ``backend`` fixes the backend (device-specific modules); otherwise an int or ``None`` means
    the current accelerator and a string/device names its own backend, which may differ from
    the current accelerator (several backends live in one process).
    """
    if dev is None:
        b = backend if backend is not None else _require_current()
        return b, _tls.device.get(b.name, 0)
    if isinstance(dev, int) and not isinstance(dev, bool):
        b = backend if backend is not None else _require_current()
        if dev < 0:
            raise ValueError(f"device index must not be negative, got {dev}")
        return b, _check_index(b, dev)
    if isinstance(dev, str):
        dev = device(dev)
    if not isinstance(dev, device):
        raise TypeError(f"expected a device, int, str or None, got {type(dev).__name__}")
    if backend is not None:
        if dev._type != backend.name:
            raise ValueError(f"{dev._type} doesn't match the current accelerator {backend.name}.")
        b = backend
    else:
        b = _backend.get_backend(dev._type)
    if dev._index is None:
        if not optional:
            raise ValueError(f"Expected a device with a specified index or an integer, but "
                             f"got: {dev}")
        return b, _tls.device.get(b.name, 0)
    return b, _check_index(b, dev._index)


def _get_current_device_index(dev: DeviceLike, *, optional: bool = True) -> tuple[Backend, int]:
    """Like :func:`_get_device` but the device must be of the current accelerator (PyTorch's
    ``_get_device_index``); used by functions about *the* current device."""
    cur = _require_current()
    if isinstance(dev, (str, device)):
        d = device(dev) if isinstance(dev, str) else dev
        if d._type != cur.name:
            raise ValueError(f"{d._type} doesn't match the current accelerator {cur.name}.")
    return _get_device(dev, optional=optional, backend=cur)


def current_device_index() -> int:
    """Index of the calling thread's current device on the current accelerator.

    Example::

        >>> import accelrt as acc
        >>> acc.current_device_index()
        0
    """
    b = _current_backend if _current_backend is not None else _require_current()
    return _tls.device.get(b.name, 0)


def _set_index(b: Backend, index: int) -> None:
    _tls.device[b.name] = index


def set_device_index(device: DeviceLike, /) -> None:
    """Set the calling thread's current device. A negative index is a no-op.

    Args:
        device: an int, a device of the current accelerator, or a string such as ``"cpu:0"``.

    Raises:
        ValueError: the device is of another backend, or has no index.
        IndexError: the index is out of range.

    Example::

        >>> import accelrt as acc
        >>> acc.set_device_index(0)
        >>> acc.current_device_index()
        0
    """
    if isinstance(device, int) and not isinstance(device, bool) and device < 0:
        return
    b, idx = _get_current_device_index(device, optional=False)
    _tls.device[b.name] = idx


class device_index:
    """Context manager that sets the current device index and restores the previous one.

    ``None`` (or a negative index) makes it a no-op.

    Example::

        >>> import accelrt as acc
        >>> with acc.device_index(0):
        ...     acc.current_device_index()
        0
    """

    __slots__ = ("idx", "prev_idx", "_b")

    def __init__(self, device: int | None, /) -> None:
        if device is not None and (not isinstance(device, int) or isinstance(device, bool)):
            raise TypeError(f"device_index() takes an int or None, got {type(device).__name__}")
        self.idx = device
        self.prev_idx = -1
        self._b: Backend | None = None

    def __enter__(self) -> None:
        idx = self.idx
        if idx is None or idx < 0:
            return
        b = _current_backend if _current_backend is not None else _require_current()
        if idx >= b.device_count():
            _check_index(b, idx)
        d = _tls.device
        self.prev_idx = d.get(b.name, 0)
        d[b.name] = idx
        self._b = b

    def __exit__(self, *exc: object) -> None:
        b = self._b
        if b is not None:
            _tls.device[b.name] = self.prev_idx
            self._b = None


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"`{old}` is deprecated. Use `{new}` instead.", FutureWarning, stacklevel=3)


def current_device_idx() -> int:
    """Deprecated alias of :func:`current_device_index` (emits ``FutureWarning``)."""
    _deprecated("accelrt.current_device_idx", "accelrt.current_device_index")
    return current_device_index()


def set_device_idx(device: DeviceLike, /) -> None:
    """Deprecated alias of :func:`set_device_index` (emits ``FutureWarning``)."""
    _deprecated("accelrt.set_device_idx", "accelrt.set_device_index")
    set_device_index(device)


def get_device_properties(device: DeviceLike = None, /) -> dict[str, Any]:
    """Properties of a device: ``name``, ``total_memory``, ``multi_processor_count`` and
    backend-specific extras. Does not initialise a device context.

    Example::

        >>> import accelrt as acc
        >>> props = acc.get_device_properties("cpu:0")
        >>> props["total_memory"] > 0
        True
    """
    b, idx = _get_device(device)
    props = dict(b.get_device_properties(idx))
    props.setdefault("type", b.name)
    props.setdefault("index", idx)
    return props


def get_device_capability(device: DeviceLike = None, /) -> dict[str, Any]:
    """Capabilities of a device, at least ``supported_dtypes``.

    Example::

        >>> import accelrt as acc
        >>> "float32" in acc.get_device_capability("cpu")["supported_dtypes"]
        True
    """
    b, idx = _get_device(device)
    return dict(b.get_device_capability(idx))
