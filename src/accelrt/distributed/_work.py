"""Work handles and the watchdog: the one bounded wait of accelrt.distributed.

A :class:`Work` is the handle of an asynchronous operation (an event on a comm stream, or an
engine's point-to-point :class:`~accelrt.distributed._engine.Request`); the watchdog thread
ends the job when an engine call runs past its group's timeout (MPI has no timeouts of its
own), printing the rank, the operation and its sequence number.

Example::

    >>> from accelrt.distributed._work import Work
    >>> Work.completed().wait()
    True
"""

from __future__ import annotations

import copy
import datetime
import itertools
import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .._errors import type_shown
from .._event import Event
from .._fork import reinit_after_fork
from .._stream import _current
from ._engine import Request
from ._errors import DistError, DistTimeoutError
from ._store import _seconds_of

if TYPE_CHECKING:
    from ._group import ProcessGroup
    from ._group_core import GroupCore

__all__ = ["ABORT_GRACE", "WATCHDOG", "Future", "Work", "wait_until"]

_monotonic = time.monotonic


# ---------------------------------------------------------------------------- watchdog
class _Watchdog:
    """Ends the job when an engine call runs past its deadline (a daemon thread)."""

    def __init__(self) -> None:
        self._active: dict[int, tuple[float, GroupCore, str, int, float]] = {}
        self._tokens = itertools.count(1)
        self._thread: threading.Thread | None = None
        self._wake = reinit_after_fork(threading.Event())
        self._interval = 1.0
        self.on_timeout: Callable[[GroupCore, str, int, float], None] = _abort_job
        self.groups: list[GroupCore] = []   # their fast-path calls are watched too

    def watch(self, group: GroupCore) -> None:
        """Watch ``group``'s direct engine calls (its ``_t0``/``_op``/``_opseq`` slots)."""
        self.groups = [g for g in self.groups if not g.destroyed] + [group]
        if self._thread is None or group.timeout / 4 < self._interval:
            self._start(min(1.0, max(0.01, group.timeout / 4)))

    def watching(self, group: GroupCore, op: str, seq: int,
                 timeout: float | None = None) -> _Watched:
        """``with WATCHDOG.watching(group, op, seq):`` around a call that blocks on peers: the
        one bounded wait of accelrt.distributed. Past ``timeout`` (the group's by default) the
        watchdog ends the job naming the rank, ``op`` and ``seq`` (:func:`_abort_job`)."""
        return _Watched(self, group, op, seq, group.timeout if timeout is None else timeout)

    def enter(self, group: GroupCore, op: str, seq: int, timeout: float) -> int:
        tok = next(self._tokens)
        self._active[tok] = (time.monotonic() + timeout, group, op, seq, timeout)
        if self._thread is None or timeout / 4 < self._interval:
            self._start(min(1.0, max(0.01, timeout / 4)))
        return tok

    def exit(self, tok: int) -> None:
        self._active.pop(tok, None)

    def _start(self, interval: float) -> None:
        self._interval = interval
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="accelrt-dist-watchdog",
                                            daemon=True)
            self._thread.start()
        else:
            self._wake.set()

    def _after_fork_in_child(self) -> None:
        """In a forked child: the watchdog thread and the calls it watched are the parent's
        (their threads do not exist here); the next watched call starts a thread of its own.
        (It stayed the parent's dead thread, so a group made in the child was never watched,
        and a restarted one would have ended the child for a parent's call.)"""
        self._thread = None
        self._active.clear()
        for group in self.groups:
            group._t0 = 0.0

    def _run(self) -> None:
        while True:
            self._wake.wait(self._interval)
            self._wake.clear()
            now = time.monotonic()
            for deadline, group, op, seq, timeout in list(self._active.values()):
                if now > deadline:
                    self.on_timeout(group, op, seq, timeout)
            for group in self.groups:
                t0 = group._t0
                if t0 and now - t0 > group.timeout:
                    self.on_timeout(group, group._op, group._opseq, group.timeout)


class _Watched:
    """A watched blocking call (see :meth:`_Watchdog.watching`)."""

    __slots__ = ("_args", "_tok", "_wd")

    def __init__(self, wd: _Watchdog, group: GroupCore, op: str, seq: int,
                 timeout: float) -> None:
        self._wd, self._args, self._tok = wd, (group, op, seq, timeout), 0

    def __enter__(self) -> None:
        self._tok = self._wd.enter(*self._args)

    def __exit__(self, *exc: object) -> None:
        self._wd.exit(self._tok)


