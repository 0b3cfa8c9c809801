"""PyTorch's own runtime tests of ``test/test_cuda.py`` (streams, events, devices, RNG,
threads), ported to accelrt's device modules and checked against torch 2.15's semantics.

Each test names the PyTorch test it mirrors. ``torch.cuda`` is a device module here: a
two-device cpu backend with synchronous streams (data is real) and a two-device
:class:`~accelrt.testing.SimulatedBackend` whose work stays pending until the test completes
it (what ``torch.cuda._sleep`` gives PyTorch's tests: a stream that is still busy).
``torch.accelerator`` is ``accelrt`` with that backend as the current accelerator.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from helpers.registry import module_backends

import accelrt as acc
from accelrt.backends.cpu import CpuBackend
from accelrt.testing import SimulatedBackend

CPU, SIM, ASYNC = "s35stcpu", "s35stsim", "s35stacpu"

_backends = module_backends({
    CPU: lambda: CpuBackend(num_devices=2, async_streams=False, name=CPU),
    ASYNC: lambda: CpuBackend(num_devices=1, async_streams=True, name=ASYNC),
    SIM: lambda: SimulatedBackend(device_count=2, auto_complete=False, priority_range=(0, -1),
                                  name=SIM),
})


@pytest.fixture(params=[CPU, SIM])
def m(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The device module of each backend, made the current accelerator, device 0 current
    (conftest puts the accelerator, devices and streams back)."""
    name: str = request.param
    mod: Any = acc.backends.device_module(name)
    acc.set_current_accelerator(name)
    mod.set_device(0)
    yield mod
    if name == SIM:
        _sim().complete_all()
    for i in range(mod.device_count()):
        mod.synchronize(i)


@pytest.fixture
def cpu() -> Any:
    """The cpu backend's device module (real data), the current accelerator, device 0."""
    mod: Any = acc.backends.device_module(CPU)
    acc.set_current_accelerator(CPU)
    mod.set_device(0)
    return mod


@pytest.fixture
def acpu() -> Iterator[Any]:
    """A cpu backend whose streams run on worker threads (work is really pending)."""
    mod: Any = acc.backends.device_module(ASYNC)
    acc.set_current_accelerator(ASYNC)
    yield mod
    mod.synchronize()


def _run(code: str) -> str:
    """``code`` run by a fresh interpreter (a hang fails the test); its stdout."""
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.strip()


def _sim() -> SimulatedBackend:
    backend = acc.backends.get(SIM)
    assert isinstance(backend, SimulatedBackend)
    return backend


def _busy(m: Any, stream: Any) -> None:
    """Queue pending work on ``stream`` of the simulated backend (``torch.cuda._sleep``)."""
    assert m.name == SIM
    _sim().launch_work(stream.stream_id, stream.device_index)


# ---------------------------------------------------------------------------- devices

@pytest.mark.parametrize("fn", ["get_device_name", "get_device_capability",
                                "get_device_properties"])
def test_device_queries_default_to_the_current_device(m: Any, fn: str) -> None:
    """mirrors test_cuda.py test_cuda_get_device_name, test_cuda_get_device_capability and
    test_cuda_get_device_properties: ``f(current_device())``, ``f(None)`` and ``f()`` agree."""
    f = getattr(m, fn)
    for index in range(m.device_count()):
        m.set_device(index)
        assert f(m.current_device()) == f(None) == f() == f(index)


def test_uuid_is_a_uuid(m: Any) -> None:
    """mirrors test_cuda.py test_uuid: 36 characters as text, 16 bytes."""
    uuid = m.get_device_properties(0).uuid
    assert len(str(uuid)) == 36
    assert len(uuid.bytes) == 16


def test_device_index_context_manager(m: Any) -> None:
    """mirrors test_cuda.py test_device_context_manager and
    test_multi_device_context_manager (``torch.accelerator.device_index``)."""
    prev = m.current_device()
    with acc.device_index(None):
        assert m.current_device() == prev
    assert m.current_device() == prev
    with acc.device_index(0):
        assert m.current_device() == 0
    assert m.current_device() == prev
    m.set_device(0)
    with acc.device_index(1):
        assert m.current_device() == 1
    assert m.current_device() == 0


def test_device_count_reads_the_environment_at_first_use() -> None:
    """mirrors test_cuda.py test_lazy_init (the variable set after the import, before the
    first use, decides the count: nothing is initialised at import), on the cpu backend's
    ACCELRT_CPU_DEVICES (CUDA_VISIBLE_DEVICES needs a GPU)."""
    out = _run("""
        import os
        import accelrt as acc
        os.environ["ACCELRT_CPU_DEVICES"] = "3"
        print(acc.cpu.device_count())
    """)
    assert out == "3"


