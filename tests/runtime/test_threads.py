"""Per-thread current device and stream: threads never disturb each other."""

from __future__ import annotations

import threading

import pytest
from helpers import run_in_thread

import accelrt as acc
from accelrt.backends.cpu import CpuBackend


@pytest.fixture
def cpu4() -> str:
    acc.backends.register("cpu4", lambda: CpuBackend(num_devices=4, name="cpu4"), replace=True)
    acc.set_current_accelerator("cpu4")
    return "cpu4"


def test_new_thread_starts_on_device_zero_with_default_stream(cpu4: str) -> None:
    s = acc.Stream(2)
    acc.set_stream(s)
    seen = run_in_thread(lambda: (acc.current_device_index(), acc.current_stream()))
    assert seen[0] == 0
    assert seen[1] == acc.current_stream(0) and seen[1] != s
    assert acc.current_device_index() == 2 and acc.current_stream() == s


def test_two_threads_with_different_devices_and_streams(cpu4: str) -> None:
    barrier = threading.Barrier(2, timeout=20)
    errors: list[BaseException] = []
    results: dict[int, list[tuple[int, int, int]]] = {1: [], 3: []}

    def worker(dev: int) -> None:
        try:
            s = acc.Stream(dev)
            acc.set_device_index(dev)
            barrier.wait()
            for _ in range(200):
                with s:
                    cur = acc.current_stream()
                    results[dev].append((acc.current_device_index(), cur.device_index,
                                         int(cur == s)))
                with acc.device_index(dev ^ 2):  # 1 <-> 3
                    assert acc.current_device_index() == dev ^ 2
                assert acc.current_device_index() == dev
                assert acc.current_stream() != s
            barrier.wait()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=worker, args=(d,)) for d in (1, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    for dev in (1, 3):
        assert results[dev] == [(dev, dev, 1)] * 200
    assert acc.current_device_index() == 0  # the main thread was never touched


def test_same_stream_entered_in_two_threads(cpu4: str) -> None:
    shared = acc.Stream(1)
    inside = threading.Event()
    release = threading.Event()
    out: dict[str, object] = {}

    def other() -> None:
        with shared:
            inside.set()
            release.wait(20)
            out["other"] = acc.current_stream()
        out["after"] = acc.current_stream(1)

    t = threading.Thread(target=other)
    t.start()
    assert inside.wait(20)
    with shared:
        with shared:
            assert acc.current_stream() == shared
        assert acc.current_stream() == shared
    release.set()
    t.join(20)
    assert acc.current_stream(1) != shared and acc.current_device_index() == 0
    assert out["other"] == shared and out["after"] != shared


def test_set_stream_in_thread_does_not_leak(cpu4: str) -> None:
    before = acc.current_stream()

    def f() -> bool:
        s = acc.Stream()
        acc.set_stream(s)
        return acc.current_stream() == s

    assert run_in_thread(f) is True
    assert acc.current_stream() == before


def test_events_across_threads() -> None:
    e = acc.Event("cpu", enable_timing=True)
    run_in_thread(e.record)
    e.synchronize()
    assert e.query() and e.event_id != 0
    end = acc.Event("cpu", enable_timing=True)
    end.record()
    end.synchronize()
    assert e.elapsed_time(end) >= 0.0
