"""Allocator settings changed while blocks are live (``_set_allocator_settings``): the
oversize statistics follow the limit in force, and never go below zero."""

from __future__ import annotations

import random

import pytest

from accelrt.memory._allocator import DeviceCachingAllocator
from accelrt.testing._allocators import GeneralPathAllocator
from accelrt.memory._config import parse_config
from accelrt.testing._simulated import SimulatedBackend

MiB = 1 << 20


def oversize(a: DeviceCachingAllocator) -> tuple[int, int]:
    s = a.stats()
    return s["oversize_allocations.current"], s["oversize_segments.current"]


def expected(a: DeviceCachingAllocator, limit: int) -> tuple[int, int]:
    """Live allocations and segments at least ``limit`` long (the snapshot's view)."""
    segs = a.snapshot_segments()
    allocs = sum(1 for seg in segs for b in seg["blocks"]
                 if b["state"] == "active_allocated" and b["size"] >= limit)
    return allocs, sum(1 for seg in segs if seg["total_size"] >= limit)


@pytest.mark.parametrize("cls", [DeviceCachingAllocator, GeneralPathAllocator])
def test_oversize_counts_follow_a_max_split_size_change(cls: type) -> None:
    """A block allocated under no limit and freed under a limit it exceeds (and the reverse)
    leaves the oversize counts at zero (they were -1, or stayed 1, for good)."""
    a = cls(SimulatedBackend(), 0, parse_config(""))
    p = a.malloc(24 * MiB - 1000, 0)               # a 24 MiB segment, not split
    a.set_config(parse_config("max_split_size_mb:24"))
    assert oversize(a) == (1, 1) == expected(a, 24 * MiB)
    a.free(p)
    a.empty_cache()
    assert oversize(a) == (0, 0)
    q = a.malloc(30 * MiB, 0)                      # oversize under the limit
    assert oversize(a) == (1, 1)
    a.set_config(parse_config(""))                 # no limit: nothing is oversize
    assert oversize(a) == (0, 0)
    a.free(q)
    a.empty_cache()
    s = a.stats()
    assert oversize(a) == (0, 0)
    assert s["oversize_allocations.peak"] == 1 and s["oversize_segments.peak"] == 1


@pytest.mark.parametrize("seed", range(3))
def test_oversize_counts_match_the_blocks_across_setting_changes(seed: int) -> None:
    rng = random.Random(seed)
    a = DeviceCachingAllocator(SimulatedBackend(capacity=1 << 34), 0, parse_config(""))
    limit = 1 << 64
    live: list[int] = []
    for _ in range(200):
        r = rng.random()
        if r < 0.45 or not live:
            live.append(a.malloc(rng.choice((3000, 3 * MiB, 21 * MiB, 30 * MiB, 70 * MiB))
                                 - rng.randrange(0, 2000), 0))
        elif r < 0.85:
            a.free(live.pop(rng.randrange(len(live))))
        elif r < 0.95:
            mb = rng.choice((None, 21, 24, 40, 64))
            a.set_config(parse_config("" if mb is None else f"max_split_size_mb:{mb}"))
            limit = 1 << 64 if mb is None else mb * MiB
        else:
            a.empty_cache()
        now = oversize(a)
        assert min(now) >= 0
        assert now == (expected(a, limit) if limit < 1 << 64 else (0, 0))
    for p in live:
        a.free(p)
    a.empty_cache()
    assert oversize(a) == (0, 0)
