"""Session 39: differences of accelrt.distributed from torch 2.15, checked against torch 2.15
with gloo on the same inputs (1-2 processes). Each case failed before its fix.

* ``Work.get_future()`` was missing. torch: a ``torch.futures.Future`` completed with the
  work's output list (``result()``), ``then``/``add_done_callback``/``done``/``value``/
  ``wait``, errors propagating; gloo's and MPI's point-to-point work and ``_IllegalWork``
  raise ``RuntimeError("Work::getFuture not implemented.")``; a ``_coalescing_manager``
  block's work has one. ``Work.get_future_result()`` exists and raises
  ``"Work::getFutureResult not implemented."`` on gloo/MPI work (NCCL only). DDP's default
  comm hooks (``allreduce_hook``, ``fp16_compress_hook``) are ported below.
* ``dist.monitored_barrier(group=g)`` without ``timeout`` waited ``g``'s timeout; torch's
  waits the default one (``_get_default_timeout``), and only ``ProcessGroup.monitored_barrier()``
  the group's.
* ``TCPStore(..., timeout=timedelta(0))`` connected to a live master; torch 2.15's client (and
  master, a client of its own server) raises ``DistNetworkError`` "The client socket has timed
  out after 0ms ..." at once for any timeout under a millisecond.
* ``ProcessGroup.set_timeout("5")`` was taken as 5 s and ``set_timeout(0)`` (or a negative
  value) made the watchdog abort the next call; torch's binding refuses a str (``TypeError``),
  gloo a negative timeout. It now checks as ``dist.set_timeout`` does.
* A store-based init under mpiexec that timed out left its ``Ibarrier`` posted: a retry posted
  another, the late rank's one barrier completed the stale one, and the retry timed out while
  the late rank went on.
"""

from __future__ import annotations

import datetime
import importlib.util
import logging
import threading
import time
from pathlib import Path

import pytest

import accelrt.distributed as dist
from accelrt.distributed import DistNetworkError, Future, TCPStore

HAVE_MPI = importlib.util.find_spec("mpi4py") is not None


# ---------------------------------------------------------------------------- Future (one process)
def test_future_completes_once_and_chains_as_torch() -> None:
    fut: Future = Future()
    assert not fut.done()
    with pytest.raises(RuntimeError, match="not completed yet"):
        fut.value()
    order: list[int] = []
    fut.add_done_callback(lambda f: order.append(1))
    doubled = fut.then(lambda f: f.value() * 2)
    fut.add_done_callback(lambda f: order.append(3))
    fut.set_result(5)
    assert order == [1, 3] and fut.done() and fut.wait() == 5 and fut.value() == 5
    assert doubled.wait() == 10
    with pytest.raises(RuntimeError, match="Attempting to mark a completed Future as complete "
                       "again. Note that a Future can only be marked completed once."):
        fut.set_result(6)
    # a callback added to a completed future runs at once
    seen: list[int] = []
    fut.add_done_callback(lambda f: seen.append(f.value()))
    assert seen == [5]


def test_future_errors_propagate_as_torch(caplog: pytest.LogCaptureFixture) -> None:
    fut: Future = Future()
    fut.set_result(1)
    bad = fut.then(lambda f: 1 / 0)
    assert bad.done()
    with pytest.raises(RuntimeError, match="Got the following error when running the "
                       "callback: ZeroDivisionError: division by zero") as info:
        bad.wait()
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        bad.value()
    assert bad.then(lambda f: "recovered").wait() == "recovered"
    # add_done_callback logs what its callback raises and goes on
    with caplog.at_level(logging.ERROR, logger="accelrt.distributed"):
        fut.add_done_callback(lambda f: 1 / 0)
    assert "ZeroDivisionError" in caplog.text
    err: Future = Future()
    err.set_exception(ValueError("foo"))
    with pytest.raises(ValueError, match="foo"):
        err.wait()
    with pytest.raises(AssertionError, match="not an Exception"):
        Future().set_exception("x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="callable"):
        Future().then(5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="callable"):
        Future().add_done_callback(5)  # type: ignore[arg-type]


def test_future_wait_blocks_until_another_thread_completes_it() -> None:
    fut: Future = Future()
    started = threading.Event()

    def complete() -> None:
        started.wait(10)
        fut.set_result("late")

    t = threading.Thread(target=complete)
    t.start()
    started.set()
    assert fut.wait() == "late"
    t.join(10)


# ---------------------------------------------------------------------------- TCPStore timeout 0
@pytest.mark.parametrize("timeout", [datetime.timedelta(0), datetime.timedelta(microseconds=1),
                                     datetime.timedelta(seconds=-1)])
def test_tcpstore_under_a_millisecond_times_out_at_once(timeout: datetime.timedelta) -> None:
    master = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                      timeout=datetime.timedelta(seconds=10))
    try:
        ms = int(timeout / datetime.timedelta(milliseconds=1))
        t0 = time.monotonic()
        with pytest.raises(DistNetworkError, match=rf"The client socket has timed out after "
                           rf"{ms}ms while trying to connect to \(127\.0\.0\.1, {master.port}\)"):
            TCPStore("127.0.0.1", master.port, is_master=False, timeout=timeout)
        assert time.monotonic() - t0 < 1.0
        # the master is a client of its own server in torch: the same error
        with pytest.raises(DistNetworkError, match="timed out after"):
            TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timeout)
        # a millisecond connects (torch 2.15 too)
        client = TCPStore("127.0.0.1", master.port, is_master=False,
                          timeout=datetime.timedelta(milliseconds=1))
        client.set_timeout(datetime.timedelta(seconds=10))
        client.set("k", "v")
        assert master.get("k") == b"v"
        client.close()
    finally:
        master.close()


