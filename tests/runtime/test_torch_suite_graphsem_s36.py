"""torch 2.15's graph sources, function by function, re-checked on accelrt: ``torch/cuda/graphs.py``
(``CUDAGraph``, the ``graph`` context manager, ``graph_pool_handle``,
``is_current_stream_capturing``), ``torch/accelerator/graphs.py`` (``Graph``) and the checks of
PyTorch's C++ ``CUDAGraph`` (``aten/src/ATen/cuda/CUDAGraph.cpp``) and of its Python binding
(``capture_error_mode``).

Capture needs CUDA in PyTorch, so torch's behaviour was settled by reading those sources;
``torch.cuda`` is ``acc.cpu`` (the cpu backend captures) and ``SimulatedBackend`` (GPU-like
allocator, no capture) takes part where a check does not capture. The s35 file
(test_torch_suite_graphs_s35.py, test_cuda.py's graph tests) is not repeated here.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest
from helpers.registry import module_backends

import accelrt as acc
from accelrt.testing import SimulatedBackend

SIM = "simgraphsem36"
_backends = module_backends({SIM: lambda: SimulatedBackend(name=SIM)})


@pytest.fixture
def cpu() -> Iterator[str]:
    """The cpu backend as the current accelerator, device 0; synchronized after the test."""
    acc.set_current_accelerator("cpu")
    acc.set_device_index(0)
    yield "cpu"
    acc.synchronize("cpu")


@pytest.fixture(params=["cpu", SIM])
def any_backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """The cpu backend (captures) and the simulated GPU-like backend (cannot capture)."""
    acc.set_current_accelerator(request.param)
    acc.set_device_index(0)
    yield request.param
    acc.synchronize(request.param)


def _capture_fill(g: acc.Graph, x: acc.Array, value: float, **kw: object) -> None:
    with acc.cpu.graph(g, **kw):   # type: ignore[arg-type]
        x.fill_(value)


# ---------------------------------------------------------------------- argument checks

def test_unknown_capture_error_mode_is_a_runtime_error(any_backend: str) -> None:
    """torch 2.15's ``_CUDAGraph.capture_begin`` binding: an unknown ``capture_error_mode``
    raises ``RuntimeError`` "Unknown capture error mode. Expected `global`, `thread_local`, or
    `relaxed`, got ..." (a ``TORCH_CHECK``); accelrt's error is that class and a
    ``ValueError`` (it checks the mode when the graph or context is made, and at
    ``capture_begin``)."""
    makers = [lambda: acc.Graph(capture_error_mode="strict"),
              lambda: acc.cpu.graph(acc.cpu.CUDAGraph(), capture_error_mode="strict"),
              lambda: acc.cpu.CUDAGraph().capture_begin(capture_error_mode="strict"),
              lambda: acc.Graph(capture_error_mode=None)]   # type: ignore[arg-type]
    for make in makers:
        with pytest.raises(RuntimeError, match="Unknown capture error mode") as info:
            make()
        assert isinstance(info.value, ValueError)
    for mode in ("default", "global", "thread_local", "relaxed"):   # every valid one
        assert acc.Graph(capture_error_mode=mode).capture_error_mode == mode


def test_constructor_argument_forms(any_backend: str) -> None:
    """torch 2.15 ``torch.accelerator.Graph(keep_graph=False, *, pool=None,
    capture_error_mode="default")``: ``pool`` and the mode are keyword-only and kept as the
    attributes ``graph_pool`` / ``capture_error_mode``; ``torch.cuda.CUDAGraph.__new__`` takes
    only ``keep_graph`` (a ``pool=`` keyword is a ``TypeError``)."""
    handle = acc.cpu.graph_pool_handle()
    g = acc.Graph(True, pool=handle, capture_error_mode="relaxed")
    assert (g.graph_pool, g.capture_error_mode) == (handle, "relaxed")
    with pytest.raises(TypeError):
        acc.Graph(False, handle)   # type: ignore[misc]
    with pytest.raises(TypeError):
        acc.cpu.CUDAGraph(pool=handle)   # type: ignore[call-arg]
    with pytest.raises(TypeError):
        acc.cpu.CUDAGraph(capture_error_mode="global")   # type: ignore[call-arg]
    acc.cpu.CUDAGraph(keep_graph=True)
    acc.cpu.CUDAGraph(True)


# ---------------------------------------------------------------------- capture life cycle

def test_capture_must_end_on_its_stream(cpu: str) -> None:
    """torch 2.15 ``CUDAGraph::capture_end``: ``TORCH_CHECK(stream == capture_stream_,
    "Capture must end on the same stream it began on.")``; the capture goes on and ends
    normally on its own stream (``capture_end``, ``capture_end_pre`` and
    ``torch.accelerator.Graph.__exit__``, which calls ``capture_end``)."""
    x = acc.zeros(8, device=cpu)
    began, other = acc.Stream(cpu), acc.Stream(cpu)
    g = acc.cpu.CUDAGraph()
    with began:
        g.capture_begin()
        x.fill_(1.0)
    for end in (g.capture_end, g.capture_end_pre):
        with other, pytest.raises(RuntimeError, match="Capture must end on the same stream"):
            end()
        with pytest.raises(RuntimeError, match="Capture must end on the same stream"):
            end()   # the default stream is current here
    with began:
        assert acc.cpu.is_current_stream_capturing()   # still capturing
        g.capture_end()
    g.replay()
    acc.synchronize(cpu)
    assert x.tolist() == [1.0] * 8

    top = acc.Graph()
    with pytest.raises(RuntimeError, match="Capture must end on the same stream"):
        with began, top:
            x.fill_(2.0)
            acc.set_stream(other)   # leaves another stream current at the end of the body
    with began:
        top.capture_end()
    top.replay()
    acc.synchronize(cpu)
    assert x.tolist() == [2.0] * 8
    top.reset()


def test_capture_when_already_owning_a_graph(cpu: str) -> None:
    """torch 2.15 ``CUDAGraph::capture_begin``: a graph that already owns a captured graph
    refuses a new capture with ``RuntimeError`` "This CUDAGraph instance already owns a
    captured graph"; ``reset()`` makes it capture again (torch.accelerator.Graph.reset)."""
    x = acc.zeros(4, device=cpu)
    g = acc.cpu.CUDAGraph()
    _capture_fill(g, x, 1.0)
    with pytest.raises(RuntimeError, match="already owns a captured graph"):
        g.capture_begin()
    with pytest.raises(RuntimeError, match="already owns a captured graph"):
        _capture_fill(g, x, 2.0)
    assert not acc.cpu.is_current_stream_capturing()
    g.reset()
    _capture_fill(g, x, 3.0)
    g.replay()
    acc.synchronize(cpu)
    assert x.tolist() == [3.0] * 4


