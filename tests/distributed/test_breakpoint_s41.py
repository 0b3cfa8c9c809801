"""``accelrt.distributed.breakpoint``: torch 2.15's ``torch.distributed.breakpoint`` (it was
missing, and not listed in docs/differences.md).

The programs are ``breakpoint_ranks_s41.py``'s modes, each in a subprocess with a timeout:
a world of one rank whose pdb session the test types on a terminal (a pty: the debugger reads
``/dev/stdin`` although the program replaced ``sys.stdin``), the ``skip=`` counters, torch's
treatment of bad arguments (checked on torch 2.15's gloo, one rank, with the same calls), and
two ranks under mpiexec where rank 1 waits at the barrier, past the world's own timeout,
while rank 0 is in pdb.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SCRIPT = str(HERE / "breakpoint_ranks_s41.py")


def _run(mode: str, typed: str | None = None, timeout: float = 60) -> str:
    """Run ``mode`` in one process: its standard input a terminal on which ``typed`` is
    typed (None: /dev/null). Its output, after checking that it passed."""
    from test_distributed import _env
    if typed is None:
        master = slave = None
    else:
        master, slave = pty.openpty()
        os.write(master, typed.encode())
    try:
        proc = subprocess.run([sys.executable, SCRIPT, mode], env=_env({}), text=True,
                              stdin=subprocess.DEVNULL if slave is None else slave,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=timeout, check=False)
    finally:
        for fd in (master, slave):
            if fd is not None:
                os.close(fd)
    assert proc.returncode == 0 and f"OK {mode}" in proc.stdout, proc.stdout[-3000:]
    return proc.stdout


def test_one_rank_session_reads_the_terminal() -> None:
    # a terminal delivers a line a read, so both sessions get their commands (a pipe would
    # hand all of them to the first session's buffered /dev/stdin, as with torch's)
    out = _run("pdb", "up\np caller_local\nc\nc\n")
    assert out.count("!!! ATTENTION !!!") == 2, out
    assert "Type 'up' to get to the frame that called dist.breakpoint(rank=0)" in out, out
    # stopped in breakpoint() itself; "up" reaches the caller, whose locals pdb reads
    assert "_breakpoint.py" in out and "-> dist.breakpoint()" in out, out
    assert "'seen-from-pdb'" in out, out


def test_skip_counts_by_traceback_text() -> None:
    _run("skip")


def test_bad_arguments_as_torch() -> None:
    _run("args")


def test_two_ranks_rank_one_waits_at_the_barrier(tmp_path: Path) -> None:
    from test_distributed import mpi_launcher
    _, launch = mpi_launcher()
    rc, out, _ = launch(2, "breakpoint_ranks_s41.py", "two", str(tmp_path),
                        input="up\np check()\nc\n", timeout=120)
    assert rc == 0 and out.count("OK two") == 2, out[-3000:]
    # rank 0's session saw rank 1 arrive and not pass, past the world's own 1.5 s timeout
    assert "'rank 1 reached=True passed=False'" in out, out[-3000:]
    assert out.count("!!! ATTENTION !!!") == 1, out   # rank 1 did not stop
    assert (tmp_path / "passed").exists()


@pytest.mark.parametrize("name", ["breakpoint", "_make_distributed_pdb"])
def test_names_as_torch(name: str) -> None:
    # torch.distributed has both; a star import brings the public one, as torch's does
    import accelrt.distributed as dist
    assert callable(getattr(dist, name))
    assert (name in dist.__all__) is not name.startswith("_")
