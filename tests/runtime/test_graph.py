"""accelrt.Graph / accelrt.graph on the cpu backend (which records and replays stream work).

The same code path runs on CUDA (``tests/backends/test_cuda_backend.py`` captures a real graph there).
"""

from __future__ import annotations

import dataclasses
import gc

import pytest

import accelrt as acc
from accelrt import _backend as registry
from accelrt._graph import graph_pool_handle
from accelrt.backends import Capabilities
from accelrt.backends.cpu import CpuBackend


@pytest.fixture(autouse=True)
def _cpu() -> None:
    acc.set_current_accelerator("cpu")
    acc.set_device_index(0)


#: These tests capture no stream work (nothing, or allocations only), which PyTorch warns about.
EMPTY_CAPTURE = pytest.mark.filterwarnings("ignore:The CUDA Graph is empty:UserWarning")


def _pools() -> dict[tuple[int, int], int]:
    """Bytes reserved per pool id on cpu:0."""
    out: dict[tuple[int, int], int] = {}
    for s in acc.memory.memory_snapshot():
        if s["device"] == 0:
            pid = tuple(s["segment_pool_id"])
            out[pid] = out.get(pid, 0) + s["total_size"]
    return out


def test_capture_does_not_run_and_replay_runs() -> None:
    a = acc.zeros(8, dtype="int32", device="cpu:0")
    g = acc.Graph()
    with acc.graph(g):
        a.fill_(3)
    acc.synchronize("cpu:0")
    assert a.numpy().tolist() == [0] * 8          # captured, not executed
    for _ in range(3):
        a.fill_(0)
        g.replay()
        acc.synchronize("cpu:0")
        assert a.numpy().tolist() == [3] * 8
    g.reset()


def test_replay_goes_to_the_current_stream() -> None:
    a = acc.zeros(4, dtype="int32", device="cpu:0")
    g = acc.Graph()
    with acc.graph(g):
        a.fill_(9)
    s = acc.Stream("cpu:0")
    with s:
        g.replay()
    s.synchronize()
    assert a.numpy().tolist() == [9] * 4
    g.reset()


@EMPTY_CAPTURE
def test_graph_captures_on_a_side_stream_and_restores() -> None:
    before = acc.current_stream("cpu:0")
    g = acc.Graph()
    with acc.graph(g):
        side = acc.current_stream("cpu:0")
    assert side != before and side.stream_id != acc.backends.get_backend("cpu").default_stream(0)
    assert acc.current_stream("cpu:0") == before
    g2 = acc.Graph()
    with acc.graph(g2):
        assert acc.current_stream("cpu:0") == side   # one shared side stream per device
    mine = acc.Stream("cpu:0")
    g3 = acc.Graph()
    with acc.graph(g3, stream=mine):
        assert acc.current_stream("cpu:0") == mine
    for x in (g, g2, g3):
        x.reset()


@EMPTY_CAPTURE
def test_allocations_during_capture_use_a_private_pool() -> None:
    g = acc.Graph()
    with acc.graph(g):
        inside = acc.empty(1 << 20, dtype="uint8", device="cpu:0")
    outside = acc.empty(1 << 20, dtype="uint8", device="cpu:0")
    pid = g.pool()
    assert pid[1] == 0 and pid != (0, 0)
    pools = _pools()
    assert pools.get(pid, 0) >= 1 << 20
    segs = {tuple(s["segment_pool_id"]) for s in acc.memory.memory_snapshot()
            for b in s["blocks"] if b["address"] == outside.data_ptr()}
    assert segs == {(0, 0)}
    del inside, outside
    gc.collect()
    g.reset()
    acc.memory.empty_cache()
    assert pid not in _pools()                 # released once no graph uses the pool


@EMPTY_CAPTURE
def test_graphs_can_share_a_pool() -> None:
    g1, g2 = acc.Graph(), acc.Graph()
    with acc.graph(g1):
        a = acc.empty(4096, dtype="uint8", device="cpu:0")
    with acc.graph(g2, pool=g1.pool()):
        b = acc.empty(4096, dtype="uint8", device="cpu:0")
    assert g2.pool() == g1.pool()
    owners = {tuple(s["segment_pool_id"]) for s in acc.memory.memory_snapshot()
              for blk in s["blocks"] if blk["address"] in (a.data_ptr(), b.data_ptr())}
    assert owners == {g1.pool()}
    handle = graph_pool_handle()
    g3 = acc.Graph()
    with acc.graph(g3, pool=handle):
        pass
    assert g3.pool() == handle
    del a, b
    for g in (g1, g2, g3):
        g.reset()


@EMPTY_CAPTURE
def test_mempool_as_graph_pool() -> None:
    pool = acc.memory.MemPool()
    g = acc.Graph()
    with acc.graph(g, pool=pool):
        a = acc.empty(4096, dtype="uint8", device="cpu:0")
    assert g.pool() == pool.id
    assert [s["segment_pool_id"] for s in pool.snapshot()] == [pool.id]
    del a
    g.reset()


def test_capture_begin_end_by_hand() -> None:
    a = acc.zeros(2, dtype="int32", device="cpu:0")
    g = acc.Graph()
    with acc.Stream("cpu:0"):
        g.capture_begin()
        a.fill_(4)
        g.capture_end()
    g.replay()
    acc.synchronize("cpu:0")
    assert a.numpy().tolist() == [4, 4]
    g.reset()
    g.reset()                                   # idempotent


