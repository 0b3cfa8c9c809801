"""Pool-aware replay (session 37): ``accelrt replay`` and ``accelrt memory tune`` make each
allocation a snapshot's history made in a private pool (``MemPool``, graph capture: a
``pool_id`` other than ``(0, 0)``) in a private pool of the same id, release a pool where the
history gives its segments back, and so reproduce the recorded run's peak reserved bytes; a
malformed ``pool_id`` is refused with the entry named."""

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
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelrt.memory import _config
from accelrt.memory._allocator import DeviceCachingAllocator
from accelrt.memory.tools._replay import (
    PoolPlan,
    load_replay,
    pool_plan,
    replay_main,
    replay_ops,
    snapshot_entries,
    snapshot_pools,
    trace_ops,
)
from accelrt.memory.tools._tune import (
    read_workload,
    recorded_setting,
    tune_main,
    tune_ops,
    with_oom_requests,
)
from accelrt.testing._simulated import SimulatedBackend

MiB = 1 << 20

# A run on the cpu backend with two MemPools (one used on a side stream and inside a graph
# capture), a graph capture's own pool on another stream, allocations in the default pool in
# between, a MemPool deleted (its memory given back) before the peak.
PROGRAM = textwrap.dedent("""
    import json, sys
    import accelrt as acc
    from accelrt import memory

    out = sys.argv[1]
    dev = acc.device("cpu:0")
    acc.set_current_accelerator("cpu")
    memory.record_memory_history(max_entries=100_000)
    s1, s2 = acc.Stream(dev), acc.Stream(dev)
    MB = 1_000_000

    def empty(n):
        return acc.empty(n, dtype="uint8", device=dev)

    keep = [empty(3 * MB), empty(300)]            # default pool, live to the end
    p1, p2 = memory.MemPool(), memory.MemPool()
    with memory.use_mem_pool(p1):
        a = [empty(n) for n in (4 * MB, 700_000, 900, 5 * MB)]
    with s1, memory.use_mem_pool(p2):
        b = [empty(n) for n in (6 * MB, 1_500_000, 2000)]
    del a[1], b[0]
    c = [empty(n) for n in (5 * MB, 600_000)]     # default pool: the pools' free space is not its
    g = acc.Graph()
    with s2, g:                                    # the graph's own pool (n, 0)
        keep[1].fill_(1)
        d = [empty(n) for n in (7 * MB, 1200, 3 * MB)]
        with memory.use_mem_pool(p2):
            b.append(empty(5 * MB))               # a MemPool used inside a capture
        del d[0]
        d.append(empty(2 * MB))
    with s1:
        c.append(empty(9 * MB))
    del a, p1                                      # the pool goes: its memory is given back
    e = [empty(30 * MB)]                           # the peak: reuses what p1 gave back
    del b
    with memory.use_mem_pool(p2):
        b = [empty(2 * MB)]
    stats = dict(memory.memory_stats(dev))
    memory.dump_snapshot(out + ".pickle")
    memory.record_memory_history(None)
    with open(out + ".json", "w") as f:
        json.dump(stats, f)
""")

SETTINGS = ["", "expandable_segments:True", "expandable_segments:True,page_reuse:True"]


def _record(tmp_path: Path, conf: str) -> tuple[Path, dict[str, int]]:
    """Run :data:`PROGRAM` in a fresh process under ``conf``: its snapshot and statistics."""
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    env = {**os.environ, "ACCELRT_ALLOC_CONF": conf}
    subprocess.run([sys.executable, "-W", "error", str(script), str(tmp_path / "run")],
                   check=True, timeout=60, env=env)
    stats = json.loads((tmp_path / "run.json").read_text())
    return tmp_path / "run.pickle", stats


