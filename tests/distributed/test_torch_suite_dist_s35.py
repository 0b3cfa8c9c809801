"""PyTorch's own c10d tests that run on CPU with gloo (``test/distributed/test_c10d_common.py``
and ``test/distributed/test_c10d_gloo.py``), re-checked against ``accelrt.distributed``.

Each test names the PyTorch test it mirrors. The behaviour expected is torch 2.15.0's, observed
with its CPU build (gloo; one process with a ``HashStore``, or two through ``env://``) on the
same inputs and written here as literals (no torch in the test environment). The multi-rank
checks run in one ``mpiexec`` launch each (a rank script written to a temporary file, one
``OK``/``FAIL`` line per case and rank), under a hard timeout.

Fixed here (each test below failed before): ``reduce_scatter`` with blocks of different sizes
per rank (gloo takes them; accelrt refused them); ``ReduceOp.PREMUL_SUM(factor)``, a premul
op that is an instance of ``ReduceOp`` and compares equal to its copies; a backend string
naming one device type twice (torch: ``ValueError``; the last one won); the dtype error's
torch words ("Invalid usage of tensors with different dtypes") in torch's order; gloo's words
for a root outside the world ("invalid root rank") and for list arguments of the wrong length
or missing on the root; ``all_gather_coalesced`` with an output list that is not a list of
lists (torch: ``TypeError``); ``NON_GROUP_MEMBER``'s rank queries (torch answers for the last
group ``new_group`` made without the rank); ``new_group(use_local_synchronization=True)``
called by the members only (it waited for the other ranks).
"""

from __future__ import annotations

import copy
import importlib.util
import pickle
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import accelrt as acc
import accelrt.distributed as dist
from accelrt.distributed._engine import parse_backend

ROOT = Path(__file__).resolve().parents[2]
HAVE_MPI = importlib.util.find_spec("mpi4py") is not None
needs_mpi = pytest.mark.skipif(not HAVE_MPI, reason="mpi4py is not installed")
R = dist.ReduceOp
PLAIN_OPS = [R.SUM, R.AVG, R.PRODUCT, R.MIN, R.MAX, R.BAND, R.BOR, R.BXOR]


# ---------------------------------------------------------------------------- ReduceOp
@pytest.mark.parametrize("op", PLAIN_OPS, ids=lambda o: o.name)
def test_reduce_ops_copy_pickle_and_compare(op: dist.ReduceOp) -> None:
    """mirrors test_c10d_common.py ReduceOpTest test_reduceop_copyable, test_reduceop_pickle
    and test_reduceop_equal (plain ops)."""
    assert isinstance(op, R)
    assert copy.copy(op) == op and copy.deepcopy(op) == op
    assert R(op) == op and copy.deepcopy(R(op)) == op
    assert pickle.loads(pickle.dumps(op)) == op
    assert op != "abc" and None not in (op, R(op)) and "abc" not in (op, R(op))


@pytest.mark.parametrize("make", ["_make_nccl_premul_sum", "PREMUL_SUM"])
@pytest.mark.parametrize("scale", [2.0, "array"])
def test_premul_sum_is_a_reduce_op(make: str, scale: object) -> None:
    """mirrors test_c10d_common.py ReduceOpTest test_op_isinstance_of_reduceop,
    test_reduceop_copyable and test_reduceop_pickle (premul sums): torch 2.15's
    ``_make_nccl_premul_sum(s)`` and ``ReduceOp.PREMUL_SUM(s)`` are ``ReduceOp`` instances
    that compare equal to their copies (torch compares the kind of op, not the factor)."""
    factor = acc.full((1,), 1.0, device="cpu") if scale == "array" else scale
    op = (dist._make_nccl_premul_sum(factor) if make == "_make_nccl_premul_sum"
          else R.PREMUL_SUM(factor))
    assert isinstance(op, R)
    assert op.factor == (1.0 if scale == "array" else 2.0)
    assert copy.copy(op) == op and copy.deepcopy(op) == op
    assert pickle.loads(pickle.dumps(op)) == op
    # torch: equal to any premul sum and to PREMUL_SUM itself, not to another op; one hash
    assert op == dist._make_nccl_premul_sum(3.0) and op == R.PREMUL_SUM and op != R.SUM
    assert hash(op) == hash(pickle.loads(pickle.dumps(op)))


