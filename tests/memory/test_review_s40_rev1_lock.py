"""Review of the s40 merges (rev1): the allocator lock's contention hook and its polling wait
(``memory/_lock.py``, ``_lock_c.c``) under stress, in both builds. Many threads take and give
back one lock; some of them are told by the hook to poll (as host functions are), the others
sleep until a release wakes them. No waiter may sleep for ever (a lost wakeup: the C type's
``posted`` token taken by a poller whose slice ended, a release that posts nobody), no two
may hold the lock at once, and a hook that raises leaves the lock and its waiters as they
were. Run in a subprocess with a timeout: a lost wakeup is a hang."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import accelrt
from accelrt.memory._lock import PyFastLock
from tests.helpers.builds import both_builds_params

IMPLS = both_builds_params(PyFastLock, "accelrt.memory._lock_c", "FastLock")
#: the folder holding the accelrt under test (the source tree, or the installed compiled build
#: CI tests, whose C lock the source tree lacks): the child imports the same one
SRC = str(Path(accelrt.__file__).resolve().parents[1])

CHILD = textwrap.dedent("""
    import sys, threading
    from accelrt.memory import _lock
    if sys.argv[1] == "c":
        from accelrt.memory._lock_c import FastLock
    else:
        FastLock = _lock.PyFastLock
    N_POLL, N_SLEEP, ROUNDS = 6, 6, 400
    lock = FastLock()
    count = [0]
    inside = [0]
    bad = []
    raised = [0]
    calls = {}

    def hook(lk):
        name = threading.current_thread().name
        calls[name] = calls.get(name, 0) + 1
        if name.startswith("raise"):
            if calls[name] % 2 == 1:   # every other question: give up waiting
                raised[0] += 1
                raise LookupError("the hook refuses")
        return name.startswith(("poll", "raise"))   # pollers ask again every slice
    _lock.set_contention_hook(hook)

    def work():
        for i in range(ROUNDS):
            while True:
                try:
                    lock.acquire()
                    break
                except LookupError:
                    continue        # the hook raised: the lock must still be usable
            inside[0] += 1
            if inside[0] != 1:
                bad.append(inside[0])
            x = count[0]
            if i % 3 == 0:
                threading.Event().wait(0.0002)   # hold it across a slice of the pollers
            count[0] = x + 1
            inside[0] -= 1
            lock.release()

    names = ([f"poll{k}" for k in range(N_POLL)] + [f"sleep{k}" for k in range(N_SLEEP)]
             + [f"raise{k}" for k in range(2)])
    threads = [threading.Thread(target=work, name=n) for n in names]
    lock.acquire()          # every thread first finds it held: each asks the hook (a gate)
    for t in threads:
        t.start()
    gate = threading.Event()
    for _ in range(60000):
        if len(calls) == len(names) and all(calls[n] >= 2 for n in names if n[0] == "r"):
            break
        gate.wait(0.001)
    assert len(calls) == len(names), sorted(calls)
    lock.release()
    for t in threads:
        t.join()
    assert not bad, bad
    assert count[0] == len(names) * ROUNDS, count[0]
    assert not lock.locked()
    assert raised[0] > 0, "the raising hook never ran: no contention"
    lock.acquire(); lock.release()    # still usable, nobody left waiting
    print("OK", count[0], raised[0])
""")


@pytest.mark.parametrize("impl", IMPLS)
def test_many_waiters_pollers_and_a_raising_hook_never_lose_a_wakeup(impl: type) -> None:
    kind = "python" if impl is PyFastLock else "c"
    proc = subprocess.run([sys.executable, "-c", CHILD, kind], capture_output=True, text=True,
                          timeout=120, env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("OK 5600"), proc.stdout


@pytest.mark.parametrize("impl", IMPLS)
def test_stream_waits_is_restored_when_the_wait_raises(impl: type) -> None:
    from accelrt.memory._lock import StreamWait
    lock = impl()
    with pytest.raises(KeyError):
        with lock, StreamWait(lock), StreamWait(lock):
            assert lock.stream_waits == 2
            raise KeyError("a free that failed")
    assert lock.stream_waits == 0 and not lock.locked()