@pytest.mark.parametrize("conf", SETTINGS, ids=["default", "expandable", "page_reuse"])
def test_mempools_and_a_graph_replay_to_the_recorded_peak(tmp_path: Path, conf: str) -> None:
    """Under the recorded settings the replay reserves what the run did at its peak (it
    reserved less: the pools' blocks filled the default pool's free space); without the
    releases the history shows, it would keep the deleted MemPool's memory and reserve more."""
    path, stats = _record(tmp_path, conf)
    recorded = stats["reserved_bytes.all.peak"]
    w = read_workload(str(path))
    assert w.plan is not None
    assert recorded_setting(w.settings) == conf
    cfg = _config.parse_config(conf)
    ops, plan = load_replay(str(path))
    assert ops == w.ops
    r = replay_ops(ops, cfg, plan=plan)
    assert r["peak_reserved_bytes"] == recorded
    assert r["peak_live_bytes"] == stats["requested_bytes.all.peak"]
    assert replay_ops(ops, cfg)["peak_reserved_bytes"] < recorded        # one default pool
    kept = PoolPlan(route=plan.route, ooms=plan.ooms)                     # never released
    assert replay_ops(ops, cfg, plan=kept)["peak_reserved_bytes"] > recorded
    # three private pools: two MemPools (0, n) and the graph's own (n, 0)
    pools = {p for _, _, p in plan.route}
    assert len(pools) == 3 and sum(p[1] == 0 for p in pools) == 1
    assert w.private_pool_allocs == len(plan.route) == 13

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert tune_main([str(path), "--json"]) == 0
    result = json.loads(out.getvalue())
    assert result["private_pool_allocs"] == 13
    row = next(x for x in result["results"] if x["setting"] == conf)
    assert row["peak_reserved_bytes"] == recorded
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert replay_main([str(path), "--json", "--alloc-conf",
                            conf or "expandable_segments:False"]) == 0
    assert json.loads(out.getvalue())["peak_reserved_bytes"] == recorded


def test_tune_says_the_private_pools_are_replayed_in_their_pools(tmp_path: Path) -> None:
    path = tmp_path / "s.pickle"
    path.write_bytes(pickle.dumps(_snap([
        _e("alloc", 16, 5 * MiB, pool=(0, 1)), _e("alloc", 32, 512)])))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert tune_main([str(path)]) == 0
    text = " ".join(out.getvalue().split())
    assert ("private pools: 1 of the allocations were made in a private pool (MemPool, graph "
            "capture); every setting replays them in a private pool of the same id") in text
    assert "default pool" not in text


# ---------------------------------------------------------------- hand-made histories

def _e(action: str, addr: int, size: int, stream: int = 0, pool: Any = (0, 0)) -> dict[str, Any]:
    return {"action": action, "addr": addr, "size": size, "stream": stream, "pool_id": pool}


def _snap(entries: list[dict[str, Any]]) -> dict[str, Any]:
    return {"segments": [], "device_traces": [entries]}


def _replayed(tmp_path: Path, entries: list[dict[str, Any]], conf: str = "") -> dict[str, Any]:
    path = tmp_path / "h.pickle"
    path.write_bytes(pickle.dumps(_snap(entries)))
    ops, plan = load_replay(str(path))
    return replay_ops(ops, _config.parse_config(conf), plan=plan)


def test_a_pool_keeps_its_segment_and_gives_it_back_where_the_history_does(
        tmp_path: Path) -> None:
    """A MemPool's 5 MiB allocation gets a 20 MiB segment of its own (it filled the default
    segment's free 15 MiB); the pool's ``segment_free`` releases it and gives it back, so the
    later 30 MiB allocation's segment does not add to it."""
    base = [_e("alloc", 16, 5 * MiB), _e("alloc", 1 << 30, 5 * MiB, pool=(0, 1))]
    r = _replayed(tmp_path, base)
    assert r["peak_reserved_bytes"] == 40 * MiB and r["device_mallocs"] == 2
    released = [*base, _e("free_requested", 1 << 30, 5 * MiB, pool=(0, 1)),
                _e("free_completed", 1 << 30, 5 * MiB, pool=(0, 1)),
                _e("segment_free", 1 << 30, 20 * MiB, pool=(0, 1)),
                _e("alloc", 1 << 31, 30 * MiB)]
    r = _replayed(tmp_path, released)
    assert r["peak_reserved_bytes"] == 50 * MiB and r["device_frees"] == 1
    kept = released[:4] + released[5:]      # no segment_free: the pool is still held
    assert _replayed(tmp_path, kept)["peak_reserved_bytes"] == 70 * MiB


