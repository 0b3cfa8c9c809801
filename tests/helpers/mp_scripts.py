"""Two-process scenarios of tests/distributed/test_multiprocessing.py: ``python mp_scripts.py CASE``.

Each case prints ``ok`` on success and fails with an assertion (non-zero exit) otherwise.
Every wait has a timeout, so a broken case ends instead of hanging; the test adds a hard
subprocess timeout on top. Ordering uses gates (threading events, pipe messages), no sleeps.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
from typing import Any

import numpy as np

import accelrt as acc
import accelrt.multiprocessing as amp

T = 30  # seconds for any single wait


def _open_segments() -> int:
    """This process's open accelrt shared-memory segments (memfd descriptors)."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:accelrt-seg-")
        except OSError:
            pass
    return n


def _share_consumer(q: Any, conn: Any) -> None:
    a = q.get(timeout=T)
    np.testing.assert_array_equal(a.numpy(), np.arange(1000, dtype=np.float32))
    a.numpy()[:10] = -1                               # the producer sees this write
    conn.send(acc.full((100,), 42, dtype="int32", device="cpu"))  # consumer -> producer
    conn.send("written")
    assert conn.poll(T) and conn.recv() == "producer dropped its array"
    assert (a.numpy()[:10] == -1).all() and a.numpy()[10] == 10   # still valid memory
    del a
    gc.collect()
    conn.send("released")
    assert conn.poll(T) and conn.recv() == "released yours"
    assert amp.ipc_collect() == 0
    conn.send("done")


def share() -> None:
    ctx = amp.get_context(os.environ["METHOD"])
    base = acc.memory.memory_allocated("cpu")
    a = acc.asarray(np.arange(1000, dtype=np.float32), device="cpu", copy=True)
    q = ctx.Queue()
    mine, theirs = ctx.Pipe()
    p = ctx.Process(target=_share_consumer, args=(q, theirs))
    p.start()
    q.put(a)
    assert mine.poll(T)
    c = mine.recv()
    assert (c.numpy() == 42).all() and c.device == acc.device("cpu", 0)
    assert mine.poll(T) and mine.recv() == "written"
    assert (a.numpy()[:10] == -1).all()
    del a
    gc.collect()
    assert amp.ipc_collect() == 1                     # the consumer still holds it
    assert acc.memory.memory_allocated("cpu") > base
    mine.send("producer dropped its array")
    assert mine.poll(T) and mine.recv() == "released"
    assert amp.ipc_collect() == 0
    assert acc.memory.memory_allocated("cpu") == base  # back in the caching allocator
    del c
    gc.collect()
    mine.send("released yours")
    assert mine.poll(T) and mine.recv() == "done"
    p.join(T)
    assert p.exitcode == 0, p.exitcode
    acc.memory.empty_cache()
    assert _open_segments() == 0                      # no segment leaked


def _crash_consumer(conn: Any) -> None:
    a = conn.recv()
    assert (a.numpy() == 3).all()
    conn.send("got it")
    os.kill(os.getpid(), signal.SIGKILL)


def crash() -> None:
    ctx = amp.get_context("fork")
    mine, theirs = ctx.Pipe()
    p = ctx.Process(target=_crash_consumer, args=(theirs,))
    p.start()
    a = acc.full((64,), 3, dtype="int64", device="cpu")
    mine.send(a)
    del a
    gc.collect()
    assert mine.poll(T) and mine.recv() == "got it"
    p.join(T)
    assert p.exitcode == -signal.SIGKILL, p.exitcode
    assert amp.ipc_collect() == 0                     # the kernel dropped the dead hold
    acc.memory.empty_cache()
    assert _open_segments() == 0


def _ready_consumer(conn: Any) -> None:
    a = conn.recv()                                   # current stream waits on its event
    e = conn.recv()
    conn.send((acc.current_stream("cpu").query(), e.query()))
    e.synchronize()
    np.testing.assert_array_equal(a.numpy(), np.full(1 << 16, 7, dtype=np.int32))
    conn.send("seen")


def ready() -> None:
    assert acc.backends.get_backend("cpu").config.async_streams
    ctx = amp.get_context("spawn")
    mine, theirs = ctx.Pipe()
    p = ctx.Process(target=_ready_consumer, args=(theirs,))
    p.start()
    gate = threading.Event()
    a = acc.zeros(1 << 16, dtype="int32", device="cpu")
    stream = acc.current_stream("cpu")
    acc.backends.get_backend("cpu").launch_host_func(0, gate.wait, stream.stream_id)
    a.fill_(7)                                        # queued behind the closed gate
    e = acc.Event("cpu", interprocess=True)
    e.record(stream)
    mine.send(a)
    mine.send(e)
    assert mine.poll(T)
    assert mine.recv() == (False, False)              # not ready while the gate is closed
    gate.set()
    assert mine.poll(T) and mine.recv() == "seen"
    p.join(T)
    assert p.exitcode == 0, p.exitcode


def _dying_producer(conn: Any) -> None:
    gate = threading.Event()                          # never opened
    a = acc.zeros(16, dtype="int32", device="cpu")
    stream = acc.current_stream("cpu")
    acc.backends.get_backend("cpu").launch_host_func(0, gate.wait, stream.stream_id)
    a.fill_(1)
    conn.send(a)
    conn.recv()                                       # killed while waiting here


def producer_dies() -> None:
    ctx = amp.get_context("fork")
    mine, theirs = ctx.Pipe()
    p = ctx.Process(target=_dying_producer, args=(theirs,))
    p.start()
    assert mine.poll(T)
    a = mine.recv()
    assert not acc.current_stream("cpu").query()
    p.kill()
    try:
        acc.current_stream("cpu").synchronize()
    except acc.DeviceError as exc:
        assert "exited before the recorded work completed" in str(exc), exc
    else:
        raise AssertionError("waiting on a dead producer's event did not fail")
    assert (a.numpy() == 0).all()                     # the mapping itself stays valid
    p.join(T)


