"""``accelrt.backends``: the backend registry and the :class:`Backend` contract.

Example::

    >>> import accelrt as acc
    >>> acc.backends.available()[-1]
    'cpu'
"""

from .._backend import (
    BACKENDS,
    Backend,
    available,
    get_all_backends,
    get_available_backends,
    get_backend,
    register,
    registered,
    unavailable_reason,
)

__all__ = [
    "BACKENDS",
    "Backend",
    "available",
    "get_all_backends",
    "get_available_backends",
    "get_backend",
    "register",
    "registered",
    "unavailable_reason",
]
