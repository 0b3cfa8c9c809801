"""PyTorch's own runtime tests of ``test/test_accelerator.py``, the device-generic half of
``test/test_xpu.py``, the runtime half of ``test/test_cuda_multigpu.py`` and
``test/test_cuda_primary_ctx.py``, re-checked on accelrt (session 35).

Each test says which PyTorch test it mirrors. The import is changed as the porting guide says
(``torch.accelerator`` -> ``accelrt``, ``torch.cuda``/``torch.xpu`` -> a device module,
tensors -> ``accelrt`` arrays where only memory matters). The tests run on a two-device cpu
backend and on a two-device :class:`~accelrt.testing.SimulatedBackend` where both apply;
``torch.cuda._sleep`` (work that keeps a stream busy) is the simulated device's pending work
(``launch_work`` with ``auto_complete=False``, :func:`helpers.register_toy`) or, on the cpu
backend with asynchronous streams, a host function held by a ``threading.Event``.

Where accelrt differs on purpose (docs/differences.md) the test checks accelrt's documented
answer and says so.
"""

from __future__ import annotations

import collections
import gc
import operator
import os
import subprocess
import sys
import textwrap
import threading
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from helpers import register_toy
from helpers.registry import module_backends

import accelrt as acc
from accelrt import backends
from accelrt.backends.cpu import CpuBackend
from accelrt.testing import SimulatedBackend

CPU = "s35cpu"        # two simulated cpu devices, synchronous streams
CPU_ASYNC = "s35cpua"  # two cpu devices whose streams run on worker threads
SIM = "s35sim"        # two SimulatedBackend devices (work completes at once)
SMALL = "s35small"    # one 64 MiB SimulatedBackend device (memory fraction)

_backends = module_backends({
    CPU: lambda: CpuBackend(num_devices=2, async_streams=False, name=CPU),
    CPU_ASYNC: lambda: CpuBackend(num_devices=2, async_streams=True, name=CPU_ASYNC),
    SIM: lambda: SimulatedBackend(device_count=2, priority_range=(0, -2), name=SIM),
    SMALL: lambda: SimulatedBackend(capacity=64 << 20, name=SMALL),
})


@pytest.fixture(params=[CPU, SIM])
def two(request: pytest.FixtureRequest) -> Iterator[tuple[str, Any]]:
    """``(name, device module)`` of a two-device backend, current, with device 0 current."""
    name: str = request.param
    acc.set_current_accelerator(name)
    acc.set_device_index(0)
    yield name, backends.device_module(name)
    acc.synchronize(f"{name}:0")
    acc.synchronize(f"{name}:1")
    gc.collect()


@pytest.fixture
def toy() -> Iterator[tuple[str, Any, SimulatedBackend]]:
    """A two-device simulated backend whose work stays pending until completed (the stand-in
    for ``torch.cuda._sleep``), current, with device 0 current: ``(name, module, backend)``."""
    name, inst = register_toy()
    acc.set_current_accelerator(name)
    acc.set_device_index(0)
    yield name, backends.device_module(name), inst
    inst.complete_all()
    gc.collect()


def _dev(name: str, index: int | None = None) -> acc.device:
    return acc.device(name, index)


# =============================================================== test/test_accelerator.py

def test_current_accelerator(two: tuple[str, Any]) -> None:
    """mirrors test_accelerator.py test_current_accelerator: the type, no index, and a device
    of another type refused by ``set_device_index`` with "doesn't match the current
    accelerator" (here another registered backend: accelrt has no host device)."""
    name, _ = two
    assert acc.is_available()
    assert acc.current_accelerator().type == name  # type: ignore[union-attr]
    assert acc.current_accelerator().index is None  # type: ignore[union-attr]
    other = SIM if name == CPU else CPU
    with pytest.raises(ValueError, match="doesn't match the current accelerator"):
        acc.set_device_index(other)
    with pytest.raises(ValueError, match="doesn't match the current accelerator"):
        acc.set_device_index(f"{other}:0")


def test_generic_multi_device_behavior(two: tuple[str, Any]) -> None:
    """mirrors test_accelerator.py test_generic_multi_device_behavior: ``set_device_index``
    round trip; ``set_stream`` of another device's stream makes that device current and
    ``synchronize`` of a device leaves the current device alone."""
    orig = acc.current_device_index()
    target = (orig + 1) % acc.device_count()
    acc.set_device_index(target)
    assert acc.current_device_index() == target
    acc.set_device_index(orig)
    assert acc.current_device_index() == orig
    s1 = acc.Stream(target)
    acc.set_stream(s1)
    assert acc.current_device_index() == target
    acc.synchronize(orig)
    assert acc.current_device_index() == target


def test_generic_stream_behavior(two: tuple[str, Any]) -> None:
    """mirrors test_accelerator.py test_generic_stream_behavior (the arithmetic left out:
    the arrays only carry the data)."""
    s1, s2 = acc.Stream(), acc.Stream()
    acc.set_stream(s1)
    assert acc.current_stream() == s1
    event = acc.Event()
    a = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    acc.set_stream(s2)
    assert acc.current_stream() == s2
    a_acc = acc.empty(1000).copy_(a, non_blocking=True)
    acc.set_stream(s1)
    assert acc.current_stream() == s1
    event.record(s2)
    event.synchronize()
    event.record(s2)
    acc.synchronize()
    assert event.query()
    np.testing.assert_array_equal(a_acc.numpy(), a)


def test_current_stream_query(two: tuple[str, Any]) -> None:
    """mirrors test_accelerator.py test_current_stream_query: the current stream by device,
    index and string. Documented difference (docs/differences.md §1): a device of another
    backend names that backend's stream instead of raising."""
    name, _ = two
    s = acc.current_stream()
    assert acc.current_stream(s.device) == s
    assert acc.current_stream(s.device.index) == s
    assert acc.current_stream(str(s.device)) == s
    other = SIM if name == CPU else CPU
    assert acc.current_stream(_dev(other, 0)).device == _dev(other, 0)


def test_stream_compare_with_non_stream(two: tuple[str, Any]) -> None:
    """mirrors test_accelerator.py test_stream_compare_with_non_stream: equality with
    non-streams is False, ordering raises TypeError, a stream rebuilt from its triple is
    equal."""
    s1 = acc.Stream()
    for other in (42, "hello", 3.14, None, object()):
        assert (s1 == other) is False
        assert (s1 != other) is True
    assert s1 in [1, "a", s1]
    s2 = acc.Stream()
    for op in (operator.lt, operator.le, operator.gt, operator.ge):
        with pytest.raises(TypeError):
            op(s1, s2)
    same = acc.Stream(stream_id=s1.stream_id, device_index=s1.device_index,
                      device_type=s1.device_type)
    assert (s1 == same) is True
    assert (s1 != same) is False


def test_device_context_manager(two: tuple[str, Any]) -> None:
    """mirrors test_accelerator.py test_device_context_manager and
    test_multi_device_context_manager."""
    prev = acc.current_device_index()
    with acc.device_index(None):
        assert acc.current_device_index() == prev
    assert acc.current_device_index() == prev
    with acc.device_index(0):
        assert acc.current_device_index() == 0
    assert acc.current_device_index() == prev
    acc.set_device_index(0)
    with acc.device_index(1):
        assert acc.current_device_index() == 1
    assert acc.current_device_index() == 0


