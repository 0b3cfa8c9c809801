"""The allocator's FastLock, both implementations (the pure build's queue token and the
compiled build's C type, where it is built): it excludes other threads, blocks them until
released, never blocks in its non-blocking forms, refuses a release of a lock nobody holds,
and a blocked acquire runs signal handlers (a subprocess, with a timeout)."""

from __future__ import annotations

import queue
import subprocess
import sys
import textwrap
import threading
import time
import weakref
from typing import Any

import pytest

from accelrt import memory
from accelrt.memory import _lock
from accelrt.memory._lock import PyFastLock
from tests.helpers.builds import both_builds_params


IMPLS = both_builds_params(PyFastLock, "accelrt.memory._lock_c", "FastLock")


def test_the_loaded_implementation_follows_the_build() -> None:
    assert (_lock.FastLock is not PyFastLock) == memory.compiled


@pytest.mark.parametrize("impl", IMPLS)
def test_lock_excludes_other_threads(impl: Any) -> None:
    lock = impl()
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


@pytest.mark.parametrize("impl", IMPLS)
def test_contended_acquire_waits_for_release(impl: Any) -> None:
    lock = impl()
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


@pytest.mark.parametrize("impl", IMPLS)
def test_many_threads_contending_lose_no_wakeup(impl: Any) -> None:
    # eight threads take the lock 2,000 times each by its three ways, most of the time
    # contended: every increment lands, and no thread is left asleep with the lock free
    lock = impl()
    box = [0]

    def work(seed: int) -> None:
        for i in range(2000):
            way = (i + seed) % 3
            if way == 0:
                lock.acquire()
            elif way == 1:
                while not lock.try_acquire():
                    time.sleep(0)
            else:
                while True:
                    try:
                        lock.acquire_nowait()
                        break
                    except queue.Empty:
                        time.sleep(0)
            box[0] += 1
            if i % 7 == 0:
                time.sleep(0)          # hand the GIL over while holding the lock
            lock.put(None) if i % 2 else lock.release()

    threads = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a thread never got the lock"
    assert box[0] == 16000 and not lock.locked()


@pytest.mark.parametrize("impl", IMPLS)
def test_non_blocking_forms_and_release_checks(impl: Any) -> None:
    lock = impl()
    assert lock.try_acquire() and lock.locked() and repr(lock) == "<FastLock locked>"
    assert not lock.try_acquire()
    with pytest.raises(queue.Empty):
        lock.acquire_nowait()
    lock.put(None)                     # (the allocator's release)
    lock.acquire_nowait()
    lock.release()
    with pytest.raises(RuntimeError, match="not held"):
        lock.release()                 # a second token would let two threads in
    assert not lock.locked() and lock.try_acquire()
    lock.release()
    ref = weakref.ref(lock)            # (finalizers keep weak references to the lock)
    assert ref() is lock


@pytest.mark.parametrize("impl", IMPLS)
def test_the_end_of_a_with_block_refuses_a_lock_released_inside_it(impl: Any) -> None:
    # the Python type's __exit__ put a second token in the queue: two threads could then hold
    # the lock at once (the C type's refused, as release() does)
    lock = impl()
    with pytest.raises(RuntimeError, match="not held"):
        with lock:
            lock.release()
    assert not lock.locked()
    assert lock.try_acquire() and not lock.try_acquire()    # one token, not two
    lock.release()


def test_the_c_put_refuses_a_lock_nobody_holds() -> None:
    c = IMPLS[1].values[0]
    if c is None:
        pytest.skip("the C FastLock is part of the compiled build, not built here")
    lock = c()
    with pytest.raises(RuntimeError, match="not held"):
        lock.put(None)
    assert not lock.locked()


@pytest.mark.parametrize("impl", ["PyFastLock", "FastLock"])
def test_a_blocked_acquire_runs_signal_handlers(impl: str) -> None:
    # another thread holds the lock; the main thread's acquire blocks until an alarm's
    # handler raises out of it (in a subprocess, with a timeout: a lock that ignored the
    # signal would hang)
    code = textwrap.dedent(f"""
        import signal, threading
        from accelrt.memory import _lock
        lock = _lock.{impl}()
        held, done = threading.Event(), threading.Event()
        def hold():
            lock.acquire(); held.set(); done.wait(); lock.release()
        t = threading.Thread(target=hold); t.start(); held.wait()
        def alarm(signum, frame):
            raise TimeoutError("interrupted")
        signal.signal(signal.SIGALRM, alarm)
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        try:
            lock.acquire()
        except TimeoutError as exc:
            print("raised", exc)
        done.set(); t.join()
        lock.acquire(); lock.release()
        print("ok", lock.locked())
        """)
    if not hasattr(__import__("signal"), "setitimer"):
        pytest.skip("no setitimer on this platform")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["raised", "interrupted", "ok", "False"]
