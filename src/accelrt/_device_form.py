"""``torch.device``'s second form, ``device(type, index)``: the arguments of an
:class:`accelrt.device` call other than the one-argument form, bound and checked as torch
2.15's parser binds them. ``device(type=...)`` (a keyword) or two arguments take a type
string without an index; ``device(device=...)`` is the one-argument form by keyword. Also
:func:`_parser_form`, how torch's parser reads a numpy integer or bytes as a device, and
:func:`_int64_arg`, how it reads an ``int64_t`` argument (``torch.Stream``'s ``priority``).
(:mod:`accelrt._device` imports this module once ``_parse`` is defined.)

Example::

    >>> from accelrt._device_form import _type_and_index
    >>> _type_and_index(("cpu", 0), {}), _type_and_index((), {"type": b"cpu"})
    (('cpu', 0), ('cpu', None))
"""

from __future__ import annotations

from typing import Any

import sys

import numpy as np

from . import _device as _dev
from ._errors import AcceleratorValueError, shown, type_shown

__all__ = ["_index_in_type", "_int64_arg", "_parser_form", "_resolve", "_type_and_index"]

#: torch's integral dtypes without bool (``at::isIntegralType(t, /*includeBool=*/false)``)
_TORCH_INT_DTYPES = ("uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64")

_KEYWORDS = {"type", "index", "device"}


def _resolve(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, int | None]:
    """The ``(type, index)`` of an :class:`accelrt.device` call that its own fast path did not
    take (``args``, ``kwargs``: the call's arguments).

    Example::

        >>> from accelrt._device_form import _resolve
        >>> _resolve((b"cpu:1",), {}), _resolve((), {"type": "cpu", "index": 0})
        (('cpu', 1), ('cpu', 0))
    """
    if kwargs or len(args) != 1:
        arg, index = _type_and_index(args, kwargs)
    else:
        arg, index = args[0], None
    if index is not None and (not isinstance(index, int) or isinstance(index, bool)):
        if not isinstance(index, np.integer):   # torch's parser reads a numpy integer
            raise TypeError(f"device index must be an int or None, got {type_shown(index)}")
        index = int(index)
    if isinstance(arg, _dev.device):
        if index is not None:
            raise ValueError("device(device, index): the index is already part of the device")
        typ, idx = arg.type, arg.index
    elif isinstance(arg, bool):
        raise TypeError("device() takes a str, int or device, not bool")
    elif isinstance(arg, int):
        if index is not None:
            raise TypeError("device(int, index): pass either an index or a type and index")
        acc = _dev.current_accelerator()
        if acc is None:
            raise RuntimeError("device(int) needs a current accelerator, and none is available")
        typ, idx = acc.type, arg
    elif isinstance(arg, str):
        if type(arg) is not str:   # a str subclass by its value: its messages too
            arg = str.__str__(arg)
        typ, idx = _dev._parse(arg)
        if typ not in _dev._known_types:
            _dev._check_type(typ, arg)
        if idx is not None and index is not None:
            raise _index_in_type(arg)
        if index is not None:
            idx = index
    else:
        form = _parser_form(arg)    # a numpy integer, bytes: as torch's parser
        if form is arg:
            raise TypeError(f"device() takes a str, int or device, not {type_shown(arg)}")
        return _resolve((form,), {})    # (the one-argument form: index is None)
    if idx is not None and type(idx) is not int:
        idx = _dev._plain_int(idx)        # its value, whatever its comparisons say
    if idx is not None and idx < 0:
        raise _dev._negative_index(idx)
    if idx is not None and idx > _dev._INT64_MAX:    # torch's parser reads an int64
        raise _dev._IndexOverflowError(
            f"Device index value {shown(idx)} is out of index range (Overflow when unpacking "
            "long long): a device index must be below 2**63")
    return typ, idx


