"""PyTorch's ProcessGroupWrapper tests (``test/distributed/test_pg_wrapper.py``, the gloo
half: the checks ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` adds) and the **Example** blocks of torch
2.15's ``torch/distributed/distributed_c10d.py`` docstrings, re-checked against
``accelrt.distributed`` with arrays in place of tensors.

Each check names what it mirrors; the expected behaviour is torch 2.15.0's, observed with its
CPU build (gloo, two ranks through ``torch.multiprocessing.spawn``) on the same inputs, and
the per-rank output each docstring documents. The rank checks run in one ``mpiexec -n 4``
launch (a rank script written to a temporary file, one ``OK``/``FAIL`` line per case and
rank) under a hard timeout; the two-rank examples run on the subgroup of ranks 0 and 1, the
three-rank ones on ranks 0..2.

Fixed here (each failed before): with the debug level at ``DETAIL``, a barrier or an object
collective facing another collective on another rank (``reduce`` on rank 0, ``barrier`` on
rank 1; torch 2.15 raises its mismatch error on both) left the job waiting until the watchdog
aborted it, and so did a mismatch at a group's first collective (the engine started, a
collective itself, before the fingerprints were compared); the mismatch message now also
carries torch's words ("Detected mismatch between collectives on ranks", the
``CollectiveFingerPrint`` with ``SequenceNumber``, ``OpType`` such as ``ALLREDUCE``,
``TensorShape=[20, 10]``, ``TensorDtypes=Float``, ``TensorDeviceTypes=cpu``, and
"Collectives differ in the following aspects").
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from accelrt.distributed import _debug as debug_mod

HAVE_MPI = importlib.util.find_spec("mpi4py") is not None


def test_torch_words_name_both_fingerprints() -> None:
    """mirrors test_pg_wrapper.py _validate_error (the words it looks for, on one rank's
    message): the op type, ``list(tensor.shape)``, the device type, torch's dtype name,
    ``SequenceNumber`` and "Collectives differ in the following"."""
    import numpy as np
    mine = ("all_reduce", 3, "SUM", np.dtype("float32"), (20, 10), ("device", "cpu"))
    other = ("reduce", 3, "SUM", 0, np.dtype("int64"), (20, 2), ("device", "cpu"))
    words = debug_mod._torch_words(0, mine, 1, other)
    assert words.startswith("Detected mismatch between collectives on ranks. Rank 0 is "
                            "running collective: CollectiveFingerPrint(SequenceNumber=3, "
                            "OpType=ALLREDUCE, TensorShape=[20, 10], TensorDtypes=Float, "
                            "TensorDeviceTypes=cpu, ReduceOp=SUM), but Rank 1 is running "
                            "collective: CollectiveFingerPrint(SequenceNumber=3, OpType=REDUCE, "
                            "TensorShape=[20, 2], TensorDtypes=Long"), words
    assert "Collectives differ in the following aspects: Op type: ALLREDUCE vs REDUCE" in words
    assert "Tensor shapes: [20, 10] vs [20, 2]" in words
    barrier = debug_mod._torch_words(1, ("barrier", 2, ("device", None)), 0, mine[:1] + (2,)
                                     + mine[2:])
    assert "CollectiveFingerPrint(SequenceNumber=2, OpType=BARRIER)" in barrier, barrier
    # a coalesced collective's fingerprint holds a tuple of shapes
    coalesced = ("all_gather_coalesced", 4, np.dtype("float64"), ((2, 2), (1,)),
                 ("device", "cpu"))
    words = debug_mod._torch_words(0, coalesced, 1, coalesced[:3] + (((2, 2), (3,)),)
                                   + coalesced[4:])
    assert "OpType=ALLGATHER_COALESCED, TensorShape=[[2, 2], [1]], TensorDtypes=Double" in words
    assert "Tensor shapes: [[2, 2], [1]] vs [[2, 2], [3]]" in words, words


_RANKS = r'''
import datetime, os, sys, traceback, warnings
import numpy as np
import accelrt as acc, accelrt.distributed as dist

dist.init_process_group("gloo", timeout=30)
r, n = dist.get_rank(), dist.get_world_size()
R = dist.ReduceOp
# TORCH_DISTRIBUTED_DEBUG=DETAIL (torch's variable) is read by init_process_group
ENV_LEVEL = dist.get_debug_level()
dist.set_debug_level(dist.DebugLevel.OFF)
PAIR = dist.new_group([0, 1])        # the docstrings' "2 ranks"
TRIO = dist.new_group([0, 1, 2])     # the object examples' "world_size of 3"

from rank_cases import Cases
case = Cases(r, after=dist.barrier)

def arr(values, dtype="int64"):
    return acc.asarray(np.array(values, dtype=dtype))

def eq(a, values):
    got = a.numpy() if hasattr(a, "numpy") else np.asarray(a)
    want = np.asarray(values)
    assert got.shape == want.shape and np.array_equal(got, want), (got, want)


@case
def env_level_is_detail():
    assert ENV_LEVEL is dist.DebugLevel.DETAIL, ENV_LEVEL

# ---------------------------------------------------------------- distributed_c10d examples
@case
def example_all_reduce():
    if r < 2:
        t = arr(np.arange(2) + 1 + 2 * r)
        dist.all_reduce(t, op=R.SUM, group=PAIR)
        eq(t, [4, 6])
        c = arr(np.array([1 + 1j, 2 + 2j]) + 2 * r * (1 + 1j), "complex64")
        dist.all_reduce(c, op=R.SUM, group=PAIR)
        eq(c, np.array([4 + 4j, 6 + 6j], "complex64"))

@case
def example_all_gather():
    if r < 2:
        out = [acc.zeros((2,), dtype="int64") for _ in range(2)]
        dist.all_gather(out, arr(np.arange(2) + 1 + 2 * r), group=PAIR)
        eq(out[0], [1, 2]); eq(out[1], [3, 4])
        cout = [acc.zeros((2,), dtype="complex64") for _ in range(2)]
        dist.all_gather(cout, arr(np.array([1 + 1j, 2 + 2j]) + 2 * r * (1 + 1j), "complex64"),
                        group=PAIR)
        eq(cout[0], np.array([1 + 1j, 2 + 2j], "complex64"))
        eq(cout[1], np.array([3 + 3j, 4 + 4j], "complex64"))

@case
def example_all_gather_single_forms():
    if r < 2:
        t = arr(np.arange(2) + 1 + 2 * r)
        flat = acc.zeros((4,), dtype="int64")
        dist.all_gather_single(flat, t, group=PAIR)
        eq(flat, [1, 2, 3, 4])
        stack = acc.zeros((2, 2), dtype="int64")
        dist.all_gather_into_tensor(stack, t, group=PAIR)
        eq(stack, [[1, 2], [3, 4]])

@case
def example_reduce_scatter_single_forms():
    if r < 2:
        out = acc.zeros((2,), dtype="int64")
        dist.reduce_scatter_single(out, arr(np.arange(4)), group=PAIR)
        eq(out, [[0, 2], [4, 6]][r])
        out = acc.zeros((2,), dtype="int64")
        dist.reduce_scatter_tensor(out, arr(np.arange(4).reshape(2, 2)), group=PAIR)
        eq(out, [[0, 2], [4, 6]][r])

@case
def example_gather():
    if r < 2:
        t = arr(np.ones(2) + r, "float32")
        gl = [acc.zeros((2,)) for _ in range(2)] if r == 0 else None
        dist.gather(t, gl, dst=0, group=PAIR)
        if r == 0:
            eq(gl[0], [1.0, 1.0]); eq(gl[1], [2.0, 2.0])
        else:
            assert gl is None

@case
def example_scatter():
    if r < 2:
        out = acc.zeros((2,))
        sl = [acc.ones((2,)), acc.full((2,), 5.0)] if r == 0 else None
        dist.scatter(out, sl, src=0, group=PAIR)
        eq(out, [[1.0, 1.0], [5.0, 5.0]][r])

@case
def example_batch_isend_irecv():
    if r < 2:
        send = arr(np.arange(2) + 2 * r, "float32")
        recv = acc.zeros((2,), dtype="float32")
        ops = [dist.P2POp(dist.isend, send, (r + 1) % 2, group=PAIR),
               dist.P2POp(dist.irecv, recv, (r - 1 + 2) % 2, group=PAIR)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        eq(recv, [[2.0, 3.0], [0.0, 1.0]][r])

@case
def example_all_to_all_single():
    inp = arr(np.arange(4) + r * 4)
    out = acc.empty((4,), dtype="int64")
    dist.all_to_all_single(out, inp)
    eq(out, [r, r + 4, r + 8, r + 12])
    # the uneven example
    inputs = [[0, 1, 2, 3, 4, 5], list(range(10, 19)), list(range(20, 25)), list(range(30, 37))]
    isplits = [[2, 2, 1, 1], [3, 2, 2, 2], [2, 1, 1, 1], [2, 2, 2, 1]][r]
    osplits = [[2, 3, 2, 2], [2, 2, 1, 2], [1, 2, 1, 2], [1, 2, 1, 1]][r]
    want = [[0, 1, 10, 11, 12, 20, 21, 30, 31], [2, 3, 13, 14, 22, 32, 33],
            [4, 15, 16, 23, 34, 35], [5, 17, 18, 24, 36]][r]
    out = acc.empty((sum(osplits),), dtype="int64")
    dist.all_to_all_single(out, arr(inputs[r]), osplits, isplits)
    eq(out, want)
    # the complex example (its output dtype is complex: the docstring's int64 is a typo)
    c = arr(np.array([1 + 1j, 2 + 2j, 3 + 3j, 4 + 4j]) + 4 * r * (1 + 1j), "complex64")
    cout = acc.empty((4,), dtype="complex64")
    dist.all_to_all_single(cout, c)
    eq(cout, np.array([(r + 1 + 4 * k) * (1 + 1j) for k in range(4)], "complex64"))

@case
def example_all_to_all():
    inp = [arr([4 * r + k]) for k in range(4)]
    out = [acc.empty((1,), dtype="int64") for _ in range(4)]
    dist.all_to_all(out, inp)
    for k in range(4):
        eq(out[k], [r + 4 * k])
    inputs = [[0, 1, 2, 3, 4, 5], list(range(10, 19)), list(range(20, 25)), list(range(30, 37))]
    isplits = [[2, 2, 1, 1], [3, 2, 2, 2], [2, 1, 1, 1], [2, 2, 2, 1]][r]
    osplits = [[2, 3, 2, 2], [2, 2, 1, 2], [1, 2, 1, 2], [1, 2, 1, 1]][r]
    pieces = np.split(np.array(inputs[r]), np.cumsum(isplits)[:-1])
    out = [acc.empty((k,), dtype="int64") for k in osplits]
    dist.all_to_all(out, [arr(p) for p in pieces])
    want = [[[0, 1], [10, 11, 12], [20, 21], [30, 31]], [[2, 3], [13, 14], [22], [32, 33]],
            [[4], [15, 16], [23], [34, 35]], [[5], [17, 18], [24], [36]]][r]
    for o, w in zip(out, want):
        eq(o, w)
    c = [arr([(4 * r + k + 1) * (1 + 1j)], "complex64") for k in range(4)]
    cout = [acc.empty((1,), dtype="complex64") for _ in range(4)]
    dist.all_to_all(cout, c)
    for k in range(4):
        eq(cout[k], np.array([(r + 1 + 4 * k) * (1 + 1j)], "complex64"))

@case
def example_all_gather_coalesced():
    if r < 2:
        ins = [[arr([[1, 1], [1, 1]]), arr([2]), arr([3, 3])],
               [arr([[3, 3], [3, 3]]), arr([5]), arr([1, 1])]][r]
        outs = [[arr([[-1, -1], [-1, -1]]), arr([-1]), arr([-1, -1])] for _ in range(2)]
        with warnings.catch_warnings(record=True) as seen:   # torch 2.15 warns too
            warnings.simplefilter("always")
            dist.all_gather_coalesced(outs, ins, group=PAIR)
        assert any(issubclass(w.category, FutureWarning) for w in seen), seen
        want = [[[[1, 1], [1, 1]], [2], [3, 3]], [[[3, 3], [3, 3]], [5], [1, 1]]]
        for o, w in zip(outs, want):
            for a, b in zip(o, w):
                eq(a, b)

@case
def example_object_collectives():
    objs = ["foo", 12, {1: 2}]
    if r < 3:
        out = [None for _ in objs]
        dist.all_gather_object(out, objs[dist.get_rank()], group=TRIO)
        assert out == objs, out
        got = [None for _ in objs]
        dist.gather_object(objs[r], got if r == 0 else None, dst=0, group=TRIO)
        assert got == (objs if r == 0 else [None] * 3), got
        lst = list(objs) if r == 0 else [None, None, None]
        dist.broadcast_object_list(lst, src=0, group=TRIO, device="cpu")
        assert lst == objs, lst
        one = [None]
        dist.scatter_object_list(one, list(objs) if r == 0 else [None, None, None], src=0,
                                 group=TRIO)
        assert one == [objs[r]], one
    if r < 2:
        if r == 0:
            dist.send_object_list(list(objs), dst=1, group=PAIR, device="cpu")
        else:
            o = [None, None, None]
            dist.recv_object_list(o, src=0, group=PAIR, device="cpu")
            assert o == objs, o

@case
def example_new_subgroups_by_enumeration():
    cur, subs = dist.new_subgroups_by_enumeration(ranks_per_subgroup_list=[[0, 2], [1, 3]])
    t = arr([r])
    dist.all_reduce(t, group=cur)
    eq(t, [[2], [4]][r % 2])
    assert dist.get_global_rank(cur, 1) == [2, 3][r % 2]
    assert dist.get_group_rank(cur, r) == r // 2
    assert dist.get_process_group_ranks(cur) == [[0, 2], [1, 3]][r % 2]
    for s in subs:
        dist.destroy_process_group(s)
    cur, subs = dist.new_subgroups(group_size=2)
    t = arr([r])
    dist.all_reduce(t, group=cur)
    eq(t, [[1], [5]][r // 2])
    for s in subs:
        dist.destroy_process_group(s)

# ------------------------------------------------------------- test_pg_wrapper.py, DETAIL
def mismatch(fn):
    """Run fn (which must disagree across ranks) and return the message of its error."""
    try:
        fn()
    except RuntimeError as e:
        return str(e)
    raise AssertionError("the mismatch was not caught")

def torch_words(err, op_type, shape=None, dtype=None, diff=True):
    # test_pg_wrapper.py _validate_error's checks
    assert "Detected mismatch between collectives on ranks" in err, err
    assert f"OpType={op_type}," in err or f"OpType={op_type})" in err, (op_type, err)
    assert "SequenceNumber" in err, err
    if shape is not None:
        assert str(list(shape)) in err and "TensorDeviceTypes=cpu" in err, err
        assert f"TensorDtypes={dtype}" in err, err
    if diff:
        assert "Collectives differ in the following aspects" in err, err

@case
def detail_op_mismatch():
    # test_collectives_op_mismatch(_debug_mode): a run of good collectives, then rank 0
    # disagrees with the others; every rank raises, naming its own collective
    t = acc.randn((20, 10))
    for _ in range(3):   # leaves a direct-call plan for t, which DETAIL must not take
        dist.all_reduce(t)
    dist.set_debug_level(dist.DebugLevel.DETAIL)
    try:
        works = [dist.all_reduce(t, async_op=True) for _ in range(20)]
        for w in works:
            w.wait()
        err = mismatch(lambda: dist.all_reduce(t) if r == 0 else dist.reduce(t, 0))
        torch_words(err, "ALLREDUCE" if r == 0 else "REDUCE", (20, 10), "Float")
        err = mismatch(lambda: dist.reduce(t, 0) if r == 0 else dist.barrier())
        torch_words(err, "REDUCE" if r == 0 else "BARRIER",
                    (20, 10) if r == 0 else None, "Float")
        err = mismatch(lambda: dist.broadcast(t, 0) if r == 0 else
                       dist.all_gather([acc.zeros((20, 10)) for _ in range(n)], t))
        torch_words(err, "BROADCAST" if r == 0 else "ALLGATHER", (20, 10), "Float")
        # the object collectives are checked too (torch's run on broadcast/allgather)
        err = mismatch(lambda: dist.all_reduce(t) if r == 0 else
                       dist.broadcast_object_list([1], src=0))
        torch_words(err, "ALLREDUCE" if r == 0 else "BROADCAST_OBJECT_LIST")
        # the base forms have torch's OpType names
        out, big = acc.zeros((4,)), acc.ones((4 * n,))
        err = mismatch(lambda: dist.all_gather_into_tensor(big, out) if r == 0 else
                       dist.reduce_scatter_tensor(out, big))
        torch_words(err, "_ALLGATHER_BASE" if r == 0 else "_REDUCE_SCATTER_BASE")
        # after all of them the ranks are in step
        ok = acc.ones((3,))
        dist.all_reduce(ok)
        eq(ok, [float(n)] * 3)
    finally:
        dist.set_debug_level(dist.DebugLevel.OFF)

@case
def detail_shape_mismatch():
    # test_collective_shape_mismatch(_debug_mode): shapes, ranks and dtypes
    dist.set_debug_level(dist.DebugLevel.DETAIL)
    try:
        dist.barrier()
        t = acc.randn((20, 2 if r == 0 else 10))
        torch_words(mismatch(lambda: dist.all_reduce(t)), "ALLREDUCE", t.shape, "Float")
        t = acc.randn((20, 10, 2)) if r == 0 else acc.randn((20, 10))
        torch_words(mismatch(lambda: dist.all_reduce(t)), "ALLREDUCE", t.shape, "Float")
        outs = arr([-1] if r == 0 else [-1, -1])
        ins = [arr([r] if r == 0 else [r, r]) for _ in range(n)]
        err = mismatch(lambda: dist.scatter(outs, ins if r == 0 else None, src=0))
        torch_words(err, "SCATTER", outs.shape, "Long")
        t = acc.ones((4,), dtype="float32" if r == 0 else "int64")
        err = mismatch(lambda: dist.all_reduce(t))
        torch_words(err, "ALLREDUCE", (4,), "Float" if r == 0 else "Long")
        assert "Tensor dtypes: " in err, err
        ok = acc.ones((3,))
        dist.all_reduce(ok)
        eq(ok, [float(n)] * 3)
    finally:
        dist.set_debug_level(dist.DebugLevel.OFF)

@case
def detail_first_collective_of_a_group():
    # a mismatch at a new group's very first collective (its engine not started yet)
    g = dist.new_group()
    dist.set_debug_level(dist.DebugLevel.DETAIL)
    try:
        t = acc.ones((2,))
        err = mismatch(lambda: dist.all_reduce(t, group=g) if r == 0 else dist.barrier(group=g))
        torch_words(err, "ALLREDUCE" if r == 0 else "BARRIER")
        dist.all_reduce(t, group=g)
        eq(t, [float(n)] * 2)
    finally:
        dist.set_debug_level(dist.DebugLevel.OFF)
        dist.destroy_process_group(g)

@case
def detail_reduce_scatter_tensor_coalesced():
    # test_reduce_scatter_tensor_coalesced_debug_mode: matching calls run under DETAIL
    dist.set_debug_level(dist.DebugLevel.DETAIL)
    try:
        for shape in [(2, 2), (3, 3)]:
            out = acc.zeros(shape)
            dist.reduce_scatter_tensor(out, acc.full((shape[0] * n,) + shape[1:], float(r + 1)))
            eq(out, np.full(shape, float(sum(range(1, n + 1))), "float32"))
    finally:
        dist.set_debug_level(dist.DebugLevel.OFF)

dist.barrier()
case.done()
dist.destroy_process_group()
'''

N_CASES = 17


@pytest.mark.skipif(not HAVE_MPI, reason="mpi4py is not installed")
def test_pg_wrapper_and_c10d_examples_over_four_ranks(tmp_path: Path) -> None:
    """mirrors test_pg_wrapper.py ProcessGroupGlooWrapperTest
    test_collectives_op_mismatch_debug_mode, test_collective_shape_mismatch_debug_mode,
    test_reduce_scatter_tensor_coalesced_debug_mode (with ``TORCH_DISTRIBUTED_DEBUG=DETAIL``
    read at init), and the Example blocks of distributed_c10d.py: all_reduce, all_gather,
    all_gather_single / all_gather_into_tensor (both forms), reduce_scatter_single /
    reduce_scatter_tensor (both forms), gather, scatter, batch_isend_irecv, all_to_all_single,
    all_to_all, all_gather_coalesced, all_gather_object, gather_object,
    broadcast_object_list, scatter_object_list, send_object_list / recv_object_list,
    new_subgroups_by_enumeration, new_subgroups."""
    from test_distributed import MPIEXEC, _check_cases, launch
    if MPIEXEC is None:
        pytest.skip("needs mpiexec (pip install 'accelrt[mpi]')")
    from rank_cases import write_script
    script = write_script(tmp_path, _RANKS)
    rc, out, _ = launch(4, str(script), env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}, timeout=90)
    assert _check_cases(4, out, rc) == N_CASES, out[-3000:]



@pytest.mark.skipif(not HAVE_MPI, reason="mpi4py is not installed")
def test_broadcast_from_outside_the_world_is_a_value_error(one_rank_world: None) -> None:
    """mirrors test_c10d_logger.py test_exception_logger (its first part: torch 2.15's
    ``broadcast(t, world_size + 1)`` raises ``ValueError``; the logger is torch's own)."""
    import numpy as np

    import accelrt as acc
    import accelrt.distributed as dist
    t = acc.asarray(np.arange(2))
    with pytest.raises(ValueError, match="invalid root rank"):
        dist.broadcast(t, dist.get_world_size() + 1)
    dist.broadcast(t, 0)   # the group stays usable
    assert t.tolist() == [0, 1]
