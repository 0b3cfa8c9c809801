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

import builtins
import operator
import os
import re
import threading
import warnings
import weakref
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from . import _backend
from ._backend import _follows_any
from ._errors import (AcceleratorIndexError, AcceleratorTypeError, AcceleratorValueError,
                      BackendUnavailableError, index_failure, shown, type_shown)
from ._fork import reinit_after_fork

if TYPE_CHECKING:
    from ._backend import Backend
    from ._properties import DeviceProperties
    from ._typing import DeviceLike

__all__ = ["current_accelerator", "current_device_idx", "current_device_index", "device",
           "device_count", "device_index", "get_default_device", "get_device_capability",
           "get_device_properties", "is_available", "set_current_accelerator",
           "set_default_device", "set_device_idx", "set_device_index"]


_NO: Any = object()     # device()'s argument not passed
_TYPE_INDEX = {"type", "index"}


class device:
    """An immutable, hashable device: a backend type and an optional index.

    ``device("cuda:1")``, ``device("cuda", 1)``, ``device("cpu")`` (no index: "the current
    one"), ``device(1)`` (index 1 of the current accelerator), ``device(other_device)``. As
    ``torch.device``'s parser reads them, a numpy integer is an index and bytes a device string
    (``device(np.int64(1))``, ``device(b"cpu:0")``). The keywords are torch's, ``type`` and
    ``index``: ``device(type="cpu", index=0)`` (what the repr shows) makes the same device.
    As torch's, that form (the keyword ``type=``, or two arguments) takes a type string
    without an index: ``device(type="cpu:0")`` and ``device("cpu:0", None)`` raise, and
    ``device(type=0)`` is a ``TypeError``; ``device(device=other)`` is the one-argument form.

    As a context manager (``with acc.device("cpu:1"):``, as ``with torch.device(...)``) it is
    the calling thread's default device of the factories (``Array``, ``empty``, ``zeros``,
    ``ones``, ``full``, ``asarray``, ``rand``, ``randn``, ``randint``) inside the block: a
    factory called without ``device=`` (or with ``device=None``) allocates there. Blocks nest
    (the innermost wins, exiting restores the outer one) and win over
    :func:`set_default_device`; an explicit ``device=`` wins over both. It does not change
    the current device (:func:`current_device_index`) or stream, and nothing but the
    factories reads it.

    Raises:
        TypeError: the argument types are wrong.
        ValueError: (an :class:`~accelrt.AcceleratorValueError`, also the ``RuntimeError``
            PyTorch raises) the string is malformed, the index is negative or beyond int64
            (PyTorch's ``ValueError`` "Overflow when unpacking long long"), or an index is
            given twice.
        BackendUnavailableError: the string names no registered backend (the message lists
            them: ``"gpu:0"``, ``"cuda0"`` and ``"CPU:0"`` fail here, with a suggestion).

    Example::

        >>> import accelrt as acc
        >>> acc.device("cpu", 0)
        device(type='cpu', index=0)
        >>> {acc.device("cpu:0"), acc.device("cpu", 0)} == {acc.device("cpu:0")}
        True
        >>> acc.device(type="cpu", index=0) == acc.device("cpu:0")
        True
    """

    __slots__ = ("_index", "_type")

    _type: str
    _index: int | None

    # torch.device's two forms: device(device) (one argument: a device, a string that may
    # carry an index, an int index) and device(type, index) (the keyword ``type=``, or two
    # arguments: a type string without an index)
    @overload
    def __init__(self, device: device | str | int | bytes, /) -> None: ...

    @overload
    def __init__(self, type: str | bytes, index: int | None = None) -> None: ...

    # (mypy: the keywords type= and index= arrive in **kwargs)
    def __init__(self, arg: Any = _NO, index: Any = _NO, /,  # type: ignore[misc]
                 *more: Any, **kwargs: Any) -> None:
        # device("cpu:0"), device("cpu", 0), device(type="cpu", index=0) and device(d) here
        # (as fast as one (type, index) signature was); the rest in _device_form._resolve
        if kwargs and arg is _NO and "type" in kwargs and kwargs.keys() <= _TYPE_INDEX:
            arg, index, kwargs = kwargs["type"], kwargs.get("index"), {}
        if not kwargs and builtins.type(arg) is str and not more and (
                index is _NO or index is None or builtins.type(index) is int):
            typ, idx = _parse(arg)
            if typ not in _known_types:
                _check_type(typ, arg)
            if index is not _NO:
                if idx is not None:
                    raise _index_in_type(arg)
                if index is not None and not 0 <= index <= _INT64_MAX:
                    typ, idx = _resolve((typ, index), {})     # raises
                idx = index
        elif not kwargs and index is _NO and builtins.type(arg) is device:
            typ, idx = arg._type, arg._index
        else:
            args = (arg, index, *more) if index is not _NO else () if arg is _NO else (arg,)
            typ, idx = _resolve(args, kwargs)
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

    def __enter__(self) -> device:  # noqa: PYI034 - typing.Self needs Python 3.11
        global _defaults_used
        _defaults_used = True
        _tls.default_stack.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        stack = _tls.default_stack
        if stack and stack[-1] is self:
            stack.pop()
        elif self in stack:     # exited out of order (e.g. ExitStack misuse): drop this one
            del stack[len(stack) - 1 - stack[::-1].index(self)]


