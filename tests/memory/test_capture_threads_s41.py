"""The caching allocator's capture rules apply per thread, as torch 2.15's (s41).

torch 2.15's allocator asks ``is_capture_context()`` before it skips event processing, defers
a free of a block used on other streams, or skips the cache release before an out-of-memory
error: a graph captures on the device (``markCaptureBegin``) *and* the calling thread's
current stream is capturing (``cudaStreamGetCaptureInfo``). accelrt applied the rules to every
thread while any graph captured on the device, so another thread's ordinary work there had
its frees deferred, its events left unprocessed and its out-of-memory retry skipped.

Each test runs a capture in thread A (on a side stream, ``thread_local`` mode, so thread B's
stream waits are not refused) and thread B's work on the default stream in between, ordered
by events and barriers; a gate (``tests/helpers/gates.py``) keeps a stream busy.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator

import pytest

import accelrt as acc
from accelrt import backends, memory
from accelrt.backends.cpu import CpuBackend
from accelrt.memory._registry import get_allocator

from helpers.gates import Gate

MiB = 1 << 20
_names = itertools.count()
TIMEOUT = 30.0


@pytest.fixture
def dev() -> Iterator[str]:
    """A fresh one-device cpu backend, the current accelerator for the test: ``name:0``."""
    name = f"capthr{next(_names)}"
    backends.register(name, lambda: CpuBackend(num_devices=1, async_streams=True, name=name))
    acc.set_current_accelerator(name)
    yield f"{name}:0"


def _during_capture(d: str, other: Callable[[], None],
                    inside: Callable[[], None] | None = None) -> None:
    """Thread A captures a graph on a side stream of ``d`` (running ``inside`` in the capture,
    after ``other``) while the calling thread runs ``other``; the capture ends after both."""
    begun, done = threading.Event(), threading.Event()
    failure: list[BaseException] = []

    def capture() -> None:
        try:
            side, g = acc.Stream(d), acc.Graph(capture_error_mode="thread_local")
            with side, g:
                begun.set()
                if not done.wait(TIMEOUT):
                    raise TimeoutError("thread B did not finish")
                if inside is not None:
                    inside()
                assert acc.current_stream(d).is_capturing()
                acc.empty(16, dtype="uint8", device=d).fill_(1)    # (a graph not empty)
            g.reset()
            side.close()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            failure.append(exc)
        finally:
            begun.set()

    t = threading.Thread(target=capture)
    t.start()
    try:
        assert begun.wait(TIMEOUT)
        assert not failure, failure
        assert not acc.current_stream(d).is_capturing()
        other()
    finally:
        done.set()
        t.join(TIMEOUT)
    assert not t.is_alive()
    if failure:
        raise failure[0]


def test_another_threads_free_records_its_events_and_its_malloc_processes_them(
        dev: str) -> None:
    """(1) and (3): while A captures, B frees a block used on a busy stream: the free records
    an event there at once (torch: ``insert_events``), the block is not reused while the
    stream is busy, and B's next allocation after the event completed processes it and reuses
    the block. accelrt deferred B's free until A's capture ended."""
    use = acc.Stream(dev)
    result: dict[str, bool] = {}

    def b_thread() -> None:
        with Gate() as gate:
            x = acc.empty(1000, dtype="uint8", device=dev)
            ptr = x.data_ptr()
            use._b.launch_host_func(use.device_index, gate, use.stream_id)   # busy
            x.record_stream(use)
            x.close()
            y = acc.empty(1000, dtype="uint8", device=dev)
            result["reused_while_busy"] = y.data_ptr() == ptr
            y.close()
            gate.open()
            use.synchronize()                       # its event has completed
            z = acc.empty(1000, dtype="uint8", device=dev)
            result["reused_after"] = z.data_ptr() == ptr
            z.close()

    _during_capture(dev, b_thread)
    assert result == {"reused_while_busy": False, "reused_after": True}
    use.close()


def test_another_threads_out_of_memory_releases_the_cache_and_retries(dev: str) -> None:
    """(2): while A captures, B's request past the memory fraction finds B's cached 20 MiB
    segment in the way: torch releases the cache and retries (``!is_capture_context()``), so
    the request succeeds. accelrt skipped the release while any graph captured and raised."""
    total = memory.get_memory_info(dev)[1]
    out: dict[str, object] = {}

    def b_thread() -> None:
        acc.empty(3 * MiB, dtype="uint8", device=dev).close()   # a cached 20 MiB segment
        memory.set_per_process_memory_fraction(30 * MiB / total, dev)
        try:
            x = acc.empty(25 * MiB, dtype="uint8", device=dev)  # 20 + 26 MiB > 30 MiB
        except acc.OutOfMemoryError as exc:
            out["error"] = exc
        else:
            out["reserved"] = memory.memory_reserved(dev)
            x.close()
        finally:
            memory.set_per_process_memory_fraction(1.0, dev)

    _during_capture(dev, b_thread)
    assert "error" not in out, out
    assert out["reserved"] == 26 * MiB
    stats = memory.memory_stats(dev)
    assert (stats["num_alloc_retries"], stats["num_ooms"]) == (1, 0)


def test_another_threads_empty_cache_empties_the_default_pool(dev: str) -> None:
    """While A captures, B's ``empty_cache()`` releases the default pool's cached segments
    (torch's ``release_cached_blocks`` skips them only in a capture context); accelrt kept
    them while any graph captured."""
    reserved: list[int] = []

    def b_thread() -> None:
        acc.empty(1000, dtype="uint8", device=dev).close()
        reserved.append(memory.memory_reserved(dev))
        memory.empty_cache()
        reserved.append(memory.memory_reserved(dev))

    _during_capture(dev, b_thread)
    assert reserved == [2 * MiB, 0]


def test_the_capturing_thread_keeps_the_capture_rules(dev: str) -> None:
    """The converse: in A, whose current stream captures, a free of a block used on another
    stream waits for the capture's end (no event recorded: torch's
    ``needs_events_deferred_until_no_capture``), and its ``empty_cache()`` leaves the default
    pool alone; once the capture ended, the next allocation records the deferred events."""
    use = acc.Stream(dev)
    a = get_allocator(acc.current_stream(dev)._b, 0)
    seen: dict[str, object] = {}

    def b_thread() -> None:
        acc.empty(1000, dtype="uint8", device=dev).close()   # B's cached 2 MiB segment

    def in_capture() -> None:
        x = acc.empty(1000, dtype="uint8", device=dev)
        x.record_stream(use)
        x.close()
        seen["deferred"] = len(a._stream_frees.deferred)
        memory.empty_cache()
        seen["reserved"] = memory.memory_reserved(dev)

    _during_capture(dev, b_thread, in_capture)
    assert seen["deferred"] == 1
    assert seen["reserved"] == 2 * MiB + 2 * MiB     # B's segment and the graph's pool
    acc.empty(1000, dtype="uint8", device=dev).close()
    assert len(a._stream_frees.deferred) == 0
    use.close()


def test_a_deferred_free_waits_while_another_thread_processes_events(dev: str) -> None:
    """A free deferred by the capturing thread records its events only once no graph
    captures on the device: another thread's allocation meanwhile processes the events
    already recorded but leaves it deferred (a stream it was used on may be the capturing
    one; docs/differences.md)."""
    use = acc.Stream(dev)
    a = get_allocator(acc.current_stream(dev)._b, 0)
    left: dict[str, int] = {}
    freed, done = threading.Event(), threading.Event()

    def capture() -> None:
        side, g = acc.Stream(dev), acc.Graph(capture_error_mode="thread_local")
        with side, g:
            x = acc.empty(1000, dtype="uint8", device=dev)
            x.record_stream(use)
            x.close()
            freed.set()
            done.wait(TIMEOUT)
            acc.empty(16, dtype="uint8", device=dev).fill_(1)    # (a graph not empty)
        g.reset()
        side.close()

    t = threading.Thread(target=capture)
    t.start()
    try:
        assert freed.wait(TIMEOUT)
        acc.empty(1000, dtype="uint8", device=dev).close()
        left["during"] = len(a._stream_frees.deferred)
    finally:
        done.set()
        t.join(TIMEOUT)
    assert not t.is_alive()
    acc.empty(1000, dtype="uint8", device=dev).close()
    assert (left["during"], len(a._stream_frees.deferred)) == (1, 0)
    use.close()
