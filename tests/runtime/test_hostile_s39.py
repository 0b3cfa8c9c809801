"""Session 39: hostile inputs to the surfaces sessions 36-38 added.

Each test failed before its fix; torch 2.15 (CPU build, ``/tmp/t215``) was run on the same
calls where it can be, and its source read where it cannot (CUDA-only bindings).

1. ``ProcessGroup.set_timeout`` read its argument with ``float()``: torch's own argument, a
   ``datetime.timedelta``, raised ``TypeError: float() argument must be ... not
   'datetime.timedelta'``; ``None``/``""`` raised ``float()``'s words, and ``-1``, ``0``,
   ``nan``, ``2**70`` were taken (torch 2.15's gloo refuses a negative timedelta and NaN:
   "Invalid timeout").
2. A ``str`` subclass is read by its value where torch's bindings read a ``std::string``:
   a store key/value/host name, a device string, a ``capture_error_mode``. accelrt hashed or
   compared the object, so a subclass whose ``__hash__``/``__eq__``/``__str__`` raises made
   its error escape from inside accelrt (torch 2.15: ``TCPStore.set(OddStr("k"), ...)``
   works).
3. ``memory_snapshot(mempool_id=(2**64, 0))`` was taken and matched no pool; torch 2.15 reads a
   pool id as two int64s (session 41: ``(-1, -1)`` is taken there and names no pool).
4. ``multiprocessing``: ``SpawnContext``/``ProcessContext`` with items that are no processes
   raised ``AttributeError: 'int' object has no attribute 'sentinel'``; ``join(timeout=2**70)``
   raised ``OverflowError`` from ``select``, ``join(timeout="1")`` a ``TypeError`` about
   ``+``, and a bad ``grace_period`` raised only after a failure, while the other processes
   still ran; ``start_processes(nprocs=2**70)`` started processes until the system refused
   one and left them running (a start that fails part way now ends those it started).
5. A ``TCPStore`` master used in a forked child (``os.fork``, multiprocessing's ``fork``)
   wrote to the child's private copy of the table (the parent never saw the keys) and the
   child hung for ever at exit, closing a server whose loop does not run there. torch 2.15's
   child reaches the parent's server (its master is a client of its own server) and exits.
"""

from __future__ import annotations

import datetime
import multiprocessing
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import accelrt as acc
import accelrt.distributed as dist
import accelrt.multiprocessing as amp
from accelrt import memory

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class OddStr(str):
    """A str whose own methods raise: only its value may be read."""

    def __hash__(self) -> int:
        raise RuntimeError("OddStr.__hash__ was called")

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("OddStr.__eq__ was called")

    def __ne__(self, other: object) -> bool:
        raise RuntimeError("OddStr.__ne__ was called")

    def __str__(self) -> str:
        raise RuntimeError("OddStr.__str__ was called")

    def encode(self, *a: object, **k: object) -> bytes:
        raise RuntimeError("OddStr.encode was called")


# ------------------------------------------------------ 1. ProcessGroup.set_timeout

def test_process_group_set_timeout_takes_torchs_timedelta(one_rank_world: None) -> None:
    # before: float(timedelta) raised TypeError; torch's ProcessGroup.set_timeout takes one
    w = dist.group.WORLD
    assert w is not None
    w.set_timeout(datetime.timedelta(seconds=7))
    assert w.timeout == 7.0
    w.set_timeout(2.5)       # seconds still (torch's binding takes a float too)
    assert w.timeout == 2.5
    dist.barrier()


@pytest.mark.parametrize("value, cls", [
    (None, TypeError), ("", TypeError), ("5", TypeError), (True, TypeError),
    ([1], TypeError), (object(), TypeError),
    (-1, ValueError), (0, ValueError), (float("nan"), ValueError), (2 ** 70, ValueError),
    (datetime.timedelta(seconds=-1), ValueError), (float("inf"), ValueError),
], ids=lambda v: repr(v)[:20])
def test_process_group_set_timeout_refuses_bad_values(one_rank_world: None, value: object,
                                                     cls: type[Exception]) -> None:
    # before: None/""/[1] raised float()'s own words, and -1, 0, nan, 2**70, True were taken
    w = dist.group.WORLD
    assert w is not None
    w.set_timeout(30.0)
    with pytest.raises(cls, match="timeout"):
        w.set_timeout(value)   # type: ignore[arg-type]  # the hostile value
    assert w.timeout == 30.0     # unchanged
    dist.barrier()


# ------------------------------------------------------------ 2. str subclasses by value

