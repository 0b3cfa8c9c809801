"""Lifetimes under asynchrony: no queued work ever touches memory that was freed or reused.

CUDA's model (issue 9 §1): destroying a stream returns at once, but its queued work still runs
to completion, and freeing memory and synchronizing the device wait for it. Memory that work
touches stays valid until the work ran: caching-allocator memory through stream-ordered frees,
borrowed memory (``acc.asarray`` of a numpy array) because the queued work holds it. Pageable
host memory is read when a copy is called. An array whose random fill is still queued is freed
at ``del`` like any other (issue 10 §2).

Streams are held back by gates (host functions waiting on a ``threading.Event``); a call that
must wait for queued work opens the gate only once it is blocked (``helpers.gates``). Cases
that crashed the interpreter run in a subprocess with a timeout.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import threading
import weakref
from collections.abc import Callable

import numpy as np
import pytest
from helpers.gates import Gate, open_when_blocked
from helpers.registry import module_backends
from helpers.staging import RecordingNoHostCpu

import accelrt as acc
from accelrt import backends
from accelrt._stream_core import _POOL_MAX
from accelrt.backends.cpu import CpuBackend
from accelrt.memory._host import peek_host_allocator

# closed (worker threads stopped) and unregistered after the module; the classes of
# cpulate and cpustagelife are defined with their tests, below
_backends = module_backends({
    "cpulife": lambda: CpuBackend(num_devices=2, async_streams=True, name="cpulife"),
    "cpulate": lambda: _LateHostFuncs(num_devices=1, async_streams=True, name="cpulate"),
    "cpustagelife": lambda: _StagedAsync(num_devices=1, async_streams=True,
                                         name="cpustagelife"),
})


def _opencl_param() -> list[object]:
    reason = backends.unavailable_reason("opencl") if "opencl" in backends.registered() \
        else "not registered"
    marks = [pytest.mark.skip(reason=f"opencl unavailable: {reason}")] if reason else []
    return [pytest.param("opencl", marks=marks, id="opencl")]


@pytest.fixture(params=[pytest.param("cpulife", id="cpu-async"), *_opencl_param()])
def dev(request: pytest.FixtureRequest) -> str:
    """Device 0 of an asynchronous backend (cpu with async streams, OpenCL)."""
    name: str = request.param
    acc.synchronize(f"{name}:0")
    return f"{name}:0"


def _launch(stream: acc.Stream, fn: Callable[[], None]) -> None:
    stream._b.launch_host_func(stream.device_index, fn, stream.stream_id)


def _drop(box: list[acc.Stream], destroyed: bool) -> None:
    """Drop the only reference to the stream in ``box``: its handle goes back to the
    per-device pool, or, with ``destroyed``, is destroyed because the pool is full."""
    dev = box[0].device
    handle = box[0].stream_id
    hold = [acc.Stream(dev) for _ in range(_POOL_MAX + 1)]   # the pool is now empty
    if destroyed:
        del hold                                  # the pool is now full
        gc.collect()
        box.clear()
        gc.collect()
    else:
        box.clear()
        gc.collect()
        del hold
        gc.collect()
    b, index = backends.get_backend(dev.type), dev.index
    assert b.stream_is_valid(index, handle) is not destroyed


LIFECYCLE = pytest.mark.parametrize("destroyed", [False, True], ids=["pooled", "destroyed"])


# ---------------------------------------------------------------------- streams collected

@LIFECYCLE
def test_synchronize_waits_for_work_of_a_collected_stream(dev: str, destroyed: bool) -> None:
    gate, done = Gate(), threading.Event()
    with gate:
        box = [acc.Stream(dev)]
        _launch(box[0], gate)
        _launch(box[0], done.set)
        _drop(box, destroyed)
        with open_when_blocked(gate):
            acc.synchronize(dev)
            assert done.is_set(), "synchronize returned before the collected stream's work ran"


@LIFECYCLE
def test_record_stream_block_is_not_reused_before_the_collected_streams_work(
        dev: str, destroyed: bool) -> None:
    gate, done = Gate(), threading.Event()
    n = 1 << 16
    with gate:
        y = acc.zeros(n, dtype="uint8", device=dev)   # allocated on the default stream
        box = [acc.Stream(dev)]
        box[0].wait_stream(acc.current_stream(dev))
        _launch(box[0], gate)
        with box[0]:
            y.fill_(7)                                # queued on the stream behind the gate
        _launch(box[0], done.set)
        y.record_stream(box[0])
        _drop(box, destroyed)
        ptr = y.data_ptr()
        with open_when_blocked(gate):
            del y                                     # waits for the stream, or an event on it
            z = acc.zeros(n, dtype="uint8", device=dev)
            assert done.is_set() or z.data_ptr() != ptr, (
                "the block was handed to a new array while the collected stream still "
                "writes it")
    acc.synchronize(dev)
    assert not z.numpy().any()


_EMPTY_CACHE_SCRIPT = textwrap.dedent("""
    import gc, sys, threading
    sys.path.insert(0, {tests!r})
    import accelrt as acc
    from accelrt._stream_core import _POOL_MAX
    from helpers.gates import Gate, open_when_blocked

    dev = "cpu:0"
    gate, done = Gate(), threading.Event()
    s = acc.Stream(dev)
    b = s._b
    with s:
        y = acc.empty(24 << 20, dtype="uint8", device=dev)   # its own segment, on s
        b.launch_host_func(0, gate, s.stream_id)
        y.fill_(7)                                           # writes the whole segment
        b.launch_host_func(0, done.set, s.stream_id)
    del y                                                    # stream-ordered free on s
    fill = [acc.Stream(dev) for _ in range(_POOL_MAX + 1)]
    del fill
    gc.collect()
    handle = s.stream_id
    del s                                                    # the pool is full: destroyed
    gc.collect()
    assert not b.stream_is_valid(0, handle)
    with open_when_blocked(gate):
        acc.memory.empty_cache()                             # must wait, then release
        ok = done.is_set()
    acc.synchronize(dev)
    print("work done before the segment was released:", ok)
    sys.exit(0 if ok else 3)
