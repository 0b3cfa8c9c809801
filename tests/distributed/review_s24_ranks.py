"""Hostile inputs on 2-3 MPI ranks (run by tests/distributed/test_review_dist_s24.py).

Usage: mpiexec -n N python -m accelrt.distributed.run tests/distributed/review_s24_ranks.py

Each rank prints ``OK <case>`` or ``FAIL <case>: <reason>`` per case and ``DONE <rank>
<count>`` at the end. Every case ends with a barrier, so a case that left the ranks out of
step shows up as a failure of the next one (or as the group's timeout ending the job),
never as a hang. Run it with ``ACCELRT_DISTRIBUTED_DEBUG=DETAIL`` for the mismatch cases.
"""

from __future__ import annotations

import datetime
import os
import threading
import traceback
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

import accelrt as acc
import accelrt.distributed as dist

dist.init_process_group("cpu:mpi", timeout=float(os.environ.get("REVIEW_TIMEOUT", "20")))
R, N = dist.get_rank(), dist.get_world_size()
DETAIL = dist.get_debug_level() == dist.DebugLevel.DETAIL
ODD = R == N - 1   # the rank that disagrees
results: list[str] = []


def case(fn: Callable[[], None]) -> None:
    try:
        fn()
        results.append(f"OK {fn.__name__}")
    except Exception:
        lines = traceback.format_exc().strip().splitlines()
        results.append(f"FAIL {fn.__name__}: {' | '.join(lines[-3:])}")
    dist.barrier()


def raises(kind: type[BaseException] | tuple[type[BaseException], ...], text: str,
           fn: Callable[[], Any]) -> BaseException:
    try:
        fn()
    except kind as e:
        assert text in str(e), f"{type(e).__name__}: {e!r} lacks {text!r}"
        return e
    raise AssertionError(f"no {kind} ({text!r})")


def full(n: int, dtype: str = "float32") -> acc.Array:
    return acc.full((n,), float(R + 1), dtype=dtype, device="cpu")


def still_in_step() -> None:
    x = full(2)
    dist.all_reduce(x)
    assert x.tolist() == [N * (N + 1) / 2] * 2, x.tolist()


@case
def mismatches_raise_on_every_rank_in_detail_mode() -> None:
    if not DETAIL:
        return
    # (what the odd rank does differently) -> every rank raises the same DistError
    calls: list[Callable[[], Any]] = [
        lambda: dist.all_reduce(full(2, "float64") if ODD else full(4)),       # dtype
        lambda: dist.all_reduce(full(8) if ODD else full(4)),                  # shape
        lambda: dist.all_reduce(full(4), op=dist.ReduceOp.MAX if ODD else dist.ReduceOp.SUM),
        lambda: dist.broadcast(full(4), src=R),                                # root
        lambda: dist.broadcast(full(4), 0) if ODD else dist.all_reduce(full(4)),  # op
        lambda: dist.reduce_scatter_tensor(acc.empty((2 if ODD else 1,), device="cpu"),
                                           full(N * (2 if ODD else 1))),
        lambda: dist.all_gather([acc.empty((3 if ODD else 4,), device="cpu")
                                 for _ in range(N)], full(3 if ODD else 4)),
    ]
    for call in calls:
        raises(dist.DistError, "collective mismatch", call)
        still_in_step()


@case
def all_to_all_sizes_are_compared_pairwise_in_detail_mode() -> None:
    if not DETAIL:
        return
    # equal splits, but the odd rank sends 2 elements to each peer where they expect 1:
    # MPI failed on some ranks and returned garbage on the odd one
    k = 2 if ODD else 1
    e = raises(dist.DistError, "all_to_all_single sizes disagree", lambda: dist.all_to_all_single(
        acc.empty((N * k,), device="cpu"), full(N * k)))
    assert f"rank {N - 1} sends 2 element(s) to rank 0, which expects 1" in str(e), e
    still_in_step()
    # uneven splits that agree pass; the list form is compared the same way
    splits = [R + 1] * N                      # rank r sends r + 1 elements to everyone
    out = acc.empty((sum(range(1, N + 1)),), device="cpu")
    dist.all_to_all_single(out, full(N * (R + 1)), output_split_sizes=list(range(1, N + 1)),
                           input_split_sizes=splits)
    assert out.tolist() == [float(j + 1) for j in range(N) for _ in range(j + 1)]
    outs = [acc.empty((1,), device="cpu") for _ in range(N)]
    ins = [full(2 if ODD else 1) for _ in range(N)]
    raises(dist.DistError, "all_to_all sizes disagree", lambda: dist.all_to_all(outs, ins))
    still_in_step()


@case
def wrong_types_raise_before_anything_moves() -> None:
    a = full(2)
    for bad in ([1.0, 2.0], None, 3, np.float32(1), (a,)):
        raises(TypeError, "expected an accelrt.Array or numpy.ndarray",
               lambda bad=bad: dist.all_reduce(bad))
        raises(TypeError, "expected an accelrt.Array or numpy.ndarray",
               lambda bad=bad: dist.broadcast(bad, 0))
    raises(ValueError, "contiguous", lambda: dist.all_reduce(np.zeros(6)[::2]))
    for peer in (N, -1, 99):
        raises(ValueError, "is not part of the group", lambda peer=peer: dist.broadcast(a, peer))
        raises(ValueError, "is not part of the group", lambda peer=peer: dist.reduce(a, peer))
        raises(ValueError, "is not part of the group", lambda peer=peer: dist.send(a, peer))
        raises(ValueError, "is not part of the group",
               lambda peer=peer: dist.broadcast_object_list([1], peer))
    raises(TypeError, "src must be an int", lambda: dist.broadcast(a, "0"))
    for g in (5, "WORLD", object(), [0]):
        raises(TypeError, "group must be a ProcessGroup",
               lambda g=g: dist.all_reduce(a, group=g))
    raises(TypeError, "op must be a ReduceOp", lambda: dist.all_reduce(a, op="sum"))
    raises(ValueError, "new_group(): ranks must be distinct", lambda: dist.new_group([0, 0]))
    raises(ValueError, "new_group(): ranks must be distinct", lambda: dist.new_group([0, N]))
    raises(TypeError, "new_group(): ranks must be a list", lambda: dist.new_group("01"))
    raises(TypeError, "each of ranks must be an int", lambda: dist.new_group([0.0, 1.0]))
    still_in_step()


