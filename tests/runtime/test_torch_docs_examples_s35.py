"""PyTorch's own documentation examples of the runtime, ported to accelrt and checked to do
what the documentation says they do (torch 2.15's semantics where the text and the code
disagree).

Sources: ``docs/source/notes/cuda.md`` (CUDA semantics: devices, timing, streams, memory
management, ``PYTORCH_ALLOC_CONF``, ``MemPool``, CUDA graphs), ``docs/source/
torch_cuda_memory.rst`` (snapshots) and the ``Example::`` blocks of torch 2.15's
``torch/accelerator/__init__.py`` and ``torch/accelerator/graphs.py``. Tensor math in the
examples (``x * 2``, ``normal_``, ``sum``) is replaced by ``Array`` copies and fills.

``torch.cuda`` is a device module here: a two-device cpu backend (real data) and a two-device
:class:`~accelrt.testing.SimulatedBackend`; ``torch.accelerator`` is ``accelrt`` with that
backend as the current accelerator. Graph examples run on the cpu backend (the simulated
backend does not capture).
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from helpers.registry import module_backends

import accelrt as acc
from accelrt.backends.cpu import CpuBackend
from accelrt.testing import SimulatedBackend

CPU, SIM, PEND = "s35tdcpu", "s35tdsim", "s35tdpend"
MB = 1 << 20

_backends = module_backends({
    CPU: lambda: CpuBackend(num_devices=2, async_streams=False, name=CPU),
    SIM: lambda: SimulatedBackend(device_count=2, name=SIM),
    PEND: lambda: SimulatedBackend(device_count=1, auto_complete=False, name=PEND),
})


def _use(name: str) -> Any:
    mod: Any = acc.backends.device_module(name)
    acc.set_current_accelerator(name)
    mod.set_device(0)
    return mod


@pytest.fixture(params=[CPU, SIM])
def m(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The device module of each backend, the current accelerator, device 0 current, its
    caches emptied after the test (conftest puts accelerator, devices and streams back)."""
    mod = _use(request.param)
    yield mod
    for i in range(mod.device_count()):
        mod.synchronize(i)
        with mod.device(i):
            mod.empty_cache()


@pytest.fixture
def cpu() -> Iterator[Any]:
    """The cpu backend's device module (real data, graph capture), as :func:`m`."""
    mod = _use(CPU)
    yield mod
    mod.synchronize()
    mod.empty_cache()


# --------------------------------------------------------------------- devices and timing

def test_device_context_manager(m: Any) -> None:
    """mirrors notes/cuda.md, the opening example and "Device-agnostic code": inside
    ``with torch.cuda.device(1)`` a device without an index means device 1, an explicit
    index still wins, and the previous device is current again after the block."""
    kind = _type(m)
    x = acc.asarray([1.0, 2.0], device=f"{kind}:0")
    assert x.device == acc.device(kind, 0)
    assert m.current_device() == 0
    with m.device(1):
        assert m.current_device() == 1
        a = acc.asarray([1.0, 2.0], device=kind)
        b2 = x.to(device=kind)
        d = acc.randn(2, device=f"{kind}:0")
        assert a.device == acc.device(kind, 1) and b2.device == acc.device(kind, 1)
        assert d.device == acc.device(kind, 0)
        if kind == CPU:                  # (a simulated device holds no data)
            assert b2.tolist() == [1.0, 2.0]
    assert m.current_device() == 0
    assert acc.empty(2, device=kind).device == acc.device(kind, 0)


def _type(m: Any) -> str:
    name: str = acc.current_accelerator().type
    return name


def test_event_elapsed_time_example(m: Any) -> None:
    """mirrors notes/cuda.md "Asynchronous execution": two timing events around some work,
    ``synchronize()``, then ``start.elapsed_time(end)`` in milliseconds."""
    start, end = m.Event(enable_timing=True), m.Event(enable_timing=True)
    start.record()
    x = acc.zeros(100)
    x.fill_(1.0)
    end.record()
    m.synchronize()
    ms = start.elapsed_time(end)
    assert isinstance(ms, float) and ms >= 0.0
    del x


def test_accelerator_synchronize_example(m: Any) -> None:
    """mirrors the ``Example::`` of torch/accelerator/__init__.py ``synchronize``:
    ``torch.Event(enable_timing=True)`` records around work on the current accelerator,
    ``torch.accelerator.synchronize()``, then ``elapsed_time``."""
    assert acc.is_available(), "No available accelerators detected."
    start, end = acc.Event(enable_timing=True), acc.Event(enable_timing=True)
    start.record()
    t = acc.randn(100, device=acc.current_accelerator())
    end.record()
    acc.synchronize()
    assert start.elapsed_time(end) >= 0.0
    assert t.device == acc.device(_type(m), 0)