def test_expandable_segments_release_a_pool_at_its_segment_unmap(tmp_path: Path) -> None:
    entries = [_e("alloc", 16, 5 * MiB), _e("alloc", 1 << 30, 5 * MiB, pool=(2, 0)),
               _e("free_requested", 1 << 30, 5 * MiB, pool=(2, 0)),
               _e("segment_unmap", 1 << 30, 20 * MiB, pool=(2, 0)),
               _e("alloc", 1 << 31, 30 * MiB)]
    conf = "expandable_segments:True"       # 20 MiB pages: one each, then a second default one
    r = _replayed(tmp_path, entries, conf)
    assert r["peak_reserved_bytes"] == 40 * MiB and r["vm_unmaps"] == 1
    kept = entries[:3] + entries[4:]
    assert _replayed(tmp_path, kept, conf)["peak_reserved_bytes"] == 60 * MiB


def test_a_pool_used_again_after_its_release_is_held_again(tmp_path: Path) -> None:
    """A released pool that is allocated from again (a new reference) keeps its segments from
    the default pool; it is released again at its next ``segment_free``."""
    entries = [_e("alloc", 16, 5 * MiB, pool=(0, 1)), _e("free_requested", 16, 5 * MiB),
               _e("segment_free", 16, 20 * MiB, pool=(0, 1)),
               _e("alloc", 32, 5 * MiB, pool=(0, 1)), _e("alloc", 48, 5 * MiB)]
    r = _replayed(tmp_path, entries)
    assert r["peak_reserved_bytes"] == 40 * MiB
    assert (r["device_mallocs"], r["device_frees"]) == (3, 1)


def test_a_free_goes_to_the_block_wherever_it_was_allocated(tmp_path: Path) -> None:
    """A free entry naming another pool than its allocation's (or a malformed history's) is
    just a free of that block."""
    def run(free_pool: Any) -> dict[str, Any]:
        return _replayed(tmp_path, [
            _e("alloc", 16, 5 * MiB, pool=(0, 1)), _e("free_requested", 16, 5 * MiB,
                                                      pool=free_pool),
            _e("alloc", 32, 5 * MiB, pool=(0, 1)), _e("alloc", 48, 600, stream=3)])
    same = run((0, 1))
    assert same["peak_reserved_bytes"] == 22 * MiB and same["device_mallocs"] == 2
    for other in ((0, 0), (0, 9), (4, 0)):
        assert {**run(other), "us_per_op": 0} == {**same, "us_per_op": 0}


def test_without_private_pools_there_is_no_plan(tmp_path: Path) -> None:
    """Entries of the default pool, or recorded without ``pool_id`` (before PyTorch 2.14), take
    the replay's plain path: no plan, the result of replaying the operations alone."""
    for pool in ((0, 0), [0, 0], None):
        entries = [_e("alloc", 16, 5 * MiB, pool=pool), _e("alloc", 32, 512, pool=pool)]
        if pool is None:
            for e in entries:
                del e["pool_id"]
        path = tmp_path / "n.pickle"
        path.write_bytes(pickle.dumps(_snap(entries)))
        ops, plan = load_replay(str(path))
        assert plan is None and read_workload(str(path)).plan is None
        assert snapshot_pools(entries, "n.pickle", 0) is None
    shared = Path(__file__).resolve().parents[1] / "data" / "traces" / "trace_dlrm_train.json.gz"
    assert load_replay(str(shared))[1] is None


# ---------------------------------------------------------------- hostile pool ids

BAD_POOLS = [(0,), (0, 1, 2), 5, "0,1", ("0", "1"), (0, -1), (-3, 0), (0, 1 << 64),
             (1 << 200, 0), (True, False), (0, 1.0), {"a": 1}, [[0], [1]]]


@pytest.mark.parametrize("bad", BAD_POOLS, ids=[repr(b)[:20] for b in BAD_POOLS])
def test_a_malformed_pool_id_is_refused_naming_the_entry(tmp_path: Path, bad: Any) -> None:
    entries = [_e("alloc", 16, 512), _e("segment_alloc", 16, 2 * MiB),
               _e("alloc", 32, 512, pool=bad)]
    path = tmp_path / "bad.pickle"
    path.write_bytes(pickle.dumps(_snap(entries)))
    for read in (load_replay, read_workload):
        with pytest.raises(ValueError, match=r"bad\.pickle: device 0 trace entry 2: 'pool_id' "
                                             r"must be a pair of ints in \[0, 2\*\*64\)"):
            read(str(path))
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert replay_main([str(path)]) == 1
        assert tune_main([str(path)]) == 1
    assert err.getvalue().count("trace entry 2: 'pool_id' must be") == 2
    assert "Traceback" not in err.getvalue()