def test_stream_context_manager_and_reentrance(two: tuple[str, Any]) -> None:
    """mirrors test_accelerator.py test_stream_context_manager and
    test_stream_context_manager_reentrance."""
    prev = acc.current_stream()
    with acc.Stream() as s:
        assert acc.current_stream() == s
    assert acc.current_stream() == prev
    s0 = acc.Stream()
    with s0, s0:
        assert acc.current_stream() == s0
    assert acc.current_stream() == prev
    s1 = acc.Stream()
    with s0:
        assert acc.current_stream() == s0
        with s1:
            assert acc.current_stream() == s1
            with s0:
                assert acc.current_stream() == s0
    assert acc.current_stream() == prev


def test_multi_device_stream_context_manager(two: tuple[str, Any]) -> None:
    """mirrors test_accelerator.py test_multi_device_stream_context_manager and
    test_xpu.py test_multi_device_stream_context_manager."""
    _, m = two
    acc.set_device_index(0)
    src_prev, dst_prev = acc.current_stream(), acc.current_stream(1)
    with acc.Stream(1) as dst:
        assert acc.current_device_index() == 1
        assert acc.current_stream() == dst
        assert acc.current_stream(0) == src_prev
        assert m.current_stream(0) == src_prev
    assert acc.current_device_index() == 0
    assert acc.current_stream() == src_prev
    assert acc.current_stream(1) == dst_prev


def test_generic_event_behavior(two: tuple[str, Any]) -> None:
    """mirrors test_accelerator.py test_generic_event_behavior: PyTorch's ValueErrors of
    ``elapsed_time`` without timing, unrecorded, and timing off by default."""
    with pytest.raises(ValueError, match="Both events must be created with argument "
                                         "'enable_timing=True'"):
        acc.Event(enable_timing=False).elapsed_time(acc.Event(enable_timing=False))
    with pytest.raises(ValueError, match="Both events must be recorded before calculating "
                                         "elapsed time"):
        acc.Event(enable_timing=True).elapsed_time(acc.Event(enable_timing=True))
    with pytest.raises(ValueError, match="Both events must be created with argument "
                                         "'enable_timing=True'"):
        acc.Event().elapsed_time(acc.Event())


def test_empty_host_cache_before_any_allocation(two: tuple[str, Any]) -> None:
    """mirrors test_accelerator.py test_empty_host_cache."""
    assert acc.empty_host_cache() is None


def test_accelerator_memory_stats(two: tuple[str, Any]) -> None:
    """mirrors test_accelerator.py test_memory_stats: the key set, the one-value getters,
    and 1 KiB of active memory allocated and freed."""
    tmp = acc.randn(100)
    del tmp
    gc.collect()
    acc.empty_cache()
    stats = acc.memory_stats()
    expected = [f"{st}.{pt}.{mt}"
                for st in ("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes")
                for pt in ("all", "small_pool", "large_pool")
                for mt in ("peak", "current", "allocated", "freed")]
    assert [k for k in expected if k not in stats] == []
    prev_alloc, prev_res = acc.memory_allocated(), acc.memory_reserved()
    assert prev_alloc >= 0 and prev_res >= 0
    assert acc.max_memory_allocated() > 0 and acc.max_memory_reserved() > 0
    tmp = acc.ones(256)
    assert acc.memory_allocated() > prev_alloc
    assert acc.memory_reserved() >= prev_res
    del tmp
    gc.collect()
    acc.empty_cache()
    acc.reset_peak_memory_stats()
    assert acc.memory_allocated() == prev_alloc
    assert acc.memory_reserved() == prev_res
    acc.reset_accumulated_memory_stats()
    prev_max_alloc, prev_max_res = acc.max_memory_allocated(), acc.max_memory_reserved()
    prev_active = acc.memory_stats()["active_bytes.all.current"]
    tmp = acc.randn(256)                                   # float32: 1 KiB
    assert acc.memory_stats()["active_bytes.all.current"] == 1024 + prev_active
    assert acc.memory_stats()["active_bytes.all.freed"] == 0
    del tmp
    gc.collect()
    acc.empty_cache()
    assert acc.memory_stats()["active_bytes.all.current"] == prev_active
    assert acc.memory_stats()["active_bytes.all.freed"] == 1024
    acc.reset_peak_memory_stats()
    assert acc.max_memory_allocated() == prev_max_alloc
    assert acc.max_memory_reserved() == prev_max_res


def test_get_memory_info(two: tuple[str, Any]) -> None:
    """mirrors test_accelerator.py test_get_memory_info."""
    free, total = acc.get_memory_info()
    assert free >= 0 and total >= 0 and free <= total


def test_device_capability_supported_dtypes(two: tuple[str, Any]) -> None:
    """mirrors test_accelerator.py test_device_capability_supported_dtypes: a non-empty set;
    every dtype in it makes an array and casts both ways, every other one is refused with a
    TypeError or RuntimeError."""
    supported = acc.get_device_capability()["supported_dtypes"]
    assert isinstance(supported, set) and supported
    ref = np.dtype(min(supported))
    every = {np.dtype(t).name for t in np.sctypeDict.values()}
    assert supported <= every
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Casting complex values to real", UserWarning)
        for name in sorted(every):
            if name in supported:
                acc.empty(16, dtype=name).to(ref).to(np.dtype(name))
            else:
                with pytest.raises((RuntimeError, TypeError)):
                    acc.empty(16, dtype=name)


# =============================================================== test/test_xpu.py

def test_device_behavior_and_multi_device_behavior(two: tuple[str, Any]) -> None:
    """mirrors test_xpu.py test_device_behavior and test_multi_device_behavior (``device``
    and the private ``_DeviceGuard``, which torch.cuda has too)."""
    _, m = two
    cur = m.current_device()
    m.set_device(cur)
    assert m.current_device() == cur
    target = (cur + 1) % m.device_count()
    with m.device(target):
        assert m.current_device() == target
    assert m.current_device() == cur
    with m._DeviceGuard(target):
        assert m.current_device() == target
    assert m.current_device() == cur


def test_device_guard_takes_an_int_only(two: tuple[str, Any]) -> None:
    """``_DeviceGuard`` as torch.cuda's: a negative index is a no-op (``_exchange_device``
    returns -1), anything but an int is PyTorch's RuntimeError "invalid argument to
    exchangeDevice" (checked on torch 2.15 for a str and a bool: it is raised on entry there,
    on construction here)."""
    name, m = two
    m.set_device(1)
    with m._DeviceGuard(-1):
        assert m.current_device() == 1
    assert m.current_device() == 1
    for bad in ("x", True, f"{name}:0", 0.0, None):
        with pytest.raises(RuntimeError, match="invalid argument to exchangeDevice"):
            m._DeviceGuard(bad)
        with pytest.raises(TypeError):
            m._DeviceGuard(bad)
    with pytest.raises(IndexError), m._DeviceGuard(2):
        pass
    assert m.current_device() == 1


def test_get_device_properties_name_and_uuid(two: tuple[str, Any]) -> None:
    """mirrors test_xpu.py test_get_device_properties (the fields accelrt has: the XPU
    capability fields are torch.xpu's own)."""
    _, m = two
    cur = m.current_device()
    props = m.get_device_properties(cur)
    assert props == m.get_device_properties(None) == m.get_device_properties()
    assert m.get_device_name(cur) == m.get_device_name(None) == m.get_device_name()
    assert len(str(props.uuid)) == 36
    assert len(uuid.UUID(str(props.uuid)).bytes) == 16


