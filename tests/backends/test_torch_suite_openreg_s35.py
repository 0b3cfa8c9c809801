"""PyTorch's out-of-tree backend reference tests (``test/cpp_extensions/
open_registration_extension/torch_openreg/tests``: test_device.py, test_streams.py,
test_event.py, test_rng.py, test_memory.py, test_misc.py, test_ipc.py), re-checked on a
third-party accelrt backend.

``torch.accelerator`` is ``accelrt``, ``torch.openreg`` the device module of the backend
(``acc.backends.device_module(name)``), ``torch.Stream``/``torch.Event`` ``acc.Stream``/
``acc.Event`` and tensors ``acc`` arrays. Every test runs on two backends registered under a
fresh name with two devices and made the current accelerator: a ``SimulatedBackend`` (counts
bytes, holds no data) and a ``CpuBackend(name=...)`` (real host memory). The registry, the
current accelerator and the threads' devices and streams are put back by tests/conftest.py.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

import accelrt as acc
from accelrt.backends.cpu import CpuBackend
from accelrt.testing import SimulatedBackend

KINDS = ["sim", "cpu"]


def _make(kind: str, name: str) -> CpuBackend | SimulatedBackend:
    if kind == "sim":
        return SimulatedBackend(capacity=1 << 30, device_count=2, name=name)
    return CpuBackend(num_devices=2, memory_limit=1 << 28, name=name)


@pytest.fixture(params=KINDS)
def vendor(request: pytest.FixtureRequest) -> Iterator[str]:
    """A backend registered under a name of its own, with two devices, current."""
    kind: str = request.param
    name = f"s35or{kind}"
    acc.backends.register(name, lambda: _make(kind, name))
    acc.set_current_accelerator(name)
    acc.set_device_index(0)
    yield name


def _holds_data(name: str) -> bool:
    return name.endswith("cpu")


# ------------------------------------------------------------------------- test_device.py


def test_device_count_and_switch(vendor: str) -> None:
    """mirrors test_device.py test_device_count, test_device_switch,
    test_device_count_consistency and test_device_initialization_state"""
    assert acc.current_accelerator() == acc.device(vendor)
    assert acc.device_count() == 2
    for i in (1, 0, 1):
        acc.set_device_index(i)
        assert acc.current_device_index() == i
    mod = acc.backends.device_module(vendor)
    mod.init()
    assert mod.is_initialized()
    assert mod.device_count() == 2
    mod.set_device(0)
    assert mod.current_device() == 0 == acc.current_device_index()


def test_device_index_context_restores_after_exceptions(vendor: str) -> None:
    """mirrors test_device.py test_device_context, test_device_guard and
    test_device_context_restoration"""
    with acc.device_index(None):
        assert acc.current_device_index() == 0
    with acc.device_index(1):
        assert acc.current_device_index() == 1
        assert acc.empty(4, device=vendor).device == acc.device(vendor, 1)
    assert acc.current_device_index() == 0
    with pytest.raises(ValueError, match="inner"):
        with acc.device_index(1):
            raise ValueError("inner")
    assert acc.current_device_index() == 0
    with pytest.raises(RuntimeError, match="nested"):
        with acc.device_index(1):
            with acc.device_index(0):
                assert acc.current_device_index() == 0
                raise RuntimeError("nested")
    assert acc.current_device_index() == 0


def test_device_index_out_of_range_is_a_runtime_error(vendor: str) -> None:
    """mirrors test_device.py test_invalid_device_index (a RuntimeError; accelrt's also an
    IndexError), for every way a vendor's device index reaches the core"""
    msg = r"Device index value 2 is out of index range \[0, 2\)"
    calls: list[Callable[[], object]] = [
             lambda: acc.set_device_index(2),
             lambda: acc.empty(4, device=f"{vendor}:2"),
             lambda: acc.Stream(device=f"{vendor}:2"),
             lambda: acc.Event(device=f"{vendor}:2"),
             lambda: acc.random.Generator(device=f"{vendor}:2"),
             lambda: acc.get_device_capability(f"{vendor}:2"),
             lambda: acc.get_memory_info(2),
             lambda: acc.memory_stats(f"{vendor}:2"),
             lambda: acc.backends.device_module(vendor).set_device(2)]
    for call in calls:
        with pytest.raises(RuntimeError, match=msg) as info:
            call()
        assert isinstance(info.value, IndexError)
        assert vendor in str(info.value)
    assert acc.current_device_index() == 0


