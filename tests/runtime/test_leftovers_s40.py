"""Session-40 leftovers: small differences from torch 2.15 left by the last sessions. Each test
failed before its fix. The expected behaviour is torch 2.15.0's, observed on its CPU build with
the same inputs (or read in its sources where the path needs CUDA), written here as literals.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
import threading
import types
from typing import Any

import numpy as np
import pytest
from helpers.builds import both_builds_params

import accelrt as acc
from accelrt import _stream_callback
from accelrt.memory import _lock

# ------------------------------------- 1. host functions that wait for streams never hang

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: the scenarios' common part: run ``call`` as a host function on a new stream of ``DEV``,
#: return what the stream's synchronize raised (None if nothing)
_PRELUDE = """
import sys, threading
sys.path.insert(0, {tests!r})
from helpers.gates import Gate, open_when_blocked
import accelrt as acc
from accelrt import backends
DEV = {dev!r}
b = backends.get(DEV)
mod = getattr(acc, DEV)

def surfaced(call, s=None):
    s = s or acc.Stream(DEV + ":0")
    b.launch_host_func(0, call, s.stream_id)
    try:
        s.synchronize()
    except acc.DeviceError as e:
        return e
    return None

def refused(call, what):
    e = surfaced(call)
    assert e is not None, what
    cause = e.__cause__
    assert type(cause) is acc.DeviceError, repr(cause)
    assert str(cause).startswith(what + " is not permitted in a host function running in "
                                 "stream order on stream 0x"), str(cause)
    assert "cudaErrorNotPermitted" in str(cause) and "after stream.synchronize()" in str(cause)
    print("refused", what)
"""

#: the calls that wait for streams, refused in a host function of any backend's stream thread
_REFUSED = """
other = acc.Stream(DEV + ":0")
ev = acc.Event()
ev.record(other)
refused(lambda: mod.synchronize(), "synchronize()")
refused(lambda: acc.synchronize(), "synchronize()")
refused(lambda: other.synchronize(), "stream_synchronize()")
refused(lambda: ev.synchronize(), "event_synchronize()")
refused(lambda: mod.empty_cache(), "empty_cache()")
refused(lambda: acc.memory.empty_cache(), "empty_cache()")
# a free (the last reference dropped) and an allocation nobody contends for work
held = [acc.zeros(1000, device=DEV + ":0")]
before = mod.memory_allocated()
def drop_and_allocate():
    held.clear()
    held.append(acc.empty(10, device=DEV + ":0"))
assert surfaced(drop_and_allocate) is None
assert mod.memory_allocated() < before
held.clear()
mod.empty_cache()
print("free and malloc work")
"""


def _run(script: str, **env: str) -> list[str]:
    full = dict(os.environ, **env)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=full,
                          capture_output=True, text=True, timeout=90, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.splitlines()


def test_host_function_waits_are_refused_on_async_cpu_streams() -> None:
    # Before: each of these calls in a host function of an async cpu stream hung the process
    # (synchronize and the stream/event waits waited for the stream running them; a second
    # thread's empty_cache held the allocator lock while it waited for that stream, and the
    # host function's allocation waited for the lock). CUDA forbids runtime calls in host
    # functions (cudaErrorNotPermitted): accelrt raises DeviceError in the host function,
    # which the stream keeps and its synchronize raises (chaining it), as any host-function
    # error.
    script = _PRELUDE.format(tests=TESTS, dev="cpu") + _REFUSED + """
# an allocation while another thread's empty_cache holds the allocator lock and waits for
# the stream running the host function
s = acc.Stream("cpu:0")
x = acc.empty(2**22, dtype="uint8", device="cpu:0"); del x    # a cached segment to release
gate = Gate()
got = []
def alloc_in_host_function():
    gate()
    got.append(acc.empty(10, device="cpu:0"))
b.launch_host_func(0, alloc_in_host_function, s.stream_id)
with open_when_blocked(gate):
    mod.empty_cache()   # waits for s (its free waits for the streams' work)
try:
    s.synchronize()
