"""Review by tests of accelrt.distributed and accelrt.multiprocessing against PyTorch's
behaviour and hostile inputs (issue 24): calls outside a process group, bad init arguments
and rendezvous URLs, timeouts, wrong argument types, mismatches across ranks (debug mode),
non-members, async work, unpicklable objects, and spawned children that exit or die.

One-process cases run here; the rank cases run in two mpiexec launches of
``review_s24_ranks.py`` (3 ranks in debug mode, 2 without), the process cases in one
subprocess; every launch has a hard timeout.
"""

from __future__ import annotations

import datetime
import importlib.util
import re
import socket
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import accelrt as acc
import accelrt.distributed as dist

HAVE_MPI = importlib.util.find_spec("mpi4py") is not None
needs_mpi = pytest.mark.skipif(not HAVE_MPI, reason="mpi4py is not installed")
NOT_INIT = "Default process group has not been initialized"


@pytest.fixture
def world(one_rank_world: None) -> object:
    """A one-rank world (a singleton MPI world), destroyed afterwards whatever happened."""
    return dist.GroupMember.WORLD


def _calls() -> list[tuple[str, object]]:
    a = np.zeros(2)
    return [("get_rank", dist.get_rank), ("get_world_size", dist.get_world_size),
            ("get_backend", dist.get_backend), ("barrier", dist.barrier),
            ("destroy_process_group", dist.destroy_process_group),
            ("new_group", lambda: dist.new_group([0])),
            ("all_reduce", lambda: dist.all_reduce(a)),
            ("broadcast", lambda: dist.broadcast(a, 0)), ("send", lambda: dist.send(a, 1)),
            ("all_gather_object", lambda: dist.all_gather_object([None], 1)),
            ("monitored_barrier", dist.monitored_barrier)]


def _refused_outside_a_group() -> None:
    assert not dist.is_initialized()
    for name, call in _calls():
        with pytest.raises(ValueError, match=NOT_INIT):
            call()  # type: ignore[operator]
        assert not dist.is_initialized(), name


@needs_mpi
def test_calls_before_init_and_after_destroy_raise_torchs_error() -> None:
    _refused_outside_a_group()
    dist.init_process_group("cpu:mpi", timeout=30)
    g = dist.new_group([0])
    with pytest.raises(ValueError, match="trying to initialize the default process group twice"):
        dist.init_process_group("cpu:mpi")
    dist.destroy_process_group()
    _refused_outside_a_group()
    dist.init_process_group("cpu:mpi", timeout=30)   # a new world; the old group stays dead
    try:
        with pytest.raises(dist.DistError, match="was destroyed"):
            dist.all_reduce(np.zeros(2), group=g)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("backend, error, text", [
    ("foo", ValueError, "Invalid backend: 'foo'"),
    ("", ValueError, "Invalid backend: ''"),
    ("cpu:", ValueError, "expected 'device:engine'"),
    ("cpu:nccl", ValueError, "does not serve 'cpu'"),
    (3, TypeError, "backend must be a string"),
])
def test_bad_backend_strings(backend: object, error: type[Exception], text: str) -> None:
    with pytest.raises(error, match=text):
        dist.init_process_group(backend, rank=0, world_size=1)  # type: ignore[arg-type]
    assert not dist.is_initialized()


def _busy_port() -> tuple[socket.socket, int]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s, int(s.getsockname()[1])


@needs_mpi
def test_bad_init_methods(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(v, raising=False)
    with pytest.raises(ValueError, match="env:// rendezvous: environment variable MASTER_ADDR "
                                         "expected, but not set"):
        dist.init_process_group("gloo", init_method="env://", rank=0, world_size=1)
    for url, text in [("tcp://127.0.0.1:notaport", "Port could not be cast to integer"),
                      ("tcp://127.0.0.1:99999", "Port out of range 0-65535"),
                      ("tcp://127.0.0.1", "port number missing"),
                      ("file://", "path missing"), ("udp://h:1", "is not supported")]:
        with pytest.raises(ValueError, match=text):
            dist.init_process_group("gloo", init_method=url, rank=0, world_size=1)
    with pytest.raises(ValueError, match="rank 2 is out of range for world size 2"):
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:1", rank=2, world_size=2)
    with pytest.raises(ValueError, match="world_size=2 but the MPI launcher started 1"):
        dist.init_process_group("gloo", rank=0, world_size=2)
    with pytest.raises(ValueError, match="rank=1 but the MPI launcher made this process rank 0"):
        dist.init_process_group("gloo", rank=1, world_size=1)
    # a one-rank world still makes its rendezvous store, as torch's does: the unwritable
    # path and the busy port were ignored (a singleton MPI world started anyway)
    with pytest.raises(dist.DistStoreError, match="FileStore cannot open"):
        dist.init_process_group("gloo", init_method="file:///proc/no/such/dir/store", rank=0,
                                world_size=1, timeout=5)
    s, port = _busy_port()
    with s, pytest.raises(dist.DistNetworkError, match="EADDRINUSE"):
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0,
                                world_size=1, timeout=5)
    assert not dist.is_initialized()
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rdzv'}", rank=0,
                            world_size=1, timeout=5)
    try:
        assert (tmp_path / "rdzv").exists() and dist.get_world_size() == 1
    finally:
        dist.destroy_process_group()


