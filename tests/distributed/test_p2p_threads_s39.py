"""Point-to-point work used from several threads at once (session 39).

torch's ``Work`` is thread-safe: any thread may call ``is_completed()``, ``wait()`` and
``_source_rank()`` at any time (torch 2.15, gloo, two ranks: three threads polling
``is_completed()`` and one in ``wait()`` on an ``irecv`` from any source, 200 rounds, all saw
source 0 and the data). accelrt's MPI work was not:

* ``_MpiRequest.test()`` called ``MPI_Test`` while another thread was in ``MPI_Wait`` on the
  same request, which MPI forbids: MPICH read a freed request ("INTERNAL ERROR: unexpected
  value in case statement"), and a thread read the empty status of an already freed request,
  source -2 (``MPI_ANY_SOURCE``), in about one round in fifteen;
* ``ProcessGroup._reap`` rebuilt the list of work in flight from a snapshot: a work posted by
  another thread meanwhile was dropped, and with it the group's reference to its arrays;
* ``Work._complete_request`` let a second thread's ``wait()`` return while the first was still
  landing a staged receive (and two threads could both run the landing).

Orderings are made with events and barriers; the two-rank cases run under ``mpiexec`` with a
hard timeout (``test_distributed.launch``).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import accelrt as acc
import accelrt.distributed as dist

HAVE_MPI = importlib.util.find_spec("mpi4py") is not None
pytestmark = pytest.mark.skipif(not HAVE_MPI, reason="mpi4py is not installed "
                                "(pip install 'accelrt[mpi]')")

GATE = 30.0   # seconds any gate may take before the test fails (never reached when it passes)


class _SpyRequest:
    """Wraps an mpi4py request: counts its completion calls (``Test``/``Wait``) that overlap
    another, that come after the request completed, and those that completed it (an error
    completes it too: MPI frees a failed request)."""

    def __init__(self, req: Any) -> None:
        self.req = req
        self.lock = threading.Lock()
        self.inside = self.overlaps = self.after_done = self.completions = 0
        self.in_wait = threading.Event()

    def _call(self, name: str, status: Any) -> bool:
        with self.lock:
            self.inside += 1
            self.overlaps += self.inside > 1
            self.after_done += self.completions > 0
        if name == "Wait":
            self.in_wait.set()
        done = True
        try:
            done = bool(getattr(self.req, name)(status)) or name == "Wait"
        finally:
            with self.lock:
                self.inside -= 1
                self.completions += done
        return done

    def Test(self, status: Any = None) -> bool:
        return self._call("Test", status)

    def Wait(self, status: Any = None) -> bool:
        return self._call("Wait", status)


def _spy(w: dist.Work) -> _SpyRequest:
    spy = _SpyRequest(w._request._req)   # type: ignore[union-attr,attr-defined]
    w._request._req = spy                # type: ignore[union-attr,attr-defined]
    return spy


def _threads(*fns: Callable[[], object]) -> tuple[list[threading.Thread], list[BaseException]]:
    """Start a thread per function; the errors they raise are collected."""
    errors: list[BaseException] = []

    def run(fn: Callable[[], object]) -> None:
        try:
            fn()
        except BaseException as exc:   # noqa: BLE001 - reported by the test
            errors.append(exc)

    ts = [threading.Thread(target=run, args=(fn,), daemon=True) for fn in fns]
    for t in ts:
        t.start()
    return ts, errors


def _join(ts: list[threading.Thread], errors: list[BaseException]) -> None:
    for t in ts:
        t.join(GATE)
        assert not t.is_alive(), "a thread hung"
    assert not errors, errors


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Threads switch every microsecond (races that need a switch in a few bytecodes)."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


# ------------------------------------------------------------------ one rank, in process
def test_no_mpi_test_while_another_thread_waits(one_rank_world: None) -> None:
    got = np.zeros(4, np.float32)
    w = dist.irecv(got, None, tag=31)
    spy = _spy(w)
    ts, errors = _threads(w.wait)
    assert spy.in_wait.wait(GATE)
    # the waiter owns the request: a poll answers "not yet" without calling MPI
    assert [w.is_completed() for _ in range(50)] == [False] * 50
    assert spy.overlaps == 0
    s = dist.isend(np.arange(4, dtype=np.float32), 0, tag=31)
    _join(ts, errors)
    s.wait()
    sources: list[int] = []
    start = threading.Barrier(4)

    def read() -> None:
        start.wait(GATE)
        sources.append(w.source_rank())
        assert w.is_completed() and w.wait()

    _join(*_threads(*[read] * 4))
    assert sources == [0] * 4 and got.tolist() == [0, 1, 2, 3]
    # one completing call (the Wait), none after it, none concurrent
    assert (spy.completions, spy.after_done, spy.overlaps) == (1, 0, 0)


def test_bounded_wait_beside_a_blocked_wait(one_rank_world: None) -> None:
    """``wait(timeout=)`` in one thread while another is in ``wait()``: it times out (or
    completes) by polling, without an ``MPI_Test`` beside the other's ``MPI_Wait``."""
    got = np.zeros(2, np.float32)
    w = dist.irecv(got, 0, tag=39)
    spy = _spy(w)
    ts, errors = _threads(w.wait)
    assert spy.in_wait.wait(GATE)
    with pytest.raises(dist.DistTimeoutError, match=r"irecv .*did not complete within 0.05 s"):
        w.wait(timeout=0.05)
    bounded, bounded_errors = _threads(lambda: w.wait(timeout=GATE))
    dist.isend(np.ones(2, np.float32), 0, tag=39).wait()
    _join(ts + bounded, errors + bounded_errors)
    assert got.tolist() == [1, 1] and w.source_rank() == 0
    assert (spy.completions, spy.after_done, spy.overlaps) == (1, 0, 0)


