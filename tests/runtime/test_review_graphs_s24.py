"""Review of graphs by tests (session 24): capture semantics on the cpu backend checked against
PyTorch's (``torch/cuda/graphs.py``, ``torch/accelerator/graphs.py``,
``aten/src/ATen/cuda/CUDAGraph.cpp``, the caching allocator's capture pools) and hostile inputs.

Whatever could crash or hang runs in a subprocess with a timeout; threads are ordered with
barriers, never sleeps.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import accelrt as acc
from accelrt.memory._allocator import peek_allocator

#: Tests whose captures record nothing (PyTorch warns about an empty graph).
EMPTY_CAPTURE = pytest.mark.filterwarnings("ignore:The CUDA Graph is empty:UserWarning")


@pytest.fixture(autouse=True)
def _cpu() -> Iterator[None]:
    acc.set_current_accelerator("cpu")
    acc.set_device_index(0)
    yield
    assert not acc.cpu.is_current_stream_capturing()


def _reserved() -> int:
    return int(acc.memory.memory_stats("cpu:0").get("reserved_bytes.all.current", 0))


def _allocated() -> int:
    return int(acc.memory.memory_stats("cpu:0").get("allocated_bytes.all.current", 0))


def _use_count(pid: tuple[int, int]) -> int:
    a = peek_allocator("cpu", 0)
    assert a is not None
    return int(a.pool_use_count(pid))


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=60, check=False)


# ---------------------------------------------------------------------- life-cycle errors

@EMPTY_CAPTURE
def test_capture_on_the_default_stream_is_refused_cleanly() -> None:
    """CUDAGraph::capture_begin: "CUDA graphs must be captured on a non-default stream"; the
    refusal leaves no capture, no pool reference and the current stream as it was."""
    before = acc.current_stream("cpu:0")
    for g in (acc.Graph(), acc.cpu.Graph()):
        with pytest.raises(RuntimeError, match="non-default stream"):
            g.capture_begin()
        with pytest.raises(RuntimeError, match="non-default stream"), g:
            pass
        default = acc.current_stream("cpu:0")
        with pytest.raises(RuntimeError, match="non-default stream"), \
                acc.graph(g, stream=default):
            pass
        assert not default.is_capturing() and acc.current_stream("cpu:0") == before
        assert "empty" in repr(g)
        with pytest.raises(RuntimeError, match="successful capture"):
            g.pool()
    # the graph is still usable on a side stream
    g = acc.Graph()
    with acc.graph(g):
        pass
    g.reset()


def test_state_machine_errors_match_pytorch() -> None:
    g = acc.cpu.Graph()
    with pytest.raises(RuntimeError, match="capture_begin"):
        g.capture_end()                       # capture_end without begin
    with pytest.raises(RuntimeError, match="captured graph"):
        g.replay()                            # replay before any capture
    with pytest.raises(RuntimeError, match="capture_end"):
        g.instantiate()                       # instantiate before any capture
    g.reset()
    g.reset()                                 # reset of an empty graph, twice: no-ops
    x = acc.zeros(4, device="cpu")
    with acc.cpu.graph(g):
        x.fill_(1.0)
    g.replay()
    g.reset()
    g.reset()                                 # reset twice after a capture
    with pytest.raises(RuntimeError, match="captured graph"):
        g.replay()                            # replay after reset
    with pytest.raises(RuntimeError, match="capture_end"):
        g.instantiate()
    with acc.cpu.graph(g):                    # the object captures again after reset
        x.fill_(2.0)
    g.replay()
    acc.synchronize()
    assert x.tolist() == [2.0] * 4
    g.close()
    for call in (g.replay, g.instantiate, g.capture_begin, g.capture_end, g.pool):
        with pytest.raises(acc.ClosedError):
            call()


def test_pool_needs_a_finished_capture_as_in_pytorch() -> None:
    """CUDAGraph::pool(): "Called CUDAGraph::pool() without a preceding successful capture"
    (capture_ended_, which reset() clears): not during the capture, not after reset."""
    x = acc.zeros(4, device="cpu")
    g = acc.Graph()
    s = acc.Stream("cpu")
    with s:
        g.capture_begin()
        x.fill_(1.0)
        with pytest.raises(RuntimeError, match="successful capture"):
            g.pool()
        g.capture_end()
    pid = g.pool()
    assert _use_count(pid) == 1
    g.reset()
    with pytest.raises(RuntimeError, match="successful capture"):
        g.pool()                              # not the id of the released pool
    assert _use_count(pid) == 0


@EMPTY_CAPTURE
def test_nested_captures() -> None:
    """A second capture on the capturing stream is refused; one on another stream nests, with
    its own pool, and each graph replays only its own work."""
    x, y = acc.zeros(4, device="cpu"), acc.zeros(4, device="cpu")
    outer, inner, other = acc.Graph(), acc.Graph(), acc.Graph()
    s1, s2 = acc.Stream("cpu"), acc.Stream("cpu")
    with s1:
        outer.capture_begin()
        with pytest.raises(RuntimeError, match="already capturing"):
            other.capture_begin()             # same stream
        assert "empty" in repr(other)
        x.fill_(1.0)
        with s2:
            inner.capture_begin()
            y.fill_(2.0)
            inner.capture_end()
        outer.capture_end()
    assert not s1.is_capturing() and not s2.is_capturing()
    assert outer.pool() != inner.pool()
    assert x.tolist() == y.tolist() == [0.0] * 4
    inner.replay()
    acc.synchronize()
    assert (x.tolist(), y.tolist()) == ([0.0] * 4, [2.0] * 4)
    outer.replay()
    acc.synchronize()
    assert x.tolist() == [1.0] * 4
    with acc.graph(other):                    # the refused graph captures later
        pass
    for g in (outer, inner, other):
        g.reset()


def test_capture_error_modes() -> None:
    x = acc.zeros(2, device="cpu")
    for mode in ("default", "global", "thread_local", "relaxed"):
        g = acc.cpu.Graph()
        with acc.cpu.graph(g, capture_error_mode=mode):
            x.fill_(1.0)
        g.reset()
        with acc.Stream("cpu"):
            g.capture_begin(capture_error_mode=mode)
            x.fill_(1.0)
            g.capture_end()
        g.reset()
        h = acc.Graph(capture_error_mode=mode)
        with acc.Stream("cpu"), h:
            x.fill_(1.0)
        h.reset()
    for bad in ("bogus", "GLOBAL", "", None, 1, b"global"):
        with pytest.raises(ValueError, match="capture_error_mode"):
            acc.Graph(capture_error_mode=bad)          # type: ignore[arg-type]
        with pytest.raises(ValueError, match="capture_error_mode"):
            acc.cpu.graph(acc.cpu.Graph(), capture_error_mode=bad)  # type: ignore[arg-type]
        g = acc.cpu.Graph()
        with acc.Stream("cpu") as s, pytest.raises(ValueError, match="capture_error_mode"):
            g.capture_begin(capture_error_mode=bad)    # type: ignore[arg-type]
        assert not s.is_capturing()
    h = acc.Graph()
    h.capture_error_mode = "bogus"                     # the attribute is checked at capture
    with acc.Stream("cpu") as s, pytest.raises(ValueError, match="capture_error_mode"), h:
        pass
    assert not s.is_capturing()


# ---------------------------------------------------------------------- pools

def test_pool_shared_by_pool_id_survives_the_graph_that_made_it() -> None:
    acc.memory.empty_cache()
    base = _reserved()
    g1 = acc.Graph()
    with acc.graph(g1):
        a = acc.full((1000,), 1.0, device="cpu")
    pid = g1.pool()
    g2 = acc.Graph(pool=pid)
    with acc.graph(g2):
        b = acc.full((1000,), 2.0, device="cpu")
    assert g2.pool() == pid and _use_count(pid) == 2
    del g1                                    # deleted while g2 shares its pool
    gc.collect()
    assert _use_count(pid) == 1
    b.fill_(0.0)
    g2.replay()
    acc.synchronize()
    assert b.tolist()[:2] == [2.0, 2.0]
    g3 = acc.cpu.Graph()                      # a device graph shares it at capture_begin
    with acc.cpu.graph(g3, pool=g2.pool()):
        c = acc.zeros((1000,), device="cpu")
    assert g3.pool() == pid and _use_count(pid) == 2
    del a, b, c
    g2.reset()
    g3.reset()
    assert _use_count(pid) == 0
    acc.memory.empty_cache()
    assert _reserved() == base


def test_pool_shared_by_graph_pool_handle() -> None:
    handle = acc.graphs.generate_graph_pool_handle()
    assert handle != acc.cpu.graphs.graph_pool_handle()
    gs = [acc.Graph(pool=handle), acc.cpu.Graph()]
    arrays = []
    with acc.graph(gs[0]):
        arrays.append(acc.zeros(64, device="cpu"))
    with acc.cpu.graph(gs[1], pool=handle):
        arrays.append(acc.zeros(64, device="cpu"))
    assert [g.pool() for g in gs] == [handle, handle] and _use_count(handle) == 2
    owners = {tuple(s["segment_pool_id"]) for s in acc.memory.memory_snapshot()
              for blk in s["blocks"] if blk["address"] in {x.data_ptr() for x in arrays}}
    assert owners == {handle}
    del arrays
    for g in gs:
        g.reset()
    assert _use_count(handle) == 0


@EMPTY_CAPTURE
def test_two_captures_at_once_cannot_share_one_pool() -> None:
    """beginAllocateToPool: "already recording to mempool_id"; the refused capture leaves
    its stream free and takes no reference."""
    handle = acc.graphs.generate_graph_pool_handle()
    g1, g2 = acc.Graph(pool=handle), acc.Graph(pool=handle)
    s1, s2 = acc.Stream("cpu"), acc.Stream("cpu")
    with s1:
        g1.capture_begin()
        with s2, pytest.raises(RuntimeError, match="already allocating"):
            g2.capture_begin()
        assert not s2.is_capturing() and _use_count(handle) == 1
        g1.capture_end()
    with s2, g2:                              # fine once the first capture ended
        pass
    assert _use_count(handle) == 2
    g1.reset()
    g2.reset()


def test_memory_freed_during_capture_is_reused_in_the_capture() -> None:
    out = acc.zeros(256, dtype="int32", device="cpu")
    g = acc.Graph()
    with acc.graph(g):
        t1 = acc.full((256,), 5, dtype="int32", device="cpu")
        p1 = t1.data_ptr()
        out.copy_(t1)
        del t1                                # back to the private pool, in stream order
        t2 = acc.full((256,), 7, dtype="int32", device="cpu")
        assert t2.data_ptr() == p1            # reused within the capture
        out.copy_(t2)
    out.fill_(0)
    g.replay()
    acc.synchronize()
    assert out.tolist() == [7] * 256
    del t2
    g.reset()


@EMPTY_CAPTURE
def test_memory_stats_during_and_after_capture() -> None:
    acc.memory.empty_cache()
    base_alloc, base_res = _allocated(), _reserved()
    g = acc.Graph()
    with acc.graph(g):
        z = acc.empty(1 << 20, dtype="uint8", device="cpu")
        assert _allocated() - base_alloc == 1 << 20        # counted while capturing
        assert _reserved() - base_res >= 1 << 20
        seg = {tuple(s["segment_pool_id"]) for s in acc.memory.memory_snapshot()
               for blk in s["blocks"] if blk["address"] == z.data_ptr()}
    assert seg == {g.pool()}
    assert _allocated() - base_alloc == 1 << 20
    del z
    assert _allocated() == base_alloc
    acc.memory.empty_cache()
    assert _reserved() > base_res              # the graph keeps its pool's memory
    g.reset()
    acc.memory.empty_cache()
    assert (_allocated(), _reserved()) == (base_alloc, base_res)


# ---------------------------------------------------------------------- errors in the body

def test_exception_in_graph_body_ends_the_capture_and_keeps_the_allocator_consistent() -> None:
    x = acc.zeros(4, device="cpu")
    acc.memory.empty_cache()
    base_alloc, base_res = _allocated(), _reserved()
    before = acc.current_stream("cpu")
    g = acc.cpu.Graph()
    with pytest.raises(KeyError, match="boom"), acc.cpu.graph(g):
        tmp = acc.ones(4, device="cpu")
        x.copy_(tmp)
        raise KeyError("boom")
    assert acc.current_stream("cpu") == before
    assert not acc.cpu.is_current_stream_capturing()
    assert "captured" in repr(g)              # capture_end ran, as torch.cuda.graph's exit
    pid = g.pool()
    g.replay()                                # what was captured before the error
    acc.synchronize()
    assert x.tolist() == [1.0] * 4
    after = acc.zeros(16, device="cpu")       # outside the capture: the default pool
    assert {tuple(s["segment_pool_id"]) for s in acc.memory.memory_snapshot()
            for b in s["blocks"] if b["address"] == after.data_ptr()} == {(0, 0)}
    del tmp, after
    assert _allocated() == base_alloc
    g.reset()
    assert _use_count(pid) == 0
    acc.memory.empty_cache()
    assert _reserved() == base_res
    with acc.cpu.graph(g):                    # captures again
        x.fill_(3.0)
    g.reset()


def test_exception_in_with_stream_graph_body() -> None:
    x = acc.zeros(4, device="cpu")
    s = acc.Stream("cpu")
    g = acc.Graph()
    with pytest.raises(ValueError, match="inside"), s, g:
        x.fill_(6.0)
        raise ValueError("inside")
    assert not s.is_capturing()
    assert acc.current_stream("cpu") != s
    g.replay()
    acc.synchronize()
    assert x.tolist() == [6.0] * 4
    g.reset()


def test_body_error_and_failing_capture_end_hook_resets_the_graph() -> None:
    """Both fail: the body's error wins, and the half-ended capture is reset."""
    g = acc.cpu.Graph()
    g.register_capture_end_hook(lambda _: 1 / 0)
    x = acc.zeros(4, device="cpu")
    with pytest.raises(KeyError), acc.cpu.graph(g):
        x.fill_(1.0)
        raise KeyError("body")
    assert "empty" in repr(g)
    with pytest.raises(RuntimeError, match="successful capture"):
        g.pool()
    with pytest.raises(ZeroDivisionError), acc.cpu.graph(g):
        x.fill_(1.0)                          # the hook alone: it propagates, graph kept
    g.replay()                                # instantiates on demand
    g.reset()


