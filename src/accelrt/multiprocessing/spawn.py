"""``accelrt.multiprocessing.spawn``: start ``nprocs`` processes running ``fn(i, *args)`` and
join them, ending all of them as soon as one fails (``torch.multiprocessing.spawn``'s model).

Example::

    >>> from accelrt.multiprocessing.spawn import ProcessExitedException
    >>> issubclass(ProcessExitedException, Exception)
    True
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .._device import _index_arg
from .._errors import _WrongKindError, type_shown

__all__ = ["ProcessContext", "ProcessException", "ProcessExitedException",
           "ProcessRaisedException", "SpawnContext", "spawn", "start_processes"]

#: torch's environment variable: ``"1"`` makes :func:`start_processes` start ``forkserver``
#: processes in parallel (torch's name, read as torch reads it)
ENV_VAR_PARALLEL_START = "TORCH_MP_PARALLEL_START"

log = logging.getLogger(__name__)


class ProcessException(Exception):
    """A spawned process failed; ``error_index`` is its index, ``error_pid`` its process id
    (torch's names), also readable as ``pid`` (an alias of accelrt's: torch 2.14.1's
    exceptions have only ``error_pid``)."""

    error_index: int
    error_pid: int | None

    def __init__(self, msg: str, error_index: int, error_pid: int | None) -> None:
        super().__init__(msg)
        self.msg, self.error_index, self.error_pid = msg, error_index, error_pid

    @property
    def pid(self) -> int | None:
        """The failed process's id, ``error_pid`` (an alias; torch 2.14.1 has no ``pid``)."""
        return self.error_pid

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


_PR_SET_PDEATHSIG = 1   # <linux/prctl.h>


def _interrupt_when_parent_dies() -> None:
    """Have the kernel send this process SIGINT when its parent dies (Linux; elsewhere
    nothing), as torch's ``_prctl_pr_set_pdeathsig(SIGINT)``: a child whose parent was
    killed ends instead of running on as an orphan."""
    if sys.platform.startswith("linux"):   # the process's own symbols: libc's prctl
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGINT))


def _wrap(fn: Callable[..., Any], i: int, args: tuple[Any, ...], errors: Any) -> None:
    # As torch 2.15's _wrap: an exception is reported to the parent (ProcessRaisedException);
    # ``sys.exit(code)`` is an exit, not an error (code 0 succeeds, another code is a
    # ProcessExitedException). A KeyboardInterrupt ends quietly only when the parent died
    # (PR_SET_PDEATHSIG's SIGINT: this process was re-parented); while the parent lives it
    # is a failure like any other, reported with exit code 128 + SIGINT.
    _interrupt_when_parent_dies()
    parent = os.getppid()
    try:
        fn(i, *args)
    except KeyboardInterrupt:
        if os.getppid() == parent:
            errors.send(traceback.format_exc())
            raise SystemExit(128 + signal.SIGINT) from None
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


def _check_context_args(processes: object, error_pipes: object) -> None:
    """``ProcessContext(processes, error_pipes)``'s arguments: two sequences of one length,
    started processes (with a ``sentinel``) and the read ends of their error pipes (with
    ``poll`` and ``recv``), as :func:`start_processes` makes them.

    Raises:
        TypeError: an argument is not a sequence (a str or bytes included), or an item is
            not a started process / a connection (also an ``AttributeError``, the class
            torch's ``ProcessContext`` raises reading ``sentinel`` of another object).
        ValueError: the two sequences differ in length.
    """
    for what, seq in (("processes", processes), ("error_pipes", error_pipes)):
        if isinstance(seq, (str, bytes, bytearray)) or not isinstance(seq, Sequence):
            raise TypeError(f"ProcessContext(): {what} must be a list, got {type_shown(seq)}; "
                            "pass the processes start_processes(..., join=False) started "
                            "and their error pipes")
    assert isinstance(processes, Sequence) and isinstance(error_pipes, Sequence)
    for i, p in enumerate(processes):
        try:
            _ = p.sentinel   # a Process raises ValueError before start(): not started
        except (AttributeError, ValueError):
            raise _WrongKindError(f"ProcessContext(): processes[{i}] is not a started "
                                  f"multiprocessing process (it has no sentinel), got "
                                  f"{type_shown(p)}") from None
    for i, c in enumerate(error_pipes):
        if not (callable(getattr(c, "poll", None)) and callable(getattr(c, "recv", None))):
            raise _WrongKindError(f"ProcessContext(): error_pipes[{i}] is not a "
                                  f"multiprocessing connection (with poll and recv), got "
                                  f"{type_shown(c)}")
    if len(processes) != len(error_pipes):
        raise ValueError(f"ProcessContext(): {len(processes)} processes but "
                         f"{len(error_pipes)} error pipes; pass one error pipe per process")


