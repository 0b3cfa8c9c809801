"""``os.fork()`` while other threads use accelrt: the child can use the cpu backend at once.

Every scenario runs in a subprocess bounded by a timeout (a regression is a hang, and Python
3.12+ warns about forking a process that has threads). Inside it, the children are watched
with ``os.waitpid(WNOHANG)`` against a deadline and killed if they hang; the script prints
how many children succeeded, hung or failed.
"""

from __future__ import annotations

import os
import threading

import pytest
from helpers.forks import run_fork_scenario

from accelrt import _backend, _fork
from accelrt.memory._lock import FastLock

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

# the scenario scripts' fork_children(n, child) and their runner (tests/helpers/forks.py)
_run = run_fork_scenario


_STRESS = """
    import gc, sys, threading
    import numpy as np
    import accelrt as acc

    acc.set_current_accelerator("cpu")
    DEVS = ["cpu:0", "cpu:1"]

    def churn(i, stop):
        dev = DEVS[i % 2]
        while True:
            s = acc.Stream(dev)
            with s:
                a = acc.empty((1024 + 64 * i,), device=dev)
                a.fill_(1.0)
                b = acc.zeros((4096,), device=dev)
                b.copy_(acc.full((4096,), 2.0, device=dev), non_blocking=True)
                ev = acc.Event(enable_timing=True)
                ev.record(s)
                r = acc.rand((256,), device=dev, generator=gens[i])
                big = acc.empty((3 << 20,), dtype="uint8", device=dev)   # a large-pool block
            a.record_stream(acc.current_stream(dev))
            del a, b, s, ev, r, big
            if i == 0:
                acc.empty_cache()
            if stop.is_set():
                return

    gens = [acc.random.Generator(DEVS[i % 2]) for i in range(3)]
    once = threading.Event()
    once.set()
    for i in range(3):   # import and initialise everything first: a module import in
        churn(i, once)   # progress at the fork is CPython's problem (its import locks)
    acc.memory_summary("cpu:0"), acc.memory_stats("cpu:0"), acc.synchronize("cpu:0")

    def consistent(index):
        # the statistics agree with the blocks: no half-done malloc or free was inherited
        segs = [seg for seg in acc.memory_snapshot() if seg["device"] == index]
        dev = DEVS[index]
        stats = acc.memory_stats(dev)
        assert acc.memory_reserved(dev) == sum(seg["total_size"] for seg in segs)
        assert acc.memory_allocated(dev) == sum(seg["allocated_size"] for seg in segs)
        assert stats["segment.all.current"] == len(segs)
        assert stats["allocation.all.current"] == sum(
            blk["state"] == "active_allocated" for seg in segs for blk in seg["blocks"])
        for seg in segs:
            assert sum(blk["size"] for blk in seg["blocks"]) == seg["total_size"]

    def child():
        gc.collect()
        for index, dev in enumerate(DEVS):
            consistent(index)
            # arrays the parent's other threads held stay allocated (their frames are never
            # released in a child); everything the child does comes and goes on top of that
            base = acc.memory_allocated(dev)
            s = acc.Stream(dev)
            with s:
                a = acc.full((1000,), 3.0, device=dev)
                x = acc.empty((5000,), device=dev)
                x.copy_(acc.asarray(np.arange(5000, dtype=np.float32), device=dev))
                start, end = acc.Event(enable_timing=True), acc.Event(enable_timing=True)
                start.record(); end.record()
                r = acc.rand((100,), device=dev)
                acc.manual_seed(7)
            s.synchronize()
            end.synchronize()
            assert start.elapsed_time(end) >= 0.0
            assert float(a.numpy().sum()) == 3000.0
            assert np.array_equal(x.numpy(), np.arange(5000, dtype=np.float32))
            r = r.numpy()
            assert r.shape == (100,) and ((r >= 0) & (r < 1)).all()
            assert acc.memory_allocated(dev) >= base + a.nbytes + x.nbytes
            del a, x, r
            gc.collect()
            acc.synchronize(dev)
            assert acc.memory_allocated(dev) == base, acc.memory_summary(dev)
            acc.empty_cache()
            consistent(index)
            segs = [seg for seg in acc.memory_snapshot() if seg["device"] == index]
            assert all(seg["allocated_size"] for seg in segs)   # every free segment went back

    sys.setswitchinterval(1e-6)   # preempt the threads often, also inside locked sections
    stop = threading.Event()
    threads = [threading.Thread(target=churn, args=(i, stop)) for i in range(3)]
    for t in threads:
        t.start()
    try:
        fork_children(20, child)
    finally:
        stop.set()
        for t in threads:
            t.join()
"""


