"""``MemPool(use_on_oom=True)``: PyTorch's last resort before an out-of-memory error.

PyTorch 2.15's ``DeviceCachingAllocator::malloc``, once a new segment for a request outside
private pools has failed, looks in each pool made with ``use_on_oom`` (registered on the
device current at the pool's creation, removed by ``~MemPool``) for a cached block on the
request's stream (``get_free_block`` of that pool's small or large pool), before it releases
any cached memory and retries (``try_mempool_fallback``, first of the chain since pytorch
#169699; accelrt looked there last, after the release and retry, until session 40). The
block stays the pool's. A request that is itself routed to a private pool gets no such
help.
"""

from __future__ import annotations

import gc
import itertools

import pytest

import accelrt as acc
from accelrt import backends, memory
from accelrt.testing._simulated import SimulatedBackend

MiB = 1 << 20
_names = itertools.count()


@pytest.fixture
def dev() -> str:
    """A fresh simulated backend of two 100 MiB devices (made the current accelerator by
    the ``current`` fixture of tests/memory/conftest.py)."""
    name = f"oompool{next(_names)}"
    backends.register(name, lambda: SimulatedBackend(name=name, capacity=100 * MiB,
                                                     device_count=2))
    return name


def _fill(pool: memory.MemPool, d: str) -> tuple[int, int, memory.MemPool]:
    """A live 40 MiB block in a plain pool, and a cached 40 MiB block in ``pool``: 20 MiB of
    the device's 100 MiB are left. Returns the two addresses and the plain pool."""
    keep = memory.MemPool()
    with memory.use_mem_pool(keep, d):
        live = memory.caching_allocator_alloc(40 * MiB, d)
    with memory.use_mem_pool(pool, d):
        cached = memory.caching_allocator_alloc(40 * MiB, d)
    memory.caching_allocator_delete(cached)
    return live, cached, keep


def _release(d: str, live: int) -> None:
    """Free :func:`_fill`'s live block and, the caller having dropped its pools, check that
    everything goes back to the device."""
    memory.caching_allocator_delete(live)
    gc.collect()
    memory.empty_cache()
    assert memory.memory_reserved(d) == 0


@pytest.mark.parametrize("use_on_oom", [True, False])
def test_a_request_that_would_oom_takes_the_pools_cached_block(current: str,
                                                               use_on_oom: bool) -> None:
    d = f"{current}:0"
    pool = memory.MemPool(use_on_oom=use_on_oom)
    live, cached, keep = _fill(pool, d)
    reserved = memory.memory_reserved(d)
    if not use_on_oom:
        with pytest.raises(acc.OutOfMemoryError):
            memory.caching_allocator_alloc(30 * MiB, d)
        assert memory.memory_stats(d)["num_ooms"] == 1
    else:
        p = memory.caching_allocator_alloc(30 * MiB, d)     # split from the pool's block
        assert p == cached
        stats = memory.memory_stats(d)
        assert stats["num_ooms"] == 0
        assert stats["num_alloc_retries"] == 0              # before the release and retry
        assert stats["num_sync_all_streams"] == 0
        assert memory.memory_reserved(d) == reserved         # no new memory
        (seg,) = pool.snapshot()
        assert [(b["size"], b["state"]) for b in seg["blocks"]] == [
            (30 * MiB, "active_allocated"), (10 * MiB, "inactive")]
        memory.caching_allocator_delete(p)                  # back into the pool
        (seg,) = pool.snapshot()
        assert [b["state"] for b in seg["blocks"]] == ["inactive"]
        # a request the pool's cache cannot serve still runs out of memory
        with pytest.raises(acc.OutOfMemoryError):
            memory.caching_allocator_alloc(50 * MiB, d)
    del pool, keep
    _release(d, live)


def test_no_last_resort_for_another_stream_another_pool_or_a_collected_pool(current: str
                                                                            ) -> None:
    d = f"{current}:0"
    pool = memory.MemPool(use_on_oom=True)
    live, cached, keep = _fill(pool, d)
    s = acc.Stream(d)
    with pytest.raises(acc.OutOfMemoryError):           # the cached block is on stream 0
        memory.caching_allocator_alloc(30 * MiB, d, s)
    other = memory.MemPool()
    with memory.use_mem_pool(other, d):                 # routed to a private pool: no help
        with pytest.raises(acc.OutOfMemoryError):
            memory.caching_allocator_alloc(30 * MiB, d)
    p = memory.caching_allocator_alloc(30 * MiB, d)     # the default pool: helped
    assert p == cached
    memory.caching_allocator_delete(p)
    # a collected pool gives its cache back (PyTorch's ~MemPool: setUseOnOOM(false),
    # releasePool, emptyCache): the request then gets new memory of its own
    del pool
    gc.collect()
    q = memory.caching_allocator_alloc(30 * MiB, d)
    memory.caching_allocator_delete(q)
    del other, keep
    _release(d, live)


def test_the_pool_helps_only_on_the_device_current_at_its_creation(current: str) -> None:
    # PyTorch's MemPool registers use_on_oom on its device_ (the current device then) only
    dev = current
    acc.set_device_index(1)
    pool = memory.MemPool(use_on_oom=True)
    acc.set_device_index(0)
    live, _, keep = _fill(pool, f"{dev}:0")               # the pool used on device 0
    with pytest.raises(acc.OutOfMemoryError):
        memory.caching_allocator_alloc(30 * MiB, f"{dev}:0")
    del pool, keep
    _release(f"{dev}:0", live)


@pytest.mark.parametrize("bad", ["yes", [1]])   # (1 and None: taken, as torch 2.15's binding)
def test_use_on_oom_must_be_a_bool(bad: object) -> None:
    with pytest.raises(TypeError, match="use_on_oom"):
        memory.MemPool(use_on_oom=bad)                  # type: ignore[arg-type]
