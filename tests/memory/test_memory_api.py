"""The public accelrt.memory functions: PyTorch's names, signatures and semantics."""

from __future__ import annotations

import collections
import gc
import inspect
import threading

import pytest

import accelrt as acc
from accelrt import BackendUnavailableError, OutOfMemoryError, backends, memory
from accelrt.memory import _config

MiB = 1 << 20
GiB = 1 << 30

SIZE_STATS = ("allocated_bytes", "reserved_bytes", "active_bytes", "inactive_split_bytes",
              "requested_bytes")
COUNT_STATS = ("allocation", "segment", "active", "inactive_split")


def test_signatures_match_pytorch() -> None:
    pos_only = ("memory_stats", "memory_stats_as_nested_dict", "memory_allocated",
                "max_memory_allocated", "memory_reserved", "max_memory_reserved",
                "reset_peak_memory_stats", "reset_accumulated_memory_stats", "get_memory_info")
    for name in pos_only:
        (param,) = inspect.signature(getattr(memory, name)).parameters.values()
        assert param.name == "device" and param.default is None
        assert param.kind is inspect.Parameter.POSITIONAL_ONLY, name
    params = inspect.signature(memory.record_memory_history).parameters
    assert list(params) == ["enabled", "context", "stacks", "max_entries", "device",
                            "clear_history", "compile_context", "global_record_annotations",
                            "skip_actions", "record_pinned_host_memory",
                            "record_cuda"]   # torch 2.14's _record_memory_history_impl
    assert list(inspect.signature(memory._snapshot).parameters) == [
        "device", "augment_with_fx_traces"]
    assert list(inspect.signature(memory.dump_snapshot).parameters) == [
        "filename", "augment_with_fx_traces"]
    assert list(inspect.signature(memory.caching_allocator_alloc).parameters) == [
        "size", "device", "stream"]
    assert list(inspect.signature(memory.memory_summary).parameters) == ["device", "abbreviated"]


def test_top_level_reexports() -> None:
    for name in ("memory_stats", "memory_allocated", "empty_cache", "MemPool", "use_mem_pool",
                 "host_memory_stats", "memory_summary"):
        assert getattr(acc, name) is getattr(memory, name)
    assert memory.set_allocator_settings is _config.set_allocator_settings
    assert memory.get_allocator_settings is _config.get_allocator_settings


def test_getters_before_the_allocator_starts(dev: str) -> None:
    d = f"{dev}:0"
    assert memory.memory_stats(d) == collections.OrderedDict()
    assert memory.memory_stats_as_nested_dict(d) == {}
    for fn in (memory.memory_allocated, memory.max_memory_allocated, memory.memory_reserved,
               memory.max_memory_reserved):
        assert fn(d) == 0
    memory.reset_peak_memory_stats(d)
    memory.reset_accumulated_memory_stats(d)
    memory.record_memory_history(None, device=d)
    assert memory._allocator.peek_allocator(dev, 0) is None     # nothing was started
    assert "Allocated memory      |      0 B" in memory.memory_summary(d)


def test_stats_keys_values_and_getters(dev: str) -> None:
    d = f"{dev}:1"
    big = memory.caching_allocator_alloc(3 * MiB, d)
    small = memory.caching_allocator_alloc(1000, d)
    st = memory.memory_stats(d)
    assert isinstance(st, collections.OrderedDict) and list(st) == sorted(st)
    for name in SIZE_STATS + COUNT_STATS:
        for pool in ("all", "small_pool", "large_pool"):
            for col in ("current", "peak", "allocated", "freed"):
                assert f"{name}.{pool}.{col}" in st
    for key in ("num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc",
                "num_device_free", "oversize_allocations.current", "oversize_segments.peak"):
        assert key in st
    assert st["max_split_size"] == -1
    assert st["allocated_bytes.all.current"] == 3 * MiB + 1024
    assert st["reserved_bytes.all.current"] == 22 * MiB
    assert st["requested_bytes.small_pool.current"] == 1000
    assert memory.memory_allocated(d) == st["allocated_bytes.all.current"]
    assert memory.memory_reserved(d) == 22 * MiB
    nested = memory.memory_stats_as_nested_dict(d)
    assert nested["allocated_bytes"]["large_pool"]["current"] == 3 * MiB
    assert nested["num_device_alloc"] == 2
    assert memory.memory_stats(d1 := f"{dev}:0") == {}            # the other device: untouched
    assert memory.memory_allocated(d1) == 0
    memory.caching_allocator_delete(big)
    assert memory.memory_allocated(d) == 1024
    assert memory.max_memory_allocated(d) == 3 * MiB + 1024
    memory.reset_peak_memory_stats(d)
    assert memory.max_memory_allocated(d) == 1024
    assert memory.max_memory_reserved(d) == 22 * MiB
    memory.reset_accumulated_memory_stats(d)
    st = memory.memory_stats(d)
    assert st["allocated_bytes.all.allocated"] == 0 and st["allocated_bytes.all.freed"] == 0
    assert st["num_device_alloc"] == 0 and st["allocated_bytes.all.current"] == 1024
    memory.caching_allocator_delete(small)


