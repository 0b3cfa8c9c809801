"""Review by tests (s25): lifetimes of graphs, streams and events against PyTorch's
(``torch/cuda/streams.py``, ``torch/cuda/graphs.py``, ``aten/src/ATen/cuda/CUDAGraph.cpp``):
``__init__`` called again on a live object, a graph collected in the middle of its capture, and
two threads capturing at once in each ``capture_error_mode``.

Threads are ordered with barriers, never sleeps; whatever could hang runs in a subprocess with
a timeout.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import accelrt as acc
from accelrt.memory._allocator import peek_allocator
from accelrt.testing import leak_check

#: Tests whose captures record nothing (PyTorch warns about an empty graph).
EMPTY_CAPTURE = pytest.mark.filterwarnings("ignore:The CUDA Graph is empty:UserWarning")


@pytest.fixture(autouse=True)
def _cpu() -> Iterator[None]:
    acc.set_current_accelerator("cpu")
    acc.set_device_index(0)
    yield
    assert not acc.cpu.is_current_stream_capturing()


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=60, check=False)


# ---------------------------------------------------------------------- __init__ again
# torch.cuda.Stream, torch.cuda.Event and torch.cuda.CUDAGraph are built in __new__ and have
# no __init__ of their own: calling __init__ again on one is object.__init__, which does
# nothing. accelrt's built in __init__ and replaced the handle, which was never given back.

@pytest.mark.parametrize("make", [
    lambda: acc.Stream("cpu:0"),
    lambda: acc.Stream("cpu:0", priority=-1),
    lambda: acc.cpu.Stream(),
    lambda: acc.cpu.Stream(0, -1),
], ids=["Stream", "Stream-prio", "cpu.Stream", "cpu.Stream-prio"])
def test_stream_init_again_keeps_its_stream_and_leaks_nothing(make: Callable[[], Any]) -> None:
    with leak_check():
        s = make()
        handle, prio = s.stream_id, s.priority
        s.__init__("cpu:1")
        s.__init__()
        assert (s.stream_id, s.device_index, s.priority) == (handle, 0, prio)
        s.synchronize()
        s.close()
        s.__init__()                      # a closed stream stays closed
        assert s.is_closed


def test_external_stream_and_wrapped_stream_init_again() -> None:
    s = acc.cpu.Stream()
    ext = acc.cpu.ExternalStream(s.cuda_stream)
    ext.__init__(acc.cpu.Stream().cuda_stream)
    assert ext == s
    wrapped = acc.Stream(stream_id=s.stream_id, device_index=0, device_type="cpu")
    wrapped.__init__("cpu:0")
    assert wrapped == s
    wrapped.close()                       # still not owning it: s stays usable
    ext.close()
    assert s.query()
    s.close()


@pytest.mark.parametrize("make", [
    lambda: acc.Event("cpu"),
    lambda: acc.Event("cpu:0", enable_timing=True),
    lambda: acc.cpu.Event(),
    lambda: acc.cpu.Event(external=True),
], ids=["Event", "Event-timing", "cpu.Event", "cpu.Event-external"])
def test_event_init_again_keeps_its_event_and_leaks_nothing(make: Callable[[], Any]) -> None:
    with leak_check():
        e = make()
        e.record()
        handle, timing = e.event_id, e.enable_timing
        e.__init__()
        if isinstance(e, acc.cpu.Event):
            e.__init__(not timing, True, device=1)
        else:
            e.__init__("cpu:1", enable_timing=not timing)
        assert (e.event_id, e.enable_timing, e.device) == (handle, timing, acc.device("cpu:0"))
        e.synchronize()
        e.close()


def test_unrecorded_event_init_again_changes_nothing() -> None:
    e = acc.Event("cpu")
    e.__init__("cpu:1", enable_timing=True)
    assert e.device.index is None and not e.enable_timing
    e.record(acc.Stream("cpu:0"))
    assert e.device == acc.device("cpu:0")
    e.close()


def test_init_after_a_failed_init_builds_the_object() -> None:
    """A constructor that raised left nothing to keep: calling it again builds the object."""
    s = acc.Stream.__new__(acc.Stream)
    with pytest.raises(ValueError, match="out of range"):
        s.__init__("cpu:0", priority=99)
    s.__init__("cpu:0")
    assert s.query()
    s.close()
    e = acc.cpu.Event.__new__(acc.cpu.Event)
    with pytest.raises(TypeError, match="blocking must be a bool"):
        e.__init__(blocking=1)
    e.__init__(enable_timing=True)
    assert e.enable_timing
    e.record()
    e.close()
    g = acc.cpu.Graph.__new__(acc.cpu.Graph)
    with pytest.raises(TypeError, match="keep_graph must be a bool"):
        g.__init__(keep_graph=1)
    g.__init__(keep_graph=True)
    with acc.cpu.graph(g):
        acc.zeros(2, device="cpu").fill_(1.0)
    g.instantiate()
    g.reset()
    h = acc.Graph.__new__(acc.Graph)
    with pytest.raises(ValueError, match="capture_error_mode"):
        h.__init__(capture_error_mode="bogus")
    h.__init__(capture_error_mode="relaxed")
    assert h.capture_error_mode == "relaxed"


@pytest.mark.parametrize("cls", [acc.Graph, acc.cpu.Graph])
def test_graph_init_again_mid_capture_keeps_the_capture(cls: type[acc.Graph]) -> None:
    x = acc.zeros(4, device="cpu")
    g = cls()
    with leak_check():
        with acc.Stream("cpu:0") as s:
            g.capture_begin()
            x.fill_(1.0)
            g.__init__()
            g.__init__(keep_graph=True)
            assert s.is_capturing()
            g.capture_end()
        g.replay()
        acc.synchronize()
        assert x.tolist() == [1.0] * 4
        g.reset()
        s.close()


# ---------------------------------------------------------------------- collected mid-capture
# PyTorch's ~CUDAGraph runs reset(), which ends nothing that has not ended (capture_ended_ is
# false): the stream stays capturing and the private pool referenced, without a warning.
# accelrt ends the capture from the finalizer and drops it, so the stream and the device stay
# usable, and releases the pool; it warns no more than PyTorch.

def _pool_ids() -> set[tuple[int, int]]:
    """The pools of the segments cpu:0's allocator holds."""
    return {tuple(seg["segment_pool_id"]) for seg in acc.memory.memory_snapshot()}


