"""Error classes of ``accelrt.distributed`` where torch 2.14.1 raises another class for the
same misuse, so that an ``except`` written for torch's class also catches accelrt's. Observed
by running torch.distributed with gloo in one process (``init_process_group("gloo",
init_method="tcp://127.0.0.1:PORT", rank=0, world_size=1)``); each accelrt error keeps its
own class and gains torch's. Each test failed before the change (session 26).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import accelrt.distributed as dist

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None,
                                reason="needs mpi4py (the MPI engine)")


def _raises(classes: tuple[type[BaseException], ...], match: str,
            fn: Callable[[], Any]) -> None:
    with pytest.raises(classes[0], match=match) as info:
        fn()
    for cls in classes[1:]:
        assert isinstance(info.value, cls), (type(info.value).__mro__, cls)


def test_misuse_before_init_carries_torchs_assertion_error() -> None:
    # torch 2.14.1: AssertionError "Process group cannot be None" (destroy without a default
    # group), "Cannot specify both init_method and store.", "rank must be non-negative if
    # using store", "world_size must be positive if using store", and "Unknown backend type
    # nosuch" (init_process_group/new_group of an unknown backend); accelrt: ValueError only
    both = (ValueError, AssertionError)
    _raises(both, "Process group cannot be None", dist.destroy_process_group)
    store = dist.HashStore()
    _raises(both, "Cannot specify both init_method and store", lambda: dist.init_process_group(
        "mpi", init_method="tcp://127.0.0.1:1", store=store, rank=0, world_size=1))
    _raises(both, "rank must be non-negative if using store",
            lambda: dist.init_process_group("mpi", store=store, world_size=1))
    _raises(both, "world_size must be positive if using store",
            lambda: dist.init_process_group("mpi", store=store, rank=0, world_size=0))
    _raises(both, "Invalid backend: 'nosuch'",
            lambda: dist.init_process_group("nosuch", store=store, rank=0, world_size=1))
    assert not dist.is_initialized()


def test_misuse_of_a_group_carries_torchs_classes(one_rank_world: None) -> None:
    # torch 2.14.1 with gloo: broadcast(src=3)/reduce(dst=3) on the default group raise
    # RuntimeError ("ProcessGroupGloo::broadcast: invalid root rank: 3"); get_rank("x") and
    # destroy_process_group("x") ValueError, get_process_group_ranks("x") and of a destroyed
    # group KeyError; batch_isend_irecv([1]) ValueError ("Invalid ``p2p_op_list``");
    # new_group(backend="nosuch") AssertionError
    x = np.zeros(4, np.float32)
    _raises((ValueError, RuntimeError), "global rank 3 is not part of the group",
            lambda: dist.broadcast(x, src=3))
    _raises((ValueError, RuntimeError), "global rank 3 is not part of the group",
            lambda: dist.reduce(x, dst=3))
    for call in (dist.get_rank, dist.destroy_process_group, dist.get_process_group_ranks):
        _raises((TypeError, ValueError, KeyError), "^group must be a ProcessGroup or None, "
                "got str$", lambda call=call: call("x"))
    g = dist.new_group([0])
    dist.destroy_process_group(g)
    _raises((ValueError, KeyError), "^Group .* is not registered",
            lambda: dist.get_process_group_ranks(g))
    _raises((TypeError, ValueError), "Invalid ``p2p_op_list``",
            lambda: dist.batch_isend_irecv([1]))  # type: ignore[list-item]
    _raises((ValueError, AssertionError), "Invalid backend",
            lambda: dist.new_group([0], backend="nosuch"))
