"""Review by tests of the generic ``accelrt.Stream``/``accelrt.Event`` (and a device module's
``acc.cpu.Stream``/``Event``) against ``torch.Stream``/``torch.Event``, run side by side on
torch 2.14.1's "cpu" device type with the same hostile sequences: constructor forms,
attributes, ``repr``, ``==``/``hash``/``bool``, ``with stream:`` (nested, out of order, across
threads), the stream and event operations with their error classes and texts, pickling and
copying, and ``current_stream``/``set_stream``.

The expected values were observed on torch 2.14.1 (CPU-only machine, CUDA build) and are
written here as literals; CI has no torch. Where torch's answer comes only from "cpu" not
being an accelerator in PyTorch (``device_index`` -1, ``stream_id`` 0, no events: "cpu backend
doesn't support events."), the test compares with what torch does for a real accelerator per
its source (torch/csrc/Stream.cpp, torch/csrc/Event.cpp, c10/core/impl/InlineEvent.h,
c10/cuda/CUDAEvent.h) and says so. accelrt's deliberate differences (docs/differences.md) are
checked as documented.
"""

from __future__ import annotations

import copy
import pickle
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from helpers.gates import Gate

import accelrt as acc
from accelrt import backends
from accelrt.backends.cpu import CpuBackend

NAME = "rvtse25"     # two simulated devices, each stream on a worker thread (asynchronous)
OTHER = "rvtse25b"   # another backend: streams and events of another device type
backends.register(NAME, lambda: CpuBackend(num_devices=2, async_streams=True, name=NAME),
                  replace=True)
backends.register(OTHER, lambda: CpuBackend(num_devices=1, name=OTHER), replace=True)


@pytest.fixture
def two() -> Iterator[str]:
    """The two-device asynchronous backend, current, device 0 current."""
    acc.set_current_accelerator(NAME)
    acc.set_device_index(0)
    yield NAME
    for index in range(2):
        acc.synchronize(f"{NAME}:{index}")


def _host(stream: acc.Stream, fn: Callable[[], None]) -> None:
    """Queue host function ``fn`` on ``stream``."""
    stream._b.launch_host_func(stream.device_index, fn, stream.stream_id)


def _in_thread(fn: Callable[[], Any]) -> Any:
    """``fn()`` run in a new thread, its result returned (its exception re-raised)."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            out["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out.get("value")


# ---------------------------------------------------------------------- close() of a stream in use
# (accelrt's addition: torch's streams have no close(). The rule of close() is that it refuses
# while closing "would let its handle serve another stream while still in use"; these are the
# uses it missed.)

def test_close_refuses_a_stream_another_thread_set_current(two: str) -> None:
    # regression: close() looked only at the calling thread's current stream, so a stream that
    # another thread made current with set_stream() was closed, its handle went back to the
    # pool and served the next Stream(), and that thread's work (arrays, Event.record()) ran on
    # the new stream's handle
    s = acc.Stream(f"{two}:0")
    ready, done = threading.Event(), threading.Event()

    def user() -> None:
        acc.set_stream(s)
        ready.set()
        done.wait()

    t = threading.Thread(target=user)
    t.start()
    ready.wait()
    try:
        with pytest.raises(acc.AcceleratorError, match="current stream of .*another thread"):
            s.close()
        assert not s.is_closed
    finally:
        done.set()
        t.join()
    s.close()   # the thread ended: its current streams went with it
    assert s.is_closed


def test_close_refuses_a_stream_a_with_block_restores(two: str) -> None:
    # regression: set_stream(s), then ``with t:``, then s.close() was allowed (s was neither the
    # thread's current stream at that moment nor entered), and leaving the block made the closed
    # stream, whose handle a new Stream() could hold, current again
    previous = acc.current_stream()
    s, t = acc.Stream(f"{two}:0"), acc.Stream(f"{two}:0")
    acc.set_stream(s)
    with t:
        with pytest.raises(acc.AcceleratorError, match="current stream"):
            s.close()
    assert acc.current_stream() is s and not s.is_closed
    acc.set_stream(acc.current_stream(f"{two}:1"))   # another device: s stays current on 0
    with pytest.raises(acc.AcceleratorError, match="current stream"):
        s.close()
    acc.set_stream(t)
    s.close()
    acc.set_stream(previous)
    t.close()


def test_close_refuses_a_stream_whose_device_module_view_is_current(two: str) -> None:
    # regression: a device module's view of a stream (``acc.<mod>.current_stream()`` inside
    # ``with s:``) made current with set_stream() or ``with view:`` did not keep s from closing
    mod = backends.device_module(two)
    s = acc.Stream(f"{two}:0")
    with s:
        view = mod.current_stream()
    assert view is not s and view == s
    with view:
        with pytest.raises(acc.AcceleratorError, match="current stream"):
            s.close()
    previous = acc.current_stream()
    acc.set_stream(view)
    with pytest.raises(acc.AcceleratorError, match="set_stream"):
        s.close()
    acc.set_stream(previous)
    s.close()
    assert view.is_closed


def test_close_refuses_a_stream_whose_wrapper_is_current(two: str) -> None:
    # a non-owning wrapper of the handle (Stream(stream_id=...)) is the same stream (equal, as
    # torch.Stream objects of one id are): while it is current, the handle is in use
    s = acc.Stream(f"{two}:1")
    w = acc.Stream(stream_id=s.stream_id, device_index=1, device_type=two)
    previous = acc.current_stream(f"{two}:1")
    acc.set_stream(w)
    with pytest.raises(acc.AcceleratorError, match="current stream of rvtse25:1 .this thread."):
        s.close()
    acc.set_stream(previous)
    s.close()
    assert w != s and not w.is_closed   # the wrapper is not closed (it owns nothing)


# ---------------------------------------------------------------------- constructor forms

# torch 2.14.1: torch.Stream(s) / torch.Event(s) / torch.device(s) for a malformed device
# string raise RuntimeError ("Device string must not be empty", "Invalid device string:
# 'cpu:x'", "Could not parse device index '99999999999999999999' in device string ...")
@pytest.mark.parametrize("text", ["", "cpu:x", "cpu:-1", "cpu:01", "cpu:", ":0", "cpu:0:1",
                                  "cpu:99999999999999999999"])
@pytest.mark.parametrize("make", [acc.Stream, acc.Event, acc.cpu.Stream, acc.device],
                         ids=["Stream", "Event", "cpu.Stream", "device"])
def test_a_malformed_device_string_is_pytorchs_runtime_error(make: Callable[[str], Any],
                                                             text: str) -> None:
    # regression: a plain ValueError, which `except RuntimeError` (torch's class) missed
    with pytest.raises(RuntimeError, match=r"^(Invalid device string|Could not parse device "
                                           r"index)") as info:
        make(text)
    assert isinstance(info.value, ValueError)   # `except ValueError` still works


def test_an_index_given_twice_is_pytorchs_runtime_error() -> None:
    # torch 2.14.1: torch.device("cpu:0", 0) raises RuntimeError "type (string) must not
    # include an index because index was passed explicitly: cpu:0"
    with pytest.raises(RuntimeError, match=r"^type \(string\) must not include an index because "
                                           r"index was passed explicitly: cpu:0$") as info:
        acc.device("cpu:0", 0)
    assert isinstance(info.value, ValueError)
