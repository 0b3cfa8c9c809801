"""Session-38 review of the day's merges, the checks that need two ranks (the one-process ones
are in tests/runtime/test_review_s38_rev1.py). Each case failed before its fix.

* ``batch_isend_irecv`` entered every grouped engine's ``p2p_group()`` (one per engine class,
  ``EngineCapabilities.grouped_p2p``) before its ``try``: when a later engine's group failed to
  start, the groups already entered were never ended (for NCCL: ``ncclGroupStart`` without its
  ``ncclGroupEnd``, every later NCCL call of the process queued into a group that never
  launches). They are ended now, and the error is raised.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

HAVE_MPI = importlib.util.find_spec("mpi4py") is not None

_RANKS = r'''
import contextlib
import accelrt as acc
import accelrt.distributed as dist
from accelrt.backends.cpu import CpuBackend
from accelrt.distributed._mpi import MpiEngine

LOG = []


class _Logs:
    """A group context of a class (a generator's would be ended by its garbage collection)."""

    def __enter__(self):
        LOG.append("A enter")

    def __exit__(self, *exc):
        LOG.append("A exit")


class GroupedA(MpiEngine):
    grouped_p2p = True

    def p2p_group(self):
        return _Logs()


class _Refuses:
    def __enter__(self):
        raise RuntimeError("group B cannot start")

    def __exit__(self, *exc):
        LOG.append("B exit without enter")


class GroupedB(MpiEngine):
    grouped_p2p = True
    refuse = True

    def p2p_group(self):
        if GroupedB.refuse:
            return _Refuses()
        return contextlib.nullcontext()


acc.backends.register("s38revb", lambda: CpuBackend(num_devices=1, name="s38revb"))
dist.register_backend("s38ga", GroupedA.create, devices=["cpu"])
dist.register_backend("s38gb", GroupedB.create, devices=["s38revb"])
dist.init_process_group("cpu:s38ga,s38revb:s38gb", timeout=20)
r, n = dist.get_rank(), dist.get_world_size()
# both engines made, the cpu one first (the order the batch enters their groups)
dist.all_reduce(acc.ones((1,), device="cpu"))
dist.all_reduce(acc.ones((1,), device="s38revb"))
from rank_cases import Cases, raises_containing
case = Cases(r, after=dist.barrier)


def batch():
    got = acc.zeros((2,), device="cpu")
    ops = [dist.P2POp(dist.isend, acc.full((2,), float(r + 1), device="cpu"), 1 - r),
           dist.P2POp(dist.irecv, got, 1 - r)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    return got.tolist()


@case
def a_group_that_fails_to_start_ends_the_groups_entered_before_it():
    LOG.clear()
    raises_containing(RuntimeError, "group B cannot start", batch)
    assert LOG == ["A enter", "A exit"], LOG
    # and the next batch runs
    GroupedB.refuse = False
    LOG.clear()
    assert batch() == [float(2 - r)] * 2
    assert LOG == ["A enter", "A exit"], LOG

case.done()
dist.destroy_process_group()
'''


def test_two_rank_review(tmp_path: Path) -> None:
    from test_distributed import MPIEXEC, _check_cases, launch
    if not HAVE_MPI or MPIEXEC is None:
        pytest.skip("needs mpi4py and mpiexec (pip install 'accelrt[mpi]')")
    from rank_cases import write_script
    script = write_script(tmp_path, _RANKS)
    rc, out, _ = launch(2, str(script), timeout=90)
    assert _check_cases(2, out, rc) == 1, out[-3000:]