def _check_seconds(value: object, what: str) -> float | None:
    """``join``'s ``timeout``/``grace_period``: None or a number of seconds (not NaN); a value
    beyond ``threading.TIMEOUT_MAX`` waits as long as ``None`` does."""
    if value is None:
        return None
    try:
        f = float(value)   # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        if isinstance(value, int):   # beyond a float: as long as None
            return None if value > 0 else 0.0
        raise TypeError(f"ProcessContext.join(): {what} must be a number of seconds or "
                        f"None, got {type_shown(value)}") from None
    if isinstance(value, (str, bytes, bytearray)):
        raise TypeError(f"ProcessContext.join(): {what} must be a number of seconds or None, "
                        f"got {type_shown(value)}")
    if f != f:
        raise ValueError(f"ProcessContext.join(): {what} must be a number of seconds, got "
                         "nan")
    return None if f > threading.TIMEOUT_MAX else f


class ProcessContext:
    """The processes :func:`start_processes` started; :meth:`join` waits for them."""

    def __init__(self, processes: list[Any], error_pipes: list[Any]) -> None:
        _check_context_args(processes, error_pipes)
        self.processes = processes
        self.error_pipes = error_pipes
        self.sentinels = {p.sentinel: i for i, p in enumerate(processes)}
        # what each process sent through its error pipe (None: nothing, the pipe is at its
        # end), read as soon as it arrives: a child blocks in its send until the whole
        # traceback is read, and a long one does not fit in the pipe's buffer
        self._reports: dict[int, str | None] = {}

    def pids(self) -> list[int | None]:
        """Process ids of the spawned processes."""
        return [p.pid for p in self.processes]

    def _report(self, i: int) -> str | None:
        """What process ``i`` sent through its error pipe (read once, then remembered)."""
        if i not in self._reports:
            self._reports[i] = _reported(self.error_pipes[i])
        return self._reports[i]

    def _wait(self, timeout: float | None) -> list[Any]:
        """The sentinels of the running processes that are ready within ``timeout`` seconds
        (``None``: until one is), reading each error pipe meanwhile as its report arrives."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            pipes = {self.error_pipes[i]: i for i in self.sentinels.values()
                     if i not in self._reports}
            left = None if end is None else max(0.0, end - time.monotonic())
            ready = multiprocessing.connection.wait([*self.sentinels, *pipes], timeout=left)
            for obj in ready:
                if obj in pipes:
                    self._report(pipes[obj])
            exited = [obj for obj in ready if obj in self.sentinels]
            if exited or not ready or (end is not None and time.monotonic() >= end):
                return exited

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
        timeout = _check_seconds(timeout, "timeout")
        grace_period = _check_seconds(grace_period, "grace_period")
        if not self.sentinels:
            return True
        ready = self._wait(timeout)
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
                log.warning("Terminating process %s via signal SIGTERM", p.pid)
                p.terminate()
        self._join_all(30.0 if grace_period is None else grace_period)
        for p in self.processes:
            if p.is_alive():
                log.warning("Unable to shutdown process %s via SIGTERM , forcefully exiting "
                            "via SIGKILL", p.pid)
                p.kill()
            p.join()
        p = self.processes[failed]
        trace = self._report(failed)
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


class SpawnContext(ProcessContext):
    """``ProcessContext``'s name before torch 1.4, kept by torch (and here) with a warning.

    Example::

        >>> import warnings
        >>> from accelrt.multiprocessing import SpawnContext
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     SpawnContext([], []).join()
        True
        >>> str(caught[0].message)
        'SpawnContext is renamed to ProcessContext since 1.4 release.'
    """

    def __init__(self, processes: list[Any], error_pipes: list[Any]) -> None:
        warnings.warn("SpawnContext is renamed to ProcessContext since 1.4 release.",
                      stacklevel=2)
        super().__init__(processes, error_pipes)


def _process_limit() -> int:
    """The most processes this system can run at once: Linux's ``pid_max`` (no more process
    ids exist), else Linux's largest possible ``pid_max`` (2**22)."""
    try:
        with open("/proc/sys/kernel/pid_max") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return 1 << 22