def test_is_pinned_does_not_poison_a_fork() -> None:
    """mirrors test_cuda.py test_is_pinned_no_context: asking whether a host array is pinned
    creates no device context, so a forked child still uses the device."""
    out = _run("""
        import multiprocessing as mp
        import numpy as np
        import accelrt as acc

        def worker(q):
            try:
                q.put(acc.ones(10, device="cpu:0").tolist()[0])
            except Exception as e:
                q.put("Error " + str(e))

        assert acc.is_pinned(np.zeros(10)) is False
        ctx = mp.get_context("fork")
        q = ctx.Queue()
        p = ctx.Process(target=worker, args=(q,))
        p.start()
        print(q.get(timeout=60))
        p.join(60)
    """)
    assert out == "1.0"


def test_invalid_device_string_and_device_of_another_type(m: Any) -> None:
    """mirrors test_cuda.py test_get_device_index: a type with a digit ("cuda0") is PyTorch's
    ``RuntimeError: Invalid device string: 'cuda0'``; a device of another type is
    ``ValueError: Expected a cuda device``."""
    with pytest.raises(RuntimeError, match=r"^Invalid device string: 'cuda0'"):
        acc.device("cuda0")
    bad = f"{m.name}0"
    for call in (lambda: m.current_stream(bad), lambda: m.get_device_name(bad)):
        with pytest.raises(RuntimeError, match=f"^Invalid device string: {bad!r}.*did you "
                                               f"mean '{m.name}:0'"):
            call()
    with pytest.raises(ValueError, match=f"Expected a {m.name} device"):
        m.current_stream(acc.device("cpu", 0))


def test_a_type_without_digits_is_still_an_unknown_backend() -> None:
    """The torch 2.15 message of a digit-free unknown type is its own ("Expected one of cpu,
    cuda, ... device type"); accelrt keeps its "Unknown backend" there, and a registered
    backend whose name has a digit is a device type, not an invalid string."""
    with pytest.raises(acc.BackendUnavailableError, match=r"^Unknown backend 'nosuch'"):
        acc.device("nosuch:0")
    assert acc.device(f"{CPU}:1").index == 1


# ---------------------------------------------------------------------------- streams

def test_streams(m: Any) -> None:
    """mirrors test_cuda.py test_streams: the current stream is the default (handle 0), a new
    stream differs, ``with stream(s)`` makes it current, query/synchronize."""
    default = m.current_stream()
    user = m.Stream()
    assert m.current_stream() == default
    assert default != user
    assert default.cuda_stream == 0 and default.stream_id == 0
    assert user.cuda_stream != 0
    with m.stream(user):
        assert m.current_stream() == user
    assert m.current_stream() == default
    assert user.query()
    _busy_if_simulated(m, default)
    default.synchronize()
    assert default.query()


def _busy_if_simulated(m: Any, stream: Any) -> None:
    if m.name == SIM:
        _busy(m, stream)
        assert not stream.query()


def test_stream_and_event_repr(m: Any) -> None:
    """mirrors test_cuda.py test_stream_event_repr: the module's ``Stream``/``Event`` names."""
    s = m.current_stream()
    assert f"accelrt.{m.name}.Stream" in repr(s)
    e = m.Event()
    assert f"accelrt.{m.name}.Event" in repr(e)
    s.record_event(e)
    assert f"accelrt.{m.name}.Event" in repr(e)


def test_stream_context_manager(m: Any) -> None:
    """mirrors test_cuda.py test_stream_context_manager."""
    prev = m.current_stream()
    with m.Stream() as stream:
        assert stream == m.current_stream()
    assert prev == m.current_stream()


def test_multi_device_stream_context_manager(m: Any) -> None:
    """mirrors test_cuda.py test_multi_device_stream_context_manager: a stream of device 1
    as a context makes device 1 current and restores device and streams after."""
    m.set_device(0)
    src_prev, dst_prev = m.current_stream(0), m.current_stream(1)
    with m.Stream(1) as dst_stream:
        assert m.current_device() == 1
        assert m.current_stream() == dst_stream
        assert m.current_stream(0) == src_prev
    assert m.current_device() == 0
    assert m.current_stream() == src_prev
    assert m.current_stream(1) == dst_prev