def test_cpu_backend_with_its_own_device_count_names_the_right_fix() -> None:
    """the out-of-range message of a ``CpuBackend(num_devices=2, name=...)`` named
    ``ACCELRT_CPU_DEVICES``, which does not change an instance made with an explicit count"""
    acc.backends.register("s35orfix", lambda: CpuBackend(num_devices=2, memory_limit=1 << 24,
                                                         name="s35orfix"))
    with pytest.raises(RuntimeError) as info:
        acc.empty(4, device="s35orfix:2")
    text = str(info.value)
    assert "ACCELRT_CPU_DEVICES" not in text
    assert "num_devices=2" in text
    b = acc.backends.get_backend("s35orfix")
    with pytest.raises(IndexError) as raw:
        b.malloc(2, 16)
    assert "ACCELRT_CPU_DEVICES" not in str(raw.value) and "num_devices=2" in str(raw.value)
    # the built-in cpu backend (count from the environment) keeps the variable's hint
    n = acc.backends.get_backend("cpu").device_count()
    with pytest.raises(RuntimeError, match="ACCELRT_CPU_DEVICES=N"):
        acc.empty(4, device=f"cpu:{n}")


def test_device_capability_properties_and_memory_info(vendor: str) -> None:
    """mirrors test_device.py test_device_capability and test_device_properties (torch 2.15's
    ``get_memory_info`` returns ``(free, total)``, not the dict the test allows for)"""
    dev = acc.device(f"{vendor}:0")
    assert (dev.type, dev.index) == (vendor, 0)
    assert vendor in str(dev) and "0" in str(dev)
    cap0 = acc.get_device_capability(f"{vendor}:0")
    cap1 = acc.get_device_capability(f"{vendor}:1")
    assert isinstance(cap0, dict) and isinstance(cap0["supported_dtypes"], set)
    assert {"float32", "float64", "int32", "int64", "bool"} <= cap0["supported_dtypes"]
    assert cap0["supported_dtypes"] == cap1["supported_dtypes"]
    assert acc.get_device_capability() == acc.get_device_capability(0) == cap0
    free, total = acc.get_memory_info()
    assert isinstance(free, int) and isinstance(total, int) and 0 <= free <= total
    assert acc.get_memory_info(f"{vendor}:1") == acc.get_memory_info(1)
    props = acc.backends.device_module(vendor).get_device_properties(1)
    assert props.total_memory == total and props.type == vendor and props.index == 1


def test_arrays_follow_the_current_device(vendor: str) -> None:
    """mirrors test_device.py test_tensor_device, test_device_switch_persistence and
    test_current_device_after_operations"""
    assert acc.randn(2, 3, device=vendor).device == acc.device(vendor, 0)
    x = acc.randn(2, 3, device=f"{vendor}:1")
    assert (x.device.type, x.device.index) == (vendor, 1)
    acc.set_device_index(1)
    for a in (acc.randn(2, 3, device=vendor), acc.empty(3, 3, device=vendor),
              acc.zeros(5, device=vendor)):
        assert a.device.index == 1
    assert acc.current_device_index() == 1


