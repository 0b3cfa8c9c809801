"""torch 2.14's group and collective extras of accelrt.distributed (issue 23): split_group,
new_subgroups(group=), set_timeout, barrier(timeout=), the coalesced and single collectives,
the debug level and the remaining c10d names. One process (a world of one) here, real ranks
through mpiexec (tests/distributed/extras.py) under a hard timeout."""

from __future__ import annotations

import datetime
import importlib.util
import re

import numpy as np
import pytest

import accelrt as acc
import accelrt.distributed as dist

from test_distributed import MPIEXEC, launch

needs_mpi = [
    pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None,
                       reason="mpi4py is not installed (pip install 'accelrt[mpi]')"),
]


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch):
    if importlib.util.find_spec("mpi4py") is None:
        pytest.skip("mpi4py is not installed (pip install 'accelrt[mpi]')")
    monkeypatch.setenv("ACCELRT_CPU_STREAMS", "sync")
    for var in ("ACCELRT_DISTRIBUTED_DEBUG", "TORCH_DISTRIBUTED_DEBUG"):
        monkeypatch.delenv(var, raising=False)
    dist.init_process_group("cpu:mpi", timeout=30)
    yield dist.group.WORLD
    dist.destroy_process_group()
    dist.set_debug_level_from_env()


def test_the_c10d_names_of_torch_2_14_are_there() -> None:
    for name in ("split_group", "set_timeout", "all_reduce_coalesced", "all_gather_coalesced",
                 "all_gather_single", "reduce_scatter_single", "gather_single",
                 "gather_into_tensor", "DebugLevel", "get_debug_level", "set_debug_level",
                 "set_debug_level_from_env", "default_pg_timeout", "supports_complex",
                 "get_pg_count", "get_backend_config", "is_torchelastic_launched",
                 "is_ucc_available", "is_xccl_available", "GroupName"):
        assert name in dist.__all__ and hasattr(dist, name), name
    assert dist.default_pg_timeout == datetime.timedelta(minutes=10)
    assert [m.name for m in dist.DebugLevel] == ["OFF", "INFO", "DETAIL"]
    assert str(dist.DebugLevel.DETAIL) == "DebugLevel.DETAIL"
    assert dist.supports_complex(dist.ReduceOp.AVG) and not dist.supports_complex(
        dist.ReduceOp.PRODUCT)
    assert not dist.is_ucc_available() and not dist.is_xccl_available()


def test_debug_level_from_set_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib
    gm = importlib.import_module("accelrt.distributed._group")
    for var in ("ACCELRT_DISTRIBUTED_DEBUG", "TORCH_DISTRIBUTED_DEBUG"):
        monkeypatch.delenv(var, raising=False)
    try:
        dist.set_debug_level(dist.DebugLevel.DETAIL)
        assert dist.get_debug_level() is dist.DebugLevel.DETAIL and gm.DETAIL
        gm.read_debug_level()   # what init does: no variable keeps the level set
        assert dist.get_debug_level() is dist.DebugLevel.DETAIL
        monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", "info")   # torch's variable counts
        dist.set_debug_level_from_env()
        assert dist.get_debug_level() is dist.DebugLevel.INFO and not gm.DETAIL
        monkeypatch.setenv("ACCELRT_DISTRIBUTED_DEBUG", "DETAIL")   # accelrt's first
        dist.set_debug_level_from_env()
        assert dist.get_debug_level() is dist.DebugLevel.DETAIL
        monkeypatch.setenv("ACCELRT_DISTRIBUTED_DEBUG", "loud")
        with pytest.raises(ValueError, match=r"^The value of ACCELRT_DISTRIBUTED_DEBUG must be "
                                             r"OFF, INFO, or DETAIL\.$"):
            dist.set_debug_level_from_env()
        with pytest.raises(TypeError, match="takes a DebugLevel"):
            dist.set_debug_level("DETAIL")  # type: ignore[arg-type]
    finally:
        monkeypatch.delenv("ACCELRT_DISTRIBUTED_DEBUG", raising=False)
        monkeypatch.delenv("TORCH_DISTRIBUTED_DEBUG", raising=False)
        dist.set_debug_level_from_env()
    assert dist.get_debug_level() is dist.DebugLevel.OFF


