"""``accelrt.backends``: the backend registry and the :class:`Backend` contract.

``device_module`` (:func:`accelrt._runtime.device_module`) is loaded at its first use, so that
importing this package (``accelrt.backends._common``, whose checks the core uses) does not
import the device modules' runtime, which imports the core.

Example::

    >>> import accelrt as acc
    >>> "cpu" in acc.backends.available()
    True
"""

from typing import TYPE_CHECKING, Any

from .. import _backend
from .._backend import *  # noqa: F403 - the registry's public names, as its __all__ lists them

if TYPE_CHECKING:
    from .._runtime import device_module

__all__ = ["device_module"]
__all__ += _backend.__all__


def __dir__() -> list[str]:
    # the lazy names of __all__ (PEP 562 __getattr__) too, as tab completion expects
    return sorted(set(globals()) | set(__all__))


def __getattr__(name: str) -> Any:
    if name == "device_module":
        from .._runtime import device_module
        return device_module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
