"""Findings of the session-37 hostile-input sweep of the runtime and memory surface (random,
memory, streams/events, comm, graphs, DLPack), and a stateful check of the caching allocator's
statistics under hostile sequences of private pools. Each ``test_`` named for a finding
failed before its fix; the torch behaviour is torch 2.15.0's (its CPU build run on the same
inputs, or its sources where the path is CUDA-only), written here as literals.
"""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, invariant, precondition, rule,
                                 run_state_machine_as_test)

import accelrt as acc
from accelrt import memory
from accelrt.testing import leak_check

DEV = "cpu:0"


# ---------------------------------------------------------------------- findings

@pytest.mark.parametrize("pool", [(-1, -1), (-1, 0), (1 << 64, 0), (0, 1 << 64), (0, -(1 << 70))])
def test_a_graph_pool_id_outside_uint64_is_a_type_error(pool: tuple[int, int]) -> None:
    # torch 2.15: a pool id is MempoolId_t, a pair of unsigned long long (c10/core/
    # Allocator.h: CaptureId_t); the capture_begin binding refuses anything else with
    # TypeError ("incompatible function arguments"). Before: accepted, a private pool of
    # that id made (a segment with segment_pool_id (-1, -1) in memory_snapshot()).
    stream = acc.Stream(DEV)
    with leak_check():
        with pytest.raises(TypeError, match=r"pool id .* is out of range.*\[0, 2\*\*64\)"):
            acc.Graph(pool=pool)
        with pytest.raises(TypeError, match="is out of range"):
            with acc.graph(acc.Graph(), pool=pool, stream=stream):
                acc.empty(10, device=DEV)
        assert acc.current_stream(DEV) != stream   # nothing began: the stream not set
        assert memory.memory_snapshot() == [] or all(
            tuple(s["segment_pool_id"]) != pool for s in memory.memory_snapshot())
    stream.close()


def test_the_largest_graph_pool_id_is_still_one() -> None:
    g, stream = acc.Graph(pool=(0, (1 << 64) - 1)), acc.Stream(DEV)
    with acc.graph(g, stream=stream):
        a = acc.empty(10, device=DEV)
        a.fill_(1.0)
    g.replay()
    assert g.pool() == (0, (1 << 64) - 1)
    assert a.numpy().tolist() == [1.0] * 10
    del a
    g.reset()
    stream.close()
    gc.collect()
    memory.empty_cache()


@pytest.mark.parametrize("max_version, versioned", [
    ((1 << 70, 0), True), ((1 << 63, 0), True), ((1, 1 << 70), True),
    ((-(1 << 70), 0), False), ((0, 1 << 70), False)])
def test_dlpack_max_version_beyond_a_c_long(max_version: tuple[int, int],
                                            versioned: bool) -> None:
    # torch 2.15: t.__dlpack__(max_version=(2**70, 0)) is a "dltensor_versioned" capsule
    # (its __dlpack__ compares Python ints); (-2**70, 0) a legacy "dltensor" one. Before: the
    # host path passed the tuple to numpy, which raised OverflowError ("Python int too large
    # to convert to C long"); the opencl path already compared Python ints.
    a = acc.asarray(np.arange(4.0), device=DEV)
    capsule = a.__dlpack__(max_version=max_version)
    name = "dltensor_versioned" if versioned else "dltensor"
    assert f'capsule object "{name}"' in repr(capsule)

    class Producer:
        def __dlpack__(self, **kwargs: Any) -> Any:
            return a.__dlpack__(max_version=max_version)

        def __dlpack_device__(self) -> tuple[int, int]:
            return a.__dlpack_device__()

    assert np.from_dlpack(Producer()).tolist() == [0.0, 1.0, 2.0, 3.0]


# ---------------------------------------------------------------------- the stateful model

