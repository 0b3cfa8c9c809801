"""Key-value stores with torch.distributed's names: :class:`Store`, :class:`HashStore`,
:class:`TCPStore`, :class:`FileStore` and :class:`PrefixStore`.

Processes of a job meet through a store: rank 0 writes what the others need (NCCL's unique
id, a barrier count) and the others block in :meth:`Store.get` until it is there. Values are
bytes (a ``str`` is stored as UTF-8); counters written by :meth:`Store.add` are decimal text,
as in torch.

One table implementation serves every store: :class:`HashStore` holds it in the process,
:class:`TCPStore`'s master serves the same table to its clients (its transport:
:mod:`accelrt.distributed._tcpstore`), and :class:`FileStore`
(:mod:`accelrt.distributed._filestore`) keeps it as an append-only log in a file locked with
``fcntl.flock``.

Example::

    >>> import datetime
    >>> from accelrt.distributed import HashStore, PrefixStore
    >>> store = HashStore()
    >>> store.set("first_key", "first_value")
    >>> store.get("first_key")
    b'first_value'
    >>> store.add("counter", 2), store.add("counter", 5)
    (2, 7)
    >>> PrefixStore("job", store).set("k", "v"); store.get("job/k")
    b'v'
    >>> store.set_timeout(datetime.timedelta(seconds=10)); store.timeout
    datetime.timedelta(seconds=10)
"""

from __future__ import annotations

import collections
import datetime
import math
import operator
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ._errors import DistStoreError, QueueEmptyError
from .._errors import index_failure, shown, type_shown
from .._fork import reinit_after_fork

__all__ = ["HashStore", "PrefixStore", "Store"]

#: torch's default store timeout (``torch.distributed.constants.default_pg_timeout``'s store
#: counterpart in ``TCPStore``'s signature).
DEFAULT_STORE_TIMEOUT = datetime.timedelta(seconds=300)


# ---------------------------------------------------------------------------- arguments
def _key(key: object, what: str = "key") -> str:
    """A key as str; ``bytes`` (UTF-8) are accepted as torch's ``std::string`` keys are."""
    if isinstance(key, bytes):
        try:
            return key.decode()
        except UnicodeDecodeError:
            raise ValueError(f"{what} {key[:40]!r} is not UTF-8: pass a str (or UTF-8 bytes)"
                             ) from None
    if not isinstance(key, str):
        raise TypeError(f"{what} must be a str, got {type_shown(key)}")
    # a str subclass by its value, as torch's std::string binding reads it: its own __hash__,
    # __eq__ or __str__ (which may raise) are not called where the key is used
    return key if type(key) is str else str.__str__(key)


def _keys(keys: object) -> list[str]:
    if isinstance(keys, (str, bytes)) or not isinstance(keys, Sequence):
        raise TypeError(f"keys must be a list of str, got {type_shown(keys)}")
    return [_key(k) for k in keys]


def _values(values: object) -> list[Any]:
    """``multi_set``'s values as a list: a sequence, not a str or bytes (torch's binding
    takes a list; ``"ab"`` is no list of two values)."""
    if isinstance(values, (str, bytes, bytearray)) or not isinstance(values, Sequence):
        raise TypeError(f"values must be a list of str or bytes, got {type_shown(values)}")
    return list(values)


def _value(value: object, what: str = "value") -> bytes:
    if isinstance(value, str):
        return str.encode(value)   # a str subclass by its value (its own encode not called)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{what} must be a str or bytes, got {type_shown(value)}")


_INT64_MIN, _INT64_MAX = -(2 ** 63), 2 ** 63 - 1


_INT32_MIN, _INT32_MAX = -(2 ** 31), 2 ** 31 - 1


def _index_of(value: object, what: str) -> int:
    """``operator.index(value)`` as torch's pybind11 bindings read an integer argument: an
    exception of ``value``'s ``__index__``, whatever its class, makes it no integer (pybind11
    clears it and refuses the call with ``TypeError``)."""
    why = ""
    try:
        return operator.index(value)   # type: ignore[arg-type]
    except TypeError:
        pass
    except Exception as exc:
        why = index_failure(exc)
    raise TypeError(f"{what} must be an int, got {type_shown(value)}{why}")


