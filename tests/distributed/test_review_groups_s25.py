"""A destroyed group as torch.distributed treats it (read in ``distributed_c10d.py``):
``destroy_process_group`` removes the group from ``_world``'s maps, so ``get_rank`` (through
``get_group_rank``), ``get_backend`` (``_world.pg_map``) and the rank translations refuse it,
while ``get_world_size`` asks the group object its size and still answers; a second destroy is
"Invalid process group specified". One process, the singleton MPI world the other tests use.
"""

from __future__ import annotations

import importlib.util

import pytest

import accelrt.distributed as dist

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None,
                                reason="mpi4py is not installed")

NOT_REGISTERED = "is not registered, please create group with torch.distributed.new_group API"
NOT_IN_MAP = "is not initialized in the world group map. Please initialize the group first"
NO_WORLD = "Default process group has not been initialized"


def test_a_destroyed_subgroup_is_forgotten_like_torch(one_rank_world: None) -> None:
    g = dist.new_group([0])
    assert isinstance(g, dist.ProcessGroup)
    assert (dist.get_rank(g), dist.get_world_size(g), dist.get_backend(g)) == (0, 1, "cpu:mpi")
    dist.destroy_process_group(g)
    # before the change each of these answered as if the group were alive
    with pytest.raises(ValueError, match=NOT_REGISTERED):
        dist.get_rank(g)
    with pytest.raises(ValueError, match=NOT_IN_MAP):
        dist.get_backend(g)
    with pytest.raises(ValueError, match=NOT_IN_MAP):
        dist.get_backend_config(g)
    for ask in (lambda: dist.get_process_group_ranks(g), lambda: dist.get_global_rank(g, 0),
                lambda: dist.get_group_rank(g, 0)):
        with pytest.raises(ValueError, match=NOT_REGISTERED):
            ask()
    with pytest.raises(ValueError, match="Invalid process group specified"):
        dist.destroy_process_group(g)             # it was destroyed without an error
    assert dist.get_world_size(g) == 1            # torch: group.size(), registered or not
    # the world is untouched
    assert (dist.get_rank(), dist.get_world_size(), dist.get_backend()) == (0, 1, "cpu:mpi")
    assert dist.get_process_group_ranks(dist.group.WORLD) == [0]
    nm = dist.GroupMember.NON_GROUP_MEMBER
    assert dist.get_rank(nm) == dist.get_world_size(nm) == -1


def test_groups_after_destroy_process_group_like_torch(one_rank_world: None) -> None:
    g = dist.new_group([0])
    w = dist.group.WORLD
    assert isinstance(g, dist.ProcessGroup) and w is not None
    dist.destroy_process_group()
    for group in (None, w, g):
        with pytest.raises(ValueError, match=NO_WORLD):   # _get_default_group() first
            dist.get_rank(group)
    with pytest.raises(ValueError, match=NO_WORLD):
        dist.get_world_size()
    with pytest.raises(ValueError, match=NO_WORLD):
        dist.get_backend()
    for group in (w, g):
        # torch: get_world_size asks the group object (accelrt raised "not initialized");
        # get_backend looks a given group up in pg_map without the default group
        assert dist.get_world_size(group) == 1
        with pytest.raises(ValueError, match=NOT_IN_MAP):
            dist.get_backend(group)
    nm = dist.GroupMember.NON_GROUP_MEMBER      # -1 before any default group is looked up
    assert dist.get_rank(nm) == dist.get_world_size(nm) == -1
    assert dist.destroy_process_group(nm) is None
    for group in (w, g):                        # torch: not in pg_map (accelrt: no world)
        with pytest.raises(ValueError, match="Invalid process group specified"):
            dist.destroy_process_group(group)
    # a new world does not bring the old groups back
    dist.init_process_group("cpu:mpi", timeout=30)
    for group in (w, g):
        with pytest.raises(ValueError, match=NOT_REGISTERED):
            dist.get_rank(group)
        with pytest.raises(ValueError, match="Invalid process group specified"):
            dist.destroy_process_group(group)
    assert dist.get_rank() == 0 and dist.group.WORLD is not w
