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
    assert e.device is None and not e.enable_timing
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
