"""torch 2.14's memory, monitoring and profiling surface on every device module (issue 23 §3):
the ``random``/``streams``/``profiler``/``nvtx`` submodule paths, memory metadata in the history
trace, ``caching_allocator_enable``/``caching_allocator_disabled`` (statistics stay
PyTorch-exact), ``device_memory_used``, ``host_memory_stats_as_nested_dict``,
``get_stream_from_external``, ``is_bf16_supported``/``is_tf32_supported`` from device
properties, NVTX ``range_start``/``range_end``, the profiler switch, and clear errors for the
monitoring names where the backend cannot answer. Tested on two simulated cpu devices (sync and
async streams), ``acc.cpu`` and OpenCL (PoCL); the CUDA host paths run against fakes."""

from __future__ import annotations

import importlib
import threading
import types
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from helpers.registry import module_backends

import accelrt as acc
from accelrt.backends.cpu import CpuBackend

SYNC, ASYNC = "mssync", "msasync"
# closed (worker threads stopped) and unregistered after the module
_backends = module_backends({
    SYNC: lambda: CpuBackend(num_devices=2, async_streams=False, name=SYNC),
    ASYNC: lambda: CpuBackend(num_devices=2, async_streams=True, name=ASYNC),
})

#: torch 2.14's ``__all__`` of torch.cuda.random / .streams / .profiler / .nvtx.
TORCH_RANDOM = {"get_rng_state", "get_rng_state_all", "set_rng_state", "set_rng_state_all",
                "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed"}
TORCH_PROFILER = {"start", "stop", "profile"}
TORCH_NVTX = {"range_push", "range_pop", "range_start", "range_end", "mark", "range"}


def _params() -> list[Any]:
    reason = acc.backends.unavailable_reason("opencl")
    return [pytest.param(SYNC, id="cpu2-sync"), pytest.param(ASYNC, id="cpu2-async"),
            pytest.param("acc.cpu", id="acc.cpu"),
            pytest.param("acc.opencl", id="acc.opencl", marks=pytest.mark.skipif(
                reason is not None, reason=f"opencl unavailable: {reason}"))]


@pytest.fixture(params=_params())
def m(request: pytest.FixtureRequest) -> Iterator[Any]:
    name: str = request.param
    mod: Any = getattr(acc, name[4:]) if name.startswith("acc.") else \
        acc.backends.device_module(name)
    mod.set_device(0)
    yield mod
    mod.synchronize()


def _name(m: Any) -> str:
    return m.__name__.rpartition(".")[2] if isinstance(m, types.ModuleType) else str(m.name)


# ---------------------------------------------------------------------- submodule paths

@pytest.mark.parametrize("mod", ["cpu", "cuda", "opencl"])
def test_submodules_are_importable_with_torchs_names(mod: str) -> None:
    for sub in ("random", "streams", "profiler", "nvtx", "memory"):
        imported = importlib.import_module(f"accelrt.{mod}.{sub}")
        assert imported is getattr(getattr(acc, mod), sub)
    dm = getattr(acc, mod)
    assert TORCH_RANDOM <= set(dir(dm.random))
    assert dm.random.manual_seed == dm.manual_seed
    assert TORCH_PROFILER <= set(dir(dm.profiler))
    assert TORCH_NVTX <= set(dir(dm.nvtx))
    assert dm.streams.Stream is dm.Stream and dm.streams.Event is dm.Event
    for name in ("caching_allocator_enable", "caching_allocator_disabled",
                 "host_memory_stats_as_nested_dict"):
        assert getattr(dm.memory, name) == getattr(dm, name)


def test_cuda_streams_has_external_stream() -> None:
    import accelrt.cuda.streams as s
    assert s.ExternalStream is acc.cuda.ExternalStream


def test_accelerator_random_initial_seed_takes_a_device() -> None:
    # torch.accelerator.random.initial_seed(device=None, /)
    acc.cpu.manual_seed(1234)
    assert acc.random.initial_seed("cpu:0") == acc.cpu.initial_seed() == 1234


# ---------------------------------------------------------------------- memory metadata

