"""PyTorch's allocator tests run with expandable segments (test/test_cuda_expandable_segments.py
re-runs ``TestCuda``, ``TestMemPool``, ``TestBlockStateAbsorption`` and ``TestCudaAllocator`` of
test/test_cuda.py with ``expandable_segments:True``), each rewritten against accelrt, plus the
test_cuda.py tests whose names mention expandable segments and torch.cuda._memory_viz's readers
of the snapshots such an allocator makes.

Every test names the PyTorch test it mirrors. ``torch.cuda`` becomes a device module (``acc.cpu``,
or the module of a fresh :class:`~accelrt.testing.SimulatedBackend`), ``torch.accelerator``
becomes ``accelrt``, tensors become ``acc.Array``s. The tests that allocate a large share of a
device run on the simulated backend only (its devices hold no data); the ones that read values
back run on ``cpu``. tests/memory/test_torch_suite_memory_s35.py has the same tests without
expandable segments; the ones here check what expandable segments change (or must not change).
"""

from __future__ import annotations

import gc
import itertools
import json
import pickle
import random
import threading
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import accelrt as acc
from accelrt import backends
from accelrt.memory import PluggableAllocator
from accelrt.memory.viz import segsum, trace_text, viz_main
from accelrt.testing import SimulatedBackend

MiB = 1 << 20
_names = itertools.count()


def _simulated(capacity: int = 1 << 30, auto_complete: bool = True, devices: int = 2) -> str:
    name = f"torchexp{next(_names)}"
    backends.register(name, lambda: SimulatedBackend(name=name, capacity=capacity,
                                                     device_count=devices,
                                                     auto_complete=auto_complete))
    return name


def _switch_on(m: Any) -> None:
    """``expandable_segments:True`` (test_cuda_expandable_segments.py's setting), or a skip where
    this process cannot have it: the option is process-wide and refused while an allocator of a
    backend without virtual memory (OpenCL) is open (docs/differences.md)."""
    try:
        m.set_allocator_settings("expandable_segments:True")
    except ValueError as e:
        if "needs virtual memory support" not in str(e):
            raise
        pytest.skip(f"expandable segments cannot be switched on in this process: {e}")


@pytest.fixture(params=["cpu", "simulated"])
def name(request: pytest.FixtureRequest) -> Iterator[str]:
    """The backend of a test run on both (``cpu``, or a fresh 1 GiB simulated backend), with
    expandable segments on for the test; the suite's autouse fixture restores the settings."""
    n = "cpu" if request.param == "cpu" else _simulated()
    m = backends.device_module(n)
    gc.collect()
    m.empty_cache()
    _switch_on(m)
    yield n
    gc.collect()
    m.empty_cache()


def _sim_expandable(**kw: Any) -> tuple[str, Any]:
    n = _simulated(**kw)
    m = backends.device_module(n)
    _switch_on(m)
    return n, m


# ------------------------------------------------------------------------- statistics

def test_memory_stats_expandable(name: str) -> None:
    """mirrors test_cuda.py test_memory_stats as test_cuda_expandable_segments.py runs it: a
    256-float array is 1 KiB of active memory, freed by ``del``; a peak reset brings the maxima
    back to what they were."""
    d = f"{name}:0"
    m = backends.device_module(name)
    acc.reset_peak_memory_stats(d)
    acc.reset_accumulated_memory_stats(d)
    assert acc.memory_allocated(d) == acc.max_memory_allocated(d)
    assert acc.memory_reserved(d) == acc.max_memory_reserved(d)
    prev_max = acc.max_memory_allocated(d), acc.max_memory_reserved(d)
    prev_active = acc.memory_stats(d).get("active_bytes.all.current", 0)   # {} before use
    tmp = acc.randn(256, device=d)
    assert acc.memory_stats(d)["active_bytes.all.current"] == prev_active + 1024
    assert acc.memory_stats(d)["active_bytes.all.freed"] == 0
    del tmp
    gc.collect()
    m.empty_cache()
    assert acc.memory_stats(d)["active_bytes.all.current"] == prev_active
    assert acc.memory_stats(d)["active_bytes.all.freed"] == 1024
    acc.reset_peak_memory_stats(d)
    assert (acc.max_memory_allocated(d), acc.max_memory_reserved(d)) == prev_max


