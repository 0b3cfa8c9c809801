"""Review of s41's merges (rev1): ``Stream.__exit__``'s arguments (the bottom entry of the
thread's stack of ``with stream:`` blocks, s41-senter).

torch 2.15's ``Stream.__exit__`` (``THPStream_exit``, METH_VARARGS) ignores any number of
positional arguments and refuses keywords (checked on /tmp/t215). accelrt's
``__exit__(exc_type=None, exc=None, tb=None)`` takes zero to three, also by keyword, and a
fourth is a ``TypeError`` that changes nothing (docs/differences.md; the s41 CHANGELOG line
said torch refuses four). These pin that documented behaviour in both builds.
"""

from __future__ import annotations

import threading

import pytest

import accelrt as acc


def test_exit_takes_its_arguments_by_keyword_too() -> None:
    s = acc.Stream("cpu:0")
    before = acc.current_stream("cpu:0")
    for kw in ({"exc_type": None}, {"exc": None}, {"tb": None},
               {"exc_type": None, "exc": None, "tb": None}):
        with s:
            s.__exit__(**kw)
            assert acc.current_stream("cpu:0") == before
            s.__enter__()   # (for the with block's own exit)
    assert acc.current_stream("cpu:0") == before
    with pytest.raises(TypeError):
        s.__exit__(other=None)
    s.close()


@pytest.mark.parametrize("n", [0, 1, 2, 3])
def test_exit_takes_up_to_three_positional_arguments(n: int) -> None:
    s = acc.Stream("cpu:0")
    before = acc.current_stream("cpu:0")
    s.__enter__()
    assert acc.current_stream("cpu:0") == s
    s.__exit__(*([None] * n))
    assert acc.current_stream("cpu:0") == before
    s.close()   # no thread uses it any more


def test_four_arguments_are_a_type_error_that_changes_nothing() -> None:
    s = acc.Stream("cpu:0")
    before = acc.current_stream("cpu:0")
    s.__enter__()
    with pytest.raises(TypeError):
        s.__exit__(None, None, None, None)
    assert acc.current_stream("cpu:0") == s
    s.__exit__(None, None, None)
    assert acc.current_stream("cpu:0") == before
    s.close()


def test_exit_without_enter_in_another_thread_is_refused() -> None:
    s = acc.Stream("cpu:0")
    out: list[BaseException] = []

    def other() -> None:
        try:
            s.__exit__(None, None, None)
        except BaseException as exc:  # noqa: BLE001 - checked below
            out.append(exc)

    with s:
        t = threading.Thread(target=other)
        t.start()
        t.join(30)
        assert acc.current_stream("cpu:0") == s
    assert len(out) == 1 and isinstance(out[0], RuntimeError)
    assert "without a matching __enter__" in str(out[0])
    s.close()


_FORK_CHILD = r"""
import os, sys, threading
import accelrt as acc
s = acc.Stream("cpu:0")
inside, leave = threading.Event(), threading.Event()

def worker():
    with s:
        inside.set()
        leave.wait(30)

t = threading.Thread(target=worker)
t.start()
assert inside.wait(30)
with s:                      # this thread is in a block too when it forks
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            assert acc.current_stream("cpu:0") == s
        except BaseException as exc:
            print("child: in block", exc, flush=True); code = 3
        try:
            s.close()        # refused: the forking thread's block is still open in the child
            print("child: closed a stream in use", flush=True); code = 4
        except RuntimeError:
            pass
        s.__exit__(None, None, None)
        try:
            s.close()        # the worker thread does not exist in the child
        except BaseException as exc:
            print("child: close", type(exc).__name__, exc, flush=True); code = 5
        os._exit(code)
_, status = os.waitpid(pid, 0)
leave.set()
t.join(30)
print("child exit", os.waitstatus_to_exitcode(status))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def test_fork_child_keeps_its_own_blocks_and_not_other_threads() -> None:
    """After ``os.fork`` the child has the forking thread's open ``with stream:`` blocks
    (above the bottom entry) and none of the other threads' (they do not exist there), so
    it may close a stream once its own block is left."""
    import os
    import subprocess
    import sys
    if not hasattr(os, "fork"):
        pytest.skip("no os.fork")
    r = subprocess.run([sys.executable, "-W", "ignore", "-c", _FORK_CHILD], capture_output=True,
                       text=True, timeout=120, env=dict(os.environ))
    assert r.returncode == 0, r.stdout + r.stderr


# ---------------------------------------------------------------------- device blocks (same changes)

@pytest.mark.parametrize("make", [lambda: acc.device_index(0), lambda: acc.cpu.device(0)],
                         ids=["device_index", "cpu.device"])
def test_device_blocks_exit_with_up_to_three_arguments_and_refuse_four(make: object) -> None:
    for args in [(), (None,), (None, None, None)]:
        cm = make()   # type: ignore[operator]
        cm.__enter__()
        assert cm.__exit__(*args) is None
    cm = make()   # type: ignore[operator]
    cm.__enter__()
    with pytest.raises(TypeError):
        cm.__exit__(None, None, None, None)
    cm.__exit__(None, None, None)   # the refused call left the block open: this one closes it
    assert acc.cpu.current_device() == 0


def test_device_blocks_left_out_of_order_restore_as_before() -> None:
    acc.set_current_accelerator("cpu")
    a, b = acc.device_index(0), acc.device_index(0)
    a.__enter__()
    b.__enter__()
    a.__exit__(None, None, None)   # out of order: b's entry stays
    b.__exit__(None, None, None)
    assert acc.current_device_index() == 0
    errors: list[BaseException] = []

    def other() -> None:   # a thread with no open block: device modules refuse the exit
        try:
            acc.cpu.device(0).__exit__(None, None, None)
        except RuntimeError as e:
            errors.append(e)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert errors and "without a matching" in str(errors[0])
