"""torch 2.14's group and collective extras over real ranks (run by
tests/distributed/test_dist_extras.py).

Usage: mpiexec -n N python -m accelrt.distributed.run tests/distributed/extras.py MODE

MODE ``cases``: split_group, new_subgroups(group=), set_timeout, the coalesced and single
collectives and the DETAIL fingerprint of a coalesced collective; each rank prints ``OK
<case>`` or ``FAIL <case>: <reason>`` and ``DONE <rank> <count>``. MODE ``gpu_one_rank``: the
NCCL paths on one GPU (``EXTRAS_BACKEND="cuda:nccl,cpu:mpi"``). MODE ``barrier_timeout``:
the last rank never reaches a barrier with a timeout; the others print ``CAUGHT <rank>
<error>`` and re-raise it (the launcher then ends the job).
"""

from __future__ import annotations

import datetime
import os
import sys
import threading
import traceback

import numpy as np

import accelrt as acc
import accelrt.distributed as dist

MODE = sys.argv[1]
from mpi4py import MPI  # noqa: E402

MPI.COMM_WORLD.Barrier()   # start together: init's timeout is short
dist.init_process_group(os.environ.get("EXTRAS_BACKEND", "cpu:mpi"),
                        timeout=float(os.environ.get("EXTRAS_TIMEOUT", "30")))
R, N = dist.get_rank(), dist.get_world_size()

if MODE == "gpu_one_rank":
    # one rank on a GPU with NCCL (EXTRAS_BACKEND="cuda:nccl,cpu:mpi"): the split
    # (ncclCommSplit), barrier(device_ids=) and the coalesced and single collectives on
    # device memory
    g = dist.split_group(split_ranks=[[0]])
    a = acc.full((4,), 2.0, device="cuda")
    dist.all_reduce(a, group=g)
    dist.barrier(device_ids=[0])
    b, c = acc.full((3,), 1.0, device="cuda"), acc.full((2,), 5.0, device="cuda")
    dist.all_reduce_coalesced([b, c])
    out = acc.empty((4,), device="cuda")
    dist.all_gather_single(out, a)
    acc.synchronize("cuda")
    assert a.numpy().tolist() == [2.0] * 4 and out.numpy().tolist() == [2.0] * 4
    assert b.numpy().tolist() == [1.0] * 3 and c.numpy().tolist() == [5.0] * 2
    print("OK gpu_one_rank", flush=True)
    dist.destroy_process_group()
    sys.exit(0)

if MODE == "barrier_timeout":
    dist.all_reduce(acc.full((1,), 1.0, device="cpu"))   # everyone is here
    if R == N - 1:
        threading.Event().wait(60)   # never arrives (the launcher kills it at the abort)
        os._exit(7)
    try:
        dist.barrier(timeout=datetime.timedelta(seconds=0.5))
    except dist.DistTimeoutError as e:
        print(f"CAUGHT {R} {type(e).__name__}: {e}", flush=True)
        try:
            dist.all_reduce(acc.full((1,), 1.0, device="cpu"))
        except dist.DistTimeoutError as kept:
            # (a fresh copy of the kept error each time: it holds no frames of the barrier)
            same = (kept is not e and str(kept) == str(e) and kept.seq == e.seq
                    and kept.__traceback__ is not None)
            print(f"KEPT {R} {same}", flush=True)
        raise
    raise SystemExit(f"rank {R} passed the barrier without rank {N - 1}")

results: list[str] = []


def case(fn):
    try:
        fn()
        results.append(f"OK {fn.__name__}")
    except Exception:
        msg = traceback.format_exc().strip().splitlines()
        results.append(f"FAIL {fn.__name__}: {' | '.join(msg[-4:])}")
    return fn


def eq(got, want):
    assert np.array_equal(np.asarray(got), np.asarray(want)), (np.asarray(got).tolist(), want)


@case
def split_group_orders_by_split_and_leaves_others_out():
    # [[N-1, 0]]: rank N-1 is group rank 0; the middle ranks are in no split
    g = dist.split_group(split_ranks=[[N - 1, 0]])
    if R in (0, N - 1):
        assert isinstance(g, dist.ProcessGroup)
        assert dist.get_process_group_ranks(g) == [N - 1, 0]
        assert g.rank() == (0 if R == N - 1 else 1) and g.size() == 2
        a = acc.full((3,), float(R + 1), device="cpu")
        dist.all_reduce(a, group=g)
        eq(a.numpy(), [float(N + 1)] * 3)
        b = acc.full((2,), float(R), device="cpu")
        dist.broadcast(b, group=g, group_src=0)   # group rank 0: global rank N-1
        eq(b.numpy(), [float(N - 1)] * 2)
    else:
        assert g is dist.GroupMember.NON_GROUP_MEMBER