def _wait_seconds(timeout: object) -> float | None:
    """``Work.wait``'s timeout in seconds: None (or 0, torch's ``kNoTimeout``) for none."""
    if timeout is None:
        return None
    value = _seconds_of(timeout)
    if not value >= 0:
        raise ValueError(f"Work.wait(): timeout must not be negative, got {value}")
    return value or None


def wait_until(done: Callable[[], bool], timeout: float,
               error: Callable[[], DistTimeoutError]) -> None:
    """Poll ``done()`` until it answers True, raising ``error()`` after ``timeout`` seconds:
    a wait the caller bounds itself (``Work.wait(timeout=)``, ``monitored_barrier``) and can
    recover from, where :meth:`_Watchdog.watching` ends the job."""
    deadline = _monotonic() + timeout
    while not done():
        if _monotonic() > deadline:
            raise error()
        time.sleep(0)


def _abort_job(group: GroupCore, op: str, seq: int, timeout: float) -> None:
    msg = (f"accelrt.distributed: rank {group.global_rank}: {op} (sequence number {seq}) on "
           f"group {group._label!r} did not complete within {timeout:g} s: a peer is stuck, "
           "died, or issued a different collective. Aborting the job (set timeout= on "
           "init_process_group/new_group to change the limit; ACCELRT_DISTRIBUTED_DEBUG=DETAIL "
           "checks that every rank issues the same collectives).")
    # logging's last-resort handler puts it on stderr when the program configured no logging
    logging.getLogger("accelrt.distributed").critical(msg)
    for f in (sys.stderr, sys.stdout):
        try:
            f.flush()
        except Exception:   # a closed stream: nothing to lose
            pass
    # MPI launchers tear the job down at the abort, dropping rank output they have not
    # forwarded yet (seen with MPICH's hydra: the whole output lost in about one abort in
    # twelve): give the launcher a moment to forward this message first
    time.sleep(ABORT_GRACE)
    for eng in list(group._engines.values()):
        try:
            eng.abort()
        except Exception:   # the job ends below anyway
            pass
    os._exit(124)


#: seconds between printing the timeout message and aborting the job (see _abort_job)
ABORT_GRACE = 0.25

WATCHDOG = _Watchdog()


def _after_fork_in_child() -> None:
    """In a child made by ``os.fork()``: the watchdog forgets the parent's thread and calls,
    and a point-to-point work that a thread of the parent was finishing fails
    (:meth:`Work._lost_at_fork`): the groups' works in flight, and those that destroyed groups
    left pending."""
    WATCHDOG._after_fork_in_child()
    init = sys.modules.get(f"{__package__}._init")
    works = [w for g in WATCHDOG.groups for w in g._in_flight]
    for w in works + list(getattr(init, "_ABANDONED", ())):
        w._lost_at_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# ---------------------------------------------------------------------------- futures
_log = logging.getLogger("accelrt.distributed")


