"""PyTorch's allocator tests run with expandable segments (test/test_cuda_expandable_segments.py
re-runs ``TestCuda``, ``TestMemPool``, ``TestBlockStateAbsorption`` and ``TestCudaAllocator`` of
test/test_cuda.py with ``expandable_segments:True``), the test_cuda.py tests whose names mention
expandable segments, and torch.cuda._memory_viz's readers of the snapshots such an allocator
makes: the tests that only exist with expandable segments. The re-runs of test_cuda.py's tests
are in tests/memory/test_torch_suite_memory_s35.py, each parametrised over the two settings
(ids ``plain`` and ``expandable``), with what expandable segments change stated there.

Every test names the PyTorch test it mirrors. ``torch.cuda`` becomes a device module (``acc.cpu``,
or the module of a fresh :class:`~accelrt.testing.SimulatedBackend`), ``torch.accelerator``
becomes ``accelrt``, tensors become ``acc.Array``s. Tests that read values back run on ``cpu``.
"""

from __future__ import annotations

import gc
import itertools
import json
import pickle
import random
import threading
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import accelrt as acc
from accelrt import backends
from accelrt.memory.viz import segsum, trace_text, viz_main
from accelrt.testing import SimulatedBackend
from tests.helpers.expandable import switch_on_or_skip
from tests.helpers.pluggable import numpy_allocator

MiB = 1 << 20
_names = itertools.count()


def _simulated() -> str:
    name = f"torchexp{next(_names)}"
    backends.register(name, lambda: SimulatedBackend(name=name, capacity=1 << 30,
                                                     device_count=2))
    return name


@pytest.fixture(params=["cpu", "simulated"])
def name(request: pytest.FixtureRequest) -> Iterator[str]:
    """The backend of a test run on both (``cpu``, or a fresh 1 GiB simulated backend), with
    expandable segments on for the test; the suite's autouse fixture restores the settings."""
    n = "cpu" if request.param == "cpu" else _simulated()
    m = backends.device_module(n)
    gc.collect()
    m.empty_cache()
    switch_on_or_skip(m)
    yield n
    gc.collect()
    m.empty_cache()


# ------------------------------------------------------------------------- statistics

def test_expandable_statistics_count_pages_not_segments(name: str) -> None:
    """The statistics of test_cuda_expandable_segments.py's runs (ALLOCATOR_SPEC.md section 10,
    torch's map_block/unmap_block): mapping pages adds to ``reserved_bytes`` and
    ``num_device_alloc`` but not to ``segment``; a large request maps 20 MiB pages and a small
    one a 2 MiB page; split blocks of expandable segments are not ``inactive_split``;
    ``empty_cache`` unmaps every free page (``num_device_free``) and reserved memory drops to
    nothing."""
    m = backends.device_module(name)
    d = f"{name}:0"
    m.reset_accumulated_memory_stats(0)
    before = defaultdict(int, m.memory_stats(0))                         # {} before use
    big = acc.empty(3 * MiB, dtype="uint8", device=d)
    small = acc.empty(250, dtype="float32", device=d)
    st = m.memory_stats(0)
    assert st["reserved_bytes.large_pool.current"] == 20 * MiB
    assert st["reserved_bytes.small_pool.current"] == 2 * MiB
    assert st["allocated_bytes.all.current"] == 3 * MiB + 1024
    assert st["num_device_alloc"] - before["num_device_alloc"] == 2
    assert st["segment.all.current"] == before["segment.all.current"]
    assert st["segment.all.allocated"] == before["segment.all.allocated"]
    assert st["inactive_split.all.current"] == 0
    assert st["inactive_split_bytes.all.current"] == 0
    segments = m.memory_snapshot()
    assert sorted((s["segment_type"], s["total_size"], s["is_expandable"]) for s in segments) == \
        [("large", 20 * MiB, True), ("small", 2 * MiB, True)]
    del big, small
    m.empty_cache()
    st = m.memory_stats(0)
    assert st["reserved_bytes.all.current"] == 0
    assert st["num_device_free"] - before["num_device_free"] == 2
    assert st["segment.all.freed"] == before["segment.all.freed"]
    assert m.memory_snapshot() == []


