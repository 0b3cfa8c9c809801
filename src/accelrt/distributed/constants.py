"""The default timeouts of process groups, as ``torch.distributed.constants``.

``default_pg_timeout`` is the timeout a process group gets when ``init_process_group`` /
``new_group`` are given none: 10 minutes for every engine here (torch: 30 minutes for its
non-NCCL backends; accelrt's watchdog enforces it on MPI too, docs/differences.md), the same
object as ``accelrt.distributed.default_pg_timeout``. ``default_pg_nccl_timeout`` is the NCCL
engine's, 10 minutes as torch's. ``ACCELRT_DISTRIBUTED_TIMEOUT`` changes the timeout groups
get, not these constants.

Example::

    >>> from accelrt.distributed.constants import default_pg_nccl_timeout, default_pg_timeout
    >>> default_pg_timeout, default_pg_nccl_timeout
    (datetime.timedelta(seconds=600), datetime.timedelta(seconds=600))
"""

from __future__ import annotations

import datetime

from ._group import DEFAULT_TIMEOUT

__all__ = ["default_pg_timeout", "default_pg_nccl_timeout"]

#: the timeout of a process group given none (every engine here)
default_pg_timeout: datetime.timedelta = datetime.timedelta(seconds=DEFAULT_TIMEOUT)
#: the NCCL engine's default timeout (torch's ``_DEFAULT_PG_NCCL_TIMEOUT``, 10 minutes)
default_pg_nccl_timeout: datetime.timedelta | None = datetime.timedelta(seconds=DEFAULT_TIMEOUT)