def test_concurrent_device_operations(vendor: str) -> None:
    """mirrors test_device.py test_concurrent_device_operations: the current device is per
    thread; a new thread starts on device 0, whatever the others chose"""
    acc.set_device_index(1)
    n_threads, rounds = 4, 30
    barrier = threading.Barrier(n_threads)
    errors: list[str] = []
    first_seen: dict[int, int] = {}

    def work(tid: int) -> None:
        try:
            first_seen[tid] = acc.current_device_index()
            barrier.wait(timeout=30)
            want = tid % 2
            for _ in range(rounds):
                acc.set_device_index(want)
                if acc.current_device_index() != want:
                    errors.append(f"thread {tid}: device {acc.current_device_index()}")
                a = acc.randn(10, 10, device=vendor)
                if a.device.index != want:
                    errors.append(f"thread {tid}: array on {a.device}")
                if acc.current_stream().device_index != want:
                    errors.append(f"thread {tid}: stream on {acc.current_stream().device}")
                del a
        except Exception as e:  # pragma: no cover - reported below
            errors.append(f"thread {tid}: {e!r}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    assert first_seen == dict.fromkeys(range(n_threads), 0)
    assert acc.current_device_index() == 1


def test_device_state_after_an_error(vendor: str) -> None:
    """mirrors test_device.py test_device_state_after_errors, with the error a vendor's
    device can raise here (out of memory) in place of a matmul shape mismatch"""
    acc.set_device_index(1)
    free, _ = acc.get_memory_info()
    with pytest.raises(acc.OutOfMemoryError) as info:
        acc.empty(free + (64 << 20), dtype="uint8", device=vendor)
    assert isinstance(info.value, RuntimeError)
    assert f"{vendor}:1" in str(info.value)
    assert acc.memory_stats(1)["num_ooms"] == 1
    assert acc.current_device_index() == 1
    z = acc.zeros(5, 5, device=vendor)
    assert z.device.index == 1 and acc.memory_allocated(1) > 0


# ------------------------------------------------------------------------ test_streams.py


def test_stream_create_and_equality(vendor: str) -> None:
    """mirrors test_streams.py test_stream_create"""
    s = acc.Stream(device=vendor)
    assert s.device_index == acc.backends.device_module(vendor).current_device() == 0
    s1 = acc.Stream(device=f"{vendor}:1")
    assert (s1.device.type, s1.device_index, s1.device_type) == (vendor, 1, vendor)
    s2 = acc.Stream(1)
    assert (s2.device.type, s2.device_index) == (vendor, 1)
    same = acc.Stream(stream_id=s2.stream_id, device_type=s2.device_type,
                      device_index=s2.device_index)
    assert same == s2 and same != s1
    # torch.Stream prints "torch.Stream device_type=..., device_index=1, ..."; accelrt prints
    # torch.cuda's shape (docs/differences.md), naming the device
    assert f"device={vendor}:1" in repr(s1)


def test_stream_context_and_switch(vendor: str) -> None:
    """mirrors test_streams.py test_stream_context, test_stream_switch and test_event.py
    test_stream_compatibility"""
    with acc.Stream(device=f"{vendor}:1") as s:
        assert acc.current_stream() == s and acc.current_device_index() == 1
    assert acc.current_device_index() == 0
    assert acc.current_stream() == acc.current_stream(0)
    original = acc.current_stream()
    s0, s1 = acc.Stream(device=f"{vendor}:0"), acc.Stream(device=f"{vendor}:1")
    acc.set_stream(s0)
    assert acc.current_stream().stream_id == s0.stream_id
    acc.set_stream(s1)
    assert acc.current_stream() == s1 and acc.current_device_index() == 1
    acc.set_stream(original)
    assert acc.current_stream() == original and acc.current_device_index() == 0


def test_stream_synchronize_and_waits(vendor: str) -> None:
    """mirrors test_streams.py test_stream_synchronize, test_stream_wait_stream and
    test_stream_wait_event, and test_event.py test_event_wait_stream and
    test_event_wait_event"""
    s1 = acc.Stream(device=f"{vendor}:1")
    assert s1.query()
    e = acc.Event()
    e.record(s1)
    s1.synchronize()
    assert s1.query() and e.query()
    s0 = acc.Stream(device=f"{vendor}:0")
    s1.wait_stream(s0)                    # across the vendor's devices
    a, b = acc.Stream(device=vendor), acc.Stream(device=vendor)
    ev = a.record_event()
    b.wait_event(ev)
    b.synchronize()
    assert ev.query()


# ------------------------------------------------------------------------- test_event.py


def test_event_create_and_record(vendor: str) -> None:
    """mirrors test_event.py test_event_create, test_event_record and
    test_event_different_devices"""
    for made in (acc.Event(device=vendor), acc.Event(device=f"{vendor}:1"), acc.Event()):
        assert made.device == acc.device(vendor)
        assert made.event_id == 0 and made.query()
    s1 = acc.Stream(device=f"{vendor}:1")
    e1, e2 = s1.record_event(), s1.record_event()
    assert e1.device == acc.device(vendor, 1)
    assert 0 != e1.event_id != e2.event_id != 0
    d0, d1 = acc.Event(device=f"{vendor}:0"), acc.Event(device=f"{vendor}:1")
    d0.record(acc.Stream(device=f"{vendor}:0"))
    d1.record(s1)
    assert (d0.device, d1.device) == (acc.device(vendor, 0), acc.device(vendor, 1))


def test_event_query_synchronize_and_reuse(vendor: str) -> None:
    """mirrors test_event.py test_event_query, test_event_synchronize, test_event_lifecycle
    and test_interleaved_stream_operations"""
    s = acc.Stream(device=vendor)
    ev = acc.Event(device=vendor)
    assert ev.query()
    ev.record(s)
    ev.synchronize()
    assert ev.query()
    ev.record(s)                        # used again
    s.synchronize()
    assert ev.query()
    events = [acc.Event(device=f"{vendor}:0") for _ in range(2)]
    for e in events:
        e.record(s)
    s.synchronize()
    assert all(e.query() for e in events)


def test_query_is_false_until_the_recorded_work_completes() -> None:
    """mirrors test_event.py test_blocking_vs_non_blocking_synchronization, on a simulated
    device whose work completes only when a synchronization reaches it (no timing race)"""
    name = "s35orsimq"
    acc.backends.register(name, lambda: SimulatedBackend(capacity=1 << 30, device_count=2,
                                                         name=name, auto_complete=False))
    acc.set_current_accelerator(name)
    s = acc.Stream(device=f"{name}:0")
    ev = acc.Event(device=f"{name}:0")
    assert ev.query() and ev.event_id == 0 and ev.device == acc.device(name)
    ev.record(s)
    assert ev.event_id != 0 and not ev.query() and not s.query()
    ev.synchronize()
    assert ev.query() and ev.device == acc.device(name, 0)
    ev2 = s.record_event()
    assert not any(ev2.query() for _ in range(4))
    ev2.synchronize()
    assert ev2.query() and s.query()


def test_elapsed_time(vendor: str) -> None:
    """mirrors test_event.py test_event_elapsed_time, test_event_timing_disabled and
    test_generic_stream_event (torch's test wants a positive time; the simulated backend's
    work takes none, so it answers 0.0)"""
    s = acc.Stream(device=f"{vendor}:1")
    t1 = acc.Event(device=f"{vendor}:1", enable_timing=True)
    t2 = acc.Event(device=f"{vendor}:1", enable_timing=True)
    t1.record(s)
    t2.record(s)
    s.synchronize()
    assert t1.query() and t2.query()
    ms = t1.elapsed_time(t2)
    assert isinstance(ms, float) and ms >= 0.0
    if not _holds_data(vendor):
        assert ms == 0.0
    n1, n2 = acc.Event(device=f"{vendor}:1"), acc.Event(device=f"{vendor}:1")
    n1.record(s)
    n2.record(s)
    s.synchronize()
    with pytest.raises(ValueError, match=r"^Both events must be created with argument "
                                         r"'enable_timing=True'\.$"):
        n1.elapsed_time(n2)
    # the second event recorded without a stream: the current stream of the current device
    g = acc.Stream(vendor)
    assert g.device_index == acc.current_device_index()
    g1, g2 = acc.Event(vendor, enable_timing=True), acc.Event(vendor, enable_timing=True)
    with acc.device_index(g.device_index):
        g1.record(g)
        g1.synchronize()
        g2.record()
        g2.synchronize()
        assert g2.device == acc.device(vendor, g.device_index)
        assert g1.elapsed_time(g2) >= 0.0


def test_multiple_streams_wait_same_event(vendor: str) -> None:
    """mirrors test_event.py test_multiple_streams_wait_same_event"""
    s1, s2, s3 = (acc.Stream(device=f"{vendor}:0") for _ in range(3))
    assert len({s1.stream_id, s2.stream_id, s3.stream_id}) == 3
    ev = s1.record_event()
    assert ev.event_id != 0
    s2.wait_event(ev)
    s3.wait_event(ev)
    results = []
    for s in (s2, s3):
        with s:
            a = acc.full((30,), 2.0, device=f"{vendor}:0")
            results.append(a)
    acc.synchronize()
    assert ev.query()
    if _holds_data(vendor):
        assert results[0].tolist() == results[1].tolist() == [2.0] * 30


def test_device_synchronization(vendor: str) -> None:
    """mirrors test_event.py test_device_synchronization"""
    acc.set_device_index(1)
    x = acc.randn(100, 100, device=vendor)
    acc.synchronize()
    assert acc.current_device_index() == 1 and x.device == acc.device(vendor, 1)


# --------------------------------------------------------------------------- test_rng.py


def test_generators_of_the_vendors_devices(vendor: str) -> None:
    """mirrors test_rng.py test_generator, test_create_generator_and_seed, test_rng_state,
    test_manual_seed and test_seed"""
    g = acc.random.Generator(device=f"{vendor}:1")
    assert (g.device.type, g.device.index) == (vendor, 1)
    g0 = acc.random.Generator(device=f"{vendor}:0")
    g0.manual_seed(42)
    assert g0.initial_seed() == 42
    mod = acc.backends.device_module(vendor)
    mod.set_rng_state(mod.get_rng_state(0), 0)
    mod.set_rng_state_all(mod.get_rng_state_all())
    assert len(mod.get_rng_state_all()) == 2
    mod.manual_seed_all(42)
    assert mod.initial_seed() == 42
    mod.seed_all()
    first = mod.initial_seed()
    mod.seed_all()
    assert mod.initial_seed() != first
    if _holds_data(vendor):             # a saved state replays the same numbers
        state = mod.get_rng_state(1)
        a = acc.randn(8, device=f"{vendor}:1").tolist()
        mod.set_rng_state(state, 1)
        assert acc.randn(8, device=f"{vendor}:1").tolist() == a


# ------------------------------------------------------------------------ test_memory.py


def test_basic_allocation_and_dtypes(vendor: str) -> None:
    """mirrors test_memory.py test_basic_allocation, test_different_dtypes and
    test_large_allocation"""
    for shape in ((100,), (10000,), (10, 20, 30), (10 * 1024 * 1024 // 4,)):
        a = acc.empty(shape, device=vendor)
        assert a.device.type == vendor and a.shape == shape
    for dtype in ("float32", "float64", "int32", "int64"):
        a = acc.empty(100, dtype=dtype, device=vendor)
        assert a.dtype == np.dtype(dtype) and a.size == 100 and a.device.type == vendor


def test_no_leak_over_allocation_cycles(vendor: str) -> None:
    """mirrors test_memory.py test_memory_lifecycle, test_sequential_allocations_and_
    deallocations, TestMemoryLeaks test_no_leak_simple_allocations, test_no_leak_varying_sizes
    and test_leak_detection_with_statistics, and test_empty_cache_operation: the statistics
    prove what torch's tests can only survive"""
    acc.empty_cache()
    for i in range(200):
        x = acc.empty((100, 500, 1000, 5000, 10000)[i % 5], device=vendor)
        del x
    for _ in range(5):
        held = [acc.empty(1000, device=vendor) for _ in range(50)]
        assert acc.memory_allocated() == 50 * 4096
        held.clear()
    stats = acc.memory_stats()
    assert stats["allocated_bytes.all.current"] == 0
    assert stats["allocation.all.allocated"] == 200 + 250 == stats["allocation.all.freed"]
    assert stats["num_device_alloc"] <= 3          # cached segments reused, not reallocated
    acc.empty_cache()
    assert acc.memory_reserved() == 0
    assert acc.memory_stats()["num_device_free"] == stats["num_device_alloc"]
    final = acc.empty(10000, device=vendor)
    assert final.device.type == vendor


def test_multi_device_allocation(vendor: str) -> None:
    """mirrors test_memory.py TestMultiDeviceAllocation (test_allocation_on_device_1,
    test_simultaneous_device_allocations, test_memory_isolation_between_devices,
    test_alternating_device_allocations)"""
    mod = acc.backends.device_module(vendor)
    mod.set_device(1)
    assert acc.empty(100, device=f"{vendor}:1").device.index == 1
    mod.set_device(0)
    zero = [acc.empty(1000, device=f"{vendor}:0") for _ in range(10)]
    one = [acc.empty(1000, device=f"{vendor}:1") for _ in range(10)]
    assert {a.device.index for a in zero} == {0} and {a.device.index for a in one} == {1}
    assert not {a.data_ptr() for a in zero} & {a.data_ptr() for a in one}
    assert acc.memory_allocated(0) == acc.memory_allocated(1) == 10 * 4096
    alternating = [acc.empty(100 + i, device=f"{vendor}:{i % 2}") for i in range(20)]
    assert [a.device.index for a in alternating] == [i % 2 for i in range(20)]


def test_copies_between_devices_and_host(vendor: str) -> None:
    """mirrors test_memory.py test_tensor_copy_operations, test_tensor_to_different_device,
    test_bidirectional_device_transfer, test_no_leak_with_copies and test_tensor_from_blob
    (``fill_`` seen through the array)"""
    host = np.random.default_rng(0).standard_normal(100).astype(np.float32)
    x = acc.empty(100, device=f"{vendor}:0")
    x.copy_(host)
    y = x.to(f"{vendor}:1")
    assert y.device == acc.device(vendor, 1) and y.data_ptr() != x.data_ptr()
    back = y.to(f"{vendor}:0")
    assert back.device.index == 0
    if _holds_data(vendor):
        assert np.array_equal(x.numpy(), host) and np.array_equal(y.numpy(), host)
        assert np.array_equal(back.numpy(), host)
        x.fill_(5.0)
        assert (x.numpy() == 5.0).all()
    del x, y, back
    for _ in range(50):
        a = acc.randn(500, device=vendor)
        b = a.to(f"{vendor}:1")
        del a, b
    assert acc.memory_allocated(0) == acc.memory_allocated(1) == 0


def test_pin_memory(vendor: str) -> None:
    """mirrors test_memory.py TestPinMemory test_pin_memory (host arrays: numpy)"""
    plain = np.random.default_rng(0).standard_normal(10)
    assert not acc.is_pinned(plain)
    pinned = acc.pin_memory(plain)
    assert acc.is_pinned(pinned) and acc.is_pinned(pinned[2:5])
    assert np.array_equal(pinned, plain)


# -------------------------------------------------------------------------- test_misc.py


def test_registration_errors(vendor: str) -> None:
    """mirrors test_misc.py test_backend_module_name and test_backend_module_registration:
    a name is taken once; a bad or unknown name is refused naming the fix"""
    with pytest.raises(ValueError, match=f"a backend named '{vendor}' is already registered; "
                                         "pass replace=True"):
        acc.backends.register(vendor, SimulatedBackend)
    with pytest.raises(ValueError, match="must be a lower-case identifier"):
        acc.backends.register("Dev-1", SimulatedBackend)
    with pytest.raises(ValueError, match="register it with accelrt.backends.register"):
        acc.backends.device_module("s35nosuch")
    with pytest.raises(RuntimeError, match="third-party backends register with "
                                           r"accelrt\.backends\.register\(\)"):
        acc.empty(4, device="s35nosuch:0")
    assert acc.backends.device_module(vendor).device_count() == 2


# ----------------------------------------------------- spawn, fork and test_ipc.py


_WORKERS = '''
import accelrt as acc
from accelrt.backends.cpu import CpuBackend


def setup():
    if "s35orvend" not in acc.backends.registered():
        acc.backends.register("s35orvend", lambda: CpuBackend(
            num_devices=2, memory_limit=1 << 26, name="s35orvend", shared_memory=True))
    acc.set_current_accelerator("s35orvend")


def compute(index, results):
    try:
        setup()
        acc.set_device_index(index)
        a = acc.full((10,), 2.0, device="s35orvend")
        results.put(("ok", str(a.device), sum(a.tolist())))
    except Exception as e:
        results.put(("error", type(e).__name__, str(e)))


def consume(queue, results, register):
    try:
        if register:
            setup()
        a = queue.get(timeout=60)
        results.put(("ok", str(a.device), a.tolist()))
        del a
    except Exception as e:
        results.put(("error", type(e).__name__, str(e)))
'''

_MAIN = '''
import multiprocessing, sys, warnings
sys.path.insert(0, sys.argv[1])
import accelrt as acc
import accelrt.multiprocessing as amp
import s35or_workers as w


def forked(results, a):
    try:
        b = acc.full((3,), 1.0, device="s35orvend:1")
        acc.Stream(device="s35orvend:1").synchronize()
        results.put(("ok", b.tolist(), a.tolist(), str(acc.current_accelerator())))
    except Exception as e:
        results.put(("error", type(e).__name__, str(e)))


def main():
    w.setup()
    ctx = amp.get_context("spawn")
    results = ctx.Queue()
    p = ctx.Process(target=w.compute, args=(1, results))
    p.start()
    print("spawn", results.get(timeout=60))
    p.join(60)
    for register in (True, False):
        queue, results = ctx.Queue(), ctx.Queue()
        a = acc.full((4,), 3.0, device="s35orvend:1")
        p = ctx.Process(target=w.consume, args=(queue, results, register))
        p.start()
        queue.put(a)
        print("ipc", register, results.get(timeout=60))
        p.join(60)
        print("exit", p.exitcode)
    parent = acc.full((3,), 7.0, device="s35orvend:0")
    fctx = multiprocessing.get_context("fork")
    results = fctx.Queue()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        p = fctx.Process(target=forked, args=(results, parent))
        p.start()
    print("fork", results.get(timeout=60))
    p.join(60)
    print("exit", p.exitcode)


if __name__ == "__main__":
    main()
'''


def test_spawn_ipc_and_fork_with_a_third_party_backend(tmp_path: Path) -> None:
    """mirrors test_device.py test_device_multiprocessing_spawn and test_device_poison_fork,
    and test_ipc.py test_basic_tensor_roundtrip and test_producer_exits_cleanly (torch 2.15
    has no IPC for PrivateUse1 tensors; accelrt shares a cpu-based vendor's arrays).

    A spawned child knows only the backends it registers (as a child imports torch_openreg);
    a consumer that did not register the producer's backend is told how. accelrt's core
    poisons no fork: refusing a forked child is the backend's decision (CUDA and OpenCL
    refuse, with PyTorch's message); a cpu-based vendor's child works, as ``acc.cpu``'s."""
    (tmp_path / "s35or_workers.py").write_text(textwrap.dedent(_WORKERS))
    (tmp_path / "main.py").write_text(textwrap.dedent(_MAIN))
    r = subprocess.run([sys.executable, str(tmp_path / "main.py"), str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert lines[0] == "spawn ('ok', 's35orvend:1', 20.0)", r.stdout
    assert lines[1] == "ipc True ('ok', 's35orvend:1', [3.0, 3.0, 3.0, 3.0])", r.stdout
    assert lines[2] == "exit 0"
    assert lines[3].startswith("ipc False ('error', 'BackendUnavailableError', "), r.stdout
    assert "Unknown backend 's35orvend' in device string 's35orvend:1'" in lines[3]
    assert "register" in lines[3] and lines[4] == "exit 0"
    assert lines[5] == ("fork ('ok', [1.0, 1.0, 1.0], [7.0, 7.0, 7.0], 's35orvend')"), r.stdout
    assert lines[6] == "exit 0"
