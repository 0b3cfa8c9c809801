"""Review by tests of the public memory API (issue 24): hostile arguments, odd call orders and
the statistics invariants after each, for ``accelrt.memory`` and the device modules' memory
functions. Expected errors follow PyTorch's ``torch/cuda/memory.py`` and its caching allocator
where accelrt keeps them (a wrong type is a ``TypeError``, a wrong value a ``ValueError``; see
docs/differences.md for where accelrt's error differs from PyTorch's ``RuntimeError``)."""

from __future__ import annotations

import gc
import math
import subprocess
import sys
import textwrap
from typing import Any

import pytest

import accelrt as acc
from accelrt import OutOfMemoryError, memory
from accelrt.memory import _history

MiB = 1 << 20
GiB = 1 << 30

#: PyTorch's flat ``memory_stats`` keys without private pools (torch 2.14).
_ARRAYS = ("allocation", "segment", "active", "inactive_split", "allocated_bytes",
           "reserved_bytes", "active_bytes", "inactive_split_bytes", "requested_bytes")
_FIELDS = ("current", "peak", "allocated", "freed")
TORCH_KEYS = frozenset(
    [f"{a}.{t}.{f}" for a in _ARRAYS for t in ("all", "small_pool", "large_pool")
     for f in _FIELDS]
    + [f"{a}.{f}" for a in ("oversize_allocations", "oversize_segments") for f in _FIELDS]
    + ["num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc",
       "num_device_free", "max_split_size", "num_oom_rejections"])


def check_invariants(device: str) -> dict[str, int]:
    """The statistics invariants of one device; returns its flat stats."""
    flat = memory.memory_stats(device)
    if not flat:
        return {}
    # PyTorch 2.14's per-private-pool reserved bytes: one entry per pool that held a segment
    private = {k: v for k, v in flat.items() if k.startswith("reserved_bytes_by_private_pools.")}
    assert set(flat) - set(private) == TORCH_KEYS
    pools = {k.split(".")[1] for k in private}
    assert set(private) == {f"reserved_bytes_by_private_pools.{p}.{t}.{f}" for p in pools
                            for t in ("all", "small_pool", "large_pool") for f in _FIELDS}
    for t in ("all", "small_pool", "large_pool"):
        assert sum(private[f"reserved_bytes_by_private_pools.{p}.{t}.current"]
                   for p in pools) <= flat[f"reserved_bytes.{t}.current"]
    assert list(flat) == sorted(flat)
    for key, value in flat.items():
        assert type(value) is int, key
        if key != "max_split_size":
            assert value >= 0, (key, value)
        if key.endswith(".current"):
            assert value <= flat[key[:-len("current")] + "peak"], key
    for t in ("all", "small_pool", "large_pool"):
        assert flat[f"allocated_bytes.{t}.current"] <= flat[f"active_bytes.{t}.current"]
        assert flat[f"active_bytes.{t}.current"] <= flat[f"reserved_bytes.{t}.current"]
        assert flat[f"requested_bytes.{t}.current"] <= flat[f"active_bytes.{t}.current"]
    for a in [*_ARRAYS, *(f"reserved_bytes_by_private_pools.{p}" for p in pools)]:
        for f in ("current", "allocated", "freed"):
            assert flat[f"{a}.all.{f}"] == (flat[f"{a}.small_pool.{f}"]
                                            + flat[f"{a}.large_pool.{f}"]), (a, f)
    assert memory.memory_allocated(device) == flat["allocated_bytes.all.current"]
    assert memory.memory_reserved(device) == flat["reserved_bytes.all.current"]
    assert memory.max_memory_allocated(device) == flat["allocated_bytes.all.peak"]
    assert memory.max_memory_reserved(device) == flat["reserved_bytes.all.peak"]
    nested = memory.memory_stats_as_nested_dict(device)
    for key, value in flat.items():
        node: Any = nested
        parts: list[Any] = key.split(".")
        if parts[0] == "reserved_bytes_by_private_pools":   # keyed by pool id, as PyTorch's
            parts[1] = tuple(int(x) for x in parts[1].split("_"))
        for part in parts:
            node = node[part]
        assert node == value, key
    assert sum(1 for _ in _leaves(nested)) == len(flat)
    assert "reserved_bytes_by_private_pools" in nested
    return dict(flat)