except acc.DeviceError as e:
    assert "a call of the caching allocator (an allocation, a free, a statistic) is not " \
           "permitted in a host function" in str(e.__cause__), str(e.__cause__)
    assert "another thread holds the allocator's lock while it waits for the streams" \
           in str(e.__cause__)
else:
    raise AssertionError("the allocation did not fail")
assert not got and mod.memory_allocated() == 0 and mod.memory_reserved() == 0
y = acc.empty(10, device="cpu:0")            # the allocator goes on
del y
print("contended allocation refused")
"""
    out = _run(script, ACCELRT_ACCELERATOR="cpu", ACCELRT_CPU_STREAMS="async")
    assert out.count("refused synchronize()") == 2 and "refused empty_cache()" in out
    assert "free and malloc work" in out and "contended allocation refused" in out


def test_host_function_runtime_calls_work_on_sync_cpu_streams() -> None:
    # in the cpu backend's synchronous mode a host function runs at once in the thread that
    # launches it, not in stream order on a stream's thread: nothing waits, so they work
    script = _PRELUDE.format(tests=TESTS, dev="cpu") + """
other = acc.Stream("cpu:0")
ev = acc.Event()
ev.record(other)
def calls():
    mod.synchronize(); other.synchronize(); ev.synchronize()
    x = acc.empty(2**22, dtype="uint8", device="cpu:0"); del x
    mod.empty_cache()