# ---------------------------------------------------------------------- forbidden in capture

def test_forbidden_calls_raise_and_leave_the_capture_usable() -> None:
    """PyTorch's capture fails on a synchronize, a query or a host read (CUDA invalidates the
    capture); accelrt refuses the call before it reaches the backend, so the capture goes on
    and replays the work recorded around the refused calls (docs/differences.md)."""
    x = acc.zeros(4, device="cpu")
    ev = acc.Event()
    g = acc.cpu.Graph()
    with acc.cpu.graph(g):
        cs = acc.current_stream("cpu")
        x.fill_(1.0)
        ev.record()
        refused: list[Any] = [
            acc.synchronize, acc.cpu.synchronize, cs.synchronize, cs.query, ev.synchronize,
            ev.query, x.numpy, x.tolist, lambda: np.asarray(x),
            lambda: x.copy_(np.ones(4, np.float32)),            # blocking upload
            lambda: acc.asarray([1.0, 2.0], device="cpu"),      # a blocking upload too
            cs.close,
        ]
        for call in refused:
            with pytest.raises(RuntimeError):
                call()
            assert cs.is_capturing()
        x.fill_(2.0)
    assert not cs.is_capturing()
    x.fill_(0.0)
    g.replay()
    ev.synchronize()
    assert x.tolist() == [2.0] * 4
    g.reset()


