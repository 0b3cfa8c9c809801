"""The value conversions and the shallow copy of :class:`accelrt.Array` (``int()``,
``float()``, ``complex()``, ``operator.index()``, ``copy.copy``), as ``torch.Tensor``'s: a
mixin, so that ``_array.py`` keeps to one concern per module.

Example::

    >>> import accelrt as acc
    >>> int(acc.full((), 7, device="cpu:0")), [1, 2, 3][acc.full((1,), 2, device="cpu:0")]
    (7, 3)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ._errors import AcceleratorTypeError, AcceleratorValueError, type_shown

if TYPE_CHECKING:
    from ._backend import Backend
    from ._memory_owner import _Memory

__all__ = ["ArrayValues", "_number"]

_INT64_MAX = (1 << 63) - 1


def _number(value: Any) -> bool | int | float | complex:
    """A fill value (``fill_``, ``full``) as a Python number: a numpy scalar or 0-d array is
    read as its value (a numpy floating or complex scalar wider than Python's, such as
    ``np.longdouble``, as a float or complex, as PyTorch reads it), and so is an instance of a
    subclass of ``int``, ``float`` or ``complex``, whatever its ``__int__``, ``__float__`` or
    ``__index__`` say (PyTorch's C++ reads the value stored in the object).

    Raises:
        TypeError: not a number.
    """
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, np.generic):
        if isinstance(value, np.floating):
            return float(value)
        if isinstance(value, np.complexfloating):
            return complex(value)
        value = value.item()
    t = type(value)
    if t is float or t is int or t is bool or t is complex:
        return value    # type: ignore[no-any-return]
    if isinstance(value, int):     # a subclass: its value, as PyTorch's C++ reads it,
        return int.__index__(value)     # whatever its __index__, __int__ or __float__ say
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, complex):
        return complex(complex.real.__get__(value), complex.imag.__get__(value))
    raise TypeError(f"fill value must be a bool, int, float or complex, got "
                    f"{type_shown(value)}")


def _int64(value: Any) -> int:
    """``value`` (an integer read from an array) as ``torch.Tensor.__int__`` and
    ``__index__`` convert it, through int64: a uint64 value beyond int64 is PyTorch's
    RuntimeError (an :class:`~accelrt.AcceleratorValueError`)."""
    if value > _INT64_MAX:
        raise AcceleratorValueError(f"value cannot be converted to type int64_t without "
                                    f"overflow (the uint64 value {value} is beyond int64)")
    return int(value)


class ArrayValues:
    """What :class:`accelrt.Array` reads as one value, and its shallow copy (a base class:
    the array's fields and its ``_item`` and ``_wrap`` come from ``Array``)."""

    __slots__ = ()

    if TYPE_CHECKING:
        _mem: _Memory
        _shape: tuple[int, ...]
        _dtype: np.dtype
        _b: Backend
        _index: int

        @property
        def size(self) -> int: ...

        def _item(self) -> Any: ...

        @classmethod
        def _wrap(cls, mem: _Memory, shape: tuple[int, ...], dtype: np.dtype, b: Backend,
                  index: int) -> ArrayValues: ...

    def _scalar(self) -> Any:
        """The one element for ``int()``, ``float()`` and ``complex()``, as
        ``torch.Tensor``'s conversions read it (synchronizing)."""
        if self.size != 1:
            raise ValueError("only one element tensors can be converted to Python scalars "
                             f"(the array has {self.size} elements); convert a one-element "
                             "array, or read several values with tolist()")
        return self._item()

    def __int__(self) -> int:
        """The value of a one-element array as an ``int`` (``int(a)``), as
        ``torch.Tensor.__int__``: a float truncated toward zero, a bool 0 or 1; read after
        synchronizing the array's current stream.

        Raises:
            ValueError: the array has no element or more than one (PyTorch's "only one
                element tensors can be converted to Python scalars"), or holds NaN.
            OverflowError: it holds an infinity.
            RuntimeError: it holds a uint64 value beyond int64 (an ``AcceleratorValueError``,
                PyTorch's "value cannot be converted to type int64_t without overflow"), or
                a complex number whose imaginary part is not zero (an
                ``AcceleratorTypeError``, also a ``TypeError``; PyTorch's "value cannot be
                converted to type int64_t without overflow"); ``3+0j`` is 3, as in PyTorch.

        Example::

            >>> import accelrt as acc
            >>> int(acc.full((1, 1), -2.7, device="cpu:0")), float(acc.full((), 3, device="cpu:0"))
            (-2, 3.0)
        """
        value = self._scalar()
        if isinstance(value, complex):
            if value.imag == 0:      # torch's checked_convert takes a real complex number
                return int(value.real)
            raise AcceleratorTypeError(f"int() of a complex array ({value!r}): value cannot be "
                                       "converted to type int64_t without overflow")
        return _int64(value) if self._dtype.kind == "u" else int(value)

    def __float__(self) -> float:
        """The value of a one-element array as a ``float`` (``float(a)``), as
        ``torch.Tensor.__float__``; read after synchronizing the array's current stream.

        Raises:
            ValueError: the array has no element or more than one (PyTorch's message).
            RuntimeError: it holds a complex number whose imaginary part is not zero (an
                ``AcceleratorTypeError``, also a ``TypeError``; PyTorch's "value cannot be
                converted to type double without overflow").
        """
        value = self._scalar()
        if isinstance(value, complex):
            if value.imag == 0:      # torch's checked_convert takes a real complex number
                return float(value.real)
            raise AcceleratorTypeError(f"float() of a complex array ({value!r}): value cannot "
                                       "be converted to type double without overflow")
        return float(value)

    def __complex__(self) -> complex:
        """The value of a one-element array as a ``complex`` (``complex(a)``), as
        ``torch.Tensor.__complex__``; read after synchronizing the array's current stream.

        Raises:
            ValueError: the array has no element or more than one (PyTorch's message).
        """
        return complex(self._scalar())

    def __index__(self) -> int:
        """The value of a one-element bool or integer array as an index (``operator.index``:
        list indexing, ``range()``, a size entry of the factories), as
        ``torch.Tensor.__index__``; read after synchronizing the array's current stream.

        Raises:
            TypeError: a floating or complex array, or not one element (PyTorch's "only
                integer tensors of a single element can be converted to an index").
            RuntimeError: a uint64 value beyond int64 (an ``AcceleratorValueError``, as
                :meth:`__int__`).

        Example::

            >>> import accelrt as acc
            >>> [10, 20, 30][acc.full((), 2, device="cpu:0")]
            30
        """
        if self._dtype.kind not in "biu" or self.size != 1:
            raise TypeError("only integer tensors of a single element can be converted to an "
                            f"index (got {self.size} elements of {self._dtype.name})")
        return _int64(self._item())

    def __copy__(self) -> ArrayValues:
        """``copy.copy(a)``: a second :class:`Array` over the same memory, as ``copy.copy`` of
        a ``torch.Tensor`` shares its storage (a write through either shows in both; the
        memory is freed when the last of them goes, and closing one leaves the other usable).
        ``copy.deepcopy`` and ``pickle`` copy the contents, and ``a.to(copy=True)`` is a clone.

        Example::

            >>> import copy
            >>> import accelrt as acc
            >>> a = acc.zeros(2, device="cpu:0")
            >>> _ = copy.copy(a).fill_(7.0); a.tolist()
            [7.0, 7.0]
        """
        self._mem.ptr   # noqa: B018 - raises ClosedError on a closed array
        return type(self)._wrap(self._mem, self._shape, self._dtype, self._b, self._index)
