"""Review of the s36 distributed changes: the bugs found, each checked here (each failed
before its fix).

* With the debug level at ``DETAIL`` the fingerprint comparison (a5c8bff: on the caller's
  thread, before anything is enqueued) ran outside the group's watchdog: a rank that never
  came to the collective (an argument error raised on it alone, a rank that skipped it) left
  the others waiting for ever, where without ``DETAIL`` the group's timeout ends the job.
* ``ReduceOp`` members hash and compare as their numbers since d9784a9, so ``all_reduce``'s
  cache of direct-call plans, keyed by the op, took a plain ``1`` or ``True`` for
  ``ReduceOp.PRODUCT`` and ran it; torch 2.15 refuses an int op with a ``TypeError``
  (checked with its CPU build: ``dist.all_reduce(t, op=1)`` raises "incompatible function
  arguments"), as accelrt does when no plan is cached.
"""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import pytest

HAVE_MPI = importlib.util.find_spec("mpi4py") is not None


@pytest.mark.skipif(not HAVE_MPI, reason="mpi4py is not installed")
def test_int_op_does_not_find_a_cached_plan(one_rank_world: None) -> None:
    import numpy as np

    import accelrt as acc
    import accelrt.distributed as dist
    a = acc.asarray(np.full(2, 3.0, dtype="float32"))
    for _ in range(3):   # the fast path leaves a PRODUCT plan for ``a``
        dist.all_reduce(a, op=dist.ReduceOp.PRODUCT)
    # PRODUCT's number (2 since session 37's renumbering to torch's; it was 1), others too
    for op in (int(dist.ReduceOp.PRODUCT), 1, True, 0, False):
        with pytest.raises(TypeError, match="op must be a ReduceOp"):
            dist.all_reduce(a, op=op)
    dist.all_reduce(a, op=dist.ReduceOp.PRODUCT)
    assert a.tolist() == [3.0, 3.0]


_ABSENT = textwrap.dedent(r'''
    import threading
    import numpy as np
    import accelrt as acc, accelrt.distributed as dist
    dist.init_process_group("gloo", timeout=1)
    dist.set_debug_level(dist.DebugLevel.DETAIL)
    a = acc.asarray(np.ones(4, dtype="float32"))
    dist.all_reduce(a)                 # the engine is started: the later check is the one
    if dist.get_rank() == 0:
        try:
            dist.all_reduce(a, op=1)   # an argument error on this rank alone
        except TypeError:
            print("rank 0 raised", flush=True)
        threading.Event().wait(120)    # stays in the job, never joins the collective
    else:
        dist.all_reduce(a)             # must end at the group's timeout, not wait for ever
        print("rank 1 returned", flush=True)
''')


@pytest.mark.skipif(not HAVE_MPI, reason="mpi4py is not installed")
def test_detail_fingerprint_is_under_the_group_timeout(tmp_path: Path) -> None:
    from test_distributed import MPIEXEC, launch
    if MPIEXEC is None:
        pytest.skip("needs mpiexec (pip install 'accelrt[mpi]')")
    script = tmp_path / "absent.py"
    script.write_text(_ABSENT)
    rc, out, _ = launch(2, str(script), timeout=40)
    assert rc != 0, out[-3000:]
    assert "rank 0 raised" in out, out[-3000:]
    late = "rank 1: all_reduce (sequence number 2) on group 'WORLD' did not complete within 1 s"
    assert late in out, out[-3000:]
    assert "rank 1 returned" not in out, out[-3000:]