assert surfaced(calls) is None
assert mod.memory_reserved() == 0
print("ok")
"""
    assert _run(script, ACCELRT_ACCELERATOR="cpu", ACCELRT_CPU_STREAMS="sync") == ["ok"]


@pytest.mark.skipif(acc.backends.unavailable_reason("opencl") is not None,
                    reason="no usable OpenCL device")
def test_host_function_waits_are_refused_on_opencl_streams() -> None:
    # Before: each hung (the OpenCL host worker waited for its own queue, whose barrier waits
    # for the host function)
    script = _PRELUDE.format(tests=TESTS, dev="opencl") + _REFUSED
    out = _run(script, ACCELRT_ACCELERATOR="opencl")
    assert out.count("refused synchronize()") == 2 and "refused empty_cache()" in out
    assert "free and malloc work" in out


_IMPLS = both_builds_params(_lock.PyFastLock, "accelrt.memory._lock_c", "FastLock")


def _contend(lock: Any, marked: bool, out: list[object]) -> threading.Thread:
    def take() -> None:
        prev = _stream_callback.enter("stream 0x1 of cpu:0") if marked else None
        try:
            lock.acquire()
            out.append("acquired")
            lock.release()
        except Exception as exc:  # noqa: BLE001 - recorded for the test
            out.append(exc)
        finally:
            _stream_callback.leave(prev)
    t = threading.Thread(target=take)
    t.start()
    return t


@pytest.mark.parametrize("impl", _IMPLS)
def test_lock_refuses_a_host_function_whose_holder_waits_for_streams(impl: Any) -> None:
    lock = impl()
    lock.acquire()
    lock.stream_waits += 1          # the holder waits for streams (StreamWait)
    out: list[object] = []
    _contend(lock, True, out).join(30)
    assert len(out) == 1 and isinstance(out[0], acc.DeviceError), out
    assert "another thread holds the allocator's lock while it waits" in str(out[0])
    lock.stream_waits -= 1
    lock.release()
    assert not lock.locked()
    lock.acquire()                  # the lock still works for everyone
    lock.release()


@pytest.mark.parametrize("impl", _IMPLS)
def test_lock_refuses_once_the_holder_starts_waiting_for_streams(impl: Any) -> None:
    # the host function began to wait before the holder waited for streams: it asks again
    lock = impl()
    lock.acquire()
    out: list[object] = []
    t = _contend(lock, True, out)
    with _lock.StreamWait(lock):
        t.join(30)
    assert not t.is_alive() and len(out) == 1 and isinstance(out[0], acc.DeviceError), out
    lock.release()


@pytest.mark.parametrize("impl", _IMPLS)
@pytest.mark.parametrize("marked", [True, False], ids=["host-function", "plain-thread"])
def test_lock_waits_for_a_holder_that_does_not_wait_for_streams(impl: Any,
                                                                marked: bool) -> None:
    lock = impl()
    lock.acquire()
    out: list[object] = []
    t = _contend(lock, marked, out)
    assert out == []
    lock.release()
    t.join(30)
    assert out == ["acquired"] and not lock.locked()
    # a thread that runs no host function waits even while the holder waits for streams
    lock.acquire()
    with _lock.StreamWait(lock):
        t = _contend(lock, False, out)
        assert out == ["acquired"]
    lock.release()
    t.join(30)
    assert out == ["acquired", "acquired"]

# ------------------------------------------------- 2. Stream(priority=...) is an int64_t argument

_STREAMS = [
    pytest.param(lambda v: acc.Stream("cpu", priority=v), id="acc.Stream"),
    pytest.param(lambda v: acc.cpu.Stream(priority=v), id="acc.cpu.Stream"),
    pytest.param(lambda v: acc.cpu.Stream("cpu", v), id="acc.cpu.Stream-positional"),
]


class _Index:
    """An object with ``__index__`` alone (torch's int64_t parser refuses it)."""

    def __index__(self) -> int:
        return 0


@pytest.mark.parametrize("make", _STREAMS)
@pytest.mark.parametrize("value", [np.array(0), np.array(-1, dtype=np.int32), np.array([0]),
                                   np.array(0.0), _Index()],
                         ids=["0d", "0d-int32", "1-element", "0d-float", "__index__"])
def test_priority_refuses_arrays_and_index_objects(make: Any, value: object) -> None:
    # torch 2.15: torch.Stream("cpu", priority=np.array(0)) raises TypeError "Stream():
    # argument 'priority' must be int, not numpy.ndarray" (not int, not I for an object
    # with __index__ alone); accelrt read a 0-d array (and any __index__) as its value
    with pytest.raises(TypeError, match=rf"^priority must be an int, got "
                                        rf"{'numpy.ndarray' if isinstance(value, np.ndarray) else '_Index'}$"):
        make(value)


@pytest.mark.parametrize("make", _STREAMS)
def test_priority_still_takes_ints_numpy_integers_and_0d_integer_arrays_of_accelrt(
        make: Any) -> None:
    class Sub(int):
        def __index__(self) -> int:
            return 5      # read by its value, as torch's C++ reads it
    for v, want in ((-1, -1), (np.int64(-1), -1), (np.int8(0), 0), (Sub(-1), -1),
                    (acc.asarray(np.array(-1)), -1)):
        s = make(v)
        assert s.priority == want and type(s.priority) is int
        s.close()
    for bad, name in ((acc.asarray(np.array([0])), "Array"), (acc.asarray(np.array(0.0)), "Array"),
                      (acc.asarray(np.array(False)), "Array"), (True, "bool"),
                      (np.False_, "numpy.bool"), (0.0, "float")):
        with pytest.raises(TypeError, match=rf"^priority must be an int, got {name}$"):
            make(bad)


class _FakeTensor:
    """Enough of a torch.Tensor for torch's int64_t rule: 0-d, integral, no grad."""

    def __init__(self, value: int, dtype: object, dim: int = 0, grad: bool = False) -> None:
        self.value, self.dtype, self._dim, self.requires_grad = value, dtype, dim, grad

    def dim(self) -> int:
        return self._dim

    def __index__(self) -> int:
        return self.value


def test_priority_takes_a_0d_integer_torch_tensor(monkeypatch: pytest.MonkeyPatch) -> None:
    # torch 2.15: torch.Stream("cpu", priority=torch.tensor(-1)) is priority -1; a float,
    # bool or 1-element tensor is refused ("must be int, not Tensor")
    fake: Any = types.ModuleType("torch")
    fake.Tensor = _FakeTensor
    for n in ("int64", "int32", "bool", "float32"):
        setattr(fake, n, object())
    monkeypatch.setitem(sys.modules, "torch", fake)
    s = acc.Stream("cpu", priority=_FakeTensor(-1, fake.int32))  # type: ignore[arg-type]
    assert s.priority == -1
    s.close()
    for bad in (_FakeTensor(0, fake.bool), _FakeTensor(0, fake.float32),
                _FakeTensor(0, fake.int64, dim=1), _FakeTensor(0, fake.int64, grad=True)):
        with pytest.raises(TypeError, match=r"^priority must be an int, got _FakeTensor$"):
            acc.Stream("cpu", priority=bad)  # type: ignore[arg-type]


def test_priority_of_a_wrapped_stream_is_read_the_same_way() -> None:
    s = acc.Stream("cpu")
    try:
        with pytest.raises(TypeError, match=r"^priority must be an int, got numpy.ndarray$"):
            acc.Stream(stream_id=s.stream_id, device_index=0, device_type="cpu",
                       priority=np.array(1))  # type: ignore[arg-type]
    finally:
        s.close()


# ------------------------------------------- 4. accelrt.<device module>.comm is importable


@pytest.mark.parametrize("name", ["cpu", "cuda", "opencl"])
def test_comm_of_every_device_module_is_importable(name: str) -> None:
    # torch 2.15: `import torch.cuda.comm` and `from torch.cuda.comm import broadcast` work
    # (torch.cuda.comm is torch.nn.parallel.comm's functions); accelrt.cuda.comm was an
    # attribute only (ModuleNotFoundError: 'accelrt.cuda' is not a package) and accelrt.cpu
    # and accelrt.opencl had none. A fresh interpreter: the import must find it by itself.
    code = (f"import sys\n"
            f"import accelrt.{name}.comm as c\n"
            f"from accelrt.{name}.comm import broadcast, reduce_add\n"
            f"import accelrt, accelrt.comm\n"
            f"from accelrt.{name} import comm\n"
            f"assert c is comm is accelrt.comm is accelrt.{name}.comm, c\n"
            f"assert broadcast is accelrt.comm.broadcast and 'comm' in accelrt.{name}.__all__\n"
            "bad = [m for m in ('pyopencl', 'cuda.bindings', 'pynvml', 'nvtx') "
            "if m in sys.modules]\n"
            "assert not bad, bad\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr


def test_every_submodule_attribute_of_a_device_module_is_importable() -> None:
    # torch.cuda's submodules that accelrt's device modules have as attributes (listed from
    # torch 2.15: amp, comm, gds, graph_annotations, graphs, green_contexts, jiterator,
    # memory, nccl, nvtx, profiler, random, sparse, streams, tunable)
    torch_cuda = ("amp", "comm", "gds", "graph_annotations", "graphs", "green_contexts",
                  "jiterator", "memory", "nccl", "nvtx", "profiler", "random", "sparse",
                  "streams", "tunable")
    for name in ("cpu", "cuda", "opencl"):
        mod = getattr(acc, name)
        have = [n for n in torch_cuda if isinstance(getattr(mod, n, None), types.ModuleType)]
        assert {"comm", "graphs", "memory", "nvtx", "profiler", "random", "streams"} <= set(have)
        for n in have:
            assert importlib.import_module(f"accelrt.{name}.{n}") is getattr(mod, n), (name, n)


def test_cuda_host_trampoline_marks_its_thread() -> None:
    # the CUDA driver's thread runs a host function through the trampoline: there it is a
    # host function's thread (refused waits), and the mark goes with it (no GPU needed: the
    # trampoline is called as the driver calls it)
    from accelrt.backends._common import KeptErrors
    from accelrt.backends.cuda import _streams as cuda_streams
    seen: list[str | None] = []

    def fn() -> None:
        seen.append(_stream_callback.current())
        acc.cpu.empty_cache()

    kept: KeptErrors[tuple[int, int]] = KeptErrors()
    cuda_streams._host_funcs[-40] = (fn, kept, (1, 0x1234))
    cuda_streams._host_trampoline(-40)
    assert seen == ["stream 0x1234 of cuda:1"] and _stream_callback.current() is None
    with pytest.raises(acc.DeviceError, match=r"^d: DeviceError: empty_cache\(\) is not") as info:
        kept.raise_for([(1, 0x1234)], lambda key: "d")
    assert str(info.value.__cause__).startswith(
        "empty_cache() is not permitted in a host function running in stream order on stream "
        "0x1234 of cuda:1")