def _leaves(d: dict[str, Any]) -> Any:
    for v in d.values():
        if isinstance(v, dict):
            yield from _leaves(v)
        else:
            yield v


# ---------------------------------------------------------------------- fraction

@pytest.mark.parametrize("fraction, error", [
    (-0.1, ValueError), (1.5, ValueError), (math.nan, ValueError), (math.inf, ValueError),
    (-math.inf, ValueError), (True, TypeError), ("0.5", TypeError), (1, TypeError),
    (None, TypeError), (0, TypeError)])
def test_fraction_hostile_values(dev: str, fraction: Any, error: type[Exception]) -> None:
    d = f"{dev}:0"
    with pytest.raises(error):
        memory.set_per_process_memory_fraction(fraction, d)
    with pytest.raises(error):
        acc.backends.device_module(dev).set_per_process_memory_fraction(fraction, 0)
    assert memory.get_per_process_memory_fraction(d) == 1.0     # unchanged


@pytest.mark.parametrize("device", ["cpu:99", "nosuchbackend:0", f"{'x' * 3}:-1", 1.0,
                                    True, "cpu:1.5", "cpu:+1", " cpu:0"])
def test_fraction_and_getters_hostile_devices(device: Any) -> None:
    for fn in (memory.memory_stats, memory.memory_allocated, memory.max_memory_reserved,
               memory.reset_peak_memory_stats, memory.reset_accumulated_memory_stats,
               memory.get_memory_info, memory.memory_summary,
               memory.get_per_process_memory_fraction):
        with pytest.raises((TypeError, ValueError, RuntimeError)):
            fn(device)
    with pytest.raises((TypeError, ValueError, RuntimeError)):
        memory.set_per_process_memory_fraction(0.5, device)
    with pytest.raises((TypeError, ValueError, RuntimeError)):
        memory.caching_allocator_alloc(512, device)


def test_device_module_refuses_other_backends_device(dev: str) -> None:
    dm = acc.backends.device_module(dev)
    for call in (lambda: dm.memory_stats("cpu:0"), lambda: dm.reset_peak_memory_stats("cpu:0"),
                 lambda: dm.set_per_process_memory_fraction(0.5, "cpu:0"),
                 lambda: dm.caching_allocator_alloc(512, "cpu:0"),
                 lambda: dm.mem_get_info("cpu:0"), lambda: dm.memory_summary(-1),
                 lambda: dm.memory_stats(5)):
        with pytest.raises((ValueError, IndexError)):
            call()


def test_fraction_below_current_usage_then_malloc(current: str) -> None:
    dev = current
    d = f"{dev}:0"
    live = [memory.caching_allocator_alloc(30 * MiB, d) for _ in range(2)]
    reserved = memory.memory_reserved(d)
    memory.set_per_process_memory_fraction(0.01, d)             # 10 MiB < 60 MiB in use
    assert memory.memory_reserved(d) == reserved                 # nothing live is taken back
    with pytest.raises(OutOfMemoryError, match="allowed"):
        memory.caching_allocator_alloc(30 * MiB, d)
    flat = check_invariants(d)
    assert flat["num_ooms"] == 1 and flat["allocation.all.current"] == 2
    memory.set_per_process_memory_fraction(0.0, d)               # nothing at all
    with pytest.raises(OutOfMemoryError, match="0 bytes allowed"):
        memory.caching_allocator_alloc(512, d)
    memory.set_per_process_memory_fraction(1.0, d)
    p = memory.caching_allocator_alloc(30 * MiB, d)
    for q in [*live, p]:
        memory.caching_allocator_delete(q)
    check_invariants(d)
    memory.empty_cache()
    assert memory.memory_reserved(d) == 0