_device_class = device     # for functions whose ``device`` argument shadows the class

_parse_cache: dict[str, tuple[str, int | None]] = {}
#: device types known to name a registered backend (usable or not); grows as backends register
_known_types: set[str] = set()
#: what people coming from other frameworks type for a GPU
_ALIASES = {"gpu": "cuda", "hip": "cuda", "rocm": "cuda", "nvidia": "cuda", "cl": "opencl"}


def _check_type(typ: str, text: str) -> None:
    """Refuse a device type that names no registered backend, listing the registered ones and
    suggesting a string (a digit in it: PyTorch's "Invalid device string", its types have none)."""
    import difflib
    known = _backend.registered()
    if typ in known:
        _known_types.add(typ)
        return
    brief = text if len(text) <= 60 else text[:57] + "..."
    suffix = "" if (idx := _parse(text)[1]) is None else f":{idx}"
    guess: str | None = None
    m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*?)([0-9]+)", typ)
    if typ.lower() in known:
        guess = typ.lower() + suffix
    elif m is not None and m.group(1).lower() in known and idx is None:
        guess = f"{m.group(1).lower()}:{int(m.group(2))}"
    elif _ALIASES.get(typ.lower()) in known:
        guess = f"{_ALIASES[typ.lower()]}{suffix}"
    else:
        close = difflib.get_close_matches(typ.lower(), known, n=1)
        guess = close[0] + suffix if close else None
    hint = f"; did you mean {guess!r}?" if guess else "."
    lead = (f"Invalid device string: {brief!r}. " if any(c.isdigit() for c in typ) else ""
            ) + f"Unknown backend {typ!r} in device string {brief!r}"
    raise BackendUnavailableError(f"{lead}{hint} Known backends: {', '.join(known)} (device "
                                  "types are lower case; third-party backends register with "
                                  "accelrt.backends.register())")

# PyTorch's grammar (c10/core/Device.cpp), ASCII only: a type of letters, digits and '_' (not
# starting with a digit), then optionally ':' and an index without sign, spaces, '_' or a
# leading zero. str.isdigit() would also accept '١' (Arabic-Indic one) and '²'.
_DEVICE_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?::([0-9]+))?", re.ASCII)
_MAX_INDEX_DIGITS = 18


class _IndexOverflowError(AcceleratorValueError, IndexError):
    """A device index beyond int64: the ``ValueError`` PyTorch's argument parser raises
    ("Overflow when unpacking long long"), and an ``IndexError``, as any index beyond the
    devices."""


#: The largest device index an ``int`` may give: int64's largest, as PyTorch's argument
#: parser reads one (beyond it, its ValueError "Overflow when unpacking long long")
_INT64_MAX = (1 << 63) - 1


def _parse(s: str) -> tuple[str, int | None]:
    if type(s) is not str:   # a str subclass is read by its value, as PyTorch's parser reads
        s = str.__str__(s)   # it (its own __hash__/__eq__, which may raise, are not called)
    hit = _parse_cache.get(s)
    if hit is not None:
        return hit
    m = _DEVICE_RE.fullmatch(s)
    brief = s if len(s) <= 60 else s[:57] + "..."
    # AcceleratorValueError: PyTorch's c10::Device parser raises RuntimeError, and a
    # ValueError is what a bad value is here
    if m is None:
        if not s:
            raise AcceleratorValueError("Device string must not be empty: pass a device type "
                                        "such as 'cuda' or 'cpu:0'")
        raise AcceleratorValueError(
            f"Invalid device string: {brief!r}; expected 'type' or 'type:index' with an index "
            "of ASCII digits, e.g. 'cuda:0' or 'cpu'")
    typ, rest = m.group(1), m.group(2)
    idx: int | None = None
    if rest is not None:
        if len(rest) > 1 and rest[0] == "0":
            raise AcceleratorValueError(f"Invalid device string: {brief!r}; the index after "
                                        "':' must not have leading zeros, e.g. 'cuda:1'")
        if len(rest) > _MAX_INDEX_DIGITS:
            raise AcceleratorValueError(f"Could not parse device index {rest[:20] + '...'!r} "
                                        f"in device string {brief!r}: it is too large")
        idx = int(rest)
    if len(_parse_cache) < 1024:
        _parse_cache[s] = (typ, idx)
    return typ, idx


