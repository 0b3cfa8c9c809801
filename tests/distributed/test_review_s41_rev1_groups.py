"""Review of s41's merges (rev1): process groups, works and futures refuse copy and pickle,
as torch 2.15's.

torch 2.15's ``ProcessGroup`` (a pybind class) answers ``pickle.dumps``, ``copy.copy`` and
``copy.deepcopy`` with ``TypeError: cannot pickle 'torch._C._distributed_c10d.ProcessGroup'
object`` (checked with gloo on /tmp/t215). accelrt's ``copy.copy(group)`` made a second group
object sharing the first's engines and communicators but counting its own sequence numbers,
and ``pickle``/``deepcopy`` failed with mpi4py's ``ValueError``, from the communicator.
"""

from __future__ import annotations

import copy
import importlib.util
import pickle
from collections.abc import Callable
from typing import Any

import pytest

import accelrt.distributed as dist

needs_mpi = pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None,
                               reason="mpi4py is not installed")


@needs_mpi
@pytest.mark.parametrize("how", [pickle.dumps, copy.copy, copy.deepcopy],
                         ids=["pickle", "copy", "deepcopy"])
def test_process_groups_refuse_copy_and_pickle(how: Callable[[Any], Any]) -> None:
    dist.init_process_group("cpu:mpi", timeout=30)
    try:
        world = dist.group.WORLD
        sub = dist.new_group([0])
        for g in (world, sub):
            assert isinstance(g, dist.ProcessGroup)
            with pytest.raises(TypeError, match=r"cannot pickle 'ProcessGroup' object"):
                how(g)
        # the groups still work after the refusal
        assert dist.get_process_group_ranks(sub) == [0]
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("how", [pickle.dumps, copy.copy, copy.deepcopy],
                         ids=["pickle", "copy", "deepcopy"])
def test_futures_and_works_refuse_copy_and_pickle(how: Callable[[Any], Any]) -> None:
    """torch 2.15: ``RuntimeError: Can not pickle torch.futures.Future`` and ``TypeError:
    cannot pickle 'torch._C._distributed_c10d.Work' object`` (gloo's work and its future,
    checked on /tmp/t215). accelrt copied both (a future's copy shared its lock and
    callbacks; a work's deep copy copied its arrays) and pickle failed on a lock."""
    fut = dist.Future()
    with pytest.raises(RuntimeError, match="Can not pickle accelrt.distributed.Future"):
        how(fut)
    fut.set_result(3)   # the original is untouched
    assert fut.wait() == 3
    work = dist.Work.completed()
    with pytest.raises(TypeError, match=r"cannot pickle 'Work' object"):
        how(work)
    assert work.is_completed()


@needs_mpi
def test_a_running_collectives_work_and_future_refuse_copy() -> None:
    import accelrt as acc
    dist.init_process_group("cpu:mpi", timeout=30)
    try:
        a = acc.ones(4, device="cpu")
        work = dist.all_reduce(a, async_op=True)
        for obj, error in ((work, TypeError), (work.get_future(), RuntimeError)):
            for how in (copy.copy, copy.deepcopy, pickle.dumps):
                with pytest.raises(error):
                    how(obj)
        work.wait()
        assert a.tolist() == [1.0, 1.0, 1.0, 1.0]
    finally:
        dist.destroy_process_group()