def test_nested_captures_on_two_streams(cpu: str) -> None:
    """A capture begun on a second stream while the first captures is its own graph with its
    own private pool (``capture_begin`` takes the current stream; each capture without
    ``pool`` makes an ``(n, 0)`` id); a second capture on the same stream is refused."""
    x, y = acc.zeros(4, device=cpu), acc.zeros(4, device=cpu)
    s1, s2 = acc.Stream(cpu), acc.Stream(cpu)
    outer, inner, third = acc.cpu.CUDAGraph(), acc.cpu.CUDAGraph(), acc.cpu.CUDAGraph()
    with s1:
        outer.capture_begin()
        x.fill_(1.0)
        with pytest.raises(RuntimeError):
            third.capture_begin()   # the stream is capturing already
        with s2:
            inner.capture_begin()
            y.fill_(2.0)
            inner.capture_end()
        outer.capture_end()
    assert outer.pool() != inner.pool()
    assert outer.pool()[0] > 0 and inner.pool()[0] > 0 and outer.pool()[1] == 0
    acc.synchronize(cpu)
    assert x.tolist() == [0.0] * 4 and y.tolist() == [0.0] * 4   # captured, not run
    inner.replay()
    acc.synchronize(cpu)
    assert x.tolist() == [0.0] * 4 and y.tolist() == [2.0] * 4
    outer.replay()
    acc.synchronize(cpu)
    assert x.tolist() == [1.0] * 4


def test_pool_and_replay_outside_a_finished_capture(cpu: str) -> None:
    """torch 2.15: ``pool()`` needs a finished capture ("without a preceding successful
    capture"; during a capture and after ``reset()`` too), and so does ``replay()``."""
    g = acc.cpu.CUDAGraph()
    s = acc.Stream(cpu)
    x = acc.zeros(4, device=cpu)
    with s:
        g.capture_begin()
        x.fill_(1.0)
        with pytest.raises(RuntimeError, match="without a preceding successful capture"):
            g.pool()
        with pytest.raises(RuntimeError, match="without a preceding successful capture"):
            g.replay()
        g.capture_end()
    g.pool()
    g.reset()
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        g.pool()
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        g.replay()