@case
def split_group_of_a_split_uses_the_parents_ranks():
    parent = dist.split_group(split_ranks=[list(range(N))[::-1]])   # reversed world
    assert isinstance(parent, dist.ProcessGroup) and parent.rank() == N - 1 - R
    # parent ranks [0, 1] are global ranks N-1 and N-2
    sub = dist.split_group(parent, [[0, 1]])
    if R in (N - 1, N - 2):
        assert dist.get_process_group_ranks(sub) == [N - 1, N - 2]
        a = acc.full((2,), float(R), device="cpu")
        dist.all_reduce(a, group=sub, op=dist.ReduceOp.MAX)
        eq(a.numpy(), [float(N - 1)] * 2)
    else:
        assert sub is dist.GroupMember.NON_GROUP_MEMBER


@case
def new_subgroups_of_a_group():
    g = dist.new_group(list(range(N))[::-1] if N % 2 == 0 else list(range(N - 1)))
    if N % 2:   # odd world: new_subgroups(group=g) needs every world rank; those outside raise
        if R == N - 1:
            try:
                dist.new_subgroups(1, group=g)
            except ValueError:
                pass
            else:
                raise AssertionError("a rank outside group= was given a subgroup")
            for _ in range(N - 1):   # the other ranks' new_group calls
                dist.new_group([0])
            return
        cur, groups = dist.new_subgroups(1, group=g)
        assert dist.get_process_group_ranks(cur) == [R] and len(groups) == N - 1
        return
    cur, groups = dist.new_subgroups(2, group=g)
    assert len(groups) == N // 2
    assert R in dist.get_process_group_ranks(cur) and cur.size() == 2


@case
def set_timeout_changes_the_groups_limit():
    dist.set_timeout(datetime.timedelta(seconds=20))
    assert dist.group.WORLD.timeout == 20.0
    dist.barrier(timeout=20)
    dist.set_timeout(30)


@case
def coalesced_and_single_collectives():
    a = acc.full((2,), float(R), device="cpu")
    b = np.full(3, R + 1, dtype="int64")
    c = acc.full((3,), float(R + 1), device="cpu")
    dist.all_reduce_coalesced([a, c])
    s = sum(range(N))
    eq(a.numpy(), [float(s)] * 2)
    eq(c.numpy(), [float(s + N)] * 3)
    w = dist.all_reduce_coalesced([b], op=dist.ReduceOp.MAX, async_op=True)
    w.wait()
    eq(b, [N] * 3)
    ins = [acc.full((1,), float(R), device="cpu"), acc.full((2,), float(10 * R), device="cpu")]
    outs = [[acc.empty((1,), device="cpu"), acc.empty((2,), device="cpu")] for _ in range(N)]
    dist.all_gather_coalesced(outs, ins)
    for k in range(N):
        eq(outs[k][0].numpy(), [float(k)])
        eq(outs[k][1].numpy(), [float(10 * k)] * 2)
    x = acc.full((2,), float(R), device="cpu")
    out = acc.empty((N, 2), device="cpu") if R == 1 else None
    dist.gather_single(x, out, dst=1)
    if R == 1:
        eq(out.numpy(), [[float(k)] * 2 for k in range(N)])
    full = acc.empty((2 * N,), device="cpu")
    dist.all_gather_single(full, x)
    eq(full.numpy(), np.repeat(np.arange(N, dtype="float32"), 2))
    part = acc.empty((2,), device="cpu")
    dist.reduce_scatter_single(part, acc.full((2 * N,), 1.0, device="cpu"))
    eq(part.numpy(), [float(N)] * 2)


@case
def detail_compares_coalesced_collectives():
    dist.set_debug_level(dist.DebugLevel.DETAIL)
    try:
        n = 3 if R == N - 1 else 2   # the last rank's arrays differ
        try:
            dist.all_reduce_coalesced([acc.full((n,), 1.0, device="cpu")])
        except dist.DistError as e:
            assert "collective mismatch" in str(e) and f"rank(s) {N - 1} differ" in str(e), e
        else:
            raise AssertionError("the mismatch was not caught")
    finally:
        dist.set_debug_level(dist.DebugLevel.OFF)
    dist.barrier()


for line in results:
    print(f"[{R}] {line}", flush=True)
print(f"DONE {R} {len(results)}", flush=True)
dist.destroy_process_group()