def test_failed_request_keeps_its_error(one_rank_world: None) -> None:
    """A receive that failed (a message too long for its array) raises from every later call,
    in any thread, without asking MPI again (MPI freed the request: its empty status answered
    source -2, and source_rank() returned it)."""
    w = dist.irecv(np.zeros(2, np.float32), 0, tag=32)
    spy = _spy(w)
    dist.isend(np.zeros(4, np.float32), 0, tag=32).wait()
    assert w.is_completed()   # failed: completed, with an error
    assert w.exception() is not None and "truncat" in str(w.exception()).lower()
    errors: list[str] = []
    for call in (w.wait, w.source_rank, w.wait):
        with pytest.raises(dist.DistBackendError) as info:
            call()
        errors.append(str(info.value))
    assert all("truncat" in e.lower() for e in errors), errors
    assert spy.after_done == 0 and spy.completions == 1


def _hammer_round(make: Callable[[], tuple[dist.Work, Callable[[], None]]],
                  pollers: int, waiters: int, check: Callable[[dist.Work], None]) -> None:
    """One round: ``make()`` posts a work and returns it with the call that completes it
    (run once every thread is started); ``pollers`` threads call ``is_completed()`` until it
    answers True, ``waiters`` threads ``wait()``; then each calls ``check(work)``."""
    w, complete = make()
    start = threading.Barrier(pollers + waiters + 1)

    def poller() -> None:
        start.wait(GATE)
        while not w.is_completed():
            pass
        check(w)

    def waiter() -> None:
        start.wait(GATE)
        assert w.wait()
        check(w)

    ts, errors = _threads(*[poller] * pollers, *[waiter] * waiters)
    start.wait(GATE)
    complete()
    _join(ts, errors)
    assert w.wait() and w.is_completed()
    check(w)


def test_hammer_irecv_from_any_source(one_rank_world: None, fast_switching: None) -> None:
    for rnd in range(60):
        got = np.zeros(4, np.float32)

        def make() -> tuple[dist.Work, Callable[[], None]]:
            w = dist.irecv(got, None, tag=37)
            return w, lambda: dist.isend(np.full(4, float(rnd), np.float32), 0, tag=37).wait()

        def check(w: dist.Work) -> None:
            assert w.source_rank() == 0 and w._source_rank() == 0

        _hammer_round(make, pollers=3, waiters=2, check=check)
        assert got.tolist() == [float(rnd)] * 4