# ---------------------------------------------------------------------- current accelerator

_acc_lock = reinit_after_fork(threading.Lock())
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
        if _backend.unavailable_reason(name) is None and \
                _backend.get_backend(name).default_candidate():
            return name
    return None


def _current() -> Backend | None:
    """The current accelerator's backend (chosen on first use), or None."""
    global _current_name, _current_backend
    if _current_backend is not None:
        return _current_backend
    with _acc_lock:
        if _current_backend is None:
            name = _choose_default() if _current_name is None else _current_name
            if name is not None:
                _current_backend = _backend.get_backend(name)
                _current_name = name
    return _current_backend


def _forget_backend(name: str) -> None:
    """Called by the registry after backend ``name`` was registered again or unregistered
    (:func:`accelrt.backends.on_change`): if it is the current accelerator, look its new
    instance up on next use."""
    global _current_backend
    with _acc_lock:
        if _current_name == name:
            _current_backend = None
    _resolved.clear()


_backend.on_change(_forget_backend)


def _require_current() -> Backend:
    b = _current()
    if b is None:
        reason = _backend.unavailable_reason("cpu")
        why = (f": {reason}" if reason is not None
               else "; the cpu backend should always be (check ACCELRT_ACCELERATOR)")
        raise BackendUnavailableError(f"No accelerator backend is available{why}")
    return b


def set_current_accelerator(name: str) -> None:
    """Make backend ``name`` the current accelerator (the one ``int`` devices refer to).

    Args:
        name: a backend name from :func:`accelrt.backends.available`.

    Raises:
        BackendUnavailableError: the backend is unknown or cannot be used here.

    Example::

        >>> import accelrt as acc
        >>> previous = acc.current_accelerator()
        >>> acc.set_current_accelerator("cpu")
        >>> acc.current_accelerator()
        device(type='cpu')
        >>> acc.set_current_accelerator(previous.type)  # put the previous one back
    """
    global _current_name, _current_backend
    if isinstance(name, device):
        name = name.type
    if not isinstance(name, str):
        raise TypeError(f"set_current_accelerator() takes a backend name, got {type_shown(name)}")
    backend = _backend.get_backend(name)
    with _acc_lock:
        _current_name = name
        _current_backend = backend


def current_accelerator(check_available: bool = False) -> device | None:
    """The current accelerator as a :class:`device` without index, or ``None``.

    The index of the returned device is ``None``; use :func:`current_device_index` for the
    calling thread's current index. Never creates a device context.

    Args:
        check_available: if True, also check at run time that the accelerator is usable now
            (:func:`is_available`) and return ``None`` when it is not.

    Raises:
        BackendUnavailableError: ``ACCELRT_ACCELERATOR`` names a backend that cannot be used
            (only when ``check_available`` is False).

    Example::

        >>> import accelrt as acc
        >>> acc.current_accelerator() is not None
        True
        >>> acc.current_accelerator(check_available=True) == acc.current_accelerator()
        True
    """
    if check_available and not is_available():
        return None
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
    """True if the current accelerator is usable now: its backend imports, its driver works and
    it has at least one device. Never raises and never creates a driver context (fork-safe).

    Example::

        >>> import accelrt as acc
        >>> acc.is_available()
        True
    """
    try:
        b = _current()
        return b is not None and b.device_count() > 0 and _backend.unavailable_reason(b.name) is None
    except Exception:  # noqa: BLE001 - availability probes must never raise
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

class _Streams:
    """One thread's current streams and open ``with stream:`` blocks (the containers of its
    :class:`_ThreadState`), listed in :data:`_all_streams` while the thread lives: what
    ``Stream.close()`` reads to refuse closing a stream that any thread still uses."""

    __slots__ = ("__weakref__", "entered", "stream")

    def __init__(self, stream: dict[tuple[str, int], Any],
                 entered: list[tuple[Any, int, Any]]) -> None:
        self.stream = stream
        self.entered = entered