@pytest.mark.parametrize("streams", ["sync", "async"])
def test_fork_while_threads_allocate(streams: str) -> None:
    # three threads allocate, free, make streams and events and draw random numbers while the
    # main thread forks twenty children: no child may hang on a lock a parent thread held,
    # and each child's allocator is consistent (statistics agree with its blocks)
    out = _run(_STRESS, {"ACCELRT_CPU_DEVICES": "2", "ACCELRT_CPU_STREAMS": streams})
    assert "children ok=20 hung=0 failed=0" in out.stdout, (out.stdout, out.stderr[-4000:])
    assert out.returncode == 0, out.stderr[-4000:]


def test_fork_while_threads_allocate_shared_memory() -> None:
    # the same with memory shared with the children (ACCELRT_CPU_SHARED_MEMORY=1): the
    # segments of each fork's moment leave use in both processes, and every child's allocator
    # stays consistent and gives them all back on empty_cache
    out = _run(_STRESS, {"ACCELRT_CPU_DEVICES": "2", "ACCELRT_CPU_STREAMS": "async",
                         "ACCELRT_CPU_SHARED_MEMORY": "1"})
    assert "children ok=20 hung=0 failed=0" in out.stdout, (out.stdout, out.stderr[-4000:])
    assert out.returncode == 0, out.stderr[-4000:]


def test_forked_child_drops_the_parents_queued_work() -> None:
    # work queued in the parent is the parent's: the child neither runs it (a gated host
    # function would wait forever for a parent thread) nor waits for it
    out = _run("""
        import threading
        import accelrt as acc
        from accelrt.backends import get_backend

        b = get_backend("cpu")
        s = acc.Stream("cpu:0")
        started, gate, ran = threading.Event(), threading.Event(), []
        b.launch_host_func(0, lambda: (started.set(), gate.wait()), s.stream_id)
        b.launch_host_func(0, lambda: (gate.wait(), ran.append("parent")), s.stream_id)
        x = acc.zeros((256,), device="cpu:0")
        with s:
            x.fill_(5.0)                                 # queued behind the gates
            ev = acc.Event(); ev.record()
        started.wait()                                   # the first gate is in flight

        def child():
            assert s.query() and ev.query()
            s.synchronize(); ev.synchronize(); acc.synchronize("cpu:0")
            with s:
                x.fill_(2.0)                             # the stream still works
            s.synchronize()
            assert float(x.numpy().sum()) == 512.0 and ran == []

        fork_children(1, child)
        gate.set()
        s.synchronize()
        assert ran == ["parent"] and float(x.numpy().sum()) == 5.0 * 256
        print("parent-ok")
    """, {"ACCELRT_CPU_STREAMS": "async"})
    assert "children ok=1 hung=0 failed=0" in out.stdout, (out.stdout, out.stderr[-4000:])
    assert "parent-ok" in out.stdout, out.stderr[-4000:]



def test_pinned_pool_background_thread_in_a_forked_child() -> None:
    """pinned_use_background_threads: the parent's event thread is not in the child; the
    child's next free that waits on events starts its own, and neither process hangs."""
    out = _run("""
        from types import SimpleNamespace
        from accelrt.memory._host import HostCachingAllocator
        from accelrt.testing import SimulatedBackend

        b = SimulatedBackend(auto_complete=False, name="forkpin")
        pool = HostCachingAllocator(b)
        s = SimpleNamespace(_index=0, _handle=7)
        p = pool.malloc(4096)
        pool.record_event(p, s)
        pool.free(p)                                     # pending: the parent's thread polls
        parent_worker = pool._worker
        assert parent_worker is not None and parent_worker.is_alive()

        def child():
            assert not pool._worker.is_alive()           # threads do not survive fork
            q = pool.malloc(1024)
            pool.record_event(q, s)
            pool.free(q)
            worker = pool._worker
            assert worker is not parent_worker and worker.is_alive()
            b.complete_all()                             # both blocks' events complete
            worker.join(30)
            assert not worker.is_alive()
            assert pool.stats()["active_requests.current"] == 0

        fork_children(1, child)
        b.complete_all()
        parent_worker.join(30)
        assert not parent_worker.is_alive() and pool.stats()["active_requests.current"] == 0
        print("parent-ok")
    """, {"ACCELRT_ALLOC_CONF": "pinned_use_background_threads:True"})
    assert "children ok=1 hung=0 failed=0" in out.stdout, (out.stdout, out.stderr[-4000:])
    assert "parent-ok" in out.stdout, out.stderr[-4000:]