def test_hammer_isend(one_rank_world: None, fast_switching: None) -> None:
    for rnd in range(60):
        got = np.zeros(4, np.float32)
        r: list[dist.Work] = []

        def make() -> tuple[dist.Work, Callable[[], None]]:
            w = dist.isend(np.full(4, float(rnd), np.float32), 0, tag=38)
            return w, lambda: r.append(dist.irecv(got, 0, tag=38))

        def check(w: dist.Work) -> None:
            assert w.exception() is None

        _hammer_round(make, pollers=3, waiters=2, check=check)
        assert r[0].wait() and got.tolist() == [float(rnd)] * 4


def test_work_posted_while_another_thread_reaps_is_kept(one_rank_world: None) -> None:
    g = dist.group.WORLD
    assert isinstance(g, dist.ProcessGroup)
    a, b = np.zeros(2, np.float32), np.zeros(2, np.float32)
    w1 = dist.irecv(a, 0, tag=33)
    polling, release = threading.Event(), threading.Event()
    poll = w1._poll
    calls = [0]

    def gated_poll() -> bool:
        calls[0] += 1
        if calls[0] == 1:     # the reaping thread stops inside its loop
            polling.set()
            assert release.wait(GATE)
        return poll()

    w1._poll = gated_poll   # type: ignore[method-assign]
    ts, errors = _threads(g._reap)
    assert polling.wait(GATE)
    w2 = dist.irecv(b, 0, tag=34)   # posting reaps too (w1 still pending), then keeps w2
    release.set()
    _join(ts, errors)
    assert w1 in g._in_flight and w2 in g._in_flight
    dist.isend(np.ones(2, np.float32), 0, tag=33).wait()
    dist.isend(np.full(2, 2.0, np.float32), 0, tag=34).wait()
    assert w1.wait() and w2.wait()
    assert a.tolist() == [1, 1] and b.tolist() == [2, 2]
    assert g._in_flight == []


def test_threads_posting_and_reaping_lose_no_work(one_rank_world: None,
                                                  fast_switching: None) -> None:
    g = dist.group.WORLD
    assert isinstance(g, dist.ProcessGroup)
    n, per = 4, 40
    start = threading.Barrier(n + 1)
    posted: list[list[tuple[dist.Work, np.ndarray]]] = [[] for _ in range(n)]
    stop = threading.Event()

    def poster(k: int) -> None:
        start.wait(GATE)
        for i in range(per):
            buf = np.zeros(1, np.int64)
            posted[k].append((dist.irecv(buf, 0, tag=1000 + k * per + i), buf))

    def reaper() -> None:
        start.wait(GATE)
        while not stop.is_set():
            g._reap()

    reap_ts, reap_errors = _threads(reaper)
    ts, errors = _threads(*[lambda k=k: poster(k) for k in range(n)])
    _join(ts, errors)
    stop.set()
    _join(reap_ts, reap_errors)
    # every receive is pending (nothing was sent): the group keeps every one
    ids = {id(w) for w in g._in_flight}
    lost = [k * per + i for k in range(n) for i, (w, _) in enumerate(posted[k])
            if id(w) not in ids]
    assert not lost and len(g._in_flight) == n * per
    for k in range(n):
        for i, (w, buf) in enumerate(posted[k]):
            dist.isend(np.array([k * per + i]), 0, tag=1000 + k * per + i).wait()
            assert w.wait() and buf[0] == k * per + i
    assert g._in_flight == []


