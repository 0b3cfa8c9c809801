"""Session 38: group names as torch 2.15 has them, and ``accelrt.distributed.distributed_c10d``.

- ``ProcessGroup.name`` was a str attribute (accelrt's label: "WORLD", "group1", the
  group_desc): torch code calling ``pg.name()`` got ``TypeError: 'str' object is not
  callable``. It is torch's method now (the default backend's name), with torch's
  ``group_name`` property ('0' for the world, then the group count; a SHA-1 for
  ``split_group`` and ``new_group(use_local_synchronization=True)``) and torch's private
  ``_get_process_group_name`` / ``_resolve_process_group``.
- ``from torch.distributed.distributed_c10d import ...`` (DeepSpeed, fairscale) had no
  accelrt module to port to.

Every expected value was read from torch 2.15 (CPU build, gloo, the same calls in the same
order: one rank in-process, two ranks with ``mp.spawn``); the hashes are torch's.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import re
from pathlib import Path

import pytest

import accelrt.distributed as dist

needs_mpi = pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None,
                               reason="mpi4py is not installed")

#: torch 2.15's distributed_c10d.__all__ (CPU build; ProcessGroupNCCL* are in it there too)
TORCH_ALL = [
    "AllToAllOptions", "AllreduceCoalescedOptions", "AllreduceOptions", "Backend",
    "BackendConfig", "BarrierOptions", "BroadcastOptions", "DebugLevel", "GatherOptions",
    "GroupMember", "GroupName", "P2POp", "PrefixStore", "ProcessGroup", "ProcessGroupGloo",
    "ProcessGroupNCCL", "ProcessGroupNCCL2", "ProcessGroupNCCLLazy", "ReduceOp",
    "ReduceOptions", "ReduceScatterOptions", "ScatterOptions", "Store", "Work", "all_gather",
    "all_gather_coalesced", "all_gather_into_tensor", "all_gather_object", "all_gather_single",
    "all_reduce", "all_reduce_coalesced", "all_to_all", "all_to_all_single", "barrier",
    "batch_isend_irecv", "broadcast", "broadcast_object_list", "default_pg_timeout",
    "destroy_process_group", "gather", "gather_into_tensor", "gather_object", "gather_single",
    "get_backend", "get_backend_config", "get_backend_impl", "get_debug_level",
    "get_default_backend_for_device", "get_global_rank", "get_group_rank",
    "get_node_local_rank", "get_pg_count", "get_process_group_ranks", "get_rank",
    "get_world_size", "group", "init_process_group", "irecv", "is_backend_available",
    "is_gloo_available", "is_initialized", "is_mpi_available", "is_nccl_available",
    "is_torchelastic_launched", "is_ucc_available", "is_xccl_available", "isend",
    "monitored_barrier", "new_group", "new_subgroups", "new_subgroups_by_enumeration",
    "record_comm", "recv", "recv_object_list", "reduce", "reduce_op", "reduce_scatter",
    "reduce_scatter_single", "reduce_scatter_tensor", "scatter", "scatter_object_list", "send",
    "send_object_list", "set_timeout", "shrink_group", "split_group", "supports_complex",
]
#: those accelrt has not (docs/differences.md, section 6)
MISSING = {
    "AllToAllOptions", "AllreduceCoalescedOptions", "AllreduceOptions", "BackendConfig",
    "BarrierOptions", "BroadcastOptions", "GatherOptions", "ProcessGroupGloo",
    "ProcessGroupNCCL", "ProcessGroupNCCL2", "ProcessGroupNCCLLazy", "ReduceOptions",
    "ReduceScatterOptions", "ScatterOptions", "get_backend_impl", "record_comm", "reduce_op",
    "shrink_group",
}
#: other names of torch's module that accelrt.distributed has (dir() of both compared)
OTHERS = ["DistStoreError", "register_rendezvous_handler", "rendezvous", "_coalescing_manager",
          "_rank_not_in_group", "_get_process_group_name"]


# ------------------------------------------------------------------ ProcessGroup.name()
def test_name_is_a_method_answering_the_backend(one_rank_world: None) -> None:
    """torch 2.15: ``group.WORLD.name()`` is 'gloo' for a 'gloo' and a 'cpu:gloo' world;
    ``name`` was a str here and ``pg.name()`` a TypeError."""
    world = dist.group.WORLD
    assert world is not None
    assert callable(world.name) and world.name() == "mpi"
    assert dist.get_backend(world) == "cpu:mpi"      # torch: 'cpu:gloo' beside name() 'gloo'
    g = dist.new_group([0], backend="mpi")
    assert isinstance(g, dist.ProcessGroup) and g.name() == "mpi" == dist.get_backend(g)
    dist.destroy_process_group(g)
    assert g.name() == "mpi"                         # torch: a destroyed group answers


def test_name_of_a_world_without_a_backend_string() -> None:
    """A device:engine map answers the engine of the bound device's type, else of the current
    accelerator's (torch's ``_get_default_backend_type_for_backend_config``); the default
    map here has the 'mpi' engine for cpu and 'nccl' for cuda."""
    if importlib.util.find_spec("mpi4py") is None:
        pytest.skip("mpi4py is not installed")
    import accelrt as acc
    dist.init_process_group(backend=None, timeout=30)
    try:
        world = dist.group.WORLD
        assert world is not None and "," in dist.get_backend()
        cur = acc.current_accelerator()
        assert cur is not None
        assert world.name() == world.engine_map[cur.type]
        world.bound_device_id = acc.device("cpu")    # as init_process_group(device_id="cpu")
        assert world.name() == "mpi"
    finally:
        dist.destroy_process_group()


def test_name_of_a_third_party_engine_is_custom(one_rank_world: None) -> None:
    """torch registers a third-party backend as ``BackendType.CUSTOM``: its ``name()`` is
    'custom'; ``get_backend`` keeps the registered name."""
    from accelrt.distributed._mpi import MpiEngine
    dist.register_backend("pgnamempi", MpiEngine.create, devices=["cpu"])
    try:
        g = dist.new_group([0], backend="pgnamempi")
        assert isinstance(g, dist.ProcessGroup)
        assert g.name() == "custom" and dist.get_backend(g) == "pgnamempi"
        dist.destroy_process_group(g)
    finally:
        dist.Backend._unregister("pgnamempi")


# ------------------------------------------------------------------ group_name
def test_group_names_follow_torchs_count(one_rank_world: None) -> None:
    """torch 2.15, one rank: '0', '1', a refused ``new_group([])`` still counts, '3';
    a local-synchronization group and split groups are named by torch's hashes."""
    world = dist.group.WORLD
    assert world is not None
    assert world.group_name == "0" and world.group_desc == "default_pg"
    a = dist.new_group([0])
    assert isinstance(a, dist.ProcessGroup) and a.group_name == "1"
    with pytest.raises(AssertionError, match="Group rank must be specified"):
        dist.new_group([])
    assert dist.get_pg_count() == 3
    b = dist.new_group([0], group_desc="d")
    assert isinstance(b, dist.ProcessGroup) and (b.group_name, b.group_desc) == ("3", "d")
    local = dist.new_group([0], use_local_synchronization=True)
    assert isinstance(local, dist.ProcessGroup)
    assert local.group_name == "99d2fa1eca94c10752e76b1ac7e9bdbfd0044045"   # torch's
    assert local.group_name == hashlib.sha1(b"0_4").hexdigest()
    sp = dist.split_group(split_ranks=[[0]])
    assert isinstance(sp, dist.ProcessGroup)
    assert (sp.group_name, sp.group_desc) == ("e61b37d2ae7c7826dd16f26a0c4be966b21ba7cd",
                                              "default_pg:split:0")
    sp2 = dist.split_group(sp, split_ranks=[[0]])
    assert isinstance(sp2, dist.ProcessGroup)
    assert sp2.group_name == "5884b3254fdabe632abbb82f21ddb7c9e54ec5c3"
    cur, _ = dist.new_subgroups(1)
    assert isinstance(cur, dist.ProcessGroup) and cur.group_name == "7"
    # accelrt's own label stays in its messages
    assert re.search(r"ProcessGroup 'group\d+' ", repr(a)) and "'WORLD'" in repr(world)