def _rounded(size: int) -> int:
    """The block size the caching allocator gives a request (PyTorch's round_size with the
    default configuration: multiples of 512 bytes, at least 512)."""
    return max(512, -(-size // 512) * 512)


class PoolMachine(RuleBasedStateMachine):
    """Private pools made, entered (nested, in any order of pools), left and dropped while
    arrays and raw allocations are made inside and outside them and freed in any order,
    with ``empty_cache`` and peak resets in between: ``memory_stats`` must count exactly
    what a model counts, and at the end everything goes back to the device."""

    def __init__(self) -> None:
        super().__init__()
        self.pools: list[memory.MemPool] = []
        self.entered: list[tuple[Any, memory.MemPool]] = []   # open use_mem_pool contexts
        # (kind, array or ptr, size asked, size of its block)
        self.live: list[tuple[str, Any, int, int]] = []
        self.graphs: list[acc.Graph] = []
        self.stream = acc.Stream(DEV)
        memory.reset_peak_memory_stats(DEV)
        self.peak = 0
        self.keys = [f"{k}.{p}.{f}" for k in ("allocation", "segment", "active",
                                               "allocated_bytes", "reserved_bytes",
                                               "requested_bytes", "active_bytes",
                                               "inactive_split", "inactive_split_bytes")
                     for p in ("all", "small_pool", "large_pool")
                     for f in ("current", "peak", "allocated", "freed")]
        start = self._stats()
        self.drift = {f"{k}.{p}": self._drift(start, f"{k}.{p}")
                      for k in ("allocation", "segment", "active", "allocated_bytes",
                                "reserved_bytes", "requested_bytes", "active_bytes",
                                "inactive_split", "inactive_split_bytes")
                      for p in ("small_pool", "large_pool")}

    def _stats(self) -> dict[str, int]:
        s = dict.fromkeys(self.keys, 0)
        s.update(memory.memory_stats(DEV))   # empty before the device's first allocation
        return s

    @staticmethod
    def _drift(s: dict[str, int], name: str) -> int:
        """``current - (allocated - freed)``: constant while nothing resets the accumulated
        counts (zero unless an earlier reset_accumulated_memory_stats ran with a count
        above zero)."""
        return s[f"{name}.current"] - s[f"{name}.allocated"] + s[f"{name}.freed"]

    def _current(self) -> int:
        return sum(block for _, _, _, block in self.live)

    def _allocated(self, kind: str, obj: Any, size: int, before: int) -> None:
        # the block: the size rounded, or a whole cached block whose remainder was too small
        # to split off (PyTorch's should_split: under 512 bytes, or 1 MiB in the large pool)
        self._track(kind, obj, size, memory.memory_allocated(DEV) - before)

    def _track(self, kind: str, obj: Any, size: int, block: int) -> None:
        assert _rounded(size) <= block <= _rounded(size) + (1 << 20), (size, block)
        self.live.append((kind, obj, size, block))
        self.peak = max(self.peak, self._current())

    @rule()
    def new_pool(self) -> None:
        self.pools.append(memory.MemPool())

    @precondition(lambda self: bool(self.pools))
    @rule(data=st.data())
    def drop_pool(self, data: st.DataObject) -> None:
        self.pools.pop(data.draw(st.integers(0, len(self.pools) - 1)))
        gc.collect()

    @precondition(lambda self: bool(self.pools))
    @rule(data=st.data())
    def enter(self, data: st.DataObject) -> None:
        pool = self.pools[data.draw(st.integers(0, len(self.pools) - 1))]
        cm = memory.use_mem_pool(pool, DEV)
        if any(p is pool for _, p in self.entered):
            # PyTorch: "beginAllocateToPool: already recording to mempool_id"
            with pytest.raises(RuntimeError):
                cm.__enter__()
            return
        cm.__enter__()
        self.entered.append((cm, pool))

    @precondition(lambda self: bool(self.entered))
    @rule(raising=st.booleans())
    def leave(self, raising: bool) -> None:
        cm, _ = self.entered.pop()
        if raising:   # an exception leaving the block: not swallowed, the pool released
            exc = KeyError("inside")
            assert not cm.__exit__(KeyError, exc, None)
        else:
            cm.__exit__(None, None, None)

    @rule(size=st.integers(0, 3 << 20))
    def alloc_array(self, size: int) -> None:
        before = memory.memory_allocated(DEV)
        a = acc.empty(size, dtype="uint8", device=DEV)
        if size:
            self._allocated("array", a, size, before)

    @rule(size=st.integers(1, 3 << 20))
    def alloc_raw(self, size: int) -> None:
        before = memory.memory_allocated(DEV)
        self._allocated("raw", memory.caching_allocator_alloc(size, DEV), size, before)

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        kind, obj, _, _ = self.live.pop(data.draw(st.integers(0, len(self.live) - 1)))
        if kind == "raw":
            memory.caching_allocator_delete(obj)
            with pytest.raises(ValueError, match="invalid device pointer"):
                memory.caching_allocator_delete(obj)   # twice: refused, nothing changes
        del obj

    @rule(data=st.data(), sizes=st.lists(st.integers(1, 3 << 20), min_size=1, max_size=3),
          fail=st.booleans())
    def capture(self, data: st.DataObject, sizes: list[int], fail: bool) -> None:
        """A graph captured into a new pool, a MemPool of the list or another graph's pool,
        its arrays kept; an exception inside the capture (the capture ends, the arrays made
        inside stay allocated until dropped) or a replay after it."""
        choices: list[Any] = [None, *self.pools, *(g.pool() for g in self.graphs)]
        pool = choices[data.draw(st.integers(0, len(choices) - 1))]
        graph = acc.Graph(pool=pool)
        stream = self.stream
        if pool is not None and any(p.id == getattr(pool, "id", pool) for _, p in self.entered):
            # PyTorch: "beginAllocateToPool: already recording to mempool_id"
            with pytest.raises(RuntimeError):
                with acc.graph(graph, stream=stream):
                    pass
            return
        made: list[tuple[Any, int, int]] = []
        try:
            with acc.graph(graph, stream=stream):
                for size in sizes:
                    before = memory.memory_allocated(DEV)
                    a = acc.empty(size, dtype="uint8", device=DEV)
                    made.append((a, size, memory.memory_allocated(DEV) - before))
                    a.fill_(7)
                if fail:
                    raise KeyError("inside the capture")
        except KeyError:
            pass
        else:
            graph.replay()
            self.graphs.append(graph)
        for a, size, block in made:
            self._track("array", a, size, block)
            self.peak = max(self.peak, self._current())

    @precondition(lambda self: bool(self.graphs))
    @rule(data=st.data(), reset=st.booleans())
    def drop_graph(self, data: st.DataObject, reset: bool) -> None:
        graph = self.graphs.pop(data.draw(st.integers(0, len(self.graphs) - 1)))
        if reset:
            graph.reset()
        del graph
        gc.collect()

    @rule()
    def empty_cache(self) -> None:
        memory.empty_cache()

    @rule()
    def reset_peak(self) -> None:
        memory.reset_peak_memory_stats(DEV)
        self.peak = self._current()

    @invariant()
    def stats_are_exact(self) -> None:
        s = self._stats()
        n, requested = len(self.live), sum(size for _, _, size, _ in self.live)
        assert s["allocation.all.current"] == n
        assert s["active.all.current"] == n
        assert s["requested_bytes.all.current"] == requested
        assert s["allocated_bytes.all.current"] == self._current() == memory.memory_allocated(DEV)
        assert s["allocated_bytes.all.peak"] == self.peak == memory.max_memory_allocated(DEV)
        assert s["reserved_bytes.all.current"] >= s["allocated_bytes.all.current"]
        for kind in ("allocation", "segment", "active", "allocated_bytes", "reserved_bytes",
                     "requested_bytes", "active_bytes", "inactive_split",
                     "inactive_split_bytes"):
            for pool in ("small_pool", "large_pool"):
                st_ = f"{kind}.{pool}"
                assert self._drift(s, st_) == self.drift[st_], st_
                assert s[f"{st_}.peak"] >= s[f"{st_}.current"], st_
        segments = memory.memory_snapshot()
        assert sum(sg["allocated_size"] for sg in segments if sg["device"] == 0) \
            == self._current()
        assert sum(sg["total_size"] for sg in segments if sg["device"] == 0) \
            == memory.memory_reserved(DEV)

    def teardown(self) -> None:
        while self.entered:
            self.entered.pop()[0].__exit__(None, None, None)
        while self.live:
            kind, obj, _, _ = self.live.pop()
            if kind == "raw":
                memory.caching_allocator_delete(obj)
            del obj
        self.pools.clear()
        self.graphs.clear()
        gc.collect()
        self.stream.close()
        memory.empty_cache()
        assert memory.memory_allocated(DEV) == 0
        assert memory.memory_reserved(DEV) == 0, memory.memory_snapshot()


def test_private_pools_keep_the_statistics_exact() -> None:
    with leak_check():
        run_state_machine_as_test(
            PoolMachine, settings=settings(max_examples=60, stateful_step_count=25,
                                           deadline=None))