class Future:
    """The result of a :class:`Work` as a future (``torch.futures.Future``, what torch's
    ``Work.get_future()`` returns): ``done()``, ``wait()``, ``value()``, ``then(callback)``,
    ``add_done_callback(callback)``, ``set_result(result)``, ``set_exception(error)``.

    A future is completed once, with a value or an error; ``wait()`` and ``value()`` return
    the value or raise the error. ``then(cb)`` returns a new future completed with
    ``cb(self)``'s return value, or with a ``RuntimeError`` ("Got the following error when
    running the callback: ...") when ``cb`` raises; ``add_done_callback(cb)`` runs ``cb(self)``
    and logs (and drops) what it raises, as torch's. A callback added to a completed future
    runs at once, on the calling thread; callbacks run in the order they were added.

    A work's future (:meth:`Work.get_future`) completes with the work's output list (its
    :meth:`Work.result`) or its error. A stream-ordered engine's (NCCL's) is complete at once,
    as torch's NCCL future: ``wait()`` and the callbacks first order the current stream after
    the operation. Another engine's completes when its operation is seen done: by this
    future's ``wait()``/``done()``/``value()`` or by the work's ``wait()``/``synchronize()``/
    ``is_completed()``, which run the callbacks on that thread (torch's gloo runs them on its
    worker thread as the operation ends).

    Example::

        >>> from accelrt.distributed import Future
        >>> fut = Future()
        >>> doubled = fut.then(lambda f: f.value() * 2)
        >>> fut.set_result(21)
        >>> fut.done(), doubled.wait()
        (True, 42)
    """

    def __reduce_ex__(self, protocol: object) -> Any:
        # torch's Future refuses pickle, copy.copy and copy.deepcopy with this RuntimeError;
        # a copy here shared the original's lock and callbacks, or failed on the lock
        raise RuntimeError("Can not pickle accelrt.distributed.Future (as torch's 'Can not "
                           "pickle torch.futures.Future'): wait() for its value and copy or "
                           "send the value instead")

    def __init__(self) -> None:
        self._lock = reinit_after_fork(threading.Condition(threading.RLock()))
        self._done = False
        self._value: Any = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[Future], None]] = []
        #: the work this future stands for (its completion is polled), else None
        self._work: Work | None = None
        #: then()'s future: the one whose callback completes this one (waited and polled
        #: through it, as a work's future completes when its work is seen done)
        self._parent: Future | None = None

    # -- completion ------------------------------------------------------------------
    def _poll(self) -> bool:
        """Complete a work's future whose operation is done; True once done."""
        if self._done:
            return True
        work = self._work
        if work is not None and work._settled():
            work._settle_future()
        elif self._parent is not None:
            self._parent._poll()
        return self._done

    def _complete(self, value: Any, error: BaseException | None, strict: bool) -> None:
        """Complete with ``value`` or ``error`` and run the callbacks (on this thread); a
        second completion raises torch's error (``strict``) or is ignored."""
        with self._lock:
            if self._done:
                if not strict:
                    return
                raise RuntimeError("Attempting to mark a completed Future as complete again. "
                                   "Note that a Future can only be marked completed once.")
            self._value, self._error, self._done = value, error, True
            callbacks, self._callbacks = self._callbacks, []
            self._lock.notify_all()
        for cb in callbacks:
            cb(self)

    def _sync(self) -> None:
        """A stream-ordered work's future: order the current stream after the operation (the
        work's ``wait()``; its error is the future's already)."""
        work = self._work
        if work is not None and work._early_result:
            try:
                work.wait()
            except Exception:   # noqa: BLE001 - raised by the future's own wait()/value()
                pass

    def _result(self) -> Any:
        if self._error is not None:
            raise detached(self._error)
        return self._value

    # -- torch.futures.Future ----------------------------------------------------------
    def done(self) -> bool:
        """True once the future holds a value or an error."""
        return self._poll()

    def wait(self) -> Any:
        """Block until the future is complete; its value. A work's future blocks until the
        operation completed (torch's gloo future), or, complete at once (a stream-ordered
        engine's), orders the current stream after the operation (torch's NCCL future).

        Raises:
            Exception: the error the future was completed with.
        """
        work = self._work
        if work is not None:
            if not self._done:
                try:
                    work.synchronize()
                except Exception:   # noqa: BLE001 - the work's error completes the future
                    pass
                work._settle_future()
            else:
                self._sync()
        elif self._parent is not None and not self._done:
            try:
                self._parent.wait()
            except Exception:   # noqa: BLE001 - the callback completes this future with it
                pass
        with self._lock:
            self._lock.wait_for(lambda: self._done)
        return self._result()

    def value(self) -> Any:
        """The value of a completed future (call :meth:`wait` first, or read it inside a
        callback of :meth:`then`).

        Raises:
            RuntimeError: the future is not completed yet.
            Exception: the error the future was completed with.
        """
        if not self._poll():
            raise RuntimeError("Future.value(): the future is not completed yet; call wait() "
                               "first, or read value() inside a callback passed to then()")
        return self._result()

    def then(self, callback: Callable[[Future], Any]) -> Future:
        """A new future completed with ``callback(self)``'s return value once this one is
        complete (at once when it is), or with a ``RuntimeError`` naming what ``callback``
        raised.

        Raises:
            TypeError: ``callback`` is not callable.
        """
        _callable("then", callback)
        child = Future()
        child._parent = self

        def run(fut: Future) -> None:
            try:
                out = callback(fut)
            except Exception as exc:
                err = RuntimeError("Got the following error when running the callback: "
                                   f"{type(exc).__name__}: {exc}")
                err.__cause__ = exc
                child._complete(None, detached(err, exc), True)
                return
            child._complete(out, None, True)

        self._add(run)
        return child

    def add_done_callback(self, callback: Callable[[Future], None]) -> None:
        """Run ``callback(self)`` once this future is complete (at once when it is); what it
        raises is logged and dropped, as torch's.

        Raises:
            TypeError: ``callback`` is not callable.
        """
        _callable("add_done_callback", callback)

        def run(fut: Future) -> None:
            try:
                callback(fut)
            except Exception as exc:
                _log.error("Got the following error when running the callback: %s: %s",
                           type(exc).__name__, exc)

        self._add(run)

    def _add(self, run: Callable[[Future], None]) -> None:
        self._poll()
        with self._lock:
            if not self._done:
                self._callbacks.append(run)
                return
        self._sync()
        run(self)

    def set_result(self, result: Any) -> None:
        """Complete the future with ``result``, running its callbacks.

        Raises:
            RuntimeError: the future is already completed (a work's future always is once
                its operation is done).
        """
        if self._work is not None:
            self._poll()
        self._complete(result, None, True)

    def set_exception(self, result: BaseException) -> None:
        """Complete the future with the error ``result``: ``wait()`` and ``value()`` raise it.

        Raises:
            AssertionError: ``result`` is not an ``Exception`` (torch's check).
            RuntimeError: the future is already completed.
        """
        if not isinstance(result, Exception):
            raise AssertionError(f"{result} is of type {type(result)}, not an Exception.")
        if self._work is not None:
            self._poll()
        self._complete(None, result, True)

    def __repr__(self) -> str:
        state = "error" if self._error is not None else "done" if self._done else "pending"
        return f"<accelrt.distributed.Future {state}>"


