"""Free lists with logarithmic updates: the allocator's cost per operation barely grows with
the number of free blocks (a plain sorted list moves every key after the insertion point).
The free list itself is tested against a model in test_free_list.py."""

from __future__ import annotations

import random
import statistics
import time


from accelrt.memory._allocator import DeviceCachingAllocator
from accelrt.memory._config import parse_config
from accelrt.testing._simulated import SimulatedBackend


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