def test_keep_graph_and_debug_mode_defer_instantiation(cpu: str) -> None:
    """torch 2.15 ``CUDAGraph.capture_end``: it instantiates only when ``keep_graph`` is False;
    ``enable_debug_mode()`` sets ``keep_graph`` (the per-graph flag), so the first ``replay``
    instantiates; an explicit ``instantiate()`` may then run again; with ``keep_graph=False``
    a second one is refused ("only when keep_graph=true")."""
    x = acc.zeros(4, device=cpu)
    for make in (lambda: acc.cpu.CUDAGraph(keep_graph=True), acc.cpu.CUDAGraph):
        g = make()
        debug = not g._keep_graph
        if debug:
            g.enable_debug_mode()
        made: list[int] = []
        g.register_post_instantiate_hook(lambda graph: made.append(1))
        _capture_fill(g, x, 4.0)
        assert made == []
        g.replay()
        assert made == [1]
        g.replay()
        assert made == [1]   # instantiated once
        g.instantiate()
        assert made == [1, 1]
        g.reset()
    plain = acc.cpu.CUDAGraph()
    _capture_fill(plain, x, 5.0)
    with pytest.raises(RuntimeError, match="only when keep_graph=true"):
        plain.instantiate()
    acc.synchronize(cpu)


# ---------------------------------------------------------------------- pools

def test_pool_forms_share_one_pool(cpu: str) -> None:
    """torch 2.15 ``_get_pool_id``: a pool is a ``graph_pool_handle()`` token, another graph's
    ``pool()`` or a ``MemPool`` (its ``id``); each graph that captured with it reports it as
    its ``pool()``; anything else is refused."""
    x = acc.zeros(4, device=cpu)
    handle = acc.cpu.graph_pool_handle()
    first, second = acc.cpu.CUDAGraph(), acc.cpu.CUDAGraph()
    _capture_fill(first, x, 1.0, pool=handle)
    _capture_fill(second, x, 2.0, pool=first.pool())
    assert first.pool() == second.pool() == handle
    mp = acc.cpu.MemPool()
    third = acc.cpu.CUDAGraph()
    with acc.Stream(cpu):
        third.capture_begin(pool=mp)
        x.fill_(3.0)
        third.capture_end()
    assert third.pool() == mp.id and third.pools()[0] == mp.id
    top = acc.Graph(pool=mp)
    with acc.Stream(cpu), top:
        x.fill_(4.0)
    assert top.pool() == mp.id
    for bad in ([0, 1], "pool", (0, 1, 2), (0.0, 1)):
        with pytest.raises(TypeError, match="pool must be"):
            acc.cpu.graph(acc.cpu.CUDAGraph(), pool=bad)   # type: ignore[arg-type]
    for g in (first, second, third, top):
        g.reset()


def test_shared_pool_memory_returns_when_every_graph_is_gone(cpu: str) -> None:
    """Note [Interaction with CUDA graph capture] (torch's allocator): a private pool shared
    by two graphs keeps its memory while either graph lives; when both are deleted (and the
    arrays from it freed), ``empty_cache()`` returns it."""
    acc.synchronize(cpu)
    acc.cpu.memory.empty_cache()
    reserved0 = acc.cpu.memory.memory_reserved()
    allocated0 = acc.cpu.memory.memory_allocated()
    s = acc.Stream(cpu)
    first, second = acc.cpu.CUDAGraph(), acc.cpu.CUDAGraph()
    with acc.cpu.graph(first, stream=s):
        a = acc.empty(1 << 16, device=cpu)
        a.fill_(1.0)
    with acc.cpu.graph(second, stream=s, pool=first.pool()):
        b = acc.empty(1 << 16, device=cpu)
        b.fill_(2.0)
    assert acc.cpu.memory.memory_allocated() == allocated0 + 2 * (1 << 18)
    grown = acc.cpu.memory.memory_reserved()
    assert grown > reserved0
    del a, b
    acc.cpu.memory.empty_cache()
    assert acc.cpu.memory.memory_reserved() == grown   # the graphs still hold their pool
    del first
    gc.collect()
    acc.cpu.memory.empty_cache()
    assert acc.cpu.memory.memory_reserved() == grown   # the second graph holds it
    del second
    gc.collect()
    acc.cpu.memory.empty_cache()
    assert acc.cpu.memory.memory_reserved() == reserved0
    assert acc.cpu.memory.memory_allocated() == allocated0


# ---------------------------------------------------------------------- graph() context