#: Every live thread's :class:`_Streams`, weakly: a thread's state, and so its entry, goes when
#: the thread ends. (Keys of a dict, not a ``WeakSet``: ``list()`` of a dict is one step that
#: another thread adding its entry cannot interrupt.)
_all_streams: dict[weakref.ref[_Streams], None] = {}


def _forget_streams(ref: weakref.ref[_Streams]) -> None:
    _all_streams.pop(ref, None)


#: The bottom entry of every thread's ``entered`` stack: no stream, never popped.
_NO_BLOCK: tuple[Any, int, Any] = (None, 0, None)
#: The bottom entry of every thread's ``switched`` stack (as :data:`_NO_BLOCK`).
_NO_SWITCH: tuple[Any, str, int, Any] = (None, "", -1, None)


class _ThreadState(threading.local):
    """Per-thread runtime state (each thread starts on device 0 with default streams)."""

    def __init__(self) -> None:
        self.device: dict[str, int] = {}                 # backend name -> current index
        self.stream: dict[tuple[str, int], Any] = {}     # (backend, index) -> current Stream
        self.inited: set[tuple[str, int]] = set()        # devices init_device()'d in this thread
        # the factories' default device: ``with device:`` blocks (innermost last) over
        # set_default_device()'s; read only once _defaults_used is set
        self.default_stack: list[device] = []
        self.default_device: device | None = None
        # the open ``with stream:`` blocks, innermost last: (stream, previous device index,
        # previous current stream of its device or None), above one entry of no stream at the
        # bottom: the list never empties, so entering and leaving one block does not free and
        # allocate its storage each time (0.8 calls of Stream enter+exit)
        self.entered: list[tuple[Any, int, Any]] = [_NO_BLOCK]
        # the open ``device_index`` (and device module ``device``) blocks, innermost last:
        # (context manager, backend name, previous index or -1 for "changed nothing", backend)
        self.switched: list[tuple[Any, str, int, Any]] = [_NO_SWITCH]   # (never empties)
        # (device, stream, inited), (device, stream, entered) and (device, switched) in one
        # thread-local lookup for the hot paths; never rebind the containers above (mutate
        # them), or these aliases go stale
        self.hot = (self.device, self.stream, self.inited)
        self.enter = (self.device, self.stream, self.entered)
        self.switch = (self.device, self.switched)
        # this thread's entry of _all_streams, alive as long as the thread's state
        self.streams = _Streams(self.stream, self.entered)
        _all_streams[weakref.ref(self.streams, _forget_streams)] = None


_tls = _ThreadState()

#: set once any thread enters a ``with device:`` block or calls set_default_device(): until
#: then the factories skip the thread-local lookup of :func:`_factory_device`
_defaults_used = False


def _factory_device(dev: DeviceLike) -> DeviceLike:
    """The device a factory allocates on: ``dev`` unless it is ``None``; then the calling
    thread's innermost ``with device:`` block, else its :func:`set_default_device`, else
    ``None`` (the current device of the current accelerator)."""
    if dev is not None or not _defaults_used:
        return dev
    t = _tls
    stack = t.default_stack
    return stack[-1] if stack else t.default_device


def set_default_device(device: DeviceLike) -> None:
    """Make ``device`` the calling thread's default device of the factories
    (``torch.set_default_device``); ``None`` restores the default, the current device.

    Factories (``Array``, ``empty``, ``zeros``, ``ones``, ``full``, ``asarray``, ``rand``,
    ``randn``, ``randint``) called without ``device=`` allocate there; a ``with device:``
    block wins over it inside the block, an explicit ``device=`` wins over both. As in
    PyTorch it is per thread (a new thread starts without one) and it changes neither the
    current device nor the current stream. A device without an index means the current
    device of its type at each factory call.

    Raises:
        TypeError, ValueError, BackendUnavailableError: ``device`` is malformed (as
            :class:`device` raises).

    Example::

        >>> import accelrt as acc
        >>> acc.set_default_device("cpu")
        >>> acc.get_default_device(), acc.empty(2).device
        (device(type='cpu', index=0), device(type='cpu', index=0))
        >>> acc.set_default_device(None)
    """
    global _defaults_used
    if device is not None:
        device = _device_class(device)
        _defaults_used = True
    _tls.default_device = device