def test_accelerator_availability_examples(m: Any) -> None:
    """mirrors the ``Example::`` blocks of torch/accelerator/__init__.py ``is_available``,
    ``current_accelerator(check_available=True)`` and ``get_device_capability``
    (``supported_dtypes`` is a set)."""
    assert acc.is_available()
    dev = acc.current_accelerator(check_available=True)
    assert dev is not None and dev.type == _type(m)
    caps = acc.get_device_capability(f"{_type(m)}:0")
    assert isinstance(caps["supported_dtypes"], set)
    assert "float32" in caps["supported_dtypes"]     # numpy dtype names


def test_accelerator_device_index_example(m: Any) -> None:
    """mirrors the ``Example::`` of torch/accelerator/__init__.py ``device_index``: the
    device is current inside the block and restored after; ``None`` is a no-op."""
    with acc.device_index(1):
        assert acc.current_device_index() == 1
    assert acc.current_device_index() == 0
    m.set_device(1)
    with acc.device_index(None):
        assert acc.current_device_index() == 1
    assert acc.current_device_index() == 1
    with acc.device_index(0):
        assert acc.current_device_index() == 0
    assert acc.current_device_index() == 1


# ------------------------------------------------------------------------------ streams

def test_side_stream_fixed_example(cpu: Any) -> None:
    """mirrors notes/cuda.md "CUDA streams", the fixed example: the side stream waits for
    the default stream, reads ``A`` there, ``A.record_stream(s)``; the default stream later
    waits for the side stream."""
    dev = acc.device(CPU)
    s = cpu.Stream()
    A = acc.empty((100, 100), device=dev)
    data = np.random.default_rng(0).standard_normal((100, 100)).astype(np.float32)
    A.copy_(data)
    s.wait_stream(cpu.default_stream(dev))
    with cpu.stream(s):
        B = A.to(copy=True)
    A.record_stream(s)
    cpu.default_stream(dev).wait_stream(s)
    np.testing.assert_array_equal(B.numpy(), data)
    del A, B


def test_record_stream_keeps_block_from_reuse() -> None:
    """mirrors notes/cuda.md "CUDA streams", the second example: ``A`` used on a side stream
    and ``A.record_stream(s)``; freed, its block is not handed out again until the side
    stream's work is done (the reason the docs give for the synchronization)."""
    m = _use(PEND)
    sim = acc.backends.get(PEND)
    assert isinstance(sim, SimulatedBackend)
    try:
        s = m.Stream()
        A = acc.empty((256,), device=PEND)
        s.wait_stream(m.default_stream())
        with m.stream(s):
            A.fill_(1.0)
            A.record_stream(s)
        ptr = A.data_ptr()
        del A
        C = acc.empty((256,), device=PEND)
        assert C.data_ptr() != ptr          # s still has work on the block
        sim.complete_all()
        D = acc.empty((256,), device=PEND)
        assert D.data_ptr() == ptr          # done: the block is handed out again
        del C, D
    finally:
        sim.complete_all()
        m.synchronize()
        m.empty_cache()


# ------------------------------------------------------------------------------- memory

def test_memory_management_counters(m: Any) -> None:
    """mirrors notes/cuda.md "Memory management": ``memory_allocated`` counts the memory
    arrays occupy, ``memory_reserved`` what the caching allocator holds; ``empty_cache``
    gives back only unused cached memory (the peaks stay)."""
    m.reset_peak_memory_stats()
    base = m.memory_allocated()
    x = acc.empty(1024, dtype=np.uint8)
    assert m.memory_allocated() == base + 1024
    assert m.max_memory_allocated() >= base + 1024
    assert m.memory_reserved() >= 2 * MB
    del x
    assert m.memory_allocated() == base
    assert m.memory_reserved() >= 2 * MB         # cached, not released
    y = acc.empty(1024, dtype=np.uint8)
    m.empty_cache()
    assert m.memory_reserved() >= 2 * MB         # the occupied segment is not freed
    del y
    m.empty_cache()
    assert m.memory_reserved() == 0
    assert m.max_memory_reserved() >= 2 * MB


def test_roundup_power2_divisions_example(m: Any) -> None:
    """mirrors notes/cuda.md ``roundup_power2_divisions``: with 4 divisions a size between
    two powers of two rounds up to the next quarter step. torch 2.15's ``round_size`` only
    rounds by divisions above ``512 * divisions`` bytes, so the text's 1200 B -> 1280 B is
    1536 B (512-byte rounding) in the code; 1.2 MB -> 1.25 MiB as the text's rule says."""
    acc.memory.set_allocator_settings("roundup_power2_divisions:4")
    base = m.memory_stats().get("allocated_bytes.all.current", 0)
    small = acc.empty(1200, dtype=np.uint8)
    assert m.memory_stats()["allocated_bytes.all.current"] - base == 1536
    big = acc.empty(1_200_000, dtype=np.uint8)
    assert m.memory_stats()["allocated_bytes.all.current"] - base == 1536 + 1310720
    del small, big