@case
def non_members_and_destroyed_groups() -> None:
    g = dist.new_group([0, 1])
    a = full(2)
    if R == 2:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            assert dist.all_reduce(a, group=g) is None and a.tolist() == [3.0, 3.0]
            assert dist.broadcast_object_list([1], 0, group=g) is None
            assert dist.barrier(group=g) is None
        assert len(seen) == 3 and "does not belong to the given group" in str(seen[0].message)
        assert (dist.get_rank(g), dist.get_world_size(g)) == (-1, -1)
    elif R < 2:
        dist.all_reduce(a, group=g)
        assert a.tolist() == [3.0, 3.0]
        raises(ValueError, "is not part of the group", lambda: dist.broadcast(a, 2, group=g))
    dist.destroy_process_group(g)
    if R < 2:
        raises(dist.DistError, "was destroyed", lambda: dist.all_reduce(a, group=g))
        raises(dist.DistError, "was destroyed", lambda: dist.all_gather_object([0, 0], 1,
                                                                               group=g))
    still_in_step()


@case
def async_work_answers_wait_is_completed_exception() -> None:
    x = full(4)
    w = dist.all_reduce(x, async_op=True)
    assert w is not None and w.wait() and w.is_completed() and w.exception() is None
    assert x.tolist() == [N * (N + 1) / 2] * 4
    y = acc.zeros((2,), device="cpu")
    works = [dist.isend(full(2), (R + 1) % N), dist.irecv(y, (R - 1) % N)]
    assert all(q is not None and q.wait(timeout=datetime.timedelta(seconds=20))
               for q in works)
    assert y.tolist() == [float((R - 1) % N + 1)] * 2
    if R == 0:   # a receive nobody serves: torch's timedelta bound (it raised TypeError)
        z = acc.zeros((2,), device="cpu")
        q = dist.irecv(z, 1, tag=77)
        assert q is not None
        raises(dist.DistTimeoutError, "did not complete within 0.2 s",
               lambda: q.wait(timeout=datetime.timedelta(seconds=0.2)))
        raises(TypeError, "timeout must be a datetime.timedelta", lambda: q.wait(timeout="1"))
        raises(ValueError, "must not be negative", lambda: q.wait(timeout=-1))
        assert not q.is_completed()
    dist.barrier()
    if R == 1:
        dist.send(acc.full((2,), 5.0, device="cpu"), 0, tag=77)
    if R == 0:
        assert q.wait(timeout=20) and z.tolist() == [5.0, 5.0]
    still_in_step()


class _Unpicklable:
    def __reduce__(self) -> Any:
        raise RuntimeError("cannot pickle this on purpose")


@case
def unpicklable_objects_fail_every_rank_instead_of_hanging() -> None:
    # the rank that cannot pickle raises its own error; the ranks that would receive from it
    # raise DistError naming it (they waited for it until the group's timeout before)
    lock = threading.Lock()
    if R == 0:
        raises(TypeError, "cannot pickle", lambda: dist.broadcast_object_list([lock], 0))
    else:
        raises(dist.DistError, "rank 0 could not pickle",
               lambda: dist.broadcast_object_list([None], 0))
    still_in_step()
    out: list[Any] = [None] * N
    if ODD:
        raises(RuntimeError, "on purpose", lambda: dist.all_gather_object(out, _Unpicklable()))
    else:
        raises(dist.DistError, f"rank {N - 1} could not pickle",
               lambda: dist.all_gather_object(out, R))
    still_in_step()
    got: list[Any] = [None] * N
    if R == 0:
        raises(dist.DistError, f"rank {N - 1} could not pickle",
               lambda: dist.gather_object(lock if ODD else R, got, dst=0))
    elif ODD:
        raises(TypeError, "cannot pickle", lambda: dist.gather_object(lock, None, dst=0))
    else:
        dist.gather_object(R, None, dst=0)
    still_in_step()
    mine: list[Any] = [None]
    if R == 0:
        raises(TypeError, "cannot pickle",
               lambda: dist.scatter_object_list(mine, [1] * (N - 1) + [lock], src=0))
    else:
        raises(dist.DistError, "rank 0 could not pickle",
               lambda: dist.scatter_object_list(mine, None, src=0))
    still_in_step()
    if R == 0:
        raises(TypeError, "cannot pickle", lambda: dist.send_object_list([lock], dst=1))
    elif R == 1:
        raises(dist.DistError, "rank 0 could not pickle",
               lambda: dist.recv_object_list([None], src=0))
    still_in_step()
    # the objects still move afterwards
    objs: list[Any] = [{"r": R}] * N
    dist.all_gather_object(objs, {"r": R})
    assert objs == [{"r": r} for r in range(N)]


for fn_result in results:
    print(f"[{R}] {fn_result}", flush=True)
print(f"DONE {R} {len(results)}", flush=True)
dist.destroy_process_group()
