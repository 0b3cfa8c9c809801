"""Pinned host staging moved to :mod:`accelrt._transfer` (its ``_staging`` module executes the
plans' ``Stage`` steps). This name stays only for :mod:`accelrt.distributed`, whose copy code
is integrated with the transfer plans separately.

Example::

    >>> from accelrt import backends
    >>> from accelrt._staging import pinned_pool
    >>> pinned_pool(backends.get_backend("cpu")) is not None
    True
"""

from __future__ import annotations

from ._transfer._staging import pinned_pool

__all__ = ["pinned_pool"]