def _type_and_index(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """What :class:`accelrt.device` reads, ``(type_or_device, index)``, from a call that is
    not ``device(x)``.

    Raises:
        TypeError: extra, repeated or missing arguments; a type that is not a str or bytes
            (torch: "device() received an invalid combination of arguments"); an index that
            is not an int (a numpy integer) or None.
        BackendUnavailableError: the type names no backend.
        AcceleratorValueError: (also a ``RuntimeError``) the type string carries an index
            (torch's "type (string) must not include an index because index was passed
            explicitly").
    """
    if len(args) > 2 or set(kwargs) - _KEYWORDS:
        extra = sorted(set(kwargs) - _KEYWORDS)
        raise TypeError(f"device() takes a device (or str or int), or type and index (as "
                        f"torch.device): got {len(args)} positional argument(s)"
                        + (f" and the keyword(s) {', '.join(extra)}" if extra else ""))
    if "device" in kwargs:
        if args or len(kwargs) > 1:
            raise TypeError("device(device=...) takes no other argument (as torch.device)")
        return kwargs["device"], None
    named = dict(zip(("type", "index"), args, strict=False))
    for k, v in kwargs.items():
        if k in named:
            raise TypeError(f"device() got multiple values for argument {k!r}")
        named[k] = v
    if "type" not in named:
        raise TypeError("device() missing required argument 'type' (a device type string "
                        "such as 'cuda')")
    typ, index = named["type"], named.get("index")
    if isinstance(typ, bytes):      # torch's str parameter takes bytes (UTF-8)
        typ = typ.decode("utf-8")
    if not isinstance(typ, str):
        raise TypeError(f"device(type, index): type must be a device type string such as "
                        f"'cuda', got {type_shown(typ)}; pass a device or an int index as the "
                        f"only argument (device(0), device(other))")
    # torch's parser checks the index's kind before the body reads the type string, whose
    # device type is checked before its index
    if index is not None and (isinstance(index, bool) or not isinstance(index, (int, np.integer))):
        raise TypeError(f"device index must be an int or None, got {type_shown(index)}")
    kind, idx = _dev._parse(typ)
    if kind not in _dev._known_types:
        _dev._check_type(kind, typ)
    if idx is not None:
        raise _index_in_type(typ)
    return typ, index


def _index_in_type(text: str) -> AcceleratorValueError:
    """torch.device's RuntimeError (here also a ValueError) for ``device(type, index)`` whose
    type string carries an index."""
    return AcceleratorValueError("type (string) must not include an index because index was "
                                 f"passed explicitly: {text}")


def _parser_form(dev: Any) -> Any:
    """``dev`` as PyTorch's C++ argument parser reads a device (torch 2.14.1's ``torch.device``,
    ``torch.Stream``, ``torch.Event``, ``torch.Generator``): a numpy integer (not a bool) is its
    index as an ``int`` and ``bytes`` a device string (UTF-8); anything else is returned as it
    is (an object with ``__index__`` alone is not an index there). Called by
    :func:`_get_device` and :class:`device` only for an argument of another type than a
    str, int, device or None, so their per-call paths do not pay for it.

    Example::

        >>> import numpy as np
        >>> from accelrt._device_form import _parser_form
        >>> _parser_form(np.int64(1)), _parser_form(b"cpu:0"), _parser_form(1.0)
        (1, 'cpu:0', 1.0)
    """
    if isinstance(dev, np.integer):
        return int(dev)
    if isinstance(dev, bytes):
        return dev.decode("utf-8")
    return dev


def _int64_arg(value: object, what: str) -> int:
    """``value`` as PyTorch's C++ argument parser reads an ``int64_t`` parameter (torch 2.15's
    ``torch.Stream(priority=...)``): an int (a subclass by its value), a numpy integer scalar,
    or a 0-d tensor of an integer dtype (a ``torch.Tensor`` without grad, or an
    :class:`accelrt.Array`, which stands for one); never a bool (numpy's included), a float,
    a numpy array (a 0-d one included) or another object with ``__index__`` (that rule,
    ``_device._index_arg``, is the one of torch's ``SymInt`` parameters, such as
    ``randint``'s bounds; ``torch.cuda.Stream``'s C constructor reads its priority with
    ``PyArg_ParseTuple``'s ``"i"``, which takes any ``__index__``: docs/differences.md).

    Raises:
        TypeError: anything else, ``"<what> must be an int, got <type>"``.

    Example::

        >>> import numpy as np
        >>> from accelrt._device_form import _int64_arg
        >>> _int64_arg(np.int32(-1), "priority")
        -1
        >>> _int64_arg(np.array(-1), "priority")
        Traceback (most recent call last):
        ...
        TypeError: priority must be an int, got numpy.ndarray
    """
    if isinstance(value, int):
        if not isinstance(value, bool):
            return int.__index__(value)       # (a subclass by its value, as torch's C++)
    elif isinstance(value, np.integer):
        return int(value)
    elif _int_scalar_tensor(value):
        return int(value.__index__())  # type: ignore[attr-defined]
    raise TypeError(f"{what} must be an int, got {type_shown(value)}")


def _int_scalar_tensor(value: object) -> bool:
    """Whether ``value`` is a tensor torch's parser takes for an ``int64_t``: 0-d, of an
    integer dtype other than bool, without grad (``torch.Tensor``; :class:`accelrt.Array`,
    which has no grad)."""
    from ._array import Array   # (imported late: _array imports this module's importers)
    if isinstance(value, Array):
        return value.ndim == 0 and value.dtype.kind in "iu"
    torch = sys.modules.get("torch")
    tensor = getattr(torch, "Tensor", None)
    if tensor is None or not isinstance(value, tensor):
        return False
    dtype = getattr(value, "dtype", None)
    return (value.dim() == 0 and not value.requires_grad
            and any(dtype is getattr(torch, n, None) for n in _TORCH_INT_DTYPES))
