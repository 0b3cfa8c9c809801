"""Every device module (``accelrt.cpu``, ``accelrt.cuda``, ``accelrt.opencl`` and
``accelrt.backends.device_module(name)``) is the ``torch.cuda`` runtime with PyTorch's
semantics: tested on two simulated cpu devices with sync and async streams, on ``acc.cpu``
itself, and on OpenCL (PoCL) where it is usable."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import types
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from helpers.registry import module_backends

import accelrt as acc
from accelrt import _backend
from accelrt.backends.cpu import CpuBackend
from accelrt.testing import SimulatedBackend

SYNC, ASYNC = "dmsync", "dmasync"


class _Unusable(SimulatedBackend):
    name = "dmunusable"

    @classmethod
    def unavailable_reason(cls) -> str | None:
        return "no driver installed; install the frobnicator"


class _WithArch(SimulatedBackend):
    name = "dmarch"

    def arch_list(self) -> list[str]:
        return ["sm_90", "compute_70"]


# closed (worker threads stopped) and unregistered after the module
_backends = module_backends({
    SYNC: lambda: CpuBackend(num_devices=2, async_streams=False, name=SYNC),
    ASYNC: lambda: CpuBackend(num_devices=2, async_streams=True, name=ASYNC),
    "dmunusable": _Unusable,
    "dmarch": _WithArch,
})


def _module_params() -> list[Any]:
    opencl_reason = acc.backends.unavailable_reason("opencl")
    return [
        pytest.param(SYNC, id="cpu2-sync"),
        pytest.param(ASYNC, id="cpu2-async"),
        pytest.param("acc.cpu", id="acc.cpu"),
        pytest.param("acc.opencl", id="acc.opencl", marks=[pytest.mark.skipif(
            opencl_reason is not None, reason=f"opencl unavailable: {opencl_reason}")]),
    ]


@pytest.fixture(params=_module_params())
def m(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A device module: a 2-device cpu backend's (sync or async streams), ``acc.cpu`` or
    ``acc.opencl``; its backend's current device starts at 0 (restored by conftest)."""
    name: str = request.param
    mod: Any = getattr(acc, name[4:]) if name.startswith("acc.") else \
        acc.backends.device_module(name)
    mod.set_device(0)
    yield mod
    mod.synchronize()


def _name(m: Any) -> str:
    """The backend name of a device module (a module or a DeviceModule)."""
    if isinstance(m, types.ModuleType):
        return m.__name__.rpartition(".")[2]
    return str(m.name)


def _two(m: Any) -> None:
    if m.device_count() < 2:
        pytest.skip("needs two devices of the backend")


def _graphs(m: Any) -> bool:
    return bool(acc.backends.get_backend(_name(m)).graph_supported(0))


# ---------------------------------------------------------------------- the names

#: torch.cuda runtime names every device module has (issue 10 §1, plus what they had before).
NAMES = {
    "Event", "Graph", "MemPool", "OutOfMemoryError", "Stream", "StreamContext",
    "caching_allocator_alloc", "caching_allocator_delete", "can_device_access_peer",
    "current_device", "current_device_index", "current_stream", "default_stream", "device",
    "device_count", "device_index", "device_of", "dump_snapshot", "empty_cache",
    "empty_host_cache", "get_allocator_settings", "get_arch_list", "get_device_capability",
    "get_device_name", "get_device_properties", "get_gencode_flags", "get_memory_info",
    "get_per_process_memory_fraction", "get_rng_state", "get_rng_state_all", "graph",
    "graph_pool_handle", "host_memory_stats", "init", "initial_seed", "ipc_collect",
    "is_available", "is_current_stream_capturing", "is_initialized", "manual_seed",
    "manual_seed_all", "max_memory_allocated", "max_memory_cached", "max_memory_reserved",
    "mem_get_info", "memory_allocated", "memory_cached", "memory_reserved", "memory_snapshot",
    "memory_stats", "memory_stats_as_nested_dict", "memory_summary", "record_memory_history",
    "reset_accumulated_host_memory_stats", "reset_accumulated_memory_stats",
    "reset_max_memory_allocated", "reset_max_memory_cached", "reset_peak_host_memory_stats",
    "reset_peak_memory_stats", "seed", "seed_all", "set_allocator_settings", "set_device",
    "set_device_index", "set_per_process_memory_fraction", "set_rng_state",
    "set_rng_state_all", "set_stream", "stream", "synchronize", "unavailable_reason",
    "use_mem_pool",
}


