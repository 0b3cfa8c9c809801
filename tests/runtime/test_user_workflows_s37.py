"""Workloads a user builds from README.md and docs/ alone (session 37): a double-buffered
host -> device -> host pipeline on two streams, and the memory workflow from
``record_memory_history`` to ``accelrt memory tune``."""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import accelrt as acc
from accelrt import memory
from accelrt.memory.tools._replay import replay_ops
from accelrt.memory.tools._tune import read_workload, tune_main

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _record_with_pool(path: Path) -> dict[str, int]:
    """Allocations on the current and a side stream, then one in a MemPool; the snapshot with
    history goes to ``path``. Returns the statistics at the end."""
    dev = acc.device("cpu:0")
    acc.empty_cache()                       # what earlier work cached or peaked is not ours
    memory.reset_peak_memory_stats(dev)
    memory.record_memory_history(max_entries=10_000)
    try:
        s = acc.Stream(dev)
        kept = []
        for i in range(6):
            a = acc.empty((i + 1) * 300_000, dtype="uint8", device=dev)
            with s:
                b = acc.empty(4_000_000, device=dev)
                b.fill_(1.0)
            b.record_stream(s)
            if i % 3 == 0:
                kept.append(a)
            del a, b
        pool = memory.MemPool()
        with memory.use_mem_pool(pool):
            p = acc.zeros(3_000_000, device=dev)
        s.synchronize()
        stats = dict(memory.memory_stats(dev))
        memory.dump_snapshot(str(path))
    finally:
        memory.record_memory_history(None)
    del p, kept, pool, s
    acc.empty_cache()
    return stats


def test_tune_names_the_allocations_of_private_pools(tmp_path: Path) -> None:
    """A history with a MemPool allocation: ``accelrt memory tune`` says how many allocations
    were made in private pools, which the replays make in a private pool of the same id (they
    put it in the default pool, where its block filled a default segment's free space, so the
    peak reserved came out lower than the run's: tests/tools/test_replay_pools_s37.py). The
    peak live bytes are the run's requested bytes."""
    path = tmp_path / "snap.pickle"
    stats = _record_with_pool(path)
    with open(path, "rb") as f:
        trace = pickle.load(f)["device_traces"][0]
    assert sum(e["action"] == "alloc" and e["pool_id"] != (0, 0) for e in trace) == 1
    w = read_workload(str(path))
    assert w.private_pool_allocs == 1
    r = replay_ops(w.ops, plan=w.plan)
    assert r["peak_live_bytes"] == stats["requested_bytes.all.peak"]
    # the MemPool's 12 MB block gets a segment of its own, as in the run
    assert r["peak_reserved_bytes"] == stats["reserved_bytes.all.peak"]
    # (in the default pool, it would fit a free part of a default-pool segment)
    assert replay_ops(w.ops)["peak_reserved_bytes"] < stats["reserved_bytes.all.peak"]

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert tune_main([str(path), "--device-memory", "256MiB"]) == 0
    assert ("private pools: 1 of the allocations were made in a private pool (MemPool, graph "
            "capture)") in out.getvalue()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert tune_main([str(path), "--json"]) == 0
    assert json.loads(out.getvalue())["private_pool_allocs"] == 1
    assert "is replayed in a private pool of the same id" in \
        " ".join((DOCS / "memory.md").read_text().split())


def test_tune_without_private_pools_says_nothing_of_them(tmp_path: Path) -> None:
    path = tmp_path / "snap.pickle"
    memory.record_memory_history(max_entries=100)
    try:
        a = acc.empty(1 << 20, device="cpu:0")
        memory.dump_snapshot(str(path))
    finally:
        memory.record_memory_history(None)
    del a
    assert read_workload(str(path)).private_pool_allocs == 0
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert tune_main([str(path)]) == 0
    assert "private pools" not in out.getvalue()


PIPELINE = textwrap.dedent("""
    import numpy as np
    import accelrt as acc

    N, CHUNKS = 1 << 15, 8
    dev = acc.device("cpu:1")
    rng = np.random.default_rng(0)
    inputs = [acc.pin_memory(rng.random(N, dtype=np.float32), device="cpu")
              for _ in range(CHUNKS)]
    outs = [acc.empty(N, dtype="float32", pin_memory=True) for _ in range(CHUNKS)]
    assert all(acc.is_pinned(o) for o in outs)
    streams = [acc.Stream(dev), acc.Stream(dev)]
    bufs = [acc.empty(N, dtype="float32", device=dev) for _ in range(2)]
    done = [acc.Event(dev) for _ in range(2)]
    t0, t1 = acc.Event(dev, enable_timing=True), acc.Event(dev, enable_timing=True)
    for s in streams:
        s.wait_stream(acc.current_stream(dev))
    t0.record(streams[0])
    for i in range(CHUNKS):
        k = i % 2
        s = streams[k]
        with s:
            if i >= 2:
                s.wait_event(done[k])           # buffer k's previous chunk is read
            bufs[k].copy_(inputs[i], non_blocking=True)
            dst = acc.asarray(outs[i], device=dev)   # shares the pinned memory on cpu
            dst.copy_(bufs[k], non_blocking=True)
            dst.record_stream(s)
            done[k].record()
    streams[0].wait_stream(streams[1])
    t1.record(streams[0])
    t1.synchronize()
    assert t0.elapsed_time(t1) >= 0.0
    for i in range(CHUNKS):
        assert np.array_equal(outs[i], inputs[i]), i
    # the documented download: wait for the chunk's event, then numpy()
    with streams[0]:
        bufs[0].copy_(inputs[3], non_blocking=True)
        e = streams[0].record_event()
    e.synchronize()
    assert np.array_equal(bufs[0].numpy(), inputs[3])
    del bufs, dst
    acc.synchronize(dev)
    assert acc.memory_allocated(dev) == 0, acc.memory_allocated(dev)
    print("OK")
""")


def test_double_buffered_pipeline_on_async_streams() -> None:
    """Workload (a): pinned uploads and stream-ordered copies on two streams of a second cpu
    device with asynchronous streams, events for ordering and timing, record_stream."""
    env = {**os.environ, "ACCELRT_CPU_DEVICES": "2", "ACCELRT_CPU_STREAMS": "async"}
    r = subprocess.run([sys.executable, "-c", PIPELINE], capture_output=True, text=True,
                       timeout=120, env=env, check=False)
    assert r.returncode == 0 and r.stdout.strip() == "OK", r.stdout + r.stderr
    # differences.md says that downloads wait, and how a pipeline reads its chunks instead
    text = " ".join((DOCS / "differences.md").read_text().split())
    assert "Copies from device to host are synchronous" in text
