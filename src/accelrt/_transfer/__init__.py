"""One transfer path: every move of bytes between host memory and devices, planned as data.

Arrays (``Array.to``, ``copy_``, ``numpy()``, uploads from numpy), :mod:`accelrt.comm`, the
host staging of :mod:`accelrt.distributed`'s engines and the pinned staging of all of them go
through here, in two phases:

1. **Plan** (:mod:`._planners`): decide where and how the bytes move - host<->device,
   device<->device (one device, peer copies, or bounced through host memory), pinned staging,
   chunking into runs, the runs of a broadcast source (:mod:`._broadcast`), the stream each
   copy is ordered on and the barriers between streams, what queued work keeps alive - and
   return a :class:`Plan`: a tuple of typed steps
   (:mod:`._plan`) and the staging buffers they use. Nothing has moved yet.
2. **Execute** (:mod:`._execute`): :func:`execute` runs the steps in order, one small
   executor per step type; pinned staging (:mod:`._staging`) is the executor of
   :class:`Stage` steps, and falls back to the plan's direct copy when the pinned pool
   cannot give a block.

Keep-alives follow one rule (:mod:`._lifetime`): queued work holds borrowed memory and host
buffers until it has run; caching-allocator memory is stream-ordered and never held.

Example::

    >>> import accelrt as acc
    >>> from accelrt._transfer import Place, execute, plan_runs
    >>> a = acc.full((2, 3), 1.0, device="cpu:0")
    >>> out = acc.zeros((2, 3), device="cpu:0")
    >>> here = Place.of(a)
    >>> # the first column of every row: 2 runs of 4 bytes, rows 12 bytes apart
    >>> plan = plan_runs(here, out.data_ptr(), here, a.data_ptr(), 4, 2, 12, 12)
    >>> plan.steps[0].kind, plan.steps[0].nruns
    ('d2d', 2)
    >>> execute(plan); out.tolist()
    [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]
"""

from __future__ import annotations

from ._broadcast import Broadcast, Runs, broadcast_runs
from ._execute import execute, host_view, run_on_stream, run_steps
from ._lifetime import held, hold, keep_alive
from ._plan import (HOST, Barrier, Copy, CopyKind, FreeHost, Hold, HostCopy, Place, Plan,
                    RecordHost, Stage, Step, Sync, Upload)
from ._planners import (
    Staging,
    barrier,
    broadcast_on_device,
    plan_array_copy,
    plan_download,
    plan_landing,
    plan_runs,
    plan_staged_collective,
    plan_staged_p2p,
    plan_upload,
    stream_of,
)
from ._staging import pinned_pool, stage

__all__ = [
    "HOST",
    "Barrier",
    "Broadcast",
    "Copy",
    "CopyKind",
    "FreeHost",
    "Hold",
    "HostCopy",
    "Place",
    "Plan",
    "RecordHost",
    "Runs",
    "Stage",
    "Staging",
    "Step",
    "Sync",
    "Upload",
    "barrier",
    "broadcast_on_device",
    "broadcast_runs",
    "execute",
    "held",
    "hold",
    "host_view",
    "keep_alive",
    "pinned_pool",
    "plan_array_copy",
    "plan_download",
    "plan_landing",
    "plan_runs",
    "plan_staged_collective",
    "plan_staged_p2p",
    "plan_upload",
    "run_on_stream",
    "run_steps",
    "stage",
    "stream_of",
]
