"""The documented semantics of torch 2.15's ``torch/distributed/distributed_c10d.py``, function
by function, re-checked against ``accelrt.distributed``.

Each test names the torch function (and, where there is one, the PyTorch test) it mirrors.
The expected values are torch 2.15.0's, observed with its CPU build (gloo, a world of one
process over a ``HashStore``) on the same calls and written here as literals; torch is not
imported. accelrt runs on MPI's singleton world (no launcher), so every test is one process.

Fixed here (each test below failed before): ``get_backend_config()`` joined its pairs with
``", "`` (torch's ``BackendConfig`` string has no spaces); ``Backend("cpu:gloo,cuda:NCCL")``
was refused (torch lower-cases it); ``new_subgroups()`` without CUDA said an older torch's
words, and only after the default-group check (torch 2.15 checks the default size first);
``new_subgroups_by_enumeration`` reported a duplicate inside one list as an overlap between
lists, and a list longer than the world as a rank out of range (torch: ``new_group``'s
messages, list by list), and named every subgroup ``<group_desc>_<k>`` (torch gives them all
``group_desc``); ``new_group`` with more ranks than the world gave the range message
(torch: "the new group's world size should be less or equal ..."); ``new_group(ranks=[])``
returned ``NON_GROUP_MEMBER`` (torch raises ``AssertionError`` on every rank, and has counted
the group); ``split_group(NON_GROUP_MEMBER, ...)`` did not say the group is not registered.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

import accelrt.distributed as dist

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None,
                                reason="needs mpi4py (the MPI engine)")

NG = dist.GroupMember.NON_GROUP_MEMBER


def _has_cuda_device() -> bool:
    from accelrt import backends
    try:
        return backends.get_backend("cuda").device_count() > 0
    except Exception:
        return False


@pytest.fixture
def world(one_rank_world: None) -> Iterator[None]:
    """A default group of one rank (MPI's singleton)."""
    yield


@pytest.fixture
def no_world() -> Iterator[None]:
    """No default group before the test; none left after it."""
    if dist.is_initialized():
        dist.destroy_process_group()
    try:
        yield
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


# ---------------------------------------------------------------------------- backends
@pytest.mark.parametrize("spec, config", [
    ("cpu:gloo", "cpu:gloo"),
    ("CPU:GLOO", "cpu:gloo"),
    ("cpu:gloo,cuda:gloo", "cpu:gloo,cuda:gloo"),
])
def test_get_backend_config_is_torchs_string(no_world: None, spec: str, config: str) -> None:
    """mirrors distributed_c10d.py get_backend_config / BackendConfig.__repr__ (torch 2.15:
    the device:backend pairs joined by "," with no space; get_backend answers the lower-cased
    string the group was made with, a subgroup its parent's)."""
    dist.init_process_group(spec, timeout=30)
    assert dist.get_backend_config() == config
    assert dist.get_backend() == config
    g = dist.new_group([0])
    assert dist.get_backend_config(g) == config and dist.get_backend(g) == config


def test_get_backend_config_of_a_bare_name_has_no_spaces(no_world: None) -> None:
    """mirrors distributed_c10d.py get_backend_config (torch 2.15: "gloo" gives
    'cpu:gloo,cuda:gloo'; accelrt's gloo engine serves its own device types, listed the same
    way) and get_backend (the bare name)."""
    dist.init_process_group("gloo", timeout=30)
    config = dist.get_backend_config()
    assert " " not in config and config.startswith("cpu:gloo,")
    assert all(pair.endswith(":gloo") for pair in config.split(","))
    assert dist.get_backend() == "gloo"


def test_backend_of_a_device_backend_string() -> None:
    """mirrors distributed_c10d.py Backend.__new__ (torch 2.15 lower-cases a "device:backend"
    string as it is: Backend("cpu:gloo,cuda:NCCL") == "cpu:gloo,cuda:nccl", a str)."""
    b = dist.Backend("cpu:gloo,cuda:NCCL")
    assert b == "cpu:gloo,cuda:nccl" and isinstance(b, str)
    assert dist.Backend("CPU:MPI") == "cpu:mpi"
    # a malformed pair gets BackendConfig's words (torch raises them when the group is made)
    with pytest.raises(ValueError, match="Invalid device:backend pairing"):
        dist.Backend("cpu:gloo:extra")
    with pytest.raises(ValueError, match="Duplicate device type cpu"):
        dist.Backend("cpu:gloo,cpu:mpi")


# ---------------------------------------------------------------------------- subgroups
TORCH_DEFAULT_SIZE = ("Default group size only takes effect when CUDA/XPU is available.If your "
                      "subgroup using a backend that does not depend on CUDA/XPU,please pass in "
                      "'group_size' correctly.")


@pytest.mark.skipif(_has_cuda_device(), reason="the default size is the CUDA device count")
def test_new_subgroups_default_size_words_and_order(no_world: None) -> None:
    """mirrors distributed_c10d.py new_subgroups (torch 2.15: without an accelerator,
    group_size=None raises these exact words, before it looks for the default group)."""
    with pytest.raises(ValueError) as before:
        dist.new_subgroups()
    assert str(before.value) == TORCH_DEFAULT_SIZE
    dist.init_process_group("mpi", timeout=30)
    with pytest.raises(ValueError) as after:
        dist.new_subgroups(group_size=None, group=dist.group.WORLD)
    assert str(after.value) == TORCH_DEFAULT_SIZE


@pytest.mark.parametrize("lists, cls, words", [
    ([[0, 0]], ValueError, "ranks list must not contain duplicate entries, got [0, 0]"),
    ([[0, 1]], ValueError, ("the new group's world size should be less or equal to the world "
                            "size set by init_process_group")),
    ([[3]], ValueError, "Rank 3 is out of range. Valid ranks are 0 to 0 (world_size=1)"),
    (["0"], TypeError, "ranks must be a sequence of integers"),
    ([[0.0]], TypeError, "ranks must be a sequence of integers"),
    ([[0], [0]], ValueError, "Rank 0 has appeared in both subgroup [0] and [0]"),
])
def test_new_subgroups_by_enumeration_checks_each_list(world: None, lists: list, cls: type,
                                                       words: str) -> None:
    """mirrors distributed_c10d.py new_subgroups_by_enumeration (torch 2.15 makes each list's
    group with new_group, whose checks speak first, then looks for overlaps)."""
    count = dist.get_pg_count()
    with pytest.raises(cls) as info:
        dist.new_subgroups_by_enumeration(lists)
    assert str(info.value).endswith(words)
    assert dist.get_pg_count() == count


def test_subgroups_share_group_desc(world: None) -> None:
    """mirrors distributed_c10d.py new_subgroups / new_subgroups_by_enumeration (torch 2.15
    passes group_desc to every subgroup's new_group unchanged; none gives "undefined")."""
    cur, groups = dist.new_subgroups_by_enumeration([[0]], group_desc="x")
    assert isinstance(cur, dist.ProcessGroup)
    assert cur.group_desc == "x" and [g.group_desc for g in groups] == ["x"]  # type: ignore[union-attr]
    cur, _ = dist.new_subgroups(1, group_desc="y")
    assert cur.group_desc == "y"  # type: ignore[union-attr]
    cur, _ = dist.new_subgroups_by_enumeration([[0]])
    assert cur.group_desc == "undefined"  # type: ignore[union-attr]


# ---------------------------------------------------------------------------- new_group
def test_new_group_with_more_ranks_than_the_world(world: None) -> None:
    """mirrors distributed_c10d.py _new_group_with_tag (torch 2.15's order: duplicates, then
    the group's size against the world's, then each rank's range)."""
    with pytest.raises(ValueError, match="the new group's world size should be less or equal "
                                         "to the world size set by init_process_group$"):
        dist.new_group([0, 1])
    with pytest.raises(ValueError, match=r"ranks list must not contain duplicate entries, "
                                         r"got \[0, 1, 1\]$"):
        dist.new_group([1, 0, 1])
    with pytest.raises(ValueError, match=r"Rank -1 is out of range"):
        dist.new_group([-1])


def test_new_group_of_no_rank(world: None) -> None:
    """mirrors distributed_c10d.py _new_group_with_tag / _new_process_group_helper (torch
    2.15: ranks=[] raises AssertionError "Group rank must be specified for group members" on
    every rank, after counting the group; with use_local_synchronization=True every rank gets
    NON_GROUP_MEMBER)."""
    count = dist.get_pg_count()
    with pytest.raises(AssertionError, match="^Group rank must be specified for group members"
                       ) as info:
        dist.new_group([])
    assert isinstance(info.value, ValueError)   # accelrt's argument errors are ValueErrors too
    assert dist.get_pg_count() == count + 1
    with pytest.raises(AssertionError, match="Group rank must be specified"):
        dist.new_subgroups_by_enumeration([[]])
    assert dist.new_group([], use_local_synchronization=True) is NG


# ---------------------------------------------------------------------------- split_group
def test_split_group_of_a_group_this_rank_is_not_in(world: None) -> None:
    """mirrors distributed_c10d.py split_group (torch 2.15: NON_GROUP_MEMBER as the parent is
    "Group -100 is not registered"; a destroyed parent the same words)."""
    with pytest.raises(ValueError, match=r"^Group .*NON_GROUP_MEMBER.* is not registered"):
        dist.split_group(NG, split_ranks=[[0]])
    g = dist.new_group([0])
    dist.destroy_process_group(g)
    with pytest.raises(ValueError, match=r"^Group .* is not registered"):
        dist.split_group(g, split_ranks=[[0]])
    # the size check comes before the duplicate check, as torch's
    with pytest.raises(ValueError, match="the split group's size should be less or equal"):
        dist.split_group(split_ranks=[[0, 0]])


# ---------------------------------------------------------------------------- counts, env
def test_pg_count_through_a_lifetime(no_world: None) -> None:
    """mirrors distributed_c10d.py get_pg_count (torch 2.15's group_count: 0 before init, 1
    for the world, +1 per group made, member or not; destroying a subgroup keeps the count,
    destroying the world resets it to 0)."""
    assert dist.get_pg_count() == 0
    dist.init_process_group("mpi", timeout=30)
    assert dist.get_pg_count() == 1
    g = dist.new_group([0])
    dist.new_subgroups(1)
    dist.split_group(split_ranks=[[0]])
    assert dist.get_pg_count() == 4
    dist.destroy_process_group(g)
    assert dist.get_pg_count() == 4
    with pytest.raises(ValueError, match="^Invalid process group specified"):
        dist.destroy_process_group(g)
    dist.destroy_process_group()
    assert dist.get_pg_count() == 0 and not dist.is_initialized()


def test_node_local_rank_env_forms(monkeypatch: pytest.MonkeyPatch) -> None:
    """mirrors distributed_c10d.py get_node_local_rank (torch 2.15: int() of LOCAL_RANK, so
    spaces are allowed and a non-number is int()'s ValueError; the fallback is int()'d)."""
    monkeypatch.setenv("LOCAL_RANK", " 3 ")
    assert dist.get_node_local_rank(fallback_rank=7) == 3
    monkeypatch.setenv("LOCAL_RANK", "x")
    with pytest.raises(ValueError, match="invalid literal for int"):
        dist.get_node_local_rank(fallback_rank=7)
    monkeypatch.delenv("LOCAL_RANK")
    assert dist.get_node_local_rank(fallback_rank="4") == 4  # type: ignore[arg-type]
    assert dist.get_node_local_rank(fallback_rank=0) == 0


def test_torchelastic_launched_reads_presence(monkeypatch: pytest.MonkeyPatch) -> None:
    """mirrors distributed_c10d.py is_torchelastic_launched (torch 2.15: the variable's
    presence, an empty value included)."""
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    assert dist.is_torchelastic_launched() is False
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "")
    assert dist.is_torchelastic_launched() is True