def get_default_device() -> device:
    """The device a factory called without ``device=`` allocates on in the calling thread
    (``torch.get_default_device``), with its index: the innermost ``with device:`` block's,
    else :func:`set_default_device`'s, else the current device of the current accelerator.

    Example::

        >>> import accelrt as acc
        >>> with acc.device("cpu:0"):
        ...     acc.get_default_device()
        device(type='cpu', index=0)
    """
    b, index = _get_device(_factory_device(None))
    return _device_obj(b.name, index)

#: ``(backend name, index)`` of every device that some thread has initialised (set.add is
#: atomic under the GIL, so no lock; :func:`_lazy_init`, the compiled core's, adds to it).
_initialized: set[tuple[str, int]] = set()


def _is_initialized(b: Backend, index: int) -> bool:
    """False only if ``b`` needs lazy initialisation (overrides ``init_device``) and no thread
    has initialised device ``index`` yet; used by "no-op before initialisation" functions."""
    return (b.name, index) in _initialized or not _needs_init_of(b)


_device_objs: dict[tuple[str, int], device] = {}


def _device_obj(name: str, index: int) -> device:
    """A cached :class:`device` for ``(name, index)`` (devices are immutable)."""
    d = _device_objs.get((name, index))
    if d is None:
        d = _device_objs[(name, index)] = device(name, index)
    return d


def _current_index(b: Backend) -> int:
    return _tls.device.get(b.name, 0)


def _index_arg(value: object, what: str, unit: str = "", *, parser: bool = False,
               expected: str | None = None) -> int:
    """``value`` as a plain int, as PyTorch's argument parser reads an int argument: an int (a
    subclass by its value), or an integer object with ``__index__`` (a numpy integer); never
    a bool (numpy's included) or a float. What ``__index__`` raises comes out as from
    ``operator.index``, or with ``parser=True`` is this ``TypeError`` (torch's parser, pybind11).

    Raises:
        TypeError: anything else, ``"<what> must be an int<unit>, got <type>"`` (``expected``
            replaces the words before ", got").

    Example::

        >>> import numpy as np
        >>> from accelrt._device import _index_arg
        >>> _index_arg(np.int64(-1), "priority")
        -1
    """
    why = ""
    if not isinstance(value, (bool, np.bool_)):   # numpy < 2.4 gives np.bool_ an index
        try:
            return operator.index(value)   # type: ignore[arg-type]  # a TypeError says no
        except TypeError:
            pass
        except Exception as exc:
            if not parser:
                raise
            why = index_failure(exc)
    raise TypeError(f"{expected or f'{what} must be an int{unit}'}, got {type_shown(value)}{why}")


def _plain_int(value: int) -> int:
    """``value`` as a plain ``int``: an instance of a subclass of ``int`` is read by its value,
    as PyTorch's C++ and accelrt's compiled (mypyc) functions read it, whatever the subclass's
    ``__eq__``, ``__hash__``, ``__index__`` or ``__int__`` say. accelrt's tables (current
    devices, streams, allocators) and the backends' raw operations take plain ints only. The
    per-call paths (:func:`_check_index`, :class:`device`, :class:`device_index`) test
    ``type(x) is int`` before calling it: the call would cost them about one empty call.

    Example::

        >>> from accelrt._device import _plain_int
        >>> class Index(int):
        ...     def __eq__(self, other: object) -> bool:
        ...         return True
        ...     __hash__ = int.__hash__
        >>> type(_plain_int(Index(1))), _plain_int(Index(1))
        (<class 'int'>, 1)
    """
    return value if type(value) is int else int.__index__(value)


def _negative_index(index: int) -> AcceleratorValueError:
    """The error of a negative device index where one is not allowed: PyTorch's RuntimeError
    text ("Device index must not be negative"), also a ``ValueError``."""
    return AcceleratorValueError(f"Device index must not be negative, got {shown(index)}")


def _check_index(b: Backend, index: int) -> int:
    """``index`` as a plain int (:func:`_plain_int`: an int subclass is compared by its value,
    not by its own operators) if it is below ``b``'s device count.

    Raises:
        AcceleratorIndexError: it is not.
    """
    if type(index) is not int:
        index = _plain_int(index)        # compared by its value, not its own operators
    n = b.device_count()
    if index >= n:
        # torch 2.14's wording (c10/cuda's device index check, a RuntimeError there; an
        # IndexError too here)
        more = b.more_devices_hint
        hint = f"; {more}" if isinstance(more, str) and more else ""
        raise AcceleratorIndexError(
            f"Device index value {shown(index)} is out of index range [0, {n}) (backend "
            f"{b.name!r} has {n} device{'s' if n != 1 else ''}{hint})")
    return index