def _callable(what: str, callback: object) -> None:
    if not callable(callback):
        raise TypeError(f"Future.{what}(): callback must be a callable taking the future, "
                        f"got {type_shown(callback)}")


# ---------------------------------------------------------------------------- work

def _bare(exc: BaseException) -> BaseException | None:
    """A copy of ``exc`` without traceback, cause or context (rebuilt as pickling would), or
    ``None`` where its class cannot be rebuilt from what it reduces to."""
    try:
        dup = copy.copy(exc)
    except Exception:
        return None
    if dup is exc or type(dup) is not type(exc):
        return None
    dup.__traceback__ = None
    dup.__cause__ = dup.__context__ = None
    return dup


def detached(exc: BaseException, cause: BaseException | None = None) -> BaseException:
    """A copy of ``exc`` that holds no frames, for a group or a work handle to keep and raise
    again: no traceback, and as its cause (``cause``, else ``exc.__cause__``) a copy of that
    without traceback either. The error raised the first time keeps its full traceback and
    cause for the user; a kept one with them would hold the failed call's frames, and the
    arrays in them, for as long as the group lives, and raising a kept object again would
    attach each new call's frames to it. (A class that cannot be rebuilt is kept as a
    :class:`DistError` naming it.)"""
    if cause is None:
        cause = exc.__cause__
    dup = _bare(exc)
    if dup is None:
        dup = DistError(f"{type(exc).__name__}: {exc}")
    if cause is not None and cause is not exc:
        dup.__cause__ = _bare(cause)
    dup.__suppress_context__ = True
    return dup