@needs_mpi
@pytest.mark.parametrize("timeout", [30, 30.5, datetime.timedelta(seconds=30)])
def test_timeouts_taken(timeout: object) -> None:
    dist.init_process_group("cpu:mpi", timeout=timeout)  # type: ignore[arg-type]
    dist.destroy_process_group()


@pytest.mark.parametrize("timeout, error, text", [
    (-1, ValueError, "timeout must be positive"),
    (-0.5, ValueError, "timeout must be positive"),
    (datetime.timedelta(seconds=-1), ValueError, "timeout must be positive"),
    (0, ValueError, "timeout must be positive"),
    (float("nan"), ValueError, "timeout must be positive"),
    (float("inf"), ValueError, "finite"),
    ("5", TypeError, "timedelta or a number of seconds"),
    (True, TypeError, "timedelta or a number of seconds"),
])
def test_bad_timeouts(timeout: object, error: type[Exception], text: str) -> None:
    with pytest.raises(error, match=text):
        dist.init_process_group("cpu:mpi", timeout=timeout)  # type: ignore[arg-type]
    assert not dist.is_initialized()


@pytest.mark.parametrize("value, text", [
    ("-5", "timeout must be positive"),
    ("soon", "ACCELRT_DISTRIBUTED_TIMEOUT must be a number of seconds, got 'soon'"),
])
def test_bad_timeout_from_the_environment(monkeypatch: pytest.MonkeyPatch, value: str,
                                          text: str) -> None:
    # a negative value was taken (every operation then aborted the job at once)
    monkeypatch.setenv("ACCELRT_DISTRIBUTED_TIMEOUT", value)
    with pytest.raises(ValueError, match=text):
        dist.init_process_group("cpu:mpi")
    assert not dist.is_initialized()


@needs_mpi
def test_wrong_arguments_in_a_one_rank_world(world: object) -> None:
    a = acc.zeros((2,), device="cpu")
    for bad in ([1.0], None, 3, "x", np.float32(1)):
        with pytest.raises(TypeError, match="expected an accelrt.Array or numpy.ndarray"):
            dist.all_reduce(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="contiguous"):
        dist.all_reduce(np.zeros((2, 3), order="F"))
    for peer in (1, -1):
        with pytest.raises(ValueError, match="is not part of the group 'WORLD'"):
            dist.broadcast(a, peer)
        with pytest.raises(ValueError, match="is not part of the group 'WORLD'"):
            dist.gather(a, [a], dst=peer)
    with pytest.raises(TypeError, match="dst must be an int rank, got float"):
        dist.reduce(a, 0.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="group must be a ProcessGroup or None, got str"):
        dist.barrier(group="WORLD")  # type: ignore[arg-type]
    with pytest.warns(UserWarning, match="does not belong to the given group"):
        assert dist.all_reduce(a, group=dist.GroupMember.NON_GROUP_MEMBER) is None
    # new_group: ranks of the world, each once, as ints (a string's characters and floats
    # were taken as ranks)
    for ranks in ([0, 0], [1], [-1]):
        with pytest.raises(ValueError, match="ranks must be distinct world ranks in"):
            dist.new_group(ranks)
    for ranks, text in [("0", "ranks must be a list of int ranks or None, got str"),
                        (0, "ranks must be a list of int ranks or None, got int"),
                        ([0.0], "each of ranks must be an int, got float"),
                        ([True], "each of ranks must be an int, got bool")]:
        with pytest.raises(TypeError, match=text):
            dist.new_group(ranks)  # type: ignore[arg-type]
    assert dist.get_world_size(dist.new_group([np.int64(0)])) == 1
    g = dist.new_group([0])
    dist.destroy_process_group(g)
    for call in (lambda: dist.all_reduce(a, group=g), lambda: dist.barrier(group=g),
                 lambda: dist.broadcast_object_list([1], 0, group=g)):
        with pytest.raises(dist.DistError, match="was destroyed"):
            call()