def test_get_process_group_name_and_resolve(one_rank_world: None) -> None:
    from accelrt.distributed.distributed_c10d import _resolve_process_group
    world = dist.group.WORLD
    assert world is not None
    g = dist.new_group([0])
    assert isinstance(g, dist.ProcessGroup)
    assert dist._get_process_group_name(world) == "0"
    assert dist._get_process_group_name(g) == "1"
    for other in (None, dist.GroupMember.NON_GROUP_MEMBER, "1"):
        assert dist._get_process_group_name(other) == "None"   # torch: pg_names.get(pg)
    assert _resolve_process_group("0") is world and _resolve_process_group("1") is g
    with pytest.raises(RuntimeError, match="Could not resolve the process group registered "
                                           "under the name 999"):
        _resolve_process_group("999")
    with pytest.raises(TypeError, match="group_name must be a str"):
        _resolve_process_group(1)  # type: ignore[arg-type]
    dist.destroy_process_group(g)
    assert g.group_name == "1" and dist._get_process_group_name(g) == "None"
    with pytest.raises(RuntimeError, match="under the name 1"):
        _resolve_process_group("1")
    dist.destroy_process_group()
    assert world.group_name == "0" and world.name() == "mpi"
    assert dist._get_process_group_name(world) == "None"
    with pytest.raises(RuntimeError, match="under the name 0"):
        _resolve_process_group("0")


