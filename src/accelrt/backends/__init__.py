"""``accelrt.backends``: the backend registry and the :class:`Backend` contract.

Example::

    >>> import accelrt as acc
    >>> "cpu" in acc.backends.available()
    True
"""

from .._backend import (
    BACKENDS,
    Backend,
    Capabilities,
    DevicePtr,
    EventHandle,
    GraphHandle,
    StreamHandle,
    available,
    get,
    get_all_backends,
    get_available_backends,
    get_backend,
    on_change,
    register,
    registered,
    unavailable_reason,
    unregister,
)
from .._runtime import device_module

__all__ = [
    "BACKENDS",
    "Backend",
    "Capabilities",
    "DevicePtr",
    "EventHandle",
    "GraphHandle",
    "StreamHandle",
    "available",
    "device_module",
    "get",
    "get_all_backends",
    "get_available_backends",
    "get_backend",
    "on_change",
    "register",
    "registered",
    "unavailable_reason",
    "unregister",
]