@needs_mpi
def test_work_wait_takes_torchs_timedelta(world: object) -> None:
    a = acc.zeros((2,), device="cpu")
    w = dist.all_reduce(a, async_op=True)
    assert w is not None and w.wait() and w.is_completed() and w.exception() is None
    assert w.wait(timeout=datetime.timedelta(0)) and w.wait(timeout=1.5)
    # a pending receive (from this rank itself, which isend/irecv may name)
    got = acc.zeros((2,), device="cpu")
    r = dist.irecv(got, 0)
    assert r is not None
    with pytest.raises(dist.DistTimeoutError, match="irecv .* did not complete within 0.1 s"):
        r.wait(timeout=datetime.timedelta(seconds=0.1))   # TypeError before
    with pytest.raises(TypeError, match="timeout must be a datetime.timedelta or a number"):
        r.wait(timeout="1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must not be negative"):
        r.wait(timeout=-1)
    s = dist.isend(acc.full((2,), 4.0, device="cpu"), 0)
    assert s is not None and s.wait(timeout=datetime.timedelta(seconds=30))
    assert r.wait(timeout=datetime.timedelta(seconds=30)) and got.tolist() == [4.0, 4.0]


class _BadReduce:
    def __reduce__(self) -> object:
        raise RuntimeError("no pickle for you")


@needs_mpi
def test_unpicklable_objects_in_a_one_rank_world(world: object) -> None:
    import threading
    with pytest.raises(TypeError, match="cannot pickle"):
        dist.broadcast_object_list([threading.Lock()], 0)
    with pytest.raises(RuntimeError, match="no pickle for you"):
        dist.all_gather_object([None], _BadReduce())
    with pytest.raises(TypeError, match="host-only"):
        dist.gather_object(acc.zeros((1,), device="cpu"), [None], 0)
    with pytest.raises(TypeError, match="cannot pickle"):
        dist.scatter_object_list([None], [threading.Lock()], 0)
    out: list[object] = [None]
    dist.all_gather_object(out, {"still": "works"})
    assert out == [{"still": "works"}]


class _Held(_BadReduce):
    """An unpicklable object whose life a weak reference watches."""


@needs_mpi
def test_a_pickling_error_leaves_no_cycle_keeping_the_objects(world: object) -> None:
    # the kept pickling error was raised from a local (`raise own`, and _settle's parameter):
    # error -> traceback -> frame -> error, a cycle that kept the caller's objects (and
    # lists) alive until the garbage collector ran (s32)
    import gc
    import weakref

    calls = [lambda x: dist.broadcast_object_list([x], 0),
             lambda x: dist.all_gather_object([None], x),
             lambda x: dist.gather_object(x, [None], 0),
             lambda x: dist.scatter_object_list([None], [x], 0)]
    gc.collect()
    gc.disable()
    try:
        for call in calls:
            held = _Held()
            ref = weakref.ref(held)
            try:
                call(held)
            except RuntimeError as exc:
                assert "no pickle for you" in str(exc)
            else:
                raise AssertionError("the collective pickled an unpicklable object")
            del held
            assert ref() is None, call
    finally:
        gc.enable()


# --------------------------------------------------------------------------- rank launches
@needs_mpi
@pytest.mark.parametrize("n, debug", [(3, True), (2, False)], ids=["n3-detail", "n2-plain"])
def test_hostile_inputs_on_ranks(n: int, debug: bool) -> None:
    from test_distributed import MPIEXEC, launch
    if MPIEXEC is None:
        pytest.skip("no mpiexec (pip install mpich)")
    env = {"REVIEW_TIMEOUT": "20"}
    if debug:
        env["ACCELRT_DISTRIBUTED_DEBUG"] = "DETAIL"
    rc, out, _ = launch(n, "review_s24_ranks.py", env=env, timeout=90)
    lines = out.splitlines()
    fails = [ln for ln in lines if "FAIL " in ln]
    assert rc == 0 and not fails, f"exit {rc}:\n" + "\n".join(fails[:20]) + "\n" + out[-3000:]
    # the ranks' output streams are merged by mpiexec and may interleave within a line
    done = sorted(int(r) for r, _ in re.findall(r"DONE (\d+) (\d+)(?!\d)", out))
    assert done == list(range(n)), out[-3000:]