def test_refused_blocking_upload_records_nothing_that_replays_freed_host_memory() -> None:
    """Regression: a blocking copy_ from numpy inside a capture recorded the copy (reading a
    temporary host buffer) before its synchronize was refused, so every replay read freed
    memory (a segfault for large buffers). The copy is now refused before it is recorded."""
    proc = _run("""
        import gc, warnings
        import numpy as np
        import accelrt as acc
        warnings.simplefilter("ignore")
        acc.set_current_accelerator("cpu")
        x = acc.zeros(1 << 20, device="cpu")
        g = acc.Graph(keep_graph=True)
        with acc.graph(g):
            try:
                x.copy_(np.ones(1 << 20, np.float32))
            except RuntimeError as e:
                print("refused:", e)
        gc.collect()
        for _ in range(3):
            g.replay()
        acc.synchronize()
        print("sum", float(x.numpy().sum()))
    """)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert "refused: Cannot copy between CPU and CUDA tensors during CUDA graph capture" \
        in proc.stdout
    assert "sum 0.0" in proc.stdout


def test_non_blocking_host_copies_in_a_capture_read_the_host_at_replay() -> None:
    """A non-blocking upload from pinned memory is captured (the replay reads the pinned
    memory then); from pageable memory it is refused, as PyTorch refuses it."""
    x = acc.zeros(4, device="cpu")
    host = acc.pin_memory(np.zeros(4, np.float32), device="cpu")
    g = acc.Graph()
    with acc.graph(g):
        x.copy_(host, non_blocking=True)
        with pytest.raises(RuntimeError, match="unless the CPU tensor is pinned"):
            x.copy_(np.zeros(4, np.float32), non_blocking=True)
    host[:] = 5.0
    g.replay()
    acc.synchronize()
    assert x.tolist() == [5.0] * 4
    g.reset()


