"""The one size normaliser of every factory (``Array``, ``empty``, ``zeros``, ``ones``,
``full``, ``rand``, ``randn``, ``randint``), with PyTorch's argument rules.

A size is given as ints (``empty(2, 3)``), as one sequence of ints (``empty((2, 3))``,
``empty([2, 3])``) or as the ``size=`` keyword (``empty(size=(2, 3))``); a single int is a 1-D
size given positionally (also ``full(5, value)``, which PyTorch refuses), except where the size
follows other positional arguments (``randint(high, size)``: :func:`one_sequence_size`, one
sequence as in PyTorch), and as the ``size=`` keyword, which PyTorch also reads as one sequence
(``empty(size=5)``: "argument 'size' must be tuple of ints, not int"). Entries are ints or
objects with ``__index__`` (numpy integers, a one-element integer ``Array`` or numpy array, as
PyTorch takes a one-element integer tensor), never bools or floats. ``dtype`` and ``device`` are keyword-only, as in PyTorch, so ``empty(2, "int32")``
is a bad size, not a dtype.

Example::

    >>> from accelrt._size import normalize_size
    >>> normalize_size((2, 3), None, "empty"), normalize_size(([2, 3],), None, "empty")
    ((2, 3), (2, 3))
    >>> normalize_size((), (4,), "empty")
    (4,)
"""

from __future__ import annotations

import math
import operator
import warnings
from collections.abc import Sequence
from typing import Any, Final

import numpy as np

from ._errors import AcceleratorValueError, caused, index_failure, shown, type_shown

__all__ = ["factory_args", "legacy_dtype_device", "normalize_size", "one_sequence_size",
           "size_keyword", "storage_nbytes"]

#: 1 when this module runs as Python, 0 when it is compiled (mypyc: its functions have no
#: frames): :func:`legacy_dtype_device`'s warning counts the frames up to its caller's caller
_OWN_FRAME = 1 if __file__.endswith(".py") else 0

#: the most bytes an array may span (numpy's and PyTorch's sizes are int64)
_MAX_NBYTES: Final = 2**63 - 1


def size_keyword(kw: dict[str, Any], fname: str) -> Any:
    """The ``size=`` keyword out of a factory's ``**kw`` (``None`` when absent); any other
    keyword is a :class:`TypeError`, as for a function without ``**kw``."""
    if not kw:
        return None
    extra = set(kw) - {"size"}
    if extra:
        raise TypeError(f"{fname}() got unexpected keyword argument(s) {sorted(extra)}; it "
                        "takes the size, dtype=, device= (and the documented keywords)")
    return kw["size"]


def legacy_dtype_device(args: tuple[Any, ...], dtype: Any, device: Any, default_dtype: Any,
                        fname: str, depth: int = 1) -> tuple[tuple[Any, ...], Any, Any]:
    """accelrt 0.1's positional form ``f(shape, dtype[, device])`` of ``Array``, ``empty``
    and ``zeros`` (the contract's ``empty(shape, dtype="float32", device=None)``), kept with a
    :class:`FutureWarning`: ``(size args, dtype, device)`` with a positional dtype (a string,
    ``numpy.dtype`` or type, never an int, so ``f(2, 3)`` stays a size) moved to the keywords.

    ``depth`` is the number of accelrt's Python frames between this function and the user's
    call (the warning points at the user's line).

    Raises:
        TypeError: the dtype or device given both positionally and as a keyword.

    Example::

        >>> import warnings
        >>> from accelrt._size import legacy_dtype_device
        >>> legacy_dtype_device((2, 3), "float32", None, "float32", "empty")
        ((2, 3), 'float32', None)
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore", FutureWarning)
        ...     legacy_dtype_device(((2, 3), "int8", "cpu:0"), "float32", None, "float32",
        ...                         "empty")
        (((2, 3),), 'int8', 'cpu:0')
    """
    if not 2 <= len(args) <= 3 or not isinstance(args[1], (str, np.dtype, type)):
        return args, dtype, device
    warnings.warn(f"{fname}(shape, dtype, device) with a positional dtype is deprecated: dtype "
                  f"and device are keyword-only, as in PyTorch; write {fname}(shape, "
                  f"dtype={args[1]!r}, device=...)", FutureWarning,
                  stacklevel=_OWN_FRAME + depth + 1)
    if dtype is not None and dtype is not default_dtype and dtype != default_dtype:
        raise TypeError(f"{fname}() got the dtype twice (positionally {args[1]!r} and "
                        f"dtype={dtype!r}); pass it once, as dtype=")
    if len(args) == 3:
        if device is not None:
            raise TypeError(f"{fname}() got the device twice (positionally {args[2]!r} and "
                            f"device={device!r}); pass it once, as device=")
        device = args[2]
    return args[:1], args[1], device