# ---------------------------------------------------------------------- raw alloc / delete

@pytest.mark.parametrize("size, error", [
    (-1, ValueError), (-(2 ** 70), ValueError), (1.0, TypeError), (1.5, TypeError),
    (True, TypeError), ("512", TypeError), (None, TypeError), (2 ** 60, OutOfMemoryError),
    (2 ** 200, OutOfMemoryError), (2 * GiB, OutOfMemoryError)])
def test_alloc_hostile_sizes(dev: str, size: Any, error: type[Exception]) -> None:
    d = f"{dev}:0"
    with pytest.raises(error):
        memory.caching_allocator_alloc(size, d)
    assert memory.caching_allocator_alloc(0, d) == 0             # 0: null, nothing recorded
    memory.caching_allocator_delete(0)
    flat = check_invariants(d)
    assert flat.get("allocation.all.allocated", 0) == 0


def test_delete_hostile_pointers(dev: str) -> None:
    d0, d1 = f"{dev}:0", f"{dev}:1"
    p = memory.caching_allocator_alloc(4096, d0)
    with pytest.raises(ValueError):
        memory.caching_allocator_delete(p + 512)                 # inside the block
    memory.caching_allocator_delete(p)
    with pytest.raises(ValueError):
        memory.caching_allocator_delete(p)                       # freed twice
    for bad in (12345, -1, 2 ** 200):
        with pytest.raises(ValueError):
            memory.caching_allocator_delete(bad)                 # never allocated
    for bad in (None, 1.0, "0x10", True):
        with pytest.raises(TypeError):
            memory.caching_allocator_delete(bad)
    x = acc.zeros(256, device="cpu:0")
    with pytest.raises(ValueError):
        memory.caching_allocator_delete(x.data_ptr())            # an array's: never here
    assert x.numpy().sum() == 0                                  # and still valid
    del x
    q = memory.caching_allocator_alloc(512, d1)
    with pytest.raises(ValueError, match="allocated on"):
        acc.cpu.caching_allocator_delete(q)                      # another backend's pointer
    acc.backends.device_module(dev).caching_allocator_delete(q)  # the device's own module
    check_invariants(d0)
    check_invariants(d1)
    assert memory.memory_allocated(d0) == memory.memory_allocated(d1) == 0


def test_alloc_hostile_streams(dev: str) -> None:
    d0, d1 = f"{dev}:0", f"{dev}:1"
    s1 = acc.Stream(d1)
    with pytest.raises(ValueError, match="belongs to"):
        memory.caching_allocator_alloc(512, d0, s1)              # a stream of another device
    other = acc.Stream("cpu:0")
    with pytest.raises(ValueError, match="belongs to"):
        memory.caching_allocator_alloc(512, d0, other)           # ... of another backend
    p = memory.caching_allocator_alloc(512, None, s1)            # device: the stream's
    assert memory.memory_allocated(d1) == 512
    memory.caching_allocator_delete(p)
    for bad in ("s", 1.0, True, object()):
        with pytest.raises(TypeError):
            memory.caching_allocator_alloc(512, d0, bad)
    for handle in (0x7FFF_0000_1234, -5):     # (the simulated backend takes any handle >= 0)
        with pytest.raises(ValueError, match="not a live stream handle"):
            memory.caching_allocator_alloc(512, "cpu:0", handle)
    s1.close()
    other.close()
    with pytest.raises(acc.ClosedError):
        memory.caching_allocator_alloc(512, d1, s1)
    with pytest.raises(acc.ClosedError):
        memory.caching_allocator_alloc(512, None, s1)
    check_invariants(d0)
    check_invariants(d1)
    assert memory.memory_allocated(d0) == memory.memory_allocated(d1) == 0


