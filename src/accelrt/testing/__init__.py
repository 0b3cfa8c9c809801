"""``accelrt.testing``: tools for testing code that uses accelrt, and backends against its
contract.

* :mod:`accelrt.testing.backend_conformance`: the conformance suite of the raw backend
  contract that accelrt's own backends pass; a third-party backend runs it from its tests (see
  ``docs/backends.md``).
* :func:`leak_check`: fails when code leaves caching-allocator memory, streams, events or
  graphs behind (accelrt's own test suite runs it after every test).

Example::

    >>> from accelrt.testing import backend_conformance, leak_check
    >>> "host_function_exceptions" in backend_conformance.CHECKS
    True
    >>> with leak_check():
    ...     pass
"""

from . import backend_conformance
from ._leaks import Snapshot, find_leaks, leak_check, snapshot

__all__ = ["Snapshot", "backend_conformance", "find_leaks", "leak_check", "snapshot"]
