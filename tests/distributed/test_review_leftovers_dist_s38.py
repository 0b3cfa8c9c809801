"""Session-38 leftovers, the checks that need two ranks (the one-process ones are in
tests/runtime/test_review_leftovers_s38.py). Each case failed before its fix.

* ``batch_isend_irecv`` chose the engines whose sends and receives go in one launch group by
  name (``e.name == "nccl"``, then nccl4py's ``group()``): an engine is now asked
  (``EngineCapabilities.grouped_p2p``) and posts the batch inside its own
  ``Engine.p2p_group()``, then ``p2p_group_settle`` runs before the works' done events are
  recorded. A third-party engine declaring ``grouped_p2p`` had its group ignored.
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
from accelrt.distributed._mpi import MpiEngine

LOG = []


class Grouped(MpiEngine):
    """The MPI engine, declaring that a batch is posted in its group."""

    grouped_p2p = True

    @contextlib.contextmanager
    def _group(self):
        LOG.append("enter")
        yield
        LOG.append("exit")

    def p2p_group(self):
        return self._group()

    def p2p_group_settle(self, timeout, what):
        LOG.append(("settle", what))


dist.register_backend("s38grp", Grouped.create, devices=["cpu"])
dist.init_process_group("cpu:s38grp", timeout=20)
r, n = dist.get_rank(), dist.get_world_size()
from rank_cases import Cases
case = Cases(r, after=dist.barrier)


@case
def batch_isend_irecv_asks_the_engine_for_its_group():
    LOG.clear()
    got = acc.zeros((2,))
    ops = [dist.P2POp(dist.isend, acc.full((2,), float(r + 1)), 1 - r),
           dist.P2POp(dist.irecv, got, 1 - r)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    assert got.tolist() == [float(2 - r)] * 2, got.tolist()
    assert LOG == ["enter", "exit", ("settle", "batch_isend_irecv")], LOG
    # single sends and receives are not grouped
    LOG.clear()
    (dist.isend(acc.full((1,), 1.0), 1) if r == 0 else dist.irecv(acc.zeros((1,)), 0)).wait()
    assert LOG == [], LOG

case.done()
dist.destroy_process_group()
'''


def test_two_rank_leftovers(tmp_path: Path) -> None:
    from test_distributed import MPIEXEC, _check_cases, launch
    if not HAVE_MPI or MPIEXEC is None:
        pytest.skip("needs mpi4py and mpiexec (pip install 'accelrt[mpi]')")
    from rank_cases import write_script
    script = write_script(tmp_path, _RANKS)
    rc, out, _ = launch(2, str(script), timeout=90)
    assert _check_cases(2, out, rc) == 1, out[-3000:]
