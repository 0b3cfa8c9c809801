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
from helpers.registry import module_backends

import accelrt as acc
from helpers import run_in_thread
from accelrt import backends
from accelrt.backends.cpu import CpuBackend

NAME = "rvtse25"     # two simulated devices, each stream on a worker thread (asynchronous)
OTHER = "rvtse25b"   # another backend: streams and events of another device type
# closed (worker threads stopped) and unregistered after the module
_backends = module_backends({
    NAME: lambda: CpuBackend(num_devices=2, async_streams=True, name=NAME),
    OTHER: lambda: CpuBackend(num_devices=1, name=OTHER),
})


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
                                           r"index|Device string must not be empty)") as info:
        make(text)
    assert isinstance(info.value, ValueError)   # `except ValueError` still works


def test_an_index_given_twice_is_pytorchs_runtime_error() -> None:
    # torch 2.14.1: torch.device("cpu:0", 0) raises RuntimeError "type (string) must not
    # include an index because index was passed explicitly: cpu:0"
    with pytest.raises(RuntimeError, match=r"^type \(string\) must not include an index because "
                                           r"index was passed explicitly: cpu:0$") as info:
        acc.device("cpu:0", 0)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("make", [acc.Stream, acc.Event])
def test_device_forms_torch_takes(two: str, make: Callable[..., Any]) -> None:
    # torch 2.14.1: torch.Stream(d)/torch.Event(d) take None (the current accelerator), an int
    # (an index of it), "type", "type:i" and a torch.device. On an accelerator a stream is made
    # on the named device, else on the current one (THPStream_pynew: a device without an index
    # is index -1, which the backend reads as the current device)
    acc.set_device_index(1)
    forms: list[tuple[object, int]] = [(None, 1), (0, 0), (two, 1), (f"{two}:0", 0),
                                       (acc.device(two), 1), (acc.device(two, 0), 0)]
    for device, index in forms:
        obj = make(device)
        if make is acc.Stream:
            assert obj.device == acc.device(two, index)
            obj.close()
            continue
        # torch.Event keeps only the device's type until its first record (device(type=...),
        # c10::Event's index -1), whatever the form; the record binds it
        assert obj.device == acc.device(two)
        obj.record(acc.current_stream(f"{two}:{index}"))
        assert obj.device == acc.device(two, index)