def test_only_premul_sum_takes_a_factor() -> None:
    """mirrors test_c10d_common.py ReduceOpTest test_op_isinstance_of_reduceop: torch 2.15's
    ``ReduceOp.SUM(2.0)`` is a ``RuntimeError``."""
    with pytest.raises(RuntimeError, match="Only PREMUL_SUM supports calling with a factor"):
        R.SUM(2.0)
    with pytest.raises(TypeError, match="factor must be a number"):
        R.PREMUL_SUM("x")


# ---------------------------------------------------------------------------- backends
@pytest.mark.parametrize("spec, words", [
    ("cpu:gloo,cpu:mpi", "Duplicate device type cpu"),
    ("cpu:gloo,cuda:nccl,", "Invalid device:backend pairing"),
    ("cpu:gloo:extra", "Invalid device:backend pairing"),
    ("cpu:gloo,bare", "Invalid device:backend pairing"),
])
def test_backend_string_errors(spec: str, words: str) -> None:
    """mirrors test_c10d_common.py PythonProcessGroupExtensionTest test_backend_config and
    test_parse_backend_string (torch 2.15's BackendConfig refuses a device named twice; the
    last one won here)."""
    with pytest.raises(ValueError, match=re.escape(words)):
        parse_backend(spec)


def test_backend_string_forms() -> None:
    """mirrors test_c10d_common.py PythonProcessGroupExtensionTest test_parse_backend_string
    (the forms accelrt's engines serve)."""
    assert parse_backend("NCCL") == {"cuda": "nccl"}
    assert parse_backend("CPU:GLOO , CUDA:NCCL") == {"cpu": "gloo", "cuda": "nccl"}
    with pytest.raises(ValueError, match="Invalid backend"):
        parse_backend("definitely_not_a_backend")


def test_register_backend_with_one_device_string() -> None:
    """mirrors test_c10d_common.py BackendRegistrationTest
    test_register_backend_with_single_device_string and PythonProcessGroupExtensionTest
    test_is_backend_available / test_backend_class_attr."""
    assert dist.is_backend_available("ucc") == dist.is_ucc_available()
    assert not dist.is_backend_available("s35_dummy")
    dist.Backend.register_backend("s35_dummy", lambda ctx: None,  # type: ignore[arg-type,return-value]
                                  devices="custom_device")
    try:
        assert dist.is_backend_available("s35_dummy")
        assert dist.Backend.S35_DUMMY == "s35_dummy"  # type: ignore[attr-defined]
        assert parse_backend("s35_dummy") == {"custom_device": "s35_dummy"}   # not per letter
    finally:
        dist.Backend._unregister("s35_dummy")  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------- environment
@pytest.mark.parametrize("value, level", [
    ("OFF", "OFF"), ("off", "OFF"), ("oFf", "OFF"), ("INFO", "INFO"), ("info", "INFO"),
    ("INfO", "INFO"), ("DETAIL", "DETAIL"), ("detail", "DETAIL"), ("DeTaIl", "DETAIL")])
def test_debug_level_from_env(monkeypatch: pytest.MonkeyPatch, value: str, level: str) -> None:
    """mirrors test_c10d_common.py CommTest test_debug_level."""
    monkeypatch.delenv("ACCELRT_DISTRIBUTED_DEBUG", raising=False)
    monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", value)
    try:
        dist.set_debug_level_from_env()
        assert dist.get_debug_level() == getattr(dist.DebugLevel, level)
    finally:
        monkeypatch.delenv("TORCH_DISTRIBUTED_DEBUG")
        dist.set_debug_level_from_env()
    assert dist.get_debug_level() == dist.DebugLevel.OFF


