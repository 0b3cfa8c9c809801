"""Free lists with logarithmic updates: the allocator's cost per operation barely grows with
the number of free blocks (a plain sorted list moves every key after the insertion point)."""

from __future__ import annotations

import random
import statistics
import time
from bisect import insort

import pytest

from accelrt.memory import _block
from accelrt.memory._allocator import DeviceCachingAllocator
from accelrt.memory._block import FreeList, fl_add, fl_iter_ge, fl_iter_lt, fl_pop_ge, fl_remove
from accelrt.memory._config import parse_config
from accelrt.testing._simulated import SimulatedBackend


@pytest.mark.parametrize("bucket", [2, 3, 8, _block.BUCKET_MAX])
def test_free_list_matches_a_sorted_list(monkeypatch, bucket: int) -> None:
    monkeypatch.setattr(_block, "BUCKET_MAX", bucket)
    monkeypatch.setattr(_block, "SMALL_MAX", 4)
    rng = random.Random(bucket)
    free: dict[int, list[int] | FreeList] = {}
    model: list[int] = []
    for _ in range(3000):
        r = rng.random()
        if r < 0.5 or not model:
            k = rng.randrange(1 << 70)
            if k not in model:
                fl_add(free, 0, k)
                insort(model, k)
        elif r < 0.75:
            k = rng.choice(model)
            fl_remove(free[0], k)
            model.remove(k)
        else:
            q = rng.randrange(1 << 70)
            got = fl_pop_ge(free[0], q)
            want = next((k for k in model if k >= q), -1)
            assert got == want
            if want >= 0:
                model.remove(want)
        fl = free.get(0)
        if fl is not None:
            assert list(fl) == model
            assert len(fl) == len(model) and bool(fl) == bool(model)
            q = rng.randrange(1 << 70)
            assert list(fl_iter_ge(fl, q)) == [k for k in model if k >= q]
            assert list(fl_iter_lt(fl, q)) == [k for k in model if k < q][::-1]
    assert isinstance(free[0], FreeList)          # converted once long
    assert all(len(sub) <= bucket for sub in free[0].lists)


def _allocator_with_free_blocks(n: int) -> tuple[DeviceCachingAllocator, list[int]]:
    rng = random.Random(0)
    a = DeviceCachingAllocator(SimulatedBackend(capacity=1 << 40), 0, parse_config(""))
    sizes = [rng.randrange(1, 129) * 512 for _ in range(2 * n + 1)]
    ptrs = [a.malloc(s, 0) for s in sizes]
    for p in ptrs[1::2]:                          # n free blocks between live ones
        a.free(p)
    return a, sizes


def _cost(a: DeviceCachingAllocator, work: list[int]) -> float:
    malloc, free = a.malloc, a.free
    t0 = time.thread_time()
    for s in work:
        free(malloc(s, 0))
    return time.thread_time() - t0


def test_cost_per_operation_barely_grows_with_free_blocks() -> None:
    small, sizes = _allocator_with_free_blocks(1000)
    big, _ = _allocator_with_free_blocks(30_000)
    work = [random.Random(1).choice(sizes) for _ in range(3000)]
    ratios = []
    for _ in range(5):                            # alternate: load affects both alike
        ratios.append(_cost(big, work) / _cost(small, work))
    # linear lists: about 3.5x at 30,000 free blocks (6x at 60,000); bucketed ones about 1.2x
    assert statistics.median(ratios) < 2.2, ratios
    s = big.stats()
    assert s["inactive_split.all.current"] >= 25_000
