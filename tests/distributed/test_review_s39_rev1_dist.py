"""Review of session 39's point-to-point work changes (s39-rev1), on the MPI engine.

* A staged receive whose landing (the copy from the pinned block into the array) failed
  raised from the first ``wait()`` only: a second ``wait()`` returned True, ``exception()``
  was None and ``is_success()`` True, with the data never in the array; landed by the
  group's reaping (any later send or receive), the error was dropped altogether. Since
  ``is_completed()`` lands the receive (s39) it kept the error, so the three paths disagreed.
  A torch work that failed raises its error from every ``wait()`` and reports it in
  ``exception()``; the landing's error is kept now, whichever call ran it.
"""

from __future__ import annotations

import importlib.util
import threading

import numpy as np
import pytest

import accelrt as acc
import accelrt.distributed as dist

HAVE_MPI = importlib.util.find_spec("mpi4py") is not None
pytestmark = pytest.mark.skipif(not HAVE_MPI, reason="mpi4py is not installed "
                                "(pip install 'accelrt[mpi]')")


def _failing_receive(tag: int) -> dist.Work:
    """A staged receive whose message arrived and whose landing raises when it runs."""
    got = acc.zeros((3,), device="cpu")
    w = dist.irecv(got, 0, tag=tag)
    land = w._finish
    assert land is not None, "not staged: the test needs a landing"

    def landing() -> None:
        land()   # (the staging block goes back to the pinned pool, as a failed copy's does)
        raise RuntimeError("the landing copy failed")

    w._finish = landing
    dist.isend(np.ones(3, np.float32), 0, tag=tag).wait()
    return w


def _assert_failed(w: dist.Work) -> None:
    for _ in range(2):
        with pytest.raises(dist.DistBackendError, match="the landing copy failed"):
            w.wait()
    assert "the landing copy failed" in str(w.exception())
    assert w.is_completed() and not w.is_success()


def test_landing_error_raised_by_every_wait(one_rank_world: None, staged: None) -> None:
    w = _failing_receive(41)
    # the first wait() runs the landing; before, it raised the bare RuntimeError and the
    # second returned True
    with pytest.raises(RuntimeError, match="the landing copy failed"):
        w.wait()
    _assert_failed(w)


def test_landing_error_kept_when_the_group_reaps_it(one_rank_world: None,
                                                    staged: None) -> None:
    w = _failing_receive(42)
    # the next post reaps the group's work in flight: it lands (and fails) the receive;
    # before, the error was dropped there and wait() returned True
    r = dist.irecv(np.zeros(1, np.float32), 0, tag=43)
    dist.isend(np.ones(1, np.float32), 0, tag=43).wait()
    r.wait()
    world = dist.group.WORLD
    assert world is not None and w not in world._in_flight
    _assert_failed(w)


def test_landing_error_kept_by_is_completed(one_rank_world: None, staged: None) -> None:
    w = _failing_receive(44)
    assert w.is_completed()
    _assert_failed(w)


GATE = 30.0   # seconds a gate may take before the test fails (never reached when it passes)


def test_bounded_wait_times_out_while_another_thread_lands(one_rank_world: None,
                                                           staged: None) -> None:
    """``wait(timeout=)`` while another thread's ``wait()`` is landing the data: s39 made the
    second wait for the landing (rightly: the data is not in the array yet), without its
    bound; it raises ``DistTimeoutError`` at its timeout now, and a later wait succeeds."""
    got = acc.zeros((3,), device="cpu")
    w = dist.irecv(got, 0, tag=45)
    land = w._finish
    assert land is not None, "not staged: the test needs a landing"
    entered, release = threading.Event(), threading.Event()

    def gated_landing() -> None:
        entered.set()
        assert release.wait(2 * GATE)   # (past the bounded wait's join below)
        land()

    w._finish = gated_landing
    dist.isend(np.full(3, 2.5, np.float32), 0, tag=45).wait()
    first: list[BaseException | bool] = []
    lander = threading.Thread(target=lambda: first.append(w.wait()), daemon=True)
    lander.start()
    assert entered.wait(GATE)            # the first wait() is inside the landing
    bounded: list[BaseException | bool] = []

    def bounded_wait() -> None:
        try:
            bounded.append(w.wait(timeout=0.05))
        except BaseException as exc:    # noqa: BLE001 - checked below
            bounded.append(exc)

    t = threading.Thread(target=bounded_wait, daemon=True)
    t.start()
    t.join(GATE)                         # before: blocked until the landing ended
    done_in_time = not t.is_alive()
    release.set()
    lander.join(GATE)
    t.join(GATE)
    assert done_in_time, "wait(timeout=0.05) did not return while another thread landed"
    assert len(bounded) == 1 and isinstance(bounded[0], dist.DistTimeoutError), bounded
    assert first == [True] and w.wait(timeout=GATE) and got.numpy().tolist() == [2.5] * 3