def test_generic_stream_and_event(m: Any) -> None:
    """mirrors test_cuda.py test_generic_stream_event: ``torch.Stream(type)`` is on the current
    device, a module stream wraps its (stream_id, device_index, device_type), events get ids
    when recorded."""
    stream = acc.Stream(m.name)
    assert stream.device_index == m.current_device()
    wrapped = m.Stream(stream_id=stream.stream_id, device_index=stream.device_index,
                       device_type=stream.device_type)
    assert isinstance(wrapped, acc.Stream) and acc.Stream in type(wrapped).mro()
    assert wrapped.stream_id == stream.stream_id
    assert stream.stream_id != m.current_stream().stream_id

    e1 = acc.Event(m.name, enable_timing=True)
    e2 = acc.Event(m.name, enable_timing=True)
    assert e1.event_id == 0
    with m.stream(wrapped):
        assert m.current_stream().stream_id == stream.stream_id
    e1.record(stream)
    e1.synchronize()
    assert e1.query()
    e2.record()
    e2.synchronize()
    assert e2.query()
    assert e1.event_id != e2.event_id
    assert e1.elapsed_time(e2) >= 0   # torch: > 0 after real kernels (a GPU's clock)
    module_event = m.Event()
    assert isinstance(module_event, acc.Event) and acc.Event in type(module_event).mro()


def test_stream_compatibility_with_the_accelerator_api(m: Any) -> None:
    """mirrors test_cuda.py test_stream_compatibility: ``torch.accelerator.set_stream`` of a
    module's stream, and the out-of-range message of ``current_stream(device_count())``."""
    s1, s2 = m.Stream(), m.Stream()
    acc.set_stream(s1)
    assert acc.current_stream().stream_id == s1.stream_id
    acc.set_stream(s2)
    assert acc.current_stream().stream_id == s2.stream_id
    with pytest.raises(RuntimeError, match=r"Device index value .* is out of index range"):
        acc.current_stream(acc.device_count())


def test_streams_are_current_per_thread(m: Any) -> None:
    """mirrors the stream part of test_cuda.py test_cublas_multiple_threads_same_device (and
    its cudnn/cusparse twins): each thread's ``with stream(own)`` is its own, a new thread
    starts on the default stream, the main thread's current stream is untouched."""
    main_stream = m.Stream()
    m.set_stream(main_stream)
    barrier = threading.Barrier(2)
    seen: dict[int, tuple[bool, bool, bool]] = {}
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            started_on_default = m.current_stream() == m.default_stream()
            mine = m.Stream()
            with m.stream(mine):
                barrier.wait(timeout=30)      # both threads inside their contexts
                own = m.current_stream() == mine
                barrier.wait(timeout=30)
            seen[t] = (started_on_default, own, m.current_stream() == m.default_stream())
            mine.synchronize()
        except BaseException as e:  # noqa: BLE001 - re-raised in the main thread
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    assert not errors, errors
    assert seen == {0: (True, True, True), 1: (True, True, True)}
    assert m.current_stream() == main_stream


# ---------------------------------------------------------------------------- events

def test_events(m: Any) -> None:
    """mirrors test_cuda.py test_events: an unrecorded event is complete; an event recorded
    behind pending work is not until synchronized; ids are 0 until the first record."""
    stream = m.current_stream()
    event = m.Event(enable_timing=True)
    assert event.query()
    start = m.Event(enable_timing=True)
    stream.record_event(start)
    _busy_if_simulated(m, stream)
    stream.record_event(event)
    if m.name == SIM:
        assert not event.query()
    event.synchronize()
    assert event.query()
    assert start.elapsed_time(event) >= 0   # torch: > 0 behind a timed kernel (a GPU's clock)

    event = m.Event(enable_timing=True)
    assert event.cuda_event == 0 and event.event_id == 0
    event.record()
    assert event.cuda_event != 0 and event.event_id != 0
    assert event.cuda_event == event.event_id


def test_elapsed_time_errors(m: Any) -> None:
    """mirrors test_cuda.py test_events_elapsedtime: torch 2.15's ``ValueError`` messages
    (c10/cuda/CUDAEvent.h), and its ``RuntimeError`` for events not yet completed."""
    for timing in (False, None):
        kw = {} if timing is None else {"enable_timing": timing}
        e1, e2 = m.Event(**kw), m.Event(**kw)
        with pytest.raises(ValueError, match="Both events must be created with argument "
                                             "'enable_timing=True'"):
            e1.elapsed_time(e2)
    e1, e2 = m.Event(enable_timing=True), m.Event(enable_timing=True)
    with pytest.raises(ValueError, match="Both events must be recorded before calculating "
                                         "elapsed time"):
        e1.elapsed_time(e2)
    if m.name == SIM:
        e1.record()
        _busy(m, m.current_stream())
        e2.record()
        with pytest.raises(RuntimeError, match="Both events must be completed before "
                                               "calculating elapsed time"):
            e1.elapsed_time(e2)
        e2.synchronize()
        assert e1.elapsed_time(e2) >= 0