# torch 2.14.1: torch.Stream(True) -> TypeError "Stream(): argument 'device' (position 1) must
# be torch.device, not bool" (and float); torch.Stream(-1) -> RuntimeError "Device index must
# not be negative"; torch.Stream("foo") -> RuntimeError "Expected one of cpu, cuda, ... device
# type at start of device string: foo"; the same for torch.Event
@pytest.mark.parametrize(("device", "error", "match"), [
    (True, TypeError, r"^expected a device, int, str or None, got bool: .*; pass int\(True\)"),
    (False, TypeError, r"^expected a device, int, str or None, got bool: .*; pass int\(False\)"),
    (1.0, TypeError, r"^expected a device, int, str or None, got float$"),
    ([0], TypeError, r"^expected a device, int, str or None, got list$"),
    (-1, RuntimeError, r"^Device index must not be negative"),
    (-(2 ** 70), RuntimeError, r"^Device index must not be negative"),
    ("nosuchtype", RuntimeError, r"^Unknown backend 'nosuchtype'"),
    ("", RuntimeError, r"^Device string must not be empty"),   # (torch 2.15's words)
])
@pytest.mark.parametrize("make", [acc.Stream, acc.Event])
def test_device_forms_torch_refuses(two: str, make: Callable[..., Any], device: object,
                                    error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        make(device)


def test_positional_and_keyword_forms_as_torch(two: str) -> None:
    # torch 2.14.1: "Stream() takes from 0 to 1 positional arguments but 2 were given", the
    # same for Event(device, enable_timing); priority and the flags are keyword-only. The
    # device modules keep torch.cuda's positional forms (Stream(device, priority),
    # Event(enable_timing, blocking, interprocess, external))
    with pytest.raises(TypeError, match="positional argument"):
        acc.Stream(two, 0)  # type: ignore[misc]
    with pytest.raises(TypeError, match="positional argument"):
        acc.Event(two, True)  # type: ignore[misc]
    s = acc.cpu.Stream("cpu", -1)
    assert s.priority == -1
    assert acc.cpu.Event(True, False, False, False).enable_timing
    s.close()


@pytest.mark.parametrize(("priority", "error", "match"), [
    # torch 2.14.1: "Stream(): argument 'priority' must be int, not float" (bool, NoneType);
    # a priority beyond int64: ValueError "Overflow when unpacking long long"
    (1.0, TypeError, r"^priority must be an int, got float$"),
    (True, TypeError, r"^priority must be an int, got bool$"),
    (None, TypeError, r"^priority must be an int, got NoneType$"),
    ("0", TypeError, r"^priority must be an int, got str$"),
    (2 ** 70, ValueError, r"^priority=\d+ is out of range"),
])
def test_priority_forms(two: str, priority: object, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        acc.Stream(two, priority=priority)  # type: ignore[arg-type]
    s = acc.Stream(two, priority=np.int64(0))   # torch takes a numpy integer as an int64
    assert s.priority == 0 and type(s.priority) is int
    s.close()


@pytest.mark.parametrize("flag", ["enable_timing", "blocking", "interprocess"])
@pytest.mark.parametrize("value", [1, 0, None, np.bool_(True), "True"])
def test_event_flags_must_be_bools(two: str, flag: str, value: object) -> None:
    # torch 2.14.1: "Event(): argument 'enable_timing' must be bool, not int" (NoneType,
    # numpy.bool): no truthiness, not even numpy's bool
    with pytest.raises(TypeError, match=rf"^{flag} must be a bool, got "):
        acc.Event(two, **{flag: value})


def test_wrapping_triple_forms(two: str) -> None:
    s = acc.Stream(f"{two}:1")
    triple: dict[str, Any] = {"stream_id": s.stream_id, "device_index": 1, "device_type": two}
    w = acc.Stream(**triple)
    assert w == s and hash(w) == hash(s) and w.priority == 0
    # torch 2.14.1: a partial triple is "Stream() got an unexpected keyword argument
    # 'stream_id'", a bool "argument 'stream_id' must be int, not bool"
    for partial in ({"stream_id": s.stream_id}, {"stream_id": s.stream_id, "device_index": 1},
                    {"device_index": 1, "device_type": two}):
        with pytest.raises(TypeError, match="needs all three keyword arguments"):
            acc.Stream(**partial)
    for bad in (True, 1.0):
        with pytest.raises(TypeError, match="^stream_id must be an int"):
            acc.Stream(**{**triple, "stream_id": bad})
    # documented differences: device_type is the backend's name (torch's is c10::DeviceType's
    # int), and a priority beside the triple is refused (torch ignores it)
    with pytest.raises(TypeError, match="device_type must be a backend name"):
        acc.Stream(**{**triple, "device_type": 1})
    with pytest.raises(TypeError, match="do not also pass device or priority"):
        acc.Stream(**triple, priority=-1)
    s.close()


# ---------------------------------------------------------------------- attributes and identity

def test_stream_attributes_as_torch_on_an_accelerator(two: str) -> None:
    # torch.Stream on an accelerator (THPStream_get_device, THPStream_members): device is the
    # stream's device with its index, device_index that index, stream_id an int; torch 2.14.1's
    # "cpu" type reads device(type='cpu'), -1 and 0 only because PyTorch's cpu has no streams
    s = acc.Stream(f"{two}:1")
    assert s.device == acc.device(two, 1) and s.device_index == 1
    assert type(s.stream_id) is int and s.native_handle == s.stream_id
    assert s.device_type == two   # documented: torch's is c10::DeviceType's int
    assert s.priority == 0        # torch.cuda.Stream's attribute (torch.Stream has none)
    # torch 2.14.1: members are read-only ("readonly attribute") and there is no __dict__
    for name in ("device", "device_index", "device_type", "stream_id", "priority",
                 "native_handle"):
        with pytest.raises(AttributeError):
            setattr(s, name, 1)
    with pytest.raises(AttributeError):
        s.anything = 1  # type: ignore[attr-defined]
    s.close()


def test_event_attributes_before_and_after_record(two: str) -> None:
    # torch 2.14.1: torch.Event("cpu").event_id is 0 before a record; "device" cannot be set
    e = acc.Event(two, enable_timing=True)
    assert e.event_id == 0 and e.device.index is None and e.enable_timing
    for name in ("device", "event_id", "enable_timing"):
        with pytest.raises(AttributeError):
            setattr(e, name, 1)
    with pytest.raises(AttributeError):
        e.anything = 1  # type: ignore[attr-defined]
    e.record(acc.current_stream(f"{two}:1"))
    assert type(e.event_id) is int and e.event_id != 0 and e.device == acc.device(two, 1)
    e.synchronize()


def test_stream_equality_hash_bool_and_order(two: str) -> None:
    # torch 2.14.1: torch.Stream == None / == 5 is False, != None True, "<"/"<=" raise
    # TypeError ("'<' not supported between instances of 'torch.Stream' and 'torch.Stream'"),
    # bool() is True, equal streams (same type, index and id) hash equal
    s = acc.Stream(f"{two}:0")
    w = acc.Stream(stream_id=s.stream_id, device_index=0, device_type=two)
    assert s == w and (s != w) is False and hash(s) == hash(w) and {s, w} == {s}
    assert (s == None) is False and (s != None) is True  # noqa: E711
    assert (s == 5) is False and (s != "x") is True and bool(s) is True
    for compare in (lambda: s < w, lambda: s <= w, lambda: s > w, lambda: s >= w):
        with pytest.raises(TypeError, match="not supported between instances"):
            compare()
    # one id on two devices is two streams (torch compares type, index and id)
    d0, d1 = acc.current_stream(f"{two}:0"), acc.current_stream(f"{two}:1")
    assert d0.stream_id == d1.stream_id and d0 != d1
    # another backend's stream with the same id is another stream
    o = acc.current_stream(f"{OTHER}:0")
    assert o.stream_id == d0.stream_id and o != d0
    s.close()


def test_event_identity_hash_bool_and_order(two: str) -> None:
    # torch 2.14.1: torch.Event compares by identity (no __eq__), is hashable and truthy, and
    # has no order
    a, b = acc.Event(two), acc.Event(two)
    assert a == a and a != b and hash(a) == hash(a) and bool(a) is True and len({a, b}) == 2
    with pytest.raises(TypeError, match="not supported between instances"):
        _ = a < b  # type: ignore[operator]


def test_reprs_follow_torch_cuda(two: str) -> None:
    # documented: torch.cuda.Stream's/Event's shape (torch.Stream prints "torch.Stream
    # device_type=cuda, device_index=0, stream_id=...")
    s = acc.Stream(f"{two}:1")
    assert repr(s) == f"<accelrt.Stream device={two}:1 stream_id={s.stream_id:#x}>" == str(s)
    e = acc.Event(two)
    assert repr(e) == "<accelrt.Event uninitialized>"
    e.record(s)
    assert repr(e) == f"<accelrt.Event {e.event_id:#x}>"
    e.synchronize()
    s.close()


@pytest.mark.parametrize("how", [copy.copy, copy.deepcopy, pickle.dumps],
                         ids=["copy", "deepcopy", "pickle"])
def test_copy_and_pickle_are_refused(two: str, how: Callable[[Any], Any]) -> None:
    # torch 2.14.1: TypeError "cannot pickle 'torch.Stream' object" (and 'torch.Event'), also
    # from copy.copy and copy.deepcopy
    s, e = acc.Stream(two), acc.Event(two)
    for obj in (s, e, acc.current_stream(two)):
        with pytest.raises(TypeError, match="cannot be pickled"):
            how(obj)
    s.close()


# ---------------------------------------------------------------------- with stream:

def test_with_switches_device_and_stream_and_restores_both(two: str) -> None:
    # torch.Stream.__enter__ (accelerator): makes the stream's device current, saves that
    # device's current stream, makes the stream current; __exit__ restores both
    s1 = acc.Stream(f"{two}:1")
    before0, before1 = acc.current_stream(f"{two}:0"), acc.current_stream(f"{two}:1")
    with s1 as entered:
        assert entered is s1   # torch: "with torch.Stream() as stream: works"
        assert acc.current_device_index() == 1 and acc.current_stream() is s1
        assert acc.current_stream(f"{two}:0") is before0
    assert acc.current_device_index() == 0
    assert acc.current_stream(f"{two}:1") is before1
    s1.close()


def test_with_nests_the_same_stream_and_restores_the_first(two: str) -> None:
    # torch.Stream keeps one saved context per object (_ctx_stream), so with s: with s: leaves
    # s current after both blocks; accelrt's blocks are re-entrant (API.md) and restore the
    # stream from before the outer one
    s = acc.Stream(f"{two}:0")
    before = acc.current_stream()
    with s:
        with s:
            assert acc.current_stream() is s
        assert acc.current_stream() is s
    assert acc.current_stream() is before
    s.close()


def test_with_restores_after_set_stream_set_device_and_errors(two: str) -> None:
    s, t = acc.Stream(f"{two}:0"), acc.Stream(f"{two}:0")
    before = acc.current_stream()
    with s:
        acc.set_stream(t)            # torch: __exit__ sets the saved stream back regardless
    assert acc.current_stream() is before
    with s:
        acc.set_device_index(1)      # documented: restored (torch.Stream's exit leaves it when
    assert acc.current_device_index() == 0   # the stream's device was already current)
    with pytest.raises(KeyError):
        with s:
            raise KeyError("inside")
    assert acc.current_stream() is before and acc.current_device_index() == 0
    s.close()
    t.close()


def test_with_blocks_left_out_of_order(two: str) -> None:
    # generators suspended inside with blocks leave them in any order; each exit restores the
    # stream its own block replaced
    s, t = acc.Stream(f"{two}:0"), acc.Stream(f"{two}:1")
    before0, before1 = acc.current_stream(f"{two}:0"), acc.current_stream(f"{two}:1")

    def inside(stream: acc.Stream) -> Iterator[None]:
        with stream:
            yield

    g, h = inside(s), inside(t)
    next(g)
    next(h)
    assert acc.current_stream(f"{two}:0") is s and acc.current_stream(f"{two}:1") is t
    g.close()   # the outer block ends first
    assert acc.current_stream(f"{two}:0") is before0 and acc.current_stream(f"{two}:1") is t
    h.close()
    assert acc.current_stream(f"{two}:1") is before1 and acc.current_device_index() == 0
    s.close()
    t.close()


def test_with_is_per_thread(two: str) -> None:
    # accelrt keeps each thread's blocks in the thread (torch.Stream keeps one context on the
    # object: two threads entering one stream overwrite each other's saved stream)
    s = acc.Stream(f"{two}:1")
    before = acc.current_stream(f"{two}:1")
    inside, leave = threading.Event(), threading.Event()
    seen: dict[str, Any] = {}

    def user() -> None:
        with s:
            seen["in"] = (acc.current_stream() is s, acc.current_device_index())
            inside.set()
            leave.wait()
        seen["out"] = acc.current_stream(f"{two}:1") is s

    t = threading.Thread(target=user)
    t.start()
    inside.wait()
    try:
        # the other thread's block changes nothing here
        assert acc.current_stream(f"{two}:1") is before and acc.current_device_index() == 0
        with s:   # the same stream entered here too
            assert acc.current_stream() is s
        assert acc.current_stream(f"{two}:1") is before
    finally:
        leave.set()
        t.join()
    assert seen == {"in": (True, 1), "out": False}
    # leaving a block this thread never entered is refused, and changes nothing
    with pytest.raises(RuntimeError, match="without a matching __enter__ in this thread"):
        s.__exit__(None, None, None)
    s.__enter__()
    with pytest.raises(RuntimeError, match="without a matching __enter__ in this thread"):
        run_in_thread(lambda: s.__exit__(None, None, None))
    assert acc.current_stream() is s
    s.__exit__(None, None, None)
    assert acc.current_stream(f"{two}:1") is before
    s.close()


# ---------------------------------------------------------------------- operations

def test_wait_stream_and_wait_event_order_later_work(two: str) -> None:
    # torch: wait_stream(o) is record an event on o, then wait for it (THPStream_wait_stream);
    # work queued after the wait runs after o's work, on streams of the same or other devices
    for waiter_device in (0, 1):
        o, w = acc.Stream(f"{two}:0"), acc.Stream(f"{two}:{waiter_device}")
        ran: list[str] = []
        with Gate() as gate:
            _host(o, gate)
            _host(o, lambda: ran.append("o"))
            w.wait_stream(o)
            _host(w, lambda: ran.append("w"))
            e = o.record_event()
            v = acc.Stream(f"{two}:{1 - waiter_device}")
            v.wait_event(e)
            _host(v, lambda: ran.append("v"))
            assert not w.query() and not v.query() and not e.query()
        w.synchronize()
        v.synchronize()
        assert ran[0] == "o" and sorted(ran[1:]) == ["v", "w"]
        for stream in (o, w, v):
            stream.close()


def test_stream_operations_with_themselves_and_unrecorded_events(two: str) -> None:
    s = acc.Stream(f"{two}:0")
    s.wait_stream(s)                 # torch (accelerator): records and waits on itself: a no-op
    s.wait_event(acc.Event(two))     # torch (InlineEvent.block): an unrecorded event, a no-op
    acc.Event(two).wait(s)
    assert s.query()
    e = s.record_event()             # torch: a new default event of the stream's type
    assert type(e) is acc.Event and e.device == s.device and not e.enable_timing
    mine = acc.Event(two)
    assert s.record_event(mine) is mine and mine.event_id != 0
    s.synchronize()
    assert e.query() and mine.query()
    s.close()


def test_other_device_type_messages(two: str) -> None:
    # torch's InlineEvent texts (c10/core/impl/InlineEvent.h; torch 2.14.1 on "cpu" with a
    # cuda stream: "Event device type CPU does not match recording stream's device type
    # CUDA."), with accelrt's backend names
    s, o = acc.Stream(f"{two}:0"), acc.current_stream(f"{OTHER}:0")
    e = acc.Event(two)
    with pytest.raises(RuntimeError, match=rf"^Event device type {two} does not match "
                                           rf"recording stream's device type {OTHER}\.$"):
        e.record(o)
    assert e.device.index is None and e.event_id == 0
    with pytest.raises(RuntimeError, match=rf"^Event device type {OTHER} does not match "
                                           rf"blocking stream's device type {two}\."):
        s.wait_stream(o)
    # documented: a wait on another backend's stream is refused even before the first record
    # (torch.cuda.Event refuses it, torch.Event returns at once)
    with pytest.raises(RuntimeError, match="does not match blocking stream's device type"):
        e.wait(o)
    with pytest.raises(RuntimeError, match="does not match blocking stream's device type"):
        o.wait_event(e)
    s.close()


def test_elapsed_time_checks_in_torchs_order(two: str) -> None:
    # torch 2.14.1 (InlineEvent::elapsedTime): device type, then enable_timing, then recorded,
    # then completed: Event("cuda", enable_timing=True).elapsed_time(Event("cpu", ...)) ->
    # RuntimeError "Event device type CUDA does not match other's device type CPU."; untimed
    # and unrecorded -> ValueError "Both events must be created with argument
    # 'enable_timing=True'."; timed, unrecorded -> ValueError "Both events must be recorded
    # before calculating elapsed time."
    plain, other = acc.Event(two), acc.Event(OTHER, enable_timing=True)
    with pytest.raises(RuntimeError, match=rf"^Event device type {two} does not match other's "
                                           rf"device type {OTHER}\.$"):
        plain.elapsed_time(other)
    with pytest.raises(ValueError, match=r"^Both events must be created with argument "
                                         r"'enable_timing=True'\.$"):
        plain.elapsed_time(acc.Event(two))
    a, b = acc.Event(two, enable_timing=True), acc.Event(two, enable_timing=True)
    with pytest.raises(ValueError, match=r"^Both events must be created with argument"):
        a.elapsed_time(plain)
    with pytest.raises(ValueError, match=r"^Both events must be recorded before calculating "
                                         r"elapsed time\.$"):
        a.elapsed_time(b)
    s = acc.Stream(f"{two}:0")
    a.record(s)
    with Gate() as gate:
        _host(s, gate)
        b.record(s)
        with pytest.raises(RuntimeError, match=r"^Both events must be completed before "
                                               r"calculating elapsed time\."):
            a.elapsed_time(b)
    b.synchronize()
    assert a.elapsed_time(b) >= 0.0 and b.elapsed_time(a) == -a.elapsed_time(b)
    # torch: "expected other to be a torch.Event object" (RuntimeError); documented TypeError
    with pytest.raises(TypeError, match=r"^elapsed_time\(\) takes an accelrt\.Event"):
        a.elapsed_time(s)  # type: ignore[arg-type]
    s.close()


# ---------------------------------------------------------------------- current_stream, set_stream

def test_set_stream_and_current_stream_as_torch_accelerator(two: str) -> None:
    # torch.accelerator.set_stream: "This function will set the current device index to the
    # device index of the given stream"; torch 2.14.1: set_stream(None) and set_stream(5) are
    # TypeErrors ("incompatible function arguments")
    s1 = acc.Stream(f"{two}:1")
    before = acc.current_stream(f"{two}:1")
    acc.set_stream(s1)
    assert acc.current_device_index() == 1
    assert acc.current_stream() is s1 and acc.current_stream(1) is s1
    assert acc.current_stream(f"{two}:1") is s1 and acc.current_stream(acc.device(two)) is s1
    assert acc.current_stream(0) is not s1
    for bad in (None, 5, acc.Event(two)):
        with pytest.raises(TypeError, match=r"^set_stream\(\) takes an accelrt\.Stream"):
            acc.set_stream(bad)  # type: ignore[arg-type]
    assert acc.current_stream() is s1
    # a thread starts on its own current device and default streams
    assert run_in_thread(lambda: (acc.current_device_index(), acc.current_stream(1) == s1)) \
        == (0, False)
    acc.set_stream(before)
    acc.set_device_index(0)
    s1.close()


def test_device_module_minus_one_means_the_current_device(two: str) -> None:
    # regression: acc.<mod>.current_stream(-1), default_stream(-1) and synchronize(-1) raised
    # ValueError, while the same module's Stream(-1) reads -1 as the current device. torch.cuda:
    # current_stream(-1)/default_stream(-1) pass -1 (torch 2.14.1: _get_device_index(-1,
    # optional=True) is -1) to c10::cuda::getCurrentCUDAStream/getDefaultCUDAStream, for which
    # -1 is the current device (c10/cuda/CUDAStream.h); synchronize(d) runs under
    # torch.cuda.device(d), a no-op for any negative index (torch.cuda.device(-1).idx is -1).
    # Another negative index is refused by the stream getters (c10's device check, a
    # RuntimeError), with the generic normaliser's error here
    mod = backends.device_module(two)
    s1 = acc.Stream(f"{two}:1")
    mod.set_device(1)
    with s1:
        assert mod.current_stream(-1) == s1 == mod.current_stream()
        assert mod.default_stream(-1) == mod.default_stream(1) != s1
        ran: list[int] = []
        with Gate() as gate:
            _host(s1, gate)
            _host(s1, lambda: ran.append(1))
        for negative in (-1, -5):
            mod.synchronize(negative)   # waits for device 1's work
            assert ran == [1]
        for call in (mod.current_stream, mod.default_stream):
            with pytest.raises(RuntimeError, match=r"^Device index must not be negative, got "
                                                   r"-2$") as info:
                call(-2)
            assert isinstance(info.value, ValueError)
    mod.set_device(0)
    s1.close()