class Work:
    """A handle on an asynchronous operation (``torch.distributed.Work``).

    ``wait()`` makes the current stream of the operation's device wait for it (host memory:
    blocks until done), ``synchronize()`` blocks the host, ``is_completed()`` asks. Both
    re-raise an error the operation (or earlier queued work of its group) hit.

    Example::

        >>> from accelrt.distributed import Work
        >>> w = Work.completed()
        >>> w.is_completed(), w.wait()
        (True, True)
    """

    def __reduce_ex__(self, protocol: object) -> Any:
        # torch's Work refuses pickle, copy.copy and copy.deepcopy with TypeError; a copy
        # here was a second handle on the operation (a deep one with copies of its arrays)
        raise TypeError("cannot pickle 'Work' object: a work handle belongs to the process "
                        "that started the operation; wait() for it and copy or send the "
                        "result instead")

    def __init__(self, group: ProcessGroup | None, op: str, seq: int, *,
                 event: Event | None = None, stream_of: tuple[Any, int] | None = None,
                 request: Request | None = None, finish: Callable[[], None] | None = None,
                 outputs: Sequence[Any] = (), early: bool = False,
                 no_result: bool = False) -> None:
        self._group, self._op, self._seq = group, op, seq
        self._event, self._stream_of = event, stream_of
        self._request, self._finish = request, finish
        #: held while one thread finishes a point-to-point work (:meth:`_complete_request`;
        #: held at a fork, the work fails in the child: :meth:`_lost_at_fork`)
        self._finishing = threading.Lock() if request is not None else None
        self._outputs = list(outputs)
        self._done = event is None and request is None
        self._source = -1
        self._exc: BaseException | None = None
        #: result(): torch's ProcessGroupGloo answers "result() not implemented." for
        #: point-to-point work (set for the host engines' sends and receives) and refuses a
        #: work not yet completed; ProcessGroupNCCL answers the outputs either way (set for
        #: the stream-ordered engines' work)
        self._no_result = no_result
        self._early_result = early
        self._waited = False     # wait()/synchronize() returned: result() may answer
        # get_future()'s, made on first call: held while pending (its callbacks must run),
        # then weakly (the future holds this work: no cycle keeps the outputs alive)
        self._future: Future | None = None
        self._done_future: weakref.ref[Future] | None = None

    @classmethod
    def completed(cls, outputs: Sequence[Any] = ()) -> Work:
        """A finished work handle."""
        return cls(None, "", 0, outputs=outputs)

    def _check(self) -> None:
        # the operation's own error, or one kept by its group (queued work fails together);
        # not the group's destruction: destroy_process_group() drained every operation first
        # (as ProcessGroupNCCL::shutdown flushes its work), so a handle on one that finished
        # still answers after it, as a torch Work does
        # (kept errors are raised afresh: see GroupCore._raise_kept)
        if self._exc is not None:
            raise detached(self._exc)
        if self._group is not None and self._group._error is not None:
            raise detached(self._group._error)

    def _timed_out(self, timeout: float) -> DistTimeoutError:
        rank = -1 if self._group is None else self._group.global_rank
        return DistTimeoutError(f"rank {rank}: {self._op} (sequence number {self._seq}) did not "
                                f"complete within {timeout:g} s", rank=rank, op=self._op,
                                seq=self._seq)

    def _complete_request(self, timeout: float | None) -> None:
        """Wait for the point-to-point request, then finish the work once: its source read,
        its landing (``_finish``) run (its error kept, as the engine's), the group no longer
        keeping it. Any number of threads may call it at once (``wait``, ``is_completed``
        through the group's reaping, ``source_rank``): the first to get ``_finishing``
        finishes, the others wait for that (a bounded wait no longer than its ``timeout``)
        and return; ``_request`` is cleared last, so a thread that finds it None returns
        only after the landing ran."""
        req, g = self._request, self._group
        if req is None:       # finished by another thread
            return
        assert g is not None and self._finishing is not None
        deadline = None
        try:
            if timeout is not None:
                deadline = _monotonic() + timeout
                wait_until(req.test, timeout, lambda: self._timed_out(timeout))
                source = req.wait()
            else:
                with WATCHDOG.watching(g, self._op, self._seq):
                    source = req.wait()
        except DistTimeoutError:
            raise
        except Exception as exc:
            g._forget(self)   # (done, by failing: the group no longer keeps its arrays)
            raise self._failed(g._engine_error(self._op, self._seq, exc), exc) from exc
        # a bounded wait stays bounded while another thread lands the data
        if not self._finishing.acquire(timeout=-1 if deadline is None
                                       else max(deadline - _monotonic(), 0.0)):
            raise self._timed_out(timeout or 0.0)
        try:
            if self._request is None:    # another thread finished it while this one waited
                return
            self._source = source
            fin, self._finish = self._finish, None
            try:
                if fin is not None:
                    fin()
            except Exception as exc:   # kept: every later wait() raises it, as torch's
                raise self._failed(g._engine_error(self._op, self._seq, exc), exc) from exc
            finally:
                self._request = None
                g._forget(self)
        finally:
            self._finishing.release()

    def _lost_at_fork(self) -> None:
        """In a child made by ``os.fork()``: a thread of the parent was finishing this work
        at the fork (it holds ``_finishing``, and does not exist here), so its data may be half
        landed in the child's copy of the array. The work fails with :class:`DistError`
        (waiting for that lock hung the child for ever)."""
        fin, g = self._finishing, self._group
        if fin is None or self._request is None or not fin.locked() or g is None:
            return
        self._exc = DistError(
            f"rank {g.global_rank}: {self._op} (sequence number {self._seq}) was being "
            "completed by another thread when this process was forked (os.fork): its data "
            "in the child may be incomplete; wait for it before the fork",
            rank=g.global_rank, op=self._op, seq=self._seq)
        self._request = None   # (done, with that error)

    def _poll(self) -> bool:
        """True once the operation is complete, having finished a completed point-to-point
        request (its source read, its landing run): the owning group's check on the work it
        keeps in flight (:meth:`ProcessGroup._reap`). Raises the operation's error, which the
        work keeps."""
        req = self._request
        if req is None:
            return True
        if self._exc is not None or not req.test():
            return self._exc is not None
        self._complete_request(None)
        return True

    def _failed(self, err: DistError, cause: BaseException) -> DistError:
        """Keep ``err`` (raised from ``cause``) as this work's error, as a copy that holds no
        frames of the failed call (:func:`detached`), and return ``err`` to be raised."""
        self._exc = detached(err, cause)
        return err

    def wait(self, timeout: float | datetime.timedelta | None = None) -> bool:
        """Order the current stream after the operation (host arrays and point-to-point: block
        until done); ``timeout`` (seconds or a ``datetime.timedelta``, as torch's) bounds a
        host wait with :class:`DistTimeoutError`; 0, like None, waits without a bound
        (torch's ``kNoTimeout``). Returns True.

        Raises:
            TypeError: ``timeout`` is not a number or a timedelta.
            ValueError: ``timeout`` is negative or NaN.
        """
        timeout = _wait_seconds(timeout)
        try:
            if self._request is not None:
                self._complete_request(timeout)   # (returns at once if another thread finished)
            elif self._event is not None:
                if timeout is not None:
                    wait_until(self._event.query, timeout, lambda: self._timed_out(timeout))
                assert self._stream_of is not None
                b, index = self._stream_of
                self._event.wait(_current(b, index))
            self._check()
            self._waited = True
        finally:
            if self._future is not None:   # (checked here: a call per wait() costs ~20%)
                self._observe()
        return True

    def synchronize(self) -> None:
        """Block the host until the operation completed."""
        try:
            if self._request is not None:
                self._complete_request(None)
            elif self._event is not None:
                self._event.synchronize()
            self._check()
            self._waited = True
        finally:
            if self._future is not None:   # (checked here: a call per wait() costs ~20%)
                self._observe()

    def is_completed(self) -> bool:
        """True once the operation completed (point-to-point: its data is in the array, as
        torch's: a staged receive lands here, before True is answered)."""
        if self._request is None and self._future is None:   # (the fast path: done, no future)
            return True if self._event is None else self._event.query()
        if self._request is not None:
            done = self._request_completed()
        elif self._event is not None:
            done = self._event.query()
        else:
            done = True
        if done and self._future is not None and not self._future._done:
            self._settle_future()
        return done

    def _request_completed(self) -> bool:
        """:meth:`is_completed` of a point-to-point work not known to be finished (off the
        fast path of a finished work's ``is_completed()``)."""
        req = self._request   # (once: another thread may have finished the work and cleared it)
        if req is None:
            return True
        try:
            if not req.test():
                return False
            self._complete_request(None)   # (done: no wait; lands a staged receive)
        except Exception as exc:   # kept (a failed receive: by _complete_request)
            if self._exc is None:
                assert self._group is not None
                err = exc if isinstance(exc, DistError) else self._group._engine_error(
                    self._op, self._seq, exc)
                self._failed(err, exc)
        return True

    def is_success(self) -> bool:
        """True if completed without an error."""
        return self.is_completed() and self.exception() is None

    def exception(self) -> BaseException | None:
        """The error this work (or its group) hit, or None."""
        if self._exc is not None:
            return self._exc
        return None if self._group is None else self._group._error

    def source_rank(self) -> int:
        """For a receive: the group rank the data came from. Other work raises, as torch's."""
        if self._op not in ("recv", "irecv"):
            raise DistError("sourceRank() may only be called on work objects that correspond "
                            f"to a recv or recv-from-any call, not {self._op or 'completed work'}")
        if self._request is not None:
            self._complete_request(None)
        return self._source

    def _source_rank(self) -> int:
        """torch's private spelling of :meth:`source_rank` (``Work._source_rank()``, which
        PyTorch's own tests call after a receive from any source)."""
        return self.source_rank()

    def result(self) -> list[Any]:
        """The output arrays of the operation.

        Raises:
            DistError: a send or receive of a host engine (MPI), as torch's gloo ("result()
                not implemented."), or an operation not completed yet on a host engine
                (torch's gloo: "Work needs to be completed before calling result()"; call
                :meth:`wait` first). A stream-ordered engine's (NCCL) work answers the
                outputs either way, as torch's NCCL work.
        """
        if self._no_result:
            raise DistError("result() not implemented.")
        if not (self._early_result or self._waited or self.is_completed()):
            raise DistError("Work needs to be completed before calling result(). Should call "
                            "wait() before result().")
        return list(self._outputs)

    # -- futures -----------------------------------------------------------------------
    def get_future(self) -> Future:
        """A :class:`Future` completed with the operation's output list (what :meth:`result`
        answers) once it completes, or with its error (torch's ``Work.get_future()``; the
        same future on every call). A stream-ordered engine's (NCCL) future is complete at
        once, as torch's NCCL work's; another engine's completes when the operation is seen
        done (see :class:`Future`).

        Raises:
            DistError: a send or receive of a host engine (MPI), as torch's gloo and MPI
                point-to-point work ("Work::getFuture not implemented.").

        Example (DDP's allreduce comm hook)::

            >>> import accelrt as acc, accelrt.distributed as dist
            >>> dist.init_process_group("mpi")
            >>> a = acc.full((2,), 4.0, device="cpu")
            >>> fut = dist.all_reduce(a, async_op=True).get_future()
            >>> fut.then(lambda f: f.value()[0].tolist()).wait()
            [4.0, 4.0]
            >>> del a, fut
            >>> dist.destroy_process_group()
        """
        if self._no_result:
            raise DistError("Work::getFuture not implemented.")
        fut = self._future
        if fut is None and self._done_future is not None:
            fut = self._done_future()
        if fut is None:
            fut = Future()
            fut._work = self
            self._future = fut
            if self._early_result or self._settled():
                self._settle_future()
        return fut

    def get_future_result(self) -> Future:
        """A :class:`Future` completed with the operation's outcome as torch's ``WorkResult``
        number once it completes: 0 (``SUCCESS``), 1 (``TIMEOUT``) or 2 (``COMM_ERROR``).
        Only a stream-ordered engine's (NCCL) work has one, as in torch 2.15.

        Raises:
            DistError: the work of a host engine (MPI) or a completed handle, as torch's
                gloo and MPI work ("Work::getFutureResult not implemented.").
        """
        if not self._early_result or self._no_result:
            raise DistError("Work::getFutureResult not implemented.")
        return self.get_future().then(_work_result)

    def _settled(self) -> bool:
        """The operation completed or failed (its future can be completed)."""
        try:
            return self.is_completed()
        except Exception:   # noqa: BLE001 - failed: the error completes the future
            return True

    def _observe(self) -> None:
        """After ``wait()``/``synchronize()``: complete the future of a finished operation."""
        fut = self._future
        if fut is not None and not fut._done and self._settled():
            self._settle_future()

    def _settle_future(self) -> None:
        """Complete the future with the outputs, or the error the operation hit."""
        fut = self._future
        if fut is None:
            return
        if not fut._done:
            error = self.exception()
            fut._complete(None if error is not None else list(self._outputs), error, False)
        self._future, self._done_future = None, weakref.ref(fut)

    def __repr__(self) -> str:
        return f"<accelrt.distributed.Work {self._op or 'completed'} seq={self._seq}>"


def _work_result(fut: Future) -> int:
    """torch's ``WorkResult`` of a work's future: 0 success, 1 timeout, 2 another error."""
    err = fut._error
    if err is None:
        return 0
    return 1 if isinstance(err, DistTimeoutError) else 2
