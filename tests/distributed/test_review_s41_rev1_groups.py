"""Review of s41's merges (rev1): process groups refuse copy and pickle, as torch 2.15's.

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
