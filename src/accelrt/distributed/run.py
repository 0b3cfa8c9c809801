"""``mpiexec -n N python -m accelrt.distributed.run script.py [args]`` (or ``-m module``).

Runs the script as ``__main__`` on every rank, after:

* setting ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE`` (node-local ranks
  from an MPI shared-memory split, so a host list or a simulated multi-node layout counts
  right), and, where the launch did not set them, torchrun's ``MASTER_ADDR`` (rank 0's host:
  ``127.0.0.1`` when every rank is on one node) and ``MASTER_PORT`` (a port free on it), so
  that ``init_process_group(init_method="env://")`` works as under torchrun;
* pinning the rank's device: ``LOCAL_RANK % device_count()`` of the current accelerator
  (one GPU per rank when the node has as many GPUs as ranks);
* making an uncaught exception on any rank abort the whole job (``MPI_Abort``) instead of
  leaving the other ranks waiting in their next collective.

The exit status of a script that calls ``sys.exit(n)`` with ``n != 0`` aborts the job too. A
child the script forked (``os.fork()``) that leaves the script ends alone, with its status (1
for an uncaught exception): MPI is its parent's, and its abort ended the whole job.

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
    # torchrun's MASTER_ADDR/MASTER_PORT, where the launch did not set them: code written for
    # torchrun initializes with init_method="env://" (torchvision's init_distributed_mode,
    # timm's init_distributed_device), whose store rank 0 serves there
    master = None
    if rank == 0 and not {"MASTER_ADDR", "MASTER_PORT"} <= os.environ.keys():
        master = (_master_addr(local_size == size), str(_free_port()))
    master = world.bcast(master, root=0)
    if master is not None:
        os.environ.setdefault("MASTER_ADDR", master[0])
        os.environ.setdefault("MASTER_PORT", master[1])
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


def _master_addr(one_node: bool) -> str:
    """Rank 0's address for the other ranks: loopback when every rank is on one node, else
    its host name."""
    import socket
    return "127.0.0.1" if one_node else socket.gethostname()


def _free_port() -> int:
    """A TCP port free on this host now (the kernel's pick, as torchrun's standalone mode)."""
    import socket
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


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
    pid = os.getpid()
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
        if os.getpid() != pid:   # a child the script forked: it ends alone (MPI is the parent's)
            raise SystemExit(1) from None
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
        if MPI.COMM_WORLD.Get_size() > 1 and os.getpid() == pid:
            _grace()
            MPI.COMM_WORLD.Abort(code)
        raise SystemExit(code)


if __name__ == "__main__":
    main()
