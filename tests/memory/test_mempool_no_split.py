"""``MemPool(no_split=True)`` (PyTorch's no-split pools): a pool's segments are never split."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from helpers.registry import module_backends

import accelrt as acc
from accelrt import backends, memory
from accelrt.backends import Backend
from accelrt.backends.cpu import CpuBackend

MiB = 1 << 20

def _ocl() -> Backend:
    from accelrt.backends.opencl import OpenCLBackend
    return OpenCLBackend(name="nsocl")


# closed (worker threads stopped) and unregistered after the module
_backends = module_backends({
    "nssync": lambda: CpuBackend(num_devices=1, async_streams=False, name="nssync"),
    "nsasync": lambda: CpuBackend(num_devices=1, async_streams=True, name="nsasync"),
    "nsocl": _ocl,
})
_OCL_REASON = backends.unavailable_reason("opencl")   # nsocl is an OpenCLBackend too


@pytest.fixture(params=["nssync", "nsasync", pytest.param("nsocl", marks=pytest.mark.skipif(
    _OCL_REASON is not None, reason=f"opencl unavailable: {_OCL_REASON}"))])
def dev(request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"{request.param}:0"
    yield name
    acc.synchronize(name)
    memory.empty_cache()
    acc.set_current_accelerator(request.param)
    memory.empty_cache()


def _alloc_in(pool: memory.MemPool, dev: str, *sizes: int) -> list[int]:
    with memory.use_mem_pool(pool, dev):
        return [memory.caching_allocator_alloc(n, dev) for n in sizes]


def _blocks(pool: memory.MemPool) -> list[tuple[int, int, str]]:
    return [(s["address"], b["size"], b["state"]) for s in pool.snapshot() for b in s["blocks"]]


def test_default_is_false_and_bad_type_raises() -> None:
    with pytest.raises(TypeError, match="no_split"):
        memory.MemPool(no_split="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="no_split"):
        memory.MemPool(no_split=[1])  # type: ignore[arg-type]


def test_small_allocations_get_a_segment_each(dev: str) -> None:
    plain, whole = memory.MemPool(), memory.MemPool(no_split=True)
    ps = _alloc_in(plain, dev, 1000, 1000)
    ws = _alloc_in(whole, dev, 1000, 1000)
    assert len(plain.snapshot()) == 1                # split: both in one 2 MiB segment
    assert len(whole.snapshot()) == 2                # no split: one segment each
    for seg in whole.snapshot():
        assert [(b["size"], b["state"]) for b in seg["blocks"]] == [(2 * MiB, "active_allocated")]
        assert seg["segment_pool_id"] == whole.id
    stats = memory.memory_stats(dev)
    assert stats["allocated_bytes.all.current"] == 2 * 1024 + 2 * 2 * MiB
    assert stats["requested_bytes.all.current"] == 4 * 1000
    for p in ps + ws:
        memory.caching_allocator_delete(p)


def test_large_allocation_takes_the_whole_segment(dev: str) -> None:
    whole = memory.MemPool(no_split=True)
    before = memory.memory_stats(dev).get("inactive_split.all.current", 0)
    (p,) = _alloc_in(whole, dev, 3 * MiB)
    assert _blocks(whole) == [(p, 20 * MiB, "active_allocated")]
    assert memory.memory_stats(dev)["inactive_split.all.current"] == before
    memory.caching_allocator_delete(p)


def test_a_cached_segment_serves_one_allocation_at_a_time(dev: str) -> None:
    whole = memory.MemPool(no_split=True)
    (p,) = _alloc_in(whole, dev, 4096)
    memory.caching_allocator_delete(p)
    assert _blocks(whole) == [(p, 2 * MiB, "inactive")]
    q, r = _alloc_in(whole, dev, 512, 512)
    assert q == p                                     # the cached segment is reused, whole
    assert len(whole.snapshot()) == 2 and r != p      # the next one needs a new segment
    assert sorted(b[1] for b in _blocks(whole)) == [2 * MiB, 2 * MiB]
    memory.caching_allocator_delete(q)
    memory.caching_allocator_delete(r)


def test_other_allocations_still_split(dev: str) -> None:
    whole = memory.MemPool(no_split=True)
    (p,) = _alloc_in(whole, dev, 512)
    a = acc.empty(256, dtype="uint8", device=dev)
    b = acc.empty(256, dtype="uint8", device=dev)
    assert abs(a.data_ptr() - b.data_ptr()) == 512   # default pool: one split segment
    memory.caching_allocator_delete(p)


def test_arrays_in_a_no_split_pool_and_release(dev: str) -> None:
    whole = memory.MemPool(no_split=True)
    with memory.use_mem_pool(whole, dev):
        xs = [acc.full(100, i, dtype="int32", device=dev) for i in range(3)]
    assert len(whole.snapshot()) == 3
    assert [x.tolist()[0] for x in xs] == [0, 1, 2]
    reserved = memory.memory_reserved(dev)
    del xs
    acc.synchronize(dev)
    del whole                                          # no pool bookkeeping is left behind
    b, _ = dev.split(":")
    acc.set_current_accelerator(b)
    memory.empty_cache()
    assert memory.memory_reserved(dev) == reserved - 3 * 2 * MiB