def test_set_timeout_and_barrier_timeout_in_one_rank(world: dist.ProcessGroup) -> None:
    dist.set_timeout(datetime.timedelta(seconds=12))
    assert world.timeout == 12.0
    dist.set_timeout(7)
    assert world.timeout == 7.0
    with pytest.raises(ValueError, match="must be positive"):
        dist.set_timeout(0)
    assert dist.barrier(timeout=datetime.timedelta(seconds=5)) is None
    w = dist.barrier(async_op=True, timeout=5, device_ids=[0])
    assert w is not None and w.is_completed()
    # a value that is not a list is ignored, as torch 2.14.1's (s26: was a TypeError); an
    # empty list is torch 2.15's IndexError (s37), still a TypeError
    with pytest.raises(TypeError, match="list index out of range"):
        dist.barrier(device_ids=[])
    assert dist.barrier(device_ids=0) is None  # type: ignore[arg-type]
    assert dist.get_pg_count() == 1 and dist.get_backend_config() == "cpu:mpi"


def test_split_group_argument_checks(world: dist.ProcessGroup) -> None:
    for ranks, msg in (([], "split_ranks cannot be None or empty"),
                       ([[]], "the split group cannot be empty"),
                       ([[0, 0]], "should be less or equal to the world_size"),
                       ([[1]], "not a rank of the parent group"),
                       ([[0], [0]], "in two splits")):
        with pytest.raises(ValueError, match=re.escape(msg)):
            dist.split_group(split_ranks=ranks)
    with pytest.raises(ValueError, match="Requested backend 'nccl' is not present"):
        dist.split_group(split_ranks=[[0]], backend="nccl")
    with pytest.raises(ValueError, match="Requested backend for device 'cuda'"):
        dist.split_group(split_ranks=[[0]], backend="cuda:nccl")
    g = dist.split_group(split_ranks=[[0]], timeout=datetime.timedelta(seconds=9),
                         group_desc="mine")
    assert isinstance(g, dist.ProcessGroup) and g.group_desc == "mine" and g.timeout == 9.0
    assert dist.get_pg_count() == 2
    sub = dist.split_group(g, [[0]], backend="mpi")
    assert isinstance(sub, dist.ProcessGroup) and dist.get_backend_config(sub) == "cpu:mpi"
    cur, groups = dist.new_subgroups(1, group=g)
    assert groups == [cur] and dist.get_process_group_ranks(cur) == [0]
    with pytest.raises(ValueError, match="must not exceed the world size"):
        dist.new_subgroups(2, group=g)


def test_coalesced_collectives_warn_as_torch_215(world: dist.ProcessGroup) -> None:
    # torch 2.15 decorates both with @deprecated(..., category=FutureWarning): every call
    # warns, at the caller's line, before its arguments are read
    a = acc.full((2,), 1.0, device="cpu")
    with pytest.warns(FutureWarning, match=r"`accelrt.distributed.all_reduce_coalesced` will "
                      r"be deprecated, as `torch.distributed.all_reduce_coalesced` is") as rec:
        dist.all_reduce_coalesced([a])
    assert rec[0].filename == __file__
    with pytest.warns(FutureWarning, match="all_gather_coalesced` will be deprecated"), \
            pytest.raises(TypeError):
        dist.all_gather_coalesced(None, [a])  # type: ignore[arg-type]


