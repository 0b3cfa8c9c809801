"""The compiled core of :class:`accelrt.device_index`: its fields and ``with`` enter and exit.

The public class (``_device.device_index``, and the device modules' ``device`` and
``device_of``) stays pure Python and subclasses this one: it keeps the constructor, which
checks the user's argument with accelrt's own message (a compiled one would refuse a wrong
type with mypyc's first), and the docstring users read. In the compiled build this core is a
native class that allows interpreted subclasses; in the pure build a plain class with
``__slots__``, so nothing changes there. ``_device`` imports this module after defining what
it imports from there (``_tls``, ``_check_index``, ``_require_current``).

Example::

    >>> import accelrt as acc
    >>> from accelrt._device_core import _SwitchCore
    >>> isinstance(acc.device_index(0), _SwitchCore)
    True
"""

from __future__ import annotations

from typing import Any, ClassVar, Final, NamedTuple

from . import _backend
from . import _device as _dev
from ._device import _bool_device, _check_index, _index_arg, _initialized, _require_current, _tls
from ._handles import mypyc_attr

__all__: list[str] = []

#: ``_device``'s globals, read by key: ``_current_backend`` is rebound, and a compiled module
#: reads an attribute of a Python module through a generic getattr (about one empty call)
_dev_globals: Final = vars(_dev)
#: ``_backend._follows_any`` (a C variable here, not a lookup)
_follows: Final = _backend._follows_any


class _Key(NamedTuple):
    """A device, ``(backend name, index)``: its key in the per-thread tables (current streams,
    devices initialised: :func:`accelrt._device._lazy_init` adds the one key object of the
    device, so that a compiled caller's test of its key finds it by identity). A named
    tuple so that the compiled build keeps it as one tuple object (mypyc unboxes a plain
    ``tuple[str, int]`` field and would build a new tuple at each dict access)."""

    name: str
    device_index: int


#: The one :class:`_Key` of each device, by ``(name, index)`` (:func:`_key_of`)
_keys: Final[dict[tuple[str, int], _Key]] = {}


def _key_of(name: str, index: int) -> _Key:
    """The :class:`_Key` of device ``index`` of backend ``name``, made once: a named tuple is
    built by its Python ``__new__``, which costs about 7 empty calls; the lookup about one.
    (Two threads making the first one at once keep equal keys.)"""
    key = _keys.get((name, index))
    if key is None:
        key = _keys[(name, index)] = _Key(name, index)
    return key


#: backend class -> whether it overrides ``Backend.init_device`` (:func:`_needs_init_of`)
_needs_init: Final[dict[type, bool]] = {}


def _needs_init_of(b: _backend.Backend) -> bool:
    """True if ``b`` overrides :meth:`Backend.init_device` (a context to make current in each
    thread); otherwise :func:`accelrt._device._lazy_init` only keeps its books, which nothing
    reads for ``b`` once some thread initialised the device (``_device._is_initialized``)."""
    cls = type(b)
    needs = _needs_init.get(cls)
    if needs is None:
        needs = _needs_init[cls] = cls.init_device is not _backend.Backend.init_device
    return needs


def _lazy_init(b: _backend.Backend, index: Any) -> None:
    """Call ``b.init_device(index)`` once per thread before the first raw operation there.

    Every module that issues raw backend operations (streams, events, allocator, arrays) calls
    this first (as ``accelrt._device._lazy_init``). :func:`accelrt.synchronize` stays a no-op
    on a device that no thread has initialised when its backend overrides
    :meth:`Backend.init_device` (i.e. needs a context). (``index`` typed ``Any``: an int the
    caller checked, not unboxed again.)
    """
    name = b.name
    key = (name, index)
    inited = _tls.inited
    if key not in inited:
        b.init_device(index)
        # the device's one _Key object: the compiled callers' tests of their key (Site,
        # Event.record) then find it by identity, without comparing two tuples
        inited.add(_key_of(name, index))
        _initialized.add(key)


