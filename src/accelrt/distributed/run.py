"""``mpiexec -n N python -m accelrt.distributed.run script.py [args]`` (or ``-m module``).

Runs the script as ``__main__`` on every rank, after:

* setting ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE`` (node-local ranks
  from an MPI shared-memory split, so a host list or a simulated multi-node layout counts
  right);
* pinning the rank's device: ``LOCAL_RANK % device_count()`` of the current accelerator
  (one GPU per rank when the node has as many GPUs as ranks);
* making an uncaught exception on any rank abort the whole job (``MPI_Abort``) instead of
  leaving the other ranks waiting in their next collective.

The exit status of a script that calls ``sys.exit(n)`` with ``n != 0`` aborts the job too.

Example::

    >>> from accelrt.distributed.run import parse_args
    >>> parse_args(["train.py", "--lr", "0.1"])
    ('path', 'train.py', ['--lr', '0.1'])
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from typing import Any

__all__ = ["main", "parse_args", "setup_rank"]

USAGE = ("usage: mpiexec -n N python -m accelrt.distributed.run script.py [args...]\n"
         "       mpiexec -n N python -m accelrt.distributed.run -m module [args...]")


def parse_args(argv: list[str]) -> tuple[str, str, list[str]]:
    """``(kind, target, args)``: kind is ``"path"`` or ``"module"``."""
    if not argv or argv[0] in ("-h", "--help"):
        raise SystemExit(USAGE)
    if argv[0] == "-m":
        if len(argv) < 2:
            raise SystemExit(USAGE)
        return "module", argv[1], argv[2:]
    return "path", argv[0], argv[1:]


def setup_rank(MPI: Any) -> tuple[int, int, int, int]:
    """Set the rank variables and pin the device; returns (rank, size, local rank, local
    size)."""
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    node = world.Split_type(MPI.COMM_TYPE_SHARED, rank)
    local, local_size = node.Get_rank(), node.Get_size()
    node.Free()
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(size), LOCAL_RANK=str(local),
                      LOCAL_WORLD_SIZE=str(local_size))
    try:
        import accelrt as acc
        dev = acc.current_accelerator()
        if dev is not None:
            count = acc.device_count()
            if count > 1:
                acc.set_device_index(f"{dev.type}:{local % count}")
    except Exception as exc:   # no accelerator: host arrays only
        print(f"[rank {rank}] accelrt.distributed.run: no device pinned ({exc})",
              file=sys.stderr)
    return rank, size, local, local_size


def _grace() -> None:
    """Let the launcher forward what this rank printed before the abort tears the job down
    (see ``_work.ABORT_GRACE``)."""
    import time

    from ._work import ABORT_GRACE
    time.sleep(ABORT_GRACE)


def main(argv: list[str] | None = None) -> None:
    """Entry point (see the module docstring)."""
    kind, target, args = parse_args(sys.argv[1:] if argv is None else argv)
    from ._mpi import mpi
    MPI = mpi()
    rank = MPI.COMM_WORLD.Get_rank()
    setup_rank(MPI)
    sys.argv = [target, *args]
    code: Any = 0
    try:
        if kind == "module":
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
            runpy.run_path(target, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
    except BaseException:
        sys.stdout.flush()
        text = traceback.format_exc()
        sys.stderr.write("".join(f"[rank {rank}] {line}\n" for line in text.splitlines()))
        sys.stderr.write(f"[rank {rank}] accelrt.distributed.run: aborting the job\n")
        sys.stderr.flush()
        _grace()
        MPI.COMM_WORLD.Abort(1)
    if code not in (None, 0):
        if not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        if MPI.COMM_WORLD.Get_size() > 1:
            _grace()
            MPI.COMM_WORLD.Abort(code)
        raise SystemExit(code)


if __name__ == "__main__":
    main()
