"""Thread-stress review (s27): races found by stress runs, each forced here with gates.

Every interleaving is forced with ``threading.Event`` gates (no sleeps): a subclass hook that
a call runs at the one point where the race opens waits there while the other thread acts.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

import accelrt as acc
from accelrt.backends import EventHandle, StreamHandle
from accelrt._errors import AcceleratorValueError
from accelrt.backends.cpu import CpuBackend

_WAIT = 10   # seconds: only reached when a gate is never opened (a failing run, not a hang)


class _Gated:
    """A hook run once, at its first call: say so (``reached``), then wait for ``go``."""

    def __init__(self) -> None:
        self.armed = True
        self.reached = threading.Event()
        self.go = threading.Event()

    def __call__(self) -> None:
        if self.armed and threading.current_thread() is not threading.main_thread():
            self.armed = False
            self.reached.set()
            assert self.go.wait(_WAIT)


def _in_thread(fn: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            out["error"] = exc

    t = threading.Thread(target=target)
    t.start()
    return t, out


def test_close_racing_set_stream_never_leaves_a_closed_current_stream() -> None:
    # set_stream checked that the stream was open, then close() (in another thread) found no
    # thread using it, closed it and pooled its handle, then set_stream made it current: the
    # thread went on queueing work on a handle that could serve another stream. Now
    # set_stream writes its entry first and checks after: it sees the close and raises.
    # (Forced through a device module's view, whose check of the stream it views runs
    # before the entry is written: the one place a hook can wait.)
    gate = _Gated()

    class GatedView(acc.cpu.Stream):
        __slots__ = ()

        def _check_open(self) -> None:
            super()._check_open()
            gate()   # set_stream's first check passed: close() runs here

    s = acc.Stream("cpu")
    view = GatedView._view(s)
    seen: list[tuple[bool, bool]] = []

    def user() -> None:
        before = acc.current_stream("cpu")
        try:
            acc.set_stream(view)
        finally:   # (closed, unchanged) of the thread's current stream after the call
            cur = acc.current_stream("cpu")
            seen.append((cur.is_closed, cur == before))

    t, out = _in_thread(user)
    assert gate.reached.wait(_WAIT)
    s.close()   # nobody uses it yet: closes
    gate.go.set()
    t.join(_WAIT)
    assert s.is_closed
    assert isinstance(out.get("error"), acc.ClosedError), out
    assert seen == [(False, True)]   # the thread's current stream stayed what it was


def test_close_racing_with_stream_of_a_view_never_enters_a_closed_stream() -> None:
    # ``with view:`` of a device module's view checked the stream it views, then close() of
    # that stream ran in another thread, then the block made the closed stream current
    gate = _Gated()

    class GatedView(acc.cpu.Stream):
        __slots__ = ()

        def _check_open(self) -> None:
            super()._check_open()
            gate()

    s = acc.Stream("cpu")
    view = GatedView._view(s)

    def user() -> bool:
        try:
            with view:
                return bool(acc.current_stream("cpu").is_closed)
        finally:
            assert acc.current_stream("cpu") != view   # the block left nothing behind

    t, out = _in_thread(user)
    assert gate.reached.wait(_WAIT)
    s.close()
    gate.go.set()
    t.join(_WAIT)
    assert isinstance(out.get("error"), acc.ClosedError), out


def test_set_stream_waits_for_a_close_in_progress() -> None:
    # close() is looking for users (here: blocked comparing with another thread's current
    # stream) when a thread makes the stream current: that thread waits for close() to
    # decide, and exactly one of them wins (never both)
    gate = _Gated()
    s = acc.Stream("cpu")

    class Slow(acc.Stream):
        __slots__ = ()

        def __eq__(self, other: object) -> bool:
            gate()   # close()'s look at this thread's table
            return super().__eq__(other)

        __hash__ = acc.Stream.__hash__

    holder_ready, holder_done = threading.Event(), threading.Event()

    def holder() -> None:
        slow = Slow("cpu")
        acc.set_stream(slow)
        holder_ready.set()
        assert holder_done.wait(_WAIT)
        acc.set_stream(acc.cpu.default_stream())
        slow.close()

    th = threading.Thread(target=holder)
    th.start()
    assert holder_ready.wait(_WAIT)
    gate.armed = True
    tc, closed = _in_thread(s.close)   # blocks in the comparison, holding the close lock
    assert gate.reached.wait(_WAIT)
    entered = threading.Event()

    def user() -> bool:
        entered.set()
        try:
            acc.set_stream(s)   # must wait for the close in progress
            return not acc.current_stream("cpu").is_closed
        finally:
            acc.set_stream(acc.cpu.default_stream())

    tu, used = _in_thread(user)
    assert entered.wait(_WAIT)
    gate.go.set()
    tc.join(_WAIT)
    tu.join(_WAIT)
    holder_done.set()
    th.join(_WAIT)
    close_ok = "error" not in closed
    user_ok = "error" not in used
    assert close_ok != user_ok, (closed, used)   # exactly one wins
    if user_ok:
        assert used["value"] is True
        assert isinstance(closed["error"], acc.AcceleratorError)
        s.close()
    else:
        assert isinstance(used["error"], acc.ClosedError)


@pytest.mark.parametrize("mode", ["set", "with"])
def test_close_and_make_current_race_many_rounds(mode: str) -> None:
    # the unforced race, a few hundred rounds: never a closed current stream
    bad: list[str] = []
    for _ in range(200):
        s = acc.Stream("cpu")
        bar = threading.Barrier(2)
        res: dict[str, str] = {}

        def user(s: acc.Stream = s, bar: threading.Barrier = bar,
                 res: dict[str, str] = res) -> None:
            bar.wait()
            try:
                if mode == "set":
                    acc.set_stream(s)
                    if acc.current_stream("cpu").is_closed:
                        bad.append("set_stream")
                    acc.set_stream(acc.cpu.default_stream())
                else:
                    with s:
                        if acc.current_stream("cpu").is_closed:
                            bad.append("with")
            except acc.ClosedError:
                res["user"] = "closed"

        def closer(s: acc.Stream = s, bar: threading.Barrier = bar,
                   res: dict[str, str] = res) -> None:
            bar.wait()
            try:
                s.close()
            except acc.AcceleratorError:
                res["close"] = "refused"

        ts = [threading.Thread(target=user), threading.Thread(target=closer)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(_WAIT)
        if "close" in res:
            s.close()
    assert not bad


class _BarrierEvents(CpuBackend):
    """A cpu backend whose ``event_create`` waits until two threads are inside it: both
    threads' first records of one event have then seen it without a handle."""

    def __init__(self) -> None:
        super().__init__(num_devices=2, name="cpu_s27")
        self.meet: threading.Barrier | None = None

    def event_create(self, index: int, enable_timing: bool, blocking: bool,
                     interprocess: bool) -> EventHandle:
        meet = self.meet
        if meet is not None:
            meet.wait(_WAIT)
        return super().event_create(index, enable_timing, blocking, interprocess)