@EMPTY_CAPTURE
def test_state_errors() -> None:
    g = acc.Graph()
    with pytest.raises(RuntimeError, match="replay"):
        g.replay()
    with pytest.raises(RuntimeError, match="capture_begin"):
        g.capture_end()
    with pytest.raises(RuntimeError, match="pool"):
        g.pool()
    with pytest.raises(RuntimeError, match="non-default stream"):
        g.capture_begin()                       # the current stream is the default stream
    with acc.Stream("cpu:0"):
        g.capture_begin()
        with pytest.raises(RuntimeError, match="already"):
            g.capture_begin()
        with pytest.raises(RuntimeError, match="capture_end"):
            g.reset()
        g.capture_end()
    with pytest.raises(RuntimeError, match="reset"), acc.graph(g):
        pass
    g.reset()


def test_argument_errors() -> None:
    g = acc.Graph()
    with pytest.raises(ValueError, match="capture_error_mode"):
        acc.Graph(capture_error_mode="strict")
    with pytest.raises(ValueError, match="capture_error_mode"):
        acc.cpu.Graph().capture_begin(capture_error_mode="strict")
    with pytest.raises(TypeError, match="pool"):
        acc.graph(g, pool="mine")
    with pytest.raises(TypeError, match="Graph"):
        acc.graph(object())                     # type: ignore[arg-type]
    with pytest.raises(TypeError, match="stream"):
        acc.graph(g, stream=3)                  # type: ignore[arg-type]


@EMPTY_CAPTURE
def test_error_in_body_ends_capture_and_propagates() -> None:
    before = acc.current_stream("cpu:0")
    g = acc.Graph()
    with pytest.raises(KeyError), acc.graph(g):
        raise KeyError("boom")
    assert acc.current_stream("cpu:0") == before
    assert not acc.backends.get_backend("cpu").stream_is_capturing(
        0, acc.graph(acc.Graph()).capture_stream.stream_id)
    g.reset()                                   # as in PyTorch the capture was ended ...
    with acc.graph(g):                          # ... so the graph can capture again
        pass
    g.reset()


class _NoGraphs(CpuBackend):
    name = "nographs"

    def capabilities(self, index: int) -> Capabilities:
        return dataclasses.replace(super().capabilities(index), graphs=False)


def test_backend_without_capture_raises_capture_not_supported() -> None:
    registry.register("nographs", _NoGraphs, replace=True)
    acc.set_current_accelerator("nographs")
    g = acc.Graph()
    with acc.Stream(), pytest.raises(acc.CaptureNotSupportedError, match="cannot capture"):
        g.capture_begin()
    with pytest.raises(NotImplementedError), acc.graph(g):  # CaptureNotSupportedError is one
        pass


class _CpuGraph(acc.Graph):
    __slots__ = ()
    _backend_name = "cpu"


@EMPTY_CAPTURE
def test_graph_follows_its_stream_or_fixed_backend() -> None:
    registry.register("nographs", _NoGraphs, replace=True)
    acc.set_current_accelerator("nographs")    # the current accelerator cannot capture ...
    a = acc.zeros(2, dtype="int32", device="cpu:0")
    g = acc.Graph()
    with acc.graph(g, stream=acc.Stream("cpu:0")):   # ... but the capture stream's can
        a.fill_(7)
    with acc.cpu.Stream():
        g.replay()
    acc.synchronize("cpu:0")
    assert a.numpy().tolist() == [7, 7]
    g.reset()
    fixed = _CpuGraph()                          # a backend-fixed graph (as acc.cuda.CUDAGraph)
    with acc.cpu.Stream():
        fixed.capture_begin()
        fixed.capture_end()
    fixed.reset()
    with pytest.raises(ValueError, match="captures cpu work"), \
            acc.graph(_CpuGraph(), stream=acc.Stream("nographs:0")):
        pass


@EMPTY_CAPTURE
def test_repr() -> None:
    g = acc.Graph()
    assert "empty" in repr(g)
    with acc.graph(g):
        assert "capturing on cpu:0" in repr(g)
    assert "captured on cpu:0" in repr(g)
    g.reset()


def test_exported() -> None:
    assert acc.Graph is acc._graph.Graph and acc.graph is acc._graph.graph
    assert set(acc._graph.__all__) == {"DeviceGraph", "Graph", "RemovableHandle", "export_dot",
                                       "graph", "graph_pool_handle", "register_global_hook"}


def test_default_capture_stream_follows_a_replaced_backend() -> None:
    registry.register("cpugraphre", lambda: CpuBackend(name="cpugraphre"), replace=True)
    acc.set_current_accelerator("cpugraphre")
    first = acc.graph(acc.Graph()).capture_stream
    registry.register("cpugraphre", lambda: CpuBackend(name="cpugraphre"), replace=True)
    second = registry.get_backend("cpugraphre")
    ctx = acc.graph(acc.Graph())
    assert ctx.capture_stream._b is second and first._b is not second
    a = acc.zeros(2, dtype="int32", device="cpugraphre:0")
    with ctx:
        a.fill_(3)        # captured on the new backend's side stream, not run
    assert a.numpy().tolist() == [0, 0]
    ctx.cuda_graph.replay()
    acc.synchronize("cpugraphre:0")
    assert a.numpy().tolist() == [3, 3]
    ctx.cuda_graph.reset()