def test_int_and_none_devices_use_the_current_accelerator(current: str) -> None:
    p = memory.caching_allocator_alloc(512)
    assert memory.memory_allocated() == 512 == memory.memory_allocated(0)
    assert memory.memory_allocated(1) == 0
    with acc.device_index(1):
        assert memory.memory_allocated() == 0
        q = memory.caching_allocator_alloc(512)
    assert memory.memory_allocated(f"{current}:1") == 512
    memory.caching_allocator_delete(p)
    memory.caching_allocator_delete(q)


def test_deprecated_resets_warn(dev: str) -> None:
    d = f"{dev}:0"
    memory.caching_allocator_delete(memory.caching_allocator_alloc(4 * MiB, d))
    with pytest.warns(FutureWarning, match="reset_peak_memory_stats"):
        memory.reset_max_memory_allocated(d)
    assert memory.max_memory_allocated(d) == 0
    with pytest.warns(FutureWarning):
        memory.reset_max_memory_cached(d)


def test_get_memory_info(dev: str) -> None:
    free, total = memory.get_memory_info(f"{dev}:0")
    assert (free, total) == (GiB, GiB)
    p = memory.caching_allocator_alloc(1000, f"{dev}:0")
    assert memory.get_memory_info(f"{dev}:0") == (GiB - 2 * MiB, GiB)   # cached counts as used
    memory.caching_allocator_delete(p)


def test_bad_devices(dev: str) -> None:
    with pytest.raises(BackendUnavailableError):
        memory.memory_stats("nosuchbackend:0")
    with pytest.raises(IndexError):
        memory.memory_allocated(f"{dev}:2")
    with pytest.raises(IndexError):
        memory.caching_allocator_alloc(16, f"{dev}:9")
    with pytest.raises(TypeError):
        memory.memory_reserved(1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        memory.memory_stats("cpu:x")
    with pytest.raises(ValueError):
        memory.get_memory_info(-2)   # -1 is the current device, as in torch (s26)


def test_summary_uses_the_device(dev: str) -> None:
    d = f"{dev}:1"
    p = memory.caching_allocator_alloc(3 * MiB, d)
    text = memory.memory_summary(d)
    assert f"accelrt {dev.upper()} memory summary, device ID 1" in text
    assert "| Allocated memory      |   3072 KiB |" in text
    assert len(memory.memory_summary(d, abbreviated=True).splitlines()) == 29
    memory.caching_allocator_delete(p)


def test_memory_fraction(dev: str) -> None:
    d = f"{dev}:0"
    for bad in (1, "0.5", None):
        with pytest.raises(TypeError, match="must be `float`"):
            memory.set_per_process_memory_fraction(bad, d)  # type: ignore[arg-type]
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="Allowed range: 0~1"):
            memory.set_per_process_memory_fraction(bad, d)
    assert memory.get_per_process_memory_fraction(d) == 1.0
    memory.set_per_process_memory_fraction(0.25, d)
    assert memory.get_per_process_memory_fraction(d) == 0.25
    p = memory.caching_allocator_alloc(200 * MiB, d)
    with pytest.raises(OutOfMemoryError):
        memory.caching_allocator_alloc(100 * MiB, d)       # 300 MiB > 256 MiB allowed
    assert memory.memory_stats(d)["num_ooms"] == 1
    memory.set_per_process_memory_fraction(1.0, d)
    q = memory.caching_allocator_alloc(100 * MiB, d)
    memory.caching_allocator_delete(p)
    memory.caching_allocator_delete(q)