def test_no_wait_returns_before_the_landing_ran(one_rank_world: None, staged: None) -> None:
    got = acc.zeros((3,), device="cpu")
    w = dist.irecv(got, 0, tag=35)
    assert w._finish is not None, "not staged: the test needs a landing"
    land = w._finish
    entered, release, progress = threading.Event(), threading.Event(), threading.Event()
    landings: list[int] = []
    seen: list[tuple[bool, list[float]]] = []

    def gated_landing() -> None:
        entered.set()
        assert release.wait(GATE)
        land()
        landings.append(1)

    w._finish = gated_landing
    req = w._request
    assert req is not None
    req_wait, reached = req.wait, []

    def counted_wait() -> int:       # the second call: the second thread reached the request
        reached.append(1)
        if len(reached) == 2:
            progress.set()
        return req_wait()

    req.wait = counted_wait          # type: ignore[method-assign]
    dist.isend(np.full(3, 4.5, np.float32), 0, tag=35).wait()
    first, first_errors = _threads(w.wait)
    assert entered.wait(GATE)        # the first wait() is landing the data

    def second() -> None:
        w.wait()
        seen.append((bool(landings), got.numpy().tolist()))
        progress.set()

    ts, errors = _threads(second)
    assert progress.wait(GATE)       # the second wait() is inside, or (before) returned
    release.set()
    _join(first + ts, first_errors + errors)
    assert seen == [(True, [4.5, 4.5, 4.5])]
    assert landings == [1]


def test_concurrent_waits_land_once(one_rank_world: None, staged: None,
                                    fast_switching: None) -> None:
    for rnd in range(30):
        got = acc.zeros((2,), device="cpu")
        w = dist.irecv(got, 0, tag=36)
        land, landings = w._finish, []
        assert land is not None

        def counted(land: Callable[[], None] = land, landings: list[int] = landings) -> None:
            landings.append(1)
            land()

        w._finish = counted
        start = threading.Barrier(5)

        def waiter() -> None:
            start.wait(GATE)
            assert w.wait()
            assert got.numpy().tolist() == [float(rnd)] * 2

        def poller() -> None:
            start.wait(GATE)
            while not w.is_completed():
                pass
            assert w.source_rank() == 0

        ts, errors = _threads(waiter, waiter, waiter, poller)
        start.wait(GATE)
        dist.isend(np.full(2, float(rnd), np.float32), 0, tag=36).wait()
        _join(ts, errors)
        assert landings == [1]


def test_is_completed_true_means_the_staged_data_landed(one_rank_world: None,
                                                       staged: None) -> None:
    """torch's ``is_completed()`` is True once the received data is in the tensor; a staged
    receive (``ACCELRT_MPI_STAGE=1``) answered True while its data still sat in the staging
    block, until a ``wait()`` or the group's next reap landed it."""
    for rnd in range(5):
        got = acc.zeros((4,), device="cpu")
        w = dist.irecv(got, 0, tag=37)
        assert w._finish is not None, "not staged: the test needs a landing"
        dist.isend(np.full(4, rnd + 0.5, np.float32), 0, tag=37).wait()
        while not w.is_completed():
            pass
        assert got.numpy().tolist() == [rnd + 0.5] * 4
        assert w.source_rank() == 0 and w.is_success()


_EXIT_WAITING = r'''
import threading
import numpy as np
import accelrt.distributed as dist

dist.init_process_group("cpu:mpi", timeout=30)
buf = np.zeros(4, np.float32)
w = dist.irecv(buf, 0, tag=99)          # no rank ever sends it
inside = threading.Event()


class Gate:                             # the waiting thread reached MPI_Wait
    def __init__(self, req):
        self.req = req

    def Wait(self, status=None):
        inside.set()
        return self.req.Wait(status)

    def __getattr__(self, name):
        return getattr(self.req, name)


w._request._req = Gate(w._request._req)
threading.Thread(target=w.wait, daemon=True).start()
assert inside.wait(30)
print("exiting", flush=True)
'''


def test_exit_while_a_daemon_thread_waits_on_a_receive(tmp_path: Path) -> None:
    """The interpreter exits while a daemon thread is blocked in ``wait()`` on a receive that
    no rank sends: mpi4py's ``MPI_Finalize`` ran under that thread's ``MPI_Wait`` and the
    process died of SIGSEGV (exit code 139); the request is now cancelled first."""
    script = tmp_path / "exit_waiting.py"
    script.write_text(_EXIT_WAITING)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ))
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert "exiting" in proc.stdout


