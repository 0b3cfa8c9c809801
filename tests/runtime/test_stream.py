"""accelrt.Stream, current_stream, set_stream, synchronize (PyTorch semantics)."""

from __future__ import annotations

import gc
import pickle
import threading
from collections.abc import Iterator

import numpy as np
import pytest
from helpers import register_toy
from helpers.gates import Gate

import accelrt as acc
from accelrt import _stream, _stream_core
from accelrt.backends import Capabilities
from accelrt.backends.cpu import CpuBackend


@pytest.fixture
def cpu4() -> str:
    """A 4-device cpu backend registered under its own name and made current."""
    acc.backends.register("cpu4", lambda: CpuBackend(num_devices=4, name="cpu4"), replace=True)
    acc.set_current_accelerator("cpu4")
    return "cpu4"


def test_fields_and_default_device(backend: str) -> None:
    s = acc.Stream()
    assert s.device_type == backend
    assert s.device_index == acc.current_device_index()
    assert s.device == acc.device(backend, s.device_index)
    assert isinstance(s.stream_id, int)
    assert s.priority == 0
    assert s.query() is True
    s.synchronize()


def test_distinct_live_streams_differ(backend: str) -> None:
    a, b = acc.Stream(), acc.Stream()
    assert a != b and not (a == b)  # noqa: SIM201 - tests __eq__ itself
    assert a != acc.current_stream()
    assert len({a, b, acc.current_stream()}) == 3


def test_equality_and_hash_follow_backend_index_handle(backend: str) -> None:
    s = acc.Stream()
    again = acc.Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=backend)
    assert again == s and hash(again) == hash(s)
    assert not (again != s)  # noqa: SIM202 - tests __ne__ itself
    assert {s: 1}[again] == 1


def test_compare_with_non_stream_and_ordering() -> None:
    s = acc.Stream("cpu")
    assert (s == 1) is False
    assert (s != "x") is True
    assert s != None  # noqa: E711 (the != operator itself is under test)
    with pytest.raises(TypeError):
        s < acc.Stream("cpu")  # noqa: B015
    with pytest.raises(TypeError):
        s >= s  # noqa: B015, PLR0124


def test_repr_and_pickle() -> None:
    s = acc.Stream("cpu:0")
    assert repr(s).startswith("<accelrt.Stream device=cpu:0 stream_id=0x")
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(s)


def test_current_stream_default_is_cached_and_the_default_stream(backend: str) -> None:
    d = acc.current_stream()
    assert d is acc.current_stream()
    assert d == acc.current_stream(acc.current_device_index())
    assert d == acc.current_stream(backend)
    b = acc.backends.get_backend(backend)
    assert d.stream_id == b.default_stream(d.device_index)


def test_set_stream_and_current_stream(backend: str) -> None:
    s = acc.Stream()
    acc.set_stream(s)
    assert acc.current_stream() == s
    acc.set_stream(acc.current_stream())  # idempotent
    assert acc.current_stream() is s


def test_set_stream_switches_device(cpu4: str) -> None:
    s = acc.Stream(2)
    acc.set_stream(s)
    assert acc.current_device_index() == 2
    assert acc.current_stream() == s
    acc.set_device_index(0)
    assert acc.current_stream() != s  # device 0 keeps its own current stream
    assert acc.current_stream(2) == s


def test_set_stream_rejects_non_streams() -> None:
    with pytest.raises(TypeError, match="accelrt.Stream"):
        acc.set_stream("cpu:0")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        acc.set_stream(None)  # type: ignore[arg-type]


def test_context_manager_sets_and_restores_stream(backend: str) -> None:
    before = acc.current_stream()
    s = acc.Stream()
    with s as entered:
        assert entered is s
        assert acc.current_stream() == s
    assert acc.current_stream() == before