# ---------------------------------------------------------------------------- two ranks
_RANKS = r'''
import datetime
import threading
import numpy as np
import accelrt as acc
import accelrt.distributed as dist
from accelrt._transfer import run_on_stream
from accelrt.distributed import _work
from accelrt.distributed._mpi import MpiEngine

RAISE = {"on": False}


class Failing(MpiEngine):
    """The MPI engine, whose all_reduce fails while RAISE["on"]."""

    def all_reduce(self, send, recv, op, stream):
        if RAISE["on"]:
            raise RuntimeError("s39 engine failure")
        return super().all_reduce(send, recv, op, stream)


dist.register_backend("s39bad", Failing.create, devices=["cpu"])
dist.init_process_group("mpi", timeout=30)
r, n = dist.get_rank(), dist.get_world_size()
from rank_cases import Cases
from rank_cases import raises_containing as _raises
case = Cases(r, after=dist.barrier)


def raises_containing(fn, exc, words):
    _raises(exc, words, fn)


def gated(fn):
    """fn() while the current stream is held busy: the collective takes the comm-stream path
    and returns a work that is not complete until the gate opens."""
    gate = threading.Event()
    run_on_stream(acc.current_stream("cpu"), lambda: gate.wait(30))
    try:
        return fn(), gate
    except BaseException:
        gate.set()
        raise


# torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py, on accelrt arrays
def _allreduce_fut(process_group, tensor):
    group_to_use = process_group if process_group is not None else dist.group.WORLD
    # (torch: tensor.div_(group_to_use.size()))
    tensor.copy_(acc.asarray(tensor.numpy() / group_to_use.size()))
    return (dist.all_reduce(tensor, group=group_to_use, async_op=True)
            .get_future().then(lambda fut: fut.value()[0]))


def allreduce_hook(process_group, bucket_buffer):
    return _allreduce_fut(process_group, bucket_buffer)


def fp16_compress_hook(process_group, bucket_buffer):
    group_to_use = process_group if process_group is not None else dist.group.WORLD
    world_size = group_to_use.size()
    compressed = acc.asarray(bucket_buffer.numpy().astype("float16") / world_size)
    fut = dist.all_reduce(compressed, group=group_to_use, async_op=True).get_future()

    def decompress(fut):
        decompressed = bucket_buffer
        value = fut.value()[0]
        decompressed.copy_(acc.asarray(value.numpy().astype("float32")))
        return decompressed

    return fut.then(decompress)


@case
def get_future_completes_with_the_outputs():
    a = acc.full((2,), float(r + 1))
    w = dist.all_reduce(a, async_op=True)
    fut = w.get_future()
    assert fut is w.get_future()
    assert fut.wait()[0] is a and fut.done()
    assert fut.value()[0].tolist() == [float(n * (n + 1) // 2)] * 2
    assert fut.then(lambda f: f.value()[0].tolist()[0] / n).wait() == (n + 1) / 2
    raises_containing(lambda: fut.set_result(1), RuntimeError, "marked completed once")
    # the value is what result() answers (torch: barrier [], broadcast [t], gather's root
    # the output list)
    assert dist.barrier(async_op=True).get_future().wait() == []
    b = acc.full((1,), float(r))
    assert dist.broadcast(b, 0, async_op=True).get_future().wait()[0].tolist() == [0.0]
    outs = [acc.zeros((1,)) for _ in range(n)]
    got = dist.all_gather(outs, acc.full((1,), float(r)), async_op=True).get_future().wait()
    assert [o.tolist() for o in got] == [[float(i)] for i in range(n)]


@case
def get_future_result_is_nccl_only():
    w = dist.all_reduce(acc.ones((1,)), async_op=True)
    raises_containing(w.get_future_result, RuntimeError,
                      "Work::getFutureResult not implemented.")


@case
def point_to_point_work_has_no_future():
    if r == 0:
        w = dist.isend(acc.ones((1,)), 1)
    else:
        w = dist.irecv(acc.zeros((1,)), 0)
    raises_containing(w.get_future, RuntimeError, "Work::getFuture not implemented.")
    w.wait()
    raises_containing(w.get_future, RuntimeError, "Work::getFuture not implemented.")
    ops = [dist.P2POp(dist.isend, acc.ones((1,)), 1 - r),
           dist.P2POp(dist.irecv, acc.zeros((1,)), 1 - r)]
    ws = dist.batch_isend_irecv(ops)
    raises_containing(ws[0].get_future, RuntimeError, "Work::getFuture not implemented.")
    for x in ws:
        x.wait()


@case
def coalesced_work_has_a_future_and_illegal_work_none():
    xs = [acc.ones((1,)), acc.ones((2,))]
    with dist._coalescing_manager(async_ops=True) as cm:
        for x in xs:
            ill = dist.all_reduce(x, async_op=True)
    raises_containing(ill.get_future, RuntimeError, "Work::getFuture not implemented.")
    got = cm.works[0].get_future().wait()
    assert [g.tolist() for g in got] == [[float(n)], [float(n)] * 2]


@case
def pending_work_future_completes_when_seen_done():
    a = acc.full((4,), 1.0)
    w, gate = gated(lambda: dist.all_reduce(a, async_op=True))
    try:
        fut = w.get_future()
        assert not fut.done()
        seen = []
        fut.add_done_callback(lambda f: seen.append(f.value()[0].tolist()))
        child = fut.then(lambda f: f.value()[0].tolist()[0])
        assert seen == []
    finally:
        gate.set()
    w.synchronize()               # seen done: the work completes its future, running callbacks
    assert fut.done() and seen == [[float(n)] * 4]
    assert child.wait() == float(n)
    b = acc.full((2,), 1.0)
    w2, gate2 = gated(lambda: dist.all_reduce(b, async_op=True))
    try:
        f2 = w2.get_future().then(lambda f: f.value()[0].tolist())
    finally:
        gate2.set()
    assert f2.wait() == [float(n)] * 2   # the child's wait waits the work


@case
def ddp_default_comm_hooks():
    buf = acc.full((3,), float(r + 1))
    out = allreduce_hook(None, buf).wait()
    assert out is buf and out.tolist() == [(n + 1) / 2] * 3, out.tolist()
    buf2 = acc.full((3,), float(2 * (r + 1)))
    out2 = fp16_compress_hook(None, buf2).wait()
    assert out2 is buf2 and out2.tolist() == [float(n + 1)] * 3, out2.tolist()


@case
def failed_work_future_raises_its_error():
    g = dist.new_group([0, 1], backend="cpu:s39bad")
    dist.all_reduce(acc.ones((1,)), group=g)   # the engine starts and works
    RAISE["on"] = True
    try:
        w, gate = gated(lambda: dist.all_reduce(acc.ones((1,)), group=g, async_op=True))
        try:
            fut = w.get_future()
            outcome = fut.then(lambda f: f.value())
        finally:
            gate.set()
        raises_containing(fut.wait, RuntimeError, "s39 engine failure")
        assert fut.done()
        raises_containing(fut.value, RuntimeError, "s39 engine failure")
        raises_containing(outcome.wait, RuntimeError,
                          "Got the following error when running the callback")
    finally:
        RAISE["on"] = False
        try:
            dist.destroy_process_group(g)
        except RuntimeError:
            pass   # the group keeps the failure and raises it once more here


@case
def monitored_barrier_default_is_not_the_groups():
    limits = []
    real = _work.wait_until

    def spy(done, timeout, error):
        limits.append(timeout)
        return real(done, timeout, error)

    _work.wait_until = spy
    try:
        g = dist.new_group([0, 1], timeout=7)
        dist.monitored_barrier(group=g)            # torch: the default timeout
        g.monitored_barrier()                      # torch's method: the group's
        dist.monitored_barrier(group=g, timeout=3)
    finally:
        _work.wait_until = real
    extra = 0.0 if r == 0 else 5.0                 # the others wait 5 s longer for rank 0
    assert limits == [600.0 + extra, 7.0 + extra, 3.0 + extra], limits
    dist.destroy_process_group(g)


@case
def process_group_set_timeout_checks_its_argument():
    g = dist.new_group([0, 1], timeout=30)
    try:
        # torch 2.15's binding: TypeError for anything but a timedelta (or float); accelrt's
        # seconds stay accepted, and a limit the watchdog would abort every call at is refused
        raises_containing(lambda: g.set_timeout("5"), TypeError, "got str")
        raises_containing(lambda: g.set_timeout(None), TypeError, "timeout must be")
        raises_containing(lambda: g.set_timeout(0), ValueError, "must be positive")
        raises_containing(lambda: g.set_timeout(-1.0), ValueError, "must be positive")
        assert g.timeout == 30.0
        g.set_timeout(datetime.timedelta(seconds=20))
        assert g.timeout == 20.0
        dist.barrier(group=g)
    finally:
        g.timeout = 30.0
        dist.destroy_process_group(g)


case.done()
dist.destroy_process_group()
'''

