"""``accelrt.multiprocessing`` against ``torch.multiprocessing`` (2.14.1), by running both on
the CPU: ``start_processes`` / ``ProcessContext.join`` failure reports and the sharing
strategy forms. Expectations observed on torch 2.14.1 are written as literals (no torch here).

Children are forked inside one subprocess per test, with a hard timeout, so a hang fails the
test instead of the suite.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import accelrt.multiprocessing as amp

_BIG_TRACEBACK = r"""
import time
import accelrt.multiprocessing as amp

def child(i):
    if i == 1:
        raise ValueError("x" * (1 << 20))     # a traceback larger than a pipe's buffer
    time.sleep(0.2)

try:
    amp.start_processes(child, nprocs=2, start_method="fork")
except amp.ProcessRaisedException as exc:
    text = str(exc)
    print(exc.error_index, exc.pid is not None, len(text) > (1 << 20),
          text.startswith("\n\n-- Process 1 terminated with the following error:\nTraceback"),
          text.endswith("x\n"))
"""


def test_a_traceback_larger_than_a_pipe_is_reported_not_a_hang() -> None:
    # observed on torch 2.14.1: ProcessRaisedException(error_index=1) carrying the whole
    # 1 MiB message (torch's child writes it to a file); accelrt's child blocked for ever
    # sending it through its error pipe while the parent waited for the child to exit
    proc = subprocess.run([sys.executable, "-c", _BIG_TRACEBACK], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["1", "True", "True", "True", "True"]


_PARENT_KILLED = r"""
import os, signal, sys, time
import accelrt.multiprocessing as amp

def child(i, path):
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(60)

signal.signal(signal.SIGINT, signal.default_int_handler)   # even where SIGINT is ignored
ctx = amp.start_processes(child, args=(sys.argv[1],), nprocs=1, join=False,
                          start_method="fork")
while not os.path.exists(sys.argv[1]) or not open(sys.argv[1]).read():
    time.sleep(0.01)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _running(pid: int) -> bool:
    """Whether ``pid`` still runs (not gone, not a zombie waiting to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_ends_when_its_parent_is_killed(tmp_path: Path) -> None:
    # observed on torch 2.14.1: its _wrap sets PR_SET_PDEATHSIG to SIGINT, so a child whose
    # parent is SIGKILLed gets a KeyboardInterrupt and exits; accelrt's ran on as an orphan
    path = tmp_path / "pid"
    proc = subprocess.run([sys.executable, "-c", _PARENT_KILLED, str(path)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    pid = int(path.read_text())
    end = time.monotonic() + 20
    try:
        while _running(pid) and time.monotonic() < end:
            time.sleep(0.05)
        assert not _running(pid), "the child runs on after its parent was killed"
    finally:
        if _running(pid):
            os.kill(pid, signal.SIGKILL)


def test_sharing_strategy_forms() -> None:
    # observed on torch 2.15.0 (and 2.14.1): get_all_sharing_strategies() == {"file_descriptor",
    # "file_system"}, and set_sharing_strategy of anything else that hashes ("bad", None, 1)
    # raises AssertionError("invalid sharing strategy 'bad', expected one of {...}"), an
    # unhashable one TypeError; accelrt's AssertionError is a ValueError too
    assert amp.get_all_sharing_strategies() == {"file_descriptor", "file_system"}
    assert amp.get_sharing_strategy() == "file_descriptor"
    for bad in ("bad", None, 1, "FILE_SYSTEM"):
        with pytest.raises(AssertionError, match=r"^invalid sharing strategy .*, expected one "
                                                 r"of \{'file_descriptor', 'file_system'\}"
                           ) as info:
            amp.set_sharing_strategy(bad)  # type: ignore[arg-type]
        assert isinstance(info.value, ValueError)
    for unhashable in (["file_descriptor"], {"a": 1}):
        with pytest.raises(TypeError, match="a sharing strategy is a string"):
            amp.set_sharing_strategy(unhashable)  # type: ignore[arg-type]
    amp.set_sharing_strategy("file_descriptor")
    assert amp.get_sharing_strategy() == "file_descriptor"


def test_process_exception_attributes_as_torchs() -> None:
    # observed on torch 2.14.1: ProcessExitedException("m", 1, 42, 3) has args ("m",), msg,
    # error_index, error_pid, exit_code and signal_name None, and pickles with all of them;
    # ProcessRaisedException("m", 1, 42) the first four (neither has ``pid``: accelrt's alias)
    exited = amp.ProcessExitedException("m", 1, 42, 3)
    raised = amp.ProcessRaisedException("m", 1, 42)
    for exc in (exited, raised, pickle.loads(pickle.dumps(exited)),
                pickle.loads(pickle.dumps(raised))):
        assert isinstance(exc, Exception) and str(exc) == "m" and exc.args == ("m",)
        assert (exc.msg, exc.error_index, exc.error_pid, exc.pid) == ("m", 1, 42, 42)
    again = pickle.loads(pickle.dumps(amp.ProcessExitedException("m", 0, 7, -9, "SIGKILL")))
    assert (again.exit_code, again.signal_name) == (-9, "SIGKILL")
    assert (exited.exit_code, exited.signal_name) == (3, None)