# ---------------------------------------------------------------------- threads

def test_threads_capture_on_their_own_streams_concurrently() -> None:
    n = 3
    gate = threading.Barrier(n)
    outs = [acc.zeros(16, device="cpu") for _ in range(n)]
    done: dict[int, tuple[Any, ...]] = {}
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            acc.set_current_accelerator("cpu")
            s = acc.Stream("cpu")
            g = acc.Graph()
            with s:
                gate.wait()
                g.capture_begin()
                gate.wait()                   # every capture is live here
                if i == 0:                        # a device-wide sync is refused, as in docs
                    with pytest.raises(acc.DeviceError, match="synchronize"):
                        acc.synchronize("cpu")
                tmp = acc.full((16,), float(i + 1), device="cpu")
                outs[i].copy_(tmp)
                gate.wait()
                g.capture_end()
            done[i] = (g, tmp, s)
        except BaseException as exc:          # noqa: BLE001 - reported below
            errors.append(exc)
            gate.abort()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors and len(done) == n
    pools = {v[0].pool() for v in done.values()}
    assert len(pools) == n                    # each capture allocated from its own pool
    for g, tmp, _ in done.values():
        owner = {tuple(s["segment_pool_id"]) for s in acc.memory.memory_snapshot()
                 for b in s["blocks"] if b["address"] == tmp.data_ptr()}
        assert owner == {g.pool()}
        g.replay()
    acc.synchronize()
    assert [o.tolist()[0] for o in outs] == [1.0, 2.0, 3.0]
    for g, _, _ in done.values():
        g.reset()


