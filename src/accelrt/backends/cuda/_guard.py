"""The device guard of ``CudaBackend``'s raw operations, as PyTorch guards each operation on a
device: an operation on another device than the calling thread's current one makes that
device's context current while it runs (``CudaBackend._use``) and the current device's again
before it returns or raises (``CudaBackend._restore``: torch's ``MaybeSetDevice``, which
creates no context on a device that has none).

Example::

    >>> from accelrt.backends.cuda import CudaBackend
    >>> CudaBackend.malloc.__wrapped__.__name__
    'malloc'
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Concatenate, ParamSpec, TypeVar

if TYPE_CHECKING:
    from ._backend import CudaBackend

__all__ = ["guard_operations", "guarded"]

#: CudaBackend's public methods that make no context current (the questions about the devices,
#: closing, the context calls themselves); every other one runs under :func:`guarded`
UNGUARDED = frozenset((
    "close", "unavailable_reason", "device_count", "init_device", "set_current_device",
    "keeping_context", "get_device_properties", "get_device_capability", "capabilities",
    "arch_list", "can_access_peer"))

_P = ParamSpec("_P")
_R = TypeVar("_R")


def guarded(op: Callable[Concatenate[CudaBackend, _P], _R]) -> Callable[
        Concatenate[CudaBackend, _P], _R]:
    """``op`` under a device guard: if it left another device's context current than the
    calling thread's current device's, that device's context is made current again before it
    returns or raises. An operation called by another (the kernel launch of ``philox_fill``)
    finds its device's context current already and restores nothing."""
    @functools.wraps(op)
    def run(self: CudaBackend, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        tls = self._tls
        before = tls.index
        try:
            return op(self, *args, **kwargs)
        finally:
            after = tls.index
            if after != before and after != tls.current:
                self._restore()
    return run


def guard_operations(cls: type[CudaBackend]) -> None:
    """Put every public method of ``cls`` but :data:`UNGUARDED` under :func:`guarded`."""
    for name, member in list(vars(cls).items()):
        if inspect.isfunction(member) and not name.startswith("_") and name not in UNGUARDED:
            setattr(cls, name, guarded(member))