def _pool_of(array: acc.Array) -> set[tuple[int, int]]:
    """The pool of the segment that holds ``array``."""
    return {tuple(seg["segment_pool_id"]) for seg in acc.memory.memory_snapshot()
            for b in seg["blocks"] if b["address"] == array.data_ptr()}


@pytest.mark.parametrize("cls", [acc.Graph, acc.cpu.Graph])
def test_graph_collected_mid_capture_ends_and_drops_its_capture(cls: type[acc.Graph]) -> None:
    x = acc.zeros(4, device="cpu")
    s = acc.Stream("cpu:0")
    with leak_check():
        with s:
            g = cls()
            g.capture_begin()
            tmp = acc.full((4,), 2.0, device="cpu")   # from the graph's private pool
            x.copy_(tmp)
            pool = next(iter(_pool_ids() - {(0, 0)}))
            del g
            gc.collect()
            assert not s.is_capturing()
            s.synchronize()                         # refused while a capture was going on
            acc.synchronize("cpu:0")
            x.fill_(3.0)                            # runs now, is not recorded
        s.synchronize()
        assert x.tolist() == [3.0] * 4
        a = peek_allocator("cpu", 0)
        assert a is not None and a.pool_use_count(pool) == 0
        y = acc.empty(4, device="cpu", dtype="float32")     # the default pool again
        assert _pool_of(y) == {(0, 0)}
        del tmp, y
        acc.cpu.empty_cache()
        assert pool not in _pool_ids()              # its memory went back with the cache
        with acc.cpu.graph(cls()) as _:             # the device captures again
            x.fill_(4.0)
    s.close()


