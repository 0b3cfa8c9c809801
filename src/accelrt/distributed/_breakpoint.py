"""``breakpoint``: torch 2.15's ``torch.distributed.breakpoint``, a debugger on one rank.

:func:`breakpoint` stops one rank in :mod:`pdb`, reading the terminal (``/dev/stdin``) even
where a launcher redirected the process's ``sys.stdin``, while every other rank waits for it
at a :func:`~accelrt.distributed.barrier`. First it makes ``timeout_s`` every group's timeout,
so that the watchdog does not end the job during the debugging session.
"""

from __future__ import annotations

import datetime
import logging
import sys
import traceback
from typing import TYPE_CHECKING, Any

from ._collectives import barrier
from ._groups import get_rank, set_timeout
from ._world import _S

if TYPE_CHECKING:
    import pdb

__all__ = ["breakpoint"]

_log = logging.getLogger("accelrt.distributed")

#: :func:`breakpoint`'s ``skip`` counters, by the text of ``traceback.format_exc()`` when it
#: was called, as torch's (which keys them by that text's hash): outside an ``except`` block
#: that text is ``"NoneType: None\n"``, so such calls share one counter, whatever their line
_breakpoint_cache: dict[str, int] = {}


def _make_distributed_pdb() -> pdb.Pdb:
    """A :class:`pdb.Pdb` that reads its commands from ``/dev/stdin``, the process's real
    standard input, not ``sys.stdin`` (torch's private ``_make_distributed_pdb``): a launcher
    (``mpiexec``, ``torch.multiprocessing``'s children) may have replaced ``sys.stdin``.
    ``sys.stdin`` is restored after each interaction. :mod:`pdb` is imported on the first
    call only.

    Example::

        >>> from accelrt.distributed import _make_distributed_pdb
        >>> debugger = _make_distributed_pdb()   # then debugger.set_trace()
        >>> import pdb; isinstance(debugger, pdb.Pdb)
        True
    """
    import pdb

    class _DistributedPdb(pdb.Pdb):
        def interaction(self, *args: Any, **kwargs: Any) -> None:
            _stdin = sys.stdin
            try:
                with open("/dev/stdin") as sys.stdin:
                    pdb.Pdb.interaction(self, *args, **kwargs)
            finally:
                sys.stdin = _stdin

    return _DistributedPdb()


def breakpoint(rank: int = 0, skip: int = 0, timeout_s: float | None = 3600) -> None:
    """Stop rank ``rank`` in the debugger while every other rank waits for it (torch 2.15's
    ``torch.distributed.breakpoint``); then all ranks meet at a
    :func:`~accelrt.distributed.barrier` of the world.

    Every rank calls it. In order, as torch's:

    - ``skip`` > 0: the first ``skip`` calls do nothing (they log "Skip the breakpoint,
      counter=N" and return: no timeout change, no barrier). The calls are counted by the
      text of ``traceback.format_exc()``: calls outside an ``except`` block share one
      counter, whatever their place in the code; a call while an exception is handled
      counts for that traceback.
    - ``timeout_s`` (seconds; None: leave them) becomes the timeout of every group of this
      rank, the world included (:func:`~accelrt.distributed.set_timeout`), so that a long
      debugging session does not make the watchdog end the job.
    - The rank whose :func:`~accelrt.distributed.get_rank` equals ``rank`` enters
      :mod:`pdb` (:func:`_make_distributed_pdb`: it reads ``/dev/stdin``), stopped inside
      this function: type ``up`` to reach the caller, ``c`` to go on. ``rank`` is not
      checked, as in torch: no rank stops for a rank the world does not have.
    - :func:`~accelrt.distributed.barrier` on every rank.

    Raises:
        ValueError: no default group (before anything else, unless the call was skipped),
            or ``timeout_s`` is not positive (:func:`~accelrt.distributed.set_timeout`'s
            check; torch's gloo takes 0 and refuses a negative one with ``RuntimeError``).
        TypeError: ``skip`` is not comparable with 0, or ``timeout_s`` is not a number of
            seconds (``datetime.timedelta``'s error), as in torch.
        OverflowError: ``timeout_s`` is infinite, as in torch.

    Example (one process: a world of one rank, told to stop rank 1, which it does not
    have)::

        >>> import accelrt.distributed as dist
        >>> dist.init_process_group("mpi", timeout=30)
        >>> dist.breakpoint(rank=1)   # no rank stops; every rank meets at the barrier
        >>> dist.group.WORLD.timeout   # timeout_s, applied to every group first
        3600.0
        >>> dist.destroy_process_group()
    """
    if skip > 0:
        key = traceback.format_exc()
        counter = _breakpoint_cache.get(key, 0) + 1
        _breakpoint_cache[key] = counter
        if counter <= skip:
            _log.warning("Skip the breakpoint, counter=%d", counter)
            return
    # avoid having the default timeout (if short) interrupt the debugging session
    if timeout_s is not None:
        for group in list(_S.groups):
            set_timeout(datetime.timedelta(seconds=timeout_s), group)
    if get_rank() == rank:
        debugger = _make_distributed_pdb()
        debugger.message(
            "\n!!! ATTENTION !!!\n\n"
            f"Type 'up' to get to the frame that called dist.breakpoint(rank={rank})\n")
        debugger.set_trace()
    barrier()
