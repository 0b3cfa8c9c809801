"""The comm copy engine moved to :mod:`accelrt._transfer` (``plan_runs`` + ``execute``). This
name stays only for :mod:`accelrt.distributed`, whose copy code is integrated with the transfer
plans separately.

Example::

    >>> import accelrt as acc
    >>> from accelrt.comm._transfer import run_on_stream
    >>> run_on_stream(acc.current_stream("cpu:0"), lambda: None)
"""

from __future__ import annotations

from .._transfer import run_on_stream

__all__ = ["run_on_stream"]