def _switch_index(ctx: object, idx: object) -> int | None:
    """The index that ``ctx`` (a :class:`device_index`, or a device module's ``device``)
    stands for when a user assigned its ``idx`` attribute after construction: read as the
    constructor reads its argument (an int subclass, or an integer with ``__index__`` such
    as ``numpy.int64``, by its value; None as None). torch reads the attribute on entry too
    (``torch._C._accelerator_exchangeDevice(self.idx)``), refusing what is not an int.

    Raises:
        TypeError: ``idx`` is not an int or None; for a bool, also a ``RuntimeError``, as
            the constructor raises.

    Example::

        >>> import numpy as np
        >>> import accelrt as acc
        >>> from accelrt._device_core import _switch_index
        >>> d = acc.device_index(0)
        >>> _switch_index(d, np.int64(1)), _switch_index(d, None)
        (1, None)
        >>> _switch_index(d, 1.5)
        Traceback (most recent call last):
        ...
        TypeError: device_index.idx takes an int or None, got float
    """
    if idx is None or type(idx) is int:
        return idx
    what = f"{type(ctx).__name__}.idx takes an int or None"
    if isinstance(idx, bool):
        raise _bool_device(idx, what)
    return _index_arg(idx, "idx", parser=True, expected=what)


@mypyc_attr(allow_interpreted_subclasses=True)
class _SwitchCore:
    """The fields of :class:`accelrt.device_index` and its ``with`` enter and exit.

    Fields: ``idx`` is the index to enter (None or negative: the block changes nothing);
    ``prev_idx`` the index the latest entry replaced (``torch.accelerator.device_index``'s
    attribute; -1 until entered). The open entries live in the entering thread's state
    (``_tls.switched``, innermost last: (context manager, backend name, previous index or -1
    for "changed nothing", backend)), so threads sharing one object never touch each other's.

    Both fields are typed ``object``: users may assign them, as torch's plain attributes
    (the constructors store an int or None). A compiled field typed ``int`` would refuse
    another type on assignment with mypyc's own ``TypeError`` where the pure build takes it;
    here both builds take it, and :meth:`__enter__` reads ``idx`` as the constructor reads
    its argument (``_device._switch_index``), as torch reads it on entry.
    """

    __slots__ = ("idx", "prev_idx")

    idx: object
    prev_idx: object

    #: Fixed backend name (device-specific modules such as ``accelrt.cpu``); ``None`` means
    #: the current accelerator.
    _backend_name: ClassVar[str | None] = None
    #: True: an exit without an open entry of the calling thread raises ``RuntimeError``, and
    #: an entry that changes nothing (negative index) is an open entry too (the device
    #: modules' ``device`` context managers).
    _strict_exit: ClassVar[bool] = False

    def __enter__(self) -> None:
        raw = self.idx
        if type(raw) is int:   # what the constructors store: the first test
            idx: int = raw
        elif raw is None:
            idx = -1
        else:   # assigned by the user: checked as the constructor checks its argument
            got = _switch_index(self, raw)
            idx = -1 if got is None else got
        if idx < 0:
            if self._strict_exit:
                _tls.switched.append((self, "", -1, None))
            return
        name = self._backend_name
        if name is not None:
            b = _backend.get_backend(name)
        else:
            cur: _backend.Backend | None = _dev_globals["_current_backend"]
            b = cur if cur is not None else _require_current()
        if idx >= b.device_count():
            _check_index(b, idx)
        d, switched = _tls.switch
        bname = b.name
        prev = d.get(bname, 0)
        if _follows[0] and prev != idx and b.follows_current_device:
            # cuda: the device's context becomes current first (torch's ExchangeDevice); if
            # that raises, the block is not entered
            b.set_current_device(idx, True)
        switched.append((self, bname, prev, b))
        self.prev_idx = prev
        d[bname] = idx

    def __exit__(self, exc_type: object = None, exc: object = None, tb: object = None) -> None:
        # (three parameters, not ``*exc``: mypyc's fast argument path, as ``Stream.__exit__``)
        d, switched = _tls.switch
        if switched[-1][0] is self:   # (the bottom entry is no block: never empty)
            _, name, prev, b = switched.pop()
        else:     # left out of order, or not entered in this thread
            for i in range(len(switched) - 2, -1, -1):
                if switched[i][0] is self:
                    _, name, prev, b = switched.pop(i)
                    break
            else:
                if self._strict_exit:
                    raise RuntimeError(f"{type(self).__name__}.__exit__ without a matching "
                                       "__enter__ in this thread; use 'with'")
                return
        if prev >= 0:
            # cuda: back to the previous device's context, creating none (torch's
            # MaybeExchangeDevice), if the device changes
            switch = _follows[0] and d.get(name, 0) != prev and b.follows_current_device
            d[name] = prev
            if switch:
                b.set_current_device(prev, False)