def test_expandable_statistics_count_pages_not_segments(name: str) -> None:
    """The statistics of test_cuda_expandable_segments.py's runs (ALLOCATOR_SPEC.md section 10,
    torch's map_block/unmap_block): mapping pages adds to ``reserved_bytes`` and
    ``num_device_alloc`` but not to ``segment``; a large request maps 20 MiB pages and a small
    one a 2 MiB page; split blocks of expandable segments are not ``inactive_split``;
    ``empty_cache`` unmaps every free page (``num_device_free``) and reserved memory drops to
    nothing."""
    m = backends.device_module(name)
    d = f"{name}:0"
    m.reset_accumulated_memory_stats(0)
    before = defaultdict(int, m.memory_stats(0))                         # {} before use
    big = acc.empty(3 * MiB, dtype="uint8", device=d)
    small = acc.empty(250, dtype="float32", device=d)
    st = m.memory_stats(0)
    assert st["reserved_bytes.large_pool.current"] == 20 * MiB
    assert st["reserved_bytes.small_pool.current"] == 2 * MiB
    assert st["allocated_bytes.all.current"] == 3 * MiB + 1024
    assert st["num_device_alloc"] - before["num_device_alloc"] == 2
    assert st["segment.all.current"] == before["segment.all.current"]
    assert st["segment.all.allocated"] == before["segment.all.allocated"]
    assert st["inactive_split.all.current"] == 0
    assert st["inactive_split_bytes.all.current"] == 0
    segments = m.memory_snapshot()
    assert sorted((s["segment_type"], s["total_size"], s["is_expandable"]) for s in segments) == \
        [("large", 20 * MiB, True), ("small", 2 * MiB, True)]
    del big, small
    m.empty_cache()
    st = m.memory_stats(0)
    assert st["reserved_bytes.all.current"] == 0
    assert st["num_device_free"] - before["num_device_free"] == 2
    assert st["segment.all.freed"] == before["segment.all.freed"]
    assert m.memory_snapshot() == []


def test_memory_allocation_expandable(name: str) -> None:
    """mirrors test_cuda.py test_memory_allocation (expandable run): ``caching_allocator_alloc``
    of one byte counts in ``memory_allocated`` and ``caching_allocator_delete`` takes it out."""
    m = backends.device_module(name)
    prev = m.memory_allocated()
    ptr = m.caching_allocator_alloc(1)
    try:
        assert m.memory_allocated() > prev
    finally:
        m.caching_allocator_delete(ptr)
    assert m.memory_allocated() == prev


def test_caching_allocator_raw_alloc_expandable(name: str) -> None:
    """mirrors test_cuda.py test_cachingAllocator_raw_alloc (expandable run): with the caching
    allocator off a raw allocation adds nothing to ``requested_bytes.all.allocated``; back on,
    it adds the size asked for."""
    m = backends.device_module(name)
    m.reset_accumulated_memory_stats(0)

    def requested_delta() -> int:
        start = m.memory_stats(0).get("requested_bytes.all.allocated", 0)  # {} before use
        ptr = m.caching_allocator_alloc(MiB)
        end = m.memory_stats(0)["requested_bytes.all.allocated"]
        m.caching_allocator_delete(ptr)
        return end - start

    try:
        m.caching_allocator_enable(False)
        assert requested_delta() == 0
    finally:
        m.caching_allocator_enable(True)
    assert requested_delta() == MiB


def _power2_div(size: int, div: int) -> int:
    pow2 = 1 << (size - 1).bit_length()
    if pow2 == size:
        return pow2
    step, ret = pow2 // 2 // div, pow2 // 2
    while ret < size:
        ret += step
    return ret