""")


@pytest.mark.parametrize("conf", ["", "expandable_segments:True"],
                         ids=["segments", "expandable"])
def test_empty_cache_never_releases_a_segment_queued_work_still_writes(conf: str) -> None:
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "ACCELRT_CPU_STREAMS": "async", "ACCELRT_ALLOC_CONF": conf,
           "ACCELRT_CPU_DEVICES": "1", "ACCELRT_ACCELERATOR": "cpu"}   # empty_cache(): cpu
    r = subprocess.run([sys.executable, "-c", _EMPTY_CACHE_SCRIPT.format(tests=tests)],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"rc={r.returncode}\n{r.stdout}\n{r.stderr}"


_RAW_FREE_SCRIPT = textwrap.dedent("""
    import sys, threading
    sys.path.insert(0, {tests!r})
    from accelrt.backends.cpu import CpuBackend
    from accelrt.memory._allocator import DeviceCachingAllocator
    from accelrt.memory._config import AllocatorConfig
    from helpers.gates import Gate, open_when_blocked

    b = CpuBackend(num_devices=1, memory_limit="64MiB", async_streams=True)
    a = DeviceCachingAllocator(b, 0, AllocatorConfig())
    gate, done = Gate(), threading.Event()
    s = b.stream_create(0, 0)
    p = a.malloc(4096, 0)
    b.launch_host_func(0, gate, s)          # the stream's worker is late (a loaded machine)
    b.memset(0, p, 1, 4096, s)
    b.launch_host_func(0, done.set, s)
    a.record_stream(p, s)
    b.stream_destroy(0, s)                  # returns at once; the memset still runs
    with open_when_blocked(gate):
        a.free(p)                           # the recorded stream is gone: waits for it
        ok = done.is_set()
        a.empty_cache()                     # releases the segment the memset writes
    b.close()
    print("work done before the block was freed:", ok)
    sys.exit(0 if ok else 3)