def _binding_int(value: object, what: str, lo: int, hi: int, ctype: str) -> int:
    """An integer argument of a store's constructor or method, as torch 2.15's binding reads
    it into a C type (``ctype``, such as "a uint16", of range ``[lo, hi]``): an int or an
    integer with ``__index__`` (numpy's), never a bool (accelrt's rule); a value outside the
    C type's range is pybind11's ``TypeError`` ("incompatible function arguments"), as is an
    ``__index__`` that raises.

    Example::

        >>> from accelrt.distributed._store import _binding_int
        >>> _binding_int(8080, "port", 0, 65535, "a uint16")
        8080
        >>> _binding_int(70000, "port", 0, 65535, "a uint16")
        Traceback (most recent call last):
        ...
        TypeError: port must be an int in [0, 65535] (torch's binding reads a uint16), got 70000
    """
    if isinstance(value, (bool, np.bool_)):   # numpy < 2.4 indexes np.bool_
        raise TypeError(f"{what} must be an int, got bool")
    n = _index_of(value, what)
    if not lo <= n <= hi:
        raise TypeError(f"{what} must be an int in [{lo}, {hi}] (torch's binding reads "
                        f"{ctype}), got {shown(n)}")
    return n


def _flag(value: object, what: str) -> bool:
    """A flag as torch's binding converts it: ``None`` (False), or an object with a truth
    value of its own (a bool, a number); TypeError for a str, a list or another object
    (whose truth is its length or its existence)."""
    if value is None:
        return False
    if not hasattr(type(value), "__bool__"):
        raise TypeError(f"{what} must be a bool, got {type_shown(value)}")
    try:
        return bool(value)
    except Exception:   # noqa: BLE001 - its __bool__ raised: not a flag (torch: TypeError)
        raise TypeError(f"{what} must be a bool, got {type_shown(value)}") from None


def _amount(amount: object) -> int:
    """``add``'s amount: any integer (``numpy.int64``, ``bool`` and ``numpy.bool`` too, as
    torch's int64_t argument) that fits in a signed 64-bit integer."""
    if isinstance(amount, np.bool_):   # numpy 2.1-2.3 index it with a warning, 2.4 refuses
        return int(amount)
    value = _index_of(amount, "amount")
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise TypeError(f"amount must fit in a signed 64-bit integer (the store's counters are "
                        f"int64), got {value}")
    return value


def _compare_set_refusal(current: bytes | None, expected: bytes) -> bytes | None:
    """torch's compare_set rule, for every table: what ``compare_set`` returns without
    writing (``expected`` when the key is missing and ``expected`` is not empty, the current
    value when it differs from ``expected``), or None when ``desired`` is to be written."""
    if current is None:
        return expected or None
    return current if current != expected else None


def _int(value: object, what: str) -> int:
    """An integer argument (``numpy`` integers too, as torch's bindings accept)."""
    if isinstance(value, (bool, np.bool_)):   # numpy < 2.4 indexes np.bool_
        raise TypeError(f"{what} must be an int, got bool")
    try:
        return operator.index(value)   # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{what} must be an int, got {type_shown(value)}") from None


def _seconds_of(timeout: object) -> float:
    """A ``datetime.timedelta`` or a number of seconds (not a bool) as seconds; the range
    checks are the caller's (``TypeError`` for another type)."""
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        return float(timeout)
    raise TypeError(f"timeout must be a datetime.timedelta or a number of seconds, got "
                    f"{type_shown(timeout)}")


def _positive_seconds(timeout: object, where: str) -> float:
    """A ``datetime.timedelta`` or a number of seconds, positive and at most
    ``datetime.timedelta.max``, as seconds (``ProcessGroup.set_timeout``'s argument).

    Raises:
        TypeError: neither a ``timedelta`` nor a number (a bool included).
        ValueError: not positive, NaN, or beyond ``timedelta.max`` (torch 2.15's gloo
            refuses a negative timeout and NaN).

    Example::

        >>> import datetime
        >>> from accelrt.distributed._store import _positive_seconds
        >>> _positive_seconds(datetime.timedelta(seconds=30), "set_timeout()")
        30.0
    """
    value = _seconds_of(timeout)
    if not value > 0:   # NaN too
        raise ValueError(f"{where}: timeout must be positive, got {value}; pass a "
                         "datetime.timedelta (or seconds) above zero")
    if value > datetime.timedelta.max.total_seconds():
        raise ValueError(f"{where}: timeout must be finite (at most datetime.timedelta.max), "
                         f"got {value}")
    return value