# ---------------------------------------------------------------------- statistics resets

def test_resets_while_blocks_are_live(current: str) -> None:
    dev = current
    d = f"{dev}:0"
    live = [memory.caching_allocator_alloc(n, d) for n in (1000, 3 * MiB, 30 * MiB)]
    memory.caching_allocator_delete(live.pop())
    memory.reset_peak_memory_stats(d)
    flat = check_invariants(d)
    assert flat["allocated_bytes.all.peak"] == flat["allocated_bytes.all.current"]
    memory.reset_accumulated_memory_stats(d)
    flat = check_invariants(d)
    assert flat["allocation.all.allocated"] == flat["allocation.all.freed"] == 0
    assert flat["allocation.all.current"] == 2 and flat["num_device_alloc"] == 0
    with pytest.warns(FutureWarning):
        memory.reset_max_memory_allocated(d)
    for p in live:
        memory.caching_allocator_delete(p)
    flat = check_invariants(d)
    assert flat["allocation.all.freed"] == 2 and flat["allocation.all.current"] == 0
    memory.empty_cache()
    flat = check_invariants(d)
    assert flat["segment.all.current"] == 0 and flat["reserved_bytes.all.current"] == 0


def test_getters_and_resets_before_any_allocation(dev: str) -> None:
    d = f"{dev}:1"
    memory.reset_peak_memory_stats(d)
    memory.reset_accumulated_memory_stats(d)
    assert memory.memory_stats(d) == {} and memory.memory_stats_as_nested_dict(d) == {}
    assert memory.memory_allocated(d) == 0 and memory.max_memory_reserved(d) == 0
    assert "device ID 1" in memory.memory_summary(d)


# ---------------------------------------------------------------------- private pools

def test_use_mem_pool_in_odd_orders(current: str) -> None:
    dev = current
    d = f"{dev}:0"
    a, b = memory.MemPool(), memory.MemPool()
    with memory.use_mem_pool(a, d):
        with pytest.raises(RuntimeError):
            with memory.use_mem_pool(a, d):                      # nested: PyTorch refuses too
                pass
        assert a.use_count() == 2
        with memory.use_mem_pool(b, d):
            with pytest.raises(RuntimeError):
                with memory.use_mem_pool(a, d):                  # A in B in A
                    pass
            pb = memory.caching_allocator_alloc(MiB, d)
            memory.empty_cache()                                 # inside: keeps b's block
        pa = memory.caching_allocator_alloc(MiB, d)
    assert a.use_count() == b.use_count() == 1
    owners = {bl["address"]: s["segment_pool_id"] for s in memory._snapshot(dev)["segments"]
              for bl in s["blocks"] if bl["state"] == "active_allocated"}
    assert owners == {pa: a.id, pb: b.id}
    with pytest.raises(KeyError):
        with memory.use_mem_pool(a, d):
            raise KeyError("inside")
    assert a.use_count() == 1
    check_invariants(d)
    memory.caching_allocator_delete(pa)
    memory.caching_allocator_delete(pb)
    with memory.use_mem_pool(a, d):
        memory.empty_cache()                                     # a in use: its cache stays
    assert [s["segment_pool_id"] for s in a.snapshot()] == [a.id]
    del a, b
    gc.collect()
    memory.empty_cache()
    flat = check_invariants(d)
    assert flat["reserved_bytes.all.current"] == 0 and flat["segment.all.current"] == 0


