"""The one error hierarchy of accelrt.

::

    RuntimeError
     └── AcceleratorError                      any failure reported by accelrt or a backend
          ├── BackendUnavailableError (+LookupError)   backend not installed / no driver / no device
          ├── DeviceError                       a device call failed (driver error, bad state)
          ├── OutOfMemoryError (+MemoryError)   the caching allocator could not satisfy a request
          ├── CaptureNotSupportedError (+NotImplementedError)  backend cannot capture graphs
          ├── AcceleratorValueError (+ValueError)   bad value; PyTorch raises RuntimeError
          ├── AcceleratorIndexError (+IndexError)   device index out of range (ditto)
          ├── AcceleratorTypeError (+TypeError)     a wrong kind of object (ditto)
          ├── ClosedError (+ValueError)         a closed stream, event, graph or array was used
          └── DistError                         accelrt.distributed: DistBackendError,
                                                DistTimeoutError, DistStoreError, DistNetworkError

Wrong argument types raise :class:`TypeError`, bad values :class:`ValueError` (or
:class:`IndexError` for device indices out of range), and calls made in the wrong state
:class:`RuntimeError`.  Where PyTorch raises ``RuntimeError`` for a bad argument (comm
argument checks, an out-of-range device index, event/stream misuse, ...), accelrt raises one of
the three ``Accelerator*Error`` classes: an instance of ``RuntimeError`` (as in PyTorch) *and*
of ``ValueError``/``IndexError``/``TypeError`` (so ``except ValueError`` keeps working), with
PyTorch's message text.  Backends translate their library's exceptions at one
boundary (``map_backend_errors``) so user code only ever sees this tree.

Example::

    >>> import accelrt as acc
    >>> issubclass(acc.OutOfMemoryError, RuntimeError)
    True
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TypeVar

__all__ = [
    "AcceleratorError",
    "AcceleratorIndexError",
    "AcceleratorTypeError",
    "AcceleratorValueError",
    "BackendUnavailableError",
    "CaptureNotSupportedError",
    "ClosedError",
    "DeviceError",
    "OutOfMemoryError",
    "caused",
    "map_backend_errors",
    "shown",
    "type_shown",
]


class AcceleratorError(RuntimeError):
    """Base class of every error accelrt raises for a runtime failure."""


class BackendUnavailableError(AcceleratorError, LookupError):
    """A backend cannot be used: not installed, no driver, or no device.

    The message says why and what to install.
    """


class DeviceError(AcceleratorError):
    """A device, stream, event or copy operation failed in the backend."""


class CaptureNotSupportedError(AcceleratorError, NotImplementedError):
    """The backend cannot capture or replay graphs."""


class AcceleratorValueError(AcceleratorError, ValueError):
    """A bad argument value where PyTorch raises ``RuntimeError``: both a ``RuntimeError`` and a
    ``ValueError``.

    Example::

        >>> from accelrt._errors import AcceleratorValueError as E
        >>> issubclass(E, RuntimeError), issubclass(E, ValueError)
        (True, True)
    """


class AcceleratorIndexError(AcceleratorError, IndexError):
    """An index out of range (a device index, ...) where PyTorch raises ``RuntimeError``: both
    a ``RuntimeError`` and an ``IndexError``.

    Example::

        >>> import accelrt as acc
        >>> try:
        ...     acc.get_device_properties("cpu:99")
        ... except RuntimeError as e:
        ...     print(type(e).__name__, isinstance(e, IndexError))
        AcceleratorIndexError True
    """


class _InvalidIdIndexError(AcceleratorIndexError, AssertionError):
    """An out-of-range index given to a device module's ``get_device_properties``,
    ``get_device_name``, ``get_device_capability`` or ``can_device_access_peer``, where
    ``torch.cuda`` raises ``AssertionError("Invalid device id")``: also an ``AssertionError``.

    Example::

        >>> from accelrt._errors import _InvalidIdIndexError as E
        >>> issubclass(E, IndexError), issubclass(E, AssertionError)
        (True, True)
    """


class _InvalidIdValueError(AcceleratorValueError, AssertionError):
    """A negative index given where :class:`_InvalidIdIndexError` applies (``torch.cuda``:
    ``AssertionError("Invalid device id")``): also an ``AssertionError``.

    Example::

        >>> from accelrt._errors import _InvalidIdValueError as E
        >>> issubclass(E, ValueError), issubclass(E, AssertionError)
        (True, True)
    """


class AcceleratorTypeError(AcceleratorError, TypeError):
    """An object of the wrong kind where PyTorch raises ``RuntimeError`` (an array on the wrong
    kind of device, ...): both a ``RuntimeError`` and a ``TypeError``.

    Example::

        >>> from accelrt._errors import AcceleratorTypeError as E
        >>> issubclass(E, RuntimeError), issubclass(E, TypeError)
        (True, True)
    """


class _WrongKindError(TypeError, AttributeError):
    """An argument of the wrong kind where PyTorch's Python code reads an attribute of it and
    so raises ``AttributeError`` (``torch.multiprocessing.reductions.reduce_tensor(None)``:
    "'NoneType' object has no attribute 'requires_grad'"; ``Backend.register_backend(None,
    f)``): a ``TypeError`` naming the argument, also an ``AttributeError``.

    Example::

        >>> from accelrt._errors import _WrongKindError as E
        >>> issubclass(E, TypeError), issubclass(E, AttributeError)
        (True, True)
    """


class ClosedError(AcceleratorError, ValueError):
    """A stream, event, graph or array was used after its ``close()``.

    A ``ValueError`` too, as Python's own closed objects raise (``f.read()`` on a closed
    file); ``close()`` itself may be called again (it does nothing the second time).

    Example::

        >>> import accelrt as acc
        >>> e = acc.Event("cpu")
        >>> e.close()
        >>> try:
        ...     e.record()
        ... except acc.ClosedError as exc:
        ...     print(isinstance(exc, ValueError))
        True
    """


class OutOfMemoryError(AcceleratorError, MemoryError):
    """The caching allocator could not satisfy an allocation.

    Attributes:
        size: bytes the allocator tried to obtain from the device (the segment size).
        allocated: bytes allocated by accelrt on that device when it failed.
        limit: the byte limit in force (the device total, or the per-process fraction).
    """

    def __init__(self, message: str, size: int = 0, allocated: int = 0, limit: int = 0) -> None:
        super().__init__(message)
        self.size = size
        self.allocated = allocated
        self.limit = limit

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.args[0] if self.args else "", self.size, self.allocated, self.limit))


@contextlib.contextmanager
def map_backend_errors(backend: str, what: str) -> Iterator[None]:
    """Translate any non-accelrt exception raised inside the block into :class:`DeviceError`.

    ``TypeError``/``ValueError``/``IndexError`` and accelrt's own errors pass through unchanged.

    Example::

        >>> from accelrt._errors import map_backend_errors, DeviceError
        >>> try:
        ...     with map_backend_errors("cpu", "copy"):
        ...         raise OSError("boom")
        ... except DeviceError as e:
        ...     print(e)
        cpu: copy failed: OSError: boom
    """
    try:
        yield
    except (AcceleratorError, TypeError, ValueError, IndexError, KeyboardInterrupt):
        raise
    except Exception as exc:  # the one mapping boundary
        raise DeviceError(f"{backend}: {what} failed: {type(exc).__name__}: {exc}") from exc


_E = TypeVar("_E", bound=BaseException)


def caused(err: _E, cause: BaseException | None) -> _E:
    """``err`` with ``cause`` as its ``__cause__`` (``None``: the context suppressed), for
    ``raise caused(err, cause) from cause`` in a module the compiled build compiles: mypyc
    drops the ``from`` clause. (A helper rather than ``err.__cause__ = ...`` on a local in the
    raising function: that local, the exception's traceback and the function's frame would
    make a cycle in the pure build, keeping the frames and what they hold until the garbage
    collector runs.)

    Example::

        >>> from accelrt._errors import caused
        >>> err = caused(TypeError("refused"), None)
        >>> err.__cause__ is None, err.__suppress_context__
        (True, True)
    """
    err.__cause__ = cause
    return err


def shown(value: object) -> str:
    """``repr(value)`` for an error message. Python refuses to print an int of more than
    ``sys.get_int_max_str_digits()`` digits (4300 by default) with a ``ValueError`` of its own,
    which would replace the message being raised: such an int reads as its size, alone or
    inside a list or tuple, and another object whose ``repr`` raises that as its type name.

    Example::

        >>> from accelrt._errors import shown
        >>> shown(12), shown("cpu"), shown([1, -10**5000])
        ('12', "'cpu'", '[1, <a negative int of 16610 bits>]')
    """
    try:
        return repr(value)
    except ValueError:
        if isinstance(value, int):
            sign = "a negative" if value < 0 else "an"
            return f"<{sign} int of {value.bit_length()} bits>"
        if isinstance(value, (list, tuple)):
            inner = ", ".join(map(shown, value))
            if isinstance(value, list):
                return f"[{inner}]"
            return f"({inner},)" if len(value) == 1 else f"({inner})"
        return f"<{type(value).__name__}>"


def type_shown(value: object) -> str:
    """The name of ``value``'s type for an error message, as PyTorch prints it (CPython's
    ``tp_name``): a builtin or a class defined in Python by its bare name, a type defined in C
    outside the builtins module-qualified, so that numpy's scalars read ``numpy.bool`` and
    ``numpy.float64`` where a bare ``bool`` or ``float64`` would mislead ("must be a bool, got
    bool").

    Example::

        >>> import fractions
        >>> import numpy as np
        >>> from accelrt._errors import type_shown
        >>> type_shown(True), type_shown(np.True_), type_shown(np.float64(1.5))
        ('bool', 'numpy.bool', 'numpy.float64')
        >>> type_shown(fractions.Fraction(1, 2))
        'Fraction'
    """
    cls = type(value)
    # Py_TPFLAGS_HEAPTYPE: a class statement's type, whose tp_name is its bare name
    if cls.__module__ == "builtins" or cls.__flags__ & (1 << 9):
        return cls.__name__
    return f"{cls.__module__}.{cls.__qualname__}"


def index_failure(exc: BaseException) -> str:
    """The words an error message adds for an argument whose ``__index__`` raised ``exc``
    (PyTorch's argument parser clears that exception and refuses the argument as no int).

    Example::

        >>> from accelrt._errors import index_failure
        >>> index_failure(ValueError("no index today"))
        ' (its __index__ raised ValueError: no index today)'
    """
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - a broken __str__: the type says enough
        text = ""
    return f" (its __index__ raised {type(exc).__name__}{': ' if text else ''}{text})"


def _bool_arg(what: str, value: object, name: str) -> bool:
    """``value``'s truth as torch 2.15's pybind11 bool binding reads it (a ``bool``
    parameter of a ``torch._C`` function: the collectives' flags, ``_record_memory_history``'s
    and ``MemPool``'s): ``None`` is False, numbers and what has ``__bool__`` their truth,
    read once; a value without ``__bool__``
    (a str, a list) or whose ``__bool__`` raises or answers a non-bool (a numpy array of two
    items) is its ``TypeError`` "incompatible function arguments".

    Example::

        >>> from accelrt._errors import _bool_arg
        >>> _bool_arg("monitored_barrier", None, "wait_all_ranks")
        False
        >>> _bool_arg("monitored_barrier", "yes", "wait_all_ranks")
        Traceback (most recent call last):
        ...
        TypeError: monitored_barrier(): incompatible function arguments: wait_all_ranks must be a bool, got str
    """
    if value is None:
        return False
    try:
        if not hasattr(type(value), "__bool__"):
            raise TypeError
        return bool(value)
    except Exception:
        raise TypeError(f"{what}(): incompatible function arguments: {name} must be a bool, "
                        f"got {type_shown(value)}") from None