def test_context_manager_restores_on_exception() -> None:
    before = acc.current_stream("cpu")
    s = acc.Stream("cpu")
    with pytest.raises(KeyError), s:
        raise KeyError("boom")
    assert acc.current_stream("cpu") == before


def test_reentrant_same_stream_nesting() -> None:
    s, t = acc.Stream("cpu"), acc.Stream("cpu")
    before = acc.current_stream("cpu")
    with s:
        with t:
            with s:
                assert acc.current_stream("cpu") == s
            assert acc.current_stream("cpu") == t
        assert acc.current_stream("cpu") == s
    assert acc.current_stream("cpu") == before


def test_context_switches_device_and_restores_both(cpu4: str) -> None:
    acc.set_device_index(1)
    s2, s3 = acc.Stream(2), acc.Stream(3)
    with s2:
        assert acc.current_device_index() == 2
        assert acc.current_stream() == s2
        with s3:
            assert acc.current_device_index() == 3
            assert acc.current_stream() == s3
            assert acc.current_stream(2) == s2  # other device's stream untouched
        assert acc.current_device_index() == 2
        assert acc.current_stream() == s2
        assert acc.current_stream(3) != s3
    assert acc.current_device_index() == 1
    assert acc.current_stream(2) != s2


def test_context_of_another_backend_leaves_current_accelerator_alone(cpu4: str) -> None:
    acc.set_device_index(3)
    s = acc.Stream("cpu:0")
    with s:
        assert acc.current_stream("cpu") == s
        assert acc.current_device_index() == 3  # cpu4 is the current accelerator
    assert acc.current_stream("cpu") != s


def test_interleaved_generators_restore_their_own_state() -> None:
    s, t = acc.Stream("cpu"), acc.Stream("cpu")
    before = acc.current_stream("cpu")

    def gen():  # type: ignore[no-untyped-def]
        with s:
            yield
    g = gen()
    next(g)
    assert acc.current_stream("cpu") == s
    with t:
        with pytest.raises(StopIteration):
            next(g)  # exits s: restores what s saw (before)
        assert acc.current_stream("cpu") == before
    assert acc.current_stream("cpu") == s  # t restores what it saw


def test_exit_without_enter_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="without a matching __enter__"):
        acc.Stream("cpu").__exit__(None, None, None)


def test_priority_range_and_errors() -> None:
    lo, hi = sorted(acc.backends.get_backend("cpu").stream_priority_range(0))
    assert acc.Stream("cpu", priority=lo).priority == lo
    with pytest.raises(ValueError, match=r"out of range \[-1, 0\]"):
        acc.Stream("cpu", priority=lo - 1)
    with pytest.raises(ValueError, match="out of range"):
        acc.Stream("cpu", priority=hi + 1)
    with pytest.raises(TypeError, match="priority must be an int"):
        acc.Stream("cpu", priority=0.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="priority must be an int"):
        acc.Stream("cpu", priority=True)


@pytest.mark.parametrize("priority", [np.int64(-1), np.int32(0), np.int8(-1)])
def test_priority_takes_numpy_integers_as_torch(priority: object) -> None:
    """PyTorch's argument parser reads an integer with ``__index__`` (a numpy integer) as an
    int; a numpy bool, like a bool, is refused."""
    s = acc.Stream("cpu", priority=priority)  # type: ignore[arg-type]
    assert s.priority == int(priority) and type(s.priority) is int  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="priority must be an int, got numpy.bool"):
        acc.Stream("cpu", priority=np.True_)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"priority=-2 is out of range"):
        acc.Stream("cpu", priority=np.int64(-2))  # type: ignore[arg-type]


def test_bad_device_arguments() -> None:
    with pytest.raises(TypeError, match="expected a device"):
        acc.Stream(1.0)  # type: ignore[arg-type]
    with pytest.raises(IndexError, match="out of index range"):
        acc.Stream("cpu:99")
    with pytest.raises(ValueError, match="Invalid device string"):
        acc.Stream("cpu:x")
    with pytest.raises(acc.BackendUnavailableError, match="Unknown backend 'nosuch'"):
        acc.Stream("nosuch:0")
    with pytest.raises(TypeError):
        acc.Stream("cpu", 0)  # type: ignore[misc]  # priority is keyword-only


