"""How host data becomes an array's dtype, by PyTorch's rules: the dtype ``torch.asarray``
infers from Python data (:func:`infer_dtype`), its checked conversion of Python numbers
(:func:`from_python`), the integer range of ``c10::checked_convert`` that ``fill_``/``full``
share (:func:`int_bounds`), and the unchecked cast of arrays (:func:`cast`: ``copy_``, ``to``,
``asarray`` of a numpy array).

Example::

    >>> import numpy as np
    >>> from accelrt._convert import from_python, infer_dtype
    >>> infer_dtype([1, 2.5]), infer_dtype([np.float16(1), 2]), infer_dtype(np.float64(1))
    (dtype('float32'), dtype('float16'), dtype('float64'))
    >>> from_python([-1, 255], np.dtype("uint8"), infer_dtype([-1, 255])).tolist()
    [255, 255]
    >>> from_python([255.9, -0.5], np.dtype("int8"), infer_dtype([255.9, -0.5]))
    Traceback (most recent call last):
    accelrt._errors.AcceleratorValueError: asarray(): 255.9 does not fit int8 (ints in [-128, 127], ...
"""

from __future__ import annotations

import functools
import itertools
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._errors import AcceleratorTypeError, AcceleratorValueError, shown, type_shown

__all__ = ["cast", "from_python", "infer_dtype", "int_bounds", "plain_data"]

#: The dtype PyTorch infers for each Python scalar type (floats: the default dtype, float32;
#: complex numbers: the default complex dtype, complex64)
_PYTHON = {bool: np.dtype("bool"), int: np.dtype("int64"), float: np.dtype("float32"),
           complex: np.dtype("complex64")}

#: PyTorch's promotion categories: bool < integers < floating < complex
_RANK = {"b": 0, "i": 1, "u": 1, "f": 2, "c": 3}
_NUMBER_TYPES = frozenset(_PYTHON)
_TYPE_RANK = {t: _RANK[dt.kind] for t, dt in _PYTHON.items()}
_PLAIN_SEQUENCES = frozenset((list, tuple))

#: The unsigned dtypes torch's promoteTypes refuses to promote with another (except a float)
_BAREBONES_UNSIGNED = frozenset(("uint16", "uint32", "uint64"))

_INT64_MIN = -(1 << 63)

#: The most dimensions nested Python data may have: numpy's limit (``np.asarray`` reads the
#: data), where PyTorch's is larger; deeper data, or a list that contains itself, is refused
#: with PyTorch's "too many dimensions 'list'"
_MAX_DIMS = 64


def int_bounds(dt: np.dtype) -> tuple[int, int, int]:
    """``(lowest, highest, upper)`` of integer dtype ``dt`` by ``c10::checked_convert``'s
    rule (``c10::overflows``, torch >= 2.14): an int fills ``dt`` in ``[lowest, highest]``,
    where a negative int also fills an unsigned dtype when its magnitude is at most the dtype's
    largest value (it wraps, as C's conversion from int64 does; never below int64's minimum),
    and a float fills it in ``[min, upper)``, truncated toward zero.

    Example::

        >>> import numpy as np
        >>> from accelrt._convert import int_bounds
        >>> int_bounds(np.dtype("uint8")), int_bounds(np.dtype("int8"))
        ((-255, 255, 256), (-128, 127, 128))
    """
    info = np.iinfo(dt)
    signed = dt.kind == "i"
    lowest = int(info.min) if signed else max(-int(info.max), _INT64_MIN)
    return lowest, int(info.max), 1 << (info.bits - signed)