def test_memory_metadata_is_recorded_on_trace_entries(m: Any) -> None:
    name = _name(m)
    mem = m.memory if isinstance(m, types.ModuleType) else m.memory
    mem._record_memory_history(max_entries=1000)
    try:
        assert mem._memory_metadata_supported()
        mem._set_memory_metadata("phase-1")
        assert mem._get_memory_metadata() == "phase-1"
        x = acc.zeros(1000, device=f"{name}:0")
        other: list[str] = []

        def worker() -> None:   # thread-local: another thread sees none and records none
            other.append(mem._get_memory_metadata())
            y = acc.zeros(3000, device=f"{name}:0")
            del y

        t = threading.Thread(target=worker)
        t.start()
        t.join()
        mem._set_memory_metadata("")
        del x
        trace = mem._snapshot()["device_traces"][0]
        allocs = [e for e in trace if e["action"] == "alloc"]
        assert [e["user_metadata"] for e in allocs] == ["phase-1", ""]
        assert [e["size"] for e in allocs] == [4000, 12000]
        assert other == [""]
        assert mem._get_memory_metadata() == ""
        frees = [e for e in trace if e["action"] == "free_requested"]
        assert frees and all(e["user_metadata"] == "" for e in frees)
    finally:
        mem._record_memory_history(None)
        mem._set_memory_metadata("")


def test_snapshot_include_traces_and_history_host_switches(m: Any) -> None:
    # torch 2.14: memory_snapshot(mempool_id=None, include_traces=True) and
    # MemPool.snapshot(include_traces=True) return segments, which carry no trace entries
    # either way; _record_memory_history's record_pinned_host_memory/record_cuda take only
    # the values that mean "the device allocator's history"
    name = _name(m)
    mem = m.memory
    mem._record_memory_history("all", "all", "all", 100, None, False, False, False, None,
                               False, True)
    pool = acc.memory.MemPool()
    try:
        with acc.memory.use_mem_pool(pool, f"{name}:0"):
            x = acc.zeros(1000, device=f"{name}:0")
        full = m.memory_snapshot(pool.id)
        assert full and m.memory_snapshot(pool.id, False) == full
        assert mem.memory_snapshot(pool.id, include_traces=False) == full
        assert pool.snapshot(False) == pool.snapshot() == full
        assert mem._snapshot()["device_traces"][0]        # the history itself was recorded
        for bad in ((m.memory_snapshot, (None, 1)), (pool.snapshot, ("no",))):
            with pytest.raises(TypeError, match="include_traces must be a boolean"):
                bad[0](*bad[1])
        with pytest.raises(ValueError, match="record_pinned_host_memory=True is not supported"):
            mem._record_memory_history(record_pinned_host_memory=True)
        with pytest.raises(ValueError, match="record_cuda=False is not supported"):
            mem._record_memory_history(record_cuda=False)
        with pytest.raises(TypeError, match="record_cuda must be a bool"):
            m.record_memory_history(record_cuda="yes")   # (1: taken, as by torch's binding)
        del x
    finally:
        mem._record_memory_history(None)


def test_memory_metadata_rejects_a_non_str() -> None:
    with pytest.raises(TypeError, match="must be a str"):
        acc.cpu.memory._set_memory_metadata(3)


# ---------------------------------------------------------------------- caching on/off

def test_caching_disabled_bypasses_the_cache_and_keeps_stats_exact(m: Any) -> None:
    name = _name(m)
    dev = f"{name}:0"
    kept = acc.zeros(1000, device=dev)              # served by the cache
    m.synchronize()
    stats = dict(m.memory_stats(0))
    reserved = m.memory_reserved(0)
    free0 = m.mem_get_info(0)[0]
    with m.caching_allocator_disabled():
        x = acc.zeros(3 << 20, device=dev)
        assert m.mem_get_info(0)[0] <= free0 - (3 << 20)   # straight from the backend
        np.testing.assert_array_equal(x.numpy(), 0)
        del kept                                             # a cached block goes back to the cache
    assert m.memory_reserved(0) == reserved
    after = dict(m.memory_stats(0))
    assert after["allocated_bytes.all.current"] == 0
    assert after["allocation.all.allocated"] == stats["allocation.all.allocated"]
    assert after["segment.all.allocated"] == stats["segment.all.allocated"]
    del x                                  # allocated uncached: freed to the backend at once,
    m.synchronize()                        # even with caching back on
    assert m.mem_get_info(0)[0] == free0
    assert dict(m.memory_stats(0))["allocation.all.allocated"] == stats["allocation.all.allocated"]
    m.empty_cache()