def test_mem_pool_dropped_while_in_use(current: str) -> None:
    dev = current
    d = f"{dev}:0"
    pool = memory.MemPool()
    pid = pool.id
    ctx = memory.use_mem_pool(pool, d)
    ctx.__enter__()
    del pool
    gc.collect()                         # the open context still holds the pool
    p = memory.caching_allocator_alloc(MiB, d)
    ctx.__exit__(None, None, None)
    del ctx
    gc.collect()                         # now collected: its cache goes, the block stays
    segs = memory.memory_snapshot(mempool_id=pid)
    assert [bl["state"] for s in segs for bl in s["blocks"]] == ["active_allocated", "inactive"]
    memory.caching_allocator_delete(p)
    memory.empty_cache()
    assert memory.memory_reserved(d) == 0
    check_invariants(d)


def test_mem_pool_hostile_arguments(dev: str) -> None:
    with pytest.raises(TypeError):
        memory.use_mem_pool(None, f"{dev}:0").__enter__()        # type: ignore[arg-type]
    # (use_on_oom=1 and no_split=1 are taken, as torch 2.15's bool binding takes them)
    with pytest.raises(TypeError):
        memory.MemPool(use_on_oom="yes")                         # type: ignore[arg-type]
    with pytest.raises(TypeError):
        memory.MemPool(no_split=[1])                             # type: ignore[arg-type]
    with pytest.raises(TypeError):
        memory.MemPool(allocator="libx.so")                      # type: ignore[arg-type]
    with pytest.raises(TypeError):
        memory.MemPool().snapshot(include_traces=1)              # type: ignore[arg-type]


@pytest.mark.parametrize("mempool_id", [(1,), "ab", 5, (1.0, 2), (True, 1)])
def test_memory_snapshot_mempool_id_checked_everywhere(current: str, mempool_id: Any) -> None:
    """The device modules' memory_snapshot checks mempool_id as accelrt.memory's does (it
    returned [] for ``(1,)``/``"ab"`` and a bare "'int' object is not iterable" for 5); as
    torch 2.15, a 3-tuple's first two items are the id (session 41)."""
    words = "mempool_id must be a pair of ints|mempool_id elements must be integers"
    with pytest.raises(TypeError, match=words):
        memory.memory_snapshot(mempool_id)
    with pytest.raises(TypeError, match=words):
        acc.backends.device_module(current).memory_snapshot(mempool_id)


def test_memory_snapshot_mempool_id_filters(current: str) -> None:
    pool = memory.MemPool()
    with memory.use_mem_pool(pool, f"{current}:0"):
        p = memory.caching_allocator_alloc(MiB, f"{current}:0")
    q = memory.caching_allocator_alloc(MiB, f"{current}:0")
    dm = acc.backends.device_module(current)
    for pid in (pool.id, list(pool.id)):
        assert [s["segment_pool_id"] for s in dm.memory_snapshot(pid)] == [pool.id]
        assert [s["segment_pool_id"] for s in memory.memory_snapshot(pid)] == [pool.id]
    # (0, 0) is every pool's segments, as torch's memory_snapshot(None) passes (0, 0)
    assert dm.memory_snapshot((0, 0)) == dm.memory_snapshot()
    assert sorted(s["segment_pool_id"] for s in dm.memory_snapshot((0, 0))) == [(0, 0), pool.id]
    assert dm.memory_snapshot((7, 7)) == []
    memory.caching_allocator_delete(p)
    memory.caching_allocator_delete(q)


# ---------------------------------------------------------------------- history

@pytest.mark.parametrize("kwargs, error", [
    ({"enabled": "bogus"}, ValueError), ({"enabled": ""}, ValueError),
    ({"enabled": 1}, TypeError), ({"enabled": ["all"]}, TypeError),
    ({"stacks": "cpp"}, ValueError), ({"stacks": "bogus"}, ValueError),
    ({"stacks": None}, TypeError), ({"stacks": 1}, TypeError),
    ({"context": "bogus"}, ValueError), ({"context": 1}, TypeError),
    ({"context": ["all"]}, TypeError), ({"context": {}}, TypeError),
    ({"max_entries": -1}, TypeError), ({"max_entries": 2 ** 64}, TypeError),
    ({"max_entries": 1.0}, TypeError), ({"max_entries": None}, TypeError),
    ({"skip_actions": 5}, TypeError), ({"skip_actions": "alloc"}, TypeError),
    ({"skip_actions": [1]}, TypeError), ({"skip_actions": ["allocate"]}, ValueError),
    ({"compile_context": True}, ValueError), ({"record_cuda": False}, ValueError)])
