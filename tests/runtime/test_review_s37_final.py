"""Session 37's final review of the day's merges (s37-revf): regressions found in the changes
merged after 968dff6."""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Iterator

import pytest

import accelrt as acc


@pytest.fixture
def cpu() -> Iterator[None]:
    acc.set_current_accelerator("cpu")
    yield
    acc.synchronize("cpu")


class _LyingInt(int):
    """An int whose truth, order and hash lie: PyTorch's MempoolId_t binding reads its value."""

    def __bool__(self) -> bool:
        return True

    def __lt__(self, other: object) -> bool:
        return False

    def __le__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        return 7


def test_graph_pool_id_of_int_subclasses_read_by_value(cpu: None) -> None:
    # (0, 3) made of lying ints was refused as "both halves set" / out of range; torch reads
    # the values, and the id the graph keeps (Graph.pool()) is a tuple of plain ints
    g = acc.Graph(pool=(_LyingInt(0), _LyingInt(3)))
    x = acc.zeros(4, device="cpu:0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with acc.cpu.graph(g):
            x.fill_(1.0)
    assert g.pool() == (0, 3)
    assert [type(v) for v in g.pool()] == [int, int]
    g.reset()


def test_graph_pool_id_zero_of_int_subclasses_is_no_pool(cpu: None) -> None:
    g = acc.Graph(pool=(_LyingInt(0), _LyingInt(0)))
    x = acc.zeros(4, device="cpu:0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with acc.cpu.graph(g):
            x.fill_(1.0)
    first, second = g.pool()
    assert first > 0 and second == 0   # the capture's own pool, as with pool=None
    g.reset()


def test_init_process_group_with_an_engine_serving_no_device_fails_as_torch() -> None:
    """torch 2.15's ``init_process_group`` with an engine registered with ``devices=[]``
    raises RuntimeError ("Could not find the default backend type ..."); accelrt made a world
    whose every collective failed. The refusal changes nothing: a later init works."""
    import accelrt.distributed as dist

    def factory(ctx: object) -> None:
        raise AssertionError("an engine that serves no device type is never made")

    dist.register_backend("s37revfnone", factory, devices=[])   # type: ignore[arg-type]
    try:
        with pytest.raises(RuntimeError, match="serves no device type"):
            dist.init_process_group("s37revfnone", store=dist.HashStore(), rank=0,
                                    world_size=1)
        assert not dist.is_initialized()
    finally:
        dist.Backend._unregister("s37revfnone")


class _NoTruth:
    def __bool__(self) -> bool:
        raise ValueError("no truth value")


class _TwoTruth:
    def __bool__(self) -> bool:
        return 2   # type: ignore[return-value]  # noqa: PLE0304 - torch refuses it


@pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None,
                    reason="mpi4py is not installed")
def test_monitored_barrier_refuses_a_wait_all_ranks_without_a_truth_value() -> None:
    """torch 2.15's bool binding refuses a value whose ``__bool__`` raises or answers a
    non-bool (a numpy array of two items) with TypeError "incompatible function arguments"
    (gloo, one rank); accelrt took it, and read its truth only when a rank timed out, where
    its error replaced the timeout's."""
    import numpy as np

    import accelrt.distributed as dist
    dist.init_process_group("cpu:mpi", timeout=30)
    try:
        for bad in (np.array([1, 2]), _NoTruth(), _TwoTruth()):
            with pytest.raises(TypeError, match="incompatible function arguments"):
                dist.monitored_barrier(wait_all_ranks=bad)  # type: ignore[arg-type]
        dist.monitored_barrier(wait_all_ranks=np.array([1]))  # type: ignore[arg-type]
        dist.monitored_barrier()   # the group is left usable
    finally:
        dist.destroy_process_group()


def test_memory_snapshot_of_pool_zero_is_every_pool(cpu: None) -> None:
    """torch 2.15's ``memory_snapshot(mempool_id=None)`` passes ``(0, 0)`` to its allocator's
    snapshot for "every pool", so ``memory_snapshot((0, 0))`` is the same list; accelrt
    returned only the default pool's segments."""
    from accelrt import memory
    pool = memory.MemPool()
    with memory.use_mem_pool(pool, "cpu:0"):
        p = memory.caching_allocator_alloc(1 << 20, "cpu:0")
    q = memory.caching_allocator_alloc(1 << 20, "cpu:0")
    try:
        every = memory.memory_snapshot()
        assert pool.id in [s["segment_pool_id"] for s in every]
        assert memory.memory_snapshot((0, 0)) == every
        assert memory.memory_snapshot([0, 0]) == every   # type: ignore[arg-type]
        assert acc.cpu.memory_snapshot((0, 0)) == acc.cpu.memory_snapshot()
        assert [s["segment_pool_id"] for s in memory.memory_snapshot(pool.id)] == [pool.id]
    finally:
        memory.caching_allocator_delete(p)
        memory.caching_allocator_delete(q)
