"""Helpers for testing code that uses accelrt (and for testing accelrt itself).

Example::

    >>> from accelrt.testing import leak_check
    >>> with leak_check():
    ...     pass
"""

from ._leaks import Snapshot, find_leaks, leak_check, snapshot

__all__ = ["Snapshot", "find_leaks", "leak_check", "snapshot"]