# ---------------------------------------------------------------------- hooks

def test_hooks_raising() -> None:
    x = acc.zeros(4, device="cpu")
    seen: list[str] = []

    def bad(_: object) -> None:
        raise RuntimeError("module hook")

    with acc.cpu.graphs.register_graph_replay_start_hook(bad), \
            acc.cpu.graphs.register_graph_capture_end_hook(bad), \
            acc.cpu.graphs.register_graph_destroy_hook(bad):
        g = acc.cpu.Graph()
        with acc.cpu.graph(g):                # module-level hooks: errors are swallowed
            x.fill_(1.0)
        g.replay()
        start = g.register_replay_start_hook(lambda _: 1 / 0)
        g.register_replay_end_hook(lambda _: seen.append("end"))
        with pytest.raises(ZeroDivisionError):
            g.replay()                        # a raising start hook: no launch, no end hook
        assert seen == []
        start.remove()
        g.replay()
        assert seen == ["end"]
        g.reset()
    # an instantiate hook raising inside capture_end: the graph is captured and instantiated
    g = acc.cpu.Graph()
    g.register_post_instantiate_hook(lambda _: 1 / 0)
    with pytest.raises(ZeroDivisionError), acc.cpu.graph(g):
        x.fill_(2.0)
    assert not acc.cpu.is_current_stream_capturing()
    g.replay()
    acc.synchronize()
    assert x.tolist() == [2.0] * 4
    with pytest.raises(RuntimeError, match="keep_graph=True"):
        g.instantiate()
    g.reset()
    # a capture-start hook raising aborts the capture and releases its pool
    g = acc.cpu.Graph()
    g.register_capture_start_hook(lambda _: 1 / 0)
    before = acc.current_stream("cpu")
    with pytest.raises(ZeroDivisionError), acc.cpu.graph(g):
        pass
    assert acc.current_stream("cpu") == before and "empty" in repr(g)
    with pytest.raises(TypeError, match="callable"):
        g.register_replay_end_hook(3)         # type: ignore[arg-type]