_RETRY = r'''
import os, socket
from mpi4py import MPI
import accelrt.distributed as dist

w = MPI.COMM_WORLD
r, n = w.Get_rank(), w.Get_size()
os.environ.update(RANK=str(r), WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1")
if r == 0:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
else:
    port = None
os.environ["MASTER_PORT"] = str(w.bcast(port, 0))
if r == 0:
    try:   # rank 1 is held back: this init times out waiting for it
        dist.init_process_group("mpi", init_method="env://", timeout=0.5)
        raise SystemExit("FAIL the first init did not time out")
    except dist.DistTimeoutError:
        pass
    w.send("go", 1)
else:
    w.recv(source=0)
dist.init_process_group("mpi", init_method="env://", timeout=20)
x = __import__("numpy").ones(1)
dist.all_reduce(x)
assert x.tolist() == [float(n)], x
dist.destroy_process_group()
print(f"RETRY OK {r}", flush=True)
'''


def _launch(tmp_path: Path, text: str, runner: bool = True,
            env: dict[str, str] | None = None) -> tuple[int, str]:
    from test_distributed import MPIEXEC, launch
    if not HAVE_MPI or MPIEXEC is None:
        pytest.skip("needs mpi4py and mpiexec (pip install 'accelrt[mpi]')")
    from rank_cases import write_script
    script = write_script(tmp_path, text)
    rc, out, _ = launch(2, str(script), timeout=90, runner=runner, env=env)
    return rc, out