#: ``(backend, checked index)`` of each device string and :class:`device` with an index that
#: :func:`_get_device` resolved (at most 1024): a backend's device count never shrinks, and
#: registering a backend again clears it (:func:`_forget_backend`)
_resolved: dict[object, tuple[Backend, int]] = {}


class _WrongDeviceError(TypeError, ValueError):
    """A device argument of another type than a device, int, str or None: a ``TypeError``,
    and the ``ValueError`` that PyTorch's ``set_device_index``/``torch.cuda.set_device``
    (``_get_device_index(optional=False)``) raise for it."""


class _BoolDeviceError(AcceleratorTypeError, _WrongDeviceError):
    """A bool given as a device: a ``TypeError`` (torch 2.15's ``torch.device(True)``,
    ``torch.Stream(device=True)``), a ``RuntimeError`` (``torch.cuda``'s functions:
    ``torch.cuda.set_device(True)`` raises "invalid argument to setDevice") and the
    ``ValueError`` of :class:`_WrongDeviceError`."""


def _bool_device(dev: bool, expected: str = "expected a device, int, str or None"
                 ) -> _BoolDeviceError:
    """The error for a bool given as a device or device index (docs/differences.md: torch
    2.15's ``torch.accelerator`` reads ``True`` as 1, its ``torch.cuda`` and ``torch.device``
    refuse it).

    Example::

        >>> from accelrt._device import _bool_device
        >>> str(_bool_device(True))  # doctest: +ELLIPSIS
        'expected a device, int, str or None, got bool: ...; pass int(True) for device 1'
    """
    return _BoolDeviceError(
        f"{expected}, got bool: a bool is not a device index "
        "(torch.cuda refuses it too: \"invalid argument to setDevice\"); pass "
        f"int({dev!r}) for device {int(dev)}")


def _wrong_device(dev: object) -> TypeError:
    """The error for a device argument of another type than a device, int, str or None
    (PyTorch's ``_get_device_index`` reads any such argument as ``None``, the current device,
    where it may be omitted, and raises ``ValueError`` where not; accelrt refuses it, naming
    the type and, for an integer of another type or a device module's ``device`` context
    manager, what to pass instead, with a :class:`_WrongDeviceError`, also a ``ValueError``).

    Example::

        >>> import numpy as np
        >>> from accelrt._device import _wrong_device
        >>> str(_wrong_device(np.int64(1)))
        'expected a device, int, str or None, got numpy.int64; pass the index as an int (1)'
    """
    if isinstance(dev, bool):
        return _bool_device(dev)
    cls = type(dev)
    name = cls.__name__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    hint = ""
    if hasattr(cls, "__index__"):
        try:
            hint = f"; pass the index as an int ({shown(operator.index(dev))})"  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001 - a broken __index__: no hint
            hint = ""
    elif isinstance(getattr(dev, "idx", None), int) and hasattr(cls, "_backend_name"):
        hint = f"; pass its index ({dev.idx!r}) or a device string"   # type: ignore[attr-defined]
    return _WrongDeviceError(f"expected a device, int, str or None, got {name}{hint}")


def _get_device(dev: DeviceLike, *, optional: bool = True, backend: Backend | None = None,
                minus_one: bool = False, torch_parser: bool = False) -> tuple[Backend, int]:
    """The one normaliser: turn any ``DeviceLike`` into ``(backend, checked index)``.

    ``backend`` fixes the backend (device-specific modules); otherwise an int or ``None`` means
    the current accelerator and a string/device names its own backend, which may differ from
    the current accelerator (several backends live in one process). With ``minus_one`` the
    index -1 (only) is the current device, as c10 reads it where ``torch.accelerator`` passes
    an int through (``getCurrentCUDAStream(-1)``, a ``DeviceGuard`` of index -1); any other
    negative index is refused. With ``torch_parser`` it reads a device as PyTorch's C++
    argument parser does (:func:`_parser_form`: a numpy integer is an index, bytes a device
    string), for the functions whose PyTorch counterparts parse it so (``torch.device``,
    ``torch.Stream``, ``torch.Event``, ``torch.Generator``, the factories' and ``to``'s
    ``device``); without it those are refused, as where PyTorch's ``_get_device_index``
    reads them as the current device or refuses them.
    """
    if backend is None and (type(dev) is str or type(dev) is device):
        hit = _resolved.get(dev)
        if hit is not None:
            return hit
    if dev is None:
        b = backend if backend is not None else _require_current()
        if not optional:
            raise ValueError("Expected a device with a specified index or an integer, but "
                             "got: None")
        return b, _tls.device.get(b.name, 0)
    if isinstance(dev, int) and not isinstance(dev, bool):
        b = backend if backend is not None else _require_current()
        index = dev if type(dev) is int else _plain_int(dev)
        if index < 0:
            if minus_one and index == -1:
                return b, _tls.device.get(b.name, 0)
            raise _negative_index(index)
        return b, _check_index(b, index)
    if isinstance(dev, str) and type(dev) is not str:
        dev = str.__str__(dev)   # a str subclass by its value: the cache key is a plain str
    key: object = dev
    if isinstance(dev, str):
        dev = device(dev)
    if not isinstance(dev, device):
        form = _parser_form(dev) if torch_parser else dev
        if form is dev:
            raise _wrong_device(dev)
        return _get_device(form, optional=optional, backend=backend, minus_one=minus_one)
    if backend is not None:
        if dev._type != backend.name:
            raise ValueError(f"Expected a {backend.name} device, but got: {dev}")
        b = backend
    else:
        b = _backend.get_backend(dev._type)
    if dev._index is None:
        if not optional:
            raise ValueError(f"Expected a device with a specified index or an integer, but "
                             f"got: {dev}")
        return b, _tls.device.get(b.name, 0)
    found = b, _check_index(b, dev._index)
    if backend is None and len(_resolved) < 1024:
        _resolved[key] = found
    return found