def test_store_reads_a_str_subclass_by_its_value() -> None:
    # before: the key's __hash__ and __str__ were called (RuntimeError from OddStr); torch
    # 2.15's TCPStore(OddStr("127.0.0.1"), ...).set(OddStr("k"), OddStr("v")) works
    s = dist.TCPStore(OddStr("127.0.0.1"), 0, 1, True, datetime.timedelta(seconds=10))
    s.set(OddStr("k"), OddStr("v"))
    assert s.get(OddStr("k")) == b"v"
    assert s.add(OddStr("n"), 2) == 2
    assert s.check([OddStr("k")]) is True
    s.append(OddStr("k"), OddStr("w"))
    assert s.multi_get([OddStr("k")]) == [b"vw"]
    assert s.delete_key(OddStr("k")) is True
    h = dist.HashStore()
    h.set(OddStr("a"), OddStr("b"))
    assert h.get("a") == b"b"


def test_device_string_of_a_str_subclass_is_read_by_its_value() -> None:
    # before: the device parser's cache called the string's __hash__
    assert acc.device(OddStr("cpu:0")) == acc.device("cpu:0")
    assert acc.device(OddStr("cpu"), 0) == acc.device("cpu:0")
    assert acc.device(type=OddStr("cpu"), index=0) == acc.device("cpu:0")
    before = memory.memory_allocated("cpu:0")
    assert memory.memory_allocated(OddStr("cpu:0")) == before
    a = acc.zeros(3, device=OddStr("cpu"))
    assert a.device == acc.device("cpu:0")


def test_capture_error_mode_of_a_str_subclass_is_read_by_its_value() -> None:
    # before: the mode was compared with OddStr.__eq__ (and kept as the subclass)
    g = acc.cpu.Graph()
    x = acc.zeros(4, device="cpu")
    with acc.cpu.graph(g, capture_error_mode=OddStr("thread_local")):
        x.fill_(2.0)
    g.replay()
    assert x.tolist() == [2.0] * 4
    g2 = acc.Graph(capture_error_mode=OddStr("relaxed"))
    assert type(g2.capture_error_mode) is str and g2.capture_error_mode == "relaxed"
    with pytest.raises(ValueError, match="Unknown capture error mode"):
        acc.Graph(capture_error_mode=OddStr("GLOBAL"))


# --------------------------------------------------------- 3. memory_snapshot(mempool_id)

# Session 41: torch 2.15 (``/tmp/t215``, its ``_cuda_memorySnapshot`` binding) reads a pool id
# as two int64s: a negative one is taken and names no pool, one outside the int64 range is
# its ValueError ("Overflow when unpacking long long").
@pytest.mark.parametrize("pid", [(2 ** 64, 0), (0, 2 ** 63), (-2 ** 70, 0), (0, 2 ** 64 - 1)])
def test_memory_snapshot_refuses_a_pool_id_out_of_range(pid: tuple[int, int]) -> None:
    with pytest.raises(ValueError, match=r"out of range: PyTorch reads a pool id as two int64s"):
        memory.memory_snapshot(mempool_id=pid)
    with pytest.raises(ValueError, match="out of range"):
        acc.cpu.memory.memory_snapshot(mempool_id=pid)


def test_memory_snapshot_takes_the_edges_of_the_range() -> None:
    assert memory.memory_snapshot(mempool_id=(0, 2 ** 63 - 1)) == []
    assert memory.memory_snapshot(mempool_id=(-1, -1)) == []
    assert memory.memory_snapshot(mempool_id=(-2 ** 63, 0)) == []
    pool = memory.MemPool()
    assert isinstance(memory.memory_snapshot(mempool_id=pool.id), list)


# ------------------------------------------------------------------ 4. multiprocessing

@pytest.mark.parametrize("processes, pipes, cls", [
    (None, [], TypeError), (b"x", [], TypeError), ("ab", [], TypeError),
    ([1], [], AttributeError), ([multiprocessing.get_context("fork").Process()], [],
                                AttributeError),
    ([], None, TypeError), ([], [1], AttributeError), ([], "", TypeError),
], ids=["None", "bytes", "str", "int-item", "not-started", "pipes-None", "pipe-int",
        "pipes-str"])
def test_process_context_refuses_what_is_no_process(processes: object, pipes: object,
                                                    cls: type[Exception]) -> None:
    # before: AttributeError "'int' object has no attribute 'sentinel'" from inside
    # ProcessContext (or a context that failed later, in join)
    with pytest.raises(TypeError, match="ProcessContext"):
        amp.ProcessContext(processes, pipes)   # type: ignore[arg-type]
    with pytest.raises(cls), pytest.warns(UserWarning, match="SpawnContext is renamed"):
        amp.SpawnContext(processes, pipes)   # type: ignore[arg-type]


def test_process_context_refuses_pipes_of_another_count() -> None:
    r, w = multiprocessing.Pipe(duplex=False)
    try:
        with pytest.raises(ValueError, match="0 processes but 1 error pipes"):
            amp.ProcessContext([], [r])
    finally:
        r.close()
        w.close()