def test_foreign_stream_validation() -> None:
    s = acc.Stream("cpu")
    with pytest.raises(TypeError, match="needs all three"):
        acc.Stream(stream_id=s.stream_id)
    with pytest.raises(TypeError, match="do not also pass"):
        acc.Stream("cpu", stream_id=s.stream_id, device_index=0, device_type="cpu")
    with pytest.raises(ValueError, match="not a live stream"):
        acc.Stream(stream_id=123456789, device_index=0, device_type="cpu")
    with pytest.raises(TypeError, match="stream_id must be an int"):
        acc.Stream(stream_id="1", device_index=0, device_type="cpu")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="device_type must be"):
        acc.Stream(stream_id=0, device_index=0, device_type=1)  # type: ignore[arg-type]
    with pytest.raises(IndexError):
        acc.Stream(stream_id=0, device_index=50, device_type="cpu")
    with pytest.raises(ValueError, match="must not be negative"):
        acc.Stream(stream_id=0, device_index=-1, device_type="cpu")


def test_backend_fixed_stream_class_wraps_only_its_backends_streams() -> None:
    name, _toy = register_toy()
    other = acc.Stream(f"{name}:0")
    with pytest.raises(ValueError, match=f"accelrt.cpu.Stream wraps cpu streams, not {name}"):
        acc.cpu.Stream(stream_id=other.stream_id, device_index=0, device_type=name)
    own = acc.cpu.Stream()
    again = acc.cpu.Stream(stream_id=own.stream_id, device_index=0, device_type="cpu")
    assert again == own and type(again) is acc.cpu.Stream


def test_owned_streams_return_to_pool_and_foreign_never_destroyed() -> None:
    name, toy = register_toy()
    s = acc.Stream(f"{name}:0")
    h = s.stream_id
    foreign = acc.Stream(stream_id=h, device_index=0, device_type=name)
    del foreign
    gc.collect()
    assert toy.live_handles()["streams"] == 1 and toy.calls(0)["stream_destroy"] == 0
    del s
    gc.collect()
    assert toy.live_handles()["streams"] == 1  # pooled, not destroyed
    t = acc.Stream(f"{name}:0")
    assert t.stream_id == h  # reused from the pool
    assert toy.calls(0)["stream_create"] == 1


def test_pool_overflow_destroys_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    # (the compiled core's limit: a stream's finaliser gives its handle back there)
    monkeypatch.setattr(_stream_core, "_POOL_MAX", 2)
    name, toy = register_toy()
    streams = [acc.Stream(f"{name}:0") for _ in range(5)]
    assert len({s.stream_id for s in streams}) == 5  # live streams never share a handle
    del streams
    gc.collect()
    assert toy.calls(0)["stream_destroy"] == 3
    assert toy.live_handles()["streams"] == 2


def test_priorities_use_separate_pools() -> None:
    name, _toy = register_toy()
    s = acc.Stream(f"{name}:0", priority=-2)
    h = s.stream_id
    del s
    gc.collect()
    assert acc.Stream(f"{name}:0").stream_id != h
    assert acc.Stream(f"{name}:0", priority=-2).stream_id == h


