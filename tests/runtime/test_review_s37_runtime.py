"""Session-37 review of the runtime, memory-tools and typing changes: each test failed before
its fix (the NVTX tool test pins the attached-tool path the fix keeps, and the capture test
is a guard for a path 72486ed made common). The expected NVTX
answers are torch 2.15.0's, observed with its CPU build on the same environment (no tool, a
variable naming no library, the 32-bit variable, and the minimal tool compiled below)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from accelrt.memory.tools._pools import PoolPlan
from accelrt.memory.tools._replay import _make_allocator

# ---------------------------------------------------------------- pool-aware replay: linear time


def test_many_pools_released_at_one_point_route_in_linear_time() -> None:
    """A crafted snapshot whose 20,000 private pools all show their ``segment_free`` after the
    last operation: the release points were built by copying a growing tuple per pool
    (quadratic: 3 s here for 20,000, 13 s for 40,000, minutes for a few hundred thousand)."""
    n = 20_000
    plan = PoolPlan(route=(), release=tuple((0, 0, (0, i + 1)) for i in range(n)))
    t0 = time.perf_counter()
    route, release = plan.routing()
    assert time.perf_counter() - t0 < 1.0
    assert route == {} and list(release) == [0]
    assert release[0] == tuple((0, i + 1) for i in range(n))     # in order, once each
    twice = PoolPlan(route=(), release=((0, 0, (0, 1)), (0, 0, (0, 2)), (0, 0, (0, 1))))
    assert twice.routing() == ({}, {0: ((0, 1), (0, 2))})


def test_empty_cache_of_one_pool_does_not_visit_every_released_pool() -> None:
    """``empty_cache(pool_id)`` (each replayed release) walked every released pool that still
    held a block: a replay releasing N such pools took N**2 steps (8.6 s for 10,000 here)."""
    a = _make_allocator(None)
    n = 6_000
    for i in range(n):                  # released pools, each still holding a live block
        a.begin_allocate_to_pool((0, i + 1))
        a.malloc(512, 0)
        a.end_allocate_to_pool((0, i + 1))
        a.release_pool((0, i + 1))
    reserved = a.memory_reserved()
    t0 = time.perf_counter()
    for i in range(n):
        a.empty_cache((0, i + 1))
    assert time.perf_counter() - t0 < 1.0
    assert a.memory_reserved() == reserved         # live blocks keep their segments


def test_a_released_pool_is_still_emptied_by_its_own_empty_cache() -> None:
    """The lookup of one pool keeps what it did: a released pool's free segment is given back,
    another released pool's is not, and the default ``empty_cache()`` gives back the rest."""
    a = _make_allocator(None)
    for pid in ((0, 1), (0, 2)):
        a.begin_allocate_to_pool(pid)
        a.free(a.malloc(512, 0))
        a.end_allocate_to_pool(pid)
        a.release_pool(pid)
    a.empty_cache((0, 1))
    assert [s["segment_pool_id"] for s in a.snapshot_segments()] == [(0, 2)]
    a.empty_cache((0, 3))               # no such pool: nothing happens
    assert [s["segment_pool_id"] for s in a.snapshot_segments()] == [(0, 2)]
    a.empty_cache()
    assert a.snapshot_segments() == []


# ---------------------------------------------------------------- nvtx: is a tool attached?

_PUSH_POP = ("import accelrt as acc; n = acc.cuda.nvtx; "
             "print(n.range_push('a'), n.range_push('b'), n.range_pop(), n.range_pop(), "
             "n.range_pop())")