def test_opencl_in_a_forked_child() -> None:
    # OpenCL drivers (PoCL's device threads among them) do not survive fork: once the parent
    # listed the platforms, the child gets PyTorch's "spawn" error at once instead of hanging
    # on its first copy; a child of a parent that never touched OpenCL uses it normally.
    # One parent goes through the three states, forking a child in each.
    reason = _backend.unavailable_reason("opencl")
    if reason is not None:
        pytest.skip(f"opencl unavailable: {reason}")
    out = _run("""
        import numpy as np
        import accelrt as acc

        x = np.arange(64, dtype=np.float32)

        def child(use):
            assert float(acc.full((8,), 2.0, device="cpu:0").numpy().sum()) == 16.0
            if use == "nothing":
                assert np.array_equal(acc.asarray(x, device="opencl:0").numpy(), x)
                return
            ops = [lambda: acc.asarray(x, device="opencl:0"), lambda: acc.Stream("opencl:0"),
                   lambda: acc.Event("opencl:0").record(acc.current_stream("opencl:0"))]
            if use == "arrays":   # (a device never initialised has nothing to synchronize)
                ops += [lambda: acc.synchronize("opencl:0"), lambda: y.numpy()]
            for op in ops:
                try:
                    op()
                except acc.BackendUnavailableError as exc:
                    assert "Cannot re-initialize OpenCL in forked subprocess" in str(exc)
                    assert "'spawn' start method" in str(exc)
                else:
                    raise AssertionError("OpenCL worked in a forked child")
            assert float(acc.full((8,), 1.0, device="cpu:0").numpy().sum()) == 8.0

        fork_children(1, lambda: child("nothing"))
        assert acc.backends.unavailable_reason("opencl") is None    # lists the platforms
        fork_children(1, lambda: child("discovery"))
        y = acc.asarray(np.ones(64, np.float32), device="opencl:0")
        assert float(y.numpy().sum()) == 64.0
        fork_children(1, lambda: child("arrays"))
    """)
    assert out.stdout.count("children ok=1 hung=0 failed=0") == 3, (out.stdout,
                                                                     out.stderr[-4000:])


def test_hold_across_fork_takes_every_registered_lock_and_gives_them_back() -> None:
    fast, plain = _fork.hold_across_fork(FastLock()), _fork.hold_across_fork(threading.Lock())
    plain.acquire()                       # another thread's critical section in progress
    done = threading.Event()

    def forking() -> None:
        _fork._before()
        done.set()

    t = threading.Thread(target=forking)
    t.start()
    assert not done.is_set()              # it cannot have taken ``plain`` yet
    plain.release()                       # the critical section ends: the fork may proceed
    t.join(30)
    assert done.is_set() and fast.locked() and plain.locked()
    _fork._after()
    assert not fast.locked() and not plain.locked()


def test_every_module_lock_is_registered() -> None:
    from accelrt import _backend as registry
    from accelrt import _device, _dlpack, _graph, _stream
    from accelrt.backends import get_backend
    from accelrt.memory import _allocator, _config, _host
    from accelrt.random import _generator, _philox
    b = get_backend("cpu")
    reinit = [registry._lock, _device._acc_lock, _stream._pools_lock, _graph._lock,
              _dlpack._sweep_lock, _allocator._lock, _config._lock, _host._registry_lock,
              _generator._lock, _philox._pool_lock, b._lock, b._mem[0]._lock, b._host._lock]
    assert all(lock in _fork._reinit for lock in reinit)
    assert _allocator.get_allocator(b, 0)._lock in _fork._hold