def test_allocator_settings_rounding_expandable(name: str) -> None:
    """mirrors test_cuda.py test_allocator_settings (expandable run): ``roundup_power2_divisions``
    rounds the active bytes of a block in an expandable segment as in an ordinary one (single
    value and list syntax), ``requested_bytes`` keeps the size asked for, and an empty settings
    string keeps expandable segments on."""
    m = backends.device_module(name)
    d = f"{name}:0"
    key, requested = "active_bytes.all.allocated", "requested_bytes.all.allocated"
    nbytes = 4 * 21 * MiB
    m.set_allocator_settings("")
    assert m.memory._snapshot()["allocator_settings"]["expandable_segments"] is True
    start = m.memory_stats(0).get(key, 0)                                 # {} before use
    x = acc.rand(21 * MiB, device=d)
    plain, req0 = m.memory_stats(0)[key], m.memory_stats(0)[requested]
    m.set_allocator_settings("roundup_power2_divisions:4")
    y = acc.rand(21 * MiB, device=d)
    assert plain - start == nbytes
    assert m.memory_stats(0)[key] - plain == _power2_div(nbytes, 4)
    assert m.memory_stats(0)[requested] - req0 == nbytes
    del x, y
    m.empty_cache()
    m.set_allocator_settings("roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1]")
    start = m.memory_stats(0)[key]
    w = acc.rand(21 * MiB, device=d)
    assert m.memory_stats(0)[key] - start == _power2_div(nbytes, 8)
    del w
    assert all(s["is_expandable"] for s in m.memory_snapshot())


@pytest.mark.parametrize("value", ["true", "1", "none", "TRUE"])
def test_bad_boolean_setting_has_torchs_message(value: str) -> None:
    """mirrors test_cuda.py test_allocator_settings's refused strings (torch 2.15 checks every
    boolean with ConfigTokenizer::toBool): a value other than True/False is a ``ValueError``
    naming the index of the token, counted over the whole string as torch counts it."""
    for text, index in ((f"expandable_segments:{value}", 2),
                        (f"max_split_size_mb:40,expandable_segments:{value}", 6),
                        (f"roundup_power2_divisions:[64:8,>:1],release_lock_on_cudamalloc:{value}",
                         14),
                        ((f" garbage_collection_threshold : 0.5 , pinned_use_background_threads"
                          f" : {value}"), 6)):
        with pytest.raises(ValueError, match=(f"Expected 'True' or 'False' at index {index} in "
                                              f"ConfigTokenizer but got '{value}'")):
            acc.cpu.set_allocator_settings(text)


# ------------------------------------------------------------------------- out of memory

def test_out_of_memory_expandable(name: str) -> None:
    """mirrors test_cuda.py test_out_of_memory (expandable run): the message names the size
    asked for, a request past 1 EB says so, and the device keeps working after both."""
    d = f"{name}:0"
    keep = acc.zeros(1024, device=d)
    with pytest.raises(acc.OutOfMemoryError,
                       match=r"Tried to allocate 800000000\.00 GiB\. Device "
                             rf"{name}:0 has a total capacity of"):
        acc.empty(1024 * 1024 * 1024 * 800000000, dtype="int8", device=d)
    with pytest.raises(RuntimeError, match="Tried to allocate more than 1EB memory"):
        acc.empty(1024 * 1024 * 1024 * 8000000000, dtype="int8", device=d)
    keep.fill_(1)
    if name == "cpu":
        assert (keep.numpy() == 1).all()
    del keep


def test_raises_oom_expandable(name: str) -> None:
    """mirrors test_cuda.py test_raises_oom (both parametrisations, expandable run)."""
    m = backends.device_module(name)
    for split in (False, True):
        if split:
            m.set_allocator_settings("max_split_size_mb:1024")
            m.empty_cache()
        with pytest.raises(m.OutOfMemoryError):
            acc.empty(1024 ** 4, device=f"{name}:0")


def test_out_of_memory_retry_expandable() -> None:
    """mirrors test_cuda.py test_out_of_memory_retry (expandable run): a request for more than
    half the device fits once, not twice, and again once the first is freed (its pages are
    reused, or unmapped and mapped again)."""
    sim, m = _sim_expandable()
    d = f"{sim}:0"
    size = int(m.get_device_properties(0).total_memory * 0.6)
    a = acc.empty(size, dtype="int8", device=d)
    with pytest.raises(acc.OutOfMemoryError, match="Tried to allocate"):
        acc.empty(size, dtype="int8", device=d)
    del a
    b = acc.empty(size, dtype="int8", device=d)
    assert m.memory_snapshot()[0]["is_expandable"]
    del b
    m.empty_cache()
    assert m.memory_reserved() == 0