def test_caching_allocator_enable_is_restored_by_the_context_manager(m: Any) -> None:
    from accelrt.memory._allocator import caching_enabled
    name = _name(m)
    m.caching_allocator_enable(False)
    try:
        with m.caching_allocator_disabled():
            assert not caching_enabled(name)
        assert not caching_enabled(name)      # the previous state (off) is restored
    finally:
        m.caching_allocator_enable(True)
    with m.caching_allocator_disabled():
        pass
    assert caching_enabled(name)
    with pytest.raises(TypeError, match="expects a bool, but got int"):
        m.caching_allocator_enable(1)


def test_uncached_free_waits_for_recorded_streams() -> None:
    from accelrt.backends import get_backend
    from accelrt.memory._allocator import DeviceCachingAllocator
    b = get_backend("cpu")
    a = DeviceCachingAllocator(b, 0)
    a.set_caching(False)
    s = b.stream_create(0, 0)
    try:
        p = a.malloc(4096, 0)
        a.record_stream(p, s)
        assert a.stats()["allocation.all.allocated"] == 0
        a.free(p)
        with pytest.raises(ValueError, match="not allocated"):
            a.free(p)          # given back: a second free is an error, as for any pointer
    finally:
        b.stream_destroy(0, s)


# ---------------------------------------------------------------------- small functions

def test_device_memory_used_host_nested_and_external_stream(m: Any) -> None:
    free, total = m.mem_get_info(0)
    assert m.device_memory_used(0) == total - free
    flat = m.host_memory_stats()
    nested = m.host_memory_stats_as_nested_dict()
    for key, value in flat.items():
        d: Any = nested
        for part in key.split("."):
            d = d[part]
        assert d == value
    s = m.Stream(device=1 if m.device_count() > 1 else 0)
    w = m.get_stream_from_external(s.stream_id, s.device)
    assert w == s and type(w) is m.Stream
    with pytest.raises(TypeError, match="as an int"):
        m.get_stream_from_external("0x1")
    with pytest.raises(ValueError, match="not a live stream"):
        m.get_stream_from_external(0xDEAD0000, 0)


def test_bf16_and_tf32_follow_device_properties(m: Any) -> None:
    props = m.get_device_properties()
    assert isinstance(props["has_bfloat16"], bool) and isinstance(props["has_tf32"], bool)
    assert m.is_bf16_supported() is True                       # emulation: any device
    assert m.is_bf16_supported(including_emulation=False) is props["has_bfloat16"]
    assert m.is_tf32_supported() is props["has_tf32"]


def test_cpu_bf16_flag_parsing(tmp_path: Any) -> None:
    from accelrt.backends.cpu._config import cpu_has_bf16
    f = tmp_path / "cpuinfo"
    f.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx512f avx512_bf16\n")
    assert cpu_has_bf16(str(f)) is True
    f.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2\n")
    assert cpu_has_bf16(str(f)) is False
    f.write_text("Features\t: fp asimd bf16 i8mm\n")
    assert cpu_has_bf16(str(f)) is True
    assert acc.cpu.is_tf32_supported() is False


def test_bf16_is_false_where_the_backend_is_unusable() -> None:
    if acc.cuda.is_available():
        pytest.skip("cuda is usable here")
    assert acc.cuda.is_bf16_supported() is False and acc.cuda.is_tf32_supported() is False


# ---------------------------------------------------------------------- monitoring, profiler

@pytest.mark.parametrize("what", ["utilization", "memory_usage", "temperature", "power_draw",
                                  "clock_rate", "list_gpu_processes"])
def test_monitoring_without_a_library_is_a_clear_error(m: Any, what: str) -> None:
    with pytest.raises(acc.BackendUnavailableError,
                       match=rf"{_name(m)}: {what}\(\) needs a device monitoring library.*"
                             rf"accelrt\.cuda\.{what}\(\)"):
        getattr(m, what)()
    with pytest.raises(ValueError, match=f"Expected a {_name(m)} device"):   # checked first
        getattr(m, what)(acc.device("cuda", 0))