def factory_args(args: tuple[Any, ...], kw: dict[str, Any], dtype: Any, device: Any,
                 fname: str) -> tuple[tuple[int, ...], Any, Any]:
    """The checked ``(shape, dtype, device)`` of ``Array``, ``empty`` and ``zeros`` (``fname``)
    from their positional size arguments, ``**kw``, ``dtype`` and ``device``:
    :func:`legacy_dtype_device`, then :func:`normalize_size` of the sizes and the ``size=``
    keyword (:func:`size_keyword`).

    Example::

        >>> from accelrt._size import factory_args
        >>> factory_args((2, 3), {}, "int8", None, "empty")
        ((2, 3), 'int8', None)
    """
    if 2 <= len(args) <= 3:
        args, dtype, device = legacy_dtype_device(args, dtype, device, "float32", fname,
                                                  _OWN_FRAME + 1)
    return normalize_size(args, size_keyword(kw, fname), fname), dtype, device


#: the factories that take the size as one argument, as in PyTorch (no ``f(2, 3)`` form)
_ONE_ARGUMENT = {"full": "full((2, 3), 1.5)", "randint": "randint(10, (2, 3))"}


def _usage(fname: str) -> str:
    if fname in _ONE_ARGUMENT:
        return (f"pass the size as one sequence of ints, {_ONE_ARGUMENT[fname]}; dtype and "
                "device are keyword-only")
    return (f"pass the size as ints, {fname}(2, 3), or as one sequence, {fname}((2, 3)); "
            f"dtype and device are keyword-only: {fname}(2, 3, dtype='float64', "
            "device='cpu:0')")


def _entry(d: Any, fname: str, size: Any) -> int:
    if isinstance(d, (bool, np.bool_)) or (
            isinstance(getattr(d, "dtype", None), np.dtype) and d.dtype.kind == "b"):
        # (a bool array too: PyTorch refuses a bool tensor, "Expected scalar.isIntegral()")
        raise TypeError(f"{fname}() size entries must be ints, got the bool {d!r} in {size!r}")
    why = ""
    try:
        return operator.index(d)
    except TypeError:
        pass
    except Exception as exc:    # torch's parser clears what __index__ raised: not an int
        why = index_failure(exc)
    if (isinstance(d, Sequence) and not isinstance(d, (str, bytes))) or (
            isinstance(d, np.ndarray) and d.ndim):
        raise caused(TypeError(f"{fname}() got a size that mixes ints and sequences "
                               f"({size!r}); {_usage(fname)}"), None) from None
    raise caused(TypeError(f"{fname}() size entries must be ints, got {type_shown(d)} "
                           f"{d!r}{why} in {size!r}; {_usage(fname)}"), None) from None