def test_destroy_callbacks_run_when_collected_mid_capture() -> None:
    fired: list[str] = []
    with acc.Stream("cpu:0") as s:
        g = acc.cpu.Graph()
        g.capture_begin()
        g.register_destroy_callback(lambda: fired.append("destroyed"))
        g.retain_object(acc.zeros(2, device="cpu"))
        del g
        gc.collect()
        assert fired == ["destroyed"] and not s.is_capturing()
    s.close()


def test_other_captures_go_on_when_one_graph_is_collected() -> None:
    x, y = acc.zeros(4, device="cpu"), acc.zeros(4, device="cpu")
    s1, s2 = acc.Stream("cpu:0"), acc.Stream("cpu:0")
    kept = acc.Graph()
    with s1:
        kept.capture_begin()
    with s2:
        dropped = acc.Graph()
        dropped.capture_begin()
        y.fill_(9.0)
        del dropped
        gc.collect()
        assert not s2.is_capturing()
    with s1:
        tmp = acc.full((4,), 5.0, device="cpu")
        x.copy_(tmp)
        assert s1.is_capturing()
        kept.capture_end()
    assert _pool_of(tmp) == {kept.pool()}           # still routed to the live capture's pool
    kept.replay()
    acc.synchronize()
    assert x.tolist() == [5.0] * 4 and y.tolist() == [0.0] * 4   # y's fill was dropped
    kept.reset()
    s1.close()
    s2.close()


def test_collected_by_another_thread_mid_capture() -> None:
    """The finalizer runs in the thread that collects the cycle holding the graph."""
    x = acc.zeros(4, device="cpu")
    gate = threading.Barrier(2)
    seen: list[object] = []

    def capture() -> None:
        try:
            with acc.Stream("cpu:0") as s:
                g = acc.Graph()
                g.capture_begin()
                x.fill_(1.0)
                cycle: list[Any] = [g]
                cycle.append(cycle)                 # only the collector frees it
                del g, cycle
                gate.wait()                         # the other thread collects
                gate.wait()
                seen.append(s.is_capturing())
                s.synchronize()
            s.close()
        except BaseException as exc:          # noqa: BLE001 - reported below
            seen.append(exc)
            gate.abort()

    t = threading.Thread(target=capture)
    t.start()
    gate.wait()
    gc.collect()
    gate.wait()
    t.join(30)
    assert seen == [False]


def test_finalizer_inside_the_allocators_critical_section_does_not_hang() -> None:
    """The garbage collector may run the finalizer while this thread holds the allocator's
    lock (which is not re-entrant): ending the routing and releasing the pool are queued."""
    out = _run("""
        import gc
        import accelrt as acc
        from accelrt.memory._allocator import get_allocator
        from accelrt.backends import get_backend
        acc.set_current_accelerator("cpu")
        a = get_allocator(get_backend("cpu"), 0)
        s = acc.Stream("cpu:0")
        with s:
            g = acc.Graph()
            g.capture_begin()
            tmp = acc.full((4,), 1.0, device="cpu")
            pool = g._pool
            cycle = [g]; cycle.append(cycle)
            del g, cycle
            with a._lock:
                gc.collect()                    # the finalizer runs here
            assert not s.is_capturing()
            y = acc.empty(4, device="cpu")      # drains what was queued first
        assert a.pool_use_count(pool) == 0
        ids = {tuple(seg["segment_pool_id"]) for seg in acc.memory.memory_snapshot()
               for b in seg["blocks"] if b["address"] == y.data_ptr()}
        assert ids == {(0, 0)}, ids
        print("ok")
        """)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


# ---------------------------------------------------------------------- capture modes
# torch.cuda.graph's entry calls torch.cuda.synchronize() (cudaDeviceSynchronize), which CUDA
# refuses in a thread of the default interaction mode while a capture of its own (not begun
# relaxed) or another thread's capture begun in cudaStreamCaptureModeGlobal is going on. So
# with "global" the second thread's entry fails, with "thread_local" or "relaxed" both
# threads capture at once; a thread's own "thread_local" capture refuses its synchronize, a
# "relaxed" one does not. The cpu backend follows those rules; "default" is its own, global.