def test_streams_and_stream_priority(two: tuple[str, Any]) -> None:
    """mirrors test_xpu.py test_streams and test_stream_priority."""
    name, m = two
    s0 = m.Stream()
    m.set_stream(s0)
    assert m.current_stream() == s0
    s2 = m.Stream()
    assert (s0 == s2) is False
    m.set_stream(s2)
    with m.stream(s0):
        assert m.current_stream() == s0
    assert m.current_stream() == s2
    low, high = m.Stream.priority_range()
    for prio in (low, high):
        s = m.Stream(device=0, priority=prio)
        assert s.priority == prio
        assert s.device == _dev(name, 0)


def test_stream_event_repr(two: tuple[str, Any]) -> None:
    """mirrors test_xpu.py test_stream_event_repr (in torch.cuda's shape, as accelrt's
    reprs are: docs/differences.md)."""
    name, m = two
    s = m.current_stream()
    assert f"accelrt.{name}.Stream" in str(s)
    e = m.Event()
    assert f"accelrt.{name}.Event uninitialized" in str(e)
    s.record_event(e)
    assert f"accelrt.{name}.Event" in str(e) and "uninitialized" not in str(e)


def test_events_query_sync_and_ids(two: tuple[str, Any]) -> None:
    """mirrors test_xpu.py test_events: an unrecorded event is complete; ``event_id`` is 0
    until the first record, then the native handle (``sycl_event``/``cuda_event``)."""
    _, m = two
    stream = m.current_stream()
    event = m.Event()
    assert event.query()
    stream.record_event(event)
    event.synchronize()
    assert event.query()
    start, end = m.Event(enable_timing=True), m.Event(enable_timing=True)
    stream.record_event(start)
    stream.record_event(end)
    m.synchronize()
    assert start.elapsed_time(end) >= 0
    event = m.Event(enable_timing=True)
    assert event.event_id == 0 and event.cuda_event == 0
    event.record()
    assert event.event_id != 0 and event.cuda_event == event.event_id


def test_generic_stream_event(two: tuple[str, Any]) -> None:
    """mirrors test_xpu.py test_generic_stream_event: a generic stream rewrapped by the device
    module's class, generic and module events, and the module's classes subclass the generic
    ones."""
    name, m = two
    stream = acc.Stream(name)
    assert stream.device_index == m.current_device()
    mod_stream = m.Stream(stream_id=stream.stream_id, device_index=stream.device_index,
                          device_type=stream.device_type)
    assert isinstance(mod_stream, acc.Stream) and acc.Stream in type(mod_stream).mro()
    assert mod_stream.stream_id == stream.stream_id
    assert stream.stream_id != m.current_stream().stream_id
    e1, e2 = acc.Event(name, enable_timing=True), acc.Event(name, enable_timing=True)
    assert e1.event_id == 0
    a = np.arange(1000, dtype=np.float32)
    with m.stream(mod_stream):
        a_acc = acc.empty(1000).copy_(a, non_blocking=True)
        assert m.current_stream().stream_id == stream.stream_id
    e1.record(stream)
    e1.synchronize()
    assert e1.query()
    e2.record()
    e2.synchronize()
    assert e2.query()
    assert e1.event_id != e2.event_id
    np.testing.assert_array_equal(a_acc.numpy(), a)
    assert e1.elapsed_time(e2) >= 0
    assert isinstance(m.Event(), acc.Event) and acc.Event in type(m.Event()).mro()


def test_stream_compatibility(two: tuple[str, Any]) -> None:
    """mirrors test_xpu.py test_stream_compatibility: a module's streams are the generic API's
    streams; an index past the last device is a RuntimeError (with torch.cuda's words, where
    torch.xpu says "The device index is out of range")."""
    _, m = two
    s1, s2 = m.Stream(), m.Stream()
    acc.set_stream(s1)
    assert acc.current_stream().stream_id == s1.stream_id
    acc.set_stream(s2)
    assert acc.current_stream().stream_id == s2.stream_id
    with pytest.raises(RuntimeError, match=r"Device index value 2 is out of index range "
                                           r"\[0, 2\)"):
        acc.current_stream(acc.device_count())


def test_generator(two: tuple[str, Any]) -> None:
    """mirrors test_xpu.py test_generator (``torch.manual_seed`` is ``manual_seed_all``)."""
    _, m = two
    saved = m.get_rng_state_all()
    acc.random.manual_seed_all(2024)
    g0 = m.get_rng_state()
    acc.random.manual_seed_all(1234)
    g1 = m.get_rng_state()
    assert not np.array_equal(g0, g1)
    m.manual_seed(2024)
    np.testing.assert_array_equal(m.get_rng_state(), g0)
    m.set_rng_state(g1)
    np.testing.assert_array_equal(m.get_rng_state(), g1)
    acc.random.manual_seed_all(1234)
    m.set_rng_state(g0)
    assert m.initial_seed() == 2024
    m.set_rng_state_all(saved)


def test_out_of_memory_messages(two: tuple[str, Any]) -> None:
    """mirrors test_xpu.py test_out_of_memory and test_raises_oom: PyTorch's "Tried to
    allocate" sizes, "more than 1EB", and ``OutOfMemoryError`` (a RuntimeError)."""
    name, m = two
    keep = acc.zeros(1024)
    with pytest.raises(RuntimeError, match=r"Tried to allocate 800000000\.00 GiB"):
        acc.empty(1024 * 1024 * 1024 * 800000000, dtype=np.int8)
    with pytest.raises(RuntimeError, match=rf"{name.upper()} out of memory\. Tried to "
                                           r"allocate more than 1EB memory"):
        acc.empty(1024 * 1024 * 1024 * 8000000000, dtype=np.int8)
    m.empty_cache()
    with pytest.raises(acc.OutOfMemoryError):
        acc.empty(1024 * 1024 * 1024 * 1024)
    del keep


def test_set_per_process_memory_fraction() -> None:
    """mirrors test_xpu.py test_set_per_process_memory_fraction, on a 64 MiB device."""
    acc.set_current_accelerator(SMALL)
    m = backends.device_module(SMALL)
    gc.collect()
    m.empty_cache()
    total = m.get_device_properties().total_memory
    orig = m.get_per_process_memory_fraction()
    for bad in (-0.1, 1.1):
        with pytest.raises(ValueError, match="Invalid fraction value"):
            m.set_per_process_memory_fraction(bad)
    m.set_per_process_memory_fraction(0.5)
    try:
        t = acc.empty(int(total * 0.49) - m.memory_reserved(), dtype=np.int8)
        del t
        gc.collect()
        m.empty_cache()
        assert m.get_per_process_memory_fraction() == 0.5
        with pytest.raises(acc.OutOfMemoryError):
            acc.empty(int(total * 0.51), dtype=np.int8)
    finally:
        m.set_per_process_memory_fraction(orig)
        m.empty_cache()