# ------------------------------------------------------------------ distributed_c10d
def test_distributed_c10d_has_torchs_names_that_accelrt_has() -> None:
    c10d = importlib.import_module("accelrt.distributed.distributed_c10d")
    assert dist.distributed_c10d is c10d
    have = [n for n in TORCH_ALL if n not in MISSING]
    assert sorted(c10d.__all__) == sorted(have)
    for name in have + OTHERS:
        ns: dict[str, object] = {}
        exec(f"from accelrt.distributed.distributed_c10d import {name}", ns)
        assert ns[name] is getattr(dist, name), name
    star: dict[str, object] = {}
    exec("from accelrt.distributed.distributed_c10d import *", star)
    assert set(have) <= set(star)


def test_distributed_c10d_names_accelrt_lacks_raise_clearly() -> None:
    c10d = importlib.import_module("accelrt.distributed.distributed_c10d")
    for name in sorted(MISSING):
        with pytest.raises(AttributeError, match=f"no attribute '{name}': .+differences.md"):
            getattr(c10d, name)
        assert not hasattr(c10d, name)
        with pytest.raises(ImportError, match=f"cannot import name '{name}'"):
            exec(f"from accelrt.distributed.distributed_c10d import {name}", {})
    with pytest.raises(AttributeError, match="no attribute '_no_such'.+__all__"):
        c10d._no_such  # noqa: B018


def test_distributed_c10d_private_helpers() -> None:
    """DeepSpeed's ``_get_default_group, _get_global_rank``: torch 2.15's texts and answers."""
    from accelrt.distributed.distributed_c10d import _get_default_group, _get_global_rank
    with pytest.raises(ValueError, match="Default process group has not been initialized"):
        _get_default_group()
    if importlib.util.find_spec("mpi4py") is None:
        return
    dist.init_process_group("cpu:mpi", timeout=30)
    try:
        assert _get_default_group() is dist.group.WORLD
        assert _get_global_rank(dist.group.WORLD, 0) == 0
        assert _get_global_rank is dist.get_global_rank
    finally:
        dist.destroy_process_group()


# ------------------------------------------------------------------ two ranks
_RANKS = r'''
import hashlib
import accelrt.distributed as dist
from accelrt.distributed.distributed_c10d import _resolve_process_group
from rank_cases import Cases

dist.init_process_group("gloo", timeout=30)
r, n = dist.get_rank(), dist.get_world_size()
case = Cases(r, after=dist.barrier)
names = {}


def agree(tag, name):
    out = [None] * n
    dist.all_gather_object(out, (tag, name))
    return out


@case
def torchs_names_on_both_ranks():
    # torch 2.15, gloo, two ranks (mp.spawn), the same calls in this order
    W = dist.group.WORLD
    assert (W.name(), W.group_name, W.group_desc) == ("gloo", "0", "default_pg")
    g1 = dist.new_group([0, 1])
    assert (g1.name(), g1.group_name) == ("gloo", "1")
    g2 = dist.new_group([0])
    if r == 0:
        assert g2.group_name == "2"
    else:
        assert g2 is dist.GroupMember.NON_GROUP_MEMBER
    assert dist.get_pg_count() == 3
    g3 = dist.new_group([0, 1], group_desc="mine")
    assert (g3.group_name, g3.group_desc) == ("3", "mine")
    g4 = dist.new_group([0, 1], use_local_synchronization=True)
    assert g4.group_name == "aaa4f203ddf9028f69177fbaad56f1c52f846159"
    s = dist.split_group(split_ranks=[[0], [1]])
    assert s.group_name == ["e61b37d2ae7c7826dd16f26a0c4be966b21ba7cd",
                            "8dfe76f920711352e74bcbecaf3db1eb12601a67"][r]
    assert s.group_desc == "default_pg:split:0" and dist.get_pg_count() == 6
    cur, groups = dist.new_subgroups(group_size=1)
    assert cur.group_name == ["6", "7"][r]
    assert [g if g is dist.GroupMember.NON_GROUP_MEMBER else g.group_name
            for g in groups] == [["6", dist.GroupMember.NON_GROUP_MEMBER],
                                 [dist.GroupMember.NON_GROUP_MEMBER, "7"]][r]
    names.update(g1=g1, g3=g3, g4=g4)


@case
def members_agree_and_resolve():
    for tag, g in sorted(names.items()):
        assert agree(tag, g.group_name) == [(tag, g.group_name)] * n
        assert _resolve_process_group(g.group_name) is g
        assert dist._get_process_group_name(g) == g.group_name


case.done()
dist.destroy_process_group()
'''


@needs_mpi
def test_group_names_agree_on_two_ranks(tmp_path: Path) -> None:
    from test_distributed import MPIEXEC, _check_cases, launch
    if MPIEXEC is None:
        pytest.skip("needs mpiexec (pip install 'accelrt[mpi]')")
    from rank_cases import write_script
    script = write_script(tmp_path, _RANKS)
    rc, out, _ = launch(2, str(script), timeout=90)
    assert _check_cases(2, out, rc) == 2, out[-3000:]