def _spawn_worker(i: int, a: Any, fail: bool) -> None:
    if fail and i == 1:
        raise RuntimeError("worker 1 fails on purpose")
    a.numpy()[i] = i + 1


def spawn() -> None:
    # forked children: start_processes (spawn(start_method="fork") spawns them, as torch's,
    # with a FutureWarning)
    a = acc.zeros(2, dtype="int64", device="cpu")
    amp.start_processes(_spawn_worker, args=(a, False), nprocs=2, start_method="fork")
    assert a.numpy().tolist() == [1, 2]
    try:
        amp.start_processes(_spawn_worker, args=(a, True), nprocs=2, start_method="fork")
    except amp.ProcessRaisedException as exc:
        assert exc.error_index == 1 and "fails on purpose" in str(exc)
    else:
        raise AssertionError("a failing worker did not raise")
    ctx = amp.start_processes(_spawn_worker, args=(a, False), nprocs=1, join=False,
                              start_method="fork")
    assert ctx is not None
    while not ctx.join(T):
        pass


def _accelrt_fds() -> int:
    """This process's open descriptors of accelrt's memfds (segments and reference files)."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:accelrt-")
        except OSError:
            pass
    return n


def _accelrt_maps() -> int:
    """This process's mappings of accelrt's memfds."""
    with open("/proc/self/maps") as f:
        return sum("/memfd:accelrt-" in line for line in f)


def _short_producer(conn: Any) -> None:
    a = acc.full((256,), 3, dtype="int32", device="cpu")
    b = acc.full((3 << 18,), 4, dtype="int32", device="cpu")   # another segment, another slot
    conn.send((a, b))
    assert conn.poll(T) and conn.recv() == "received"


def many_producers() -> None:
    # a consumer of many short-lived producers, under a limit of open files 16 above what it
    # has open: what it keeps of a producer (descriptor, mappings) goes when its last array
    # from it goes, and 24 producers run out of descriptors if each left one behind
    import resource
    headroom = 16
    limit = len(os.listdir("/proc/self/fd")) + headroom
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
    ctx = amp.get_context("fork")
    fds, maps = _accelrt_fds(), _accelrt_maps()
    for _ in range(headroom + 8):
        mine, theirs = ctx.Pipe()
        p = ctx.Process(target=_short_producer, args=(theirs,))
        p.start()
        assert mine.poll(T)
        a, b = mine.recv()
        mine.send("received")
        p.join(T)
        assert p.exitcode == 0, p.exitcode
        assert _accelrt_fds() > fds and _accelrt_maps() >= maps + 2
        del a                                     # one array of the producer's is left
        gc.collect()
        assert _accelrt_fds() > fds
        assert (b.numpy() == 4).all()             # valid after its producer exited
        del b, mine, theirs, p
        gc.collect()
        assert (_accelrt_fds(), _accelrt_maps()) == (fds, maps)


# ------------------------------------------------------------------ CUDA: one GPU, two processes

N_CUDA = 1 << 22


def _cuda_consumer(conn: Any) -> None:
    a = conn.recv()                   # its current stream waits on the producer's event
    assert a.device == acc.device("cuda", 0)
    np.testing.assert_array_equal(a.numpy(), np.full(N_CUDA, 3, dtype=np.float32))
    a.fill_(5)                        # the producer sees this write
    acc.cuda.synchronize()
    e = conn.recv()                   # an interprocess event, pickled on its own
    e.synchronize()
    conn.send("written")
    assert conn.poll(T) and conn.recv() == "producer dropped its array"
    np.testing.assert_array_equal(a.numpy(), np.full(N_CUDA, 5, dtype=np.float32))
    del a
    gc.collect()
    conn.send("released")


def cuda_share() -> None:
    ctx = amp.get_context("spawn")
    mine, theirs = ctx.Pipe()
    p = ctx.Process(target=_cuda_consumer, args=(theirs,))
    p.start()
    base = acc.cuda.memory_allocated(0)
    pad = acc.zeros(1000, device="cuda:0")        # the shared block is not at offset 0
    a = acc.zeros(N_CUDA, device="cuda:0")
    a.fill_(3)                                    # queued; the consumer waits on an event
    mine.send(a)
    e = acc.cuda.Event(interprocess=True)
    e.record()
    mine.send(e)
    assert mine.poll(T) and mine.recv() == "written"
    np.testing.assert_array_equal(a.numpy(), np.full(N_CUDA, 5, dtype=np.float32))
    del a
    gc.collect()
    assert amp.ipc_collect() == 1                 # the consumer still holds it
    mine.send("producer dropped its array")
    assert mine.poll(T) and mine.recv() == "released"
    acc.cuda.ipc_collect()
    assert amp.reductions._refs.pending_count() == 0
    del pad
    gc.collect()
    assert acc.cuda.memory_allocated(0) == base
    p.join(T)
    assert p.exitcode == 0, p.exitcode


def cuda_refusals() -> None:
    from multiprocessing.reduction import ForkingPickler
    a = acc.zeros(1 << 20, device="cuda:0")       # expandable_segments:True in the env
    try:
        ForkingPickler.dumps(a)
    except ValueError as exc:
        assert "expandable segment" in str(exc), exc
    else:
        raise AssertionError("an expandable segment was shared")


if __name__ == "__main__":
    {"share": share, "crash": crash, "ready": ready, "producer_dies": producer_dies,
     "spawn": spawn, "many_producers": many_producers, "cuda_share": cuda_share,
     "cuda_refusals": cuda_refusals}[sys.argv[1]]()
    print("ok")