def test_graph_context_enter_and_side_stream(cpu: str) -> None:
    """torch 2.15 ``graph``: ``__enter__`` returns None; without ``stream`` every context
    captures on one shared side stream (not the default stream), current only inside the
    block; the context keeps ``cuda_graph``, ``capture_error_mode`` and ``capture_stream``."""
    x = acc.zeros(4, device=cpu)
    g1, g2 = acc.cpu.CUDAGraph(), acc.cpu.CUDAGraph()
    c1, c2 = acc.cpu.graph(g1), acc.cpu.graph(g2, capture_error_mode="relaxed")
    assert c1.capture_stream is c2.capture_stream
    assert c1.capture_stream != acc.cpu.default_stream()
    assert (c1.cuda_graph, c1.capture_error_mode) == (g1, "global")
    assert c2.capture_error_mode == "relaxed"
    before = acc.cpu.current_stream()
    with c1 as entered:
        assert entered is None
        assert acc.cpu.current_stream() == c1.capture_stream
        x.fill_(1.0)
    assert acc.cpu.current_stream() == before
    mine = acc.Stream(cpu)
    with acc.cpu.graph(g2, stream=mine):
        assert acc.cpu.current_stream() == mine
        x.fill_(2.0)
    assert acc.cpu.current_stream() == before
    g1.reset()
    g2.reset()


def test_graph_context_on_the_default_stream(cpu: str) -> None:
    """torch 2.15 ``CUDAGraph::capture_begin``: "CUDA graphs must be captured on a non-default
    stream"; ``graph(stream=<default stream>)`` fails on entry and leaves nothing capturing."""
    g = acc.cpu.CUDAGraph()
    with pytest.raises(RuntimeError, match="must be captured on a non-default stream"):
        with acc.cpu.graph(g, stream=acc.cpu.default_stream()):
            pass
    assert not acc.cpu.is_current_stream_capturing()
    with pytest.raises(RuntimeError, match="must be captured on a non-default stream"):
        with acc.Graph():   # torch.accelerator.Graph captures on the current stream
            pass
    x = acc.zeros(4, device=cpu)
    _capture_fill(g, x, 1.0)   # the graph is still usable
    g.replay()
    acc.synchronize(cpu)
    assert x.tolist() == [1.0] * 4


def test_accelerator_graph_body_error_still_ends_capture(cpu: str) -> None:
    """torch 2.15 ``torch.accelerator.Graph.__exit__`` calls ``capture_end`` whatever the body
    did: the body's exception propagates and the graph holds the work captured before it."""
    x = acc.zeros(4, device=cpu)
    g = acc.Graph()
    with pytest.raises(KeyError):
        with acc.Stream(cpu), g:
            x.fill_(7.0)
            raise KeyError("body")
    assert not acc.cpu.is_current_stream_capturing()
    g.replay()
    acc.synchronize(cpu)
    assert x.tolist() == [7.0] * 4


# ---------------------------------------------------------------------- capture_error_mode

def test_capture_error_modes_in_the_capturing_thread_and_others(cpu: str) -> None:
    """``cudaStreamCaptureMode`` as torch's ``capture_error_mode`` documents it: "global"
    errors on unsafe calls in every thread, "thread_local" only in the capturing thread,
    "relaxed" nowhere (a device-wide synchronize is the unsafe call); accelrt's "default" is
    the cpu backend's own mode, global."""
    x = acc.zeros(4, device=cpu)
    refused = {"global": (True, True), "default": (True, True),
               "thread_local": (True, False), "relaxed": (False, False)}
    for mode, (own_refused, other_refused) in refused.items():
        g, s = acc.cpu.CUDAGraph(), acc.Stream(cpu)
        other: list[bool] = []

        def sync_elsewhere(out: list[bool] = other) -> None:
            try:
                acc.synchronize(cpu)
                out.append(False)
            except RuntimeError:
                out.append(True)

        with s:
            g.capture_begin(capture_error_mode=mode)
            x.fill_(1.0)
            try:
                acc.synchronize(cpu)
                own = False
            except RuntimeError:
                own = True
            thread = threading.Thread(target=sync_elsewhere)
            thread.start()
            thread.join()
            g.capture_end()
        assert (own, other[0]) == (own_refused, other_refused), mode
        g.reset()


# ---------------------------------------------------------------------- RNG

def test_register_generator_state_takes_a_generator(cpu: str) -> None:
    """torch 2.15 ``CUDAGraph.register_generator_state``: a generator (its graph-safe state
    from ``graphsafe_get_state()`` is one too) is accepted; another object is a
    ``TypeError``."""
    g = acc.cpu.CUDAGraph()
    gen = acc.cpu.default_generators[0]
    g.register_generator_state(gen.graphsafe_get_state())
    with pytest.raises(TypeError):
        g.register_generator_state(object())   # type: ignore[arg-type]
