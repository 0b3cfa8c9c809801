"""``accelrt.testing``: tools for testing code that uses accelrt, and backends against its
contract.

* :mod:`accelrt.testing.backend_conformance`: the conformance suite of the raw backend
  contract that accelrt's own backends pass; a third-party backend runs it from its tests (see
  ``docs/backends.md``).
* :func:`leak_check`: fails when code leaves caching-allocator memory, streams, events or
  graphs behind (accelrt's own test suite runs it after every test).
* :class:`SimulatedBackend`: accelrt's one fake device (devices of a set capacity that count
  bytes and calls, touch no memory, and complete work at once or when the test says), for
  testing code that allocates without a real device; ``accelrt replay`` runs on it.

Example::

    >>> from accelrt.testing import SimulatedBackend, backend_conformance, leak_check
    >>> "host_function_exceptions" in backend_conformance.CHECKS
    True
    >>> with leak_check():
    ...     pass
    >>> SimulatedBackend(capacity=1 << 20).malloc(0, 2 << 20)   # beyond its capacity
    0
"""

from ._simulated import CALL_NAMES, SimulatedBackend
from . import backend_conformance
from ._leaks import Snapshot, find_leaks, leak_check, snapshot

__all__ = ["CALL_NAMES", "SimulatedBackend", "Snapshot", "backend_conformance", "find_leaks",
           "leak_check", "snapshot"]
