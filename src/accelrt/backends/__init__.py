"""``accelrt.backends``: the backend registry and the :class:`Backend` contract.

Example::

    >>> import accelrt as acc
    >>> "cpu" in acc.backends.available()
    True
"""

from .. import _backend
from .._backend import *  # noqa: F403 - the registry's public names, as its __all__ lists them
from .._runtime import device_module

__all__ = ["device_module"]
__all__ += _backend.__all__