def test_mempool_use_count_and_snapshot_example(m: Any) -> None:
    """mirrors notes/cuda.md "Mixing different CUDA system allocators": ``use_count()`` is 1
    for the ``MemPool`` alone and 2 inside ``use_mem_pool``; 1 MB arrays pack into 2 MB
    segments (one segment for two of them, a second for the third); deleting the arrays
    and then the pool gives its memory back."""
    before = m.memory_reserved()
    pool = m.MemPool()
    assert pool.use_count() == 1
    n = MB // 4
    with m.use_mem_pool(pool):
        out_0 = acc.randn(n)
        assert pool.use_count() == 2
    assert pool.use_count() == 1
    with m.use_mem_pool(pool):
        assert len(pool.snapshot()) == 1
        out_1 = acc.randn(n)
        assert len(pool.snapshot()) == 1
        out_2 = acc.randn(n)
        assert len(pool.snapshot()) == 2
    assert m.memory_reserved() == before + 4 * MB
    del out_0, out_1, out_2
    assert pool.use_count() == 1
    del pool
    assert m.memory_reserved() == before


def test_snapshot_history_and_dump_example(m: Any, tmp_path: os.PathLike[str]) -> None:
    """mirrors torch_cuda_memory.rst "Generating a Snapshot": ``_record_memory_history()``,
    run code, ``_dump_snapshot(path)`` writes a pickled snapshot with the segments and the
    history of allocator events; ``_record_memory_history(enabled=None)`` stops recording."""
    path = os.path.join(os.fspath(tmp_path), "my_snapshot.pickle")
    m.memory._record_memory_history()
    try:
        x = acc.empty(1000)
        addr = x.data_ptr()
        del x
        m.memory._dump_snapshot(path)
    finally:
        m.memory._record_memory_history(enabled=None)
    with open(path, "rb") as f:
        snap = pickle.load(f)
    assert {"segments", "device_traces"} <= set(snap)
    trace = snap["device_traces"][0]
    actions = [(e["action"], e["addr"]) for e in trace]
    assert ("alloc", addr) in actions and ("free_requested", addr) in actions
    assert all(e["size"] > 0 for e in trace)
    assert any(seg["total_size"] >= 4000 for seg in snap["segments"])
    assert m.memory._snapshot()["device_traces"][0] == []   # stopped and cleared


# ------------------------------------------------------------------------------- graphs

def test_graph_static_input_example(cpu: Any) -> None:
    """mirrors notes/cuda.md "PyTorch API" (CUDA graphs): warm up on a side stream, capture
    with ``torch.cuda.graph(g)``, then fill the static input and ``replay()``: the static
    output holds each replay's result (``static_input * 2`` is a copy here)."""
    g = cpu.CUDAGraph()
    static_input = acc.empty((5,), device=CPU)
    static_output = acc.empty((5,), device=CPU)
    s = cpu.Stream()
    s.wait_stream(cpu.current_stream())
    with cpu.stream(s):
        for _ in range(3):
            static_output.copy_(static_input)
    cpu.current_stream().wait_stream(s)
    with cpu.graph(g):
        static_output.copy_(static_input)
    for v in (3.0, 4.0):
        static_input.copy_(acc.full((5,), v, device=CPU))
        g.replay()
        assert static_output.tolist() == [v] * 5
    # "Non-constraints": once captured, the graph may be replayed on any stream
    other = cpu.Stream()
    static_input.fill_(5.0)
    other.wait_stream(cpu.current_stream())
    with cpu.stream(other):
        g.replay()
    cpu.current_stream().wait_stream(other)
    assert static_output.tolist() == [5.0] * 5
    g.reset()


def test_graph_pool_sharing_example(cpu: Any) -> None:
    """mirrors notes/cuda.md "Sharing memory across captures": ``graph(g2,
    pool=g1.pool())`` captures into g1's private pool; replayed in capture order, each
    graph computes on its own static input."""
    g1, g2 = cpu.CUDAGraph(), cpu.CUDAGraph()
    static_in_1, static_in_2 = acc.zeros(4, device=CPU), acc.zeros(4, device=CPU)
    with cpu.graph(g1):
        static_out_1 = static_in_1.to(copy=True)
    with cpu.graph(g2, pool=g1.pool()):
        static_out_2 = static_in_2.to(copy=True)
    assert g2.pool() == g1.pool()
    static_in_1.copy_(np.arange(4.0))
    static_in_2.copy_(np.arange(4.0) * 10)
    g1.replay()
    g2.replay()
    cpu.synchronize()
    assert static_out_1.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert static_out_2.tolist() == [0.0, 10.0, 20.0, 30.0]
    del static_out_1, static_out_2
    g1.reset()
    g2.reset()