_JOIN_SCRIPT = textwrap.dedent("""
    import faulthandler, multiprocessing, sys
    faulthandler.dump_traceback_later(60, exit=True)
    import accelrt.multiprocessing as amp

    def child(i, go):
        go.wait()          # runs until the parent says

    if __name__ == "__main__":
        go = multiprocessing.get_context("fork").Event()
        ctx = amp.start_processes(child, args=(go,), nprocs=1, join=False,
                                  start_method="fork")
        out = []
        for t in ["", "1", [1], float("nan"), b"x"]:
            try:
                ctx.join(t)
                out.append("taken")
            except (TypeError, ValueError) as e:
                out.append(type(e).__name__ + (":timeout" if "timeout" in str(e) else ""))
        for g in ["", float("nan")]:
            try:
                ctx.join(0.01, g)
                out.append("taken")
            except (TypeError, ValueError) as e:
                out.append(type(e).__name__ + (":grace" if "grace_period" in str(e) else ""))
        assert ctx.join(0.01) is False        # still running: a bounded wait answers
        go.set()
        assert ctx.join(2 ** 70) is True      # as long as None: until it exits
        print(" ".join(out))
""")


def test_process_context_join_checks_its_timeouts() -> None:
    # before: join(2**70) raised OverflowError from select, join("1") TypeError "unsupported
    # operand type(s) for +", join(nan) returned at once, a bad grace_period was taken
    r = subprocess.run([sys.executable, "-c", _JOIN_SCRIPT], capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["TypeError:timeout", "TypeError:timeout", "TypeError:timeout",
                                "ValueError:timeout", "TypeError:timeout", "TypeError:grace",
                                "ValueError:grace"], r.stdout


def _noop(i: int) -> None:
    pass


@pytest.mark.parametrize("n", [2 ** 70, 2 ** 63, 10 ** 9])
def test_start_processes_refuses_more_processes_than_the_system_has(
        n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # before: it started processes until the system refused one (a fork bomb that ended in
    # OSError with the started processes left running). No process may start here: a start
    # fails the test at once instead of forking
    def refuse(self: object) -> None:
        raise AssertionError("start_processes started a process")

    monkeypatch.setattr(multiprocessing.get_context("fork").Process, "start", refuse)
    with pytest.raises(ValueError, match=f"nprocs={n} is more processes than this system"):
        amp.start_processes(_noop, nprocs=n, start_method="fork")


_PARTIAL_SCRIPT = textwrap.dedent("""
    import faulthandler, multiprocessing, os, sys
    faulthandler.dump_traceback_later(60, exit=True)
    import accelrt.multiprocessing as amp
    from accelrt.multiprocessing import spawn as sp

    def child(i, go):
        go.wait()

    if __name__ == "__main__":
        ctx = multiprocessing.get_context("fork")
        go = ctx.Event()
        real = ctx.Process.start
        count = [0]

        def start(self):
            count[0] += 1
            if count[0] == 3:          # the system refuses the third process
                raise BlockingIOError(11, "Resource temporarily unavailable")
            real(self)

        ctx.Process.start = start
        try:
            amp.start_processes(child, args=(go,), nprocs=4, start_method="fork")
        except BlockingIOError:
            pass
        print(len(multiprocessing.active_children()))
""")


def test_start_processes_ends_what_it_started_when_a_start_fails() -> None:
    # before: the two processes started before the failure kept running (waiting on `go`
    # for ever), with no ProcessContext to join them; faulthandler ended the run
    r = subprocess.run([sys.executable, "-c", _PARTIAL_SCRIPT], capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["0"], r.stdout


def test_spawn_nprocs_numpy_and_zero_still_work() -> None:
    assert amp.start_processes(_noop, nprocs=np.int64(0),  # type: ignore[arg-type]
                               start_method="fork") is None
    assert amp.start_processes(_noop, nprocs=0, start_method="fork") is None


# ------------------------------------------------------------- 5. a TCPStore master in a fork

_FORK_STORE_SCRIPT = textwrap.dedent("""
    import datetime, os, signal, sys
    signal.alarm(60)                        # a hang ends the run (the child's too)
    import accelrt.distributed as dist
    s = dist.TCPStore("127.0.0.1", 0, 1, True, datetime.timedelta(seconds=10))
    s.set("a", "1")
    pid = os.fork()
    if pid == 0:
        signal.alarm(20)
        s.set("b", "2")
        assert s.get("a") == b"1" and s.add("n", 5) == 5
        sys.exit(0)                          # a normal exit: the store's finalizer runs
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status), s.check(["b"]), s.add("n", 1))
    c = dist.TCPStore("127.0.0.1", s.port, None, False, datetime.timedelta(seconds=10))
    print(c.get("b"))                        # the parent still serves
""")


def test_tcpstore_master_in_a_forked_child_reaches_the_parents_server() -> None:
    # before: the child's set("b") went to its own copy of the table (parent: check False,
    # add 1) and the child never exited (SIGALRM ended it: status -14)
    r = subprocess.run([sys.executable, "-c", _FORK_STORE_SCRIPT], capture_output=True,
                       text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["0", "True", "6", "b'2'"], r.stdout