def test_locks_held_by_another_thread_at_the_fork_are_free_in_the_child() -> None:
    # deterministic: a thread holds the registry's, the current accelerator's, the stream
    # pools', the allocator registry's, the RNG's and the cpu backend's locks across the fork
    out = _run("""
        import contextlib, threading
        import numpy as np
        import accelrt as acc
        from accelrt import _backend, _device, _stream
        from accelrt.backends import get_backend
        from accelrt.memory import _allocator, _config
        from accelrt.random import _generator

        acc.set_current_accelerator("cpu")
        b = get_backend("cpu")
        acc.rand((4,), device="cpu:0")
        locks = [_backend._lock, _device._acc_lock, _stream._pools_lock, _allocator._lock,
                 _config._lock, _generator._lock, _generator._default_for(b, 0)._st.lock, b._lock,
                 b._mem[0]._lock]
        held, release = threading.Event(), threading.Event()

        def holder():
            with contextlib.ExitStack() as st:
                for lock in locks:
                    st.enter_context(lock)
                held.set()
                release.wait()

        t = threading.Thread(target=holder)
        t.start()
        held.wait()

        def child():
            acc.set_current_accelerator("cpu")
            s = acc.Stream("cpu:0")
            with s:
                x = acc.asarray(np.arange(16, dtype=np.float32), device="cpu:0", copy=True)
                r = acc.rand((16,), device="cpu:0")
            s.synchronize()
            assert x.numpy().sum() == 120.0 and r.shape == (16,)
            acc.empty_cache()

        fork_children(1, child, deadline_s=30)
        release.set()
        t.join()
    """)
    assert "children ok=1 hung=0 failed=0" in out.stdout, (out.stdout, out.stderr[-4000:])


def test_shared_memory_parent_and_child_never_hand_out_the_same_block() -> None:
    # With ACCELRT_CPU_SHARED_MEMORY=1 device memory stays shared with a forked child: each
    # process must allocate only memory the other will never hand out (as CUDA's allocator is
    # per process), while the arrays of the fork's moment stay shared. Gates are pipe bytes.
    out = _run("""
        import gc
        import numpy as np
        import accelrt as acc

        acc.set_current_accelerator("cpu")
        dev = "cpu:0"
        MB = 1 << 20
        keep = acc.full((1024,), 7, dtype="int32", device=dev)       # shared with the child
        old = acc.full((1024,), 3, dtype="int32", device=dev)        # the parent drops it
        big = acc.full((3 * MB // 4,), 3, dtype="int32", device=dev)  # a large-pool block
        cached = [acc.zeros((1024,), dtype="int32", device=dev),       # cached blocks, small
                  acc.zeros((3 * MB // 4,), dtype="int32", device=dev)]  # and large
        del cached
        acc.synchronize(dev)
        to_parent, to_child = os.pipe(), os.pipe()

        def say(pipe, word):
            os.write(pipe[1], word)

        def hear(pipe, word):
            got = os.read(pipe[0], len(word))
            assert got == word, (got, word)

        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                c = acc.full((1024,), 1, dtype="int32", device=dev)
                cb = acc.full((3 * MB // 4,), 1, dtype="int32", device=dev)
                acc.synchronize(dev)
                say(to_parent, b"a")
                hear(to_child, b"b")               # the parent allocated and wrote its own
                assert (c.numpy() == 1).all() and (cb.numpy() == 1).all()
                assert (old.numpy() == 3).all() and (big.numpy() == 3).all()
                c.fill_(4)
                cb.fill_(4)
                keep.fill_(9)                      # still shared: the parent sees it
                acc.synchronize(dev)
                del c, cb, old, big, keep          # the child's copies go back ...
                gc.collect()
                acc.empty_cache()                  # ... and every segment is released
                assert acc.memory_reserved(dev) == 0, acc.memory_summary(dev)
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                say(to_parent, b"c")
                os._exit(code)
        hear(to_parent, b"a")                      # the child allocated first
        del old, big                               # free pre-fork blocks the child still holds
        gc.collect()
        p = acc.full((1024,), 2, dtype="int32", device=dev)
        pb = acc.full((3 * MB // 4,), 2, dtype="int32", device=dev)
        q = acc.full((1024,), 5, dtype="int32", device=dev)          # old's size
        qb = acc.full((3 * MB // 4,), 5, dtype="int32", device=dev)  # big's size
        acc.synchronize(dev)
        say(to_child, b"b")
        hear(to_parent, b"c")
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        assert (p.numpy() == 2).all() and (pb.numpy() == 2).all()
        assert (q.numpy() == 5).all() and (qb.numpy() == 5).all()
        assert (keep.numpy() == 9).all()
        del p, pb, q, qb, keep
        gc.collect()
        acc.empty_cache()                          # the parent's retired segments go too
        assert acc.memory_reserved(dev) == 0, acc.memory_summary(dev)
        print("ok")
    """, {"ACCELRT_CPU_SHARED_MEMORY": "1"}, timeout=60)
    assert out.returncode == 0 and "ok" in out.stdout.split(), (out.stdout, out.stderr[-4000:])