# --------------------------------------------------------------------------- multiprocessing
_PROCESSES = textwrap.dedent(r"""
    import os, signal, sys, time
    import numpy as np
    import accelrt as acc
    import accelrt.multiprocessing as amp

    def exits(i, code):
        sys.exit(code)

    def killed(i, sig):
        os.kill(os.getpid(), sig)

    def raises(i):
        if i == 1:
            raise ValueError("worker 1 raised")
        time.sleep(60)                        # terminated by the parent

    def sleeps(i, s):
        time.sleep(s)

    def child(q_in, q_out):
        a = q_in.get(timeout=30)
        a.numpy()[:] += 1                     # the parent sees this write
        q_out.put(acc.full((3,), 7.0, device="cpu"))   # and this array, shared back
        assert q_in.get(timeout=30) == "received"

    def expect(kind, fn, **attrs):
        try:
            fn()
        except kind as e:
            for k, v in attrs.items():
                assert getattr(e, k) == v, (k, getattr(e, k), v, e)
            return e
        raise AssertionError(f"no {kind.__name__}")

    if __name__ == "__main__":
        # sys.exit(0) is success and sys.exit(3) an exit code (both were reported as raised
        # exceptions); a death by a signal was an EOFError from the error pipe
        amp.start_processes(exits, args=(0,), nprocs=2, start_method="fork")
        expect(amp.ProcessExitedException,
               lambda: amp.start_processes(exits, args=(3,), start_method="fork"),
               exit_code=3, error_index=0)
        e = expect(amp.ProcessExitedException,
                   lambda: amp.start_processes(killed, args=(signal.SIGKILL,),
                                               start_method="fork"),
                   exit_code=-9, signal_name="SIGKILL")
        assert "terminated with signal SIGKILL" in str(e), e
        e = expect(amp.ProcessExitedException,
                   lambda: amp.start_processes(killed, args=(40,), start_method="fork"),
                   exit_code=-40, signal_name="<Unknown signal 40>")
        e = expect(amp.ProcessRaisedException,
                   lambda: amp.start_processes(raises, nprocs=2, start_method="fork"),
                   error_index=1)
        assert "ValueError: worker 1 raised" in str(e), e
        ctx = amp.spawn(sleeps, args=(0.5,), nprocs=2, join=False)
        assert isinstance(ctx, amp.ProcessContext) and len(ctx.pids()) == 2
        assert ctx.join(timeout=0.01) is False
        while not ctx.join(timeout=30):
            pass
        assert ctx.join() is True and all(p.exitcode == 0 for p in ctx.processes)
        # an Array through a Queue to a spawned child and back (shared memory, no copy)
        assert amp.get_sharing_strategy() in amp.get_all_sharing_strategies()
        # torch code sets "file_system" against running out of descriptors: accepted, and
        # the array below is still shared (device arrays ignore the strategy)
        amp.set_sharing_strategy("file_system")
        assert amp.get_sharing_strategy() == "file_system"
        mp = amp.get_context("spawn")
        q_in, q_out = mp.Queue(), mp.Queue()
        p = mp.Process(target=child, args=(q_in, q_out))
        p.start()
        a = acc.zeros((4,), device="cpu")
        q_in.put(a)
        b = q_out.get(timeout=60)
        assert b.tolist() == [7.0] * 3 and a.tolist() == [1.0] * 4, (a.tolist(), b.tolist())
        q_in.put("received")
        p.join(60)
        assert p.exitcode == 0, p.exitcode
        print("ok")
""")


def test_spawned_processes_exit_die_and_share(tmp_path: Path) -> None:
    script = tmp_path / "processes.py"
    script.write_text(_PROCESSES)
    env = {"ACCELRT_CPU_SHARED_MEMORY": "1", "PYTHONPATH": str(Path(acc.__file__).parents[1]),
           "PATH": "/usr/bin:/bin"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              timeout=120, env=env, cwd=tmp_path, check=False)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), \
        proc.stdout[-2000:] + proc.stderr[-4000:]