def test_wait_stream_and_wait_event() -> None:
    name, toy = register_toy()
    a, b = acc.Stream(f"{name}:0"), acc.Stream(f"{name}:1")
    a.wait_stream(b)  # cross-device, same backend
    assert toy.calls(0)["stream_wait_event"] == 1
    a.wait_stream(a)  # waiting for itself is a no-op
    assert toy.calls(0)["stream_wait_event"] == 1
    a.wait_event(acc.Event(f"{name}:0"))  # never recorded: no-op as in PyTorch
    assert toy.calls(0)["stream_wait_event"] == 1
    with pytest.raises(TypeError, match="accelrt.Event"):
        a.wait_event(b)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="accelrt.Stream"):
        a.wait_stream(acc.Event(f"{name}:0"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cannot make a"):
        a.wait_stream(acc.Stream("cpu"))
    with pytest.raises(ValueError, match="cannot wait"):
        a.wait_event(acc.current_stream("cpu").record_event())


def test_record_event_creates_or_reuses() -> None:
    s = acc.Stream("cpu")
    e = s.record_event()
    assert isinstance(e, acc.Event) and e.device == s.device and e.event_id != 0
    f = acc.Event("cpu")
    assert s.record_event(f) is f
    with pytest.raises(TypeError, match="accelrt.Event or None"):
        s.record_event("x")  # type: ignore[arg-type]


def test_query_reflects_pending_work() -> None:
    name, toy = register_toy()
    s = acc.Stream(f"{name}:0")
    toy.launch_work(s.stream_id)
    assert s.query() is False
    s.synchronize()
    assert s.query() is True


def test_current_stream_of_explicit_device_of_other_backend(cpu4: str) -> None:
    s = acc.Stream("cpu:0")
    acc.set_stream(s)
    assert acc.current_stream("cpu:0") == s
    assert acc.current_stream(acc.device("cpu")) == s
    assert acc.current_stream().device_type == "cpu4"


def test_current_stream_bad_arguments() -> None:
    with pytest.raises(TypeError):
        acc.current_stream(1.5)  # type: ignore[arg-type]
    with pytest.raises(IndexError):
        acc.current_stream(10**6)
    with pytest.raises(ValueError, match="must not be negative"):
        acc.current_stream(-2)


def test_synchronize_is_noop_before_init_and_waits_after() -> None:
    name, toy = register_toy()  # overrides init_device: needs lazy initialisation
    acc.synchronize(f"{name}:1")
    assert toy.calls(1)["synchronize"] == 0 and toy.calls(1)["init_device"] == 0
    s = acc.Stream(f"{name}:1")
    assert toy.calls(1)["init_device"] == 1
    toy.launch_work(s.stream_id, 1)
    acc.synchronize(f"{name}:1")
    assert toy.calls(1)["synchronize"] == 1
    assert s.query()
    acc.synchronize(f"{name}:0")  # device 0 still untouched
    assert toy.calls(0)["synchronize"] == 0 and toy.calls(1)["synchronize"] == 1


def test_synchronize_current_and_explicit(backend: str) -> None:
    acc.synchronize()
    acc.synchronize(0)
    acc.synchronize(backend)
    acc.synchronize(acc.device(backend, 0))
    with pytest.raises(TypeError):
        acc.synchronize(object())  # type: ignore[arg-type]
    with pytest.raises(IndexError):
        acc.synchronize(10**6)


def test_stream_int_device_means_current_accelerator(cpu4: str) -> None:
    s = acc.Stream(3)
    assert (s.device_type, s.device_index) == ("cpu4", 3)


def test_default_streams_per_device(cpu4: str) -> None:
    d0, d1 = acc.current_stream(0), acc.current_stream(1)
    assert d0 != d1 and d0.device_index == 0 and d1.device_index == 1
    assert _stream._current(acc.backends.get_backend("cpu4"), 1) == d1


# ---------------------------------------------------------------------- __cuda_stream__

def test_cuda_stream_protocol_absent_on_non_cuda_streams() -> None:
    s = acc.Stream("cpu")
    assert not hasattr(s, "__cuda_stream__")
    assert not hasattr(acc.current_stream("cpu"), "__cuda_stream__")
    with pytest.raises(AttributeError, match="only cuda streams"):
        s.__cuda_stream__  # noqa: B018


def test_cuda_stream_protocol_of_a_cuda_backend_stream() -> None:
    # A stream of a backend named "cuda" (a toy instance, never registered), wrapped through
    # the internal API: the protocol gives (version 0, raw handle), as CuPy/PyTorch expect.
    from accelrt.testing import SimulatedBackend

    class FakeCuda(SimulatedBackend):
        name = "cuda"

        def capabilities(self, index: int) -> Capabilities:
            return Capabilities(cuda_stream_protocol=True)

    s = _stream._wrap(FakeCuda(), 0, 0x1234)
    assert hasattr(s, "__cuda_stream__")
    proto = s.__cuda_stream__
    assert callable(proto) and proto() == (0, 0x1234)
    assert acc.cuda.stream_handle(s) == 0x1234


@pytest.mark.skipif(acc.backends.unavailable_reason("cuda") is not None,
                    reason=f"needs CUDA: {acc.backends.unavailable_reason('cuda')}")
def test_cuda_stream_protocol_on_a_real_cuda_stream() -> None:
    s = acc.cuda.Stream()
    assert s.__cuda_stream__() == (0, s.stream_id)
    default = acc.cuda.current_stream()
    assert default.__cuda_stream__() == (0, default.stream_id)

    class Foreign:  # what CuPy or PyTorch hand over
        def __cuda_stream__(self) -> tuple[int, int]:
            return s.__cuda_stream__()

    assert acc.cuda.as_stream(Foreign()) == s


@pytest.fixture(scope="module")
def cpu_async() -> Iterator[str]:
    """A 2-device cpu backend with asynchronous streams (work runs on worker threads)."""
    acc.backends.register("cpuwaits", lambda: CpuBackend(num_devices=2, async_streams=True,
                                                         name="cpuwaits"), replace=True)
    yield "cpuwaits"
    b = acc.backends.get_backend("cpuwaits")
    for i in range(2):
        b.synchronize(i)
    assert isinstance(b, CpuBackend)
    b.close()
    acc.backends.unregister("cpuwaits")


@pytest.mark.parametrize("other_device", [0, 1], ids=["same-device", "cross-device"])
@pytest.mark.parametrize("how", ["wait_stream", "record_event+wait_event"])
def test_waiting_stream_runs_after_the_work_it_waits_for(cpu_async: str, other_device: int,
                                                          how: str) -> None:
    """``a.wait_stream(b)`` (and ``a.wait_event(b.record_event())``) orders a's later work
    after b's earlier work, on one device and across two, and leaves no event behind (the
    leak check): gated, never timed."""
    a, b = acc.Stream(f"{cpu_async}:0"), acc.Stream(f"{cpu_async}:{other_device}")
    gate, ran = Gate(), threading.Event()
    with gate:
        b._b.launch_host_func(b.device_index, gate, b.stream_id)
        if how == "wait_stream":
            a.wait_stream(b)
        else:
            a.wait_event(b.record_event())
        a._b.launch_host_func(a.device_index, ran.set, a.stream_id)
        assert not a.query() and not ran.is_set()   # a's work waits behind b's gate
    a.synchronize()
    assert ran.is_set() and b.query()


def test_wait_stream_makes_the_backend_calls_of_an_event() -> None:
    """wait_stream makes the raw calls ``record_event`` + ``wait_event`` make: one event
    created on the waited stream's device, recorded there, waited for, destroyed."""
    name, toy = register_toy()
    a, b = acc.Stream(f"{name}:0"), acc.Stream(f"{name}:1")
    before0, before1 = dict(toy.calls(0)), dict(toy.calls(1))
    a.wait_stream(b)
    after0, after1 = toy.calls(0), toy.calls(1)
    made = {k: after1.get(k, 0) - before1.get(k, 0) for k in after1}
    assert made["event_create"] == 1 and made["event_record"] == 1
    assert made["event_destroy"] == 1
    assert after0["stream_wait_event"] - before0.get("stream_wait_event", 0) == 1