def _timedelta(timeout: object) -> datetime.timedelta:
    """A timeout as a ``timedelta``; a float is seconds (as torch's bindings accept)."""
    if isinstance(timeout, float):
        if not math.isfinite(timeout):
            raise ValueError(f"timeout must be a finite number of seconds, got {timeout}")
        try:
            return datetime.timedelta(seconds=timeout)
        except OverflowError:
            raise ValueError(f"timeout {timeout} s is out of range: at most "
                             f"{datetime.timedelta.max.total_seconds():.0f} s") from None
    if not isinstance(timeout, datetime.timedelta):
        raise TypeError(f"timeout must be a datetime.timedelta (or a float of seconds), got "
                        f"{type_shown(timeout)} (e.g. datetime.timedelta(seconds=30))")
    return timeout


def _wait_timeout(keys: Sequence[str], timeout: float, style: str = "hash") -> DistStoreError:
    """A store's timeout, worded as torch 2.15's store of that ``style`` words it, then what
    to check: ``"tcp"`` (its TCPStore: every key waited for, with the "/" its client puts
    before a key: "wait timeout after 100ms, keys: /a, /b"), ``"hash"`` (its HashStore and
    its FileStore's ``wait``: "Wait timeout") or ``"file_get"`` (its FileStore's ``get``:
    "Timeout waiting for key: a after 100 ms", naming the first key that is missing)."""
    ms = f"{timeout * 1000:.0f}"
    if style == "tcp":
        head = f"wait timeout after {ms}ms, keys: {', '.join('/' + k for k in keys)}"
    elif style == "file_get":
        head = f"Timeout waiting for key: {keys[0] if keys else ''} after {ms} ms"
    else:
        head = f"Wait timeout after {ms}ms, keys: {', '.join(keys)}"
    return DistStoreError(f"{head}; no process set them in time: check that every rank "
                          "started, or raise the store's timeout (set_timeout)")


_COUNTER = re.compile(rb"[ \t\n\v\f\r]*([+-]?[0-9]+)")


def _counter(key: str, old: bytes, amount: int) -> int:
    """``old`` read as torch reads a counter (``std::stoll``: leading blanks, a sign, the
    leading digits; an empty value is 0) plus ``amount``, wrapped to int64 as torch's is."""
    if not old:
        value = 0
    else:
        match = _COUNTER.match(old)
        value = int(match.group(1)) if match else _INT64_MAX + 1
        if match is None or not _INT64_MIN <= value <= _INT64_MAX:
            what = "not a counter" if match is None else "out of the int64 range"
            raise ValueError(f"add({key!r}, {amount}): the value stored under {key!r} is "
                             f"{what} ({old[:40]!r}); add() only counts keys that hold a "
                             "decimal int64 (written by add(), or set() to one)")
    return (value + amount - _INT64_MIN) % 2 ** 64 + _INT64_MIN