def _get_device_of(dev: DeviceLike, backend_name: str | None) -> tuple[Backend, int]:
    """:func:`_get_device` with the backend fixed by name (the classes of device-specific
    modules, such as ``accelrt.cpu.Stream``, set ``_backend_name``, and read a device as
    ``torch.cuda``'s classes do) or, for ``None``, not (``accelrt.Stream``, ``accelrt.Event``:
    read as ``torch.Stream``'s and ``torch.Event``'s parser reads it)."""
    if backend_name is None:
        return _get_device(dev, torch_parser=True)
    return _get_device(dev, backend=_backend.get_backend(backend_name))


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
    """Make ``index`` the calling thread's current device of ``b`` (``torch.cuda.set_device``:
    a backend that follows the current device makes its context current first, creating it
    if needed; if that raises, nothing changed)."""
    if _follows_any[0] and b.follows_current_device and _tls.device.get(b.name, 0) != index:
        b.set_current_device(index, True)
    _tls.device[b.name] = index


def set_device_index(device: DeviceLike, /) -> None:
    """Set the calling thread's current device. A negative index is a no-op.

    Args:
        device: an int, a device of the current accelerator, or a string such as ``"cpu:0"``.

    Raises:
        TypeError: ``device`` is not an int, str or device (also a ``ValueError``, as
            PyTorch raises ``ValueError`` for it).
        ValueError: the device is of another backend, or has no index.
        IndexError: the index is out of range.

    Example::

        >>> import accelrt as acc
        >>> acc.set_device_index(0)
        >>> acc.current_device_index()
        0
    """
    if type(device) is int:  # fast path: an index of the current accelerator
        if device < 0:
            return
        b = _current_backend if _current_backend is not None else _require_current()
        if device >= b.device_count():
            _check_index(b, device)
        if _follows_any[0] and b.follows_current_device:   # cuda: its context follows
            _set_index(b, device)
            return
        _tls.device[b.name] = device
        return
    if isinstance(device, int) and not isinstance(device, bool) and _plain_int(device) < 0:
        return
    b, idx = _get_current_device_index(device, optional=False)
    _set_index(b, idx)


# the compiled core (its enter and exit, the devices' keys, _lazy_init) imports _tls,
# _check_index, _require_current and _initialized from here, so it is imported once they are
# defined; _lazy_init is re-exported (every module that issues raw operations imports it
# from here)
from ._device_core import _lazy_init as _lazy_init  # noqa: E402
from ._device_core import _needs_init_of, _SwitchCore  # noqa: E402
from ._device_form import _index_in_type, _parser_form, _resolve  # noqa: E402


