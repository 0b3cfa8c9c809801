"""The allocator's FastLock excludes other threads and blocks them until released."""

from __future__ import annotations

import threading
import time

from accelrt.memory._lock import FastLock


def test_lock_excludes_other_threads() -> None:
    lock = FastLock()
    box = [0]

    def work() -> None:
        for _ in range(300):
            with lock:
                v = box[0]
                time.sleep(0)          # invite a thread switch inside the critical section
                box[0] = v + 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert box[0] == 1200
    assert not lock.locked()


def test_contended_acquire_waits_for_release() -> None:
    lock = FastLock()
    lock.acquire()
    got = threading.Event()

    def take() -> None:
        lock.acquire()
        got.set()
        lock.release()

    t = threading.Thread(target=take)
    t.start()
    assert not got.wait(0.05)          # blocked while held
    assert lock.locked()
    lock.release()
    assert got.wait(5)
    t.join()
    assert not lock.locked() and repr(lock) == "<FastLock unlocked>"