def test_caching_allocator_alloc_and_delete(dev: str) -> None:
    d = f"{dev}:0"
    assert memory.caching_allocator_alloc(0, d) == 0
    memory.caching_allocator_delete(0)
    with pytest.raises(TypeError):
        memory.caching_allocator_alloc(1.5, d)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        memory.caching_allocator_alloc(-1, d)
    with pytest.raises(TypeError, match="stream argument"):
        memory.caching_allocator_alloc(16, d, stream="s")
    p = memory.caching_allocator_alloc(16, d)
    with pytest.raises(ValueError, match="not returned by caching_allocator_alloc"):
        memory.caching_allocator_delete(p + 512)            # a foreign pointer
    memory.caching_allocator_delete(p)
    with pytest.raises(ValueError, match="already deleted"):
        memory.caching_allocator_delete(p)                  # double delete
    with pytest.raises(TypeError):
        memory.caching_allocator_delete("p")  # type: ignore[arg-type]
    assert memory.memory_allocated(d) == 0


def test_caching_allocator_alloc_streams(dev: str) -> None:
    s0 = acc.Stream(f"{dev}:0")
    s1 = acc.Stream(f"{dev}:1")
    p = memory.caching_allocator_alloc(4096, stream=s1)      # device taken from the stream
    assert memory.memory_allocated(f"{dev}:1") == 4096
    with pytest.raises(ValueError, match="pass the stream's device"):
        memory.caching_allocator_alloc(4096, f"{dev}:0", stream=s1)
    q = memory.caching_allocator_alloc(4096, f"{dev}:0", stream=s0)
    r = memory.caching_allocator_alloc(4096, f"{dev}:0", stream=s0._handle)   # a raw handle
    seg_streams = {s["stream"] for s in memory._snapshot(dev)["segments"]}
    assert seg_streams == {s0._handle, s1._handle}
    for x in (p, q, r):
        memory.caching_allocator_delete(x)


def test_empty_cache_releases_every_started_device(current: str) -> None:
    for i in (0, 1):
        memory.caching_allocator_delete(memory.caching_allocator_alloc(3 * MiB, i))
        assert memory.memory_reserved(i) == 20 * MiB
    keep = memory.caching_allocator_alloc(3 * MiB, 0)
    memory.empty_cache()
    assert memory.memory_reserved(1) == 0
    assert memory.memory_reserved(0) == 20 * MiB             # holds a live allocation
    assert memory.memory_stats(1)["num_device_free"] == 1
    memory.caching_allocator_delete(keep)
    memory.empty_cache()
    assert memory.memory_reserved(0) == 0


def test_record_memory_history(current: str) -> None:
    memory.record_memory_history(max_entries=3)             # every device of the accelerator
    for i in (0, 1):
        memory.caching_allocator_delete(memory.caching_allocator_alloc(512, i))
    traces = memory._snapshot()["device_traces"]
    assert [len(t) for t in traces] == [3, 3]                # ring buffer of 3 (+ snapshot)
    memory.record_memory_history(device=0, clear_history=True,
                                 skip_actions=["free_requested", "snapshot"])
    memory.caching_allocator_delete(memory.caching_allocator_alloc(512, 0))
    actions = [e["action"] for e in memory._snapshot()["device_traces"][0]]
    assert "free_requested" not in actions and "alloc" in actions
    memory.record_memory_history(None)
    assert memory._snapshot()["device_traces"] == [[], []]
    with pytest.raises(ValueError):
        memory.record_memory_history("everything")
    with pytest.raises(ValueError):
        memory.record_memory_history(context="stack")
    with pytest.raises(ValueError):
        memory.record_memory_history(stacks="cpp")
    with pytest.raises(TypeError):
        memory.record_memory_history(max_entries=-1)          # PyTorch's size_t: TypeError
    with pytest.raises(TypeError):
        memory.record_memory_history(max_entries=2.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="skip_actions"):
        memory.record_memory_history(skip_actions="alloc")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown trace actions"):
        memory.record_memory_history(skip_actions=["allocate"])


