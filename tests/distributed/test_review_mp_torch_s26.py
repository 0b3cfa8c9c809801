"""``accelrt.multiprocessing`` against ``torch.multiprocessing`` (2.14.1), by running both on
the CPU: ``start_processes`` / ``ProcessContext.join`` failure reports and the sharing
strategy forms. Expectations observed on torch 2.14.1 are written as literals (no torch here).

Children are forked inside one subprocess per test, with a hard timeout, so a hang fails the
test instead of the suite.
"""

from __future__ import annotations

import subprocess
import sys

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
