"""PyTorch's own CUDA graph tests (``test/test_cuda.py``: the ``graph`` tests of ``TestCuda``,
``TestCachingHostAllocatorCudaGraph`` and ``TestMemPool``), re-checked on accelrt.

Each test names the PyTorch test it mirrors; torch 2.15's behaviour decides where the stored
test and torch 2.15 disagree. ``torch.cuda`` is ``acc.cpu`` (capture works on the cpu backend's
simulated devices) and tensors are ``accelrt`` arrays; tensor arithmetic (``b + 1``,
``clone()``) is replaced by the same allocations and copies (``_clone``), so the allocator sees
the pattern PyTorch's kernels make. ``SimulatedBackend`` (the GPU-like allocator) has no graph
capture: it takes part where a test does not capture (the refusal, pool ids).
"""

from __future__ import annotations

import gc
import os
import threading
import warnings
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from helpers.registry import module_backends

import accelrt as acc
from accelrt.testing import SimulatedBackend

SIM = "simgraphs35"
_backends = module_backends({SIM: lambda: SimulatedBackend(name=SIM)})

kSmallSize = 1048576
kSmallBuffer = 2097152
kLargeBuffer = 20971520
kMinLargeAlloc = 10485760
kRoundLarge = 2097152


@pytest.fixture
def cpu() -> Iterator[str]:
    """The cpu backend as the current accelerator, device 0; synchronized after the test."""
    acc.set_current_accelerator("cpu")
    acc.set_device_index(0)
    yield "cpu"
    acc.synchronize("cpu")


@pytest.fixture
def rng(cpu: str) -> Iterator[str]:
    """:func:`cpu`, with the default generator's state object, seed and offset put back."""
    gen = acc.cpu.default_generators[0]
    own = gen.graphsafe_get_state()
    saved = acc.cpu.get_rng_state()
    yield cpu
    gen.graphsafe_set_state(own)
    acc.cpu.set_rng_state(saved)


@pytest.fixture(params=["cpu", SIM])
def any_backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """The cpu backend (captures) and the simulated GPU-like backend (cannot capture)."""
    acc.set_current_accelerator(request.param)
    acc.set_device_index(0)
    yield request.param
    acc.synchronize(request.param)