def test_caching_allocator_record_stream_oom_expandable() -> None:
    """mirrors test_cuda.py test_caching_allocator_record_stream_oom (expandable run): pages
    whose blocks wait on a recorded stream are freed by the out-of-memory retry, so a loop of
    160 MiB allocations on a 1 GiB device goes on."""
    sim, m = _sim_expandable(auto_complete=False)
    d = f"{sim}:0"
    side = m.Stream()
    with m.stream(side):
        y = acc.zeros(40 * MiB // 4, device=d)
    for _ in range(20):
        x = acc.empty(40 * MiB, device=d)
        x.record_stream(side)
        del x
    assert m.memory_stats(0)["num_alloc_retries"] > 0
    del y
    m.synchronize()
    m.empty_cache()
    assert m.memory_reserved() == 0


def test_set_per_process_memory_fraction_expandable() -> None:
    """mirrors test_cuda.py test_set_per_process_memory_fraction (expandable run): with half the
    device allowed, 49.9% of it fits (in 20 MiB pages: the device is 32 GiB, as the GPUs the
    test runs on, so the rounding stays under the limit) and 50% is out of memory."""
    sim, m = _sim_expandable(capacity=32 << 30, devices=1)
    d = f"{sim}:0"
    m.reset_peak_memory_stats(0)
    try:
        keep = acc.zeros(1024, device=d)
        m.empty_cache()
        total = m.get_device_properties(0).total_memory
        m.set_per_process_memory_fraction(0.5, 0)
        tmp = acc.empty(int(total * 0.499) - m.max_memory_reserved(), dtype="int8", device=d)
        del tmp
        m.empty_cache()
        with pytest.raises(acc.OutOfMemoryError, match="out of memory"):
            acc.empty(int(total * 0.5), dtype="int8", device=d)
        keep.fill_(1)
        del keep
    finally:
        m.set_per_process_memory_fraction(1.0, 0)


# ------------------------------------------------------------------------- record_stream

def test_record_stream_expandable() -> None:
    """mirrors test_cuda.py test_record_stream (expandable run): a block of an expandable segment
    freed after ``record_stream`` is not handed out while the recorded stream may use it, and
    is (the same address) once that stream has finished."""
    sim, m = _sim_expandable(auto_complete=False)
    d = f"{sim}:0"
    side, main = m.Stream(), m.current_stream()
    with m.stream(side):
        tmp = acc.empty(4, device=d)
        ptr = tmp.data_ptr()
    main.wait_stream(side)
    tmp.record_stream(main)
    del tmp
    with m.stream(side):
        tmp2 = acc.empty(4, device=d)
        assert tmp2.data_ptr() != ptr, "allocation reused too soon"
    main.synchronize()
    with m.stream(side):
        tmp3 = acc.empty(4, device=d)
        assert tmp3.data_ptr() == ptr, "allocation not reused"
    del tmp2, tmp3
    m.synchronize()


def test_record_stream_on_busy_stream_expandable() -> None:
    """mirrors test_cuda.py test_record_stream_on_shifted_view (expandable run): a block recorded
    on a busy stream is not reused on its own stream after it is freed."""
    sim, m = _sim_expandable(auto_complete=False)
    d = f"{sim}:0"
    alloc_stream, busy = m.Stream(), m.Stream()
    with m.stream(alloc_stream):
        base = acc.empty(10, device=d)
    sim_backend = backends.get_backend(sim)
    assert isinstance(sim_backend, SimulatedBackend)
    sim_backend.launch_work(busy.native_handle, 0)
    base.record_stream(busy)
    ptr = base.data_ptr()
    del base
    alloc_stream.synchronize()
    with m.stream(alloc_stream):
        again = acc.empty(10, device=d)
    assert again.data_ptr() != ptr
    m.synchronize()
    del again


# ------------------------------------------------------------------------- fuzz

def test_allocator_fuzz_expandable() -> None:
    """mirrors test_cuda.py test_allocator_fuzz (expandable run, fewer steps and a smaller
    cap): random allocations of 2-20 MiB, frees and ``empty_cache`` calls in expandable segments
    never hand out memory still in use (every array keeps the value it was filled with)."""
    m = acc.cpu
    gc.collect()
    m.empty_cache()
    _switch_on(m)
    rng = random.Random(123)
    live: list[tuple[int, acc.Array]] = []
    total = count = 0

    def free_one() -> None:
        nonlocal total
        value, arr = live.pop(rng.randrange(len(live)))
        assert (arr.numpy() == value).all()
        total -= arr.size

    for _ in range(400):
        while total >= 160 * MiB // 4:
            free_one()
        action = rng.choices(("alloc", "free", "empty"), weights=(1, 1 if live else 0, 0.1))[0]
        if action == "alloc":
            n = rng.randrange(2 * MiB // 4, 20 * MiB // 4)
            live.append((count, acc.full((n,), count, dtype="int32", device="cpu:0")))
            count += 1
            total += n
        elif action == "free":
            free_one()
        else:
            m.empty_cache()
    while live:
        free_one()
    m.empty_cache()
    assert m.memory_reserved() == 0


# ------------------------------------------------------------------------- snapshots

def test_memory_snapshot_expandable(name: str) -> None:
    """mirrors test_cuda.py TestCudaMallocAsync.test_memory_snapshot with expandable segments:
    the 311x411 float array's block has its address and a stack in this file; every segment is
    expandable and tiled by its blocks; after ``empty_cache`` the last trace entry is a
    ``segment_unmap`` (torch accepts segment_free or segment_unmap there)."""
    m = backends.device_module(name)
    d = f"{name}:0"
    try:
        m.memory._record_memory_history("state", stacks="python")
        acc.rand(2 * 311, 411, device=d)
        unused = acc.rand(310, 410, device=d)
        x = acc.rand(311, 411, device=d)
        tensors = [acc.rand(128, device=d) for _ in range(200)]
        rng = random.Random(0)
        while tensors:
            del tensors[rng.randint(0, len(tensors) - 1)]
        acc.rand(128 * 5, device=d)
        found = False
        snap = m.memory._snapshot()
        assert snap["allocator_settings"]["expandable_segments"] is True
        for seg in snap["segments"]:
            assert seg["is_expandable"] is True and "frames" in seg
            addr = seg["address"]
            for b in seg["blocks"]:
                assert b["address"] == addr
                addr += b["size"]
                if b["requested_size"] == 311 * 411 * 4:
                    assert "test_torch_suite_expandable_s36" in b["frames"][0]["filename"]
                    assert b["address"] == x.data_ptr()
                    found = True
            assert addr == seg["address"] + seg["total_size"]
        assert found
        del unused, x
        m.empty_cache()
        trace = m.memory._snapshot()["device_traces"][0]
        assert trace[-1]["action"] == "segment_unmap"
        assert not {"segment_alloc", "segment_free"} & {e["action"] for e in trace}
    finally:
        m.memory._record_memory_history(None)


@pytest.mark.parametrize("skip", [["segment_map", "segment_unmap"], ["segment_map"],
                                  ["alloc", "free_completed"]])
def test_memory_snapshot_skip_actions_expandable(name: str, skip: list[str]) -> None:
    """mirrors test_cuda.py TestCudaMallocAsync.test_memory_snapshot_skip_actions with the
    actions expandable segments record: what ``skip_actions`` names is left out, the rest is
    recorded."""
    m = backends.device_module(name)
    d = f"{name}:0"
    try:
        m.memory._record_memory_history(context="all", stacks="python", skip_actions=skip)
        x = acc.rand(128, 128, device=d)
        del x
        m.synchronize()
        m.empty_cache()
        actions = {e["action"] for e in m.memory._snapshot()["device_traces"][0]}
        assert not actions & set(skip)
        every = {"segment_map", "alloc", "free_requested", "free_completed", "segment_unmap"}
        assert actions == every - set(skip)
    finally:
        m.memory._record_memory_history(None)


def test_toggling_expandable_at_run_time(name: str) -> None:
    """mirrors test_cuda.py test_max_split_expandable's switching (and the settings
    test_cuda_expandable_segments.py installs with _set_allocator_settings): segments made
    while the option is off stay ordinary, the ones made while it is on are expandable, and the
    snapshot's allocator_settings follow the option."""
    m = backends.device_module(name)
    d = f"{name}:0"
    m.set_allocator_settings("expandable_segments:False")
    assert m.memory._snapshot()["allocator_settings"]["expandable_segments"] is False
    a = acc.empty(4 * MiB, dtype="uint8", device=d)
    m.set_allocator_settings("expandable_segments:True")
    assert m.memory._snapshot()["allocator_settings"]["expandable_segments"] is True
    b = acc.empty(30 * MiB, dtype="uint8", device=d)
    segs = {s["address"]: s for s in m.memory_snapshot()}
    seg_of = {p: next(s for s in segs.values()
                      if s["address"] <= p < s["address"] + s["total_size"])
              for p in (a.data_ptr(), b.data_ptr())}
    assert seg_of[a.data_ptr()]["is_expandable"] is False
    assert seg_of[a.data_ptr()]["total_size"] == 20 * MiB
    assert seg_of[b.data_ptr()]["is_expandable"] is True
    assert seg_of[b.data_ptr()]["total_size"] == 40 * MiB
    st = m.memory_stats(0)
    assert st["segment.all.current"] == 1                # the ordinary one only
    assert st["reserved_bytes.all.current"] == 60 * MiB
    del a, b


# ------------------------------------------------------------------------- MemPool

def test_mempool_expandable(name: str) -> None:
    """mirrors test_cuda.py TestMemPool.test_mempool_expandable: with expandable segments on, a
    MemPool with its own (pluggable) allocator gets an ordinary segment, an allocation outside
    it an expandable one: two segments, one expandable."""
    m = backends.device_module(name)
    d = f"{name}:0"
    held: dict[int, np.ndarray] = {}

    def alloc(size: int, device: int, stream: int) -> int:
        buf = np.zeros(size, np.uint8)
        held[buf.ctypes.data] = buf
        return int(buf.ctypes.data)

    def free(ptr: int, size: int, device: int, stream: int) -> None:
        del held[ptr]

    pool = m.MemPool(PluggableAllocator.from_callables(alloc, free))
    data = []
    with m.use_mem_pool(pool):
        data.append(acc.empty(MiB // 4, device=d))
    data.append(acc.empty(MiB // 4, device=d))
    segments = m.memory.memory_snapshot()
    assert len(segments) == 2
    assert sum(s["is_expandable"] for s in segments) == 1
    assert next(s for s in segments if s["segment_pool_id"] == pool.id)["is_expandable"] is False
    del data, pool
    gc.collect()
    m.empty_cache()
    assert held == {}


def test_mempool_empty_cache_expandable(name: str) -> None:
    """mirrors test_cuda.py TestMemPool.test_mempool_empty_cache (expandable run): after the
    arrays and the pool are gone, without ``empty_cache``, segments remain cached."""
    m = backends.device_module(name)
    d = f"{name}:0"
    pool = m.MemPool()
    x = acc.empty(1024 * 1024, device=d)
    with m.use_mem_pool(pool):
        y = acc.empty(1024 * 1024, device=d)
    del y, x, pool
    assert len(m.memory._snapshot()["segments"]) > 0


def test_mempool_ctx_multithread_expandable(name: str) -> None:
    """mirrors test_cuda.py TestMemPool.test_mempool_ctx_multithread (expandable run): a pool
    made current in one thread does not take another thread's allocation: two segments, the
    default pool's with 2 MiB active (both 1 MiB arrays in its small page), the pool's with
    none."""
    m = backends.device_module(name)
    d = f"{name}:0"
    assert m.memory._snapshot()["segments"] == []
    trigger, done = threading.Event(), threading.Event()
    keep: list[Any] = []
    seen: list[list[dict[str, Any]]] = []

    def main_thread() -> None:
        pool = m.MemPool()
        keep.append(pool)
        keep.append(acc.empty(MiB, dtype="int8", device=d))
        with m.use_mem_pool(pool):
            out = acc.empty(MiB, dtype="int8", device=d)
            del out
            trigger.set()
            done.wait(10)

    def side_thread() -> None:
        trigger.wait(10)
        keep.append(acc.empty(MiB, dtype="int8", device=d))
        seen.append(m.memory._snapshot()["segments"])
        done.set()

    threads = [threading.Thread(target=main_thread), threading.Thread(target=side_thread)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert not any(t.is_alive() for t in threads)
    assert len(seen) == 1 and len(seen[0]) == 2
    active: dict[tuple[int, int], int] = defaultdict(int)
    for s in seen[0]:
        assert s["is_expandable"]
        active[s["segment_pool_id"]] += s["active_size"]
    assert active.pop((0, 0)) == 2 * MiB
    assert list(active.values()) == [0]
    keep.clear()


@pytest.mark.parametrize("expandable", [True, False])
def test_allocate_in_thread_to_pool_expandable(name: str, expandable: bool) -> None:
    """mirrors test_cuda.py TestBlockStateAbsorption.test_allocate_in_thread_to_pool: one
    thread allocates to a private pool (torch: a graph's pool, routed with
    _cuda_beginAllocateCurrentThreadToPool; accelrt: ``use_mem_pool``, current for that thread
    only) while another allocates outside it. The pool ends with 2 segments with expandable
    segments (its small page and one large expandable segment), 4 without (the small one and
    three 20 MiB segments), and with none once freed."""
    m = backends.device_module(name)
    d = f"{name}:0"
    if not expandable:
        m.set_allocator_settings("expandable_segments:False")
    pool = m.MemPool()
    with m.use_mem_pool(pool):
        first = acc.ones(4, device=d)
    del first
    big = 20 * MiB

    def use_pool(pool: Any) -> None:
        with m.use_mem_pool(pool):
            for _ in range(10):
                a = acc.ones(big, dtype="uint8", device=d)
                b = acc.ones(big, dtype="uint8", device=d)
                c = acc.empty(big, dtype="uint8", device=d)
                del a, b, c
        a = acc.ones(big, dtype="uint8", device=d)
        b = acc.ones(big, dtype="uint8", device=d)
        del a, b

    def no_pool() -> None:
        for _ in range(10):
            a = acc.ones(big, dtype="uint8", device=d)
            b = acc.ones(big, dtype="uint8", device=d)
            del a, b

    threads = [threading.Thread(target=use_pool, args=(pool,)), threading.Thread(target=no_pool)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    segments = m.memory.memory_snapshot(pool.id)
    assert len(segments) == (2 if expandable else 4)
    assert all(s["is_expandable"] is expandable for s in segments)
    del pool
    gc.collect()
    m.empty_cache()
    assert m.memory._snapshot()["segments"] == []


# ------------------------------------------------------------------------- _memory_viz

def _expandable_history(m: Any, d: str) -> dict[str, Any]:
    """A snapshot with history of expandable segments: pages mapped, one unmapped while a live
    block keeps the next page, mapped again by a larger request."""
    try:
        m.memory._record_memory_history("all")
        a = acc.empty(15 * MiB, dtype="uint8", device=d)
        b = acc.empty(15 * MiB, dtype="uint8", device=d)
        c = acc.empty(15 * MiB, dtype="uint8", device=d)
        small = acc.empty(100, dtype="float32", device=d)
        del a, b
        m.empty_cache()
        e = acc.empty(30 * MiB, dtype="uint8", device=d)
        snap: dict[str, Any] = m.memory._snapshot()
        del c, e, small
        return snap
    finally:
        m.memory._record_memory_history(None)


def test_trace_text_reads_maps_and_unmaps(name: str) -> None:
    """torch.cuda._memory_viz ``trace`` over an expandable allocator's history (torch prints
    segment_map/segment_unmap entries as raw dicts; accelrt names them ``map``/``unmap``, as
    ``cudaMalloc``/``cudaFree`` for segments): every map and unmap is a line, allocations are
    placed in the mapped page that holds them, and the running total is the live bytes."""
    m = backends.device_module(name)
    snap = _expandable_history(m, f"{name}:0")
    actions = [e["action"] for e in snap["device_traces"][0]]
    text = trace_text(snap)
    lines = text.splitlines()
    assert sum(line.split(" = ")[-1].startswith("map(") for line in lines) == \
        actions.count("segment_map") == 5
    assert sum(line.startswith("unmap(") for line in lines) == actions.count("segment_unmap") == 1
    assert "MEM[" not in text                          # every block lies in a mapped page
    assert lines[-1] == "TOTAL MEM: 45.0MiB"          # c (15 MiB) and e (30 MiB) + the small
    assert not any(line.startswith("{") for line in lines)


def test_segsum_of_expandable_segments(name: str) -> None:
    """torch.cuda._memory_viz ``segsum`` (``stats`` on its command line) over a snapshot of
    expandable segments: one row per contiguous mapped range, totals that add up."""
    m = backends.device_module(name)
    snap = _expandable_history(m, f"{name}:0")
    large = [s for s in snap["segments"] if s["segment_type"] == "large"]
    assert [s["total_size"] for s in large] == [60 * MiB]
    text = segsum(snap)
    assert "[a*b] 60.0MiB allocated, 15.0MiB (0.0% internal) free" in text
    assert f"segments: {len(snap['segments'])}" in text
    assert "total_reserved: 62.0MiB" in text


def test_viz_command_reads_an_expandable_snapshot_pickle(name: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    """``accelrt memory viz`` on a pickled snapshot of expandable segments (what
    torch.cuda.memory._dump_snapshot writes): the segment summary, the trace and the HTML page
    (torch's trace_plot/segment_plot input) all come out."""
    m = backends.device_module(name)
    snap = _expandable_history(m, f"{name}:0")
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps(snap))
    assert viz_main([str(path), "--segsum"]) == 0
    assert "[a*b] 60.0MiB" in capsys.readouterr().out
    assert viz_main([str(path), "--trace"]) == 0
    assert "unmap(" in capsys.readouterr().out
    out = tmp_path / "page.html"
    assert viz_main([str(path), "-o", str(out)]) == 0
    assert out.read_text().startswith("<!DOCTYPE html>")


def test_torch_memory_viz_reads_expandable_snapshots_torch(name: str) -> None:
    """torch.cuda._memory_viz (torch 2.15) over accelrt's snapshot of expandable segments:
    ``segsum`` gives accelrt's layout (two legend lines are worded differently,
    docs/differences.md), ``trace`` shows the map/unmap entries, ``segments``/``memory`` account
    for every byte, and ``trace_plot``/``segment_plot`` make their pages."""
    mv = pytest.importorskip("torch.cuda._memory_viz")
    m = backends.device_module(name)
    snap = _expandable_history(m, f"{name}:0")
    ours, theirs = segsum(snap).splitlines(), mv.segsum(pickle.loads(pickle.dumps(snap)))
    differ = [i for i, (a, b) in enumerate(zip(ours, theirs.splitlines())) if a != b]
    assert len(ours) == len(theirs.splitlines()) and len(differ) == 2
    trace = mv.trace(pickle.loads(pickle.dumps(snap)))
    assert "'action': 'segment_unmap'" in trace and "'action': 'segment_map'" in trace

    def ident(lines: str) -> str:
        return lines

    for fn in (mv.segments, mv.memory):
        lines = fn(pickle.loads(pickle.dumps(snap)), format_flamegraph=ident).splitlines()
        assert sum(int(line.rsplit(" ", 1)[1]) for line in lines) == \
            sum(s["total_size"] for s in snap["segments"])
    for page in (mv.trace_plot(pickle.loads(pickle.dumps(snap))),
                 mv.segment_plot(pickle.loads(pickle.dumps(snap)))):
        assert "add_local_files" in page
    json.dumps(snap)                                      # what the JS viewer reads
