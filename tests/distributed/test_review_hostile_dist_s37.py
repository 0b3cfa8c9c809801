"""Findings of the session-37 hostile-input sweep of ``accelrt.distributed`` (coalescing
manager, point-to-point batches, object collectives, uneven and all-to-all collectives,
group creation). Each test failed before its fix; torch 2.15.0's behaviour was observed on
the same inputs (its CPU build, gloo, one and two processes).

* ``all_to_all_single`` took float split sizes and truncated them: ``[1.5, 0.5]`` summed to
  the input's rows, so it passed the checks, and moved ``[1, 0]`` rows (on two ranks the
  output kept a stale element, silently, and the peer timed out). torch refuses any split
  size that is no int with a ``TypeError`` ("incompatible function arguments").
* ``all_gather_object`` checked its list (too short, None, a generator) before the collective
  and ``gather_object`` its destination's list (too short) too: the rank with the bad list
  raised and went on, so its *next* object collective met the others' current one (they got
  its data, and the job stopped at the timeout later). torch runs the collective and fails
  on the assignment after it, so every rank stays in step; accelrt now does the same, with
  its own clear words.
* Inside ``_coalescing_manager`` a call's op and arrays were only looked at when the block
  ended: a later call's bad op was dropped (the first call's op is the one used) and a bad
  array raised at the block's end; torch checks both at the call.
* ``new_subgroups(group_size=np.int64(2))`` was refused with "The arg 'group_size' (2) must
  be positive" (and a float or a str with the same words); torch takes numpy ints and
  raises ``TypeError`` for a float or a str.
* ``split_group`` named a float rank "not a rank of the parent group" (``ValueError``);
  torch raises ``TypeError``.
* A ``P2POp`` of a destroyed group was made (torch: ``ValueError`` "... is not registered"),
  and ``batch_isend_irecv`` of one made before the group's destruction raised the error of
  an engine it tried to start ("the 'mpi' engine needs ranks started by an MPI launcher")
  instead of saying the group was destroyed, as ``isend`` does.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import accelrt as acc
import accelrt.distributed as dist

HAVE_MPI = importlib.util.find_spec("mpi4py") is not None
needs_mpi = pytest.mark.skipif(not HAVE_MPI, reason="mpi4py is not installed")


def _gen(values: list[int]) -> object:
    return (v for v in values)


@needs_mpi
@pytest.mark.parametrize("splits", [[2.0], [np.float64(2.0)], ["2"], 2, {2}],
                         ids=["float", "np-float", "str", "int", "set"])
def test_all_to_all_single_refuses_split_sizes_that_are_no_ints(one_rank_world: None,
                                                               splits: object) -> None:
    out, x = acc.zeros((2,), device="cpu"), acc.full((2,), 3.0, device="cpu")
    with pytest.raises(TypeError, match="output_split_sizes must be a sequence of ints"):
        dist.all_to_all_single(out, x, splits, [2])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="input_split_sizes must be a sequence of ints"):
        dist.all_to_all_single(out, x, [2], splits)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="sequence of ints"):
        dist.all_to_all_single(out, x, _gen([2]), [2])  # type: ignore[arg-type]
    assert out.tolist() == [0.0, 0.0]
    # what torch takes: numpy ints, an array of them, a tuple, an empty list (equal splits)
    for good in ([np.int64(2)], np.array([2]), (2,), []):
        dist.all_to_all_single(out, x, good, good)
        assert out.tolist() == [3.0, 3.0]
        out.fill_(0)


@needs_mpi
def test_coalescing_manager_checks_each_call_at_the_call(one_rank_world: None) -> None:
    a, b = acc.full((2,), 2.0, device="cpu"), acc.full((2,), 3.0, device="cpu")
    reached = []
    with pytest.raises(TypeError, match="op must be a ReduceOp, got 'bogus'"):
        with dist._coalescing_manager():
            dist.all_reduce(a)
            dist.all_reduce(b, op="bogus")  # type: ignore[arg-type]
            reached.append(1)
    with pytest.raises(TypeError, match="all_reduce: expected an accelrt.Array or "
                       "numpy.ndarray, got str"):
        with dist._coalescing_manager():
            dist.all_reduce(a)
            dist.all_reduce("nope")  # type: ignore[arg-type]
            reached.append(2)
    with pytest.raises(TypeError, match="all_gather_into_tensor: expected an accelrt.Array "
                       "or numpy.ndarray, got list"):
        with dist._coalescing_manager():
            dist.all_gather_into_tensor([0.0], a)  # type: ignore[arg-type]
            reached.append(3)
    with pytest.raises(TypeError, match="reduce_scatter_tensor: expected an accelrt.Array "
                       "or numpy.ndarray, got NoneType"):
        with dist._coalescing_manager():
            dist.reduce_scatter_tensor(a, None)  # type: ignore[arg-type]
            reached.append(4)
    with pytest.raises(TypeError, match="op must be a ReduceOp"):
        with dist._coalescing_manager():
            dist.reduce_scatter_tensor(a, b, op=1)  # type: ignore[arg-type]
            reached.append(5)
    assert reached == []
    with dist._coalescing_manager(async_ops=True) as cm:   # the group is left usable
        dist.all_reduce(a, op=dist._make_nccl_premul_sum(2.0))
        dist.all_reduce(b)
    cm.wait()
    assert a.tolist() == [4.0, 4.0] and b.tolist() == [6.0, 6.0]


@needs_mpi
def test_new_subgroups_group_size_types_as_torch(one_rank_world: None) -> None:
    cur, groups = dist.new_subgroups(np.int64(1))  # type: ignore[arg-type]
    assert dist.get_process_group_ranks(cur) == [0] and len(groups) == 1
    for bad in (1.0, "1", np.float64(1.0), True):
        with pytest.raises(TypeError, match="group_size must be an int"):
            dist.new_subgroups(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"The arg 'group_size' \(0\) must be positive"):
        dist.new_subgroups(np.int64(0))  # type: ignore[arg-type]


@needs_mpi
def test_split_group_refuses_a_rank_that_is_no_int_with_a_type_error(
        one_rank_world: None) -> None:
    for bad in (0.0, "0", None, True):
        with pytest.raises(TypeError, match="split_ranks must hold int ranks"):
            dist.split_group(split_ranks=[[bad]])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="not a rank of the parent group"):
        dist.split_group(split_ranks=[[1]])
    assert dist.get_process_group_ranks(dist.split_group(split_ranks=[[np.int64(0)]])) == [0]


@needs_mpi
def test_point_to_point_batches_of_a_destroyed_group(one_rank_world: None) -> None:
    sg = dist.new_group([0])
    a = acc.ones((2,), device="cpu")
    made = dist.P2POp(dist.isend, a, 0, group=sg)
    dist.destroy_process_group(sg)
    # torch 2.15: a P2POp of a destroyed group is its ValueError "... is not registered"
    with pytest.raises(ValueError, match="is not registered, please create group"):
        dist.P2POp(dist.isend, a, 0, group=sg)
    # one made before: the batch says the group was destroyed (it said "the 'mpi' engine
    # needs ranks started by an MPI launcher", from the engine the check started)
    with pytest.raises(dist.DistError, match="process group '[^']+' was destroyed; create "
                       "a new one"):
        dist.batch_isend_irecv([made])
    b = acc.zeros((2,), device="cpu")
    works = dist.batch_isend_irecv([dist.P2POp(dist.isend, a, 0), dist.P2POp(dist.irecv, b, 0)])
    assert all(w.wait() for w in works) and b.tolist() == [1.0, 1.0]


_IN_STEP = r'''
import accelrt.distributed as dist
from rank_cases import Cases, raises

dist.init_process_group("gloo", timeout=8)
r, n = dist.get_rank(), dist.get_world_size()
case = Cases(r, after=dist.barrier)




def then_in_step(tag):
    out = [None] * n
    dist.all_gather_object(out, (tag, r))
    assert out == [(tag, k) for k in range(n)], out


@case
def all_gather_object_short_list_on_one_rank():
    out = [None] * n if r == 0 else [None] * (n - 1)
    if r == 1:
        raises(ValueError, "object_list must have 2 slots", lambda: dist.all_gather_object(out, r))
        assert out == [None]
    else:
        dist.all_gather_object(out, r)
        assert out == [0, 1], out
    then_in_step("short")


@case
def all_gather_object_none_or_generator_on_one_rank():
    for bad in (None, (x for x in [None, None])):
        if r == 1:
            raises(TypeError, "object_list must be a list", lambda: dist.all_gather_object(bad, r))
        else:
            out = [None] * n
            dist.all_gather_object(out, r)
            assert out == [0, 1], out
        then_in_step(repr(type(bad)))


@case
def gather_object_short_list_on_the_destination():
    out = [None] * (n - 1) if r == 0 else None
    if r == 0:
        raises(ValueError, "object_gather_list must have 2 slots",
               lambda: dist.gather_object(r, out, dst=0))
        assert out == [None]
    else:
        dist.gather_object(r, out, dst=0)
    then_in_step("gather")


case.done()
dist.destroy_process_group()
'''


@needs_mpi
def test_object_collectives_keep_a_rank_with_a_bad_list_in_step(tmp_path: Path) -> None:
    from test_distributed import MPIEXEC, _check_cases, launch
    if MPIEXEC is None:
        pytest.skip("needs mpiexec (pip install 'accelrt[mpi]')")
    from rank_cases import write_script
    script = write_script(tmp_path, _IN_STEP)
    rc, out, _ = launch(2, str(script), timeout=60)
    assert _check_cases(2, out, rc) == 3, out[-3000:]