""")


def test_free_of_a_block_recorded_on_a_destroyed_stream_waits_for_its_work() -> None:
    """The allocator-level form (tests/memory/test_allocator_cpu.py's last case, made
    deterministic): on the old code the memset ran after empty_cache had freed its segment,
    a write into freed heap memory that aborted a later test ("corrupted double-linked
    list") or crashed."""
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-c", _RAW_FREE_SCRIPT.format(tests=tests)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"rc={r.returncode}\n{r.stdout}\n{r.stderr}"


# ---------------------------------------------------------------------- borrowed host memory

def _fill_byte(a: acc.Array, src: np.ndarray) -> None:
    a.fill_(3)


def _fill_float(a: acc.Array, src: np.ndarray) -> None:
    a.fill_(2.5)


def _copy_numpy(a: acc.Array, src: np.ndarray) -> None:
    a.copy_(src, non_blocking=True)


def _copy_array(a: acc.Array, src: np.ndarray) -> None:
    a.copy_(acc.asarray(src, device=a.device), non_blocking=True)


def _uniform(a: acc.Array, src: np.ndarray) -> None:
    acc.random.uniform_(a)


OPS = {"fill-byte": _fill_byte, "fill-float": _fill_float, "copy-numpy": _copy_numpy,
       "copy-array": _copy_array, "uniform": _uniform}


@pytest.mark.parametrize("op", list(OPS))
def test_queued_work_keeps_borrowed_host_memory_alive(op: str) -> None:
    dev = "cpulife:0"
    gate = Gate()
    memory = np.zeros(4096, dtype=np.float32)         # outlives the test: a broken hold
    host = memory[:]                                  # fails the test, never corrupts memory
    src = np.ones(4096, dtype=np.float32)
    a = acc.asarray(host, device=dev)
    assert a.data_ptr() == host.ctypes.data           # shares the numpy memory
    alive = weakref.ref(host)
    with gate:
        _launch(acc.current_stream(dev), gate)
        OPS[op](a, src)
        del a, host, src
        gc.collect()
        assert alive() is not None, "the borrowed buffer was released while work on it is queued"
    acc.synchronize(dev)
    gc.collect()
    assert alive() is None, "the borrowed buffer must be released once the work ran"


_BORROWED_SCRIPT = textwrap.dedent("""
    import gc, sys, threading
    import numpy as np
    import accelrt as acc

    dev = "cpu:0"
    gate = threading.Event()
    s = acc.current_stream(dev)
    n = 64 << 20                       # numpy maps this with mmap: freed memory is unmapped
    host = np.zeros(n, dtype=np.uint8)
    a = acc.asarray(host, device=dev)
    assert a.data_ptr() == host.ctypes.data
    s._b.launch_host_func(0, gate.wait, s.stream_id)
    if sys.argv[1] == "fill":
        a.fill_(3)
    else:
        a.copy_(np.ones(n, dtype=np.uint8), non_blocking=True)
    del a, host
    gc.collect()
    gate.set()
    acc.synchronize(dev)
    print("survived")
""")


@pytest.mark.parametrize("op", ["fill", "copy"])
def test_dropping_a_borrowed_array_and_its_numpy_array_with_work_queued_does_not_crash(
        op: str) -> None:
    env = {**os.environ, "ACCELRT_CPU_STREAMS": "async", "ACCELRT_CPU_DEVICES": "1"}
    r = subprocess.run([sys.executable, "-c", _BORROWED_SCRIPT, op], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "survived" in r.stdout, (
        f"rc={r.returncode}\n{r.stdout}\n{r.stderr}")


# ---------------------------------------------------------------------- pageable uploads

@pytest.mark.parametrize("target", ["device", "borrowed"])
def test_non_blocking_upload_reads_the_host_data_at_call_time(target: str) -> None:
    dev = "cpulife:0"
    gate = Gate()
    values = np.arange(1000, dtype=np.int32)
    src = values.copy()
    keep = np.zeros(1000, dtype=np.int32)
    d = acc.zeros(1000, dtype="int32", device=dev) if target == "device" else \
        acc.asarray(keep, device=dev)
    with gate:
        _launch(acc.current_stream(dev), gate)
        d.copy_(src, non_blocking=True)
        src[:] = -1                                   # the caller reuses its buffer at once
    acc.synchronize(dev)
    np.testing.assert_array_equal(d.numpy(), values)


def test_non_blocking_upload_from_another_backend_reads_the_data_at_call_time() -> None:
    gate = Gate()
    src = acc.asarray(np.arange(64, dtype=np.int64), device="cpu:0", copy=True)
    d = acc.zeros(64, dtype="int64", device="cpulife:0")
    with gate:
        _launch(acc.current_stream("cpulife:0"), gate)
        d.copy_(src, non_blocking=True)
        src.fill_(-1)
    acc.synchronize("cpulife:0")
    assert d.tolist() == list(range(64))


# ---------------------------------------------------------------------- random fills

def _rand(dev: str) -> acc.Array:
    return acc.rand(1000, device=dev)


def _randn(dev: str) -> acc.Array:
    return acc.randn(1000, device=dev)


def _uniform_(dev: str) -> acc.Array:
    return acc.random.uniform_(acc.empty(1000, device=dev))


def _normal_(dev: str) -> acc.Array:
    return acc.random.normal_(acc.empty(1000, device=dev))


RANDOM = {"rand": _rand, "randn": _randn, "uniform_": _uniform_, "normal_": _normal_}


@pytest.mark.parametrize("fn", list(RANDOM))
def test_del_of_an_array_whose_random_fill_is_queued_frees_it_at_once(fn: str) -> None:
    dev = "cpulife:0"
    acc.synchronize(dev)
    gate = Gate()
    acc.memory.record_memory_history("all", device=dev, clear_history=True)
    try:
        with gate:
            _launch(acc.current_stream(dev), gate)
            before = acc.memory.memory_allocated(dev)
            x = RANDOM[fn](dev)
            ptr = x.data_ptr()
            assert acc.memory.memory_allocated(dev) == before + 4096
            del x
            assert acc.memory.memory_allocated(dev) == before, "del did not free the array"
            frees = [e for e in acc.memory._snapshot(dev)["device_traces"][0]
                     if e["action"] == "free_requested" and e["addr"] == ptr]
            y = acc.zeros(1000, device=dev)           # may reuse the block: stream-ordered
    finally:
        acc.memory.record_memory_history(None, device=dev)
    assert len(frees) == 1
    names = [f["name"] for f in frees[0]["frames"]]
    here = sys._getframe().f_code.co_name
    assert here in names, f"the free was not recorded with the user's stack: {names}"
    acc.synchronize(dev)
    assert not y.numpy().any(), "the queued fill overwrote a later allocation"


# ---------------------------------------------------------------------- collectives

class _LateHostFuncs(CpuBackend):
    """Async cpu devices whose next host function waits behind ``gate`` (the stream's worker
    is late), so work queued by a collective is still pending when it returns."""

    gate: Gate | None = None

    def launch_host_func(self, index: int, fn: Callable[[], None], stream: int) -> None:
        gate, self.gate = self.gate, None
        if gate is not None:
            super().launch_host_func(index, gate, stream)
        super().launch_host_func(index, fn, stream)


def test_reduce_add_holds_borrowed_inputs_until_the_queued_sum_ran() -> None:
    dev = "cpulate:0"
    b = backends.get_backend("cpulate")
    memory = [np.full(100, 1.0, np.float32), np.full(100, 2.0, np.float32)]
    views = [m[:] for m in memory]                    # the memory itself outlives the test
    xs = [acc.asarray(v, device=dev) for v in views]
    alive = [weakref.ref(v) for v in views]
    assert isinstance(b, _LateHostFuncs)
    with Gate() as gate:
        b.gate = gate
        out = acc.comm.reduce_add(xs, destination=dev)
        del xs, views
        gc.collect()
        assert all(r() is not None for r in alive), "an input was released before the sum"
    acc.synchronize(dev)
    gc.collect()
    assert all(r() is None for r in alive)
    assert out.tolist() == [3.0] * 100


# ---------------------------------------------------------------------- staging (issue 9 §6)

class _StagedAsync(RecordingNoHostCpu):
    """Async cpu devices the core treats like GPU memory (copies stage through pinned
    blocks)."""


def test_download_after_a_pending_upload_reuses_its_pinned_block() -> None:
    """A download waits for the stream before it takes a pinned block, so the block of an
    upload still queued there is reused: how many blocks a download needs never depends on
    how far the stream got (test_opencl_buffer_mode_stages_through_the_pool[True] failed
    under load for that reason)."""
    dev = "cpustagelife:0"
    b = backends.get_backend("cpustagelife")
    a = acc.empty(256, dtype="float32", device=dev)
    acc.synchronize(dev)
    pool = peek_host_allocator("cpustagelife")
    before = pool.stats()["num_host_alloc"] if pool is not None else 0
    with Gate() as gate:
        _launch(acc.current_stream(dev), gate)
        a.copy_(np.arange(256, dtype=np.float32), non_blocking=True)   # its block is pending
        with open_when_blocked(gate):
            out = a.numpy()                                          # the download
    np.testing.assert_array_equal(out, np.arange(256, dtype=np.float32))
    pool = peek_host_allocator("cpustagelife")
    assert pool is not None
    assert pool.stats()["num_host_alloc"] - before == 1, "the download took a second block"
    assert isinstance(b, _StagedAsync)
    b.synchronize(0)
    pool.empty_cache()
