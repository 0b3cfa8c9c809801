"""Review of s41's merges (rev1): the per-thread capture rules leak nothing under stress.

Two capturing threads (one per device, on side streams, ``thread_local`` mode) capture graphs
over and over, freeing blocks used on another stream inside the capture (deferred frees),
sometimes aborting the capture with an exception; meanwhile three threads allocate and free
on the same devices: on their default streams, inside ``with stream:`` blocks, through
``use_mem_pool`` and with ``record_stream`` on streams of theirs. Each run is one seed of
the operations' choices. Afterwards every block is back: ``memory_allocated`` and (after
``empty_cache``) ``memory_reserved`` are 0 on both devices and no free is left deferred.
The captures are paced by the workers (:class:`Pace`: one capture per operation of a worker):
unpaced, the capturing threads took the GIL and the allocator's locks back from the workers
over and over (thousands of captures, 4-8 s in the compiled build, for 600 operations).
No bug was found this way (the runs pass on main too): the test keeps the rules honest.
"""

from __future__ import annotations

import itertools
import random
import threading

import pytest

import accelrt as acc
from accelrt import backends, memory
from accelrt.backends.cpu import CpuBackend
from accelrt.memory._registry import get_allocator

_names = itertools.count()
TIMEOUT = 60.0
#: operations a worker may run ahead of the captures
LEAD = 4


class Pace:
    """A gate between the threads: each operation of a worker lets one capture start, and
    a worker waits while :data:`LEAD` operations' captures are yet to start; the capturers
    wait for one (or for the end) before each capture. So the captures run all along the
    workers' operations, about one per operation."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._tickets = 0
        self._stopped = False
        #: a worker waited :data:`TIMEOUT` for the captures (the test fails)
        self.stalled = False

    def tick(self) -> None:
        with self._cond:
            self._tickets += 1
            self._cond.notify_all()   # (workers wait on the same condition)
            if not self._cond.wait_for(lambda: self._tickets < LEAD or self._stopped,
                                       TIMEOUT):
                self.stalled = self._stopped = True   # (a capturer died)
                self._cond.notify_all()

    def take(self) -> bool:
        """Wait for a ticket and take it; False once :meth:`stop` was called."""
        with self._cond:
            self._cond.wait_for(lambda: self._tickets > 0 or self._stopped, TIMEOUT)
            if self._stopped or self._tickets == 0:
                return False
            self._tickets -= 1
            self._cond.notify_all()
            return True

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()


def _capturer(dev: str, seed: int, pace: Pace, errors: list[str]) -> None:
    r = random.Random(seed)
    side, other = acc.Stream(dev), acc.Stream(dev)
    while pace.take():
        g = acc.Graph(capture_error_mode="thread_local")
        try:
            with side, g:
                keep = []
                for _ in range(r.randrange(1, 6)):
                    x = acc.empty(r.choice([64, 4096, 3 << 20]), dtype="uint8", device=dev)
                    x.fill_(1)
                    if r.random() < 0.5:
                        x.record_stream(other)
                    if r.random() < 0.5:
                        x.close()
                    else:
                        keep.append(x)
                if r.random() < 0.2:
                    raise KeyError("abort the capture")
                del keep
        except KeyError:
            pass
        except Exception as exc:  # noqa: BLE001 - reported by the test
            errors.append(f"capture on {dev}: {exc!r}")
        g.reset()
    side.close()
    other.close()


def _worker(dev: str, seed: int, pace: Pace, errors: list[str]) -> None:
    r = random.Random(seed)
    streams = [acc.Stream(dev) for _ in range(2)]
    pool = memory.MemPool()
    try:
        for _ in range(200):
            op = r.random()
            if op < 0.2:
                with memory.use_mem_pool(pool, dev):
                    acc.empty(r.choice([64, 8192]), dtype="uint8", device=dev).close()
            elif op < 0.4:
                with streams[0]:
                    y = acc.empty(512, dtype="uint8", device=dev)
                    y.record_stream(streams[1])
                    y.close()
            else:
                y = acc.empty(r.choice([64, 4096, 1 << 21]), dtype="uint8", device=dev)
                if r.random() < 0.5:
                    y.record_stream(r.choice(streams))
                y.close()
            pace.tick()
    except Exception as exc:  # noqa: BLE001 - reported by the test
        errors.append(f"worker on {dev}: {exc!r}")
    for s in streams:
        s.synchronize()
        s.close()


@pytest.mark.parametrize("seed", [1, 2])
def test_captures_and_other_threads_leave_no_block_behind(seed: int) -> None:
    name = f"rev1cap{next(_names)}"
    backends.register(name, lambda: CpuBackend(num_devices=2, async_streams=True, name=name))
    acc.set_current_accelerator(name)
    devs = [f"{name}:0", f"{name}:1"]
    pace = Pace()
    errors: list[str] = []
    caps = [threading.Thread(target=_capturer, args=(d, seed * 10 + i, pace, errors))
            for i, d in enumerate(devs)]
    workers = [threading.Thread(target=_worker, args=(d, seed * 100 + k, pace, errors))
               for k, d in enumerate([devs[0], devs[0], devs[1]])]
    for t in caps + workers:
        t.start()
    for t in workers:
        t.join(TIMEOUT)
    pace.stop()
    for t in caps:
        t.join(TIMEOUT)
    assert not any(t.is_alive() for t in caps + workers), "a thread hung"
    assert not pace.stalled, "the captures stopped while the workers ran"
    assert errors == []
    for i, d in enumerate(devs):
        acc.synchronize(d)
        acc.empty(1, device=d).close()   # processes the completed events
        a = get_allocator(acc.current_stream(d)._b, i)
        assert len(a._stream_frees.deferred) == 0
        assert memory.memory_allocated(d) == 0
        with acc.device_index(i):
            memory.empty_cache()
        assert memory.memory_reserved(d) == 0