@pytest.mark.parametrize("value", ["true", "1", "none", "TRUE"])
def test_bad_boolean_setting_has_torchs_message(value: str) -> None:
    """mirrors test_cuda.py test_allocator_settings's refused strings (torch 2.15 checks every
    boolean with ConfigTokenizer::toBool): a value other than True/False is a ``ValueError``
    naming the index of the token, counted over the whole string as torch counts it."""
    for text, index in ((f"expandable_segments:{value}", 2),
                        (f"max_split_size_mb:40,expandable_segments:{value}", 6),
                        (f"roundup_power2_divisions:[64:8,>:1],release_lock_on_cudamalloc:{value}",
                         14),
                        ((f" garbage_collection_threshold : 0.5 , pinned_use_background_threads"
                          f" : {value}"), 6)):
        with pytest.raises(ValueError, match=(f"Expected 'True' or 'False' at index {index} in "
                                              f"ConfigTokenizer but got '{value}'")):
            acc.cpu.set_allocator_settings(text)


# ------------------------------------------------------------------------- fuzz

def test_allocator_fuzz_expandable() -> None:
    """mirrors test_cuda.py test_allocator_fuzz (expandable run, fewer steps and a smaller
    cap): random allocations of 2-20 MiB, frees and ``empty_cache`` calls in expandable segments
    never hand out memory still in use (every array keeps the value it was filled with)."""
    m = acc.cpu
    gc.collect()
    m.empty_cache()
    switch_on_or_skip(m)
    rng = random.Random(123)
    live: list[tuple[int, acc.Array]] = []
    total = count = 0

    def free_one() -> None:
        nonlocal total
        value, arr = live.pop(rng.randrange(len(live)))
        assert (arr.numpy() == value).all()
        total -= arr.size

    for _ in range(400):
        while total >= 160 * MiB // 4:
            free_one()
        action = rng.choices(("alloc", "free", "empty"), weights=(1, 1 if live else 0, 0.1))[0]
        if action == "alloc":
            n = rng.randrange(2 * MiB // 4, 20 * MiB // 4)
            live.append((count, acc.full((n,), count, dtype="int32", device="cpu:0")))
            count += 1
            total += n
        elif action == "free":
            free_one()
        else:
            m.empty_cache()
    while live:
        free_one()
    m.empty_cache()
    assert m.memory_reserved() == 0


# ------------------------------------------------------------------------- switching

def test_toggling_expandable_at_run_time(name: str) -> None:
    """mirrors test_cuda.py test_max_split_expandable's switching (and the settings
    test_cuda_expandable_segments.py installs with _set_allocator_settings): segments made
    while the option is off stay ordinary, the ones made while it is on are expandable, and the
    snapshot's allocator_settings follow the option."""
    m = backends.device_module(name)
    d = f"{name}:0"
    m.set_allocator_settings("expandable_segments:False")
    assert m.memory._snapshot()["allocator_settings"]["expandable_segments"] is False
    a = acc.empty(4 * MiB, dtype="uint8", device=d)
    m.set_allocator_settings("expandable_segments:True")
    assert m.memory._snapshot()["allocator_settings"]["expandable_segments"] is True
    b = acc.empty(30 * MiB, dtype="uint8", device=d)
    segs = {s["address"]: s for s in m.memory_snapshot()}
    seg_of = {p: next(s for s in segs.values()
                      if s["address"] <= p < s["address"] + s["total_size"])
              for p in (a.data_ptr(), b.data_ptr())}
    assert seg_of[a.data_ptr()]["is_expandable"] is False
    assert seg_of[a.data_ptr()]["total_size"] == 20 * MiB
    assert seg_of[b.data_ptr()]["is_expandable"] is True
    assert seg_of[b.data_ptr()]["total_size"] == 40 * MiB
    st = m.memory_stats(0)
    assert st["segment.all.current"] == 1                # the ordinary one only
    assert st["reserved_bytes.all.current"] == 60 * MiB
    del a, b


# ------------------------------------------------------------------------- MemPool

def test_mempool_expandable(name: str) -> None:
    """mirrors test_cuda.py TestMemPool.test_mempool_expandable: with expandable segments on, a
    MemPool with its own (pluggable) allocator gets an ordinary segment, an allocation outside
    it an expandable one: two segments, one expandable."""
    m = backends.device_module(name)
    d = f"{name}:0"
    plug, held = numpy_allocator()
    pool = m.MemPool(plug)
    data = []
    with m.use_mem_pool(pool):
        data.append(acc.empty(MiB // 4, device=d))
    data.append(acc.empty(MiB // 4, device=d))
    segments = m.memory.memory_snapshot()
    assert len(segments) == 2
    assert sum(s["is_expandable"] for s in segments) == 1
    assert next(s for s in segments if s["segment_pool_id"] == pool.id)["is_expandable"] is False
    del data, pool
    gc.collect()
    m.empty_cache()
    assert held == {}


@pytest.mark.parametrize("expandable", [True, False])
def test_allocate_in_thread_to_pool_expandable(name: str, expandable: bool) -> None:
    """mirrors test_cuda.py TestBlockStateAbsorption.test_allocate_in_thread_to_pool: one
    thread allocates to a private pool (torch: a graph's pool, routed with
    _cuda_beginAllocateCurrentThreadToPool; accelrt: ``use_mem_pool``, current for that thread
    only) while another allocates outside it. The pool ends with 2 segments with expandable
    segments (its small page and one large expandable segment), 4 without (the small one and
    three 20 MiB segments), and with none once freed."""
    m = backends.device_module(name)
    d = f"{name}:0"
    if not expandable:
        m.set_allocator_settings("expandable_segments:False")
    pool = m.MemPool()
    with m.use_mem_pool(pool):
        first = acc.ones(4, device=d)
    del first
    big = 20 * MiB

    def use_pool(pool: Any) -> None:
        with m.use_mem_pool(pool):
            for _ in range(10):
                a = acc.ones(big, dtype="uint8", device=d)
                b = acc.ones(big, dtype="uint8", device=d)
                c = acc.empty(big, dtype="uint8", device=d)
                del a, b, c
        a = acc.ones(big, dtype="uint8", device=d)
        b = acc.ones(big, dtype="uint8", device=d)
        del a, b

    def no_pool() -> None:
        for _ in range(10):
            a = acc.ones(big, dtype="uint8", device=d)
            b = acc.ones(big, dtype="uint8", device=d)
            del a, b

    threads = [threading.Thread(target=use_pool, args=(pool,)), threading.Thread(target=no_pool)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    segments = m.memory.memory_snapshot(pool.id)
    assert len(segments) == (2 if expandable else 4)
    assert all(s["is_expandable"] is expandable for s in segments)
    del pool
    gc.collect()
    m.empty_cache()
    assert m.memory._snapshot()["segments"] == []


# ------------------------------------------------------------------------- _memory_viz

def _expandable_history(m: Any, d: str) -> dict[str, Any]:
    """A snapshot with history of expandable segments: pages mapped, one unmapped while a live
    block keeps the next page, mapped again by a larger request."""
    try:
        m.memory._record_memory_history("all")
        a = acc.empty(15 * MiB, dtype="uint8", device=d)
        b = acc.empty(15 * MiB, dtype="uint8", device=d)
        c = acc.empty(15 * MiB, dtype="uint8", device=d)
        small = acc.empty(100, dtype="float32", device=d)
        del a, b
        m.empty_cache()
        e = acc.empty(30 * MiB, dtype="uint8", device=d)
        snap: dict[str, Any] = m.memory._snapshot()
        del c, e, small
        return snap
    finally:
        m.memory._record_memory_history(None)


def test_trace_text_reads_maps_and_unmaps(name: str) -> None:
    """torch.cuda._memory_viz ``trace`` over an expandable allocator's history (torch prints
    segment_map/segment_unmap entries as raw dicts; accelrt names them ``map``/``unmap``, as
    ``cudaMalloc``/``cudaFree`` for segments): every map and unmap is a line, allocations are
    placed in the mapped page that holds them, and the running total is the live bytes."""
    m = backends.device_module(name)
    snap = _expandable_history(m, f"{name}:0")
    actions = [e["action"] for e in snap["device_traces"][0]]
    text = trace_text(snap)
    lines = text.splitlines()
    assert sum(line.split(" = ")[-1].startswith("map(") for line in lines) == \
        actions.count("segment_map") == 5
    assert sum(line.startswith("unmap(") for line in lines) == actions.count("segment_unmap") == 1
    assert "MEM[" not in text                          # every block lies in a mapped page
    assert lines[-1] == "TOTAL MEM: 45.0MiB"          # c (15 MiB) and e (30 MiB) + the small
    assert not any(line.startswith("{") for line in lines)


def test_segsum_of_expandable_segments(name: str) -> None:
    """torch.cuda._memory_viz ``segsum`` (``stats`` on its command line) over a snapshot of
    expandable segments: one row per contiguous mapped range, totals that add up."""
    m = backends.device_module(name)
    snap = _expandable_history(m, f"{name}:0")
    large = [s for s in snap["segments"] if s["segment_type"] == "large"]
    assert [s["total_size"] for s in large] == [60 * MiB]
    text = segsum(snap)
    assert "[a*b] 60.0MiB allocated, 15.0MiB (0.0% internal) free" in text
    assert f"segments: {len(snap['segments'])}" in text
    assert "total_reserved: 62.0MiB" in text


def test_viz_command_reads_an_expandable_snapshot_pickle(name: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    """``accelrt memory viz`` on a pickled snapshot of expandable segments (what
    torch.cuda.memory._dump_snapshot writes): the segment summary, the trace and the HTML page
    (torch's trace_plot/segment_plot input) all come out."""
    m = backends.device_module(name)
    snap = _expandable_history(m, f"{name}:0")
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps(snap))
    assert viz_main([str(path), "--segsum"]) == 0
    assert "[a*b] 60.0MiB" in capsys.readouterr().out
    assert viz_main([str(path), "--trace"]) == 0
    assert "unmap(" in capsys.readouterr().out
    out = tmp_path / "page.html"
    assert viz_main([str(path), "-o", str(out)]) == 0
    assert out.read_text().startswith("<!DOCTYPE html>")


def test_torch_memory_viz_reads_expandable_snapshots_torch(name: str) -> None:
    """torch.cuda._memory_viz (torch 2.15) over accelrt's snapshot of expandable segments:
    ``segsum`` gives accelrt's layout (two legend lines are worded differently,
    docs/differences.md), ``trace`` shows the map/unmap entries, ``segments``/``memory`` account
    for every byte, and ``trace_plot``/``segment_plot`` make their pages."""
    mv = pytest.importorskip("torch.cuda._memory_viz")
    m = backends.device_module(name)
    snap = _expandable_history(m, f"{name}:0")
    ours, theirs = segsum(snap).splitlines(), mv.segsum(pickle.loads(pickle.dumps(snap)))
    differ = [i for i, (a, b) in enumerate(zip(ours, theirs.splitlines())) if a != b]
    assert len(ours) == len(theirs.splitlines()) and len(differ) == 2
    trace = mv.trace(pickle.loads(pickle.dumps(snap)))
    assert "'action': 'segment_unmap'" in trace and "'action': 'segment_map'" in trace

    def ident(lines: str) -> str:
        return lines

    for fn in (mv.segments, mv.memory):
        lines = fn(pickle.loads(pickle.dumps(snap)), format_flamegraph=ident).splitlines()
        assert sum(int(line.rsplit(" ", 1)[1]) for line in lines) == \
            sum(s["total_size"] for s in snap["segments"])
    for page in (mv.trace_plot(pickle.loads(pickle.dumps(snap))),
                 mv.segment_plot(pickle.loads(pickle.dumps(snap)))):
        assert "add_local_files" in page
    json.dumps(snap)                                      # what the JS viewer reads
