"""Gates for ordering tests on asynchronous streams, without sleeps.

A :class:`Gate` is a host function that blocks its stream until opened. :func:`open_when_blocked`
opens it from a helper thread once a given thread is *blocked inside accelrt* (waiting for a
stream, an event or an OpenCL queue), so a test can check that a call waits for queued work:
if the call does not wait, the gate is never opened by the helper, and the test sees the work
still pending when the call returns.

"Blocked inside accelrt" is read from the thread's Python stack: its innermost frame is
``threading.Condition.wait`` called from accelrt (the cpu backend's stream waits), or an accelrt
frame sitting in a C call on several consecutive looks with the same frame and instruction,
where that call either sleeps (Linux reports the thread as sleeping in ``/proc``: an OpenCL
``finish``/``wait``) or is a CUDA driver wait (``cuStreamSynchronize``, ``cuCtxSynchronize``,
``cuEventSynchronize``): with the default scheduling (``CU_CTX_SCHED_AUTO``, one context on a
machine with more cores than contexts) those *spin*, so the thread reads as running, never
sleeping, and a gate waiting for "sleeping" would never open (the test would hang).
"""

from __future__ import annotations

import linecache
import os
import re
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

import accelrt

__all__ = ["Gate", "open_when_blocked"]

_PKG = os.path.dirname(os.path.abspath(accelrt.__file__))
_THREADING = os.path.abspath(threading.__file__)


class Gate:
    """A host function (``launch_host_func``) that blocks its stream until :meth:`open`;
    ``with gate:`` opens it on exit, so no stream stays blocked when a test fails."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def __call__(self) -> None:
        self.event.wait()

    def open(self) -> None:
        self.event.set()

    def __enter__(self) -> Gate:
        return self

    def __exit__(self, *exc: object) -> None:
        self.open()


def _in_accelrt(f: FrameType) -> bool:
    return os.path.abspath(f.f_code.co_filename).startswith(_PKG)


def _state(tid: int) -> str:
    try:
        with open(f"/proc/self/task/{tid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "?"


#: a CUDA driver wait on the current source line of an accelrt frame (the cuda backend's
#: ``check(self._drv.cuStreamSynchronize(stream), ...)``): the driver spins in it
_DRIVER_WAIT = re.compile(r"\bcu(Stream|Ctx|Event)Synchronize\(")


def _in_driver_wait(f: FrameType) -> bool:
    line = linecache.getline(f.f_code.co_filename, f.f_lineno or 0)
    return _DRIVER_WAIT.search(line) is not None


def _blocked(ident: int, native_id: int, seen: list[tuple[int, int]]) -> bool:
    f = sys._current_frames().get(ident)
    if f is None:
        return False
    if os.path.abspath(f.f_code.co_filename) == _THREADING and f.f_code.co_name == "wait":
        caller = f.f_back
        return caller is not None and _in_accelrt(caller)
    if not _in_accelrt(f) or (_state(native_id) != "S" and not _in_driver_wait(f)):
        seen.clear()
        return False
    key = (id(f), f.f_lasti)
    if seen and seen[-1] != key:
        seen.clear()
    seen.append(key)
    return len(seen) >= 5


@contextmanager
def open_when_blocked(gate: Gate, thread: threading.Thread | None = None, *,
                      open_on_exit: bool = True) -> Iterator[None]:
    """Within the block, a helper thread opens ``gate`` once ``thread`` (default: the
    calling thread) is blocked inside accelrt; on exit the helper stops (and the gate is
    opened in any case, so no stream stays blocked, unless ``open_on_exit=False``: then a
    call that never blocked leaves the gate closed, and ``gate.event.is_set()`` tells
    whether it blocked)."""
    target = thread or threading.current_thread()
    ident, native_id = target.ident, target.native_id
    assert ident is not None and native_id is not None
    stop = threading.Event()

    def watch() -> None:
        seen: list[tuple[int, int]] = []
        while not stop.is_set():
            if _blocked(ident, native_id, seen):
                gate.open()
                return
            time.sleep(0)   # yield the GIL: polling a state, not ordering work

    helper = threading.Thread(target=watch, name="open-when-blocked", daemon=True)
    helper.start()
    try:
        yield
    finally:
        stop.set()
        helper.join()
        if open_on_exit:
            gate.open()
