"""Sync debug mode (``set_sync_debug_mode`` / ``get_sync_debug_mode``): PyTorch's validation and
messages, a warning or an error on every synchronizing operation, none on the others."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from helpers.registry import module_backends
from helpers.staging import RecordingNoHostCpu

import accelrt as acc
from accelrt import backends, memory
from accelrt.backends.cpu import CpuBackend
from accelrt.memory._allocator import get_allocator

_BACKENDS: dict[str, Callable[[], Any]] = {
    "sdsync": lambda: CpuBackend(num_devices=2, async_streams=False, name="sdsync"),
    "sdasync": lambda: CpuBackend(num_devices=2, async_streams=True, name="sdasync"),
    # device memory the host cannot read: copies go through the pinned staging pool
    "sdnohost": lambda: RecordingNoHostCpu(num_devices=1, async_streams=True, name="sdnohost"),
    "sdoom": lambda: CpuBackend(num_devices=1, async_streams=True, memory_limit="24MiB",
                                name="sdoom"),
}
# closed (worker threads stopped) and unregistered after the module
_backends = module_backends(_BACKENDS)


def _msg(name: str) -> str:
    """The warning text: PyTorch's, naming the backend (registered variants by their name)."""
    label = {"opencl": "OpenCL", "cpu": "CPU", "cuda": "CUDA"}.get(name, name.upper())
    return f"called a synchronizing {label} operation"


def _device_params() -> list[Any]:
    out = []
    for name in ("opencl", "cuda"):
        reason = backends.unavailable_reason(name)
        out.append(pytest.param(name, marks=pytest.mark.skipif(
            reason is not None, reason=f"{name} unavailable: {reason}")))
    return out


@pytest.fixture(autouse=True)
def _reset_modes() -> Iterator[None]:
    yield
    for name in (*_BACKENDS, "cpu", "opencl", "cuda"):
        if backends.unavailable_reason(name) is None:
            acc.set_sync_debug_mode("default", name)