def promote(a: np.dtype, b: np.dtype) -> np.dtype:
    """PyTorch's ``promoteTypes`` of two dtypes: the higher category wins (bool < integer <
    floating < complex; a complex with float64 is complex128), within one category the wider
    type (uint8 with int8 is int16); uint16/32/64 promote only with themselves or a float.

    Raises:
        TypeError: uint16/32/64 with another integer, bool or complex dtype (an
            ``AcceleratorTypeError``, also a ``RuntimeError``, as PyTorch's).
    """
    if a == b:
        return a
    if a.name in _BAREBONES_UNSIGNED or b.name in _BAREBONES_UNSIGNED:
        if a.kind == "f":
            return a
        if b.kind == "f":
            return b
        raise AcceleratorTypeError(f"Promotion for uint16, uint32, uint64 types is not "
                                   f"supported, attempted to promote {a.name} and {b.name}")
    ra, rb = _RANK[a.kind], _RANK[b.kind]
    if ra == rb:
        return np.promote_types(a, b)
    hi, lo = (a, b) if ra > rb else (b, a)
    if hi.kind == "c" and lo.kind == "f" and 2 * lo.itemsize > hi.itemsize:
        return np.dtype("complex128")
    return hi


def _is_sequence(obj: object) -> bool:
    """A nested level of data, as PyTorch's ``PySequence_Check``: an object whose type has
    ``__getitem__`` and is not a ``dict`` (a numpy array of at least one dimension too; never
    a string, bytes or a numpy scalar)."""
    if isinstance(obj, np.ndarray):
        return obj.ndim > 0
    if isinstance(obj, Sequence):
        return not isinstance(obj, (str, bytes, bytearray))
    return hasattr(type(obj), "__getitem__") and not isinstance(obj, (dict, np.generic))


def plain_data(obj: object) -> object:
    """``obj`` with every nested sequence that is not a list, a tuple or a numpy array (an
    object with ``__len__`` and ``__getitem__``, as PyTorch's ``PySequence_Check`` takes one)
    read into a list, item by item up to its ``len()`` as PyTorch reads it; ``obj`` itself
    when it holds none.

    Raises:
        ValueError: such a sequence's ``__getitem__`` raised (PyTorch's "could not determine
            the shape of object type ...").
        TypeError: such a sequence has no ``len()``.

    Example::

        >>> from collections import UserList
        >>> from accelrt._convert import plain_data
        >>> plain_data((UserList([1, 2]), [3, 4]))
        [[1, 2], [3, 4]]
    """
    return _plain(obj, set())


def _plain(obj: object, active: set[int]) -> object:
    """:func:`plain_data` of ``obj``, inside the sequences whose ids are in ``active`` (a
    list or tuple met again inside itself, or anything nested deeper than :data:`_MAX_DIMS`,
    is left as it is: :func:`infer_dtype` refuses it; another sequence met again inside
    itself raises PyTorch's ``ValueError`` "too many dimensions" here, since reading it
    would not end)."""
    t = type(obj)
    if t is list or t is tuple:
        seq: Any = obj
        if set(map(type, seq)) <= _NUMBER_TYPES or id(obj) in active or \
                len(active) >= _MAX_DIMS:
            return obj
    elif t in _NUMBER_TYPES or isinstance(obj, (np.ndarray, np.generic, str, bytes)) or \
            not _is_sequence(obj) or len(active) >= _MAX_DIMS:
        return obj
    elif id(obj) in active:     # (its items would be read without end)
        raise _too_deep(obj)
    else:
        n = len(obj)  # type: ignore[arg-type]
        seq = []
        for i in range(n):
            try:
                seq.append(obj[i])  # type: ignore[index]
            except Exception as exc:
                raise ValueError(f"could not determine the shape of object type "
                                 f"'{type(obj).__name__}': its len() is {n} but reading item {i} "
                                 f"raised {type(exc).__name__}({exc}); pass a list, a tuple "
                                 "or an array") from exc
        # one that holds itself after its first item: PyTorch's TypeError, as for a list
        # (as its first item it nests without end: "too many dimensions", from infer_dtype)
        if seq and seq[0] is not obj and any(item is obj for item in seq):
            raise TypeError("new(): self-referential lists are incompatible: asarray() takes "
                            "data without cycles, got a sequence of type "
                            f"'{type(obj).__name__}' that contains itself")
    active.add(id(obj))
    try:
        items = [_plain(item, active) for item in seq]
    finally:
        active.discard(id(obj))
    unchanged = all(a is b for a, b in zip(items, seq))
    return obj if unchanged and seq is obj else items