class _StoreTimeout:
    """The default of ``Store.wait``'s ``timeout``: the store's own (torch 2.15's ``wait``
    has two overloads, ``wait(keys)`` and ``wait(keys, timeout)``, and refuses
    ``timeout=None`` with ``TypeError``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<the store's timeout>"


#: ``Store.wait(keys)``: wait up to the store's timeout
_STORE_TIMEOUT: Any = _StoreTimeout()


def _wait_seconds(store: Store, timeout: object) -> float:
    """``wait``'s timeout in seconds (>= 0): the store's for :data:`_STORE_TIMEOUT`, else a
    ``timedelta`` or a float of seconds; ``None`` is a ``TypeError``, as in torch 2.15."""
    if timeout is _STORE_TIMEOUT:
        return store._seconds()
    if timeout is None:
        raise TypeError("wait() takes a timeout as a datetime.timedelta (or a float of "
                        "seconds), got None; leave it out for the store's timeout: "
                        "wait(keys)")
    return store._seconds(timeout)   # type: ignore[arg-type]


def _not_implemented(method: str) -> NotImplementedError:
    """What a :class:`Store` subclass raises for a primitive it did not implement: torch's
    words ("Not implemented.", a ``RuntimeError``; ``NotImplementedError`` is one), and the fix."""
    return NotImplementedError(f"Not implemented. A Store subclass must implement {method}() "
                               f"(the base class has no table of its own)")


# ---------------------------------------------------------------------------- the table
class _Table:
    """The operations every store performs, with explicit timeouts in seconds."""

    def set(self, key: str, value: bytes) -> None:
        raise NotImplementedError("The 'set' method must be implemented.")

    def get(self, key: str, timeout: float) -> bytes:
        return self.multi_get([key], timeout)[0]

    def add(self, key: str, amount: int) -> int:
        raise NotImplementedError("The 'add' method must be implemented.")

    def compare_set(self, key: str, expected: bytes, desired: bytes) -> bytes:
        raise NotImplementedError("The 'compare_set' method must be implemented.")

    def append(self, key: str, value: bytes) -> None:
        raise NotImplementedError("The 'append' method must be implemented.")

    def wait(self, keys: list[str], timeout: float) -> None:
        raise NotImplementedError("The 'wait' method must be implemented.")

    def check(self, keys: list[str]) -> bool:
        raise NotImplementedError("The 'check' method must be implemented.")

    def delete_key(self, key: str) -> bool:
        raise NotImplementedError("The 'delete_key' method must be implemented.")

    def num_keys(self) -> int:
        raise NotImplementedError("The 'num_keys' method must be implemented.")

    def list_keys(self) -> list[str]:
        raise NotImplementedError("The 'list_keys' method must be implemented.")

    def multi_get(self, keys: list[str], timeout: float) -> list[bytes]:
        raise NotImplementedError("The 'multi_get' method must be implemented.")

    def multi_set(self, keys: list[str], values: list[bytes]) -> None:
        for k, v in zip(keys, values):
            self.set(k, v)

    def queue_push(self, key: str, value: bytes) -> None:
        raise NotImplementedError("queue support is not implemented.")

    def queue_pop(self, key: str, block: bool, timeout: float) -> bytes:
        raise NotImplementedError("queue support is not implemented.")

    def queue_len(self, key: str) -> int:
        raise NotImplementedError("queue support is not implemented.")


class _MemoryTable(_Table):
    """The table in this process's memory (HashStore, and the TCPStore master's server)."""

    def __init__(self, timeout_style: str = "hash") -> None:
        self._cond = reinit_after_fork(threading.Condition())
        self._data: dict[str, bytes] = {}                            # guarded by _cond
        self._queues: dict[str, collections.deque[bytes]] = {}       # guarded by _cond
        self.closed = False                                          # guarded by _cond
        self._timeout_style = timeout_style   # how a timeout is worded (_wait_timeout)

    def _present(self, key: str) -> bool:
        return key in self._data or bool(self._queues.get(key))

    def _wait_for(self, pred: Callable[[], bool], keys: Sequence[str], timeout: float) -> None:
        """Wait (holding ``_cond``) until ``pred()``; DistStoreError after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while not pred():
            if self.closed:
                raise DistStoreError("the store was closed while waiting for keys "
                                     f"{', '.join(keys)}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise _wait_timeout(keys, timeout, self._timeout_style)
            self._cond.wait(left)

    def set(self, key: str, value: bytes) -> None:
        with self._cond:
            self._data[key] = value
            self._cond.notify_all()

    def add(self, key: str, amount: int) -> int:
        with self._cond:
            new = _counter(key, self._data.get(key, b"0"), amount)
            self._data[key] = str(new).encode()
            self._cond.notify_all()
            return new

    def compare_set(self, key: str, expected: bytes, desired: bytes) -> bytes:
        with self._cond:
            kept = _compare_set_refusal(self._data.get(key), expected)
            if kept is not None:
                return kept
            self._data[key] = desired
            self._cond.notify_all()
            return desired

    def append(self, key: str, value: bytes) -> None:
        with self._cond:
            self._data[key] = self._data.get(key, b"") + value
            self._cond.notify_all()

    def wait(self, keys: list[str], timeout: float) -> None:
        with self._cond:
            self._wait_for(lambda: all(self._present(k) for k in keys), keys, timeout)

    def check(self, keys: list[str]) -> bool:
        with self._cond:
            return all(self._present(k) for k in keys)

    def delete_key(self, key: str) -> bool:
        with self._cond:
            return self._data.pop(key, None) is not None

    def num_keys(self) -> int:
        with self._cond:
            return len(self._data)

    def list_keys(self) -> list[str]:
        with self._cond:
            return list(self._data)

    def multi_get(self, keys: list[str], timeout: float) -> list[bytes]:
        with self._cond:
            self._wait_for(lambda: all(k in self._data for k in keys), keys, timeout)
            return [self._data[k] for k in keys]

    def multi_set(self, keys: list[str], values: list[bytes]) -> None:
        with self._cond:
            self._data.update(zip(keys, values))
            self._cond.notify_all()

    def queue_push(self, key: str, value: bytes) -> None:
        with self._cond:
            self._queues.setdefault(key, collections.deque()).append(value)
            self._cond.notify_all()

    def queue_pop(self, key: str, block: bool, timeout: float) -> bytes:
        with self._cond:
            if not block and not self._queues.get(key):
                raise QueueEmptyError(f"queue_pop({key!r}, block=False): the queue is empty")
            self._wait_for(lambda: bool(self._queues.get(key)), [key], timeout)
            return self._queues[key].popleft()

    def queue_len(self, key: str) -> int:
        with self._cond:
            return len(self._queues.get(key, ()))

    def wait_count(self, key: str, target: int, timeout: float) -> int:
        """Wait until the counter ``key`` reaches ``target``; its value when it did, or at
        the timeout."""
        with self._cond:
            deadline = time.monotonic() + timeout
            while True:
                value = int(self._data.get(key, b"0"))
                left = deadline - time.monotonic()
                if value >= target or left <= 0 or self.closed:
                    return value
                self._cond.wait(left)

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()


# ---------------------------------------------------------------------------- the stores
class Store:
    """Base class of the stores (torch's ``torch.distributed.Store``).

    A subclass implements ``set``, ``get``, ``add``, ``compare_set``, ``wait``, ``check``,
    ``delete_key`` and ``num_keys``; ``append``, ``multi_get``, ``multi_set`` and ``barrier``
    then work through them (as torch's defaults do). The built-in stores implement all of
    them atomically.

    Example::

        >>> from accelrt.distributed import Store
        >>> class Mine(Store):
        ...     def __init__(self):
        ...         super().__init__(); self.d = {}
        ...     def set(self, key, value): self.d[key] = value.encode() if isinstance(value, str) else value
        ...     def get(self, key): return self.d[key]
        ...     def check(self, keys): return all(k in self.d for k in keys)
        ...     def compare_set(self, key, expected, desired):
        ...         self.set(key, desired); return self.get(key)
        >>> s = Mine(); s.multi_set(["a", "b"], ["1", "2"]); s.multi_get(["a", "b"])
        [b'1', b'2']
    """

    def __init__(self) -> None:
        self._timeout = DEFAULT_STORE_TIMEOUT

    # timeouts ----------------------------------------------------------------
    @property
    def timeout(self) -> datetime.timedelta:
        """The store's default timeout (used by ``get``, ``wait`` and ``multi_get``)."""
        return self._timeout

    def set_timeout(self, timeout: datetime.timedelta) -> None:
        """Set the store's default timeout (a ``datetime.timedelta``)."""
        self._timeout = _timedelta(timeout)

    def _seconds(self, timeout: datetime.timedelta | None = None) -> float:
        t = self.timeout if timeout is None else _timedelta(timeout)
        return max(t.total_seconds(), 0.0)

    # primitives (a subclass implements these) --------------------------------
    def set(self, key: str, value: str | bytes) -> None:
        """Insert ``key`` with ``value`` (str or bytes), overwriting an existing value."""
        raise _not_implemented("set")

    def get(self, key: str) -> bytes:
        """The value of ``key``, waiting up to the store's timeout for it to be set.

        Raises:
            DistStoreError: ``key`` was not set within the timeout.
        """
        raise _not_implemented("get")

    def add(self, key: str, amount: int) -> int:
        """Add ``amount`` to the counter ``key`` (created at 0) and return the new value.

        Raises:
            ValueError: ``key`` holds a value that is not a counter.
        """
        raise _not_implemented("add")

    def compare_set(self, key: str, expected_value: str | bytes,
                    desired_value: str | bytes) -> bytes:
        """Set ``key`` to ``desired_value`` if it holds ``expected_value`` (or is missing and
        ``expected_value`` is empty); returns the value ``key`` holds afterwards (for a
        missing key with a non-empty ``expected_value``: ``expected_value``)."""
        raise _not_implemented("compare_set")

    def wait(self, keys: list[str], timeout: datetime.timedelta = _STORE_TIMEOUT) -> None:
        """Wait until every key of ``keys`` is set (``timeout``: a ``timedelta`` or a float of
        seconds; left out, the store's).

        Raises:
            TypeError: ``keys`` is not a list of str, or ``timeout`` is not a ``timedelta``
                or a float (``None`` neither: torch 2.15's ``wait(keys, None)`` raises it).
            DistStoreError: not all were set within the timeout.
        """
        seconds = _wait_seconds(self, timeout)
        deadline = time.monotonic() + seconds
        keys = _keys(keys)
        while not self.check(keys):
            if time.monotonic() > deadline:
                raise _wait_timeout(keys, seconds)
            time.sleep(0.01)

    def check(self, keys: list[str]) -> bool:
        """True if every key of ``keys`` is set (does not wait)."""
        raise _not_implemented("check")

    def delete_key(self, key: str) -> bool:
        """Delete ``key``; True if it existed."""
        raise _not_implemented("delete_key")

    def num_keys(self) -> int:
        """The number of keys in the store (the stores' own bookkeeping keys included, as in
        torch)."""
        raise _not_implemented("num_keys")

    def list_keys(self) -> list[str]:
        """Every key set in the store."""
        raise _not_implemented("list_keys")

    # extended API (defaults in terms of the primitives) ----------------------
    def has_extended_api(self) -> bool:
        """True if the store implements ``append``, ``multi_get`` and ``multi_set`` natively
        (the base class runs them through the primitives)."""
        return False

    def append(self, key: str, value: str | bytes) -> None:
        """Append ``value`` to the value of ``key`` (created if missing)."""
        key, data = _key(key), _value(value)
        cur = b""
        while True:   # compare-and-swap loop, as torch's default
            new = cur + data
            got = self.compare_set(key, cur, new)
            if got == new:
                return
            cur = got

    def multi_get(self, keys: list[str]) -> list[bytes]:
        """The values of ``keys``, waiting up to the store's timeout for each."""
        return [self.get(k) for k in _keys(keys)]

    def multi_set(self, keys: list[str], values: list[str | bytes]) -> None:
        """Set each key of ``keys`` to the value at the same position of ``values``."""
        keys = _keys(keys)
        values = _values(values)
        if len(keys) != len(values):
            raise ValueError(f"multi_set: {len(keys)} keys but {len(values)} values")
        for k, v in zip(keys, values):
            self.set(k, v)

    def barrier(self, key: str, world_size: int,
                timeout: datetime.timedelta | None = None) -> None:
        """Block until ``world_size`` callers have called ``barrier`` with ``key``.

        Raises:
            TypeError: ``world_size`` is not an int (``bool`` neither) or is beyond int64, or
                ``timeout`` is not a ``timedelta`` or a float of seconds (checked before this
                caller is counted in).
            ValueError: ``world_size`` is below 1.
            DistStoreError: they did not all arrive within ``timeout`` (default: the store's).
        """
        key = _key(key)
        # (a float or a str never equals the count: every caller waited out the timeout;
        # torch's binding reads an int64, and an integer with __index__)
        world_size = _binding_int(world_size, "world_size", _INT64_MIN, _INT64_MAX, "an int64")
        if world_size < 1:
            raise ValueError(f"world_size must be at least 1, got {world_size}")
        if timeout is not None:
            timeout = _timedelta(timeout)
        if int(self.add(f"{key}/num_members", 1)) == world_size:
            self.set(f"{key}/last_member", b"1")
        if timeout is None:
            self.wait([f"{key}/last_member"])
        else:
            self.wait([f"{key}/last_member"], timeout)

    def queue_push(self, key: str, value: str | bytes) -> None:
        """Push ``value`` onto the queue ``key``."""
        raise NotImplementedError("queue support is not implemented.")

    def queue_pop(self, key: str, block: bool = True) -> bytes:
        """Pop the oldest value of the queue ``key``, waiting up to the store's timeout if it
        is empty (``block=False``: raise :class:`QueueEmptyError` instead)."""
        raise NotImplementedError("queue support is not implemented.")

    def queue_len(self, key: str) -> int:
        """The number of values in the queue ``key`` (0 if there is none)."""
        raise NotImplementedError("queue support is not implemented.")

    def clone(self) -> Store:
        """A new store object on the same data (for use from another thread)."""
        raise _not_implemented("clone")


class _TableStore(Store):
    """A store whose every operation is one call of a :class:`_Table`."""

    def __init__(self, table: _Table) -> None:
        super().__init__()
        self._table = table

    def has_extended_api(self) -> bool:
        return True

    def set(self, key: str, value: str | bytes) -> None:
        self._table.set(_key(key), _value(value))

    def get(self, key: str) -> bytes:
        return self._table.get(_key(key), self._seconds())

    def add(self, key: str, amount: int) -> int:
        return self._table.add(_key(key), _amount(amount))

    def compare_set(self, key: str, expected_value: str | bytes,
                    desired_value: str | bytes) -> bytes:
        return self._table.compare_set(_key(key), _value(expected_value, "expected_value"),
                                       _value(desired_value, "desired_value"))

    def wait(self, keys: list[str], timeout: datetime.timedelta = _STORE_TIMEOUT) -> None:
        seconds = _wait_seconds(self, timeout)
        self._table.wait(_keys(keys), seconds)

    def check(self, keys: list[str]) -> bool:
        return self._table.check(_keys(keys))

    def delete_key(self, key: str) -> bool:
        return self._table.delete_key(_key(key))

    def num_keys(self) -> int:
        return self._table.num_keys()

    def list_keys(self) -> list[str]:
        return self._table.list_keys()

    def append(self, key: str, value: str | bytes) -> None:
        self._table.append(_key(key), _value(value))

    def multi_get(self, keys: list[str]) -> list[bytes]:
        return self._table.multi_get(_keys(keys), self._seconds())

    def multi_set(self, keys: list[str], values: list[str | bytes]) -> None:
        keys = _keys(keys)
        values = _values(values)
        if len(keys) != len(values):
            raise ValueError(f"multi_set: {len(keys)} keys but {len(values)} values")
        self._table.multi_set(keys, [_value(v) for v in values])

    def queue_push(self, key: str, value: str | bytes) -> None:
        self._table.queue_push(_key(key), _value(value))

    def queue_pop(self, key: str, block: bool = True) -> bytes:
        key, block = _key(key), _flag(block, "block")
        return self._table.queue_pop(key, block, self._seconds())

    def queue_len(self, key: str) -> int:
        return self._table.queue_len(_key(key))


class HashStore(_TableStore):
    """A store in this process's memory, shared by its threads (torch's ``HashStore``).

    Example::

        >>> from accelrt.distributed import HashStore
        >>> s = HashStore(); s.append("k", "po"); s.append("k", "tato"); s.get("k")
        b'potato'
    """

    def __init__(self) -> None:
        super().__init__(_MemoryTable())

    def clone(self) -> HashStore:
        twin = HashStore.__new__(HashStore)
        _TableStore.__init__(twin, self._table)
        twin._timeout = self._timeout
        return twin


# ---------------------------------------------------------------------------- PrefixStore
def _wrapped_bytes(value: object, method: str) -> bytes:
    """A value from the store a :class:`PrefixStore` wraps, which must be bytes (torch's
    binding converts the wrapped store's answer to bytes, or refuses it)."""
    if not isinstance(value, bytes):
        raise TypeError(f"Object of type {type(value).__name__!r} is not an instance of "
                        f"'bytes': the wrapped store's {method}() must return bytes")
    return value


class PrefixStore(Store):
    """Every key of ``store`` under ``prefix + "/"`` (torch's ``PrefixStore``): so that
    several users of one store cannot clash. The timeout is the underlying store's.

    Example::

        >>> from accelrt.distributed import HashStore, PrefixStore
        >>> base = HashStore(); p = PrefixStore("job1", base); p.set("k", "v")
        >>> base.get("job1/k"), p.list_keys()
        (b'v', ['k'])
    """

    def __init__(self, prefix: str, store: Store) -> None:
        super().__init__()
        self._prefix = _key(prefix, "prefix")
        if store is None:
            raise ValueError("store argument cannot be None")
        if not isinstance(store, Store):
            raise TypeError(f"store must be an accelrt.distributed.Store, got "
                            f"{type_shown(store)}")
        self._store = store

    def _k(self, key: str) -> str:
        return f"{self._prefix}/{_key(key)}"

    @property
    def underlying_store(self) -> Store:
        """The wrapped store."""
        return self._store

    @property
    def _underlying_non_prefix_store(self) -> Store:
        """The first store below this one that is not a :class:`PrefixStore` (torch's
        private name, which its tests and c10d use to reach the TCPStore)."""
        store = self._store
        while isinstance(store, PrefixStore):
            store = store._store
        return store

    @property
    def timeout(self) -> datetime.timedelta:
        return self._store.timeout

    def set_timeout(self, timeout: datetime.timedelta) -> None:
        self._store.set_timeout(timeout)

    def has_extended_api(self) -> bool:
        return self._store.has_extended_api()

    def set(self, key: str, value: str | bytes) -> None:
        self._store.set(self._k(key), _value(value))

    def get(self, key: str) -> bytes:
        return _wrapped_bytes(self._store.get(self._k(key)), "get")

    def add(self, key: str, amount: int) -> int:
        return self._store.add(self._k(key), amount)

    def compare_set(self, key: str, expected_value: str | bytes,
                    desired_value: str | bytes) -> bytes:
        return self._store.compare_set(self._k(key), _value(expected_value, "expected_value"),
                                       _value(desired_value, "desired_value"))

    def wait(self, keys: list[str], timeout: datetime.timedelta = _STORE_TIMEOUT) -> None:
        _wait_seconds(self, timeout)    # (None refused before the underlying store is asked)
        prefixed = [self._k(k) for k in _keys(keys)]
        if timeout is _STORE_TIMEOUT:
            self._store.wait(prefixed)
        else:
            self._store.wait(prefixed, timeout)

    def check(self, keys: list[str]) -> bool:
        return bool(self._store.check([self._k(k) for k in _keys(keys)]))

    def delete_key(self, key: str) -> bool:
        return self._store.delete_key(self._k(key))

    def num_keys(self) -> int:
        return self._store.num_keys()

    def list_keys(self) -> list[str]:
        head = f"{self._prefix}/"
        return [k[len(head):] for k in self._store.list_keys() if k.startswith(head)]

    def append(self, key: str, value: str | bytes) -> None:
        self._store.append(self._k(key), _value(value))

    def multi_get(self, keys: list[str]) -> list[bytes]:
        values = self._store.multi_get([self._k(k) for k in _keys(keys)])
        return [_wrapped_bytes(v, "multi_get") for v in values]

    def multi_set(self, keys: list[str], values: list[str | bytes]) -> None:
        self._store.multi_set([self._k(k) for k in _keys(keys)],
                              [_value(v) for v in _values(values)])

    def queue_push(self, key: str, value: str | bytes) -> None:
        self._store.queue_push(self._k(key), _value(value))

    def queue_pop(self, key: str, block: bool = True) -> bytes:
        return self._store.queue_pop(self._k(key), _flag(block, "block"))

    def queue_len(self, key: str) -> int:
        return self._store.queue_len(self._k(key))

    def clone(self) -> PrefixStore:
        return PrefixStore(self._prefix, self._store.clone())