@pytest.mark.parametrize("module", ["cpu", "cuda", "opencl"])
def test_every_module_has_every_runtime_name(module: str) -> None:
    mod = getattr(acc, module)
    assert set(mod.__all__) >= NAMES, sorted(NAMES - set(mod.__all__))
    assert list(mod.__all__) == sorted(set(mod.__all__))
    for n in mod.__all__:
        assert hasattr(mod, n), n
    assert mod.OutOfMemoryError is acc.OutOfMemoryError
    assert mod.MemPool is acc.memory.MemPool
    for cls in ("Stream", "Event", "StreamContext", "device", "device_of", "Graph", "graph"):
        assert getattr(mod, cls).__module__ == f"accelrt.{module}", cls
    assert issubclass(mod.Stream, acc.Stream) and issubclass(mod.Event, acc.Event)
    assert issubclass(mod.Graph, acc.Graph) and issubclass(mod.graph, acc.graph)


def test_third_party_module_has_every_name() -> None:
    mod = acc.backends.device_module(SYNC)
    assert not [n for n in NAMES if not hasattr(mod, n)]
    s = mod.current_stream()
    assert repr(s).startswith(f"<accelrt.{SYNC}.Stream device={SYNC}:0 ")
    assert isinstance(s, mod.Stream) and isinstance(s, acc.Stream)
    assert type(s.record_event()) is mod.Event
    assert acc.backends.device_module(SYNC) is mod


def test_cuda_module_classes() -> None:
    assert acc.cuda.CUDAGraph is acc.cuda.Graph
    assert issubclass(acc.cuda.ExternalStream, acc.cuda.Stream)


def test_external_stream_and_native_handles(m: Any) -> None:
    # torch.cuda.ExternalStream(stream_ptr, device=None) on every module, over the stream's
    # cuda_stream / native_handle; Event.cuda_event is the event's handle (0 until recorded)
    s = m.Stream(device=1 if m.device_count() > 1 else 0)
    assert s.cuda_stream == s.native_handle == s.stream_id
    assert acc.Stream(_name(m)).native_handle != 0
    e = m.ExternalStream(s.cuda_stream, s.device)
    assert e == s and type(e) is m.ExternalStream and isinstance(e, m.Stream)
    assert m.streams.ExternalStream is m.ExternalStream
    ev = m.Event()
    assert ev.cuda_event == 0
    ev.record(e)
    assert type(e.record_event()) is m.Event and ev.cuda_event == ev.event_id != 0
    ev.synchronize()
    e.close()                      # not owned: the stream stays alive
    s.synchronize()
    assert s.query() and m.ExternalStream(s.cuda_stream, s.device) == s
    with m.device(s.device_index):
        assert m.ExternalStream(s.cuda_stream) == s   # device=None: the current device
    with pytest.raises(TypeError, match="as an int"):
        m.ExternalStream(str(s.cuda_stream))
    with pytest.raises(ValueError, match="not a live stream"):
        m.ExternalStream(0xDEAD0000, 0)
    assert acc.cuda.comm is acc.comm
    assert acc.cuda.Stream.__qualname__ == "Stream"


def test_acc_opencl_exists_and_empties_its_cache() -> None:
    # issue 9 §5: acc.opencl existed nowhere, so OpenCL's cache could only be emptied by
    # making OpenCL the current accelerator
    assert "opencl" in acc.__all__ and "opencl" in dir(acc)
    acc.opencl.empty_cache()
    acc.opencl.empty_host_cache()
    if not acc.opencl.is_available():
        return
    acc.set_current_accelerator("cpu")
    x = acc.zeros(1 << 16, device="opencl:0")
    del x
    assert acc.opencl.memory_reserved() > 0
    acc.opencl.empty_cache()
    assert acc.opencl.memory_reserved() == 0


