"""A backend failure the allocator keeps and raises after finishing its work (the events of
a free after ``record_stream``) is freed with its traceback as soon as the caller drops it:
no cycle through a local of the raising frame (error -> traceback -> frame -> error), which
kept the frames, and what they held, until the garbage collector ran (s32)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from accelrt import _stream
from accelrt.memory._allocator import DeviceCachingAllocator
from accelrt.memory._config import AllocatorConfig
from accelrt.testing._simulated import SimulatedBackend


class _Injected(RuntimeError):
    """The injected failure (a subclass: a weak reference watches it)."""


class _FailingRecord(SimulatedBackend):
    """``event_record`` raises (the stream stays valid, so the failure is kept and raised);
    the streams in ``capturing`` report that they capture."""

    def __init__(self) -> None:
        super().__init__()
        self.capturing: set[int] = set()

    def event_record(self, index: int, event: int, stream: int) -> None:
        raise _Injected("injected event_record failure")

    def stream_is_capturing(self, index: int, stream: int) -> bool:
        return stream in self.capturing


@pytest.fixture
def no_gc() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _dropped(call: object) -> weakref.ref[BaseException]:
    """A weak reference to the error ``call()`` raises, once nothing here holds it."""
    try:
        call()   # type: ignore[operator]
    except _Injected as exc:
        assert "injected event_record failure" in str(exc)
        return weakref.ref(exc)
    raise AssertionError("no error")


def test_a_free_whose_event_fails_leaves_no_cycle(no_gc: None) -> None:
    b = _FailingRecord()
    alloc = DeviceCachingAllocator(b, 0, AllocatorConfig())
    s = b.stream_create(0, 0)
    p = alloc.malloc(1 << 20, 0)
    alloc.record_stream(p, s)
    ref = _dropped(lambda: alloc.free(p))          # insert_events raised its kept error
    assert ref() is None
    assert alloc.memory_allocated() == 0           # the block was freed all the same
    b.stream_destroy(0, s)
    alloc.empty_cache()


def test_a_deferred_free_whose_event_fails_leaves_no_cycle(no_gc: None) -> None:
    # a free during a capture waits for its end; its events are recorded by the next
    # allocator call after it (insert_deferred, which keeps the error of each block)
    b = _FailingRecord()
    alloc = DeviceCachingAllocator(b, 0, AllocatorConfig())
    s = b.stream_create(0, 0)
    cap = b.stream_create(0, 0)
    b.capturing.add(cap)
    alloc.create_pool((1, 1))
    alloc.begin_allocate_to_pool((1, 1), capture=True)
    p = alloc.malloc(1 << 20, 0)
    alloc.record_stream(p, s)
    with _stream._wrap(b, 0, cap):     # the calling thread's current stream captures
        alloc.free(p)                              # deferred: the capture is on
    alloc.end_allocate_to_pool((1, 1))
    ref = _dropped(lambda: alloc.malloc(512, 0))
    assert ref() is None
    assert alloc.memory_allocated() == 0
    alloc.release_pool((1, 1))
    b.stream_destroy(0, s)
    b.stream_destroy(0, cap)
    alloc.empty_cache()