# ---------------------------------------------------------------------------- two ranks
_TWO_RANKS = '''
import accelrt as acc, accelrt.distributed as dist
dist.init_process_group("gloo", timeout=30)
R = dist.get_rank()
cur, groups = dist.new_subgroups_by_enumeration([[0], [1]], group_desc="d")
descs = ["NG" if g is dist.GroupMember.NON_GROUP_MEMBER else g.group_desc for g in groups]
assert descs == (["d", "NG"] if R == 0 else ["NG", "d"]), descs
assert dist.get_process_group_ranks(cur) == [R]
try:
    dist.new_group([])
    raise SystemExit("new_group([]) returned")
except AssertionError as e:
    assert str(e).startswith("Group rank must be specified for group members"), e
assert dist.get_pg_count() == 4, dist.get_pg_count()
sp = dist.split_group(split_ranks=[[0]])
assert (dist.get_rank(sp), dist.get_world_size(sp)) == ((0, 1) if R == 0 else (-1, -1))
assert dist.get_pg_count() == 5
dist.all_reduce(acc.full((2,), 1.0))   # every rank is still in step
dist.destroy_process_group()
print(f"OK {R}", flush=True)
'''


def test_group_semantics_on_two_ranks(tmp_path: Path) -> None:
    """mirrors distributed_c10d.py new_subgroups_by_enumeration, new_group and split_group on
    two ranks (torch 2.15, gloo, two spawned processes: the same group_desc on each rank's
    subgroup and NON_GROUP_MEMBER for the other's; new_group([]) raises AssertionError on
    every rank, both then count 4 groups; split_group gives the rank left out
    NON_GROUP_MEMBER, -1 for its rank and size)."""
    from test_distributed import MPIEXEC, launch
    if MPIEXEC is None:
        pytest.skip("needs mpiexec (pip install 'accelrt[mpi]')")
    script = tmp_path / "two_ranks.py"
    script.write_text(_TWO_RANKS)
    rc, out, _ = launch(2, str(script), timeout=60)
    assert rc == 0, out[-3000:]
    assert "OK 0" in out and "OK 1" in out, out[-3000:]