# ---------------------------------------------------------------------- DOT

def test_debug_dump_bad_paths_and_arguments(tmp_path: Path) -> None:
    x = acc.zeros(4, device="cpu")
    g = acc.cpu.Graph(keep_graph=True)
    with acc.cpu.graph(g):
        x.fill_(1.0)
    with pytest.raises(IsADirectoryError):
        g.debug_dump(tmp_path)
    with pytest.raises(FileNotFoundError):
        g.debug_dump(tmp_path / "missing" / "g.dot")
    with pytest.raises(TypeError):
        g.debug_dump(3)                       # type: ignore[arg-type]
    with pytest.raises(TypeError):
        g.debug_dump(None)                    # type: ignore[arg-type]
    with pytest.raises(ValueError, match="null"):
        g.debug_dump(str(tmp_path / "a\0b"))
    for bad in ("no", 1, None):
        with pytest.raises(TypeError, match="verbose must be a bool"):
            g.debug_dump(tmp_path / "v.dot", verbose=bad)   # type: ignore[arg-type]
        with pytest.raises(TypeError, match="verbose must be a bool"):
            acc.cpu.graphs.export_dot(tmp_path / "v.dot", verbose=bad)  # type: ignore[arg-type]
    assert not (tmp_path / "v.dot").exists()
    g.debug_dump(tmp_path / "g.dot", verbose=False)
    assert (tmp_path / "g.dot").read_text().startswith("digraph")
    g.reset()
    with pytest.raises(RuntimeError, match="no captured graph"):
        g.debug_dump(tmp_path / "after_reset.dot")
    h = acc.Graph(keep_graph=True)
    with acc.graph(h):
        x.fill_(2.0)
        with pytest.raises(RuntimeError, match="no captured graph"):
            h.debug_dump(tmp_path / "during.dot")
    h.reset()


# ---------------------------------------------------------------------- random numbers

def test_replays_of_random_numbers_advance_the_generator_as_pytorchs() -> None:
    """PyTorch's graph-safe RNG (docs/random.md): the capture does not move the default
    generator, and each replay draws the numbers the eager work would draw next, advancing
    the generator as the eager work would. (Until issue 22's round this test asserted
    the documented difference: every replay repeated the capture's numbers.)"""
    x = acc.zeros(64, device="cpu")
    acc.random.manual_seed(7)
    before = acc.random.get_rng_state("cpu")
    g = acc.Graph()
    with acc.graph(g):
        acc.random.uniform_(x)
    assert bytes(acc.random.get_rng_state("cpu")) == bytes(before)   # nothing consumed
    draws = []
    for _ in range(3):
        x.fill_(0.0)
        g.replay()
        acc.synchronize()
        draws.append(tuple(x.tolist()))
    assert len(set(draws)) == 3 and all(0.0 not in d for d in draws)
    after = acc.random.get_rng_state("cpu")
    acc.random.manual_seed(7)                 # the replays' numbers are the eager ones
    y = acc.zeros(64, device="cpu")
    eager = []
    for _ in range(3):
        acc.random.uniform_(y)
        eager.append(tuple(y.tolist()))
    assert eager == draws
    assert bytes(acc.random.get_rng_state("cpu")) == bytes(after)
    g.reset()