class device_index(_SwitchCore):
    """Context manager that sets the calling thread's current device index and restores the
    previous one on exit.

    ``None`` (or a negative index) makes it a no-op. The index is checked on entry. One
    object may be entered again while active (nested), or by several threads at once: each
    exit restores the device its own thread had at its innermost open entry (an exit in a
    thread without an open entry changes nothing).

    Args:
        device: a device index of the current accelerator (an int, or an integer with
            ``__index__`` such as ``numpy.int64``, as torch takes), or ``None``.

    Raises:
        TypeError: ``device`` is not an int or None (a float, a str, a device); a bool
            (``True`` is not device 1, as ``torch.cuda.device(True)`` refuses it) also a
            ``RuntimeError``, torch.cuda's class.
        IndexError: (on entry) the index is out of range.

    Example::

        >>> import accelrt as acc
        >>> with acc.device_index(0):
        ...     acc.current_device_index()
        0
        >>> with acc.device_index(None):  # no-op
        ...     pass
    """

    __slots__ = ()
    # The fields (idx, prev_idx), the class settings (_backend_name, _strict_exit) and the
    # with enter/exit are the compiled core's (_device_core._SwitchCore); the constructor,
    # which checks its argument with accelrt's message, stays here, in pure Python.

    def __init__(self, device: int | None, /) -> None:
        if device is None or type(device) is int:
            self.idx = device
        elif isinstance(device, bool):   # torch.cuda.device(True): "invalid argument"
            raise _bool_device(device, "device_index() takes an int or None")
        else:   # an int subclass by its value, an integer with __index__ (numpy's), as torch
            self.idx = _index_arg(device, "device", parser=True,
                                  expected="device_index() takes an int or None")
        self.prev_idx = -1


def _deprecated(old: str, new: str) -> None:   # ends with torch 2.15's "Use `new` instead."
    warnings.warn(f"`accelrt.{old}` is deprecated. Use `{new}` instead.", FutureWarning, stacklevel=3)


def current_device_idx() -> int:
    """Deprecated alias of :func:`current_device_index` (emits ``FutureWarning``)."""
    _deprecated("current_device_idx", "current_device_index")
    return current_device_index()


def set_device_idx(device: DeviceLike, /) -> None:
    """Deprecated alias of :func:`set_device_index` (emits ``FutureWarning``)."""
    _deprecated("set_device_idx", "set_device_index")
    set_device_index(device)


def get_device_properties(device: DeviceLike = None, /) -> DeviceProperties:
    """Properties of a device, as PyTorch's ``get_device_properties``: attributes
    ``name``, ``total_memory``, ``multi_processor_count``, ``major``, ``minor``, ``uuid``
    (stable across calls and processes), ``L2_cache_size``, ``is_integrated``,
    ``is_multi_gpu_board``, ``warp_size``, ``max_threads_per_multi_processor``,
    ``regs_per_multiprocessor``, ``gcnArchName``, the rest of torch 2.14's
    (``max_threads_per_block``, ``shared_memory_per_block``, ``shared_memory_per_block_optin``,
    ``shared_memory_per_multiprocessor``, ``clock_rate``, ``memory_clock_rate``,
    ``memory_bus_width``, ``pci_bus_id``, ``pci_device_id``, ``pci_domain_id``: 0 where the
    backend does not know them), ``type`` and ``index``, plus the backend's extras. Item access works too (``props["name"]``): the result is a dict. Does not
    initialise a device context.

    Args:
        device: an index of the current accelerator, a device or string (may name another
            backend, e.g. ``"cpu:1"``), or ``None`` for the current device.

    Returns:
        a new :class:`~accelrt._properties.DeviceProperties` (changing it changes nothing in
        the backend).

    Raises:
        TypeError: ``device`` has the wrong type.
        IndexError: the index is out of range.
        BackendUnavailableError: the device's backend cannot be used here.

    Example::

        >>> import accelrt as acc
        >>> props = acc.get_device_properties("cpu:0")
        >>> props.total_memory > 0 and props["total_memory"] == props.total_memory
        True
        >>> props.uuid == acc.get_device_properties("cpu:0").uuid
        True
    """
    from ._properties import make_properties
    b, idx = _get_device(device)
    return make_properties(b.name, idx, b.get_device_properties(idx))


def get_device_capability(device: DeviceLike = None, /) -> dict[str, Any]:
    """Capabilities of a device, at least ``supported_dtypes``: the set of numpy dtype names
    the device supports.

    Args:
        device: as for :func:`get_device_properties`.

    Raises:
        TypeError: ``device`` has the wrong type.
        IndexError: the index is out of range.

    Example::

        >>> import accelrt as acc
        >>> "float32" in acc.get_device_capability("cpu")["supported_dtypes"]
        True
        >>> type(acc.get_device_capability("cpu")["supported_dtypes"])
        <class 'set'>
    """
    b, idx = _get_device(device)
    cap = dict(b.get_device_capability(idx))
    cap["supported_dtypes"] = set(cap.get("supported_dtypes", ()))
    return cap