def test_record_memory_history_hostile_arguments(dev: str, kwargs: dict[str, Any],
                                                  error: type[Exception]) -> None:
    """Wrong types are a TypeError (PyTorch's binding takes optional strs), unknown values a
    ValueError, and both raise whether or not the device's allocator started (a stop with a
    bad argument used to pass on a fresh device, and an unhashable context raised a bare
    "unhashable type")."""
    d = f"{dev}:0"
    dm = acc.backends.device_module(dev)
    for enabled in (None, "all"):
        args = {"enabled": enabled, **kwargs}
        with pytest.raises(error):
            memory.record_memory_history(**args, device=d)
        with pytest.raises(error):
            dm.memory._record_memory_history(**args)
    memory.caching_allocator_delete(memory.caching_allocator_alloc(512, d))
    with pytest.raises(error):
        memory.record_memory_history(**{"enabled": "all", **kwargs}, device=d)
    assert memory._snapshot(dev)["device_traces"] == [[], []]       # nothing was started


@pytest.mark.parametrize("enabled", ["state", "all", True])
@pytest.mark.parametrize("context", [None, "state", "alloc", "all"])
@pytest.mark.parametrize("stacks", ["python", "all"])
def test_record_memory_history_values(current: str, enabled: Any, context: Any,
                                      stacks: str) -> None:
    dev = current
    d = f"{dev}:0"
    memory.record_memory_history(enabled, context, stacks, device=d)
    p = memory.caching_allocator_alloc(512, d)
    (seg,) = memory._snapshot(dev)["segments"]
    frames = seg["blocks"][0]["frames"]
    assert (frames != []) == (context is not None)
    memory.caching_allocator_delete(p)
    memory.record_memory_history(None, device=d)
    memory.record_memory_history(None, device=d)                 # twice: still a no-op
    memory.record_memory_history(False, device=d)
    assert memory._snapshot(dev)["device_traces"] == [[], []]
    memory.empty_cache()


@pytest.mark.parametrize("max_entries", [0, 1, 2, sys.maxsize, 2 ** 64 - 1])
def test_snapshot_while_recording_small_and_huge_rings(current: str, max_entries: int) -> None:
    dev = current
    """A ring of ``max_entries`` (more than sys.maxsize used to raise OverflowError; PyTorch
    takes any size_t, and 0 is a ring of one entry)."""
    d = f"{dev}:0"
    memory.record_memory_history(max_entries=max_entries, device=d)
    live = [memory.caching_allocator_alloc(512, d) for _ in range(3)]
    for _ in range(2):
        traces = memory._snapshot(dev)["device_traces"]
        assert 1 <= len(traces[0]) <= max(max_entries, 1) and traces[1] == []
    if max_entries > 10:
        actions = [e["action"] for e in traces[0]]
        assert actions[:4] == ["segment_alloc", "alloc", "alloc", "alloc"]
    for p in live:
        memory.caching_allocator_delete(p)
    memory.record_memory_history("state", device=d)              # a ring of one entry
    memory.caching_allocator_delete(memory.caching_allocator_alloc(512, d))
    assert len(memory._snapshot(dev)["device_traces"][0]) == 1
    memory.record_memory_history(None, device=d)
    memory.empty_cache()
    check_invariants(d)


def test_history_arguments_checked_once(dev: str) -> None:
    # the allocator-level check is the same function as the public one's
    with pytest.raises(TypeError):
        _history.check_history_args("all", ["x"], "all", 1, None)   # type: ignore[arg-type]
    assert _history.check_history_args(False, None, "python", 1, ("alloc",)) == (
        None, frozenset({"alloc"}))