def test_multistream_capture_branch_and_rejoin(cpu: Any) -> None:
    """mirrors notes/cuda.md "Usage with multiple streams", the CORRECT pattern: the side
    stream waits for the capturing stream, works, and the capturing stream waits for it
    before the capture ends; the side stream's work is captured (not run) and replays."""
    g, side = cpu.CUDAGraph(), cpu.Stream()
    buf, src = acc.zeros(3, device=CPU), acc.full((3,), 7.0, device=CPU)
    with cpu.graph(g):
        side.wait_stream(cpu.current_stream())
        with cpu.stream(side):
            buf.copy_(src)
        cpu.current_stream().wait_stream(side)
    assert buf.tolist() == [0.0] * 3
    g.replay()
    cpu.synchronize()
    assert buf.tolist() == [7.0] * 3
    assert not side.is_capturing()
    g.reset()


def test_multistream_capture_unjoined_fork_raises(cpu: Any) -> None:
    """mirrors notes/cuda.md "Usage with multiple streams": the stream DAG must rejoin the
    capturing stream before the capture ends. A side stream that joined the capture and
    captured work the capturing stream never waited for is CUDA's
    ``cudaErrorStreamCaptureUnjoined`` at ``cudaStreamEndCapture`` (torch raises it from
    ``capture_end``, a ``RuntimeError``); the capture is over and both streams usable."""
    g, side = cpu.CUDAGraph(), cpu.Stream()
    buf = acc.zeros(3, device=CPU)
    with pytest.raises(RuntimeError, match="fork that was not joined"):
        with cpu.graph(g):
            side.wait_stream(cpu.current_stream())
            with cpu.stream(side):
                buf.fill_(1.0)
    assert not cpu.is_current_stream_capturing()
    with cpu.stream(side):
        buf.fill_(2.0)               # eager again
    side.synchronize()
    assert buf.tolist() == [2.0] * 3
    g.reset()
    # joined through another stream (side -> side2 -> capturing stream) is joined
    g2, side2 = cpu.CUDAGraph(), cpu.Stream()
    with cpu.graph(g2):
        side.wait_stream(cpu.current_stream())
        with cpu.stream(side):
            buf.fill_(3.0)
        side2.wait_stream(side)
        cpu.current_stream().wait_stream(side2)
    g2.replay()
    cpu.synchronize()
    assert buf.tolist() == [3.0] * 3
    g2.reset()


def test_multistream_capture_no_branch_runs_eagerly(cpu: Any) -> None:
    """mirrors notes/cuda.md "Usage with multiple streams", the INCORRECT pattern that never
    branches from the capturing stream: the side stream is not capturing, so its work is
    not in the graph (it runs eagerly) and the graph is empty (torch's warning)."""
    g, side = cpu.CUDAGraph(), cpu.Stream()
    buf = acc.zeros(3, device=CPU)
    with pytest.warns(UserWarning, match="The CUDA Graph is empty"):
        with cpu.graph(g):
            with cpu.stream(side):
                buf.fill_(2.0)
    side.synchronize()
    assert buf.tolist() == [2.0] * 3
    g.reset()


def test_accelerator_graph_examples(cpu: Any, tmp_path: os.PathLike[str]) -> None:
    """mirrors the ``Example::`` blocks of torch/accelerator/graphs.py: ``with stream,
    graph:`` captures on the stream and ``replay()`` runs it; ``Graph(pool=g1.pool())``
    shares g1's pool; ``enable_debug_mode()`` then ``debug_dump(path)`` writes the graph."""
    x = acc.zeros([2000], device=0)
    stream = acc.Stream()
    graph = acc.Graph()
    with stream, graph:
        x.fill_(1.0)
    assert x.tolist()[:3] == [0.0] * 3
    graph.replay()
    acc.synchronize()
    assert set(x.tolist()) == {1.0}
    g2 = acc.Graph(pool=graph.pool())
    assert g2.graph_pool == graph.pool()
    s, g = acc.Stream(), acc.Graph()
    g.enable_debug_mode()
    with s, g:
        x.fill_(2.0)
    path = os.path.join(os.fspath(tmp_path), "graph_dump.dot")
    g.debug_dump(path)
    with open(path) as f:
        assert f.read().startswith("digraph")
    for gr in (graph, g2, g):
        gr.reset()
