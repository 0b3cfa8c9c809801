"""PyTorch's object-collective and monitored-barrier tests re-checked against
``accelrt.distributed``: test/distributed/test_c10d_object_collectives.py
(``TestObjectCollectives``, its sub-group tests included) and, from
torch/testing/_internal/distributed/distributed_test.py, test_monitored_barrier_gloo_subgroup,
test_monitored_barrier_failure_order, test_monitored_barrier_wait_all_ranks and the parts of
test_broadcast_object_list / test_gather_object / test_scatter_object_list that
test_torch_suite_disttest_s35.py does not check.

The expected behaviour is torch 2.15.0's, run with gloo on this machine (4 ranks,
``torch.multiprocessing.spawn``) on the same calls. The one-process checks run on MPI's
singleton world; the rank checks in one ``mpiexec -n 4`` launch (one ``OK``/``FAIL`` line per
case and rank, under a hard timeout).

Fixed here (each failed before): ``broadcast_object_list`` replaced the source's own objects
with unpickled copies (torch leaves the source's list alone, so ``weights_only=True`` refused
a class on the source too); ``gather_object`` refused a destination list longer than the
group (torch fills its first slots) and said accelrt's words for a missing list; a missing
``scatter_object_input_list`` on the source did not say torch's words; a global rank outside
a subgroup given as ``src``/``dst`` did not start with torch's "Global rank 0 is not part of
group".
"""

from __future__ import annotations

import importlib.util
import pickle
from collections.abc import Iterator
from pathlib import Path

import pytest

import accelrt.distributed as dist

HAVE_MPI = importlib.util.find_spec("mpi4py") is not None
needs_mpi = pytest.mark.skipif(not HAVE_MPI, reason="mpi4py is not installed")


class _Box:
    """A picklable user class (module level), as distributed_test.py's ``Foo``."""

    def __init__(self, x: object) -> None:
        self.x = x

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Box) and self.x == other.x

    __hash__ = None  # type: ignore[assignment]


@pytest.fixture
def world(one_rank_world: None) -> Iterator[None]:
    """A world of one rank (MPI's singleton); skipped without mpi4py."""
    yield


@needs_mpi
def test_broadcast_object_list_leaves_the_source_list_alone(world: None) -> None:
    """mirrors distributed_test.py _test_broadcast_object_list (the source's list) and
    test_c10d_object_collectives.py test_broadcast_object_list; torch 2.15 serialises the
    source's objects and deserialises only on the other ranks."""
    mine = _Box([1, 2])
    objs: list[object] = [mine, "foo"]
    dist.broadcast_object_list(objs, src=0)
    assert objs[0] is mine and objs == [_Box([1, 2]), "foo"]
    # weights_only=True restricts the receivers' unpickling: the source keeps its object
    objs = [mine]
    dist.broadcast_object_list(objs, src=0, weights_only=True)
    assert objs[0] is mine
    objs = [None]
    dist.broadcast_object_list(objs)   # src defaults to global rank 0
    assert objs == [None]


@needs_mpi
def test_gather_object_destination_list(world: None) -> None:
    """mirrors distributed_test.py _test_gather_object and test_c10d_object_collectives.py
    test_gather_object (torch 2.15: a longer list has its first slots filled; a missing or
    empty one raises "Argument ``gather_list`` must be specified on destination rank.")."""
    out: list[object] = [None, "kept", 3]
    dist.gather_object({"rank": 0}, out, dst=0)
    assert out == [{"rank": 0}, "kept", 3]
    out = [None]
    dist.gather_object(0, object_gather_list=out)   # dst defaults to global rank 0
    assert out == [0]
    for bad in (None, []):
        with pytest.raises(ValueError,
                           match="^Argument ``gather_list`` must be specified on destination"):
            dist.gather_object(0, bad, dst=0)