def test_elapsed_time_is_positive_after_real_work(acpu: Any) -> None:
    """mirrors the ``elapsed_time(...) > 0`` of test_cuda.py test_events and
    test_generic_stream_event: events around real work on an asynchronous stream."""
    a, b = acc.zeros(4_000_000), acc.ones(4_000_000)
    start, end = acpu.Event(enable_timing=True), acpu.Event(enable_timing=True)
    start.record()
    a.copy_(b)
    end.record()
    end.synchronize()
    assert end.query()
    assert start.elapsed_time(end) > 0


# ---------------------------------------------------------------------------- memory order

def test_copy_to_host_is_blocking_by_default(acpu: Any) -> None:
    """mirrors test_cuda.py test_to_cpu_blocking_by_default: reading an array to the host
    (``numpy()``, accelrt's ``.to("cpu")``) waits for its stream: nothing is left pending."""
    src = acc.empty(1_000_000)
    src.copy_(acc.full((1_000_000,), 2.0))      # queued on the worker thread
    host = src.numpy()
    assert acpu.current_stream().query() is True
    assert (host == 2.0).all()


def test_record_stream_delays_reuse_until_the_stream_is_done() -> None:
    """mirrors test_cuda.py test_record_stream: a block freed after ``record_stream(current)``
    is not handed to the side stream while the current stream is busy, and is once it is
    synchronized (the native allocator's reuse)."""
    m: Any = acc.backends.device_module(SIM)
    acc.set_current_accelerator(SIM)
    m.set_device(0)
    side, current = m.Stream(), m.current_stream()
    with m.stream(side):
        tmp = acc.empty(4, device=f"{SIM}:0")
        ptr = tmp.data_ptr()
    current.wait_stream(side)
    tmp.record_stream(current)
    _busy(m, current)             # the copy out of tmp still runs on the current stream
    del tmp
    with m.stream(side):
        tmp2 = acc.empty(4, device=f"{SIM}:0")
        assert tmp2.data_ptr() != ptr, "allocation reused too soon"
    current.synchronize()
    with m.stream(side):
        tmp3 = acc.empty(4, device=f"{SIM}:0")
        assert tmp3.data_ptr() == ptr, "allocation not reused"
    del tmp2, tmp3
    _sim().complete_all()


def test_copy_non_blocking_then_event(cpu: Any) -> None:
    """mirrors test_cuda.py test_copy_non_blocking: a non-blocking copy (pinned host to
    device, and back) is complete once an event recorded after it is synchronized."""
    src = acc.pin_memory(np.ones(1000, dtype=np.uint8))
    a = acc.zeros(1000, dtype="uint8")
    a.copy_(src, non_blocking=True)
    event = cpu.Event()
    event.record()
    event.synchronize()
    assert a.tolist() == src.tolist()
    b = acc.full((1000,), 7, dtype="uint8")
    a.copy_(b, non_blocking=True)
    event.record()
    event.synchronize()
    assert (a.numpy() == 7).all()


# ---------------------------------------------------------------------------- RNG

def test_manual_seed_reproduces_and_sets_initial_seed(cpu: Any) -> None:
    """mirrors test_cuda.py test_manual_seed: ``torch.cuda.manual_seed(2)`` makes
    ``initial_seed() == 2`` and repeats the draws."""
    saved = cpu.get_rng_state_all()
    try:
        cpu.manual_seed(2)
        assert cpu.initial_seed() == 2
        x = acc.rand(4, 4).numpy()
        cpu.manual_seed(2)
        y = acc.rand(4, 4).numpy()
        assert (x == y).all()
        assert cpu.initial_seed() == 2
    finally:
        cpu.set_rng_state_all(saved)