def infer_dtype(obj: object) -> np.dtype:
    """The dtype ``torch.asarray(obj)`` gives Python data (``infer_scalar_type``): a Python
    bool, int, float or complex is bool, int64, float32 or complex64; a numpy scalar or array
    keeps its dtype (``np.float64(1)`` is float64: PyTorch checks numpy types first); an
    empty sequence is float32, another one the :func:`promote` of its items.

    Raises:
        TypeError: a string (PyTorch's "new(): invalid data type 'str'"), a sequence mixing
            numbers and sequences, or an object with no numeric dtype (an
            ``AcceleratorTypeError``, also a ``RuntimeError``: PyTorch's "Could not infer
            dtype of NoneType").
        ValueError: sequences nested more than 64 deep, or a sequence that contains itself
            (PyTorch's "too many dimensions 'list'").
    """
    return _infer(obj, 0)


def _infer(obj: object, depth: int) -> np.dtype:
    """:func:`infer_dtype` of ``obj`` found inside ``depth`` nested sequences."""
    t = type(obj)
    dt = _PYTHON.get(t)
    if dt is not None:
        return dt
    if t is list or t is tuple:
        return _infer_sequence(obj, depth)  # type: ignore[arg-type]
    if isinstance(obj, (np.ndarray, np.generic)):
        return obj.dtype
    for base, base_dt in _PYTHON.items():      # subclasses of the Python number types
        if isinstance(obj, base):
            return base_dt
    if isinstance(obj, (str, bytes)):
        raise TypeError(f"new(): invalid data type '{t.__name__}'; asarray() takes numeric "
                        "data: numbers, (nested) sequences of numbers, arrays")
    if _is_sequence(obj):
        return _infer_sequence(obj, depth)  # type: ignore[arg-type]
    raise AcceleratorTypeError(f"Could not infer dtype of {t.__name__}: asarray() takes "
                               "numeric data: numbers, (nested) sequences of numbers, arrays")


def _infer_sequence(seq: Sequence[Any], depth: int) -> np.dtype:
    """:func:`infer_dtype` of a sequence inside ``depth`` others: float32 when empty, else its
    items' promotion."""
    if depth == _MAX_DIMS:      # a list that contains itself never ends
        raise _too_deep(seq)
    if not len(seq):
        return _PYTHON[float]
    types = set(map(type, seq))     # (one pass in C: the common case is one or two types)
    if types <= _NUMBER_TYPES:      # Python numbers only: the highest category
        return _PYTHON[max(types, key=_TYPE_RANK.__getitem__)]
    # a list that holds itself after its first item (as its first item, it nests without
    # end: "too many dimensions" below, PyTorch's order of checks too)
    if seq[0] is not seq and any(item is seq for item in seq):
        raise TypeError("new(): self-referential lists are incompatible: asarray() takes "
                        f"data without cycles, got a sequence that contains itself "
                        f"({_short(seq)})")
    if not types <= _PLAIN_SEQUENCES:
        nested = [_is_sequence(item) for item in seq]
        if any(nested) and not all(nested):
            raise TypeError(f"asarray() got a sequence that mixes numbers and sequences "
                            f"({_short(seq)}); every item at one depth must be a number, or "
                            "every one a sequence")
    return functools.reduce(promote, map(_infer, seq, itertools.repeat(depth + 1)))


def _too_deep(seq: object) -> ValueError:
    return ValueError(f"too many dimensions '{type_shown(seq)}': asarray() takes data nested "
                      f"at most {_MAX_DIMS} deep (numpy's limit), and no sequence that "
                      "contains itself")


def _short(obj: object) -> str:
    text = repr(obj)
    return text if len(text) <= 60 else text[:57] + "..."