@needs_mpi
def test_scatter_object_list_argument_errors(world: None) -> None:
    """mirrors distributed_test.py test_scatter_object_list (the error part) and torch 2.15's
    source-side check of ``scatter_object_input_list``."""
    with pytest.raises(ValueError, match="^source rank must provide non-None "
                                         "scatter_object_input_list"):
        dist.scatter_object_list([None], None, src=0)
    for bad in ([], (None,)):
        with pytest.raises(ValueError, match="Expected argument scatter_object_output_list to "
                                             "be a list of size at least 1."):
            dist.scatter_object_list(bad, ["a"], src=0)  # type: ignore[arg-type]
    out: list[object] = [None]
    dist.scatter_object_list(out, [_Box(7)])
    assert out == [_Box(7)]


@needs_mpi
def test_object_collectives_pickling_errors(world: None) -> None:
    """mirrors distributed_test.py _test_gather_object (a local class cannot be gathered:
    ``AttributeError`` before Python 3.14, ``pickle.PicklingError`` after)."""
    class Local:
        pass

    with pytest.raises((AttributeError, pickle.PickleError)):
        dist.all_gather_object([None], Local())
    out: list[object] = [None]
    dist.all_gather_object(out, [1, 2, True, "string", [4, 5, "nested"]])   # still usable
    assert out == [[1, 2, True, "string", [4, 5, "nested"]]]


