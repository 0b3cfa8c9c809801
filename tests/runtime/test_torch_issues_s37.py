"""PyTorch issues and pull requests (2.8 to 2.15) whose fixed behaviour accelrt mirrors, pinned
on the cpu backend.

Session 37 read pytorch/pytorch's bug history for the runtime accelrt mirrors and checked each
fixed behaviour on accelrt. Every check here held when it was written (no fix was needed); the
behaviours are pinned because no test named them yet. Each test's docstring cites its issue.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.registry import module_backends

import accelrt as acc
from accelrt.backends.cpu import CpuBackend

CPU = "s37issuescpu"

_backends = module_backends({
    CPU: lambda: CpuBackend(num_devices=1, async_streams=False, name=CPU),
})


@pytest.fixture
def cpu() -> Iterator[Any]:
    """The cpu backend's device module, current, device 0 current; caches emptied after."""
    mod: Any = acc.backends.device_module(CPU)
    acc.set_current_accelerator(CPU)
    mod.set_device(0)
    mod.empty_cache()
    yield mod
    mod.synchronize()
    mod.empty_cache()


def test_empty_cache_inside_capture_and_mempool_raises_nothing(cpu: Any) -> None:
    """pytorch/pytorch#158152 (2.8): ``empty_cache()`` during graph capture does nothing and
    raises nothing (captures used to raise). Under a ``use_mem_pool`` context that is not a
    capture it empties the default pools: torch 2.15 tells the allocator when a capture
    really begins (``markCaptureBegin``, "distinct from begin/endAllocateToPool, which only
    routes allocations into a private mempool", c10/cuda/CUDACachingAllocator.h), and only a
    capture keeps the cache (in 2.8 the pool routing counted as a capture)."""
    dev = acc.device(CPU, 0)
    cached = acc.empty(4096, device=dev)
    del cached                                  # a free cached block of the default pool
    assert cpu.memory_reserved() > 0
    pool = cpu.MemPool()
    with cpu.use_mem_pool(pool):
        cpu.empty_cache()
        acc.empty_cache()
    assert cpu.memory_reserved() == 0           # no capture: the default pool was emptied
    out = acc.zeros(4, device=dev)
    g = cpu.CUDAGraph()
    with cpu.graph(g):
        cpu.empty_cache()
        acc.memory.empty_cache()
        out.fill_(2)
    g.replay()
    cpu.synchronize()
    assert out.numpy().tolist() == [2.0] * 4


def test_temporary_mempools_in_use_mem_pool(cpu: Any) -> None:
    """pytorch/pytorch#167745 (umbrella of custom MemPool patterns, tests 1 and 2): a
    ``MemPool`` made in the ``with`` statement itself, nested or not, and an array that outlives
    it, allocated inside it or before it: no error, and every byte comes back."""
    dev = acc.device(CPU, 0)
    with cpu.use_mem_pool(cpu.MemPool()):
        x1 = acc.empty(8, device=dev)
    assert cpu.memory_allocated() > 0
    del x1
    gc.collect()
    cpu.empty_cache()
    assert cpu.memory_allocated() == 0 and cpu.memory_reserved() == 0

    x1 = acc.empty(8, device=dev)
    with cpu.use_mem_pool(cpu.MemPool()):
        with cpu.use_mem_pool(cpu.MemPool()):
            pass
    del x1
    gc.collect()
    cpu.empty_cache()
    assert cpu.memory_allocated() == 0 and cpu.memory_reserved() == 0


def test_a_capture_that_failed_gives_its_pool_back_when_the_graph_dies(cpu: Any) -> None:
    """pytorch/pytorch#190348 (cherry-picked to 2.11 to 2.13): a capture interrupted by an
    error leaves no pool behind once the graph is gone, reset or not; ``empty_cache()`` then
    returns all its memory (the pool's use count used to stay raised)."""
    dev = acc.device(CPU, 0)
    for finish in ("reset", "drop"):
        g = cpu.CUDAGraph()
        with pytest.raises(ValueError, match="mid-capture"):
            with cpu.graph(g):
                t = acc.zeros(1000, device=dev)
                raise ValueError("mid-capture")
        del t
        assert cpu.memory_reserved() > 0        # the private pool's segment
        if finish == "reset":
            g.reset()
        del g
        gc.collect()
        cpu.empty_cache()
        stats = cpu.memory_stats()
        assert stats["active.all.current"] == 0, finish
        assert cpu.memory_reserved() == 0, finish