@pytest.fixture
def barrier_events() -> Iterator[_BarrierEvents]:
    b = _BarrierEvents()
    acc.backends.register("cpu_s27", lambda: b)
    try:
        yield b
    finally:
        acc.backends.unregister("cpu_s27")
        b.close()


def _record_in_two_threads(ev: acc.Event, streams: list[acc.Stream]) -> list[Any]:
    outs = []
    threads = []
    for s in streams:
        t, out = _in_thread(lambda s=s: ev.record(s))
        threads.append(t)
        outs.append(out)
    for t in threads:
        t.join(_WAIT)
    return outs


def test_first_records_of_one_event_in_two_threads_make_one_handle(
        barrier_events: _BarrierEvents) -> None:
    # both threads saw the new event without a handle and each made one: the second replaced
    # the first, which was never destroyed (a leaked backend event per race)
    b = barrier_events
    streams = [acc.Stream("cpu_s27:1"), acc.Stream("cpu_s27:1")]
    ev = acc.Event("cpu_s27:1")
    b.meet = threading.Barrier(2)
    outs = _record_in_two_threads(ev, streams)
    b.meet = None
    assert outs == [{"value": None}, {"value": None}]
    assert b.live_handles()["events"] == 1
    ev.synchronize()
    ev.close()
    assert b.live_handles()["events"] == 0
    for s in streams:
        s.close()