def test_profiler_without_a_device_profiler_is_a_clear_error(m: Any) -> None:
    prof = m.profiler
    for call in (prof.start, prof.stop):
        with pytest.raises(acc.BackendUnavailableError, match="cuProfilerStart"):
            call()
    ran = []
    with pytest.raises(acc.BackendUnavailableError), prof.profile():
        ran.append(1)
    assert ran == []


def test_cuda_profiler_calls_the_driver_on_the_current_context() -> None:
    from accelrt.backends.cuda import _profiler
    calls: list[str] = []

    class Drv:
        def cuProfilerStart(self) -> tuple[int]:  # noqa: N802 - the driver's name
            calls.append("start")
            return (0,)

        def cuProfilerStop(self) -> tuple[int]:  # noqa: N802 - the driver's name
            calls.append("stop")
            return (999,)

    class FakeBackend:
        name = "cuda"
        _drv = Drv()

        def _use(self, index: int) -> None:
            calls.append(f"use{index}")

    _profiler.start(FakeBackend(), 1)  # type: ignore[arg-type]
    with pytest.raises(acc.AcceleratorError, match="cuProfilerStop"):
        _profiler.stop(FakeBackend(), 0)  # type: ignore[arg-type]
    assert calls == ["use1", "start", "use0", "stop"]


@pytest.mark.cuda
def test_cuda_profiler_and_monitoring_on_a_gpu() -> None:
    if not acc.cuda.is_available():
        pytest.skip(f"cuda unavailable: {acc.cuda.unavailable_reason()}")
    with acc.cuda.profiler.profile():
        x = acc.zeros(16, device="cuda")
    del x
    used = acc.cuda.device_memory_used()
    assert 0 < used <= acc.cuda.mem_get_info()[1]
    props = acc.cuda.get_device_properties()
    assert acc.cuda.is_tf32_supported() is (props.major >= 8)
    assert acc.cuda.is_bf16_supported(including_emulation=False) is (props.major >= 8)


# ---------------------------------------------------------------------- nvtx

def test_nvtx_range_start_end_across_threads() -> None:
    nvtx = acc.cpu.nvtx
    if not nvtx.available():
        pytest.skip("the nvtx package is not installed")
    assert nvtx is acc.cuda.nvtx is acc.opencl.nvtx
    a, b = nvtx.range_start("a"), nvtx.range_start("b")
    assert isinstance(a, int) and a != b
    t = threading.Thread(target=nvtx.range_end, args=(a,))   # ended on another thread
    t.start()
    t.join()
    nvtx.range_end(b)
    with pytest.raises(ValueError, match=f"no NVTX range with id {a} is open"):
        nvtx.range_end(a)
    with pytest.raises(TypeError, match="int id"):
        nvtx.range_end("a")
    with pytest.raises(TypeError, match="str message"):
        nvtx.range_start(3)


def test_memory_metadata_dict_is_stored_as_compact_json(m: Any) -> None:
    # torch 2.15: a dict is serialized with json.dumps(d, separators=(",", ":")) at call time
    name = _name(m)
    mem = m.memory
    mem._record_memory_history(max_entries=1000)
    try:
        mem._set_memory_metadata({"step": 3, "phase": "fwd", "tags": [1, 2]})
        text = mem._get_memory_metadata()
        assert text == '{"step":3,"phase":"fwd","tags":[1,2]}'
        x = acc.zeros(10, device=f"{name}:0")
        mem._set_memory_metadata(text)               # the string restores the same metadata
        assert mem._get_memory_metadata() == text
        with pytest.raises(TypeError):
            mem._set_memory_metadata({"bad": object()})
        with pytest.raises(TypeError, match="str or a dict"):
            mem._set_memory_metadata(3)
        assert mem._get_memory_metadata() == text    # a failed call changes nothing
        del x
        trace = mem._snapshot()["device_traces"][0]
        assert [e["user_metadata"] for e in trace if e["action"] == "alloc"] == [text]
    finally:
        mem._record_memory_history(None)
        mem._set_memory_metadata("")
