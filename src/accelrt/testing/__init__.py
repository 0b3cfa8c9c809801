"""``accelrt.testing``: tools for testing backends against accelrt's contract.

:mod:`accelrt.testing.backend_conformance` is the conformance suite of the raw backend
contract that accelrt's own backends pass; a third-party backend runs it from its tests (see
``docs/backends.md``).

Example::

    >>> from accelrt.testing import backend_conformance
    >>> "host_function_exceptions" in backend_conformance.CHECKS
    True
"""

from . import backend_conformance

__all__ = ["backend_conformance"]
