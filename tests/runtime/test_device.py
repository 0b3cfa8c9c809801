"""accelrt.device, the current accelerator and the per-thread current device (torch.accelerator
parity)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import accelrt as acc
from accelrt import _backend
from accelrt.backends.cpu import CpuBackend


@pytest.fixture
def cpu4() -> str:
    acc.backends.register("cpu4", lambda: CpuBackend(num_devices=4, name="cpu4"), replace=True)
    acc.set_current_accelerator("cpu4")
    return "cpu4"


def _run(code: str, **env: str) -> str:
    full_env = {**os.environ, **env}
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env,  # noqa: PLW1510
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


# ---------------------------------------------------------------------- device objects

def test_device_parsing_and_identity() -> None:
    d = acc.device("cpu:1")
    assert (d.type, d.index, str(d)) == ("cpu", 1, "cpu:1")
    assert d == acc.device("cpu", 1) == acc.device(d)
    assert hash(d) == hash(acc.device("cpu", 1))
    assert acc.device("cpu").index is None and str(acc.device("cpu")) == "cpu"
    assert repr(d) == "device(type='cpu', index=1)"
    with pytest.raises(AttributeError):
        d.index = 2  # type: ignore[misc]


@pytest.mark.parametrize("bad", ["", "cpu:", "cpu:-1", "cpu:01", ":0", "cpu:0:1", "1cpu", "cp u"])
def test_device_bad_strings(bad: str) -> None:
    with pytest.raises(ValueError):
        acc.device(bad)


def test_device_bad_types_and_conflicts() -> None:
    with pytest.raises(TypeError):
        acc.device(1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        acc.device(True)
    with pytest.raises(ValueError, match="must not include an index"):
        acc.device("cpu:0", 1)
    with pytest.raises(ValueError, match="must not be negative"):
        acc.device("cpu", -1)
    with pytest.raises(TypeError):
        acc.device("cpu", "0")  # type: ignore[arg-type]


def test_int_device_is_on_current_accelerator(cpu4: str) -> None:
    assert acc.device(2) == acc.device("cpu4", 2)


# ---------------------------------------------------------------------- current accelerator

def test_current_accelerator_and_availability(backend: str) -> None:
    assert acc.current_accelerator() == acc.device(backend)
    assert acc.current_accelerator().index is None  # type: ignore[union-attr]
    assert acc.current_accelerator(check_available=True) == acc.device(backend)
    assert acc.is_available() is True
    assert acc.device_count() == acc.backends.get_backend(backend).device_count()


def test_set_current_accelerator_errors() -> None:
    with pytest.raises(acc.BackendUnavailableError, match="Unknown backend 'nope'"):
        acc.set_current_accelerator("nope")
    with pytest.raises(TypeError, match="backend name"):
        acc.set_current_accelerator(3)  # type: ignore[arg-type]
    acc.set_current_accelerator(acc.device("cpu"))
    assert acc.current_accelerator() == acc.device("cpu")


def test_env_accelerator_variable_chooses_backend() -> None:
    out = _run("""
        import accelrt as acc
        print(acc.current_accelerator(), acc.is_available())
    """, ACCELRT_ACCELERATOR="cpu")
    assert out == "cpu True"


def test_env_accelerator_unusable_is_reported_but_is_available_false() -> None:
    out = _run("""
        import accelrt as acc
        print(acc.is_available(), acc.device_count(), acc.current_accelerator(check_available=True))
        try:
            acc.current_accelerator()
        except acc.BackendUnavailableError as e:
            print("error:", "ACCELRT_ACCELERATOR='nosuch'" in str(e))
    """, ACCELRT_ACCELERATOR="nosuch")
    assert out.splitlines() == ["False 0 None", "error: True"]


def test_env_cpu_devices_in_subprocess() -> None:
    out = _run("""
        import accelrt as acc
        acc.set_current_accelerator("cpu")
        print(acc.device_count(), acc.cpu.device_count())
        acc.set_device_index(2)
        s = acc.Stream()
        print(acc.current_device_index(), s.device_index)
        with acc.device_index(1):
            print(acc.current_stream().device_index)
        try:
            acc.set_device_index(3)
        except IndexError as e:
            print("IndexError")
    """, ACCELRT_CPU_DEVICES="3")
    assert out.splitlines() == ["3 3", "2 2", "1", "IndexError"]


# ---------------------------------------------------------------------- current device

def test_set_device_index_variants(cpu4: str) -> None:
    acc.set_device_index(2)
    assert acc.current_device_index() == 2
    acc.set_device_index("cpu4:3")
    assert acc.current_device_index() == 3
    acc.set_device_index(acc.device("cpu4", 1))
    assert acc.current_device_index() == 1


def test_set_device_index_negative_is_noop(cpu4: str) -> None:
    acc.set_device_index(2)
    acc.set_device_index(-1)
    assert acc.current_device_index() == 2


def test_set_device_index_errors(cpu4: str) -> None:
    with pytest.raises(IndexError, match="out of index range"):
        acc.set_device_index(4)
    with pytest.raises(ValueError, match="cpu doesn't match the current accelerator cpu4"):
        acc.set_device_index("cpu:0")
    with pytest.raises(ValueError, match="Expected a device with a specified index"):
        acc.set_device_index("cpu4")
    with pytest.raises(ValueError, match="Expected a device with a specified index"):
        acc.set_device_index(None)
    with pytest.raises(TypeError):
        acc.set_device_index(1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        acc.set_device_index(True)  # type: ignore[arg-type]
    assert acc.current_device_index() == 0


def test_device_index_context(cpu4: str) -> None:
    acc.set_device_index(1)
    with acc.device_index(3):
        assert acc.current_device_index() == 3
        with acc.device_index(2):
            assert acc.current_device_index() == 2
        with acc.device_index(None):
            assert acc.current_device_index() == 3
        assert acc.current_device_index() == 3
    assert acc.current_device_index() == 1


def test_device_index_restores_on_error_and_reuse(cpu4: str) -> None:
    ctx = acc.device_index(2)
    with pytest.raises(KeyError), ctx:
        raise KeyError
    assert acc.current_device_index() == 0
    with ctx:  # reusable
        assert acc.current_device_index() == 2
    assert acc.current_device_index() == 0


def test_device_index_same_object_nested_restores_each_level(cpu4: str) -> None:
    # a reusable context object entered again while active (e.g. by a nested helper) must
    # restore the index of each level, not leave the inner index behind
    on_two = acc.device_index(2)
    acc.set_device_index(1)
    with on_two:
        acc.set_device_index(3)
        with on_two:
            assert acc.current_device_index() == 2
        assert acc.current_device_index() == 3
    assert acc.current_device_index() == 1
    with on_two:  # still reusable afterwards
        assert acc.current_device_index() == 2
    assert acc.current_device_index() == 1


def test_device_index_bad_inputs(cpu4: str) -> None:
    with pytest.raises(TypeError, match="int or None"):
        acc.device_index("cpu4:1")  # type: ignore[arg-type]
    with pytest.raises(IndexError), acc.device_index(9):
        pass
    assert acc.current_device_index() == 0
    with acc.device_index(-1):  # negative: no-op
        assert acc.current_device_index() == 0


def test_deprecated_aliases_warn(cpu4: str) -> None:
    with pytest.warns(FutureWarning, match="current_device_index"):
        assert acc.current_device_idx() == 0
    with pytest.warns(FutureWarning, match="set_device_index"):
        acc.set_device_idx(2)
    assert acc.current_device_index() == 2


def test_explicit_other_backend_device_works_while_another_is_current(cpu4: str) -> None:
    assert acc.get_device_properties("cpu:0")["type"] == "cpu"
    assert acc.current_stream("cpu:0").device_type == "cpu"
    acc.synchronize("cpu:0")
    with pytest.raises(ValueError, match="doesn't match the current accelerator"):
        acc.set_device_index(acc.device("cpu", 0))


# ---------------------------------------------------------------------- properties

def test_device_properties_and_capability(backend: str) -> None:
    props = acc.get_device_properties()
    assert {"name", "total_memory", "multi_processor_count"} <= set(props)
    assert props["total_memory"] > 0
    assert props == acc.get_device_properties(0) == acc.get_device_properties(backend)
    cap = acc.get_device_capability()
    assert "float32" in cap["supported_dtypes"]
    with pytest.raises(IndexError):
        acc.get_device_properties(10**6)
    with pytest.raises(TypeError):
        acc.get_device_capability(2.0)  # type: ignore[arg-type]


def test_properties_do_not_leak_backend_state() -> None:
    p = acc.get_device_properties("cpu:0")
    p["name"] = "changed"
    assert acc.get_device_properties("cpu:0")["name"] != "changed"


# ---------------------------------------------------------------------- device-specific modules

def _unregister(name: str) -> None:
    """Forget a backend a test registered (there is no public unregister)."""
    with _backend._lock:
        _backend._factories.pop(name, None)
        _backend._instances.pop(name, None)
        _backend._failures.pop(name, None)


@pytest.fixture
def bound() -> Iterator[tuple[str, Any]]:
    """A fresh 2-device cpu backend under a unique name (fresh allocators), and its device
    module (``accelrt.backends.device_module``); the current accelerator stays ``cpu``."""
    name = "cpub_" + uuid.uuid4().hex[:8]
    acc.backends.register(name, lambda: CpuBackend(num_devices=2, name=name))
    ns = acc.backends.device_module(name)
    acc.set_current_accelerator("cpu")
    yield name, ns
    _unregister(name)


def test_cpu_module_binds_every_memory_function() -> None:
    assert set(acc.memory.__all__) <= set(acc.cpu.__all__)
    assert acc.cpu.MemPool is acc.memory.MemPool
    assert acc.cpu.set_allocator_settings is acc.memory.set_allocator_settings
    assert acc.cpu.get_allocator_settings is acc.memory.get_allocator_settings
    assert acc.cpu.PluggableAllocator is acc.memory.PluggableAllocator


def test_bound_empty_cache_releases_that_backends_devices_only(
        bound: tuple[str, Any]) -> None:
    name, ns = bound
    for i in (0, 1):
        acc.memory.caching_allocator_delete(
            acc.memory.caching_allocator_alloc(1 << 20, f"{name}:{i}"))
        assert acc.memory.memory_reserved(f"{name}:{i}") >= 1 << 20
    acc.memory.empty_cache()  # the current accelerator (cpu): leaves the other backend alone
    assert acc.memory.memory_reserved(f"{name}:1") >= 1 << 20
    ns.empty_cache()
    assert [acc.memory.memory_reserved(f"{name}:{i}") for i in (0, 1)] == [0, 0]


def test_bound_caching_allocator_delete_takes_only_its_backends_pointers(
        bound: tuple[str, Any]) -> None:
    name, ns = bound
    p = acc.memory.caching_allocator_alloc(512, "cpu:0")
    with pytest.raises(ValueError, match=f"allocated on cpu:0, not on a {name} device"):
        ns.caching_allocator_delete(p)
    acc.memory.caching_allocator_delete(p)  # still owned: the bound call freed nothing
    q = ns.caching_allocator_alloc(512, 1)
    assert acc.memory.memory_allocated(f"{name}:1") == 512
    ns.caching_allocator_delete(q)
    assert acc.memory.memory_allocated(f"{name}:1") == 0
    with pytest.raises(ValueError, match="already deleted"):
        ns.caching_allocator_delete(q)
    with pytest.raises(TypeError, match="ptr must be an int"):
        ns.caching_allocator_delete("0x10")


def test_bound_snapshots_and_pools_cover_that_backend(
        bound: tuple[str, Any], tmp_path: Any) -> None:
    from accelrt.memory.viz import load_snapshot
    name, ns = bound
    assert ns.memory_snapshot() == []
    ns.record_memory_history(max_entries=100)  # device=None: every device of the backend
    p1 = ns.caching_allocator_alloc(1 << 20, 1)
    pool = ns.MemPool()
    with ns.use_mem_pool(pool):  # the backend's current device, 0
        p0 = ns.caching_allocator_alloc(4096)
    segments = ns.memory_snapshot()
    assert sorted(s["device"] for s in segments) == [0, 1]
    assert [s["device"] for s in ns.memory_snapshot(pool.id)] == [0]
    ns.dump_snapshot(str(tmp_path / "snap.pickle"))
    snap = load_snapshot(str(tmp_path / "snap.pickle"))
    assert len(snap["segments"]) == 2
    assert [any(e["action"] == "alloc" for e in trace) for trace in snap["device_traces"]] \
        == [True, True]
    ns.record_memory_history(None)
    for p in (p0, p1):
        ns.caching_allocator_delete(p)
    ns.record_memory_history(max_entries=10, device=1)  # an int is an index of the backend
    ns.record_memory_history(None, device=f"{name}:1")
    with pytest.raises(ValueError, match=f"Expected a {name} device, but got: cpu:0"):
        ns.record_memory_history(None, device="cpu:0")


def test_bound_host_pool_functions(bound: tuple[str, Any]) -> None:
    from accelrt.memory import _host
    name, ns = bound
    assert ns.host_memory_stats() == {}
    ns.empty_host_cache()  # no pool yet: no-op
    pool = _host.get_host_allocator(acc.backends.get_backend(name))
    pool.free(pool.malloc(1000))
    stats = ns.host_memory_stats()
    assert list(stats) == sorted(stats) and stats["num_host_alloc"] == 1
    ns.reset_accumulated_host_memory_stats()
    assert ns.host_memory_stats()["num_host_alloc"] == 0
    ns.reset_peak_host_memory_stats()
    ns.empty_host_cache()
    assert ns.host_memory_stats()["allocated_bytes.current"] == 0


def test_bound_memory_functions_on_an_unusable_backend(tmp_path: Any) -> None:
    from accelrt.testing import SimulatedBackend

    class Unusable(SimulatedBackend):
        name = "unusable_mem"

        @classmethod
        def unavailable_reason(cls) -> str | None:
            return "no driver installed; install the frobnicator"

    acc.backends.register("unusable_mem", Unusable, replace=True)
    try:
        ns = acc.backends.device_module("unusable_mem")
        ns.empty_cache()        # nothing was ever cached: no-ops, as in PyTorch
        ns.empty_host_cache()
        for fn, args in (("record_memory_history", ()), ("caching_allocator_alloc", (512,))):
            with pytest.raises(acc.BackendUnavailableError, match="frobnicator"):
                getattr(ns, fn)(*args)
        # as torch 2.15's CUDA build without a driver (session 41): empty answers
        assert ns.memory_snapshot() == [] and ns.host_memory_stats() == {}
        ns.dump_snapshot(str(tmp_path / "x.pickle"))
        assert (tmp_path / "x.pickle").stat().st_size > 0
    finally:
        _unregister("unusable_mem")


# torch 2.15.0 (observed with /tmp/t215, a build without a GPU, and read in torch/cuda's and
# torch/accelerator's Python): torch.cuda's functions pass a bool through _get_device_index
# (which returns it: bool is an int) to C++, whose THPUtils_checkLong refuses it before any
# driver call: RuntimeError "invalid argument to setDevice" (set_device),
# "... exchangeDevice" (torch.cuda.device(True) on entry, and synchronize through it),
# "... getCurrentStream" (current_stream), "... memory_allocated" (the statistics);
# torch.device(True), torch.device("cuda", True), torch.Stream/Event/Generator(device=True)
# and torch.empty(device=True) raise TypeError; torch.accelerator's pybind11 bindings read True
# as 1 (device_index, set_device_index, synchronize, current_stream): accelrt refuses a bool
# everywhere, with an error that is torch.cuda's RuntimeError and torch.device's TypeError
# (docs/differences.md)
@pytest.mark.parametrize("flag", [True, False])
def test_a_bool_device_is_refused_with_torch_cudas_runtime_error(cpu4: str, flag: bool) -> None:
    def enter(cm: Any) -> None:
        with cm:
            pass
    acc.set_device_index(2)
    calls = [lambda: acc.set_device_index(flag), lambda: acc.synchronize(flag),
             lambda: acc.current_stream(flag), lambda: acc.memory.memory_allocated(flag),
             lambda: enter(acc.device_index(flag)),
             lambda: acc.cpu.set_device(flag), lambda: enter(acc.cpu.device(flag)),
             lambda: acc.cpu.synchronize(flag), lambda: acc.cpu.current_stream(flag),
             lambda: acc.cpu.memory_allocated(flag), lambda: acc.cpu.get_device_name(flag),
             lambda: acc.Stream(device=flag), lambda: acc.Event(device=flag),
             lambda: acc.cpu.Stream(device=flag), lambda: acc.random.Generator(flag),
             lambda: acc.empty(1, device=flag), lambda: acc.random.get_rng_state(flag)]
    for call in calls:
        with pytest.raises(RuntimeError, match=f"got bool: a bool is not a device index "
                           f".*invalid argument.*; pass int\\({flag}\\) for device "
                           f"{int(flag)}$") as info:
            call()
        assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)
        assert acc.current_device_index() == 2 and acc.cpu.current_device() == 0
    with pytest.raises(TypeError, match="^device_index\\(\\) takes an int or None, got bool"):
        acc.device_index(flag)
    for call in (lambda: acc.device(flag), lambda: acc.device("cpu", flag)):
        with pytest.raises(TypeError, match="bool"):    # torch.device's TypeError
            call()


@pytest.mark.parametrize(("arg", "expected"), [
    (1.5, "got float$"),
    ([0], "got list$"),
    (True, r"got bool: a bool is not a device index .*; pass int\(True\) for device 1$"),
    (np.int64(1), r"got numpy\.int64; pass the index as an int \(1\)$"),
    (acc.cpu.device(0), r"got accelrt\.cpu\.device; pass its index \(0\) or a device string$"),
])
def test_a_device_argument_of_another_type_names_it_and_the_fix(arg: object,
                                                                  expected: str) -> None:
    """PyTorch reads such an argument as the current device; accelrt refuses it
    (docs/differences.md), with the type and, where one exists, what to pass instead."""
    context = isinstance(arg, acc.cpu.device)
    for call in (acc.current_stream, acc.synchronize, acc.cpu.current_stream):
        if context and call is acc.cpu.current_stream:
            # the module's own context manager stands for its index there, as in torch.cuda
            assert call(arg) == acc.cpu.current_stream(0)  # type: ignore[operator]
            continue
        with pytest.raises(TypeError, match="^expected a device, int, str or None, " + expected):
            call(arg)  # type: ignore[operator]