def test_memory_allocation_and_device_memory_allocated(two: tuple[str, Any]) -> None:
    """mirrors test_xpu.py test_memory_allocation and test_device_memory_allocated, and
    test_cuda_multigpu.py test_cuda_device_memory_allocated (a module ``device`` context
    manager as the device argument)."""
    name, m = two
    m.empty_cache()
    prev_alloc, prev_res = m.memory_allocated(), m.memory_reserved()
    a = acc.ones(10)
    assert m.memory_allocated() > prev_alloc and m.memory_reserved() >= prev_res
    del a
    assert m.memory_allocated() == prev_alloc
    m.empty_cache()
    assert m.memory_reserved() <= prev_res
    m.reset_accumulated_memory_stats()
    prev_active = m.memory_stats()["active_bytes.all.current"]
    a = acc.randn(256)
    assert m.memory_stats()["active_bytes.all.current"] == 1024 + prev_active
    assert m.memory_stats()["active_bytes.all.freed"] == 0
    del a
    assert m.memory_stats()["active_bytes.all.current"] == prev_active
    assert m.memory_stats()["active_bytes.all.freed"] == 1024
    before = [m.memory_allocated(i) for i in range(m.device_count())]
    x = acc.ones(10, device=f"{name}:0")
    assert m.memory_allocated(0) > before[0]
    assert all(m.memory_allocated(m.device(i)) == before[i]
               for i in range(1, m.device_count()))
    del x


def test_xpu_memory_stats_peaks(two: tuple[str, Any]) -> None:
    """mirrors test_xpu.py test_memory_stats: after both resets the peaks are the current
    values, and stay so after 1 KiB comes and goes."""
    _, m = two
    gc.collect()
    m.empty_cache()
    m.reset_peak_memory_stats()
    m.reset_accumulated_memory_stats()
    assert acc.memory_allocated() == acc.max_memory_allocated()
    assert acc.memory_reserved() == acc.max_memory_reserved()
    prev_max_alloc, prev_max_res = acc.max_memory_allocated(), acc.max_memory_reserved()
    tmp = acc.randn(256)
    assert acc.memory_stats()["active_bytes.all.freed"] == 0
    del tmp
    gc.collect()
    acc.empty_cache()
    assert acc.memory_stats()["active_bytes.all.freed"] == 1024
    acc.reset_peak_memory_stats()
    assert acc.max_memory_allocated() == prev_max_alloc
    assert acc.max_memory_reserved() == prev_max_res


#: torch's device forms of test_mem_get_info (``name`` stands for "cuda"), with their index
MEM_FORMS = [("0", 0), ("device", 0), ("device:0", 0), ("name", 0), ("name:0", 0),
             ("1", 1), ("device:1", 1), ("name:1", 1)]


def _form(name: str, form: str) -> Any:
    if form.isdigit():
        return int(form)
    kind, _, index = form.partition(":")
    text = name + (f":{index}" if index else "")
    return acc.device(text) if kind == "device" else text


@pytest.mark.parametrize(("form", "index"), MEM_FORMS, ids=[f for f, _ in MEM_FORMS])
def test_mem_get_info_of_every_device_form(two: tuple[str, Any], form: str,
                                           index: int) -> None:
    """mirrors test_cuda_multigpu.py test_mem_get_info (and test_xpu.py's): 8 MiB more in use
    lowers ``free`` and leaves ``total``, for each way of naming the device."""
    name, m = two
    arg = _form(name, form)
    m.empty_cache()
    m.synchronize()
    free0, total0 = m.mem_get_info(arg)
    t = acc.empty(1024 * 1024 * 8, device=_dev(name, index))
    free1, total1 = m.mem_get_info(arg)
    assert free1 < free0 and total1 == total0
    del t
    m.empty_cache()


def test_get_arch_list_flags_and_peer_access(two: tuple[str, Any]) -> None:
    """mirrors test_xpu.py test_get_arch_list and test_can_device_access_peer."""
    _, m = two
    flags = m.get_gencode_flags()
    assert all(arch in flags for arch in m.get_arch_list())
    n = m.device_count()
    for d in range(n):
        for p in range(n):
            assert m.can_device_access_peer(d, p) == m.can_device_access_peer(p, d)


def test_is_bf16_and_tf32_supported(two: tuple[str, Any]) -> None:
    """mirrors test_xpu.py TestXPUAPISanity test_is_bf16_supported / test_is_tf32_supported
    (the simulated devices have no TF32)."""
    _, m = two
    assert m.is_bf16_supported(including_emulation=True) == m.is_available()
    assert m.is_tf32_supported() is False


def test_mempool_ids(two: tuple[str, Any]) -> None:
    """mirrors test_xpu.py TestMemPool test_mempool_id and test_mempool_multithread."""
    _, m = two
    p1, p2 = m.MemPool().id, m.MemPool().id
    assert (p1[0] == 0) == (p2[0] == 0)
    assert abs(p2[1] - p1[1]) > 0
    ids: list[tuple[int, int]] = []
    lock = threading.Lock()

    def make() -> None:
        pool_id = m.MemPool().id
        with lock:
            ids.append(pool_id)

    threads = [threading.Thread(target=make) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(ids)) == 4


def test_mempool_empty_cache_on_release(two: tuple[str, Any]) -> None:
    """mirrors test_xpu.py TestMemPool test_mempool_empty_cache: dropping a pool gives its
    cached segments back; the default pool's stay."""
    _, m = two
    m.empty_cache()
    pool = m.MemPool()
    x = acc.empty((1024, 1024))
    with m.use_mem_pool(pool):
        y = acc.empty((1024, 1024))
    del x, y
    peak = m.memory_reserved()
    del pool
    gc.collect()
    after = m.memory_reserved()
    assert 0 < after < peak
    m.empty_cache()


# =============================================================== test/test_cuda_multigpu.py

def test_synchronize_forms(two: tuple[str, Any]) -> None:
    """mirrors test_cuda_multigpu.py test_cuda_synchronize: every device form, and a device
    of another type refused with "Expected a cuda device, but got" (here another
    backend's)."""
    name, m = two
    m.synchronize()
    for arg in (name, f"{name}:0", 0, _dev(name, 0), f"{name}:1", 1, _dev(name, 1)):
        m.synchronize(arg)
    other = SIM if name == CPU else CPU
    for bad in (_dev(other), other):
        with pytest.raises(ValueError, match=f"Expected a {name} device, but got: {other}"):
            m.synchronize(bad)