# ---------------------------------------------------------------------- threads

_STRESS = textwrap.dedent("""
    import threading, random
    import accelrt as acc
    from accelrt import memory, backends
    from accelrt.testing._simulated import SimulatedBackend
    backends.register("stress", lambda: SimulatedBackend(name="stress", capacity=1 << 30,
                                                         device_count=2))
    errors, stop = [], threading.Event()
    def worker(seed, device):
        rng = random.Random(seed)
        live = []
        try:
            for _ in range(400):
                if live and rng.random() < 0.45:
                    memory.caching_allocator_delete(live.pop(rng.randrange(len(live))))
                else:
                    live.append(memory.caching_allocator_alloc(
                        rng.choice([512, 4096, 300000, 2 << 20, 12 << 20]), device))
            for p in live:
                memory.caching_allocator_delete(p)
        except BaseException as e:
            errors.append(e)
    def janitor():
        try:
            while not stop.is_set():
                memory.empty_cache()   # of the current accelerator: cpu
                for d in ("stress:0", "stress:1"):
                    acc.backends.device_module("stress").empty_cache()
                    s = memory.memory_stats(d)
                    if s:
                        assert s["allocated_bytes.all.current"] <= s["reserved_bytes.all.current"]
                        assert s["allocation.all.current"] <= s["allocation.all.peak"]
                    memory.memory_snapshot()
        except BaseException as e:
            errors.append(e)
    ts = [threading.Thread(target=worker, args=(k, f"stress:{k % 2}")) for k in range(6)]
    j = threading.Thread(target=janitor)
    j.start()
    for t in ts: t.start()
    for t in ts: t.join()
    stop.set(); j.join()
    assert not errors, errors
    assert not memory._raw_owner, memory._raw_owner
    for d in ("stress:0", "stress:1"):
        s = memory.memory_stats(d)
        assert s["allocated_bytes.all.current"] == 0 and s["allocation.all.current"] == 0
        assert s["active_bytes.all.current"] == 0 and s["requested_bytes.all.current"] == 0
        assert s["allocation.all.allocated"] == s["allocation.all.freed"]
        acc.backends.device_module("stress").empty_cache()
        s = memory.memory_stats(d)
        assert s["reserved_bytes.all.current"] == 0 and s["segment.all.current"] == 0
        assert memory.memory_snapshot() == []
    print("ok")
""")


def test_thread_stress_alloc_delete_with_empty_cache_and_stats() -> None:
    """Six threads allocate and free through caching_allocator_alloc/delete on two devices
    while another empties the cache and reads statistics and snapshots; at the end every
    block is back and the cache empties to zero. In a subprocess: a deadlock fails the test
    instead of hanging the run."""
    res = subprocess.run([sys.executable, "-c", _STRESS], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip() == "ok"


@pytest.mark.parametrize("bad", [12345, -1, 2**70])
def test_caching_allocator_delete_of_an_unknown_pointer_is_torchs_runtime_error(bad: int) -> None:
    """PyTorch's raw_delete raises "invalid device pointer" (a RuntimeError); accelrt's error
    is also the ValueError it always was."""
    with pytest.raises(RuntimeError, match="invalid device pointer"):
        acc.memory.caching_allocator_delete(bad)
    with pytest.raises(ValueError, match="invalid device pointer"):
        acc.memory.caching_allocator_delete(bad)


def test_caching_allocator_delete_twice_is_the_same_error() -> None:
    p = acc.memory.caching_allocator_alloc(256, "cpu:0")
    acc.memory.caching_allocator_delete(p)
    with pytest.raises(acc.AcceleratorError, match="invalid device pointer"):
        acc.memory.caching_allocator_delete(p)
    acc.memory.caching_allocator_delete(0)   # nothing, as PyTorch's raw_delete(nullptr)