def test_two_rank_torch_diffs(tmp_path: Path) -> None:
    from test_distributed import _check_cases
    # asynchronous cpu streams: a collective behind a busy current stream is queued
    # (RANK_CASES_TRACE: a rank that aborts still shows the cases it finished)
    rc, out = _launch(tmp_path, _RANKS, env={"ACCELRT_CPU_STREAMS": "async",
                                             "RANK_CASES_TRACE": "1"})
    assert _check_cases(2, out, rc) == 9, out[-3000:]


def test_store_init_retry_after_a_timeout_under_mpiexec(tmp_path: Path) -> None:
    rc, out = _launch(tmp_path, _RETRY, runner=False)
    assert rc == 0 and "RETRY OK 0" in out and "RETRY OK 1" in out, out[-3000:]


def test_work_future_names_are_torchs() -> None:
    # torch 2.15's Work has both; accelrt's too (they raise where torch's gloo/MPI raise)
    assert callable(dist.Work.get_future) and callable(dist.Work.get_future_result)
    assert dist.Work.completed(["x"]).get_future().wait() == ["x"]


def test_a_work_and_its_future_free_the_outputs_without_the_collector() -> None:
    import gc
    import weakref

    import numpy as np
    gc.disable()
    try:
        arr = np.ones(3)
        ref = weakref.ref(arr)
        w = dist.Work.completed([arr])
        fut = w.get_future()
        assert fut is w.get_future() and fut.wait()[0] is arr
        del arr, w, fut
        assert ref() is None   # no work <-> future cycle holds them
    finally:
        gc.enable()