def test_first_records_of_an_event_without_device_on_two_devices(
        barrier_events: _BarrierEvents) -> None:
    # Event() binds to the device of its first record: two threads recording it at once on
    # devices 0 and 1 each bound it, so one recorded a handle of the other's device (the
    # backend refused it, or close() later did) and a handle leaked. Now one first record
    # binds it and the other gets PyTorch's device mismatch, as if it came second.
    b = barrier_events
    streams = [acc.Stream("cpu_s27:0"), acc.Stream("cpu_s27:1")]
    ev = acc.Event("cpu_s27")
    b.meet = threading.Barrier(2)
    outs = _record_in_two_threads(ev, streams)
    b.meet = None
    ok = [i for i, out in enumerate(outs) if "error" not in out]
    assert len(ok) == 1, outs
    lost = outs[1 - ok[0]]["error"]
    assert isinstance(lost, AcceleratorValueError)
    assert str(lost).startswith(f"Event device {ok[0]} does not match recording stream's "
                                f"device {1 - ok[0]}.")
    assert ev.device == acc.device(f"cpu_s27:{ok[0]}")
    assert b.live_handles()["events"] == 1
    ev.record(streams[ok[0]])
    ev.synchronize()
    ev.close()   # (refused the other device's handle before)
    assert b.live_handles()["events"] == 0
    for s in streams:
        s.close()


@pytest.fixture
def async_cpu() -> Iterator[str]:
    # the current accelerator (empty_cache() empties its devices; conftest restores it)
    b = CpuBackend(num_devices=2, async_streams=True, name="cpu_s27a")
    acc.backends.register("cpu_s27a", lambda: b)
    acc.set_current_accelerator("cpu_s27a")
    try:
        yield "cpu_s27a"
    finally:
        acc.memory.empty_cache()
        acc.backends.unregister("cpu_s27a")
        b.close()


def _consistent(stats: dict[str, Any]) -> list[str]:
    """What breaks the invariants of one device's memory_stats() (no accumulated reset)."""
    bad = []
    for kind in ("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes",
                 "allocation", "segment", "active", "inactive_split"):
        for pool in ("all", "small_pool", "large_pool"):
            cur, peak = stats[f"{kind}.{pool}.current"], stats[f"{kind}.{pool}.peak"]
            made, freed = stats[f"{kind}.{pool}.allocated"], stats[f"{kind}.{pool}.freed"]
            if not (0 <= cur <= peak and made - freed == cur):
                bad.append(f"{kind}.{pool}: current {cur} peak {peak} {made}-{freed}")
    if stats["reserved_bytes.all.current"] < stats["allocated_bytes.all.current"]:
        bad.append("reserved < allocated")
    return bad