def test_manual_seed_all_seeds_every_device(cpu: Any) -> None:
    """mirrors test_cuda.py test_torch_manual_seed_seeds_cuda_devices (``torch.manual_seed``
    seeds every CUDA device: ``manual_seed_all`` here; ``acc.manual_seed`` is
    ``torch.cuda.manual_seed``, the current device's, docs/random.md)."""
    saved = cpu.get_rng_state_all()
    try:
        acc.random.manual_seed_all(2)
        assert [g.initial_seed() for g in cpu.default_generators] == [2, 2]
        x = acc.rand(4, 4, device=f"{CPU}:1").numpy()
        acc.random.manual_seed_all(2)
        y = acc.rand(4, 4, device=f"{CPU}:1").numpy()
        assert (x == y).all()
    finally:
        cpu.set_rng_state_all(saved)


def test_rng_state_all_round_trip(cpu: Any) -> None:
    """``get_rng_state_all``/``set_rng_state_all`` (torch.cuda's) put every device's draws
    back, as test_cuda.py's freeze_rng_state does around its RNG tests."""
    saved = cpu.get_rng_state_all()
    assert len(saved) == cpu.device_count() == 2
    first = [acc.rand(8, device=f"{CPU}:{i}").numpy() for i in range(2)]
    cpu.set_rng_state_all(saved)
    again = [acc.rand(8, device=f"{CPU}:{i}").numpy() for i in range(2)]
    assert all((a == b).all() for a, b in zip(first, again))


def test_consecutive_draws_do_not_reuse_random_states(cpu: Any) -> None:
    """mirrors test_cuda.py test_randint_randomness_for_large_range and
    test_random_no_reused_random_states: two consecutive draws of one seeded generator share
    no more values than chance gives (PyTorch issue 125224: reused Philox offsets)."""
    n = 100_000
    gen = acc.random.Generator(device=f"{CPU}:0")
    gen.manual_seed(0)
    high = 6_000_000_000          # above 2**32
    t1 = acc.randint(0, high, (n,), generator=gen, dtype="int64").numpy()
    t2 = acc.randint(0, high, (n,), generator=gen, dtype="int64").numpy()
    assert len(np.unique(np.concatenate([t1, t2]))) > 2 * n - 50   # ~3 collisions expected
    for func in (acc.rand, acc.randn):
        for dtype, slack in (("float32", 3_000), ("float64", 10)):
            gen.manual_seed(0)
            a = func(n, generator=gen, dtype=dtype).numpy()
            b = func(n, generator=gen, dtype=dtype).numpy()
            # float32 [0, 1) has 2**24 values: ~1,200 birthday collisions among 2n draws
            assert len(np.unique(np.concatenate([a, b]))) > 2 * n - slack, (func, dtype)


# ---------------------------------------------------------------------------- misc

def test_nvtx_symbols(m: Any) -> None:
    """mirrors test_cuda.py test_nvtx: the range and mark calls exist and run."""
    m.nvtx.range_push("foo")
    m.nvtx.mark("bar")
    m.nvtx.range_pop()
    handle = m.nvtx.range_start("range_start")
    m.nvtx.range_end(handle)


def test_not_capturing_outside_a_capture(m: Any) -> None:
    """mirrors the first check of test_cuda.py test_graph_is_current_stream_capturing."""
    assert m.is_current_stream_capturing() is False
    s = m.Stream()
    with m.stream(s):
        assert m.is_current_stream_capturing() is False
        assert s.is_capturing() is False


@pytest.mark.parametrize("mode, value", [("default", 0), ("warn", 1), ("error", 2),
                                         (0, 0), (1, 1), (2, 2)])
def test_sync_debug_mode_names_and_values(m: Any, mode: str | int, value: int) -> None:
    """torch.cuda.set_sync_debug_mode/get_sync_debug_mode (torch/cuda/__init__.py): the names
    map to 0/1/2 and the getter answers the int."""
    before = m.get_sync_debug_mode()
    try:
        m.set_sync_debug_mode(mode)
        assert m.get_sync_debug_mode() == value
    finally:
        m.set_sync_debug_mode(before)
    with pytest.raises(RuntimeError, match="invalid value of debug_mode, expected one of "
                                           "`default`, `warn`, `error`"):
        m.set_sync_debug_mode("foo")


def test_leak_check_lets_the_blocks_error_through(m: Any) -> None:
    """mirrors test_cuda.py test_cuda_memory_leak_detection_propagates_errors
    (``assertLeaksNoCudaTensors`` is ``accelrt.testing.leak_check`` here): an error raised
    inside the checked block is the error the caller sees, not a leak report."""
    from accelrt.testing import leak_check
    with pytest.raises(RuntimeError, match=r"The size of tensor a \(3\) must match"):
        with leak_check():
            x = acc.empty(3, device=f"{m.name}:0")
            raise RuntimeError(f"The size of tensor a ({x.shape[0]}) must match")