def _clone(t: acc.Array) -> acc.Array:
    """``t.clone()``: a new array (from the caching allocator) with a copy of ``t``."""
    out = acc.empty(*t.shape, dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out


def _values(a: acc.Array) -> np.ndarray:
    return a.numpy()


# ---------------------------------------------------------------------- capture and replay

def test_is_current_stream_capturing(any_backend: str) -> None:
    """mirrors test_cuda.py test_graph_is_current_stream_capturing (and, on a backend that
    cannot capture, that a refused ``capture_begin`` leaves nothing capturing)."""
    assert acc.current_stream(any_backend).is_capturing() is False
    s = acc.Stream(any_backend)
    g = acc.Graph()
    with s:
        assert not s.is_capturing()
        if any_backend == SIM:
            with pytest.raises(acc.CaptureNotSupportedError, match="cannot capture graphs"):
                g.capture_begin()
            assert not s.is_capturing()
            return
        assert acc.cpu.is_current_stream_capturing() is False
        x = acc.zeros(4, device=any_backend)
        g.capture_begin()
        assert acc.cpu.is_current_stream_capturing() is True
        assert s.is_capturing()
        x.fill_(1.0)
        g.capture_end()
    assert acc.cpu.is_current_stream_capturing() is False and not s.is_capturing()
    g.reset()


def test_graph_capture_simple(cpu: str) -> None:
    """mirrors test_cuda.py test_graph_capture_simple: capture_begin/capture_end on a side
    stream record the work without running it; replay runs it (reading the inputs' memory at
    replay)."""
    s = acc.Stream(cpu)
    with s:
        a = acc.full(1000, 1.0, device=cpu)
        out = acc.zeros(1000, device=cpu)
        g = acc.cpu.CUDAGraph()
        acc.empty_cache()
        g.capture_begin()
        b = a
        for _ in range(10):
            b = _clone(b)
        out.copy_(b)
        g.capture_end()
    acc.current_stream(cpu).wait_stream(s)
    assert _values(out).sum() == 0.0          # captured, not run
    g.replay()
    assert _values(out).sum() == 1000.0
    a.fill_(11.0)
    g.replay()
    assert _values(out).sum() == 11000.0
    g.reset()


def test_accelerator_graph_simple(cpu: str) -> None:
    """mirrors test_cuda.py test_accelerator_graph_simple: ``with stream, Graph():`` captures
    on the stream (torch.accelerator.Graph); the current stream is not capturing after."""
    s = acc.Stream(cpu)
    g = acc.Graph()
    assert not acc.current_stream().is_capturing()
    a = acc.full(1000, 1.0, device=cpu)
    with s, g as entered:
        assert entered is None
        assert s.is_capturing()
        b = a
        for _ in range(10):
            b = _clone(b)
        b.fill_(11.0)
    acc.current_stream().wait_stream(s)
    assert not acc.current_stream().is_capturing()
    g.replay()
    assert _values(b).sum() == 11000.0
    g.reset()


def test_graph_attributes_set_before_recapture(cpu: str) -> None:
    """torch 2.15 torch/accelerator/graphs.py ``Graph.reset``: ``graph_pool`` and
    ``capture_error_mode`` set after a reset are used by the next ``capture_begin()``."""
    x = acc.zeros(8, device=cpu)
    s = acc.Stream(cpu)
    other = acc.Graph()
    with s, other:
        x.fill_(1.0)
    g = acc.Graph(capture_error_mode="thread_local")
    with s, g:
        x.fill_(2.0)
    own = g.pool()
    assert own != other.pool()
    g.reset()
    g.graph_pool, g.capture_error_mode = other.pool(), "relaxed"
    with s, g:
        x.fill_(3.0)
    assert g.pool() == other.pool()
    g.replay()
    assert _values(x).tolist() == [3.0] * 8
    g.reset()
    other.reset()


def test_graph_capture_reset_recapture(cpu: str) -> None:
    """mirrors test_cuda.py test_graph_capture_reset_recapture: after ``reset()`` the same
    object captures new work, and replay runs only the new work."""
    s = acc.Stream(cpu)
    a = acc.full(1000, 1.0, device=cpu)
    g = acc.cpu.CUDAGraph()
    with s:
        g.capture_begin()
        b = _clone(a)
        b.fill_(11.0)
        g.capture_end()
    acc.current_stream(cpu).wait_stream(s)
    g.replay()
    assert _values(b).sum() == 11000.0
    g.reset()
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        g.replay()
    with s:
        g.capture_begin()
        b.fill_(22.0)
        g.capture_end()
    acc.current_stream(cpu).wait_stream(s)
    b.fill_(0.0)
    g.replay()
    assert _values(b).sum() == 22000.0
    g.reset()
    del g


def test_graph_debugdump(cpu: str, tmp_path: os.PathLike[str]) -> None:
    """mirrors test_cuda.py test_graph_debugdump: ``enable_debug_mode()`` keeps a capture
    that forks onto a second stream and joins back, and ``debug_dump`` writes it."""
    x = acc.zeros(10240, device=cpu)
    g = acc.cpu.CUDAGraph()
    g.enable_debug_mode()
    s0, s1 = acc.Stream(cpu), acc.Stream(cpu)
    s0.wait_stream(acc.current_stream(cpu))
    with s0:
        g.capture_begin()
        z = _clone(x)
        with s1:
            s1.wait_stream(s0)
            w = _clone(z)
        s0.wait_stream(s1)
        g.capture_end()
    s0.synchronize()
    acc.synchronize(cpu)
    path = os.path.join(tmp_path, "out_multi_stream.dot")
    g.debug_dump(path)
    with open(path) as f:
        text = f.read()
    assert text.startswith("digraph") and "event record" in text
    del z, w
    g.reset()


def test_graph_timing(cpu: str) -> None:
    """mirrors test_cuda.py test_graph_timing: external timing events recorded inside a
    capture are recorded by each replay, and time the replayed work."""
    x = acc.zeros(1 << 20, device=cpu)
    g = acc.cpu.CUDAGraph()
    start = acc.cpu.Event(enable_timing=True, external=True)
    end = acc.cpu.Event(enable_timing=True, external=True)
    with acc.cpu.graph(g):
        start.record()
        x.fill_(1.0)
        end.record()
    acc.synchronize(cpu)
    g.replay()
    acc.synchronize(cpu)
    assert start.elapsed_time(end) > 0
    g.reset()


def test_graph_error_default_stream(cpu: str) -> None:
    """mirrors test_cuda.py test_graph_error: a capture on the default stream is refused
    with PyTorch's message, and nothing is left capturing."""
    g = acc.cpu.CUDAGraph()
    with pytest.raises(RuntimeError,
                       match=r"CUDA graphs must be captured on a non-default stream\. "
                             r"\(However, after capture, it's ok to replay them on the "
                             r"default stream\.\)"):
        g.capture_begin()
    assert not acc.cpu.is_current_stream_capturing()
    with pytest.raises(RuntimeError, match="non-default stream"), acc.Graph():
        pass


def test_graph_warn_if_has_zero_nodes(cpu: str) -> None:
    """mirrors test_cuda.py test_graph_warn_if_has_zero_nodes."""
    g = acc.cpu.CUDAGraph()
    s = acc.Stream(cpu)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with s:
            g.capture_begin()
            g.capture_end()
    assert any("The CUDA Graph is empty" in str(w.message) for w in caught)
    g.reset()


def test_graph_capture_oom(cpu: str) -> None:
    """mirrors test_cuda.py test_graph_capture_oom: an out-of-memory inside ``graph()``
    propagates as a RuntimeError naming it, and the capture is over."""
    with pytest.raises(RuntimeError, match="out of memory"):
        with acc.cpu.graph(acc.cpu.CUDAGraph()):
            acc.zeros(2**40, device=cpu)
    assert not acc.cpu.is_current_stream_capturing()
    acc.zeros(4, device=cpu).fill_(1.0)       # the device still works


def test_graph_tensor_item_not_allowed(cpu: str) -> None:
    """mirrors test_cuda.py test_cuda_graph_tensor_item_not_allowed: reading a value on the
    host (``item()``; here ``tolist()``/``numpy()``) synchronizes, which a capture refuses."""
    a = acc.zeros(4, device=cpu)
    for read in (a.tolist, a.numpy):
        g = acc.cpu.CUDAGraph()
        with pytest.raises(RuntimeError, match="capturing"):
            with acc.cpu.graph(g):
                a.fill_(1.0)
                read()
        g.reset()


# ---------------------------------------------------------------------- keep_graph, raw handles

def test_raw_graph_keep_graph_false(cpu: str) -> None:
    """mirrors test_cuda.py test_cuda_graph_raw_graph_keep_graph_false: a second
    ``instantiate()`` without keep_graph is refused with PyTorch's message; the raw
    ``cudaGraph_t`` is CUDA's only (docs/differences.md: CaptureNotSupportedError on cpu)."""
    graph = acc.cpu.CUDAGraph(keep_graph=False)
    x = acc.zeros(2000, device=cpu)
    with acc.cpu.graph(graph, capture_error_mode="relaxed"):
        x.fill_(1.0)
    with pytest.raises(RuntimeError, match=r"instantiate\(\) is intended to be called by the "
                                           r"user only when keep_graph=true"):
        graph.instantiate()
    with pytest.raises(acc.CaptureNotSupportedError):
        graph.raw_cuda_graph()
    graph.reset()


def test_instantiate_before_capture(cpu: str) -> None:
    """torch 2.15's ``capture_end() must have been called before calling instantiate``."""
    with pytest.raises(RuntimeError, match=r"capture_end\(\) must have been called before "
                                           r"calling instantiate"):
        acc.cpu.CUDAGraph(keep_graph=True).instantiate()


def test_capture_end_before_capture_begin(cpu: str) -> None:
    """torch 2.15's ``capture_end() called before capture_begin().``"""
    with acc.Stream(cpu):
        with pytest.raises(RuntimeError,
                           match=r"capture_end\(\) called before capture_begin\(\)"):
            acc.cpu.CUDAGraph().capture_end()


def test_replay_without_capture(cpu: str) -> None:
    """torch 2.15's ``Called CUDAGraph::replay without a preceding successful capture.``"""
    with pytest.raises(RuntimeError, match="replay.* without a preceding successful capture"):
        acc.cpu.CUDAGraph().replay()
    with pytest.raises(RuntimeError, match="replay.* without a preceding successful capture"):
        acc.Graph().replay()


def test_raw_graph_reset_and_recapture(cpu: str) -> None:
    """mirrors test_cuda.py test_cuda_graph_raw_graph_reset_and_recapture: with
    ``keep_graph=True`` the graph can be instantiated again (each replay runs the work), and
    after ``reset()`` a capture of new memory replays the new work."""
    graph = acc.cpu.CUDAGraph(keep_graph=True)
    for value in (1.0, 2.0):                    # the first capture, then one after reset()
        x = acc.zeros(2000, device=cpu)         # a new address
        with acc.cpu.graph(graph, capture_error_mode="relaxed"):
            x.fill_(value)
        for _ in range(2):                      # instantiated again, replayed again
            graph.instantiate()
            graph.replay()
            assert (_values(x) == value).all()
            x.fill_(0.0)
        graph.reset()


# ---------------------------------------------------------------------- random numbers

def test_graphsafe_set_get_rng_state(rng: str) -> None:
    """mirrors test_cuda.py test_graphsafe_set_get_rng_state: a graph that draws from two
    registered states of the default generator (switching with graphsafe_set_state) replays
    the draws an eager generator makes, and advances both states as the eager run does."""
    cpu = rng

    def create_states(gen: acc.random.Generator) -> tuple[acc.random.Generator, ...]:
        acc.random.rand(1, device=cpu)
        gen.manual_seed(0)
        return gen, gen.graphsafe_get_state(), gen.clone_state()

    def draw(states: tuple[acc.random.Generator, ...]) -> list[acc.Array]:
        gen, old, new = states
        gen.graphsafe_set_state(new)
        out = [acc.random.rand(5, device=cpu, generator=gen)]
        gen.graphsafe_set_state(old)
        out += [acc.random.rand(5, device=cpu, generator=gen) for _ in range(2)]
        return out

    def offsets(states: tuple[acc.random.Generator, ...]) -> tuple[int, int]:
        return states[1].get_offset(), states[2].get_offset()

    eager = create_states(acc.random.Generator(f"{cpu}:0"))
    g = acc.cpu.CUDAGraph()
    s = acc.Stream(cpu)
    graphed = create_states(acc.cpu.default_generators[0])
    g.register_generator_state(graphed[1])
    g.register_generator_state(graphed[2])
    with s:
        g.capture_begin()
        captured = draw(graphed)
        g.capture_end()
    acc.current_stream(cpu).wait_stream(s)
    for _ in range(3):
        values = draw(eager)
        g.replay()
        assert offsets(eager) == offsets(graphed)
        assert [v.tolist() for v in values] == [c.tolist() for c in captured]
    g.reset()


def test_memory_stats_of_multiple_generators_and_graphs(rng: str) -> None:
    """mirrors test_cuda.py test_memory_stats_of_multiple_generators_and_graphs: graphs with
    several registered generator states give back every block once they are gone. (CUDA adds
    two 512-byte seed/offset holders per state while the graphs live; accelrt's counters are
    host values, so no device block is added: that delta is CUDA's layout.)"""
    cpu = rng
    acc.zeros(1, device=cpu)   # the device's stats exist

    def stats() -> tuple[int, int]:
        st = acc.memory_stats(cpu)
        return st["active.all.current"], st["active_bytes.all.current"]

    def run(num_graphs: int, num_states: int) -> None:
        base = stats()
        graphs = [acc.cpu.CUDAGraph() for _ in range(num_graphs)]
        gen = acc.cpu.default_generators[0]
        states = [gen.graphsafe_get_state()] + [gen.clone_state() for _ in range(1, num_states)]
        for graph in graphs:
            for state in states:
                graph.register_generator_state(state)
            s = acc.Stream(cpu)
            with s:
                graph.capture_begin()
                acc.random.rand(1, device=cpu)
                graph.capture_end()
            acc.current_stream(cpu).wait_stream(s)
            graph.replay()
        assert stats() == base
        while graphs:
            graphs.pop()
        gc.collect()
        acc.empty_cache()
        assert stats() == base

    run(1, 1)
    run(3, 2)
    run(10, 20)


def test_graph_manual_seed_mismatch_raises(rng: str) -> None:
    """mirrors test_cuda.py test_graph_manual_seed_mismatch_raises (PyTorch's message)."""
    acc.cpu.manual_seed(0)
    g = acc.cpu.CUDAGraph()
    with pytest.raises(RuntimeError,
                       match="CUDAGeneratorImpl::set_current_seed can be called during stream "
                             "capture only if new seed is the same as the original seed."):
        with acc.cpu.graph(g):
            acc.cpu.manual_seed(1)
    g.reset()
    with acc.cpu.graph(g):                     # the same seed is taken
        acc.cpu.manual_seed(0)
        acc.random.rand(4, device=rng)
    g.reset()


_DRAWS: dict[str, Callable[[str], acc.Array]] = {
    "rand": lambda d: acc.random.rand(1000, device=d),
    "randn": lambda d: acc.random.randn(1000, device=d),
    "randint": lambda d: acc.random.randint(0, 3, (1000,), device=d),
    "uniform_": lambda d: acc.random.uniform_(acc.empty(1000, device=d)),
    "normal_": lambda d: acc.random.normal_(acc.empty(1000, device=d), 1.0, 2.0),
}


@pytest.mark.parametrize("op", sorted(_DRAWS))
def test_graph_rng_distributions(rng: str, op: str) -> None:
    """mirrors test_cuda.py test_graph_rng_distributions: the capture draws nothing; each
    replay draws what the eager ops would draw next from the default generator, after a
    new seed too."""
    draw = _DRAWS[op]
    acc.cpu.manual_seed(5)
    draw(rng)
    control1, control2 = draw(rng), draw(rng)
    stream = acc.Stream(rng)
    stream.wait_stream(acc.current_stream(rng))
    g = acc.cpu.CUDAGraph()
    with stream:
        acc.cpu.manual_seed(5)
        g.capture_begin()
        t1, t2 = draw(rng), draw(rng)
        g.capture_end()
    acc.current_stream(rng).wait_stream(stream)
    assert _values(t1).tolist() != _values(control1).tolist()   # not run by the capture
    for seed in (6, 314, 271):
        acc.cpu.manual_seed(seed)
        draw(rng)
        control1, control2 = draw(rng), draw(rng)
        acc.cpu.manual_seed(seed)
        draw(rng)
        g.replay()
        assert _values(t1).tolist() == _values(control1).tolist()
        assert _values(t2).tolist() == _values(control2).tolist()
    g.reset()


def test_graph_rng_interleaved_with_eager(rng: str) -> None:
    """mirrors test_cuda.py test_graph_rng_functional (its ops, dropout and rrelu, are kernels
    accelrt has not: the same sequence with ``normal_``): replay, two eager draws, replay draw
    what six eager draws draw; after a new seed, three replays draw what three pairs of eager
    draws draw."""
    def op() -> acc.Array:
        return acc.random.normal_(acc.empty(100, device=rng))

    acc.cpu.manual_seed(5)
    eager = [op() for _ in range(6)]
    stream = acc.Stream(rng)
    stream.wait_stream(acc.current_stream(rng))
    g = acc.cpu.CUDAGraph()
    with stream:
        acc.cpu.manual_seed(5)
        acc.empty_cache()
        g.capture_begin()
        first, second = op(), op()
        g.capture_end()
    acc.current_stream(rng).wait_stream(stream)
    g.replay()
    assert _values(first).tolist() == _values(eager[0]).tolist()
    op()
    op()
    g.replay()
    assert _values(second).tolist() == _values(eager[5]).tolist()
    for seed in (6, 128, 9999):
        acc.cpu.manual_seed(seed)
        for _ in range(3):
            g.replay()
        assert _values(second).tolist() != _values(eager[5]).tolist()
        acc.cpu.manual_seed(seed)
        pairs = [(op(), op()) for _ in range(3)]
        assert _values(second).tolist() == _values(pairs[-1][1]).tolist()
    g.reset()


# ---------------------------------------------------------------------- pools and memory

def _temps(t: acc.Array) -> acc.Array:
    """``func_with_temps`` of test_cuda.py: two temporaries and a result."""
    x, y = _clone(t), _clone(t)
    out = _clone(x)
    del x, y
    return out


@pytest.mark.parametrize("share_mem", ["Don't share", "via pool()", "via graph_pool_handle()"])
def test_graph_two_successive(cpu: str, share_mem: str) -> None:
    """mirrors test_cuda.py test_graph_two_successive: two captures in a row, sharing a pool
    (``pool()`` or ``graph_pool_handle()``) or not, replay correctly between eager work;
    sharing costs one small segment (``kSmallBuffer``) less."""
    acc.empty_cache()
    base = acc.memory_stats(cpu).get("reserved_bytes.all.current", 0)
    s = acc.Stream(cpu)
    g0, g1 = acc.cpu.CUDAGraph(), acc.cpu.CUDAGraph()
    a = acc.full(1000, 1.0, device=cpu)
    s.wait_stream(acc.current_stream(cpu))
    with s:
        g0_args = (acc.cpu.graph_pool_handle(),) if share_mem == "via graph_pool_handle()" else ()
        g0.capture_begin(*g0_args)
        b = _clone(a)
        for _ in range(5):
            b = _temps(b)
        g0.capture_end()
        g1_args = (g0.pool(),) if share_mem == "via pool()" else g0_args
        g1.capture_begin(*g1_args)
        for _ in range(5):
            b = _temps(b)
        b.fill_(3070.0)
        g1.capture_end()
    acc.current_stream(cpu).wait_stream(s)
    c = _clone(a)
    for _ in range(2):
        c = _temps(c)
    g0.replay()
    for _ in range(2):
        c = _temps(c)
    g1.replay()
    assert _values(b).sum() == 1000 * 3070
    assert _values(c).sum() == 1000
    reserved = acc.memory_stats(cpu)["reserved_bytes.all.current"] - base
    # the eager arrays' segment, then one private segment per pool
    pools = 1 if share_mem != "Don't share" else 2
    assert reserved == kSmallBuffer * (1 + pools)
    del a, b, c, g0, g1
    acc.synchronize(cpu)
    acc.empty_cache()


@pytest.mark.parametrize("share_mem", ["Don't share", "via pool()", "via graph_pool_handle()"])
def test_graph_three_successive(cpu: str, share_mem: str) -> None:
    """mirrors test_cuda.py test_graph_three_successive: replaying in capture order is valid;
    out of order it is valid only without a shared pool (a shared pool gives a later capture
    the memory an earlier capture freed, so g2 overwrites what g1 reads)."""
    acc.empty_cache()
    s = acc.Stream(cpu)
    a = acc.full(1000, 1.0, device=cpu)
    g0, g1, g2 = acc.cpu.CUDAGraph(), acc.cpu.CUDAGraph(), acc.cpu.CUDAGraph()
    s.wait_stream(acc.current_stream(cpu))
    with s:
        g0_args = (acc.cpu.graph_pool_handle(),) if share_mem == "via graph_pool_handle()" else ()
        g0.capture_begin(*g0_args)
        b = _clone(a)
        c = _clone(b)
        c.fill_(2.0)        # c = b + 1
        d = _clone(b)
        d.fill_(3.0)        # d = b + 2
        g0.capture_end()
        args = (g0.pool(),) if share_mem == "via pool()" else g0_args
        g1.capture_begin(*args)
        e = _clone(c)       # e = c + 3 (here: e = c)
        del c
        g1.capture_end()
        g2.capture_begin(*args)
        f = _clone(d)
        f.fill_(7.0)        # f = d + 4
        g2.capture_end()
    acc.current_stream(cpu).wait_stream(s)
    g0.replay()
    g1.replay()
    g2.replay()
    assert (_values(e).sum(), _values(f).sum()) == (1000 * 2, 1000 * 7)
    g0.replay()
    g2.replay()
    g1.replay()
    corrupted = share_mem != "Don't share"
    assert _values(e).sum() == 1000 * (7 if corrupted else 2)
    assert _values(f).sum() == 1000 * 7
    del a, b, d, e, f, g0, g1, g2
    acc.synchronize(cpu)
    acc.empty_cache()


def test_graph_concurrent_replay_without_sharing(cpu: str) -> None:
    """mirrors test_cuda.py test_graph_concurrent_replay, its "Don't share" case: two graphs
    with their own pools replayed on two streams at once give their own results. (The
    shared-pool cases expect corruption from concurrent kernels, a GPU timing effect.)"""
    s, s0, s1 = acc.Stream(cpu), acc.Stream(cpu), acc.Stream(cpu)
    a = acc.full(1000, 1.0, device=cpu)
    g0, g1 = acc.cpu.CUDAGraph(), acc.cpu.CUDAGraph()
    s.wait_stream(acc.current_stream(cpu))
    with s:
        g0.capture_begin()
        b = _temps(_clone(a))
        b.fill_(94.0)
        g0.capture_end()
        g1.capture_begin()
        c = _temps(_clone(a))
        c.fill_(156.0)
        g1.capture_end()
    acc.synchronize(cpu)
    with s0:
        s1.wait_stream(s0)
        g0.replay()
    with s1:
        g1.replay()
    acc.current_stream(cpu).wait_stream(s0)
    acc.current_stream(cpu).wait_stream(s1)
    assert (_values(b).sum(), _values(c).sum()) == (1000 * 94, 1000 * 156)
    del a, b, c, g0, g1
    acc.synchronize(cpu)


_STAT_CASES = (
    (512 // 4, 1, kSmallBuffer, kSmallBuffer, "small_pool"),
    (kSmallSize // 4, 2, 2 * kSmallBuffer, kSmallBuffer, "small_pool"),
    ((kSmallSize + 512) // 4, 1, kLargeBuffer, kLargeBuffer, "large_pool"),
    ((kMinLargeAlloc - 512) // 4, 2, 2 * kLargeBuffer, kLargeBuffer, "large_pool"),
    ((kMinLargeAlloc + 512) // 4, 3,
     3 * (kRoundLarge * ((kMinLargeAlloc + 512 + kRoundLarge - 1) // kRoundLarge)),
     kRoundLarge * ((kMinLargeAlloc + 512 + kRoundLarge - 1) // kRoundLarge), "large_pool"),
)


@pytest.mark.parametrize("case", _STAT_CASES, ids=lambda c: f"{c[0]}-{c[4]}")
def test_graph_memory_stats_and_use_result_after_destroy_graph(
        cpu: str, case: tuple[int, int, int, int, str]) -> None:
    """mirrors test_cuda.py test_graph_memory_stats_and_use_result_after_destroy_graph: the
    capture's private pool adds PyTorch's segments and bytes (the pool survives replays and
    ``empty_cache``); once the graph is gone, only the live result's segment remains and the
    result is still readable. (CUDA's two one-element RNG holders in the small pool are not
    made by accelrt: ``active`` there is 1, not 3.)"""
    numel, delta_segments, delta_bytes, delta_bytes_post_del, pool = case
    keys = ("segment.", "reserved_bytes.", "active.", "active_bytes.")
    gc.collect()
    acc.empty_cache()
    s = acc.Stream(cpu)
    g = acc.cpu.CUDAGraph()
    s.wait_stream(acc.current_stream(cpu))
    with s:
        a = acc.full(numel, 1.0, device=cpu)
        pre = acc.memory_stats(cpu)
        g.capture_begin()
        b = _clone(a)
        for _ in range(5):
            b = _clone(_clone(b))
        g.capture_end()
    acc.current_stream(cpu).wait_stream(s)
    gc.collect()

    def delta() -> list[int]:
        now = acc.memory_stats(cpu)
        return [now[k + pool + ".current"] - pre[k + pool + ".current"] for k in keys]

    for i in range(2):
        assert delta() == [delta_segments, delta_bytes, 1, numel * 4]
        g.replay()
        assert _values(b).sum() == numel
        if i == 0:
            acc.empty_cache()
    del g
    gc.collect()
    acc.empty_cache()
    assert _values(b).sum() == numel
    assert delta() == [1, delta_bytes_post_del, 1, numel * 4]
    del a, b
    acc.synchronize(cpu)
    acc.empty_cache()


def test_graph_record_stream(cpu: str) -> None:
    """mirrors test_cuda.py test_graph_record_stream: a block still in use by another stream
    when a capture begins is not reclaimed by the capture, ``record_stream`` during a capture
    is accepted, and the allocator works on after."""
    acc.empty_cache()
    potential_problem = acc.zeros(3, device=cpu)
    a = acc.zeros(3, device=cpu)
    s0, s1, s2 = acc.Stream(cpu), acc.Stream(cpu), acc.Stream(cpu)
    g = acc.cpu.CUDAGraph()
    acc.synchronize(cpu)
    with s0:
        potential_problem.record_stream(s0)
        potential_problem.fill_(1.0)
    del potential_problem
    with s1:
        g.capture_begin()
        b = _clone(a)
        s2.wait_stream(s1)
        with s2:
            b.fill_(1.0)
            b.record_stream(s2)
            del b
        s1.wait_stream(s2)
        g.capture_end()
    acc.synchronize(cpu)
    acc.zeros(3, device=cpu)
    g.replay()
    acc.synchronize(cpu)
    g.reset()


def test_graph_allocator_propagates_stream(cpu: str) -> None:
    """mirrors test_cuda.py test_cuda_graph_allocator_propagates_stream: a stream that joins
    the capture (waits on the capturing stream) allocates from the graph's private pool."""
    x = acc.zeros(10240000, device=cpu)
    existing = {seg["segment_pool_id"] for seg in acc.cpu.memory_snapshot()}
    g = acc.cpu.CUDAGraph()
    s0, s1 = acc.Stream(cpu), acc.Stream(cpu)
    s0.wait_stream(acc.current_stream(cpu))
    with s0:
        g.capture_begin()
        z = _clone(x)
    with s1:
        s1.wait_stream(s0)
        w = _clone(z)
    s0.wait_stream(s1)
    with s0:
        g.capture_end()
    new = [seg["segment_pool_id"] for seg in acc.cpu.memory_snapshot()
           if seg["segment_pool_id"] not in existing]
    assert len(new) == 2 and new[0] == new[1] == g.pool()
    del z, w, x
    g.reset()


def test_graph_error_options_other_thread(cpu: str) -> None:
    """mirrors test_cuda.py test_cuda_graph_error_options: with ``thread_local`` and
    ``relaxed`` capture modes another thread may allocate on its own stream during the
    capture. (PyTorch leaves ``global`` unchecked: it corrupts the CUDA context.)"""
    def raw_malloc(out: list[str]) -> None:
        stream = acc.Stream(cpu)
        with stream:
            mem = acc.cpu.caching_allocator_alloc(1024)
        acc.cpu.caching_allocator_delete(mem)
        out.append("ok")

    x = acc.zeros(2000, device=cpu)
    for mode in ("thread_local", "relaxed"):
        graph = acc.cpu.CUDAGraph()
        stream = acc.Stream(cpu)
        out: list[str] = []
        with acc.cpu.graph(graph, stream=stream, capture_error_mode=mode):
            x.fill_(3.0)
            thread = threading.Thread(target=raw_malloc, args=(out,))
            thread.start()
            thread.join()
        assert out == ["ok"]
        graph.reset()


def test_graph_capture_record_stream_reuse_refused(cpu: str) -> None:
    """test_cuda.py test_graph_capture_reclaim_2_streams / _4_streams set
    ``graph_capture_record_stream_reuse:True``, which accelrt refuses (docs/differences.md:
    it needs the capture's dependency graph)."""
    with pytest.raises(ValueError, match="graph_capture_record_stream_reuse"):
        acc.memory.set_allocator_settings("graph_capture_record_stream_reuse:True")


def test_mempool_id(any_backend: str) -> None:
    """mirrors test_cuda.py TestMemPool.test_mempool_id: a user-made pool id
    (``graph_pool_handle()``, ``MemPool().id``, and accelrt's ``generate_graph_pool_handle()``)
    is ``(0, n)``, one counter for all three; a capture's own pool is ``(n, 0)``."""
    pool1 = acc.cpu.graph_pool_handle()
    pool2 = acc.memory.MemPool().id
    pool3 = acc.generate_graph_pool_handle()
    assert pool1[0] == 0 and pool2[0] == 0 and pool3[0] == 0
    assert pool2[1] - pool1[1] > 0 and pool3[1] - pool2[1] > 0
    if any_backend == SIM:
        pool = acc.memory.MemPool()
        with acc.memory.use_mem_pool(pool, SIM):
            p = acc.memory.caching_allocator_alloc(1024, SIM)
        assert [seg["segment_pool_id"] for seg in pool.snapshot()] == [pool.id]
        acc.memory.caching_allocator_delete(p)
        return
    x = acc.zeros(4, device=any_backend)
    g = acc.cpu.CUDAGraph()
    with acc.cpu.graph(g):
        x.fill_(1.0)
    own = g.pool()
    assert own[0] > 0 and own[1] == 0
    g.reset()
    with acc.cpu.graph(g, pool=pool1):
        y = _clone(x)
    assert g.pool() == pool1
    assert {seg["segment_pool_id"] for seg in acc.cpu.memory_snapshot()} >= {pool1}
    del y
    g.reset()


# ---------------------------------------------------------------------- pinned host memory

def test_pin_memory_no_use(cpu: str) -> None:
    """mirrors test_cuda.py TestCachingHostAllocatorCudaGraph.test_pin_memory_no_use."""
    graph = acc.cpu.CUDAGraph()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")       # an empty capture
        with acc.cpu.graph(graph, capture_error_mode="thread_local"):
            data = acc.empty(8, pin_memory=True)
            data2 = acc.empty(8, pin_memory=True)
    assert acc.is_pinned(data) and data.ctypes.data != data2.ctypes.data
    del data2
    graph.reset()


def test_pin_memory_no_use2(cpu: str) -> None:
    """mirrors test_cuda.py TestCachingHostAllocatorCudaGraph.test_pin_memory_no_use2: a
    pinned block freed unused during a capture is reused."""
    graph = acc.cpu.CUDAGraph()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with acc.cpu.graph(graph, capture_error_mode="thread_local"):
            data = acc.pin_memory(np.random.default_rng(0).standard_normal(8).astype("f4"))
            ptr = data.ctypes.data
            del data
            data2 = acc.pin_memory(np.random.default_rng(1).standard_normal(8).astype("f4"))
            assert data2.ctypes.data == ptr
    graph.reset()


def test_pin_memory_use(cpu: str) -> None:
    """mirrors test_cuda.py TestCachingHostAllocatorCudaGraph.test_pin_memory_use: a pinned
    block a captured copy reads is not reused (each replay reads it)."""
    graph = acc.cpu.CUDAGraph()
    with acc.cpu.graph(graph, capture_error_mode="thread_local"):
        data = acc.pin_memory(np.full(8, 5.0, dtype="f4"))
        data_dev = acc.zeros(8, device=cpu)
        data_dev.copy_(data, non_blocking=True)
        old = data.ctypes.data
        del data
        data2 = acc.pin_memory(np.zeros(8, dtype="f4"))
    assert data2.ctypes.data != old
    graph.replay()
    assert _values(data_dev).tolist() == [5.0] * 8
    del data_dev
    graph.reset()


@pytest.mark.parametrize("use_memory", [True, False])
@pytest.mark.parametrize("delete_memory", [True, False])
def test_pin_memory_two_graphs(cpu: str, use_memory: bool, delete_memory: bool) -> None:
    """mirrors test_cuda.py TestCachingHostAllocatorCudaGraph.test_two_graphs (its
    ``use_memory``/``delete_memory`` matrix; host registration is refused by accelrt,
    docs/differences.md): two captures sharing a pool reuse a pinned block only if it was
    freed and no captured copy read it."""
    shared = acc.cpu.graph_pool_handle()
    graph1, graph2 = acc.cpu.CUDAGraph(), acc.cpu.CUDAGraph()
    kept: list[object] = []

    def capture(graph: acc.cpu.CUDAGraph) -> int:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # an empty capture when nothing is copied
            with acc.cpu.graph(graph, pool=shared, capture_error_mode="thread_local"):
                data = acc.pin_memory(np.ones(8, dtype="f4"))
                if use_memory:
                    data_dev = acc.zeros(8, device=cpu)
                    data_dev.copy_(data, non_blocking=True)
                    kept.append(data_dev)
                ptr: int = data.ctypes.data
                if not delete_memory:
                    kept.append(data)
                del data
        return ptr

    old, new = capture(graph1), capture(graph2)
    assert (new == old) == (delete_memory and not use_memory)
    kept.clear()
    graph1.reset()
    graph2.reset()


def test_unpinned_memory_use(cpu: str) -> None:
    """mirrors test_cuda.py TestCachingHostAllocatorCudaGraph.test_unpinned_memory_use: a
    copy from pageable (not pinned) host memory during a capture is refused with PyTorch's
    message, non-blocking too (the graph would read memory nobody keeps at every replay),
    and the capture goes on."""
    graph = acc.cpu.CUDAGraph()
    data_dev = acc.zeros(8, device=cpu)
    with acc.cpu.graph(graph):
        with pytest.raises(RuntimeError, match="Cannot copy between CPU and CUDA tensors "
                                               "during CUDA graph capture unless the CPU "
                                               "tensor is pinned"):
            data_dev.copy_(np.empty(8, dtype="f4"), non_blocking=True)
        with pytest.raises(RuntimeError, match="during CUDA graph capture"):
            data_dev.copy_([1.0] * 8, non_blocking=True)
        data_dev.fill_(2.0)
    graph.replay()
    assert _values(data_dev).tolist() == [2.0] * 8
    graph.reset()