def test_a_huge_pool_id_is_shown_bounded(tmp_path: Path) -> None:
    with pytest.raises(ValueError) as info:
        snapshot_pools([_e("alloc", 16, 512, pool=(10 ** 5000, 0))], "h.pickle", 0)
    assert len(str(info.value)) < 500


# ---------------------------------------------------------------- out-of-memory requests

def test_tune_routes_a_request_that_ran_out_of_memory_in_a_private_pool() -> None:
    """``routing(with_ooms=True)`` indexes the operations as ``with_oom_requests`` builds
    them: the request put back where it was made goes to its pool, every routed allocation
    and release keeps its operation."""
    entries = [("alloc", 16, 512, 0), ("oom", 0, 40 * MiB, 0), ("alloc", 32, 512, 0),
               ("free_requested", 32, 512, 0), ("segment_free", 32, 2 * MiB, 0),
               ("oom", 0, 50 * MiB, 0), ("alloc", 48, 512, 0)]
    pools = [(0, 1), (0, 1), (0, 2), (0, 2), (0, 2), None, (0, 3)]
    oom_at: list[tuple[int, int, int]] = []
    ops = trace_ops(entries, "t", oom_at)
    plan = pool_plan(entries, pools)
    assert plan is not None
    ooms = [{"position": p, "size": s, "stream": st} for p, s, st in oom_at]
    full = with_oom_requests(ops, ooms)
    route, release = plan.routing(with_ooms=True)
    assert {full[k][1]: p for k, p in route.items()} == {
        16: (0, 1), 1 << 64: (0, 1), 32: (0, 2), 48: (0, 3)}
    assert all(full[k][0] for k in route)
    assert [(full[k], p) for k, p in release.items()] == [(full[5], ((0, 2),))]
    assert full[4] == (False, 32, 0, 0)
    r = tune_ops(ops, ooms=ooms, plan=plan, device_memory=1 << 30)
    assert r["fits"] > 0
    with pytest.raises(ValueError, match="plan records 2 out-of-memory"):
        tune_ops(ops, plan=plan)


# ---------------------------------------------------------------- random programs

_program = st.lists(st.tuples(st.sampled_from(["alloc", "alloc", "free", "release"]),
                              st.integers(0, 3),                       # pool: 0 = default
                              st.sampled_from([300, 5000, 700_000, 3 * MiB, 13 * MiB, 25 * MiB]),
                              st.integers(0, 1)),                      # stream
                    min_size=1, max_size=40)


def _run_program(program: list[tuple[str, int, int, int]], conf: str
                 ) -> tuple[list[dict[str, Any]], int]:
    """Run ``program`` on a fresh allocator with history: its trace and peak reserved bytes.
    ``release`` drops a pool (as deleting its MemPool) and empties its cache; a released pool
    is never used again (pool ids are not reused)."""
    a = DeviceCachingAllocator(SimulatedBackend(), 0, _config.parse_config(conf))
    a.record_history(True, context=None)
    live: list[int] = []
    gone: set[int] = set()
    made: set[int] = set()
    for kind, pool, size, stream in program:
        pid = (0, pool)
        if kind == "alloc":
            if pool and pool not in gone:
                if pool not in made:
                    a.create_pool(pid)
                    made.add(pool)
                a.begin_allocate_to_pool(pid)
                live.append(a.malloc(size, stream))
                a.end_allocate_to_pool(pid)
                a.release_pool(pid)
            elif not pool:
                live.append(a.malloc(size, stream))
        elif kind == "free" and live:
            a.free(live.pop(size % len(live)))
        elif kind == "release" and pool in made and pool not in gone:
            gone.add(pool)
            a.release_pool(pid)
            a.empty_cache(pid)
    return a.trace_entries(), int(a.stats()["reserved_bytes.all.peak"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_program, st.sampled_from(SETTINGS))
def test_random_pool_programs_replay_to_their_peak(program: list[tuple[str, int, int, int]],
                                                   conf: str) -> None:
    trace, peak = _run_program(program, conf)
    entries = snapshot_entries(trace, "p", 0)
    pools = snapshot_pools(trace, "p", 0)
    ops = trace_ops(entries, "p")
    plan = None if pools is None else pool_plan(entries, pools)
    r = replay_ops(ops, _config.parse_config(conf), plan=plan)
    assert r["peak_reserved_bytes"] == peak