def _end_started(started: list[tuple[Any, Any]]) -> None:
    """Terminate (then kill) and join the processes of a start that failed part way; close
    their error pipes."""
    for p, _ in started:
        if p.is_alive():
            p.terminate()
    for p, reader in started:
        p.join(5.0)
        if p.is_alive():
            p.kill()
            p.join()
        reader.close()


def start_processes(fn: Callable[..., Any], args: tuple[Any, ...] = (), nprocs: int = 1,
                    join: bool = True, daemon: bool = False,
                    start_method: str = "spawn") -> ProcessContext | None:
    """Start ``nprocs`` processes of ``start_method`` (``"spawn"``, ``"fork"``,
    ``"forkserver"``) running ``fn(i, *args)``, as ``torch.multiprocessing.start_processes``.

    As torch's, ``forkserver`` processes are started in parallel (one thread each) when the
    environment variable ``TORCH_MP_PARALLEL_START`` (:data:`ENV_VAR_PARALLEL_START`) is
    ``"1"``; process ``i`` still runs ``fn(i, ...)`` and is ``processes[i]``.

    Returns:
        ``None`` after joining them all (``join=True``), else the :class:`ProcessContext`.
        ``nprocs=0`` starts nothing (as torch's), and returns at once.

    Raises:
        TypeError: ``nprocs`` is not an int (a bool included; torch multiplies a list by it),
            or ``start_method`` is unhashable (a list).
        ValueError: ``nprocs`` is negative (torch starts nothing) or beyond the system's
            pid limit (torch starts processes until one fails), or ``start_method`` is not
            one of this platform's (``multiprocessing.get_context``'s error).
        ProcessRaisedException, ProcessExitedException: see :meth:`ProcessContext.join`.
    """
    n = _index_arg(nprocs, "nprocs")
    if n < 0:
        raise ValueError(f"nprocs={n} must be >= 0 (the number of processes to start)")
    limit = _process_limit()
    if n > limit:
        # torch starts processes until the system refuses one, and leaves those running
        raise ValueError(f"nprocs={n} is more processes than this system can run at once (at "
                         f"most {limit}, its pid limit); pass a smaller nprocs")
    try:
        ctx: Any = multiprocessing.get_context(start_method)
    except TypeError:   # unhashable (a list): torch's TypeError, saying what is expected
        raise TypeError(f"start_method must be one of {multiprocessing.get_all_start_methods()}"
                        f", got {type_shown(start_method)}") from None

    def start(i: int) -> tuple[Any, Any]:
        reader, writer = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_wrap, args=(fn, i, args, writer), daemon=daemon)
        p.start()
        writer.close()
        return p, reader

    started: list[tuple[Any, Any]] = []
    try:
        if start_method == "forkserver" and os.environ.get(ENV_VAR_PARALLEL_START, "0") == "1" \
                and n > 0:
            with ThreadPoolExecutor(max_workers=n) as pool:
                futures = [pool.submit(start, i) for i in range(n)]
            failure = next((f.exception() for f in futures if f.exception() is not None), None)
            started = [f.result() for f in futures if f.exception() is None]
            if failure is not None:
                raise failure
        else:
            for i in range(n):
                started.append(start(i))
    except BaseException:
        # a start failed (the system refused a process, fn or args do not pickle): the
        # processes already started are ended, not left running without a context to join
        _end_started(started)
        raise
    context = ProcessContext([p for p, _ in started], [r for _, r in started])
    if not join:
        return context
    while not context.join():
        pass
    return None


def spawn(fn: Callable[..., Any], args: tuple[Any, ...] = (), nprocs: int = 1,
          join: bool = True, daemon: bool = False,
          start_method: str = "spawn") -> ProcessContext | None:
    """``torch.multiprocessing.spawn``: :func:`start_processes` with ``start_method="spawn"``.

    ``fn`` must be importable by the children (a module-level function). As torch's,
    ``start_method`` is deprecated: another method (``"fork"``) gives a ``FutureWarning`` and
    the processes are still spawned; :func:`start_processes` takes the other methods.

    Example::

        >>> import warnings, accelrt.multiprocessing as amp
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     amp.spawn(print, nprocs=0, start_method="fork")
        >>> caught[0].category.__name__, str(caught[0].message).splitlines()[0]
        ('FutureWarning', 'This method only supports start_method=spawn (got: fork).')
    """
    if start_method != "spawn":
        warnings.warn(f"This method only supports start_method=spawn (got: {start_method}).\n"
                      "To use a different start_method use:\n\t\t"
                      " accelrt.multiprocessing.start_processes(...)", FutureWarning,
                      stacklevel=2)
    return start_processes(fn, args, nprocs, join, daemon, "spawn")