_RANKS = r'''
import datetime, os, pickle, sys, time, traceback, warnings
import accelrt.distributed as dist
from accelrt.distributed import _collectives
_collectives.MONITORED_RELEASE_GRACE = 0.5   # rank 1's wait past its timeout (default 5 s)

dist.init_process_group("gloo", timeout=20)
r, n = dist.get_rank(), dist.get_world_size()
TD = datetime.timedelta
from rank_cases import Cases, raises
case = Cases(r, after=dist.barrier)


class Box:
    def __init__(self, x):
        self.x = x
    def __eq__(self, other):
        return isinstance(other, Box) and self.x == other.x

@case
def subpg_object_collectives():     # test_c10d_object_collectives.py test_subpg_*
    base = r - r % 2
    ranks = [base, base + 1]
    pg = dist.new_group(ranks, use_local_synchronization=True)
    out = [None]
    dist.scatter_object_list(out, ranks if r == base else None, src=base, group=pg)
    assert out == [r], out
    out = [None] * 2
    dist.all_gather_object(out, r, group=pg)
    assert out == ranks, out
    out = [None] * 2 if r == base else None
    dist.gather_object(r, out, dst=base, group=pg)
    assert out == (ranks if r == base else None), out
    out = [r if r == base else None]
    dist.broadcast_object_list(out, src=base, group=pg)
    assert out == [base], out
    # the same through group ranks (group_src / group_dst)
    out = [None]
    dist.scatter_object_list(out, ["a", "b"] if r % 2 else None, group_src=1, group=pg)
    assert out == [["a", "b"][r % 2]], out
    out = [None] * 2 if r % 2 else None
    dist.gather_object(Box(r), out, group_dst=1, group=pg)
    assert out == ([Box(base), Box(base + 1)] if r % 2 else None), out
    out = [r]
    dist.broadcast_object_list(out, group_src=1, group=pg)
    assert out == [base + 1], out
    # the default root (global rank 0) is outside the group [2, 3]: torch's words
    if r >= 2:
        raises(ValueError, "^Global rank 0 is not part of group",
               lambda: dist.gather_object(r, [None] * 2 if r == 2 else None, group=pg))
        raises(ValueError, "^Global rank 0 is not part of group",
               lambda: dist.broadcast_object_list([None], group=pg))
    # point-to-point through a group rank
    if r % 2 == 0:
        dist.send_object_list([{"from": r}, "x"], group_dst=1, group=pg)
    else:
        got = [None, None]
        assert dist.recv_object_list(got, group_src=0, group=pg) == base
        assert got == [{"from": base}, "x"], got
    dist.destroy_process_group(pg)

@case
def object_collectives_default_pg():   # TestObjectCollectives test_* on the default group
    out = [None] * n
    dist.all_gather_object(object_list=out, obj=r)
    assert out == list(range(n)), out
    out = [None] * n if r == 0 else None
    dist.gather_object(obj=r, object_gather_list=out)
    assert out == (list(range(n)) if r == 0 else None), out
    lst = [99 if r == 0 else None] * n
    dist.broadcast_object_list(object_list=lst)
    assert lst[0] == 99 and (r == 0 or lst == [99] * n), lst
    out = [None]
    dist.scatter_object_list(scatter_object_output_list=out,
                             scatter_object_input_list=list(range(n)) if r == 0 else None)
    assert out == [r], out

@case
def broadcast_source_keeps_its_objects():   # _test_broadcast_object_list (source side)
    mine = Box(5)
    lst = [mine] if r == 0 else [None]
    dist.broadcast_object_list(lst, src=0)
    assert lst[0] == Box(5) and (lst[0] is mine) == (r == 0), (r, lst)
    # weights_only: the receivers refuse the class; the source keeps its object
    lst = [mine] if r == 0 else [None]
    if r == 0:
        dist.broadcast_object_list(lst, src=0, weights_only=True)
        assert lst[0] is mine
    else:
        raises(pickle.UnpicklingError, "Weights only load failed",
               lambda: dist.broadcast_object_list(lst, src=0, weights_only=True))
    out = [None] * n
    dist.all_gather_object(out, {"a": r, "t": (1, 2.5)}, weights_only=True)
    assert out == [{"a": k, "t": (1, 2.5)} for k in range(n)], out

@case
def gather_object_longer_list_and_checks():  # _test_gather_object; _validate_output_list_for_rank
    out = [None] * (n + 2) if r == 0 else None
    dist.gather_object(r, out, dst=0)
    assert out == (list(range(n)) + [None, None] if r == 0 else None), out
    if r == 0:
        raises(ValueError, "^Argument ``gather_list`` must be specified on destination rank",
               lambda: dist.gather_object(r, [], dst=0))
    if r != 0:   # a list on another rank: torch's ValueError, before any collective
        raises(ValueError, "^Argument ``gather_list`` must NOT be specified on non-destination",
               lambda: dist.gather_object(r, [None] * n, dst=0))
    raises(ValueError, "^Can't specify both group_rank and global_rank",
           lambda: dist.gather_object(r, None, dst=0, group_dst=0))
    raises(ValueError, "^Can't specify both group_rank and global_rank",
           lambda: dist.broadcast_object_list([1], src=0, group_src=0))
    out = [None] * (n + 1)
    dist.all_gather_object(out, r)
    assert out == list(range(n)) + [None], out

@case
def scatter_object_list_checks():   # test_scatter_object_list
    objs = [{"key1": 3, "key2": 4, "key3": {"nested": True}}, Box(10), "foo",
            [1, 2, True, "string", [4, 5, "nested"]]]
    sl = objs[:n] if r == 0 else [None] * n   # a list on the other ranks is ignored
    out = [None]
    dist.scatter_object_list(out, sl, src=0)
    assert out == [objs[r]], out
    raises(ValueError, "^Expected argument scatter_object_output_list to be a list of size at "
           "least 1.", lambda: dist.scatter_object_list([], sl, src=0))
    if r == 0:
        raises(ValueError, "^source rank must provide non-None scatter_object_input_list",
               lambda: dist.scatter_object_list([None], None, src=0))

@case
def send_recv_object_list_checks():   # torch 2.15's send/recv_object_list argument checks
    if r == 0:
        raises(ValueError, "^Invalid destination rank: destination rank should not be the same",
               lambda: dist.send_object_list([1], dst=0))
        raises(ValueError, "^Can't specify both group_rank and global_rank",
               lambda: dist.send_object_list([1], dst=1, group_dst=1))
        raises(ValueError, "^Must specify global_rank or group_rank",
               lambda: dist.send_object_list([1]))
        dist.send_object_list([{"x": 1}, "y"], dst=1)
        dist.send_object_list([7], dst=1, use_batch=True)
    elif r == 1:
        raises(ValueError, "^Invalid source rank: source rank should not be the same",
               lambda: dist.recv_object_list([None], src=1))
        got = [None, None]
        assert dist.recv_object_list(got, src=0) == 0 and got == [{"x": 1}, "y"], got
        got = [None]
        assert dist.recv_object_list(got, src=0, use_batch=True) == 0 and got == [7], got

@case
def object_collectives_off_the_group():   # a non-member warns and returns (torch 2.15)
    g = dist.new_group([0, 1])
    if r >= 2:
        calls = {"all_gather_object": lambda: dist.all_gather_object([None], 1, group=g),
                 "gather_object": lambda: dist.gather_object(1, None, dst=0, group=g),
                 "broadcast_object_list": lambda: dist.broadcast_object_list([None], src=0,
                                                                             group=g),
                 "scatter_object_list": lambda: dist.scatter_object_list([None], None, src=0,
                                                                         group=g)}
        for name, call in calls.items():
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                assert call() is None
            assert [str(x.message) for x in w] == [
                f"Running {name} on global rank {r} which does not belong to the given "
                "group."], (name, [str(x.message) for x in w])
    dist.destroy_process_group(g)

@case
def monitored_barrier_subgroup():   # test_monitored_barrier_gloo_subgroup (timeout 0.1 s)
    sub = dist.new_group(ranks=[0, 1])
    if r == 0:
        raises(RuntimeError, r"^\[Rank 0\]: Rank 1 failed to pass monitoredBarrier in 100 ms",
               lambda: dist.monitored_barrier(sub, 0.1))
    elif r >= 2:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            dist.monitored_barrier(sub, 0.1)
        assert "does not belong to the given group" in str(w[0].message)
    dist.destroy_process_group(sub)

@case
def monitored_barrier_wait_all_ranks():   # test_monitored_barrier_wait_all_ranks
    if r == 0:
        ranks = ", ".join(str(k) for k in range(1, n))
        raises(RuntimeError, rf"^\[Rank 0\]: Ranks {ranks} failed to pass monitoredBarrier",
               lambda: dist.monitored_barrier(timeout=TD(seconds=0.1), wait_all_ranks=True))

@case
def monitored_barrier_failure_order():   # test_monitored_barrier_failure_order
    if r == 0:   # ranks 2 and 3 stay away: the first in order is named
        raises(RuntimeError, r"^\[Rank 0\]: Rank 2 failed to pass monitoredBarrier",
               lambda: dist.monitored_barrier(timeout=TD(seconds=0.3)))
    elif r == 1:
        raises(RuntimeError, "^Rank 1 successfully reached monitoredBarrier, but received errors "
               "while waiting for send/recv from rank 0",
               lambda: dist.monitored_barrier(timeout=TD(seconds=0.3)))

@case
def monitored_barrier_after_failures():   # the group stays usable (test_monitored_barrier_gloo)
    dist.monitored_barrier(timeout=TD(seconds=10))
    dist.monitored_barrier(timeout=TD(seconds=10), wait_all_ranks=True)

case.done()
dist.destroy_process_group()
'''


def test_object_collectives_and_monitored_barrier_over_four_ranks(tmp_path: Path) -> None:
    """mirrors test_c10d_object_collectives.py TestObjectCollectives (test_all_gather_object,
    test_gather_object, test_broadcast_object_list, test_scatter_object_list,
    test_subpg_scatter_object, test_subpg_all_gather_object, test_subpg_gather_object,
    test_subpg_broadcast_object) and distributed_test.py _test_broadcast_object_list,
    _test_gather_object, test_scatter_object_list, test_monitored_barrier_gloo_subgroup,
    test_monitored_barrier_wait_all_ranks, test_monitored_barrier_failure_order and
    test_monitored_barrier_gloo (the group usable after a failure)."""
    from test_distributed import MPIEXEC, _check_cases, launch
    if not HAVE_MPI or MPIEXEC is None:
        pytest.skip("needs mpi4py and mpiexec (pip install 'accelrt[mpi]')")
    from rank_cases import write_script
    script = write_script(tmp_path, _RANKS)
    rc, out, _ = launch(4, str(script), timeout=90)
    assert _check_cases(4, out, rc) == 11, out[-3000:]
