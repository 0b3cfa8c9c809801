"""``accelrt.multiprocessing.spawn``/``start_processes`` argument forms as PyTorch's
(``torch/multiprocessing/spawn.py``): ``spawn`` only spawns (another ``start_method`` is
deprecated: a ``FutureWarning``, then ``"spawn"``), ``start_processes`` takes every method and
``nprocs=0``, and a ``ProcessException`` carries the failed process's id as ``pid`` too.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from helpers import spawn_probe

import accelrt.multiprocessing as amp


def test_spawn_with_fork_warns_and_spawns_like_torch(tmp_path: Path) -> None:
    # torch: warnings.warn("This method only supports start_method=spawn (got: fork).\n..."
    # FutureWarning), then start_processes(..., start_method="spawn"); accelrt forked
    out = str(tmp_path / "out")
    spawn_probe.MARK.append(1)        # seen by a forked child only
    try:
        with pytest.warns(FutureWarning, match=r"only supports start_method=spawn \(got: "
                                               r"fork\)\.\nTo use a different start_method "
                                               r"use:\n\t\t accelrt\.multiprocessing\."
                                               r"start_processes") as caught:
            assert amp.spawn(spawn_probe.report, args=(out,), nprocs=1,
                             start_method="fork") is None
        assert caught[0].filename == __file__            # stacklevel: the caller's line
        assert Path(f"{out}.0").read_text() == "spawned"
        amp.start_processes(spawn_probe.report, args=(out,), nprocs=1, start_method="fork")
        assert Path(f"{out}.0").read_text() == "forked"  # start_processes keeps the method
    finally:
        spawn_probe.MARK.clear()


def test_start_processes_nprocs_forms() -> None:
    # torch: nprocs=0 starts nothing ([None] * 0 processes); accelrt raised ValueError
    assert amp.start_processes(spawn_probe.report, nprocs=0) is None
    ctx = amp.start_processes(spawn_probe.report, nprocs=0, join=False, start_method="fork")
    assert isinstance(ctx, amp.ProcessContext) and ctx.join() is True and ctx.pids() == []
    for bad in (1.5, "2", None, True):    # torch: TypeError from [None] * nprocs (a bool:
        with pytest.raises(TypeError, match="nprocs must be an int"):   # accelrt refuses)
            amp.start_processes(spawn_probe.report, nprocs=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="nprocs=-1 must be >= 0"):
        amp.start_processes(spawn_probe.report, nprocs=-1)
    with pytest.raises(ValueError, match="cannot find context for 'nosuch'"):
        amp.start_processes(spawn_probe.report, nprocs=1, start_method="nosuch")


def test_process_exceptions_carry_torchs_pid_attribute() -> None:
    # ``pid`` is accelrt's alias of ``error_pid`` (torch 2.14.1's exceptions have only
    # ``error_pid``: observed in s26)
    for exc in (amp.ProcessExitedException("gone", 1, 42, 3),
                amp.ProcessRaisedException("raised", 0, 43)):
        again = pickle.loads(pickle.dumps(exc))
        assert again.pid == again.error_pid == exc.error_pid