# ------------------------------------------------------------------ two ranks, mpiexec
_RANKS = r'''
import sys
import threading
import numpy as np
import accelrt.distributed as dist
from rank_cases import Cases

dist.init_process_group("cpu:mpi", timeout=60)
r = dist.get_rank()
case = Cases(r, after=dist.barrier)
sys.setswitchinterval(1e-6)
ROUNDS = 40


def hammer(w, pollers, waiters, check):
    """pollers threads poll is_completed(), waiters threads wait(), then all check(w);
    returns once every thread is started (the caller then lets the peer go on)"""
    start = threading.Barrier(pollers + waiters + 1)
    errors = []

    def run(fn):
        try:
            start.wait(30)
            fn()
            check(w)
        except BaseException as exc:
            errors.append(repr(exc))

    def poll():
        while not w.is_completed():
            pass

    ts = [threading.Thread(target=run, args=(poll,)) for _ in range(pollers)]
    ts += [threading.Thread(target=run, args=(w.wait,)) for _ in range(waiters)]
    for t in ts:
        t.start()
    start.wait(30)
    return ts, errors


def join(ts, errors):
    for t in ts:
        t.join(30)
        assert not t.is_alive(), "a thread hung"
    assert not errors, errors[:3]


@case
def irecv_from_any_source_from_many_threads():
    for rnd in range(ROUNDS):
        if r == 0:
            dist.barrier()            # rank 1's threads are running
            dist.send(np.full(4, float(rnd), np.float32), 1, tag=5)
        else:
            got = np.zeros(4, np.float32)
            w = dist.irecv(got, None, tag=5)

            def check(w):
                assert w.source_rank() == 0, w.source_rank()

            ts, errors = hammer(w, 3, 2, check)
            dist.barrier()
            join(ts, errors)
            assert got.tolist() == [float(rnd)] * 4 and w.source_rank() == 0


@case
def isend_from_many_threads():
    for rnd in range(ROUNDS):
        if r == 0:
            w = dist.isend(np.full(4, float(rnd), np.float32), 1, tag=6)

            def check(w):
                assert w.exception() is None

            ts, errors = hammer(w, 3, 2, check)
            dist.barrier()            # the threads are running: rank 1 receives
            join(ts, errors)
        else:
            got = np.zeros(4, np.float32)
            dist.barrier()
            assert dist.recv(got, 0, tag=6) == 0
            assert got.tolist() == [float(rnd)] * 4


@case
def receives_posted_from_threads_at_once():
    n, per = 3, 20
    if r == 0:
        dist.barrier()
        for k in range(n * per):
            dist.send(np.array([k]), 1, tag=100 + k)
    else:
        works = [None] * (n * per)
        bufs = [np.full(1, -1) for _ in range(n * per)]
        start = threading.Barrier(n)

        def post(k):
            start.wait(30)
            for i in range(k * per, (k + 1) * per):
                works[i] = dist.irecv(bufs[i], None if i % 2 else 0, tag=100 + i)

        ts = [threading.Thread(target=post, args=(k,)) for k in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
        g = dist.group.WORLD
        assert all(w in g._in_flight or w.is_completed() for w in works)
        dist.barrier()
        for i, w in enumerate(works):
            assert w.wait() and w.source_rank() == 0 and bufs[i][0] == i


case.done()
dist.destroy_process_group()
'''


def test_two_ranks_hammer_one_work(tmp_path: Path) -> None:
    from rank_cases import write_script
    from test_distributed import MPIEXEC, _check_cases, launch
    if MPIEXEC is None:
        pytest.skip("needs mpiexec (pip install 'accelrt[mpi]')")
    script = write_script(tmp_path, _RANKS)
    rc, out, _ = launch(2, str(script), timeout=120)
    assert _check_cases(2, out, rc) == 3, out[-3000:]
