"""``accelrt.multiprocessing.spawn``: start ``nprocs`` processes running ``fn(i, *args)`` and
join them, ending all of them as soon as one fails (``torch.multiprocessing.spawn``'s model).

Example::

    >>> from accelrt.multiprocessing.spawn import ProcessExitedException
    >>> issubclass(ProcessExitedException, Exception)
    True
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import signal
import time
import traceback
from collections.abc import Callable
from typing import Any

__all__ = ["ProcessContext", "ProcessException", "ProcessExitedException",
           "ProcessRaisedException", "spawn", "start_processes"]


class ProcessException(Exception):
    """A spawned process failed; ``error_index`` is its index, ``error_pid`` its process id
    (torch's names)."""

    error_index: int
    error_pid: int | None

    def __init__(self, msg: str, error_index: int, error_pid: int | None) -> None:
        super().__init__(msg)
        self.msg, self.error_index, self.error_pid = msg, error_index, error_pid

    def __reduce__(self) -> Any:
        return type(self), (self.msg, self.error_index, self.error_pid)


class ProcessRaisedException(ProcessException):
    """A spawned process raised; the message holds its traceback."""


class ProcessExitedException(ProcessException):
    """A spawned process exited with a non-zero code or was killed by a signal."""

    exit_code: int

    def __init__(self, msg: str, error_index: int, error_pid: int | None, exit_code: int,
                 signal_name: str | None = None) -> None:
        super().__init__(msg, error_index, error_pid)
        self.exit_code, self.signal_name = exit_code, signal_name

    def __reduce__(self) -> Any:
        return type(self), (self.msg, self.error_index, self.error_pid, self.exit_code,
                            self.signal_name)


def _wrap(fn: Callable[..., Any], i: int, args: tuple[Any, ...], errors: Any) -> None:
    # As torch's _wrap: an exception is reported to the parent (ProcessRaisedException);
    # ``sys.exit(code)`` is an exit, not an error (code 0 succeeds, another code is a
    # ProcessExitedException), and KeyboardInterrupt (the parent's SIGINT) ends quietly.
    try:
        fn(i, *args)
    except KeyboardInterrupt:
        pass
    except Exception:
        errors.send(traceback.format_exc())
        raise SystemExit(1) from None


def _reported(pipe: Any) -> str | None:
    """The traceback a failed process sent through its error pipe, or None when it sent
    none (it exited, or a signal killed it: the pipe is then only at its end)."""
    try:
        return str(pipe.recv()) if pipe.poll() else None
    except (EOFError, OSError):
        return None


class ProcessContext:
    """The processes :func:`start_processes` started; :meth:`join` waits for them."""

    def __init__(self, processes: list[Any], error_pipes: list[Any]) -> None:
        self.processes = processes
        self.error_pipes = error_pipes
        self.sentinels = {p.sentinel: i for i, p in enumerate(processes)}

    def pids(self) -> list[int | None]:
        """Process ids of the spawned processes."""
        return [p.pid for p in self.processes]

    def _join_all(self, timeout: float) -> None:
        end = time.monotonic() + timeout
        for p in self.processes:
            p.join(max(0.0, end - time.monotonic()))

    def join(self, timeout: float | None = None, grace_period: float | None = None) -> bool:
        """Wait ``timeout`` seconds (``None``: until something happens) for the processes.

        When one failed, the others get ``grace_period`` seconds to exit by themselves, then
        SIGTERM, then (after another ``grace_period``, default 30 s) SIGKILL, as in torch.

        Returns:
            True once every process exited successfully, False if some still run.

        Raises:
            ProcessRaisedException: a process raised (the others are terminated).
            ProcessExitedException: a process exited non-zero or died from a signal.
        """
        if not self.sentinels:
            return True
        ready = multiprocessing.connection.wait(list(self.sentinels), timeout=timeout)
        failed = None
        for sentinel in ready:
            i = self.sentinels.pop(sentinel)  # type: ignore[call-overload,unused-ignore]
            p = self.processes[i]
            p.join()
            if p.exitcode != 0:
                failed = i
                break
        if failed is None:
            return not self.sentinels
        if grace_period is not None:
            self._join_all(grace_period)
        for p in self.processes:
            if p.is_alive():
                p.terminate()
        self._join_all(30.0 if grace_period is None else grace_period)
        for p in self.processes:
            if p.is_alive():
                p.kill()
            p.join()
        p = self.processes[failed]
        trace = _reported(self.error_pipes[failed])
        if trace is not None:
            raise ProcessRaisedException(
                f"\n\n-- Process {failed} terminated with the following error:\n{trace}",
                failed, p.pid)
        code = int(p.exitcode)
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:   # a signal without a name (torch's wording)
                name = f"<Unknown signal {-code}>"
            raise ProcessExitedException(f"process {failed} terminated with signal {name}",
                                         failed, p.pid, code, name)
        raise ProcessExitedException(f"process {failed} terminated with exit code {code}",
                                     failed, p.pid, code)


def start_processes(fn: Callable[..., Any], args: tuple[Any, ...] = (), nprocs: int = 1,
                    join: bool = True, daemon: bool = False,
                    start_method: str = "spawn") -> ProcessContext | None:
    """Start ``nprocs`` processes of ``start_method`` running ``fn(i, *args)``.

    Returns:
        ``None`` after joining them all (``join=True``), else the :class:`ProcessContext`.

    Raises:
        ValueError: ``nprocs`` is not a positive int.
        ProcessRaisedException, ProcessExitedException: see :meth:`ProcessContext.join`.
    """
    if isinstance(nprocs, bool) or not isinstance(nprocs, int) or nprocs < 1:
        raise ValueError(f"nprocs={nprocs!r} must be a positive int")
    ctx: Any = multiprocessing.get_context(start_method)
    processes, pipes = [], []
    for i in range(nprocs):
        reader, writer = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_wrap, args=(fn, i, args, writer), daemon=daemon)
        p.start()
        writer.close()
        processes.append(p)
        pipes.append(reader)
    context = ProcessContext(processes, pipes)
    if not join:
        return context
    while not context.join():
        pass
    return None


def spawn(fn: Callable[..., Any], args: tuple[Any, ...] = (), nprocs: int = 1,
          join: bool = True, daemon: bool = False,
          start_method: str = "spawn") -> ProcessContext | None:
    """``torch.multiprocessing.spawn``: :func:`start_processes` (``spawn`` by default).

    ``fn`` must be importable by the children (a module-level function).
    """
    return start_processes(fn, args, nprocs, join, daemon, start_method)