def _nvtx_run(env_extra: dict[str, str], code: str = _PUSH_POP) -> str:
    """Run ``code`` (by default ``range_push`` twice and ``range_pop`` three times) in a fresh
    process (NVTX decides at its first call whether a tool is attached); what it prints."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVTX_")}
    env.update(env_extra)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


@pytest.fixture
def nvtx_with_domains() -> None:
    """The nvtx package (0.2.12 or later: it says whether NVTX's default domain is enabled)."""
    pytest.importorskip("nvtx")
    pytest.importorskip("nvtx._lib.lib").DummyDomain   # noqa: B018


@pytest.mark.usefixtures("nvtx_with_domains")
@pytest.mark.parametrize("var", ["NVTX_INJECTION64_PATH", "NVTX_INJECTION32_PATH"])
def test_nvtx_variable_attaching_no_tool_answers_minus_two(var: str, tmp_path: Path) -> None:
    # torch 2.15 with NVTX_INJECTION64_PATH=<no such library>, or with only
    # NVTX_INJECTION32_PATH set (a 64-bit process reads the 64 one): -2 -2 -2 (NVTX loaded no
    # tool); accelrt answered the depths 0 1 1 0 -1 because the variable was set
    assert _nvtx_run({var: str(tmp_path / "no-such-tool.so")}) == "-2 -2 -2 -2 -2"


_TOOL = textwrap.dedent("""
    /* A minimal NVTX tool (as Nsight Systems answers): push returns the thread's 0-based depth,
       pop the ended range's, -1 when none is open; plain and domain ranges. */
    #include <stddef.h>
    #include <stdint.h>
    typedef void (*fp)(void);
    typedef struct { size_t size; int (*table)(int, fp***, unsigned int*); } callbacks;
    static __thread int depth;
    static int push_a(const char* m) { (void)m; return depth++; }
    static int pop(void) { return depth > 0 ? --depth : -1; }
    static int dpush(void* d, const void* a) { (void)d; (void)a; return depth++; }
    static int dpop(void* d) { (void)d; return pop(); }
    static void set(const callbacks* cb, int module, unsigned id, fp f) {
        fp** t = 0; unsigned int n = 0;
        if (cb->table(module, &t, &n) && id < n) *t[id] = f;
    }
    int InitializeInjectionNvtx2(const void* (*get)(uint32_t)) {
        const callbacks* cb = (const callbacks*)get(1);          /* NVTX_ETID_CALLBACKS */
        if (!cb) return 0;
        set(cb, 1, 9, (fp)push_a);  set(cb, 1, 11, (fp)pop);     /* CORE RangePushA, Pop */
        set(cb, 5, 4, (fp)dpush);   set(cb, 5, 5, (fp)dpop);     /* CORE2 DomainRangePushEx, Pop */
        return 1;
    }
""")


@pytest.mark.usefixtures("nvtx_with_domains")
def test_nvtx_with_a_tool_attached_answers_the_depths(tmp_path: Path) -> None:
    # torch 2.15 with this tool (NVTX_INJECTION64_PATH=libtool.so): 0 1 1 0 -1
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the NVTX tool")
    (tmp_path / "tool.c").write_text(_TOOL)
    lib = tmp_path / "libtool.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "tool.c")],
                   check=True, timeout=60)
    assert _nvtx_run({"NVTX_INJECTION64_PATH": str(lib)}) == "0 1 1 0 -1"
    assert _nvtx_run({}) == "-2 -2 -2 -2 -2"
    # the variable set after NVTX's first call attaches nothing: torch 2.15 -2 -2 -2 -2
    # (accelrt answered -2 1 1 0, the depths from the second call on)
    late = ("import os, accelrt as acc; n = acc.cuda.nvtx; a = n.range_push('a'); "
            f"os.environ['NVTX_INJECTION64_PATH'] = {str(lib)!r}; "
            "print(a, n.range_push('b'), n.range_pop(), n.range_pop())")
    assert _nvtx_run({}, late) == "-2 -2 -2 -2"


# ---------------------------------------------------------------- graph: garbage freed mid-capture

def test_cycles_holding_arrays_collected_in_the_middle_of_a_capture() -> None:
    """A guard (it passed before, and after 72486ed took ``gc.collect()`` out of
    ``graph.__enter__``, which makes the case common): a dead cycle holding a default-pool
    array and one holding an array the capture allocated are collected inside the capture.
    As torch's allocator: the default-pool block goes back to the default pool (cached, not
    the graph's), the graph-pool block is reused by the capture's next allocation of that
    size, the replay repeats the captured work, and no memory is left once all is dropped."""
    import gc

    import accelrt as acc
    from accelrt import memory

    class Cycle:
        def __init__(self, n: int) -> None:
            self.a = acc.empty(n, dtype="uint8", device="cpu:0")
            self.me = self

    dev = acc.device("cpu:0")
    acc.synchronize(dev)
    memory.empty_cache()
    base = memory.memory_allocated(dev)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        Cycle(3_000_000)              # garbage before the capture (default pool)
        x = acc.zeros(4, device=dev)
        g = acc.cpu.Graph()
        with acc.cpu.graph(g):
            Cycle(1_000_000)          # garbage made in the capture (graph pool)
            x.fill_(2.0)
            assert gc.collect() > 0
            y = acc.empty(1_000_000, dtype="uint8", device=dev)
            y.fill_(1)
        segs = [s for s in memory.memory_snapshot() if s["device"] == 0]
        mine = [s for s in segs if s["segment_pool_id"] == g.pool()]
        # one graph segment, holding only y (the collected block's space served it)
        assert [s["allocated_size"] for s in mine] == [(y.nbytes + 511) // 512 * 512]
        # the collected default-pool block stays cached in the default pool
        assert any(s["segment_pool_id"] == (0, 0) and s["total_size"] >= 3_000_000
                   and s["allocated_size"] == 0 for s in segs)
        x.fill_(0.0)
        g.replay()
        acc.synchronize(dev)
        assert x.tolist() == [2.0] * 4
        del y
        g.reset()
        del g, x
    finally:
        if was_enabled:
            gc.enable()
    gc.collect()
    acc.synchronize(dev)
    memory.empty_cache()
    assert memory.memory_allocated(dev) == base
