"""The programs of test_breakpoint_s41.py: ``python breakpoint_ranks_s41.py MODE [DIR]``.

Each replaces ``sys.stdin`` with ``/dev/null`` first, as a launcher may: the debugger must
read the process's real standard input (``/dev/stdin``), which the test scripts. A mode
prints ``OK <mode>`` when its checks passed.

- ``pdb``: a world of one rank stops in pdb (the test types the commands); ``timeout_s``
  reaches every group; ``timeout_s=None`` leaves them.
- ``skip``: ``skip=`` counters (no pdb: stdin is /dev/null for the test, so a pdb that were
  entered would quit at once, failing the mode).
- ``args``: torch's treatment of bad arguments (no pdb either).
- ``two``: two ranks (mpiexec): rank 0 stops in pdb, rank 1 waits at the barrier, past the
  world's own timeout, until rank 0 continues.
"""

from __future__ import annotations

import datetime
import logging
import os
import sys
import time

import accelrt.distributed as dist

MODE = sys.argv[1]
sys.stdin = open(os.devnull)   # noqa: SIM115 - as a launcher does: pdb must read /dev/stdin
caller_local = "seen-from-pdb"   # printed by the test's pdb commands after "up"


def expect(exc: type[BaseException], match: str, fn: object, *args: object,
           **kwargs: object) -> None:
    try:
        fn(*args, **kwargs)   # type: ignore[operator]
    except exc as e:
        assert match in str(e), (match, str(e))
    else:
        raise AssertionError(f"{fn}{args}{kwargs} did not raise {exc.__name__}")


if MODE == "pdb":
    dist.init_process_group("mpi", timeout=30)
    g = dist.new_group([0], timeout=20)
    dist.breakpoint()   # the test: up, p caller_local, c
    assert dist.group.WORLD.timeout == g.timeout == 3600.0, (dist.group.WORLD.timeout, g.timeout)
    assert sys.stdin.name == os.devnull, sys.stdin   # restored after the session
    dist.set_timeout(30)
    dist.set_timeout(20, g)
    seq = dist.group.WORLD._seq
    dist.breakpoint(rank=0, timeout_s=None)   # the test: c
    assert (dist.group.WORLD.timeout, g.timeout) == (30.0, 20.0)
    assert dist.group.WORLD._seq == seq + 1   # the barrier after the session
    dist.destroy_process_group()

elif MODE == "skip":
    logged: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logged.append(record.getMessage())

    logging.getLogger("accelrt.distributed").addHandler(Keep())
    # skipped calls return before anything else: no default group needed
    dist.breakpoint(skip=2)
    dist.breakpoint(skip=2)
    assert logged == ["Skip the breakpoint, counter=1", "Skip the breakpoint, counter=2"]
    dist.init_process_group("mpi", timeout=30)
    w = dist.group.WORLD
    seq = w._seq
    # the third call outside an exception (any line: one counter) goes on: rank 1 of a world
    # of one does not stop, so it only sets the timeouts and meets the barrier
    dist.breakpoint(rank=1, skip=2)
    assert (w.timeout, w._seq) == (3600.0, seq + 1), (w.timeout, w._seq, seq)
    dist.set_timeout(30)
    # inside an except block the counter is the traceback's own: skipped, nothing changes
    try:
        raise KeyError("x")
    except KeyError:
        dist.breakpoint(rank=1, skip=1)
        assert (w.timeout, w._seq) == (30.0, seq + 1)
        assert logged[-1] == "Skip the breakpoint, counter=1", logged
    # skip <= 0 counts nothing; a float compares as torch's does
    dist.breakpoint(rank=1, skip=-1)
    dist.breakpoint(rank=1, skip=3.5)   # type: ignore[arg-type] # counter 4 > 3.5: goes on
    assert w._seq == seq + 3 and len(logged) == 3, (w._seq, logged)
    from accelrt.distributed._breakpoint import _breakpoint_cache
    assert _breakpoint_cache["NoneType: None\n"] == 4, _breakpoint_cache
    assert sorted(_breakpoint_cache.values()) == [1, 4], _breakpoint_cache
    dist.destroy_process_group()

elif MODE == "args":
    # torch 2.15's errors, each before any pdb; checked on torch's gloo with rank=5
    expect(ValueError, "Default process group has not been initialized", dist.breakpoint)
    dist.init_process_group("mpi", timeout=30)
    w = dist.group.WORLD
    expect(TypeError, "'>' not supported", dist.breakpoint, skip=None)
    expect(TypeError, "unsupported type for timedelta seconds component: str",
           dist.breakpoint, timeout_s="x")
    expect(TypeError, "unsupported type for timedelta seconds component",
           dist.breakpoint, timeout_s=datetime.timedelta(seconds=3))
    expect(OverflowError, "cannot convert float infinity", dist.breakpoint,
           timeout_s=float("inf"))
    # accelrt's set_timeout refuses what is not positive (torch: gloo takes 0, refuses -1)
    expect(ValueError, "positive", dist.breakpoint, timeout_s=0)
    expect(ValueError, "positive", dist.breakpoint, timeout_s=-1)
    assert w.timeout == 30.0
    # a rank the world does not have, or no int: torch does not check it; no rank stops
    for rank in (5, -1, "0", None):
        dist.breakpoint(rank=rank, timeout_s=1.5)   # type: ignore[arg-type]
    assert w.timeout == 1.5
    dist.destroy_process_group()

elif MODE == "two":
    where = sys.argv[2]
    reached, passed = os.path.join(where, "reached"), os.path.join(where, "passed")
    # the world's own timeout, which rank 1's wait at the barrier outlasts (the runner started
    # the ranks together: init takes far less)
    TIMEOUT = 1.5
    dist.init_process_group("mpi", timeout=TIMEOUT)
    rank = dist.get_rank()

    def check() -> str:
        """Called from rank 0's pdb session: wait for rank 1 to reach its breakpoint (a
        gate), then stay past the world's timeout; rank 1 has not passed the barrier."""
        deadline = time.monotonic() + 60
        while not os.path.exists(reached) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(TIMEOUT + 1.0)   # the old timeout would have ended the job by now
        return f"rank 1 reached={os.path.exists(reached)} passed={os.path.exists(passed)}"

    if rank == 1:
        open(reached, "w").close()
    dist.breakpoint(timeout_s=60)   # rank 0: the test's commands: up, p check(), c
    if rank == 1:
        open(passed, "w").close()
    assert dist.group.WORLD.timeout == 60.0
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank} went on", flush=True)

else:
    raise SystemExit(f"unknown mode {MODE!r}")
print(f"OK {MODE}", flush=True)