def from_python(obj: object, dt: np.dtype, inferred: np.dtype) -> np.ndarray:
    """Python data ``obj`` (a number or a nested sequence of numbers, numpy scalars and
    arrays) as a numpy array of ``dt``, converted as ``torch.asarray(obj, dtype=...)``
    converts each element: into an integer dtype by :func:`int_bounds` (floats truncated
    toward zero), into a floating dtype unchecked (beyond its range: an infinity), into bool
    by truth value; a complex number goes only into a complex or bool dtype. ``inferred`` is
    :func:`infer_dtype` of ``obj``. The numbers are read by numpy first, so a sequence that
    mixes ints and floats is read as floats: a negative int in it does not wrap into an
    unsigned dtype (PyTorch converts each number by its own type; docs/differences.md).

    Raises:
        ValueError: a value an integer dtype cannot hold, an int beyond 64 bits (each an
            ``AcceleratorValueError``, also a ``RuntimeError``: PyTorch's "value cannot be
            converted to type uint8 without overflow" and "Overflow when unpacking long
            long"), or ragged nested sequences (PyTorch's "expected sequence of length 1 at
            dim 1 (got 2)").
        TypeError: a complex number into a real dtype other than bool.
    """
    try:
        raw = np.asarray(obj)
    except ValueError as exc:       # ragged: "setting an array element with a sequence"
        raise ValueError(f"asarray(): the nested sequences of {_short(obj)} have different "
                         f"lengths ({exc}); every sequence at one depth must have the same "
                         "length") from None
    kind = dt.kind
    # ints numpy read as objects or floats (beyond int64, or uint64 with negative ints): the
    # exact Python ints into an integer dtype (checked below), else converted
    if raw.dtype.kind == "O" or (raw.dtype.kind == "f" and inferred.kind in "biu"):
        if kind in "iu":
            raw = np.array(obj, dtype=object)
        else:
            with np.errstate(over="ignore"):
                raw = np.array(obj, dtype=dt)
    src = raw.dtype.kind
    if src == "c" and kind in "iuf":
        raise TypeError(f"asarray(): cannot convert the complex values of {_short(obj)} to "
                        f"{dt.name} (must be real number, not complex); pass a complex dtype")
    if kind in "iu" and raw.size and not np.can_cast(raw.dtype, dt):
        lowest, highest, upper = int_bounds(dt)
        least = lowest if kind == "i" else 0     # of a float (nan fails both comparisons)
        if src == "f":
            bad = ~((raw >= least) & (raw < upper))
        elif src in "iuO":
            bad = (raw < lowest) | (raw > highest)
        else:
            bad = None
        if bad is not None and bad.any():
            value = raw[bad].flat[0]
            if isinstance(value, np.generic):
                value = value.item()
            unpack = ("Overflow when unpacking long long: " if isinstance(value, int) and not
                      _INT64_MIN <= value < -_INT64_MIN else "")   # not even an int64
            raise AcceleratorValueError(
                f"{unpack}asarray(): {shown(value)} does not fit {dt.name} (ints in [{lowest}, "
                f"{highest}], floats in [{least}, {upper})); value cannot be converted to type "
                f"{dt.name} without overflow")
        if src == "O":      # exact ints in range; a negative one wraps into an unsigned dtype
            raw = np.array([v % (1 << 8 * dt.itemsize) if v < 0 and kind == "u" else v
                            for v in raw.flat], dtype=dt).reshape(raw.shape)
    return cast(raw, dt)


def cast(host: np.ndarray, dt: np.dtype) -> np.ndarray:
    """``host`` as a C-contiguous array of ``dt`` (``host`` itself when it is one already),
    cast as PyTorch casts a tensor (``copy_``, ``to``): C's conversions, without numpy's
    overflow and invalid-value warnings; a complex array into a real dtype other than bool
    keeps the real parts with PyTorch's ``UserWarning`` "Casting complex values to real
    discards the imaginary part" (numpy's is a ``ComplexWarning``)."""
    if host.dtype == dt:
        return host if host.flags.c_contiguous else np.ascontiguousarray(host)
    if host.dtype.kind == "c" and dt.kind in "iuf":
        warnings.warn("Casting complex values to real discards the imaginary part",
                      UserWarning, stacklevel=3)
        host = host.real
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(host, dtype=dt, order="C")     # (ascontiguousarray makes 0-d 1-d)

