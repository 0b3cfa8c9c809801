"""``backend:cudaMallocAsync``: the device's stream-ordered pool as the allocator (issue 23).

Host-side paths run on the cpu backend's model of the pool, two simulated devices with
asynchronous streams; ordering is shown with gates. The GPU test (skipped without CUDA) runs
the same public path on ``cuda``.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Iterator

import pytest

import accelrt as acc
from accelrt import _backend as registry
from accelrt import backends, memory
from accelrt._handles import StreamHandle
from accelrt.backends.cpu import CpuBackend
from accelrt.memory import _config
from accelrt.memory._allocator import DeviceCachingAllocator, get_allocator
from helpers.gates import Gate
from helpers.registry import malloc_async_backend

_names = itertools.count()
CUDA_REASON = registry.unavailable_reason("cuda")


@pytest.fixture
def pooled() -> Iterator[str]:
    """A fresh two-device cpu backend (asynchronous streams) under backend:cudaMallocAsync."""
    name = f"asyncpool{next(_names)}"
    with malloc_async_backend(name, lambda: CpuBackend(num_devices=2, async_streams=True,
                                                      memory_limit="64MiB", name=name)):
        yield name


# ---------------------------------------------------------------------- the option

def test_backend_option_parses_and_names_its_values() -> None:
    assert _config.parse_config("backend:cudaMallocAsync").backend == "cudaMallocAsync"
    assert _config.parse_config("backend:native").backend == "native"
    with pytest.raises(ValueError, match="options are native and cudaMallocAsync"):
        _config.parse_config("backend:cudaMalloc")


def test_environment_selects_the_pool_for_every_public_call() -> None:
    code = textwrap.dedent("""
        import accelrt as acc
        from accelrt import memory
        x = acc.zeros(1000, device="cpu:0")
        print(memory.get_allocator_backend("cpu"), memory.memory_allocated("cpu:0"))
        del x
        memory.empty_cache()
        print(memory.memory_allocated("cpu:0"), memory.memory_reserved("cpu:0"))
    """)
    env = dict(os.environ, ACCELRT_ALLOC_CONF="backend:cudaMallocAsync",
               ACCELRT_ACCELERATOR="cpu")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["cudaMallocAsync", "4096", "0", "0"]


def test_backend_cannot_change_once_an_allocator_started(pooled: str) -> None:
    with acc.zeros(4, device=f"{pooled}:0"):
        pass
    before = _config.get_config()
    with pytest.raises(ValueError, match="Allocator backend parsed at runtime != allocator "
                                         "backend parsed at load time"):
        memory.set_allocator_settings("backend:native")
    assert _config.get_config() is before


def test_get_allocator_backend(pooled: str) -> None:
    assert memory.get_allocator_backend(pooled) == "cudaMallocAsync"
    from accelrt.memory._malloc_async import MallocAsyncAllocator
    x = acc.empty(16, device=f"{pooled}:1")
    assert isinstance(get_allocator(registry.get_backend(pooled), 1), MallocAsyncAllocator)
    assert memory.get_allocator_backend(pooled) == "cudaMallocAsync"
    del x


def test_a_device_without_a_pool_keeps_the_caching_allocator(pooled: str) -> None:
    import dataclasses

    class NoPool(CpuBackend):
        def capabilities(self, index: int) -> registry.Capabilities:
            return dataclasses.replace(super().capabilities(index), stream_ordered_memory=False)

    name = f"nopool{next(_names)}"
    backends.register(name, lambda: NoPool(name=name))
    assert memory.get_allocator_backend(name) == "native"
    a = get_allocator(registry.get_backend(name), 0)
    assert type(a) is DeviceCachingAllocator
    from accelrt.memory._malloc_async import MallocAsyncAllocator
    with pytest.raises(ValueError, match="stream_ordered_memory=False"):
        MallocAsyncAllocator(registry.get_backend(name), 0)
    backends.unregister(name)


# ---------------------------------------------------------------------- statistics

def test_only_the_pool_counters_are_reported(pooled: str) -> None:
    dev = f"{pooled}:1"
    assert memory.memory_stats(dev) == {}            # not started: empty, as before
    x = acc.zeros(1000, device=dev)                  # 4000 bytes -> one 4096-byte block
    y = acc.zeros(3000, device=dev)                  # 12000 -> 12288
    st = memory.memory_stats(dev)
    assert list(st) == sorted(st)
    assert {k: v for k, v in st.items() if v} == {
        f"{n}.all.{f}": v for n, v in (("allocated_bytes", 16384), ("active_bytes", 16384),
                                       ("reserved_bytes", 16384)) for f in ("current", "peak")}
    assert st.keys() == DeviceCachingAllocator(registry.get_backend("cpu"), 0).stats().keys()
    del x
    assert memory.memory_allocated(dev) == 12288
    assert memory.max_memory_allocated(dev) == 16384
    assert memory.memory_reserved(dev) == 16384      # the pool keeps the block
    memory.reset_peak_memory_stats(dev)              # resets the pool's high-water marks
    assert memory.max_memory_allocated(dev) == 12288
    assert memory.max_memory_reserved(dev) == 16384
    assert memory.memory_allocated(f"{pooled}:0") == 0   # one pool per device
    del y


def test_reset_accumulated_warns_once_and_changes_nothing(pooled: str) -> None:
    from accelrt.memory import _malloc_async
    _malloc_async._warned.discard("For backend:cudaMallocAsync, resetAccumulatedStats has "
                                  "no effect.")
    x = acc.zeros(16, device=f"{pooled}:0")
    before = memory.memory_stats(f"{pooled}:0")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        memory.reset_accumulated_memory_stats(f"{pooled}:0")
        memory.reset_accumulated_memory_stats(f"{pooled}:0")
    assert [str(m.message) for m in w] == [
        "For backend:cudaMallocAsync, resetAccumulatedStats has no effect."]
    assert memory.memory_stats(f"{pooled}:0") == before
    del x


def test_empty_cache_synchronizes_and_trims_every_device(pooled: str) -> None:
    acc.set_current_accelerator(pooled)
    arrays = [acc.zeros(1 << 16, device=f"{pooled}:{i}") for i in (0, 1)]
    del arrays
    assert [memory.memory_reserved(f"{pooled}:{i}") for i in (0, 1)] == [1 << 18, 1 << 18]
    memory.empty_cache()
    assert [memory.memory_reserved(f"{pooled}:{i}") for i in (0, 1)] == [0, 0]
    b = registry.get_backend(pooled)
    assert b.get_memory_info(0)[0] == b.get_memory_info(0)[1]   # given back to the device


# ---------------------------------------------------------------------- stream order

def test_record_stream_defers_the_free_until_the_stream_is_done(pooled: str) -> None:
    b = registry.get_backend(pooled)
    a = get_allocator(b, 1)
    s1, s2 = acc.Stream(f"{pooled}:1"), acc.Stream(f"{pooled}:1")
    gate = Gate()
    with gate:
        b.launch_host_func(1, gate, s2._handle)      # s2 is busy until the gate opens
        p = a.malloc(8192, s1._handle)
        a.record_stream(p, s2._handle)
        a.free(p)
        assert a.memory_allocated() == 0             # the free is requested
        # s1's own later work may reuse memory freed in its order, but this free also waits
        # for s2, so no stream gets the block while s2 is blocked
        q = a.malloc(8192, s1._handle)
        assert q != p
        a.free(q)
        assert a.memory_reserved() == 16384
    s2.synchronize()
    b.synchronize(1)
    r = a.malloc(8192, s1._handle)                   # the free has completed: reused
    assert r in (p, q)
    a.free(r)
    s1.close()
    s2.close()


def test_a_free_is_reused_in_stream_order_only(pooled: str) -> None:
    b = registry.get_backend(pooled)
    a = get_allocator(b, 0)
    s1, s2 = acc.Stream(f"{pooled}:0"), acc.Stream(f"{pooled}:0")
    gate = Gate()
    with gate:
        b.launch_host_func(0, gate, s1._handle)      # the free below waits behind the gate
        p = a.malloc(4096, s1._handle)
        a.free(p)
        assert a.malloc(4096, s2._handle) != p       # another stream: not until it is done
        same = a.malloc(4096, s1._handle)            # the same stream: at once
        assert same == p
        a.free(same)
    s1.synchronize()
    for q in list(a._live):
        a.free(q)
    s1.close()
    s2.close()


def test_record_stream_on_the_creation_stream_warns_once(pooled: str) -> None:
    from accelrt.memory import _malloc_async
    msg = ("Called record_stream on tensor whose original creation stream matches the "
           "recorded stream. This is unnecessary and has no effect.")
    _malloc_async._warned.discard(msg)
    a = get_allocator(registry.get_backend(pooled), 0)
    p = a.malloc(512, 0)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        a.record_stream(p, 0)
        a.record_stream(p, 0)
    assert [str(m.message) for m in w] == [msg]
    with pytest.raises(ValueError, match="not a live stream"):
        a.record_stream(p, 987654)
    a.free(p)
    with pytest.raises(ValueError, match="double free"):
        a.free(p)


# ---------------------------------------------------------------------- limits and errors

def test_memory_fraction_caps_what_is_handed_out(pooled: str) -> None:
    dev = f"{pooled}:0"
    assert memory.get_per_process_memory_fraction(dev) == 1.0
    memory.set_per_process_memory_fraction(0.25, dev)          # 16 MiB of 64 MiB
    assert memory.get_per_process_memory_fraction(dev) == 0.25
    x = acc.empty(8 << 20, dtype="uint8", device=dev)
    with pytest.raises(acc.OutOfMemoryError, match="would exceed allowed memory"):
        acc.empty(10 << 20, dtype="uint8", device=dev)
    del x
    memory.set_per_process_memory_fraction(1.0, dev)


def test_pool_exhaustion_is_out_of_memory(pooled: str) -> None:
    with pytest.raises(acc.OutOfMemoryError, match="Allocation on device 1"):
        acc.empty(65 << 20, dtype="uint8", device=f"{pooled}:1")


def test_unsupported_calls_raise_pytorchs_errors(pooled: str) -> None:
    acc.set_current_accelerator(pooled)
    x = acc.zeros(4, device=f"{pooled}:0")
    with pytest.raises(RuntimeError, match="Calling snapshot with backend:cudaMallocAsync is "
                                           "not meaningful"):
        memory.memory_snapshot()
    with pytest.raises(RuntimeError, match="not meaningful"):
        memory._snapshot(pooled)
    with pytest.raises(RuntimeError, match="cudaMallocAsync does not yet support "
                                           "recordHistory"):
        memory.record_memory_history(device=f"{pooled}:0")
    with pytest.raises(RuntimeError, match="does not yet support attachOutOfMemoryObserver"):
        get_allocator(registry.get_backend(pooled), 0).attach_oom_observer(
            lambda *a: None)
    assert "memory summary" in memory.memory_summary(f"{pooled}:0")
    del x


# ---------------------------------------------------------------------- the cpu pool

def test_cpu_pool_raw_operations() -> None:
    b = CpuBackend(num_devices=2, memory_limit="1MiB", name="rawpool")
    assert b.capabilities(1).stream_ordered_memory
    p = b.mempool_alloc_async(1, 1000, StreamHandle(0))
    assert (b.mempool_get_attribute(1, "used_mem_current"),
            b.mempool_get_attribute(1, "reserved_mem_current")) == (1024, 1024)
    assert b.mempool_get_attribute(0, "reserved_mem_current") == 0
    b.mempool_free_async(1, p, StreamHandle(0))
    with pytest.raises(ValueError, match="already freed"):
        b.mempool_free_async(1, p, StreamHandle(0))
    b.mempool_set_attribute(1, "release_threshold", 2**64 - 1)
    b.synchronize(1)
    assert b.mempool_get_attribute(1, "reserved_mem_current") == 1024   # kept
    big = b.mempool_alloc_async(1, 1 << 20, StreamHandle(0))   # the whole budget: fits
    assert big and b.mempool_get_attribute(1, "reserved_mem_current") == 1 << 20   # (trimmed)
    b.mempool_free_async(1, big, StreamHandle(0))
    assert b.mempool_alloc_async(1, 2 << 20, StreamHandle(0)) == 0   # over the budget
    p = b.mempool_alloc_async(1, 1000, StreamHandle(0))
    b.mempool_free_async(1, p, StreamHandle(0))
    b.mempool_set_attribute(1, "release_threshold", 0)
    b.synchronize(1)                                                     # released at sync
    assert b.mempool_get_attribute(1, "reserved_mem_current") == 0
    assert b.mempool_get_attribute(1, "reserved_mem_high") == 1 << 20
    b.mempool_set_attribute(1, "reserved_mem_high", 0)
    assert b.mempool_get_attribute(1, "reserved_mem_high") == 0
    with pytest.raises(ValueError, match="only be reset"):
        b.mempool_set_attribute(1, "used_mem_high", 5)
    with pytest.raises(ValueError, match="unknown memory pool attribute"):
        b.mempool_get_attribute(1, "size")
    s = b.stream_create(0, 0)
    b.graph_capture_begin(0, s)
    with pytest.raises(acc.DeviceError, match="capturing"):
        b.mempool_alloc_async(0, 64, s)
    b.graph_destroy(0, b.graph_capture_end(0, s))
    b.stream_destroy(0, s)
    b.close()


# ---------------------------------------------------------------------- on a GPU

@pytest.mark.skipif(CUDA_REASON is not None, reason=f"needs a CUDA GPU: {CUDA_REASON}")
def test_cuda_malloc_async_on_the_gpu() -> None:
    code = textwrap.dedent("""
        import accelrt as acc
        from accelrt import memory
        assert memory.get_allocator_backend("cuda") == "cudaMallocAsync"
        s = acc.Stream("cuda:0")
        with s:
            x = acc.full(1 << 20, 3, dtype="float32", device="cuda:0")
        assert memory.memory_allocated("cuda:0") >= 4 << 20
        st = memory.memory_stats("cuda:0")
        assert st["reserved_bytes.all.current"] >= st["allocated_bytes.all.current"] > 0
        assert st["num_alloc_retries"] == 0 and st["allocation.all.current"] == 0
        x.record_stream(acc.current_stream("cuda:0"))
        assert float(x.sum()) == 3 * (1 << 20)
        del x
        acc.synchronize("cuda:0")
        assert memory.memory_allocated("cuda:0") == 0
        memory.reset_peak_memory_stats("cuda:0")
        assert memory.max_memory_allocated("cuda:0") == 0
        acc.set_current_accelerator("cuda")
        memory.empty_cache()
        assert memory.memory_reserved("cuda:0") == 0
        try:
            memory.memory_snapshot()
        except RuntimeError as e:
            assert "not meaningful" in str(e)
        else:
            raise AssertionError("snapshot did not raise")
        s.close()
        print("ok")
    """)
    env = dict(os.environ, ACCELRT_ALLOC_CONF="backend:cudaMallocAsync")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