@pytest.mark.parametrize("value", ["foo", "0", "1", "-1"])
def test_debug_level_from_env_refuses(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    """mirrors test_c10d_common.py CommTest test_debug_level (invalid values)."""
    monkeypatch.delenv("ACCELRT_DISTRIBUTED_DEBUG", raising=False)
    monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", value)
    with pytest.raises(ValueError, match="The value of TORCH_DISTRIBUTED_DEBUG must"):
        dist.set_debug_level_from_env()
    assert dist.get_debug_level() == dist.DebugLevel.OFF


def test_node_local_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    """mirrors test_c10d_common.py LocalRankTest (testWithoutEnv, testWithoutEnvWithFallback,
    testNodeLocalRankOverridesFallback, testNodeLocalRank)."""
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    with pytest.raises(RuntimeError, match="LOCAL_RANK"):
        dist.get_node_local_rank()
    assert dist.get_node_local_rank(fallback_rank=2) == 2
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert dist.get_node_local_rank(fallback_rank=123) == 3 and dist.get_node_local_rank() == 3


# ---------------------------------------------------------------------------- one rank
def _arrays(kind: str) -> tuple[object, object]:
    """(float32 and float16 arrays of 4 elements) of ``kind``: accelrt Arrays on the cpu
    backend, or numpy arrays (host memory, which the MPI engine takes too)."""
    if kind == "array":
        return acc.ones((4,), dtype="float32"), acc.ones((4,), dtype="float16")
    return np.ones(4, np.float32), np.ones(4, np.float16)


KINDS = pytest.mark.parametrize("kind", ["array", "numpy"])


@pytest.fixture
def world(one_rank_world: None) -> Iterator[None]:
    """A world of one rank (MPI's singleton); skipped without mpi4py."""
    yield


@needs_mpi
@KINDS
def test_dtype_mismatch_words(world: None, kind: str) -> None:
    """mirrors test_c10d_common.py AbstractCommTest _test_tensor_dtype_mismatch (CommTest
    test_tensor_dtype_mismatch of test_c10d_gloo.py): torch's ``ValueError`` "Invalid usage
    of tensors with different dtypes", its dtypes in torch 2.15's order."""
    x, h = _arrays(kind)
    L, Lh = [x], [h]
    calls = [
        (lambda: dist.all_gather(Lh, x), "float16 and  float32"),
        (lambda: dist.all_gather(L, h), "float32 and  float16"),
        (lambda: dist.reduce_scatter(x, Lh), "float32 and  float16"),
        (lambda: dist.reduce_scatter(h, L), "float16 and  float32"),
        (lambda: dist.all_to_all_single(h, x), "float16 and  float32"),
        (lambda: dist.all_to_all(Lh, L), "float16 and  float32"),
        (lambda: dist.all_to_all(L, Lh), "float32 and  float16"),
        (lambda: dist.scatter(x, Lh), "float32 and  float16"),
        (lambda: dist.scatter(h, L), "float16 and  float32"),
        (lambda: dist.gather(h, L), "float16 and  float32"),
        (lambda: dist.gather(x, Lh), "float32 and  float16"),
    ]
    for call, order in calls:
        with pytest.raises(ValueError, match="Invalid usage of tensors with different dtypes"
                           ) as err:
            call()
        assert f"Found {order}" in str(err.value)
    with pytest.warns(FutureWarning), \
            pytest.raises(ValueError, match="tensors with different dtypes"):
        dist.all_reduce_coalesced([x, h])


@needs_mpi
def test_all_gather_coalesced_checks(world: None) -> None:
    """mirrors test_c10d_gloo.py ProcessGroupGlooTest test_allgather_coalesced_checks."""
    x = acc.ones((1,))
    with pytest.warns(FutureWarning):
        with pytest.raises(RuntimeError, match="invalid size of output tensor at index 0"):
            dist.all_gather_coalesced([[acc.zeros(0)]], [x])
        with pytest.raises(RuntimeError, match="output lists should be equal to world size"):
            dist.all_gather_coalesced([[acc.zeros(1)], [acc.zeros(1)]], [x])
        with pytest.raises(TypeError, match="Invalid function argument.*output_tensor_lists"):
            dist.all_gather_coalesced([acc.zeros(0)], [x])   # type: ignore[list-item]
        out = [[acc.zeros(1)]]
        dist.all_gather_coalesced(out, [x])
    assert out[0][0].tolist() == [1.0]


@needs_mpi
def test_invalid_root_rank_of_the_world(world: None) -> None:
    """mirrors test_c10d_gloo.py ProcessGroupGlooTest test_broadcast_checks, test_reduce_checks,
    test_scatter_checks and test_gather_checks (a root outside the world): gloo's
    ``RuntimeError`` "invalid root rank"."""
    x = acc.zeros(1)
    for call in (lambda: dist.broadcast(x, src=-1), lambda: dist.broadcast(x, src=1),
                 lambda: dist.reduce(x, dst=1), lambda: dist.scatter(x, None, src=1),
                 lambda: dist.gather(x, None, dst=-1)):
        with pytest.raises(RuntimeError, match="invalid root rank"):
            call()
    dist.broadcast(x, src=0)   # the group is still usable


@needs_mpi
def test_list_arguments_of_the_wrong_length(world: None) -> None:
    """mirrors test_c10d_gloo.py ProcessGroupGlooTest test_scatter_checks,
    test_gather_checks and test_allgather_checks (list sizes), with torch 2.15's words at
    the ``dist`` level."""
    x = acc.zeros(1)
    with pytest.raises(RuntimeError, match=re.escape(
            "Incorrect input list size 2. Input list size should be 1")):
        dist.scatter(x, [x, x], src=0)
    with pytest.raises(RuntimeError, match=re.escape(
            "Incorrect output list size 2. Output list size should be 1")):
        dist.gather(x, [x, x], dst=0)
    with pytest.raises(ValueError, match="Argument ``scatter_list`` must be specified on "
                       "source rank"):
        dist.scatter(x, None, src=0)
    with pytest.raises(ValueError, match="Argument ``gather_list`` must be specified on "
                       "destination rank"):
        dist.gather(x, None, dst=0)
    with pytest.raises(RuntimeError, match="invalid output tensor list"):
        dist.all_gather([x, x], x)
    with pytest.raises(RuntimeError, match="invalid tensor size"):
        dist.all_gather([acc.zeros(2)], x)
    with pytest.raises(RuntimeError, match="invalid input tensor list size"):
        dist.reduce_scatter(x, [x, x])


@needs_mpi
def test_send_recv_argument_errors(world: None) -> None:
    """mirrors test_c10d_common.py PythonProcessGroupExtensionTest test_send_recv (argument
    errors)."""
    x = acc.zeros((2, 2))
    for call in (lambda: dist.send(x, 0), lambda: dist.send(x, group_dst=0),
                 lambda: dist.send(x, 0, group_dst=0), lambda: dist.send(x),
                 lambda: dist.recv(x, src=0, group_src=0)):
        with pytest.raises(ValueError):
            call()


@needs_mpi
@KINDS
def test_dispatched_collectives_on_one_rank(world: None, kind: str) -> None:
    """mirrors test_c10d_common.py ProcessGroupWithDispatchedCollectivesTests
    (_test_collectives, _test_allreduce_coalesced, _test_all_to_all_single, test_allgather_
    coalesced and test_monitored_barrier of test_c10d_gloo.py) and CommTest test_bool_tensors,
    ProcessGroupGlooTest test_empty_tensors."""
    def full(v: float, shape: tuple[int, ...] = (2, 2), dtype: str = "float32") -> object:
        return (acc.full(shape, v, dtype=dtype) if kind == "array"
                else np.full(shape, v, dtype=dtype))

    t = full(0.0)
    dist.reduce(t, 0)
    dist.broadcast(t, 0)
    dist.all_reduce(t)
    dist.all_gather([full(0.0)], t)
    dist.barrier()
    dist.scatter(t, [full(0.0)])
    dist.gather(t, [full(0.0)])
    dist.reduce_scatter(t, [full(0.0)])
    dist.all_to_all([full(0.0)], [t])
    ones = full(1.0, (10, 10))
    with pytest.warns(FutureWarning):
        dist.all_reduce_coalesced([ones], dist.ReduceOp.SUM)
    assert np.asarray(ones.tolist()).sum() == 100.0
    out = full(0.0)
    dist.all_to_all_single(out, full(1.0))
    assert out.tolist() == [[1.0, 1.0], [1.0, 1.0]]
    if kind == "numpy":   # accelrt arrays are always contiguous
        with pytest.raises(ValueError, match="Tensors must be contiguous"):
            dist.all_to_all_single(out, np.ones((2, 2), np.float32).T)
    b = full(1.0, (4,), "bool")
    dist.broadcast(b, src=0)
    assert b.tolist() == [True] * 4
    e = full(0.0, (0,))
    w = dist.broadcast(e, src=0, async_op=True)
    assert w is not None and w.wait() and w.result()[0].tolist() == []
    dist.monitored_barrier()


@needs_mpi
def test_work_of_a_collective(world: None) -> None:
    """mirrors test_c10d_gloo.py ProcessGroupGlooTest test_send_recv_all_to_all and
    test_barrier_implies_wait (the Work API on one rank)."""
    a = acc.full((3,), 2.0)
    w = dist.all_reduce(a, async_op=True)
    assert w is not None and w.wait() is True and w.is_completed() and w.exception() is None
    assert [r.tolist() for r in w.result()] == [[2.0] * 3]
    with pytest.raises(RuntimeError, match="sourceRank"):
        w.source_rank()
    b = dist.barrier(async_op=True)
    assert b is not None and b.wait() is True and b.result() == []


@needs_mpi
def test_destroyed_world_answers_as_torch() -> None:
    """mirrors the teardown of test_c10d_gloo.py (destroy_process_group, is_initialized)."""
    dist.init_process_group("gloo", timeout=30)
    assert dist.get_backend() == "gloo" and dist.is_initialized()
    dist.destroy_process_group()
    assert not dist.is_initialized()
    with pytest.raises(AssertionError, match="Process group cannot be None"):
        dist.destroy_process_group()
    with pytest.raises(ValueError, match="Default process group has not been initialized"):
        dist.all_reduce(acc.zeros(1))


# ---------------------------------------------------------------------------- real ranks
_RANKS = r'''
import operator, os, sys, traceback, warnings
from functools import reduce as fold
import numpy as np
import accelrt as acc, accelrt.distributed as dist

dist.init_process_group(os.environ.get("S35_BACKEND", "gloo"), timeout=30)
r, n = dist.get_rank(), dist.get_world_size()
R = dist.ReduceOp
from rank_cases import Cases, eq
case = Cases(r)

def reduce_cases():
    # test_c10d_gloo.py's simple_reduce_tests, written anew
    out = [(R.SUM, [r + 1.0], "float32", [n * (n + 1) / 2]),
           (R.PRODUCT, [r + 1.0], "float32", [float(np.prod(np.arange(1, n + 1)))]),
           (R.MIN, [r + 1.0], "float32", [1.0]), (R.MAX, [r + 1.0], "float32", [float(n)]),
           (R.AVG, [r + 1.0], "float32", [(n + 1) / 2])]
    for i in range(4):
        out.append((R.BAND, [r | (1 << i)], "int32", [1 << i]))
    for i in range(1, 5):
        out.append((R.BOR, [fold(operator.or_, [r * i + j for j in range(i)])], "int32",
                    [fold(operator.or_, range(n * i))]))
        out.append((R.BXOR, [fold(operator.xor, [r * i + j for j in range(i)])], "int32",
                    [fold(operator.xor, range(n * i))]))
    return out

if sys.argv[1] == "collectives":
    @case
    def all_reduce_every_op():          # test_allreduce_basics
        for op, v, dt, want in reduce_cases():
            a = acc.asarray(np.array(v, dt))
            dist.all_reduce(a, op=op)
            eq(a, want)

    @case
    def reduce_every_op_and_root():     # test_reduce_basics
        for op, v, dt, want in reduce_cases():
            for root in range(n):
                a = acc.asarray(np.array(v, dt))
                dist.reduce(a, dst=root, op=op)
                if r == root:
                    eq(a, want)

    @case
    def broadcast_scatter_gather_every_root():   # test_broadcast/scatter/gather_basics
        for root in range(n):
            a = acc.full((1,), float(r))
            dist.broadcast(a, src=root)
            eq(a, [float(root)])
            out = acc.full((1,), -1.0)
            ins = [acc.full((1,), float(10 * root + k)) for k in range(n)] if r == root else None
            dist.scatter(out, ins, src=root)
            eq(out, [float(10 * root + r)])
            gl = [acc.full((1,), -1.0) for _ in range(n)] if r == root else None
            dist.gather(acc.full((1,), float(r)), gl, dst=root)
            if r == root:
                assert [g.tolist() for g in gl] == [[float(k)] for k in range(n)]

    @case
    def reduce_scatter_of_blocks_per_rank():   # test_reduce_scatter (variable size per rank)
        ins = [acc.full((k,), float(k + 1)) for k in range(n)]
        out = acc.empty((r,))
        w = dist.reduce_scatter(out, ins, async_op=True)
        w.wait()
        eq(out, [float(n * (r + 1))] * r)
        ins = [acc.full((k + 1,), float(r + k)) for k in range(n)]
        out = acc.empty((r + 1,))
        dist.reduce_scatter(out, ins, op=R.MAX)
        eq(out, [float(n - 1 + r)] * (r + 1))
        try:
            dist.reduce_scatter(acc.empty((r + 2,)), ins)
        except ValueError as e:
            assert "input_list" in str(e), e
        else:
            raise AssertionError("an output of another size than its block was taken")
        out = acc.empty((4,))   # equal blocks: the engine's own reduce-scatter
        dist.reduce_scatter(out, [acc.full((4,), float(k + r)) for k in range(n)])
        eq(out, [float(n * r + n * (n - 1) / 2)] * 4)

    @case
    def reduce_scatter_tensor_and_all_gather_into_tensor():   # test_reduce_scatter_tensor
        out = acc.empty((2,))
        dist.reduce_scatter_tensor(out, acc.asarray(np.arange(2 * n, dtype="float32")))
        eq(out, [float(n * 2 * r), float(n * (2 * r + 1))])
        full = acc.empty((2 * n,))
        dist.all_gather_into_tensor(full, acc.full((2,), float(r)))
        eq(full, [float(k // 2) for k in range(2 * n)])

    @case
    def all_gather_n_inputs():          # test_allgather_basics
        outs = [acc.full((1,), -1.0) for _ in range(n)]
        dist.all_gather(outs, acc.full((1,), float(r)))
        assert [o.tolist() for o in outs] == [[float(k)] for k in range(n)]

    @case
    def coalesced():                    # test_allreduce_coalesced_basics/_async, allgather
        xs = [acc.full((1,), r + 1.0), acc.full((1,), (r + 1.0) ** 2)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            dist.all_reduce_coalesced(xs)
            eq(xs[0], [n * (n + 1) / 2]); eq(xs[1], [n * (n + 1) * (2 * n + 1) / 6])
            ws = [dist.all_reduce_coalesced([acc.full((1,), float(i + r))] * 1, async_op=True)
                  for i in range(2)]
            for w in ws:
                w.wait()
            yy = [[acc.zeros(1), acc.zeros(1)] for _ in range(n)]
            dist.all_gather_coalesced(yy, [acc.full((1,), float(r)), acc.full((1,), r + 5.0)],
                                      async_op=True).wait()
            assert [[a.tolist() for a in l] for l in yy] == \
                [[[float(k)], [k + 5.0]] for k in range(n)]

    @case
    def send_recv_all_to_all():         # test_send_recv_all_to_all
        outs = [acc.full((1,), -1.0) for _ in range(n)]
        sends = [dist.isend(acc.full((1,), float(r)), dst=k) for k in range(n) if k != r]
        recvs = [(k, dist.irecv(outs[k], src=k)) for k in range(n) if k != r]
        for w in sends:
            assert w.wait() and w.is_completed()
        for k, w in recvs:
            assert w.wait() and w.is_completed() and w.source_rank() == k
            eq(outs[k], [float(k)])

    @case
    def barrier_implies_wait():         # test_barrier_implies_wait
        ts = [acc.full((100, 100), float(i)) for i in range(16)]
        for t in ts:
            dist.all_reduce(t, async_op=True)   # the work handles are dropped
        dist.barrier()
        for i, t in enumerate(ts):
            assert float(t.numpy().max()) == float(t.numpy().min()) == i * n

    @case
    def rank_membership():              # test_c10d_common.py _test_rank_membership
        g = dist.new_group(ranks=[1])
        assert dist.get_group_rank(g, 1) == 0 and dist.get_global_rank(g, 0) == 1
        assert dist.get_process_group_ranks(g) == [1]
        for call in (lambda: dist.get_group_rank(g, 0), lambda: dist.get_global_rank(g, 1)):
            try:
                call()
            except ValueError as e:
                assert "not part of group" in str(e), e
            else:
                raise AssertionError("a rank outside the group was translated")

    @case
    def warn_not_in_group():            # test_c10d_common.py _test_warn_not_in_group
        g = dist.new_group([k for k in range(n) if k % 2 == 0])
        x = acc.zeros((2, 2))
        for op, call in (("all_gather", lambda: dist.all_gather([acc.zeros((2, 2))], x, group=g)),
                         ("all_reduce", lambda: dist.all_reduce(x, group=g)),
                         ("barrier", lambda: dist.barrier(group=g)),
                         ("broadcast", lambda: dist.broadcast(x, src=0, group=g))):
            if r % 2 == 0:
                call()
                continue
            with warnings.catch_warnings(record=True) as got:
                warnings.simplefilter("always")
                call()
            assert any(f"{op}" in str(w.message) and "does not belong to" in str(w.message)
                       and w.category is UserWarning for w in got), [str(w.message) for w in got]

    @case
    def sequence_and_objects():         # _test_sequence_num_set_default_pg (all_gather_object)
        objs = [None] * n
        dist.all_gather_object(objs, ("seq", 7))
        assert objs == [("seq", 7)] * n
        bl = [r, "x"] if r == 0 else [None, None]
        dist.broadcast_object_list(bl, src=0)
        assert bl == [0, "x"]
        gl = [None] * n if r == 0 else None
        dist.gather_object(("g", r), gl, dst=0)
        if r == 0:
            assert gl == [("g", k) for k in range(n)]
        sl = [None]
        dist.scatter_object_list(sl, [("s", k) for k in range(n)] if r == 0 else None, src=0)
        assert sl == [("s", r)]

if sys.argv[1] == "local":   # 4 ranks: test_c10d_common.py AbstractLargeCommTest
    @case
    def new_group_local_sync():
        ins = [r, (r + 2) % n]
        out = [k for k in range(n) if k not in ins]
        assert dist.new_group(ranks=out, use_local_synchronization=True) is \
            dist.GroupMember.NON_GROUP_MEMBER
        g = dist.new_group(ranks=ins, use_local_synchronization=True)
        assert isinstance(g, dist.ProcessGroup)
        assert dist.get_group_rank(g, r) == sorted(ins).index(r)
        assert dist.get_process_group_ranks(g) == sorted(ins)

    @case
    def new_group_local_sync_duplicate_groups_and_sanity():
        pg = r // 2
        mine = [2 * pg, 2 * pg + 1]
        for g in [dist.new_group(ranks=mine, use_local_synchronization=True) for _ in range(2)]:
            outs = [acc.full((2,), -1.0) for _ in range(g.size())]
            dist.all_gather(outs, acc.asarray(np.array([pg, r], "float32")), group=g)
            assert [o.tolist() for o in outs] == [[float(pg), float(k)] for k in mine]

    @case
    def new_group_local_sync_called_by_its_members_only():
        if r < 2:   # ranks 2 and 3 make no call (it waited for them)
            g = dist.new_group([0, 1], use_local_synchronization=True)
            a = acc.full((1,), 1.0)
            dist.all_reduce(a, group=g)
            eq(a, [2.0])

    @case
    def new_group_ordered():            # _test_new_group_ordered
        rev = list(range(n - 1, -1, -1))
        g = dist.new_group(ranks=rev, sort_ranks=False)
        assert dist.get_group_rank(g, r) == rev.index(r)
        assert dist.get_process_group_ranks(g) == rev
        outs = [acc.full((1,), -1.0) for _ in range(n)]
        dist.all_gather(outs, acc.full((1,), float(r)), group=g)
        assert [o.tolist() for o in outs] == [[float(k)] for k in rev]

dist.barrier()
case.done()
dist.destroy_process_group()
'''


def _launch(tmp_path: Path, n: int, mode: str, timeout: float = 90) -> str:
    """The rank script under ``mpiexec -n N`` (test_distributed's :func:`launch`); its merged
    output, after checking every rank's cases passed."""
    from test_distributed import MPIEXEC, _check_cases, launch
    if not HAVE_MPI or MPIEXEC is None:
        pytest.skip("needs mpi4py and mpiexec (pip install 'accelrt[mpi]')")
    from rank_cases import write_script
    script = write_script(tmp_path, _RANKS)
    rc, out, _ = launch(n, str(script), mode, timeout=timeout)
    _check_cases(n, out, rc)
    return out


def test_collectives_over_two_ranks(tmp_path: Path) -> None:
    """mirrors test_c10d_gloo.py ProcessGroupGlooTest (test_allreduce_basics,
    test_reduce_basics, test_broadcast_basics, test_scatter_basics, test_gather_basics,
    test_allgather_basics, test_reduce_scatter, test_reduce_scatter_tensor,
    test_allreduce_coalesced_basics, test_allreduce_coalesced_async,
    test_allgather_coalesced_async, test_send_recv_all_to_all, test_barrier_implies_wait) and
    test_c10d_common.py AbstractCommTest (_test_rank_membership, _test_warn_not_in_group,
    _test_sequence_num_set_default_pg's object collective)."""
    out = _launch(tmp_path, 2, "collectives")
    assert out.count("OK ") == 2 * 12


def test_local_synchronization_over_four_ranks(tmp_path: Path) -> None:
    """mirrors test_c10d_gloo.py LargeCommTest (test_new_group_local_sync,
    test_new_group_local_sync_sanity_check, test_new_group_local_sync_duplicate_pg) and
    test_c10d_common.py AbstractLargeCommTest _test_new_group_ordered."""
    out = _launch(tmp_path, 4, "local")
    assert out.count("OK ") == 4 * 4