@pytest.mark.filterwarnings("ignore:`accelrt.distributed.all_:FutureWarning")
def test_coalesced_and_single_collectives_in_one_rank(world: dist.ProcessGroup) -> None:
    a, b = acc.full((2,), 1.5, device="cpu"), acc.full((3,), 2.5, device="cpu")
    w = dist.all_reduce_coalesced([a, b], async_op=True)
    assert w is not None and w.wait()
    assert a.tolist() == [1.5, 1.5] and b.tolist() == [2.5, 2.5, 2.5]
    host = np.arange(3, dtype="int32")
    dist.all_reduce_coalesced(host, op=dist.ReduceOp.MAX)
    assert host.tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="different dtypes"):
        dist.all_reduce_coalesced([a, acc.full((1,), 1, dtype="int64", device="cpu")])
    with pytest.raises(TypeError, match="at least one array"):
        dist.all_reduce_coalesced([])
    outs = [[acc.empty((3,), device="cpu"), acc.empty((2,), device="cpu")]]
    dist.all_gather_coalesced(outs, [b, a])
    assert outs[0][0].tolist() == [2.5] * 3 and outs[0][1].tolist() == [1.5] * 2
    with pytest.raises(ValueError, match="match the inputs' sizes"):
        dist.all_gather_coalesced([[acc.empty((2,), device="cpu")]], [b])
    out = acc.empty((1, 2), device="cpu")
    dist.gather_single(a, out)
    assert out.tolist() == [[1.5, 1.5]]
    with pytest.raises(ValueError, match="gather_tensor must be specified"):
        dist.gather_single(a)
    with pytest.raises(ValueError, match="world_size times"):
        dist.gather_into_tensor(a, acc.empty((3,), device="cpu"))
    flat = acc.empty((2,), device="cpu")
    dist.all_gather_single(flat, a)
    dist.reduce_scatter_single(flat, acc.full((2,), 4.0, device="cpu"))
    assert flat.tolist() == [4.0, 4.0]


pytestmark = [
    pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec (pip install mpich)"),
]


@pytest.mark.parametrize("n", [2, 3])
def test_extras_over_real_ranks(n: int) -> None:
    if importlib.util.find_spec("mpi4py") is None:
        pytest.skip("mpi4py is not installed")
    rc, out, _ = launch(n, "extras.py", "cases", timeout=90)
    fails = [ln for ln in out.splitlines() if "FAIL " in ln]
    assert rc == 0 and not fails, "\n".join(fails) + "\n" + out[-3000:]
    done = sorted(int(r) for r, c in re.findall(r"DONE (\d+) (\d+)", out))
    assert done == list(range(n)), out[-3000:]


def test_barrier_timeout_names_the_barrier_within_the_timeout() -> None:
    if importlib.util.find_spec("mpi4py") is None:
        pytest.skip("mpi4py is not installed")
    rc, out, secs = launch(3, "extras.py", "barrier_timeout", timeout=45)
    assert rc != 0 and secs < 25, (rc, secs, out)
    for r in (0, 1):
        assert (f"CAUGHT {r} DistTimeoutError: [Rank {r}]: barrier (sequence number 2) on "
                "group 'WORLD' timed out after 500 ms") in out, out
        assert f"KEPT {r} True" in out, out


def _has_cuda_device() -> bool:
    try:
        from accelrt import backends
        return backends.get_backend("cuda").device_count() > 0
    except Exception:  # noqa: BLE001 - no usable CUDA backend
        return False


@pytest.mark.skipif(not _has_cuda_device(), reason="needs a CUDA device")
@pytest.mark.skipif(MPIEXEC is None, reason="mpiexec is not installed (pip install 'accelrt[mpi]')")
def test_split_group_barrier_and_coalesced_on_nccl_on_the_gpu() -> None:
    """One NCCL rank: split_group's ncclCommSplit, barrier(device_ids=), coalesced and
    single collectives on device memory (scripts/gpu_check.py's nccl phase)."""
    rc, out, _ = launch(1, "extras.py", "gpu_one_rank", env={
        "EXTRAS_BACKEND": "cuda:nccl,cpu:mpi", "NCCL_SOCKET_IFNAME": "lo"}, timeout=300)
    assert rc == 0 and "OK gpu_one_rank" in out, out
