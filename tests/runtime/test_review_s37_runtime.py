"""Session-37 review of the runtime, memory-tools and typing changes: each test failed before
its fix."""

from __future__ import annotations

import time

from accelrt.memory.tools._pools import PoolPlan
from accelrt.memory.tools._replay import _make_allocator

# ---------------------------------------------------------------- pool-aware replay: linear time


def test_many_pools_released_at_one_point_route_in_linear_time() -> None:
    """A crafted snapshot whose 20,000 private pools all show their ``segment_free`` after the
    last operation: the release points were built by copying a growing tuple per pool
    (quadratic: 3 s here for 20,000, 13 s for 40,000, minutes for a few hundred thousand)."""
    n = 20_000
    plan = PoolPlan(route=(), release=tuple((0, 0, (0, i + 1)) for i in range(n)))
    t0 = time.perf_counter()
    route, release = plan.routing()
    assert time.perf_counter() - t0 < 1.0
    assert route == {} and list(release) == [0]
    assert release[0] == tuple((0, i + 1) for i in range(n))     # in order, once each
    twice = PoolPlan(route=(), release=((0, 0, (0, 1)), (0, 0, (0, 2)), (0, 0, (0, 1))))
    assert twice.routing() == ({}, {0: ((0, 1), (0, 2))})


def test_empty_cache_of_one_pool_does_not_visit_every_released_pool() -> None:
    """``empty_cache(pool_id)`` (each replayed release) walked every released pool that still
    held a block: a replay releasing N such pools took N**2 steps (8.6 s for 10,000 here)."""
    a = _make_allocator(None)
    n = 6_000
    for i in range(n):                  # released pools, each still holding a live block
        a.begin_allocate_to_pool((0, i + 1))
        a.malloc(512, 0)
        a.end_allocate_to_pool((0, i + 1))
        a.release_pool((0, i + 1))
    reserved = a.memory_reserved()
    t0 = time.perf_counter()
    for i in range(n):
        a.empty_cache((0, i + 1))
    assert time.perf_counter() - t0 < 1.0
    assert a.memory_reserved() == reserved         # live blocks keep their segments


def test_a_released_pool_is_still_emptied_by_its_own_empty_cache() -> None:
    """The lookup of one pool keeps what it did: a released pool's free segment is given back,
    another released pool's is not, and the default ``empty_cache()`` gives back the rest."""
    a = _make_allocator(None)
    for pid in ((0, 1), (0, 2)):
        a.begin_allocate_to_pool(pid)
        a.free(a.malloc(512, 0))
        a.end_allocate_to_pool(pid)
        a.release_pool(pid)
    a.empty_cache((0, 1))
    assert [s["segment_pool_id"] for s in a.snapshot_segments()] == [(0, 2)]
    a.empty_cache((0, 3))               # no such pool: nothing happens
    assert [s["segment_pool_id"] for s in a.snapshot_segments()] == [(0, 2)]
    a.empty_cache()
    assert a.snapshot_segments() == []