def _check_memory_stat_consistency(m: Any) -> None:
    """The counters of ``memory_stats(device)`` that a snapshot also shows, recomputed from
    the snapshot's segments and blocks (test_cuda_multigpu.py's
    ``_check_memory_stat_consistency``)."""
    expected: dict[int, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for seg in m.memory_snapshot():
        want = expected[seg["device"]]
        pool = seg["segment_type"] + "_pool"
        expandable = seg["is_expandable"]
        if not expandable:
            want["segment.all.current"] += 1
            want[f"segment.{pool}.current"] += 1
        for stat, field in (("allocated_bytes", "allocated_size"),
                            ("reserved_bytes", "total_size"), ("active_bytes", "active_size"),
                            ("requested_bytes", "requested_size")):
            want[f"{stat}.all.current"] += seg[field]
            want[f"{stat}.{pool}.current"] += seg[field]
        requested = 0
        split = len(seg["blocks"]) > 1
        for block in seg["blocks"]:
            if block["state"] == "active_allocated":
                want["allocation.all.current"] += 1
                want[f"allocation.{pool}.current"] += 1
            if block["state"].startswith("active_"):
                requested += block["requested_size"]
                want["active.all.current"] += 1
                want[f"active.{pool}.current"] += 1
            if block["state"] == "inactive" and split and not expandable:
                want["inactive_split.all.current"] += 1
                want[f"inactive_split.{pool}.current"] += 1
                want["inactive_split_bytes.all.current"] += block["size"]
                want[f"inactive_split_bytes.{pool}.current"] += block["size"]
        assert requested == seg["requested_size"]
    for device, want in expected.items():
        stats = m.memory_stats(device)
        for key, value in want.items():
            assert stats[key] == value, (device, key)


def _memory_stats_steps(m: Any, device: Any, n: int, full_size: bool) -> Iterator[None]:
    """The allocation script of test_cuda_multigpu.py's ``_test_memory_stats_generator``:
    float32 arrays made, reordered and dropped on ``device``, checking after each step that
    ``memory_allocated`` moved as it should and never passed its peak (and the same of
    ``memory_reserved``), and what ``empty_cache`` and ``reset_peak_memory_stats`` do.
    ``full_size=False`` shrinks the biggest arrays for the cpu backend (real host memory)."""
    m0 = m.memory_allocated(device)
    last = {"m": m0, "max_m": m.max_memory_allocated(device),
            "r": m.memory_reserved(device), "max_r": m.max_memory_reserved(device)}

    def alloc(*shape: int) -> acc.Array:
        with m.device(device):
            return acc.empty(shape, dtype=np.float32)

    def check(change: int = 1, empty_cache: bool = False, reset_peak: bool = False) -> None:
        new_m, new_max_m = m.memory_allocated(device), m.max_memory_allocated(device)
        if change > 0:
            assert new_m > last["m"]
        elif change < 0:
            assert new_m < last["m"]
        else:
            assert new_m == last["m"]
        assert new_m <= new_max_m and new_max_m >= last["max_m"]
        last["m"], last["max_m"] = new_m, new_max_m
        new_r, new_max_r = m.memory_reserved(device), m.max_memory_reserved(device)
        assert new_r <= new_max_r and new_max_r >= last["max_r"]
        last["r"], last["max_r"] = new_r, new_max_r
        if empty_cache:
            before = m.memory_stats(device)
            syncs = before.get("num_sync_all_streams", -1)
            assert syncs >= 0
            assert before.get("num_device_alloc", -1) >= (0 if new_m == 0 else 1)
            assert before.get("num_device_free", -1) >= 0
            m.empty_cache()
            after = m.memory_stats(device)
            assert after.get("num_sync_all_streams", -1) == syncs + 1
            assert after.get("num_device_alloc", -1) >= before.get("num_device_alloc", -1)
            assert after.get("num_device_free", -1) >= before.get("num_device_free", -1)
            new_r, new_max_r = m.memory_reserved(device), m.max_memory_reserved(device)
            assert new_r <= last["r"] and new_r <= new_max_r and new_max_r == last["max_r"]
            last["r"] = new_r
        if reset_peak:
            m.reset_peak_memory_stats(device)
            assert m.memory_allocated(device) == last["m"]
            assert m.max_memory_allocated(device) == last["m"]
            last["max_m"] = last["m"]
            assert m.memory_reserved(device) == last["r"]
            assert m.max_memory_reserved(device) == last["r"]
            last["max_r"] = last["r"]

    check(0)
    check(0, reset_peak=True)
    check(0, empty_cache=True)
    check(0, reset_peak=True)
    check(0)
    yield
    arrays1 = [alloc(1), alloc(10, 20), alloc(200, 300, 2000 if full_size else 20)]
    m1 = m.memory_allocated(device)
    check(1)
    yield
    arrays2 = []
    for i in range(1, n // 2 + 1):              # small ones
        arrays2.append(alloc(i, i * 4))
        check(1)
        yield
    for i in range(5, n // 2 + 5):              # large ones
        arrays2.append(alloc(i, i * 7, i * 9, i * 11 if full_size else 11))
        check(1, reset_peak=(i % 2 == 0))
        yield
    arrays2.append(alloc(0, 0, 0))
    check(0)
    yield
    permuted = []
    for i in np.random.default_rng(35).permutation(len(arrays2)):
        permuted.append(arrays2[i])
        check(0)
        yield
    del arrays2
    check(0)
    yield
    arrays2 = permuted
    check(0)
    yield
    del permuted
    check(0, reset_peak=True)
    yield
    for i in range(n // 2):
        size = arrays2[i].size
        del arrays2[i]
        check(-size)
        yield
    for i in range(2, 2 * n // 3 + 2):
        arrays2.append(alloc(i, i * 3, i * 8))
        check(1)
        yield
    del arrays2
    check(-1, reset_peak=True)
    check(0)
    assert m.memory_allocated(device) == m1
    yield
    del arrays1
    check(-1, reset_peak=True)
    assert m.memory_allocated(device) == m0
    check(0, empty_cache=True)
    check(0, reset_peak=True)


def test_memory_stats_steps_and_snapshot_consistency(two: tuple[str, Any]) -> None:
    """mirrors test_cuda_multigpu.py test_memory_stats: every step of the allocation script
    keeps the statistics equal to what the snapshot shows."""
    name, m = two
    gc.collect()
    m.empty_cache()
    for _ in _memory_stats_steps(m, None, 35, full_size=name == SIM):
        _check_memory_stat_consistency(m)


def test_memory_stats_two_devices_interleaved(two: tuple[str, Any]) -> None:
    """mirrors test_cuda_multigpu.py test_memory_stats_multigpu: the scripts of two devices
    interleaved step by step, then in a seeded semi-random order; each device's statistics
    move only with its own arrays."""
    name, m = two
    full = name == SIM

    def advance(gen: Iterator[None], done: bool) -> bool:
        if not done:
            try:
                next(gen)
            except StopIteration:
                return True
        return done

    m.empty_cache()
    gen0 = _memory_stats_steps(m, f"{name}:0", 35, full)
    gen1 = _memory_stats_steps(m, _dev(name, 1), 35, full)
    end0 = end1 = False
    while not (end0 and end1):
        end0 = advance(gen0, end0)
        end1 = advance(gen1, end1)
    m.empty_cache()
    gen0 = _memory_stats_steps(m, 0, 35, full)
    gen1 = _memory_stats_steps(m, _dev(name, 1), 35, full)
    end0 = end1 = False
    rng = np.random.default_rng(7)
    while not (end0 and end1):
        end0 = advance(gen0, end0)
        times = int(rng.integers(0, 3)) if not end0 else 1 << 30
        t = 0
        while t < times and not end1:
            end1 = advance(gen1, end1)
            t += 1


def test_arrays_follow_the_device_context(two: tuple[str, Any]) -> None:
    """mirrors test_cuda_multigpu.py test_autogpu, test_copy_device, test_cuda_set_device and
    test_tensor_device: a factory without a device allocates on the current device, ``to``
    the backend's bare device copies to the current device and is the array itself when it
    is there, and ``set_device`` inside a ``device`` block is undone by its exit. (On the
    simulated device, which has no ``memcpy_peer``, the copies between its devices raised
    ``NotImplementedError``.)"""
    name, m = two
    x = acc.randn(5, 5)
    assert x.device == _dev(name, 0)
    with m.device(1):
        z = acc.randn(5, 5)
        assert z.device == _dev(name, 1)
        assert acc.zeros(1, device=0).device == _dev(name, 0)
        assert acc.zeros(1, device=None).device == _dev(name, 1)
        y = x.to(_dev(name))
        assert y.device == _dev(name, 1) and y.to(_dev(name)) is y
        w = y.to(0)
        assert w.device == _dev(name, 0) and w.to(0) is w
    assert z.to(_dev(name)).device == _dev(name, 0)
    host = np.arange(25, dtype=np.float32).reshape(5, 5)
    with m.device(1):
        assert acc.asarray(host).device.index == 1
        m.set_device(0)
        assert acc.asarray(host).device.index == 0
        with m.device(1):
            assert acc.asarray(host).device.index == 1
        assert acc.asarray(host).device.index == 0
        m.set_device(1)
    assert acc.asarray(host).device.index == 0


def test_current_and_default_stream_per_device(two: tuple[str, Any]) -> None:
    """mirrors test_cuda_multigpu.py test_current_stream and test_default_stream."""
    name, m = two
    d0, d1 = _dev(name, 0), _dev(name, 1)
    s0, s1, s2 = m.current_stream(), m.current_stream(device=1), m.current_stream(device=0)
    assert (s0.device, s1.device, s2.device) == (d0, d1, d0) and s0 == s2
    with m.device(d1):
        s0, s1, s2 = m.current_stream(), m.current_stream(1), m.current_stream(d0)
    assert (s0.device, s1.device, s2.device) == (d1, d1, d0) and s0 == s1
    with m.device(d0):
        t0 = m.default_stream()
    with m.device(d1):
        t1 = m.default_stream()
    t2, t3 = m.default_stream(device=0), m.default_stream(d1)
    assert (t0.device, t1.device, t2.device, t3.device) == (d0, d1, d0, d1)
    assert t0 == t2 and t1 == t3
    with m.device(d0):
        assert m.current_stream() == t0
    with m.device(d1):
        assert m.current_stream() == t1
    other = SIM if name == CPU else CPU
    for fn in (m.current_stream, m.default_stream):
        with pytest.raises(ValueError, match=f"Expected a {name} device, but got: {other}"):
            fn(_dev(other))


def test_stream_event_device(two: tuple[str, Any]) -> None:
    """mirrors test_cuda_multigpu.py test_stream_event_device: an event has no device until
    recorded, then its stream's."""
    name, m = two
    e0 = m.Event()
    assert e0.device is None
    with m.device(0):
        s0 = m.current_stream()
        s0.record_event(e0)
    with m.device(1):
        s1 = m.Stream()
        e1 = s1.record_event()
    assert (s0.device, e0.device) == (_dev(name, 0), _dev(name, 0))
    assert (s1.device, e1.device) == (_dev(name, 1), _dev(name, 1))


def test_stream_context_across_devices(two: tuple[str, Any]) -> None:
    """mirrors test_cuda_multigpu.py test_stream_context: nested ``stream`` blocks of two
    devices switch the device with the stream and restore both."""
    _, m = two
    s0, s1, s2 = m.current_stream(), m.Stream(device=1), m.Stream(device=0)
    with m.device(s1.device):
        prev1 = m.current_stream()
    assert m.current_stream() == s0 and m.current_device() == 0
    with m.stream(s1):
        assert m.current_stream() == s1 and m.current_device() == 1
        with m.stream(s2):
            assert m.current_stream() == s2 and m.current_device() == 0
            with m.stream(s0):
                assert m.current_stream() == s0 and m.current_device() == 0
            assert m.current_stream() == s2 and m.current_device() == 0
        assert m.current_stream() == s1 and m.current_device() == 1
    with m.device(s1.device):
        assert m.current_stream() == prev1
    assert m.current_stream() == s0 and m.current_device() == 0


def test_streams_multi_device_eq_hash_and_priority(two: tuple[str, Any]) -> None:
    """mirrors test_cuda_multigpu.py test_streams_multi_gpu, test_streams_multi_gpu_eq and
    test_streams_priority."""
    name, m = two
    default = m.current_stream()
    assert default.device == _dev(name, 0)
    stream = m.Stream(device=1)
    assert stream.device == _dev(name, 1)
    with m.device(1):
        assert m.current_stream().device == _dev(name, 1)
        assert m.current_stream() != default
    with m.device(0):
        a0, a1 = m.current_stream(), m.current_stream()
    with m.device(1):
        b0, b1 = m.current_stream(), m.current_stream()
    assert a0 == a1 and b0 == b1 and a0 != b0 and a1 != b1
    assert a0.device == a1.device and a0.cuda_stream == a1.cuda_stream
    assert b0.device == b1.device and b0.cuda_stream == b1.cuda_stream
    assert a0.device != b1.device
    assert hash(a0) == hash(a1) and hash(b0) == hash(b1) and hash(a0) != hash(b1)
    low, high = m.Stream.priority_range()
    p0, p1 = m.Stream(device=0, priority=low), m.Stream(device=1, priority=high)
    assert (p0.priority, p0.device) == (low, _dev(name, 0))
    assert (p1.priority, p1.device) == (high, _dev(name, 1))


@pytest.mark.parametrize("waited", ["stream", "event"])
def test_streams_and_events_multi_device_query(toy: tuple[str, Any, SimulatedBackend],
                                               waited: str) -> None:
    """mirrors test_cuda_multigpu.py test_streams_multi_gpu_query (``waited="stream"``) and
    test_events_multi_gpu_query (``"event"``: an event recorded on each device's current
    stream): device 1's, whose stream has work queued, is seen busy from either device and
    complete from either once synchronized from device 0; device 0's is complete throughout."""
    name, m, sim = toy
    m.synchronize(0)
    m.synchronize(1)
    with m.device(0):
        s0 = m.current_stream()
        w0 = s0.record_event() if waited == "event" else s0
        s0.synchronize()
    with m.device(1):
        s1 = m.current_stream()
        sim.launch_work(s1.stream_id, 1)
        w1 = s1.record_event() if waited == "event" else s1
    for index in (None, 0, 1):
        with m.device(index):
            assert w0.query() and not w1.query()
    with m.device(0):
        w1.synchronize()
    for index in (None, 0, 1):
        with m.device(index):
            assert w0.query() and w1.query()


def test_events_elapsed_time_across_devices(toy: tuple[str, Any, SimulatedBackend]) -> None:
    """mirrors test_cuda_multigpu.py test_events_multi_gpu_elapsed_time: events of two devices
    have no elapsed time (a RuntimeError, from either device); two of one device have, from
    either device."""
    name, m, sim = toy
    with m.device(0):
        e0 = m.Event(enable_timing=True)
        m.current_stream().record_event(e0)
    with m.device(1):
        e1 = m.Event(enable_timing=True)
        sim.launch_work(m.current_stream().stream_id, 1)
        m.current_stream().record_event(e1)
    e0.synchronize()
    e1.synchronize()
    for index in (0, 1):
        with m.device(index), pytest.raises(RuntimeError):
            e0.elapsed_time(e1)
    with m.device(0):
        e2 = m.Event(enable_timing=True)
        sim.launch_work(m.current_stream().stream_id, 0)
        m.current_stream().record_event(e2)
        m.current_stream().synchronize()
    assert e0.elapsed_time(e2) >= 0
    with m.device(1):
        assert e0.elapsed_time(e2) >= 0


def test_get_set_rng_state_all(two: tuple[str, Any]) -> None:
    """mirrors test_cuda_multigpu.py test_get_set_rng_state_all: restoring every device's state
    repeats every device's draws."""
    name, m = two
    states = m.get_rng_state_all()
    before = [acc.randn(100, device=_dev(name, i)).numpy() for i in (0, 1)]
    m.set_rng_state_all(states)
    after = [acc.randn(100, device=_dev(name, i)).numpy() for i in (0, 1)]
    for b, a in zip(before, after):
        np.testing.assert_array_equal(b, a)


def test_rng_state_offset(two: tuple[str, Any]) -> None:
    """mirrors test_cuda_multigpu.py test_rng_state_offset: the private
    ``_set_rng_state_offset``/``_get_rng_state_offset`` of torch.cuda (the current device
    by default, another by ``device=``)."""
    _, m = two
    saved = m.get_rng_state_all()
    before = m.get_rng_state()
    m._set_rng_state_offset(100)
    offset = m._get_rng_state_offset()
    m.set_rng_state(before)
    assert offset == 100
    current = m._get_rng_state_offset()
    m._set_rng_state_offset(7, device=1)
    assert m._get_rng_state_offset(1) == 7
    assert m._get_rng_state_offset() == current
    m.set_rng_state_all(saved)


def test_device_of(two: tuple[str, Any]) -> None:
    """mirrors torch.cuda.device_of (test_cuda_multigpu.py's device guards): the device of an
    array, stream or event becomes current inside the block; an object of another backend is
    a no-op."""
    name, m = two
    x = acc.zeros(3, device=f"{name}:1")
    s = m.Stream(device=1)
    e = s.record_event()
    for obj in (x, s, e):
        with m.device_of(obj):
            assert m.current_device() == 1
        assert m.current_device() == 0
    other = SIM if name == CPU else CPU
    with m.device(1), m.device_of(acc.zeros(1, device=f"{other}:0")):
        assert m.current_device() == 1


# =============================================================== test/test_cuda_primary_ctx.py

def test_work_on_device_1_never_touches_device_0(
        toy: tuple[str, Any, SimulatedBackend]) -> None:
    """mirrors test_cuda_primary_ctx.py test_str_repr, test_copy and test_pin_memory: an array
    made on device 1 while device 0 is current, printed, copied to the host and pinned
    memory made and queried, make no call on device 0 (no context there)."""
    name, m, sim = toy
    assert not any(sim.calls(0).values())
    x = acc.randn(1, device=f"{name}:1")
    assert not any(sim.calls(0).values()) and any(sim.calls(1).values())
    str(x)
    repr(x)
    x.numpy()
    assert acc.is_pinned(x) is False
    p = acc.pin_memory(np.random.default_rng(0).standard_normal(3))
    assert acc.is_pinned(p)
    # (``randn(..., pin_memory=True)`` draws on the current device and copies, as
    # docs/differences.md says: it is left out here.)
    for made in (acc.zeros(3, pin_memory=True), acc.empty(3, pin_memory=True)):
        assert acc.is_pinned(acc.pin_memory(made))
    assert not any(sim.calls(0).values())


def test_events_wait_across_devices(toy: tuple[str, Any, SimulatedBackend]) -> None:
    """mirrors test_cuda_multigpu.py test_events_wait on the simulated device: a stream of
    device 1 made to wait for an event still pending on device 0 is busy, and synchronizing
    it leaves the event and its stream complete (the simulated wait only counted, so the
    event stayed pending)."""
    name, m, sim = toy
    m.synchronize(0)
    m.synchronize(1)
    with m.device(0):
        s0 = m.current_stream()
        sim.launch_work(s0.stream_id, 0)
        e0 = m.Event()
        s0.record_event(e0)
    with m.device(1):
        s1 = m.current_stream()
    assert not s0.query() and s1.query()
    s1.wait_event(e0)
    assert not s1.query() and not e0.query()
    s1.synchronize()
    assert e0.query() and s0.query() and s1.query()


def test_simulated_wait_orders_completion_of_later_work(
        toy: tuple[str, Any, SimulatedBackend]) -> None:
    """The simulated device's waits, beyond test_events_wait: an event recorded after a wait
    completes only with the waited-for work (``event.synchronize`` completes both); a wait
    for a completed or unrecorded event adds nothing to wait for; work queued on the first
    stream after the record stays pending."""
    name, m, sim = toy
    s0, s1 = m.Stream(device=0), m.Stream(device=0)
    sim.launch_work(s0.stream_id, 0)
    e = s0.record_event()
    sim.launch_work(s0.stream_id, 0)            # after the record: not waited for
    s1.wait_event(e)
    after = s1.record_event()
    assert not after.query() and not e.query()
    after.synchronize()
    assert e.query() and s1.query() and not s0.query()
    s0.synchronize()
    s1.wait_event(e)                            # completed: nothing to wait for
    s1.wait_event(m.Event())                    # never recorded: the same
    assert s1.query()


def _hold(name: str, stream: Any, gate: threading.Event) -> None:
    """Keep ``stream`` (of the cpu backend ``name``, asynchronous streams) busy until ``gate``
    is set: a host function that waits for it (the stand-in for ``torch.cuda._sleep``)."""
    backends.get_backend(name).launch_host_func(stream.device_index, gate.wait,
                                                stream.stream_id)


@pytest.fixture
def cpu_async() -> Iterator[tuple[str, Any, threading.Event]]:
    """The two-device cpu backend with asynchronous streams, current, device 0 current, and a
    gate for :func:`_hold` that is set (releasing what it holds) at the end in any case."""
    gate = threading.Event()
    acc.set_current_accelerator(CPU_ASYNC)
    acc.set_device_index(0)
    m = backends.device_module(CPU_ASYNC)
    try:
        yield CPU_ASYNC, m, gate
    finally:
        gate.set()
        m.synchronize(0)
        m.synchronize(1)
        gc.collect()


def test_events_wait_across_devices_async_cpu(
        cpu_async: tuple[str, Any, threading.Event]) -> None:
    """mirrors test_cuda_multigpu.py test_events_wait on cpu devices whose streams run on
    worker threads."""
    name, m, gate = cpu_async
    with m.device(0):
        s0 = m.current_stream()
        _hold(name, s0, gate)
        e0 = m.Event()
        s0.record_event(e0)
    with m.device(1):
        s1 = m.current_stream()
    assert not s0.query() and s1.query()
    s1.wait_event(e0)
    assert not s1.query()
    gate.set()
    s1.synchronize()
    assert e0.query() and s0.query() and s1.query()


def test_copy_between_devices_orders_on_both_current_streams(
        cpu_async: tuple[str, Any, threading.Event]) -> None:
    """mirrors test_cuda_multigpu.py test_copy_streams: a copy is ordered after the current
    streams of both devices, so of two copies into ``y`` the second lands last even while the
    first one's source stream is held."""
    name, m, gate = cpu_async
    x = acc.zeros((5, 5), device=f"{name}:0")
    x_plus_one = acc.full((5, 5), 1.0, device=f"{name}:0")
    for y in (acc.zeros((5, 5), device=f"{name}:1"), acc.zeros((5, 5), device=f"{name}:0")):
        s0, s1 = m.Stream(device=x.device), m.Stream(device=y.device)
        s2, s3 = m.Stream(device=x.device), m.Stream(device=y.device)
        # x's stream held while y's copies, then y's held while x's copies
        for held, copier, outer in ((s0, s1, s2), (s1, s0, s3)):
            gate.clear()
            with m.stream(held):
                _hold(name, held, gate)
                with m.stream(copier):
                    y.copy_(x_plus_one)
            with m.stream(outer), m.stream(copier):
                y.copy_(x)
            gate.set()
            copier.synchronize()
            np.testing.assert_array_equal(y.numpy(), x.numpy())


def test_caching_pinned_memory_multi_device(
        cpu_async: tuple[str, Any, threading.Event]) -> None:
    """mirrors test_cuda_multigpu.py test_caching_pinned_memory_multi_gpu: a pinned block whose
    non-blocking copy to device 1 is still queued is not handed out again, and both copies
    land."""
    name, m, gate = cpu_async
    t = acc.pin_memory(np.array([1.0], dtype=np.float32), device=name)
    ptr = t.ctypes.data
    g0, g1 = acc.zeros(1, device=f"{name}:0"), acc.zeros(1, device=f"{name}:1")
    with m.device(1):
        _hold(name, m.current_stream(), gate)
        g1.copy_(t, non_blocking=True)
    del t
    t = acc.pin_memory(np.array([2.0], dtype=np.float32), device=name)
    assert t.ctypes.data != ptr, "allocation reused too soon"
    with m.device(0):
        g0.copy_(t, non_blocking=True)
    gate.set()
    assert g1.numpy()[0] == 1 and g0.numpy()[0] == 2


def test_copies_between_devices_of_a_backend_without_peer_copies() -> None:
    """A backend whose capabilities have no ``peer_copies`` (the simulated device) copies an
    array to another of its devices through the host, as between backends, broadcasts
    included: ``Array.to``/``copy_`` called ``memcpy_peer`` and raised ``NotImplementedError``
    (torch's ``tensor.to("cuda:1")`` always copies)."""
    sim = backends.get_backend(SIM)
    assert not sim.capabilities(0).peer_copies
    x = acc.zeros((2, 3), device=f"{SIM}:0")
    before = [sim.calls(i)["memcpy"] for i in (0, 1)]
    y = x.to(f"{SIM}:1")
    assert y.device == _dev(SIM, 1) and y.shape == (2, 3)
    assert [sim.calls(i)["memcpy"] for i in (0, 1)] == [before[0] + 1, before[1] + 1]
    y.copy_(acc.zeros(3, device=f"{SIM}:0"))
    y.copy_(x, non_blocking=True)
    acc.synchronize(f"{SIM}:1")


def test_external_streams(two: tuple[str, Any]) -> None:
    """mirrors test_cuda_multigpu.py test_external_streams and
    test_external_streams_multi_device: a backend stream made outside accelrt, wrapped by
    ``ExternalStream`` and ``get_stream_from_external``, keeps its handle and device (the
    current one by default, or the given ``device`` context manager's)."""
    name, m = two
    b = backends.get_backend(name)
    for index in (0, 1):
        dev = m.device(index)
        with dev:
            handle = b.stream_create(index, 0)
        try:
            with dev:
                ext = m.ExternalStream(handle) if index == 0 else \
                    m.ExternalStream(handle, device=dev)
                assert ext.cuda_stream == handle and ext.device.index == dev.idx
                ext = m.get_stream_from_external(handle, dev)
                assert ext.cuda_stream == handle and ext.device.index == dev.idx
            del ext
        finally:
            b.stream_destroy(index, handle)


def test_devices_as_dict_keys(two: tuple[str, Any]) -> None:
    """mirrors test_cuda_multigpu.py test_grad_scaling_device_as_key: equal devices hash
    alike, so an array's device finds the entry of an equal device object."""
    name, _ = two
    t = acc.empty(1, device=f"{name}:0")
    dev0a, dev0b = acc.device(f"{name}:0"), acc.device(f"{name}:0")
    dev1a, dev1b = acc.device(f"{name}:1"), acc.device(name, 1)
    assert hash(dev0a) == hash(dev0b) and hash(dev1a) == hash(dev1b)
    d = {dev0a: "0a"}
    d[dev0b] = "0b"
    assert d == {dev0a: "0b"}
    d[t.device] = "t"
    assert len(d) == 1 and d[dev0a] == "t"
    d[dev1a] = "1a"
    d[dev1b] = "1b"
    assert len(d) == 2 and d[dev1a] == "1b"


def test_first_use_of_two_devices_from_two_threads_at_once() -> None:
    """mirrors test_cuda_multigpu.py test_cuda_init_race: two threads that first use devices 0
    and 1 at the same moment (a barrier) in a fresh process both finish (a subprocess with a
    timeout: a regression is a hang)."""
    script = textwrap.dedent("""
        import threading
        import numpy as np
        import accelrt as acc
        acc.set_current_accelerator("cpu")
        start = threading.Barrier(2)
        done = []
        def worker(rank):
            start.wait()
            done.append(acc.asarray(np.array([1.0]), device=f"cpu:{rank}").device.index)
        threads = [threading.Thread(target=worker, args=(r,)) for r in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(sorted(done))
    """)
    env = {**os.environ, "ACCELRT_CPU_DEVICES": "2"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, env=env, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[0, 1]"


def test_queries_do_not_initialise_the_backend() -> None:
    """mirrors test_xpu.py test_lazy_init (no device calls at import) with
    docs/differences.md's "No device context is created by queries": in a fresh process,
    importing accelrt, counting devices, asking availability, reading statistics and a device
    synchronize leave the backend uninitialised; the first allocation initialises it."""
    script = textwrap.dedent("""
        import accelrt as acc
        seen = [acc.cpu.is_initialized()]
        acc.cpu.device_count(); acc.cpu.is_available(); acc.cpu.memory_allocated(1)
        acc.cpu.memory_stats(); acc.cpu.synchronize()
        seen.append(acc.cpu.is_initialized())
        acc.zeros(1, device="cpu:1")
        seen.append(acc.cpu.is_initialized())
        print(seen)
    """)
    env = {**os.environ, "ACCELRT_CPU_DEVICES": "2"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, env=env, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[False, False, True]"


def test_dlpack_round_trip_shares_memory(two: tuple[str, Any]) -> None:
    """mirrors test_xpu.py test_dlpack_conversion: a cpu array imported back through DLPack is
    the same memory (a write through its host view shows in the original); the simulated
    device exports ``kDLExtDev``, which no importer can map back to it, so it is copied."""
    name, _ = two

    class Producer:
        """Only the DLPack protocol of ``a`` (so that ``asarray`` takes the DLPack path)."""

        def __init__(self, a: acc.Array) -> None:
            self.a = a

        def __dlpack__(self, **kw: Any) -> Any:
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self) -> tuple[int, int]:
            return self.a.__dlpack_device__()

    x = acc.asarray(np.arange(5, dtype=np.float32), device=f"{name}:0")
    z = acc.asarray(Producer(x))
    assert z.device == x.device and z.shape == x.shape
    if name == CPU:
        assert z.data_ptr() == x.data_ptr()
        host = np.from_dlpack(x)
        host[0] += 1
        assert x.numpy()[0] == 1.0
    else:   # kDLExtDev names no device accelrt can find again: imported as a copy
        with pytest.raises(ValueError, match="which accelrt cannot share"):
            acc.asarray(Producer(x), copy=False)
