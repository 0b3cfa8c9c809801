"""Running an ``os.fork()`` scenario in a fresh interpreter, bounded by a timeout (a
regression is a hang, and Python 3.12+ warns about forking a process that has threads):
tests/runtime/test_fork.py and tests/distributed/test_exit_fork_s40.py.

:data:`HARNESS` is prepended to each scenario script: its ``fork_children(n, child)`` forks
``n`` children running ``child()`` and waits for them with a deadline, killing the ones that
hang; it prints ``children ok=.. hung=.. failed=..``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

__all__ = ["HARNESS", "run_fork_scenario"]

HARNESS = textwrap.dedent("""
    import os, signal, sys, time, traceback

    def fork_children(n, child, deadline_s=60.0):
        pids = []
        for _ in range(n):
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    child()
                except BaseException:
                    traceback.print_exc()
                    code = 3
                sys.exit(code)   # through interpreter exit: nothing may hang there either
            pids.append(pid)
        deadline = time.monotonic() + deadline_s
        ok = hung = failed = 0
        for pid in pids:
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    if os.waitstatus_to_exitcode(status) == 0:
                        ok += 1
                    else:
                        failed += 1
                    break
                if time.monotonic() > deadline:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    hung += 1
                    break
                time.sleep(0.005)   # polling a child's exit status, not ordering work
        print(f"children ok={ok} hung={hung} failed={failed}", flush=True)
""")


def run_fork_scenario(script: str, env: dict[str, str] | None = None,
                      timeout: float = 150) -> subprocess.CompletedProcess[str]:
    """Run :data:`HARNESS` followed by ``script`` (dedented) in a fresh interpreter on the cpu
    backend with ``env`` added; the test fails if the whole scenario outlives ``timeout``."""
    full = HARNESS + textwrap.dedent(script)
    try:
        return subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c", full],
                              # device-less calls mean the cpu backend, also on a GPU machine
                              env=dict(os.environ, ACCELRT_ACCELERATOR="cpu", **(env or {})),
                              capture_output=True,
                              text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the fork scenario itself hung:\n{exc.stdout!r:.2000}\n{exc.stderr!r:.3000}")
