"""The core tells a backend that follows the current device (``Backend.follows_current_device``,
cuda's: its context follows as ``cudaSetDevice``) each change of a thread's current device, and
only the changes (session 41): ``set_current_device(index, create)`` with ``create`` False on
the exit of a device block only (torch's ``MaybeExchangeDevice``), before the change on entry
so that a failure leaves the thread where it was. Over a cpu backend that records the calls;
the cuda backend's answer to them is tests/backends/test_cuda_ctx_s41.py's.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

import accelrt as acc
from accelrt.backends.cpu import CpuBackend

NAME = "cpufollow41"


@pytest.fixture
def follow() -> Iterator[Any]:
    class Following(CpuBackend):
        follows_current_device = True

        def __init__(self) -> None:
            super().__init__(num_devices=3, name=NAME)
            self.calls: list[tuple[int, bool]] = []
            self.refuse: int | None = None

        def set_current_device(self, index: int, create: bool) -> None:
            if index == self.refuse:
                raise RuntimeError(f"no context on device {index}")
            if threading.current_thread() is threading.main_thread():
                self.calls.append((index, create))

    acc.backends.register(NAME, Following)
    before = acc.current_accelerator()
    acc.set_current_accelerator(NAME)
    try:
        yield acc.backends.get_backend(NAME)
    finally:
        acc.set_current_accelerator(before.type if before is not None else "cpu")
        acc.backends.unregister(NAME)


def _taken(b: Any) -> list[tuple[int, bool]]:
    calls, b.calls = b.calls, []
    return calls


def test_set_device_calls_the_hook_on_a_change_only(follow: Any) -> None:
    acc.set_device_index(0)
    assert _taken(follow) == []                       # already device 0
    acc.set_device_index(1)
    acc.set_device_index(1)
    acc.set_device_index(f"{NAME}:2")
    acc.set_device_index(0)
    assert _taken(follow) == [(1, True), (2, True), (0, True)]


def test_device_blocks_create_on_entry_and_not_on_exit(follow: Any) -> None:
    with acc.device_index(0):
        pass
    assert _taken(follow) == []
    with acc.device_index(1):
        with acc.device_index(2):
            with acc.device_index(2):
                pass
        assert acc.current_device_index() == 1
    assert _taken(follow) == [(1, True), (2, True), (1, False), (0, False)]
    with pytest.raises(KeyError):
        with acc.device_index(2):
            raise KeyError("inside")
    assert _taken(follow) == [(2, True), (0, False)]
    with acc.device_index(1):
        acc.set_device_index(0)            # set inside: the exit changes nothing
    assert _taken(follow) == [(1, True), (0, True)]


def test_stream_blocks_and_set_stream(follow: Any) -> None:
    s0, s1 = acc.Stream(f"{NAME}:0"), acc.Stream(f"{NAME}:1")
    with s0:
        pass
    assert _taken(follow) == []
    with s1:
        assert acc.current_device_index() == 1
    assert _taken(follow) == [(1, True), (0, True)]    # torch's setDeviceIndex both ways
    acc.set_stream(s1)
    acc.set_stream(s0)
    assert _taken(follow) == [(1, True), (0, True)]


def test_a_refused_switch_changes_nothing(follow: Any) -> None:
    follow.refuse = 2
    s2 = acc.Stream(f"{NAME}:2")
    for enter in (lambda: acc.set_device_index(2), lambda: acc.device_index(2).__enter__(),
                  s2.__enter__, lambda: acc.set_stream(s2)):
        with pytest.raises(RuntimeError, match="no context on device 2"):
            enter()
        assert acc.current_device_index() == 0
        assert acc.current_stream() != s2
    with acc.device_index(1):   # no open entry was left behind
        pass
    assert acc.current_device_index() == 0
    assert _taken(follow) == [(1, True), (0, False)]


def test_other_threads_start_on_device_0(follow: Any) -> None:
    acc.set_device_index(1)
    seen: list[int] = []
    t = threading.Thread(target=lambda: seen.append(acc.current_device_index()))
    t.start()
    t.join(30)
    acc.set_device_index(0)
    assert seen == [0]
    assert _taken(follow) == [(1, True), (0, True)]