def test_importing_the_modules_imports_no_backend_library() -> None:
    code = ("import sys, accelrt, accelrt.cpu, accelrt.cuda, accelrt.opencl\n"
            "bad = [m for m in ('pyopencl', 'cuda.bindings', 'pynvml', 'nvtx') if m in sys.modules]\n"
            "assert not bad, bad\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, check=False)
    assert r.returncode == 0, r.stderr


# ---------------------------------------------------------------------- current device

def test_current_device_set_device_and_device_context(m: Any) -> None:
    _two(m)
    name = _name(m)
    m.set_device(1)
    assert m.current_device() == 1 == m.current_device_index()
    with m.device(0):
        assert m.current_device() == 0
        with m.device(f"{name}:1"), m.device(acc.device(name, 0)):
            assert m.current_device() == 0
        assert m.current_device() == 0
    assert m.current_device() == 1
    for noop in (None, -1, name):
        with m.device(noop):
            assert m.current_device() == 1
    m.set_device(-3)   # negative: no-op
    assert m.current_device() == 1
    ctx = m.device(0)
    with ctx:          # one object entered twice, nested: each exit restores its own level
        with ctx:
            assert m.current_device() == 0
        assert m.current_device() == 0
    assert m.current_device() == 1
    with pytest.raises(IndexError), m.device(m.device_count()):
        pass
    with pytest.raises(ValueError, match="Expected a device with a specified index"):
        m.set_device(None)
    assert repr(m.device(1)).endswith("device(1)")
    assert m.get_device_properties(m.device(1))["index"] == 1   # a device() stands for its index
    with pytest.raises(ValueError, match=f"Expected a {name} device, but got: "):
        m.current_stream((acc.cpu if name != "cpu" else acc.opencl).device(0))


def test_current_device_is_per_thread(m: Any) -> None:
    _two(m)
    m.set_device(1)
    seen: list[int] = []

    def other() -> None:
        seen.append(m.current_device())
        m.set_device(0)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen == [0] and m.current_device() == 1


def test_device_of(m: Any) -> None:
    _two(m)
    name = _name(m)
    x = acc.zeros(4, device=f"{name}:1")
    with m.device_of(x):
        assert m.current_device() == 1
    assert m.current_device() == 0
    with m.device_of(m.Stream(1)):
        assert m.current_device() == 1
    other = acc.zeros(2, device="cpu:0" if name != "cpu" else f"{SYNC}:0")
    for obj in (object(), None, other):   # no device, or another backend's: no-op
        with m.device_of(obj):
            assert m.current_device() == 0


# ---------------------------------------------------------------------- streams

def test_streams_are_the_modules_types(m: Any) -> None:
    mod = m.Stream.__module__
    cur = m.current_stream()
    assert type(cur) is m.Stream and isinstance(cur, acc.Stream)
    assert repr(cur).startswith(f"<{mod}.Stream device=")
    assert type(m.default_stream()) is m.Stream and m.default_stream() == cur
    s = m.Stream()
    assert type(s.record_event()) is m.Event
    # torch.cuda.Event(enable_timing=False, blocking=False, interprocess=False), positionally
    e = m.Event(True, False)
    assert e.enable_timing is True and type(e) is m.Event
    e.record(s)
    e.synchronize()
    with pytest.raises(TypeError, match="enable_timing must be a bool"):
        m.Event(f"{_name(m)}:0")
    # what Event's repr prints (PyTorch's form, from type(self).__module__ / __qualname__)
    assert (type(m.Event()).__module__, type(m.Event()).__qualname__) == (mod, "Event")
    m.set_stream(s)
    assert m.current_stream() == s and m.current_stream() is s
    assert m.default_stream() != s
    plain = acc.Stream(s.device)      # an accelrt.Stream made outside the module
    m.set_stream(plain)
    view = m.current_stream()
    assert type(view) is m.Stream and view == plain and hash(view) == hash(plain)
    del plain
    assert view.query() is True       # the view keeps the stream alive
    m.set_stream(None)                # torch.cuda.set_stream(None): no-op
    assert m.current_stream() == view
    m.set_stream(m.default_stream())


def test_stream_context_and_stream(m: Any) -> None:
    _two(m)
    s = m.Stream(1)
    before = m.current_stream(1)
    with m.stream(s) as entered:
        assert entered is s
        assert m.current_device() == 1 and m.current_stream() == s
    assert m.current_device() == 0 and m.current_stream(1) == before
    with m.stream(None) as entered:
        assert entered is None and m.current_device() == 0
    ctx = m.StreamContext(s)
    with ctx:
        with ctx:
            assert m.current_stream(1) == s
        assert m.current_stream(1) == s
    assert m.current_stream(1) == before
    with pytest.raises(TypeError, match="takes an accelrt.Stream or None"):
        m.stream(3)
    foreign = acc.Stream("cpu:0") if _name(m) != "cpu" else acc.Stream(f"{SYNC}:0")
    with pytest.raises(ValueError, match=f"Expected a {_name(m)} device, but got: "):
        m.stream(foreign)
    with pytest.raises(ValueError, match=f"takes a {_name(m)} stream"):
        m.set_stream(foreign)


def test_stream_negative_or_none_device_is_current(m: Any) -> None:
    _two(m)
    m.set_device(1)
    assert m.Stream().device_index == 1 and m.Stream(-1).device_index == 1
    assert m.Stream(0).device_index == 0


def test_stream_capture_queries_and_priority_range(m: Any) -> None:
    least, greatest = m.Stream.priority_range()
    assert greatest <= 0 <= least
    assert m.current_stream().priority_range() == (least, greatest)
    s = m.Stream(priority=greatest)
    assert s.priority == greatest and s.is_capturing() is False
    assert m.is_current_stream_capturing() is False
    with pytest.raises(ValueError, match="out of range"):
        m.Stream(priority=greatest - 1)


def test_stream_takes_priority_positionally(m: Any) -> None:
    # torch.cuda.Stream(device=None, priority=0, **kwargs): the priority may be positional
    least, greatest = m.Stream.priority_range()
    name = _name(m)
    s = m.Stream(f"{name}:0", greatest)
    assert s.priority == greatest and s.device_index == 0
    assert m.Stream(None, least).priority == least
    with pytest.raises(ValueError, match="out of range"):
        m.Stream(0, greatest - 1)
    # torch.Stream(device=None, *, priority=0) keeps priority keyword-only
    with pytest.raises(TypeError):
        acc.Stream(f"{name}:0", 0)  # type: ignore[call-arg]


def test_graph_in_the_module(m: Any) -> None:
    name = _name(m)
    g = m.Graph()
    if not _graphs(m):
        with pytest.raises(acc.CaptureNotSupportedError), m.graph(g):
            pass
        return
    x = acc.zeros(4, device=f"{name}:0")
    side = m.Stream()
    with m.graph(g, pool=m.graph_pool_handle(), stream=side):
        assert m.is_current_stream_capturing() is True
        assert m.current_stream().is_capturing() is True
        assert type(m.current_stream()) is m.Stream
        x.fill_(3.0)
    assert m.is_current_stream_capturing() is False
    x.fill_(0.0)
    g.replay()
    m.synchronize()
    assert x.numpy().tolist() == [3.0] * 4


def test_capturing_an_empty_graph_warns_as_pytorch(m: Any) -> None:
    if not _graphs(m):
        pytest.skip("backend without graph capture")
    g = m.Graph()
    with pytest.warns(UserWarning, match="^The CUDA Graph is empty. This usually means that the "
                      "graph was attempted to be captured on wrong device or stream.$"), \
            m.graph(g):
        pass
    g.replay()   # an empty graph still replays (as in PyTorch)


# ---------------------------------------------------------------------- init, peers, arch

def test_init_is_initialized_and_ipc_collect(m: Any) -> None:
    m.init()
    assert m.is_initialized() is True
    m.ipc_collect()
    m.synchronize()


def test_properties_name_and_peer_access(m: Any) -> None:
    assert m.get_device_name() == m.get_device_properties()["name"]
    assert "float32" in m.get_device_capability()["supported_dtypes"]
    assert m.can_device_access_peer(0, 0) is True
    if m.device_count() >= 2:
        assert isinstance(m.can_device_access_peer(0, 1), bool)
    with pytest.raises(IndexError):
        m.can_device_access_peer(0, m.device_count())


def test_arch_list_empty_without_own_kernels(m: Any) -> None:
    assert m.get_arch_list() == [] and m.get_gencode_flags() == ""


def test_arch_list_and_gencode_flags_of_a_backend_with_kernels() -> None:
    mod = acc.backends.device_module("dmarch")
    assert mod.get_arch_list() == ["sm_90", "compute_70"]
    assert mod.get_gencode_flags() == ("-gencode compute=compute_90,code=sm_90 "
                                       "-gencode compute=compute_70,code=compute_70")


# ---------------------------------------------------------------------- random

def test_rng_functions(m: Any) -> None:
    saved = m.get_rng_state_all()
    try:
        m.manual_seed(5)
        assert m.initial_seed() == 5
        state = m.get_rng_state()
        assert state.dtype == np.uint8 and state.shape == (16,)
        a = acc.rand(4, device=f"{_name(m)}:0").numpy().tolist()
        m.set_rng_state(state)
        assert acc.rand(4, device=f"{_name(m)}:0").numpy().tolist() == a
        m.manual_seed_all(9)
        states = m.get_rng_state_all()
        assert len(states) == m.device_count()
        assert all(int.from_bytes(s[:8].tobytes(), "little") == 9 for s in states)
        assert m.seed() is None and m.seed_all() is None   # torch.cuda's return None
        seeds = {int.from_bytes(s[:8].tobytes(), "little") for s in m.get_rng_state_all()}
        assert len(seeds) == 1 and seeds != {9}
        if m.device_count() >= 2:
            m.set_rng_state(state, 1)
            assert m.get_rng_state(1).tolist() == state.tolist()
        with pytest.raises(IndexError, match="states"):
            m.set_rng_state_all([state] * (m.device_count() + 1))
        with pytest.raises(TypeError):   # "7" is a seed since s25: int(seed), as torch.cuda's
            m.manual_seed(None)
    finally:
        m.set_rng_state_all(saved)


# ---------------------------------------------------------------------- memory

def test_memory_functions(m: Any) -> None:
    _two(m)
    m.reset_peak_memory_stats(1)
    p = m.caching_allocator_alloc(1 << 20, 1)
    try:
        assert m.memory_allocated(1) >= 1 << 20
        assert m.max_memory_allocated(1) >= m.memory_allocated(1)
        assert m.memory_reserved(1) >= m.memory_allocated(1)
        assert m.max_memory_reserved(1) >= m.memory_reserved(1)
        stats = m.memory_stats(1)
        assert list(stats) == sorted(stats) and stats["allocation.all.current"] >= 1
        nested = m.memory_stats_as_nested_dict(1)
        assert nested["allocation"]["all"]["current"] == stats["allocation.all.current"]
        assert "device ID 1" in m.memory_summary(1, abbreviated=True)
        with pytest.warns(FutureWarning, match=r"memory_cached` has been renamed to `.*\.memory_reserved`"):
            assert m.memory_cached(1) == m.memory_reserved(1)
        with pytest.warns(FutureWarning, match=r"max_memory_cached` has been renamed to `.*\.max_memory_reserved`"):
            assert m.max_memory_cached(1) == m.max_memory_reserved(1)
    finally:
        m.caching_allocator_delete(p)
    with pytest.warns(FutureWarning, match="reset_max_memory_cached now calls .*reset_peak_memory_stats"):
        m.reset_max_memory_cached(1)
    with pytest.warns(FutureWarning, match="reset_max_memory_allocated now calls"):
        m.reset_max_memory_allocated(1)
    assert m.max_memory_allocated(1) == m.memory_allocated(1)
    m.reset_accumulated_memory_stats(1)
    assert m.memory_stats(1).get("num_device_alloc", 0) == 0
    free, total = m.mem_get_info(1)
    assert 0 <= free <= total and (free, total)[1] == m.get_memory_info(1)[1]
    m.set_per_process_memory_fraction(1.0, 1)
    assert m.get_per_process_memory_fraction(1) == 1.0
    m.empty_cache()
    assert m.memory_reserved(1) == 0


def test_mem_pool_and_snapshot(m: Any) -> None:
    pool = m.MemPool()
    with m.use_mem_pool(pool):
        x = acc.zeros(1024, device=f"{_name(m)}:0")
    assert [s["device"] for s in m.memory_snapshot(pool.id)] == [0]
    del x


def test_int_device_is_an_index_of_the_modules_backend(m: Any) -> None:
    acc.set_current_accelerator("cpu")
    if _name(m) == "cpu":
        acc.set_current_accelerator(SYNC)
    acc.set_device_index(0)
    assert m.current_stream(0).device_type == _name(m)
    assert m.get_device_properties(0)["type"] == _name(m)


#: (function, args) of every device-taking function; the device goes last.
DEVICE_FUNCTIONS = [
    ("set_device", ()), ("current_stream", ()), ("default_stream", ()), ("synchronize", ()),
    ("get_device_properties", ()), ("get_device_capability", ()), ("get_device_name", ()),
    ("mem_get_info", ()), ("get_memory_info", ()), ("memory_stats", ()),
    ("memory_stats_as_nested_dict", ()), ("memory_allocated", ()),
    ("max_memory_allocated", ()), ("memory_reserved", ()), ("max_memory_reserved", ()),
    ("reset_peak_memory_stats", ()), ("reset_accumulated_memory_stats", ()),
    ("memory_summary", ()), ("get_rng_state", ()), ("set_rng_state", (np.zeros(16, np.uint8),)),
    ("set_per_process_memory_fraction", (0.5,)), ("get_per_process_memory_fraction", ()),
    ("caching_allocator_alloc", (512,)), ("can_device_access_peer", (0,)),
    ("record_memory_history", (None, "all", "all", 10)), ("device", ()), ("Stream", ()),
]


@pytest.mark.parametrize(("fname", "args"), DEVICE_FUNCTIONS, ids=[f for f, _ in DEVICE_FUNCTIONS])
def test_a_device_of_another_type_raises_pytorchs_value_error(m: Any, fname: str,
                                                              args: tuple[Any, ...]) -> None:
    name = _name(m)
    with pytest.raises(ValueError, match=f"^Expected a {name} device, but got: cuda:0$"):
        getattr(m, fname)(*args, "cuda:0")
    with pytest.raises(ValueError, match=f"^Expected a {name} device, but got: cuda$"):
        getattr(m, fname)(*args, acc.device("cuda"))


# ---------------------------------------------------------------------- an unusable backend

def test_queries_on_an_unusable_backend_follow_pytorch() -> None:
    m = acc.backends.device_module("dmunusable")
    # statistics and probes answer: 0 / {} / False, as torch.cuda does without a GPU
    assert m.memory_allocated() == 0 and m.max_memory_allocated() == 0
    assert m.memory_reserved() == 0 and m.max_memory_reserved(0) == 0
    assert m.memory_stats() == {} and m.memory_stats_as_nested_dict() == {}
    assert "device ID 0" in m.memory_summary()
    with pytest.warns(FutureWarning):
        assert m.memory_cached() == 0
    assert m.is_initialized() is False and m.is_current_stream_capturing() is False
    assert m.get_arch_list() == [] and m.get_gencode_flags() == ""
    m.empty_cache()
    m.empty_host_cache()
    m.manual_seed(1)          # torch.cuda queues seeds and ignores them without a GPU
    m.manual_seed_all(1)
    m.seed()
    m.seed_all()
    with m.device(None), m.device(-1), m.stream(None), m.device_of(object()):
        pass
    # the rest needs the device: BackendUnavailableError (a RuntimeError) with the reason
    for fn, args in ((m.mem_get_info, ()), (m.reset_peak_memory_stats, ()),
                     (m.current_device, ()), (m.init, ()), (m.ipc_collect, ()),
                     (m.initial_seed, ()), (m.get_rng_state, ()), (m.synchronize, ()),
                     (m.set_device, (0,)), (m.current_stream, ())):
        with pytest.raises(acc.BackendUnavailableError, match="frobnicator"):
            fn(*args)
    with pytest.raises(ValueError, match="Expected a dmunusable device, but got: cpu:0"):
        m.memory_allocated("cpu:0")    # a wrong argument is still an error
    # session 41: torch 2.15 (its CUDA build without a driver) answers these too
    assert m.memory_snapshot() == [] and m.host_memory_stats() == {}
    assert m.get_allocator_backend() == "native"


def test_acc_cuda_memory_queries_without_a_gpu() -> None:
    # issue 9 §5: acc.cuda.memory_allocated() raised BackendUnavailableError with no GPU
    if acc.cuda.is_available():
        pytest.skip("a GPU is present")
    assert acc.cuda.memory_allocated() == 0 and acc.cuda.memory_reserved() == 0
    assert acc.cuda.max_memory_allocated() == 0 and acc.cuda.max_memory_reserved() == 0
    assert acc.cuda.memory_stats() == {} and acc.cuda.device_count() == 0
    assert acc.cuda.is_initialized() is False
    with pytest.raises(acc.BackendUnavailableError):
        acc.cuda.mem_get_info()
    with pytest.raises(ValueError, match="Expected a cuda device, but got: cpu"):
        acc.cuda.memory_allocated("cpu")


# ---------------------------------------------------------------------- acc.cpu itself

TWO_DEVICES = textwrap.dedent("""
    import sys, warnings
    import accelrt as acc
    name = sys.argv[1]
    m = getattr(acc, name)
    if m.device_count() < 2:
        print("skip", m.device_count(), m.unavailable_reason())
        raise SystemExit(0)
    acc.set_current_accelerator("cpu")
    m.set_device(1)
    assert m.current_device() == 1
    with m.device(0):
        s = m.Stream()
        assert s.device_index == 0
    with m.stream(s):
        assert m.current_device() == 0 and m.current_stream() == s
    assert m.current_device() == 1
    x = acc.zeros(1 << 16, device=f"{name}:1")
    with m.device_of(x):
        assert m.current_device() == 1
    if name == "cpu":
        g = m.Graph()
        with m.graph(g):
            x.fill_(2.0)
        g.replay()
    else:
        x.fill_(2.0)
    m.synchronize(1)
    assert float(x.numpy()[0]) == 2.0
    assert m.memory_allocated(1) >= 1 << 18 and m.memory_allocated(0) == 0
    m.manual_seed_all(3)
    assert [int(st[0]) for st in m.get_rng_state_all()] == [3, 3]
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        m.memory_cached(1)
    assert w and w[0].category is FutureWarning
    e = m.Stream(1).record_event()
    e.synchronize()
    print("ok", repr(m.current_stream(1)).split()[0], type(e).__module__)
""")


@pytest.mark.parametrize(("name", "env"), [
    ("cpu", {"ACCELRT_CPU_DEVICES": "2", "ACCELRT_CPU_STREAMS": "sync"}),
    ("cpu", {"ACCELRT_CPU_DEVICES": "2", "ACCELRT_CPU_STREAMS": "async"}),
    ("opencl", {"POCL_DEVICES": "pthread pthread"}),
], ids=["acc.cpu-sync", "acc.cpu-async", "acc.opencl"])
def test_the_module_itself_with_two_devices(name: str, env: dict[str, str]) -> None:
    r = subprocess.run([sys.executable, "-c", TWO_DEVICES, name], env={**os.environ, **env},
                       capture_output=True, text=True, timeout=90, check=False)
    assert r.returncode == 0, r.stderr
    if r.stdout.startswith("skip"):
        pytest.skip(f"acc.{name} has fewer than two devices here: {r.stdout.strip()}")
    assert r.stdout.split() == ["ok", f"<accelrt.{name}.Stream", f"accelrt.{name}"]


def test_backend_replaced_under_the_same_name_is_followed() -> None:
    name = "dmreplace"
    acc.backends.register(name, lambda: CpuBackend(num_devices=1, name=name))
    mod = acc.backends.device_module(name)
    first = mod.current_stream()._b
    acc.backends.register(name, lambda: CpuBackend(num_devices=2, name=name), replace=True)
    assert mod.device_count() == 2 and mod.current_stream()._b is not first
    with _backend._lock:
        for d in (_backend._factories, _backend._instances, _backend._failures):
            d.pop(name, None)


def test_arrays_of_a_backend_replaced_under_the_same_name_use_the_new_instance() -> None:
    # the allocator of "name:0" belonged to the first instance: after the replacement it
    # handed out the first instance's addresses, which the new one refuses (or, on real
    # hardware, would not own)
    name = "allocreplace"
    acc.backends.register(name, lambda: CpuBackend(num_devices=1, name=name))
    try:
        old = acc.full((4,), 1.0, device=f"{name}:0")
        first = acc.backends.get_backend(name)
        acc.backends.register(name, lambda: CpuBackend(num_devices=1, name=name),
                              replace=True)
        new = acc.full((4,), 2.0, device=f"{name}:0")
        assert new._b is not first and new._b is acc.backends.get_backend(name)
        assert new.numpy().tolist() == [2.0] * 4 and old.numpy().tolist() == [1.0] * 4
        assert acc.memory.memory_allocated(f"{name}:0") == 512   # the new allocator's
        del old, new                                             # each frees into its own
        assert acc.memory.memory_allocated(f"{name}:0") == 0
    finally:
        with _backend._lock:
            for d in (_backend._factories, _backend._instances, _backend._failures):
                d.pop(name, None)


@pytest.mark.parametrize("mod", ["cpu", "cuda", "opencl"])
def test_memory_submodule_has_torch_cuda_memory_names(mod: str, tmp_path: Any) -> None:
    # torch.cuda.memory._record_memory_history / _snapshot / _dump_snapshot, importable
    import importlib
    m = getattr(acc, mod)
    mm = importlib.import_module(f"accelrt.{mod}.memory")
    assert mm is m.memory and mm.__name__ == f"accelrt.{mod}.memory"
    assert mm.memory_allocated == m.memory_allocated and mm.MemPool is acc.memory.MemPool
    if not m.is_available():
        # torch 2.15 without a driver: an empty snapshot (session 41); recording raises
        assert mm._snapshot()["segments"] == []
        with pytest.raises(acc.BackendUnavailableError):
            mm._record_memory_history("all")
        return
    mm._record_memory_history("all", "all", "all", 1000, None, True, False, False, None)
    p = m.caching_allocator_alloc(4096, 0)
    m.caching_allocator_delete(p)
    snap = mm._snapshot(0, augment_with_fx_traces=False)
    assert any(e["action"] == "alloc" and e["addr"] == p for e in snap["device_traces"][0])
    mm._dump_snapshot(filename=str(tmp_path / "s.pickle"))
    assert (tmp_path / "s.pickle").stat().st_size > 0
    with pytest.raises(ValueError, match="compile_context=True is not supported"):
        mm._record_memory_history(compile_context=True)
    mm._record_memory_history(None)


def test_resolve_of_none_is_the_general_paths() -> None:
    """``_runtime._args.resolve(name, None)``'s shortcut (the registered instance and the
    thread's current index) returns what the general path returns, in every thread, after
    ``set_device``, and for a backend not made yet (which takes the general path)."""
    from helpers import register_toy

    from accelrt._runtime import _args

    def general(name: str) -> object:
        try:
            b = acc.backends.get_backend(name)
            return b, _args.index_of(b, _args.typed(name, None))
        except Exception as exc:  # noqa: BLE001 - compared by type and message
            return type(exc), str(exc)

    def shortcut(name: str) -> object:
        try:
            return _args.resolve(name, None)
        except Exception as exc:  # noqa: BLE001 - compared by type and message
            return type(exc), str(exc)

    name, _ = register_toy(num_devices=3)
    assert shortcut(name) == general(name)
    acc.backends.device_module(name).set_device(2)
    assert shortcut(name) == general(name) and shortcut(name)[1] == 2   # type: ignore[index]
    seen: list[object] = []
    t = threading.Thread(target=lambda: seen.append((shortcut(name), general(name))))
    t.start()
    t.join(30)
    assert seen[0][0] == seen[0][1] and seen[0][0][1] == 0   # type: ignore[index]
    assert shortcut("no_such_backend") == general("no_such_backend")
    assert shortcut("no_such_backend")[0] is acc.BackendUnavailableError   # type: ignore[index]


@pytest.mark.parametrize("mod", [acc.cpu])
def test_a_device_modules_view_of_the_current_stream_is_kept_and_never_stale(mod: Any) -> None:
    # a view of a stream that owns no handle (the default stream) is kept on it, so that
    # mod.current_stream() makes no object; a closed view, or a view of an owned stream
    # (which holds its origin: no cycle), is never served from it
    import gc
    import weakref
    v = mod.current_stream()
    assert type(v) is mod.Stream and mod.current_stream() is v and v == acc.current_stream()
    v.close()                                   # closes this object only
    w = mod.current_stream()
    assert w is not v and not w.is_closed and mod.current_stream() is w
    w.synchronize()
    owned = acc.Stream("cpu")
    with owned:
        a, b = mod.current_stream(), mod.current_stream()
        assert a == b == owned and a is not b   # (views of an owned stream are not kept)
    ref = weakref.ref(owned)
    del owned, a, b
    gc.disable()
    try:
        assert ref() is None                    # freed by reference counts: no cycle
    finally:
        gc.enable()
    assert mod.current_stream() is w
