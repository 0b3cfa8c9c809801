"""Test ids that are the same in every process that collects the suite.

pytest-xdist's workers each collect the suite and must find the same test ids; ``ids=repr`` of
an object without a ``__repr__`` of its own (``object()``, a generator) holds its memory
address, which differs between processes. Parametrise with ``ids=shown`` instead.
"""

from __future__ import annotations

import re

import pytest

#: the memory address in CPython's default ``repr``: ``<object object at 0x7f...>``
ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")

#: where tests/conftest.py keeps the collected test ids that hold an address
#: (tests/package/test_test_ids.py checks it is empty)
UNSTABLE = pytest.StashKey[list[str]]()


def shown(value: object) -> str:
    """``repr(value)`` without a memory address (``<object object>``), for ``ids=``."""
    return ADDRESS.sub("", repr(value))