def _two_threads(first_mode: str, second_mode: str) -> dict[str, Any]:
    """Thread 1 captures with ``first_mode``; while it does, thread 2 enters ``acc.graph``
    with ``second_mode`` on its own stream and captures too. What happened, per thread."""
    gate = threading.Barrier(2)
    x, y = acc.zeros(8, device="cpu"), acc.zeros(8, device="cpu")
    out: dict[str, Any] = {}

    def first() -> None:
        try:
            g, s = acc.cpu.Graph(), acc.Stream("cpu:0")
            with acc.cpu.graph(g, stream=s, capture_error_mode=first_mode):
                gate.wait()                         # 1: thread 1 captures
                gate.wait()                         # 2: thread 2 entered (or was refused)
                x.fill_(1.0)
                gate.wait()                         # 3: both recorded their work
            out["g1"] = (g, s)
        except BaseException as exc:          # noqa: BLE001 - reported by the test
            out["first"] = exc
            gate.abort()

    def second() -> None:
        try:
            gate.wait()                             # 1
            g, s = acc.cpu.Graph(), acc.Stream("cpu:0")
            try:
                with acc.cpu.graph(g, stream=s, capture_error_mode=second_mode):
                    assert s.is_capturing()
                    gate.wait()                     # 2
                    y.fill_(2.0)
                    gate.wait()                     # 3
            except acc.DeviceError as exc:
                out["refused"] = exc
                gate.wait()                         # 2
                gate.wait()                         # 3
            out["g2"] = (g, s)
        except BaseException as exc:          # noqa: BLE001 - reported by the test
            out["second"] = exc
            gate.abort()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert "first" not in out and "second" not in out, out
    assert x.tolist() == [0.0] * 8 and y.tolist() == [0.0] * 8      # recorded, not run
    for key in ("g1", "g2"):
        g, s = out[key]
        if "refused" not in out or key == "g1":
            g.replay()
    acc.synchronize("cpu:0")
    out["x"], out["y"] = x.tolist()[0], y.tolist()[0]
    for key in ("g1", "g2"):
        g, s = out.pop(key)
        g.reset()
        s.close()
    return out


@pytest.mark.parametrize("first", ["thread_local", "relaxed"])
@pytest.mark.parametrize("second", ["global", "thread_local", "relaxed", "default"])
def test_second_thread_captures_while_a_non_global_capture_goes_on(first: str,
                                                                    second: str) -> None:
    out = _two_threads(first, second)
    assert "refused" not in out and (out["x"], out["y"]) == (1.0, 2.0)


@pytest.mark.parametrize("first", ["global", "default"])
def test_second_thread_is_refused_while_a_global_capture_goes_on(first: str) -> None:
    out = _two_threads(first, "thread_local")
    assert "another thread with capture_error_mode 'global'" in str(out["refused"])
    assert (out["x"], out["y"]) == (1.0, 0.0)     # the first capture went on


def _sync_in_capture(mode: str) -> acc.DeviceError | None:
    """What ``acc.synchronize()`` does inside this thread's own capture in ``mode``."""
    x = acc.zeros(4, device="cpu")
    g = acc.Graph(capture_error_mode=mode)
    with acc.Stream("cpu:0") as s, g:
        x.fill_(1.0)
        try:
            acc.synchronize()
            refused = None
        except acc.DeviceError as exc:
            refused = exc
        with pytest.raises(acc.DeviceError, match="capturing"):
            s.synchronize()                      # the capturing stream: refused in any mode
    g.replay()
    acc.synchronize()
    assert x.tolist() == [1.0] * 4
    g.reset()
    s.close()
    return refused


@pytest.mark.parametrize("mode", ["default", "global", "thread_local"])
def test_own_capture_refuses_a_device_synchronize(mode: str) -> None:
    refused = _sync_in_capture(mode)
    assert refused is not None and "begun in this thread" in str(refused)


def test_own_relaxed_capture_allows_a_device_synchronize() -> None:
    assert _sync_in_capture("relaxed") is None
