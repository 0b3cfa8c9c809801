"""The per-thread table of current streams as rows (session 42): each thread keeps, per
backend name, one row of its current streams by device index, made at its first stream of
that backend and only grown in place; a ``with stream:`` entry keeps its row for the exit.
These tests hold the invariants that layout relies on, in both builds: a row grown under an
open block is the row that block's exit restores, a stream made on one thread is entered and
set on another without touching the first, and ``Stream.close()`` finds a stream current in
any thread's row or open block."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

import accelrt as acc
from accelrt import _device, backends
from tests.helpers import register_toy


_instances: dict[str, Any] = {}


@pytest.fixture
def toy() -> Iterator[str]:
    """A fresh three-device backend made the current accelerator (unregistered after)."""
    name, inst = register_toy(num_devices=3)
    _instances[name] = inst
    previous = acc.current_accelerator()
    acc.set_current_accelerator(name)
    try:
        yield name
    finally:
        if previous is not None:
            acc.set_current_accelerator(str(previous))
        backends.unregister(name)
        del _instances[name]


def _is_default(s: acc.Stream, name: str, index: int) -> bool:
    """``s`` is the default stream of device ``index`` of the toy backend ``name``."""
    return s.device_index == index and s.stream_id == _instances[name].default_stream(index)


def test_a_row_grown_under_an_open_block_is_the_row_its_exit_restores(toy: str) -> None:
    s0, s2 = acc.Stream(f"{toy}:0"), acc.Stream(f"{toy}:2")
    with s0:
        row = _device._tls.stream[toy]
        assert len(row) == 1   # the first stream of the backend in this thread: device 0 only
        with s2:   # device 2: the row grows, in place
            assert _device._tls.stream[toy] is row and len(row) == 3
            assert acc.current_stream() is s2 and acc.current_device_index() == 2
            assert acc.current_stream(f"{toy}:0") is s0
        assert acc.current_device_index() == 0
        assert acc.current_stream() is s0
        assert _is_default(acc.current_stream(f"{toy}:2"), toy, 2)
    # the outer exit wrote into the grown row: nothing of either block is left
    assert _is_default(acc.current_stream(f"{toy}:0"), toy, 0)
    assert _device._tls.stream[toy] is row and row == [None, None, None]
    assert acc.current_device_index() == 0


def test_out_of_order_exits_restore_each_device(toy: str) -> None:
    s0, s1 = acc.Stream(f"{toy}:0"), acc.Stream(f"{toy}:1")
    acc.set_device_index(2)
    s1.__enter__()                       # device 2 -> 1
    s0.__enter__()                       # device 1 -> 0 (its row grows in place)
    s1.__exit__(None, None, None)        # the outer block first: device 1's stream and the
    assert _is_default(acc.current_stream(f"{toy}:1"), toy, 1)   # device before it (2)
    assert acc.current_device_index() == 2
    assert acc.current_stream(f"{toy}:0") is s0
    s0.__exit__(None, None, None)        # back to what it replaced: device 1
    assert acc.current_device_index() == 1
    assert _is_default(acc.current_stream(f"{toy}:0"), toy, 0)


def test_a_stream_left_current_with_no_block_open_is_still_read(toy: str) -> None:
    """The readers skip the rows while no block is open unless a stream is pinned there:
    blocks of one device left out of order leave the outer one's entry current (its exit
    restores what it replaced), and set_stream() pins its stream; both are read after."""
    a, a2 = acc.Stream(f"{toy}:0"), acc.Stream(f"{toy}:0")
    with a:
        pass
    assert _device._tls.entered == [_device._NO_BLOCK]   # nothing pinned: rows skipped
    assert _is_default(acc.current_stream(), toy, 0)
    a.__enter__()
    a2.__enter__()
    a.__exit__(None, None, None)    # device 0's entry: what a replaced (none)
    a2.__exit__(None, None, None)   # device 0's entry: what a2 replaced (a), no block open
    assert acc.current_stream() is a and acc.current_stream(f"{toy}:0") is a
    assert _device._tls.entered == [_device._PINNED]
    acc.set_stream(a2)
    assert acc.current_stream() is a2


def test_set_stream_on_a_fresh_thread_is_read_after(toy: str) -> None:
    s2 = acc.Stream(f"{toy}:2")

    def other() -> tuple[bool, bool, int]:
        acc.set_stream(s2)   # no block: the stream is pinned in the thread's row
        return (acc.current_stream() is s2, _is_default(acc.current_stream(f"{toy}:0"), toy, 0),
                acc.current_device_index())

    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(other()))
    t.start()
    t.join(30)
    assert out == [(True, True, 2)]
    assert _is_default(acc.current_stream(f"{toy}:2"), toy, 2)   # not this thread's


def test_a_stream_made_on_one_thread_is_entered_and_set_on_another(toy: str) -> None:
    s1 = acc.Stream(f"{toy}:1")
    mine = acc.Stream(f"{toy}:0")
    acc.set_stream(mine)
    inside, leave = threading.Event(), threading.Event()
    seen: dict[str, Any] = {}

    def other() -> None:
        try:
            seen["before"] = (acc.current_stream(f"{toy}:1"), _device._tls.stream.get(toy))
            with s1:   # this thread's first stream of the backend: its row is made here
                seen["inside"] = (acc.current_stream(), acc.current_device_index())
                inside.set()
                leave.wait(30)
            seen["after"] = (acc.current_stream(f"{toy}:1"), acc.current_device_index())
            acc.set_stream(s1)
            seen["set"] = acc.current_stream()
        except BaseException as exc:  # noqa: BLE001 - reported to the test's thread
            seen["error"] = exc
            inside.set()

    t = threading.Thread(target=other)
    t.start()
    try:
        assert inside.wait(30)
        # the other thread's block changed neither this thread's streams nor its device
        assert acc.current_stream() is mine and acc.current_device_index() == 0
        assert _is_default(acc.current_stream(f"{toy}:1"), toy, 1)
    finally:
        leave.set()
        t.join(30)
    assert "error" not in seen, seen.get("error")
    assert _is_default(seen["before"][0], toy, 1) and seen["before"][1] is None
    assert seen["inside"] == (s1, 1)
    assert _is_default(seen["after"][0], toy, 1) and seen["after"][1] == 0
    assert seen["set"] is s1
    assert acc.current_stream() is mine   # still, after the other thread's set_stream


def test_close_finds_a_stream_in_another_threads_row_or_open_block(toy: str) -> None:
    s, other_s = acc.Stream(f"{toy}:2"), acc.Stream(f"{toy}:2")
    gates = [threading.Event() for _ in range(4)]   # set, checked; entered, checked
    errors: list[BaseException] = []

    def other() -> None:
        try:
            acc.set_stream(s)   # current in that thread's row (device 2: the row is grown)
            gates[0].set()
            gates[1].wait(30)
            acc.set_stream(other_s)
            with s:   # in that thread's open block only: its stream is other_s
                acc.set_stream(other_s)
                gates[2].set()
                gates[3].wait(30)
        except BaseException as exc:  # noqa: BLE001 - reported to the test's thread
            errors.append(exc)
            for g in gates:
                g.set()

    t = threading.Thread(target=other)
    t.start()
    try:
        assert gates[0].wait(30)
        with pytest.raises(acc.AcceleratorError, match="another thread"):
            s.close()
        gates[1].set()
        assert gates[2].wait(30)
        with pytest.raises(acc.AcceleratorError, match="another thread"):
            s.close()
    finally:
        for g in gates:
            g.set()
        t.join(30)
    assert not errors, errors
    s.close()   # no thread uses it now
    assert s.is_closed