def normalize_size(args: tuple[Any, ...], size: Any, fname: str) -> tuple[int, ...]:
    """The checked shape of a factory call: ``args`` are its positional size arguments,
    ``size`` its ``size=`` keyword (``None`` when not given), ``fname`` names it in errors.

    Raises:
        TypeError: no size, the size given twice, ints mixed with sequences, or an entry that
            is not an int (a float, a bool, a string: a positional dtype).
        AcceleratorValueError: a negative dimension (a ``ValueError`` and, as in PyTorch, a
            ``RuntimeError``).
    """
    if size is None:
        n = len(args)
        if n == 1:
            first = args[0]
            if type(first) is int and first >= 0:
                return args         # the common f(n): already a tuple of one plain int
            if type(first) is tuple and all(type(d) is int and d >= 0 for d in first):
                return first        # the common f((m, n))
        elif n and all(type(d) is int and d >= 0 for d in args):
            return args             # the common f(m, n) (bool is not int here)
        elif not n:
            raise TypeError(f"{fname}() missing the size; {_usage(fname)}")
    elif args:
        raise TypeError(f"{fname}() got the size both positionally ({args!r}) and as "
                        f"size={size!r}; pass it once")
    else:
        # size= is PyTorch's ``SymInt[] size`` keyword: one sequence, never a bare int
        # (torch 2.14.1: "empty(): argument 'size' must be tuple of ints, not int")
        return one_sequence_size(size, fname)
    given: Any = args
    if len(args) == 1 and not isinstance(args[0], (bool, np.bool_)):
        one = args[0]
        if isinstance(one, np.ndarray):
            if one.ndim > 1:
                raise TypeError(f"{fname}() size must be 1-D, got an array of shape {one.shape}")
            given = one.tolist() if one.ndim == 1 else args
        elif isinstance(one, Sequence) and not isinstance(one, (str, bytes)):
            given = one
    dims = tuple(_entry(d, fname, given) for d in given)
    for d in dims:
        if d < 0:
            raise AcceleratorValueError(f"Trying to create tensor with negative dimension "
                                        f"{shown(d)}: {shown(list(dims))}; every dimension "
                                        "must be >= 0")
    return dims


def one_sequence_size(size: Any, fname: str) -> tuple[int, ...]:
    """The checked shape of a factory that takes the size as one argument after others
    (``randint(high, size)``), as PyTorch's argument parser reads a ``SymInt[] size``
    parameter that is not the only positional one: one sequence of ints (a tuple, a list, a
    ``Size``, or a 1-D numpy array), never a bare int, which PyTorch refuses
    (``torch.randint(1, 3)``: "received an invalid combination of arguments"); then as
    :func:`normalize_size`.

    Raises:
        TypeError: an int, a numpy integer, a 0-d array or a bool instead of a sequence, or
            what :func:`normalize_size` refuses.
        AcceleratorValueError: a negative dimension.

    Example::

        >>> from accelrt._size import one_sequence_size
        >>> one_sequence_size([2, 3], "randint"), one_sequence_size((), "randint")
        ((2, 3), ())
    """
    if isinstance(size, np.ndarray):
        scalar = size.ndim == 0
    else:
        scalar = not isinstance(size, Sequence) and (
            isinstance(size, (bool, np.bool_)) or hasattr(type(size), "__index__"))
    if scalar:
        raise TypeError(f"{fname}(): argument 'size' must be tuple of ints, not "
                        f"{type_shown(size)} ({shown(size)}); {_usage(fname)}")
    return normalize_size((size,), None, fname)


def storage_nbytes(shape: tuple[int, ...], itemsize: int) -> int:
    """The bytes of a C-contiguous array of a checked ``shape`` (:func:`normalize_size`) and
    ``itemsize``-byte elements: the one size check of every allocation (``Array`` and its
    factories, the random factories, pinned host arrays).

    Raises:
        AcceleratorValueError: the bytes overflow int64 (PyTorch's RuntimeError "Storage size
            calculation overflowed"); for an empty shape, the bytes its non-zero dimensions
            would span, as numpy counts them (so ``numpy()`` can always hold the array).

    Example::

        >>> from accelrt._size import storage_nbytes
        >>> storage_nbytes((2, 3), 4), storage_nbytes((0, 2**40), 8)
        (24, 0)
    """
    nbytes = itemsize
    for d in shape:         # a loop, not math.prod: compiled, it stays in mypyc's own ints
        nbytes *= d
    if nbytes > 0 and not nbytes >> 63:     # 0 < nbytes <= _MAX_NBYTES, without a compare
        return nbytes                       # against a constant wider than mypyc's ints
    if not nbytes and math.prod([d for d in shape if d]) * itemsize <= _MAX_NBYTES:
        return 0
    raise AcceleratorValueError(f"Storage size calculation overflowed with sizes="
                                f"{shown(list(shape))}: {itemsize}-byte elements of that "
                                f"shape span more than {_MAX_NBYTES} bytes (int64), more than "
                                "any device holds")