def test_allocator_streams_and_stats_under_threads(async_cpu: str) -> None:
    # a short mixed run (the stress harness's shape, small): 8 threads allocate and free on
    # two devices and their own streams (record_stream, raw caching_allocator_alloc/delete,
    # events), while another takes stats and snapshots, toggles the history, empties the
    # cache and resets peaks; every thread keeps its own current device and stream, its data,
    # and the statistics stay consistent and end at zero
    name = async_cpu
    n_threads, rounds = 8, 40
    start = threading.Barrier(n_threads + 1)
    stop = threading.Event()
    problems: list[str] = []

    def worker(tid: int) -> None:
        mine = tid % 2
        streams = {d: (acc.Stream(f"{name}:{d}"), acc.Stream(f"{name}:{d}")) for d in (0, 1)}
        before = acc.current_stream(f"{name}:{mine}")
        acc.set_stream(streams[mine][0])
        live: list[acc.Array] = []
        raw: list[int] = []
        try:
            start.wait(_WAIT)
            for i in range(rounds):
                d = (tid + i) % 2
                s, other = streams[d]
                with s:
                    a = acc.empty(64 << (i % 12), device=f"{name}:{d}")
                    a.fill_(float(tid))
                    a.record_stream(other)
                live.append(a)
                raw.append(acc.memory.caching_allocator_alloc(512 << (i % 6), f"{name}:{d}",
                                                              other))
                if i % 3 == 0:
                    live.pop(0).close()
                    acc.memory.caching_allocator_delete(raw.pop(0))
                e = acc.Event(name)   # (no index: bound by its first record)
                e.record(s)
                e.wait(other)
                e.close()
                if acc.current_stream(name) != streams[mine][0]:
                    problems.append(f"thread {tid}: its current device or stream changed")
            for d in (0, 1):
                acc.synchronize(f"{name}:{d}")
            problems.extend(f"thread {tid}: its data was overwritten"
                            for a in live if not (a.numpy() == tid).all())
        except BaseException as exc:  # noqa: BLE001 - reported below
            problems.append(f"thread {tid}: {exc!r}")
        finally:
            for a in live:
                a.close()
            for p in raw:
                acc.memory.caching_allocator_delete(p)
            acc.set_stream(before)
            for pair in streams.values():
                for s in pair:
                    s.close()

    def disturber() -> None:
        k = 0
        while not stop.is_set():
            d = f"{name}:{k % 2}"
            stats = acc.memory.memory_stats(d)
            if stats:
                problems.extend(_consistent(stats))
            acc.memory.memory_snapshot()
            acc.memory.record_memory_history("all" if k % 2 else None, device=d)
            acc.memory.reset_peak_memory_stats(d)
            if k % 4 == 0:
                acc.memory.empty_cache()
            k += 1
        acc.memory.record_memory_history(None, device=f"{name}:0")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(n_threads)]
    other = threading.Thread(target=disturber)
    for t in threads:
        t.start()
    other.start()
    start.wait(_WAIT)
    for t in threads:
        t.join(_WAIT * 3)
    stop.set()
    other.join(_WAIT)
    assert not problems, problems[:5]
    for d in (0, 1):
        acc.synchronize(f"{name}:{d}")
    acc.memory.empty_cache()
    for d in (0, 1):
        stats = acc.memory.memory_stats(f"{name}:{d}")
        assert _consistent(stats) == []
        assert [stats[f"{k}.all.current"] for k in ("allocated_bytes", "reserved_bytes",
                                                    "allocation", "segment", "active")] \
            == [0] * 5


class _BarrierDefault(CpuBackend):
    """A cpu backend whose ``default_stream`` waits until two threads are inside it."""

    def __init__(self) -> None:
        super().__init__(num_devices=2, name="cpu_s27d")
        self.meet: threading.Barrier | None = None

    def default_stream(self, index: int) -> StreamHandle:
        meet = self.meet
        if meet is not None:
            meet.wait(_WAIT)
        return super().default_stream(index)


def test_first_uses_of_a_default_stream_in_two_threads_share_one_object() -> None:
    # both threads made a default stream object and the second replaced the first in the
    # shared table: the first thread's current_stream() was then an object that close()
    # closed (the shared default stream object is never closed) and that was not the one
    # current_stream() returned after
    b = _BarrierDefault()
    acc.backends.register("cpu_s27d", lambda: b)
    try:
        b.meet = threading.Barrier(2)
        results = [_in_thread(lambda: acc.current_stream("cpu_s27d:1")) for _ in range(2)]
        for t, _ in results:
            t.join(_WAIT)
        b.meet = None
        first, second = (out["value"] for _, out in results)
        assert first is second is acc.current_stream("cpu_s27d:1")
        first.close()
        assert not first.is_closed
    finally:
        acc.backends.unregister("cpu_s27d")
        b.close()