def test_retired_segments_are_never_handed_out_and_empty_cache_returns_them() -> None:
    # what a fork does to memory shared with the child (ACCELRT_CPU_SHARED_MEMORY=1), on one
    # allocator: cached and later-freed blocks of the fork's segments are never reused, the
    # statistics still agree with the blocks, and empty_cache gives the segments back
    from accelrt.backends import get_backend
    from accelrt.memory._allocator import DeviceCachingAllocator
    from accelrt.memory._pools import retire_segments

    a = DeviceCachingAllocator(get_backend("cpu"), 0)
    live = [a.malloc(n, 0) for n in (512, 4096, 3 << 20, 12 << 20)]
    cached = [a.malloc(n, 0) for n in (512, 3 << 20)]
    for p in cached:
        a.free(p)
    before = a.memory_reserved()
    with a._lock:
        assert retire_segments(a) == 2         # a small and a large segment
        assert retire_segments(a) == 0         # (already retired)
    old = {s["address"]: s["total_size"] for s in a.snapshot_segments()}

    def in_old(p: int) -> bool:
        return any(b <= p < b + n for b, n in old.items())

    for p in live[:2]:
        a.free(p)                              # freed into the retired pool
    fresh = [a.malloc(n, 0) for n in (512, 512, 4096, 3 << 20, 12 << 20)]
    assert not any(in_old(p) for p in fresh)
    assert a.memory_reserved() > before
    segs = a.snapshot_segments()
    assert a.memory_reserved() == sum(s["total_size"] for s in segs)
    assert a.memory_allocated() == sum(s["allocated_size"] for s in segs)
    assert all(s["segment_pool_id"] == (0, 0) for s in segs)
    a.empty_cache()                            # the retired small segment is free: it goes
    assert not any(s["address"] in old and s["segment_type"] == "small"
                   for s in a.snapshot_segments())
    for p in live[2:] + fresh:
        a.free(p)
    a.empty_cache()
    assert a.memory_reserved() == 0 and a.stats()["segment.all.current"] == 0


def test_a_live_private_pools_retired_segments_stay_until_it_is_released() -> None:
    # a graph may still replay into its private pool's memory: empty_cache keeps the retired
    # segments of a pool that is in use, as it keeps the pool's own
    from accelrt.backends import get_backend
    from accelrt.memory._allocator import DeviceCachingAllocator
    from accelrt.memory._pools import retire_segments

    a = DeviceCachingAllocator(get_backend("cpu"), 0)
    pid = (3, 1)
    a.begin_allocate_to_pool(pid)
    p = a.malloc(512, 0)
    a.end_allocate_to_pool(pid)
    a.free(p)
    with a._lock:
        assert retire_segments(a) == 1
    a.begin_allocate_to_pool(pid)
    q = a.malloc(512, 0)                       # a new segment of the pool
    a.end_allocate_to_pool(pid)
    segs = a.snapshot_segments(pid)
    assert q != p and len(segs) == 2           # the retired twin keeps the pool's id
    a.free(q)
    a.empty_cache()
    assert a.memory_reserved() == 2 * segs[0]["total_size"]
    a.release_pool(pid)
    a.release_pool(pid)                        # (each begin_allocate_to_pool took one)
    a.empty_cache()
    assert a.memory_reserved() == 0 and a.snapshot_segments() == []
