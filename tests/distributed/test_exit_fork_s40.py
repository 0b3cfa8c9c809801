"""MPI sends at interpreter exit, and accelrt.distributed in a child made by ``os.fork()``
(session 40).

* A daemon thread blocked in ``Work.wait()`` on a send that no rank receives (64 MiB: not sent
  eagerly) met mpi4py's ``MPI_Finalize`` at exit: SIGSEGV or abort (exit code 139 or 134 on
  one rank, mpiexec's 11 or 6; 9 runs in 10 on two ranks). MPICH's ``MPI_Cancel`` ignores
  sends ("cannot cancel send"), so such a send is waited for beside a wake-up receive that the
  exit hook completes after a grace: the thread's ``wait()`` raises ``DistError``. A receiver
  that comes within the grace still completes the send, and an ``isend`` nobody waited for is
  still delivered.
* A lock of accelrt.distributed that another thread held at the fork stayed held in the child
  (a group's ``_flight_lock``: ``destroy_process_group()`` hung; a request's lock:
  ``wait()`` hung; a HashStore's condition, a ``Future``'s lock, the watchdog's event).
  They are re-made free in the child (``accelrt._fork.reinit_after_fork``); a point-to-point
  work the parent posted raises ``DistError`` in the child instead of waiting for a landing
  that a thread of the parent had begun.
* MPI in a forked child: a child's barrier paired with the peers' own barrier, its send
  reached the peer as the parent's, and its exit finalized MPI (the job hung under mpiexec;
  a singleton's parent crashed at its own exit). Every MPI call of accelrt.distributed raises
  ``DistError`` in a forked child, and only the process that initialized MPI finalizes it.

Every scenario runs in a subprocess (one rank) or under mpiexec (two ranks) with a timeout.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.forks import run_fork_scenario

HAVE_MPI = importlib.util.find_spec("mpi4py") is not None
pytestmark = [
    pytest.mark.skipif(not HAVE_MPI, reason="mpi4py is not installed (pip install 'accelrt[mpi]')"),
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork"),
]

# Shared by the exit scenarios: a Gate on an mpi4py request sets `inside` when the thread that
# waits on it reaches its blocking MPI call (MPI_Wait, or MPI_Waitany after a Test that found
# the send not done), and an exit hook registered before accelrt.distributed is imported (so
# it runs after accelrt's) joins the waiting threads, so that what they print is not lost.
# The scenarios run as plain scripts (`python -c`, or mpiexec without the runner): the runner
# (-m accelrt.distributed.run) imports accelrt.distributed first, so that the join ran before
# accelrt's exit hook woke the threads and waited out its own 20 s (session 42: the two-rank
# scenario took 21 s); the assert makes that mistake fail at once.
# The sends are 1 MiB: enough not to be sent eagerly (MPICH with UCX sends 256 KiB by
# rendezvous already), which the scenarios check (a send that completed at once would never
# set `inside`).
_EXIT_PRELUDE = r'''
import atexit, sys, threading
assert "accelrt.distributed" not in sys.modules, "the join hook must run after accelrt's"
threads = []
atexit.register(lambda: [t.join(20) for t in threads])
import numpy as np
from mpi4py import MPI
import accelrt.distributed as dist
from accelrt.distributed import _mpi

inside = threading.Event()


def say(line):   # one write: mpiexec merges the ranks' output (PYTHONUNBUFFERED: print's
    sys.stdout.write(line + "\n")   # pieces are writes of their own)
    sys.stdout.flush()


class Gate(MPI.Request):
    def Wait(self, status=None):
        inside.set()
        return super().Wait(status)

    def Test(self, status=None):
        done = super().Test(status)
        if not done:
            inside.set()
        return done


def wait_in_a_daemon_thread(w, name):
    w._request._req = Gate(w._request._req)

    def run():
        try:
            w.wait()
            say(f"{name}: returned")
        except Exception as exc:
            say(f"{name}: {type(exc).__name__}: {exc}")

    threads.append(threading.Thread(target=run, daemon=True))
    threads[-1].start()
    assert inside.wait(30)
'''


def _python(script: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              timeout=timeout, env=dict(os.environ, ACCELRT_ACCELERATOR="cpu"))
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the scenario hung:\n{exc.stdout!r:.2000}\n{exc.stderr!r:.2000}")


def _launch(tmp_path: Path, script: str, runner: bool = True) -> tuple[int, str]:
    from rank_cases import write_script
    from test_distributed import MPIEXEC, launch
    if MPIEXEC is None:
        pytest.skip("needs mpiexec (pip install 'accelrt[mpi]')")
    rc, out, _ = launch(2, str(write_script(tmp_path, script)), runner=runner, timeout=120)
    return rc, out


# ------------------------------------------------------------------ sends at exit
def test_exit_while_a_daemon_thread_waits_on_a_send_nobody_receives() -> None:
    proc = _python(_EXIT_PRELUDE + r'''
dist.init_process_group("cpu:mpi", timeout=60)
_mpi.EXIT_GRACE = 0.5
w = dist.isend(np.ones(1 << 18, np.float32), 0, tag=98)   # 1 MiB to itself, never received
wait_in_a_daemon_thread(w, "waiter")
print("exiting", flush=True)
''')
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-3000:])
    assert "exiting" in proc.stdout
    assert ("waiter: DistError: the send was abandoned at interpreter exit: no rank had "
            "matched it (the exit waits up to EXIT_GRACE = 0.5 s for that)") in proc.stdout, (
        proc.stdout)


def test_a_send_received_within_the_grace_completes_and_an_unwaited_isend_arrives(
        tmp_path: Path) -> None:
    # rank 1 receives only once rank 0's exit is waiting out the grace (told by a message
    # that rank 0's exit hook sends before it waits): the waited send completes then, and the
    # isend whose handle was dropped at once is delivered while rank 0 finalizes MPI
    rc, out = _launch(tmp_path, _EXIT_PRELUDE + r'''
dist.init_process_group("cpu:mpi", timeout=60)
r = dist.get_rank()
note = MPI.COMM_WORLD.Dup()
N = 1 << 18
if r == 0:
    dist.isend(np.arange(N, dtype=np.float32), 1, tag=1)      # fire and forget
    w = dist.isend(np.full(N, 2.0, np.float32), 1, tag=2)
    wake_at_exit = _mpi._MpiRequest._wake_at_exit

    def exiting(self, deadline):
        note.Send(np.zeros(1), 1, tag=0)
        wake_at_exit(self, deadline)

    _mpi._MpiRequest._wake_at_exit = exiting
    wait_in_a_daemon_thread(w, "rank 0 waiter")
    while w._request not in _mpi._WAITING:   # (it reaches MPI_Waitany: the exit sees it)
        pass
else:
    note.Recv(np.zeros(1), 0, tag=0)
    a, b = np.zeros(N, np.float32), np.zeros(N, np.float32)
    dist.recv(b, 0, tag=2)
    dist.recv(a, 0, tag=1)
    say(f"rank 1 received {bool((b == 2).all())} "
        f"{bool((a == np.arange(N, dtype=np.float32)).all())}")
print(f"rank {r} exiting", flush=True)
''', runner=False)
    assert rc == 0, out[-3000:]
    assert "rank 0 waiter: returned" in out and "rank 1 received True True" in out, out[-3000:]


# ------------------------------------------------------------------ locks held at the fork
_LOCKS_AT_FORK = r'''
    import threading
    import numpy as np
    import accelrt.distributed as dist
    from accelrt.distributed import Future, HashStore
    from accelrt.distributed._work import WATCHDOG

    dist.init_process_group("cpu:mpi", timeout=60)
    g = dist.group.WORLD
    release = threading.Event()


    def hold(lock):
        """a thread holds ``lock`` from now until the children are done"""
        held = threading.Event()

        def run():
            with lock:
                held.set()
                release.wait()

        threading.Thread(target=run, daemon=True).start()
        assert held.wait(30)


    # a receive a thread waits on (in MPI_Wait: it holds the request's lock); a staged receive
    # whose data a thread is landing (it holds the work's _finishing)
    got = np.zeros(4, np.float32)
    waited = dist.irecv(got, 0, tag=5)
    blocked = threading.Thread(target=waited.wait, daemon=True)
    blocked.start()
    while not waited._request._lock.locked():
        pass
    landed = np.zeros(4, np.float32)
    landing = dist.irecv(landed, 0, tag=6)
    dist.isend(np.ones(4, np.float32), 0, tag=6).wait()
    landing._request.wait()   # (complete in MPI: its work is not finished yet)
    hold(landing._finishing)
    store, fut = HashStore(), Future()
    for lock in (g._flight_lock, g._lock, store._table._cond, fut._lock, WATCHDOG._wake._cond):
        hold(lock)
    assert WATCHDOG._active   # (the receive's wait is watched)


    FORKED = "MPI cannot be used in a forked child"
    LOST = "was being completed by another thread when this process was forked"


    def raises(fn, text):
        try:
            fn()
        except dist.DistError as exc:
            assert text in str(exc), repr(exc)
        else:
            raise AssertionError(f"no DistError ({text})")


    def watchdog():   # the parent's watched wait is not the child's; its event is free
        assert not WATCHDOG._active and WATCHDOG._thread is None
        g.set_timeout(60.0)   # a thread of its own
        g.set_timeout(2.0)    # woken through its event
        assert WATCHDOG._thread is not None and WATCHDOG._thread.is_alive()


    def hash_store():
        store.set("k", b"v")
        assert store.get("k") == b"v"


    def future():
        fut.set_result(1)
        assert fut.wait() == 1


    def waited_receive():   # a thread of the parent was in its MPI_Wait
        assert waited.is_completed() and FORKED in str(waited.exception())
        raises(waited.wait, FORKED)


    def landing_receive():   # a thread of the parent was landing it
        raises(landing.wait, LOST)
        assert landing.is_completed() and LOST in str(landing.exception())


    def destroy():
        dist.destroy_process_group()
        assert not dist.is_initialized()
        raises(lambda: dist.init_process_group("cpu:mpi"), FORKED)


    def mpi_calls():   # each failure is kept by the group (its lock)
        raises(lambda: dist.all_reduce(np.ones(2, np.float32)), FORKED)
        raises(lambda: dist.isend(np.ones(2, np.float32), 0, tag=7), FORKED)
        raises(dist.barrier, FORKED)
        raises(dist.destroy_process_group, FORKED)   # (the kept error, once it is forgotten)


    for check in (watchdog, hash_store, future, waited_receive, landing_receive, destroy,
                  mpi_calls):
        print(check.__name__, end=": ", flush=True)
        fork_children(1, check, deadline_s=20)
    release.set()
    dist.isend(np.arange(4, dtype=np.float32), 0, tag=5).wait()
    blocked.join(30)
    assert landing.wait() and landed.tolist() == [1.0] * 4 and got.tolist() == [0, 1, 2, 3]
    x = np.ones(2, np.float32)
    dist.all_reduce(x)
    dist.destroy_process_group()
    print("parent done", x.tolist(), flush=True)
'''


def test_locks_held_at_the_fork_and_mpi_in_the_child() -> None:
    out = run_fork_scenario(_LOCKS_AT_FORK, timeout=150)
    assert out.returncode == 0, (out.returncode, out.stdout, out.stderr[-3000:])
    for check in ("watchdog", "hash_store", "future", "waited_receive", "landing_receive",
                  "destroy", "mpi_calls"):
        assert f"{check}: children ok=1 hung=0 failed=0" in out.stdout, (out.stdout,
                                                                        out.stderr[-3000:])
    assert "parent done [1.0, 1.0]" in out.stdout


def test_a_forked_child_does_not_use_or_finalize_the_parents_mpi(tmp_path: Path) -> None:
    # under mpiexec: a child of rank 0 that tries MPI gets DistError (its barrier paired with
    # rank 1's, its send reached rank 1 as rank 0's), ends through interpreter exit (it
    # finalized MPI there: the job hung) or with an error (the runner aborted the whole job
    # from the child); the ranks go on
    rc, out = _launch(tmp_path, r'''
import os, sys, time
import numpy as np
import accelrt.distributed as dist

dist.init_process_group("cpu:mpi", timeout=60)
r = dist.get_rank()


def child_status(pid):
    deadline = time.monotonic() + 30
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            return "hung"
        time.sleep(0.005)   # polling a child's exit status, not ordering work


if r == 0:
    for ending in ("exit", "raise"):
        pid = os.fork()
        if pid == 0:
            for name, fn in [("barrier", dist.barrier),
                             ("send", lambda: dist.send(np.ones(2, np.float32), 1, tag=3))]:
                try:
                    fn()
                    print(f"child {name}: passed", flush=True)
                except dist.DistError as exc:
                    print(f"child {name}: DistError", "forked child" in str(exc), flush=True)
            if ending == "raise":
                raise RuntimeError("the child fails")
            sys.exit(0)
        print(f"child ({ending}) status", child_status(pid), flush=True)
dist.barrier()
x = np.full(2, r + 1.0, np.float32)
dist.all_reduce(x)
got = np.zeros(2, np.float32)
if r == 1:
    w = dist.irecv(got, 0, tag=3)
    print("rank 1: a message before rank 0's", w.is_completed(), flush=True)
    dist.barrier()
    w.wait()
    print("rank 1 sum", x.tolist(), got.tolist(), flush=True)   # (one rank prints: no mixing)
else:
    dist.barrier()
    dist.send(np.full(2, 7.0, np.float32), 1, tag=3)
dist.destroy_process_group()
''')
    assert rc == 0, out[-3000:]
    assert out.count("child barrier: DistError True") == 2, out[-3000:]
    assert out.count("child send: DistError True") == 2, out[-3000:]
    assert "child (exit) status 0" in out and "child (raise) status 1" in out, out[-3000:]
    assert "rank 1: a message before rank 0's False" in out, out[-3000:]
    assert "rank 1 sum [3.0, 3.0] [7.0, 7.0]" in out, out[-3000:]