@pytest.fixture(params=["sdsync", "sdasync", "sdnohost", *_device_params()])
def be(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


def _warns(name: str, fn: Callable[[], object]) -> list[warnings.WarningMessage]:
    """Run ``fn`` in warn mode and return the sync-debug warnings it issued."""
    acc.set_sync_debug_mode("warn", name)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn()
    finally:
        acc.set_sync_debug_mode("default", name)
    return [w for w in caught if "called a synchronizing" in str(w.message)]


# ---------------------------------------------------------------------- the mode itself

def test_modes_and_getter() -> None:
    assert acc.get_sync_debug_mode("sdsync") == 0
    for value, expected in (("warn", 1), ("error", 2), ("default", 0), (1, 1), (2, 2), (0, 0),
                            (np.int64(2), 2)):
        acc.set_sync_debug_mode(value, "sdsync")
        got = acc.get_sync_debug_mode("sdsync")
        assert got == expected and type(got) is int


def test_invalid_values_raise_pytorch_errors() -> None:
    with pytest.raises(RuntimeError, match=r"invalid value of debug_mode, expected one of "
                                           r"`default`, `warn`, `error`"):
        acc.set_sync_debug_mode("loud", "sdsync")
    for bad in (3, -1):
        with pytest.raises(RuntimeError, match=r"invalid value of debug_mode, expected one of "
                                               r"0,1,2") as info:
            acc.set_sync_debug_mode(bad, "sdsync")
        assert isinstance(info.value, (acc.AcceleratorError, ValueError))
    for bad_type in (1.0, None, True, [1]):
        with pytest.raises(RuntimeError, match="invalid argument to set_sync_debug_mode") as ti:
            acc.set_sync_debug_mode(bad_type, "sdsync")  # type: ignore[arg-type]
        assert isinstance(ti.value, TypeError)
    assert acc.get_sync_debug_mode("sdsync") == 0     # nothing changed
    with pytest.raises(TypeError, match="device_type"):
        acc.set_sync_debug_mode("warn", 0)  # type: ignore[arg-type]
    with pytest.raises(acc.BackendUnavailableError):
        acc.set_sync_debug_mode("warn", "nosuchbackend")


def test_mode_is_per_backend_and_none_means_current_accelerator() -> None:
    acc.set_current_accelerator("sdasync")
    acc.set_sync_debug_mode("error")
    assert acc.get_sync_debug_mode() == 2
    assert acc.get_sync_debug_mode("sdasync") == 2
    assert acc.get_sync_debug_mode("sdsync") == 0
    acc.Stream("sdsync:0").synchronize()          # another backend: still default
    with pytest.raises(acc.AcceleratorError, match=_msg("sdasync")):
        acc.Stream("sdasync:0").synchronize()


# ---------------------------------------------------------------------- what is checked

def _checked_operations(name: str) -> dict[str, Callable[[], object]]:
    dev = f"{name}:0"
    a = acc.full(8, 1.5, dtype="float32", device=dev)
    host = np.arange(8, dtype=np.float32)
    ev = acc.Event(dev)
    ev.record(acc.Stream(dev))
    return {
        "synchronize": lambda: acc.synchronize(dev),
        "Stream.synchronize": lambda: acc.Stream(dev).synchronize(),
        "Event.synchronize": ev.synchronize,
        "numpy": a.numpy,
        "tolist": a.tolist,
        "np.asarray": lambda: np.asarray(a),
        "dlpack to host": lambda: np.from_dlpack(a) if a._host_ok() else
        a.__dlpack__(dl_device=(1, 0)),
        "copy_ from numpy": lambda: a.copy_(host),
        "asarray copy": lambda: acc.asarray(host, device=dev, copy=True),
        # staged through the host: a blocking read of this backend (the other is not checked)
        "to another backend": lambda: a.to("sdasync:1" if name == "sdsync" else "sdsync:1"),
    }


OPS = ["synchronize", "Stream.synchronize", "Event.synchronize", "numpy", "tolist",
       "np.asarray", "dlpack to host", "copy_ from numpy", "asarray copy", "to another backend"]


@pytest.mark.parametrize("op", OPS)
def test_each_synchronizing_operation_warns_once(be: str, op: str) -> None:
    fn = _checked_operations(be)[op]
    caught = _warns(be, fn)
    assert len(caught) == 1, [str(w.message) for w in caught]
    w = caught[0]
    assert w.category is UserWarning
    assert str(w.message) == _msg(be)
    assert w.filename == __file__      # attributed to the caller, not to accelrt


def test_synchronizing_operations_raise_in_error_mode(be: str) -> None:
    for op, fn in _checked_operations(be).items():
        acc.set_sync_debug_mode("error", be)
        try:
            with pytest.raises(RuntimeError, match="called a synchronizing") as info:
                fn()
        finally:
            acc.set_sync_debug_mode("default", be)
        assert isinstance(info.value, acc.AcceleratorError), op


def test_blocking_copy_is_refused_before_it_is_enqueued(be: str) -> None:
    dev = f"{be}:0"
    a = acc.zeros(4, dtype="int32", device=dev)
    acc.set_sync_debug_mode(2, be)
    with pytest.raises(RuntimeError, match="called a synchronizing"):
        a.copy_(np.arange(4, dtype=np.int32))
    acc.set_sync_debug_mode(0, be)
    assert a.tolist() == [0, 0, 0, 0]


def test_non_synchronizing_operations_are_silent(be: str) -> None:
    dev = f"{be}:0"
    s = acc.Stream(dev)
    host = np.ones(16, dtype=np.float32)

    def run() -> None:
        a = acc.zeros(16, device=dev)
        b = acc.empty(16, device=dev)
        b.copy_(a)                                   # device to device
        a.copy_(host, non_blocking=True)             # asynchronous upload
        a.fill_(2.0)
        a.to(f"{be}:0")
        e = s.record_event()
        e.query()
        s.query()
        s.wait_event(e)
        acc.Event(dev).synchronize()                 # never recorded: no wait
        del a, b
        memory.empty_cache()                         # PyTorch does not count it

    assert _warns(be, run) == []
    acc.synchronize(dev)


def test_default_mode_is_silent_even_with_warnings_as_errors(be: str) -> None:
    dev = f"{be}:0"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        acc.synchronize(dev)
        assert acc.full(2, 3, dtype="int8", device=dev).tolist() == [3, 3]


def test_graph_capture_is_not_a_checked_synchronization() -> None:
    # torch.cuda.graph synchronizes the device on entry without it being a flagged operation
    acc.set_current_accelerator("sdsync")
    g = acc.Graph()
    a = acc.zeros(4, device="sdsync:0")
    acc.set_sync_debug_mode("error", "sdsync")
    try:
        with acc.graph(g):
            a.fill_(1.0)
    finally:
        acc.set_sync_debug_mode("default", "sdsync")
    g.replay()
    assert a.tolist() == [1.0] * 4


# ---------------------------------------------------------------------- allocator syncs

def _held_stream(name: str) -> tuple[acc.Stream, threading.Event]:
    """A stream of ``name:0`` held back by a host function until the returned gate is set."""
    s = acc.Stream(f"{name}:0")
    gate = threading.Event()
    backends.get_backend(name).launch_host_func(0, lambda: gate.wait(10), s.stream_id)
    return s, gate


def test_oom_retry_wait_for_pending_frees_raises_before_waiting() -> None:
    a = get_allocator(backends.get_backend("sdoom"), 0)
    a.empty_cache()                   # no segment another test of sdoom left cached
    start = a.stats()                 # the counters are cumulative: other tests retried too
    first = acc.empty(12 << 20, dtype="uint8", device="sdoom:0")   # a 12 MiB segment
    s, gate = _held_stream("sdoom")
    first.record_stream(s)
    del first                         # free pending behind s, which is held
    try:
        acc.set_sync_debug_mode("error", "sdoom")
        with pytest.raises(RuntimeError, match=_msg("sdoom")):
            acc.empty(16 << 20, dtype="uint8", device="sdoom:0")   # needs the retry
        stats = a.stats()
        assert stats["num_alloc_retries"] == start["num_alloc_retries"]
        assert stats["num_ooms"] == start["num_ooms"]
    finally:
        acc.set_sync_debug_mode("default", "sdoom")
        gate.set()
    second = acc.empty(16 << 20, dtype="uint8", device="sdoom:0")   # consistent: it works
    assert a.stats()["num_alloc_retries"] == start["num_alloc_retries"] + 1
    del second
    acc.synchronize("sdoom:0")
    a.empty_cache()


def test_oom_retry_warns_and_then_waits() -> None:
    a = get_allocator(backends.get_backend("sdoom"), 0)
    a.empty_cache()
    first = acc.empty(12 << 20, dtype="uint8", device="sdoom:0")
    s, gate = _held_stream("sdoom")
    first.record_stream(s)
    del first
    seen: list[str] = []

    def show(message: Warning | str, *args: object, **kwargs: object) -> None:
        seen.append(str(message))
        gate.set()          # the warning comes before the wait: it lets the stream finish

    acc.set_sync_debug_mode("warn", "sdoom")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = show  # type: ignore[assignment]
            second = acc.empty(16 << 20, dtype="uint8", device="sdoom:0")
    finally:
        acc.set_sync_debug_mode("default", "sdoom")
        gate.set()
    assert seen == [_msg("sdoom")]
    assert a.stats()["num_alloc_retries"] >= 1
    del second
    acc.synchronize("sdoom:0")
    a.empty_cache()


def test_no_pending_frees_no_retry_warning() -> None:
    a = get_allocator(backends.get_backend("sdoom"), 0)
    a.empty_cache()
    keep = acc.empty(12 << 20, dtype="uint8", device="sdoom:0")

    def oom() -> None:
        with pytest.raises(acc.OutOfMemoryError):
            acc.empty(16 << 20, dtype="uint8", device="sdoom:0")

    assert _warns("sdoom", oom) == []
    del keep
    a.empty_cache()


def test_free_after_recorded_stream_destroyed_warns() -> None:
    b = backends.get_backend("sdasync")
    raw = b.stream_create(0, 0)
    s = acc.Stream(stream_id=raw, device_index=0, device_type="sdasync")
    x = acc.zeros(256, device="sdasync:0")
    x.record_stream(s)
    b.stream_destroy(0, raw)

    def free() -> None:
        nonlocal x
        del x

    caught = _warns("sdasync", free)
    assert [str(w.message) for w in caught] == [_msg("sdasync")]


# ---------------------------------------------------------------------- collectives

@pytest.mark.parametrize("name", ["sdsync", "sdasync"])
def test_collective_to_the_host_is_checked_and_between_devices_is_not(name: str) -> None:
    from accelrt import comm
    x = acc.asarray(np.arange(8, dtype=np.float32), device=f"{name}:0", copy=True)
    parts = _warns(name, lambda: comm.scatter(x, devices=[f"{name}:0", f"{name}:1"]))
    assert parts == []
    shards = comm.scatter(x, devices=[f"{name}:0", f"{name}:1"])
    assert _warns(name, lambda: comm.broadcast(x, devices=[f"{name}:0", f"{name}:1"])) == []
    out: list[Any] = []
    caught = _warns(name, lambda: out.append(comm.gather(shards, dim=0, destination=-1)))
    assert caught and all(str(w.message) == _msg(name) for w in caught)
    assert np.asarray(out[0]).tolist() == list(range(8))