def test_mem_pool_routes_allocations(dev: str) -> None:
    d = f"{dev}:0"
    pool = memory.MemPool()
    other = memory.MemPool()
    assert pool.id != other.id and isinstance(pool.id, tuple) and len(pool.id) == 2
    assert pool.use_count() == 1 and pool.allocator is None
    with memory.use_mem_pool(pool, d):
        assert pool.use_count() == 2
        p = memory.caching_allocator_alloc(MiB, d)
        seen = []
        t = threading.Thread(target=lambda: seen.append(memory.caching_allocator_alloc(MiB, d)))
        t.start()
        t.join()
    assert pool.use_count() == 1
    q = memory.caching_allocator_alloc(MiB, d)
    owners = {b["address"]: s["segment_pool_id"] for s in memory._snapshot(dev)["segments"]
              for b in s["blocks"] if b["state"] == "active_allocated"}
    assert owners[p] == pool.id
    assert owners[q] == (0, 0) and owners[seen[0]] == (0, 0)  # other thread: not routed
    memory.caching_allocator_delete(p)
    reserved = memory.memory_reserved(d)
    del pool
    gc.collect()                                             # the pool's cache is released
    assert memory.memory_reserved(d) == reserved - 2 * MiB
    memory.caching_allocator_delete(q)
    memory.caching_allocator_delete(seen[0])


def test_mem_pool_bad_arguments(dev: str) -> None:
    with pytest.raises(TypeError):
        memory.MemPool(allocator=object())
    with pytest.raises(TypeError):     # (use_on_oom=True works: test_mempool_use_on_oom.py)
        memory.MemPool(use_on_oom="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        with memory.use_mem_pool("pool", f"{dev}:0"):  # type: ignore[arg-type]
            pass
    pool = memory.MemPool()
    with memory.use_mem_pool(pool, f"{dev}:0"):
        with pytest.raises(RuntimeError):
            with memory.use_mem_pool(pool, f"{dev}:0"):
                pass
    assert pool.use_count() == 1


def test_host_memory_functions(current: str) -> None:
    assert memory.host_memory_stats() == collections.OrderedDict()
    memory.empty_host_cache()                                # no pool yet: a no-op
    from accelrt.memory._host import get_host_allocator
    pool = get_host_allocator(backends.get_backend(current))
    pool.free(pool.malloc(3000))
    st = memory.host_memory_stats()
    assert list(st) == sorted(st)
    assert st["allocated_bytes.current"] == 4096 and st["active_bytes.current"] == 0
    assert st["num_host_alloc"] == 1
    memory.empty_host_cache()
    st = memory.host_memory_stats()
    assert st["num_host_free"] == 1 and st["allocated_bytes.current"] == 0
    assert st["allocated_bytes.peak"] == 4096
    memory.reset_peak_host_memory_stats()
    assert memory.host_memory_stats()["allocated_bytes.peak"] == 0
    memory.reset_accumulated_host_memory_stats()
    st = memory.host_memory_stats()
    assert st["num_host_alloc"] == 0 and st["allocated_bytes.allocated"] == 0


def test_allocator_settings_roundtrip() -> None:
    old = memory.get_allocator_settings()
    try:
        memory.set_allocator_settings("max_split_size_mb:64")
        assert memory.get_allocator_settings() == "max_split_size_mb:64"
        assert memory._snapshot("cpu")["allocator_settings"]["max_split_size"] == 64 * MiB
        with pytest.raises(ValueError, match="Unrecognized key"):
            memory.set_allocator_settings("bogus:1")
        with pytest.raises(TypeError):
            memory.set_allocator_settings(64)  # type: ignore[arg-type]
    finally:
        memory.set_allocator_settings(old)


def test_public_names_sorted_and_documented() -> None:
    assert list(memory.__all__) == sorted(set(memory.__all__))
    for name in memory.__all__:
        obj = getattr(memory, name)
        assert inspect.getdoc(obj), name
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if not attr.startswith("_") and (inspect.isfunction(member)
                                                 or isinstance(member, property)):
                    assert inspect.getdoc(member), f"{name}.{attr}"
