"""torch 2.14's graph API (issue 23 §1): ``accelrt.Graph`` as ``torch.accelerator.Graph``
(``with g:`` captures), the device modules' ``CUDAGraph`` (``keep_graph``, ``instantiate``,
raw handles, per-graph hooks), ``torch.cuda.graphs``' module-level hooks, DOT export,
``Stream.is_capturing`` and the ``graphs`` submodules; on every backend (opencl: no capture).
"""

from __future__ import annotations

import dataclasses
import contextlib
import gc
import importlib
import inspect
import re
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.params import backend_params

import accelrt as acc
from accelrt import _backend as registry
from accelrt.backends.cpu import CpuBackend

CUDA_REASON = registry.unavailable_reason("cuda")


@pytest.fixture(params=backend_params(["cpu", "opencl", "cuda"]))
def dev(request: pytest.FixtureRequest) -> Iterator[str]:
    acc.set_current_accelerator(request.param)
    acc.set_device_index(0)
    yield request.param
    acc.synchronize(request.param)


def _capture_or_skip(dev: str) -> None:
    """On a backend without graphs, ``with stream, Graph():`` refuses clearly; skip the rest."""
    if acc.current_stream(dev)._b.graph_supported(0):
        return
    s = acc.Stream(dev)
    with pytest.raises(acc.CaptureNotSupportedError, match="cannot capture graphs"), s, \
            acc.Graph():
        pass
    assert not s.is_capturing()
    pytest.skip(f"the {dev} backend cannot capture graphs (refused as checked)")


# ---------------------------------------------------------------------- torch.accelerator.Graph

def test_graph_signature_is_torch_accelerator_graph() -> None:
    sig = inspect.signature(acc.Graph)
    assert str(sig) == ("(keep_graph: 'bool' = False, *, pool: 'PoolLike' = None, "
                        "capture_error_mode: 'str' = 'default') -> 'None'")
    assert list(inspect.signature(acc.Graph.capture_begin).parameters) == ["self"]
    for mode in ("default", "global", "thread_local", "relaxed"):
        g = acc.Graph(capture_error_mode=mode)
        assert g.capture_error_mode == mode and g.graph_pool is None
    with pytest.raises(ValueError, match=r"capture_error_mode must be one of .*'relaxed'"):
        acc.Graph(capture_error_mode="strict")
    with pytest.raises(TypeError, match="keep_graph must be a bool"):
        acc.Graph("yes")                      # type: ignore[arg-type]
    with pytest.raises(TypeError, match="pool must be"):
        acc.Graph(pool="mine")
    with pytest.raises(TypeError):
        acc.Graph(False, None)                # type: ignore[misc] - pool is keyword-only


def test_with_graph_captures_on_the_current_stream(dev: str) -> None:
    _capture_or_skip(dev)
    x = acc.zeros(4, device=dev)
    y = acc.full(4, 2.0, device=dev)
    s = acc.Stream(dev)
    g = acc.Graph()
    with s, g as entered:
        assert entered is None                # torch's __enter__ returns None
        assert s.is_capturing() and acc.current_stream(dev) == s
        _ = x.copy_(y)
    assert not s.is_capturing() and not g.is_closed
    assert x.tolist() == [0.0] * 4            # captured, not run
    g.replay()
    acc.synchronize(dev)
    assert x.tolist() == [2.0] * 4
    g.reset()
    with pytest.raises(RuntimeError, match="non-default stream"), g:
        pass                                  # the default stream cannot capture
    with contextlib.closing(g):               # closing moved to contextlib.closing
        pass
    assert g.is_closed
    x.close()
    s.close()


def test_graph_pool_from_the_constructor_is_shared(dev: str) -> None:
    _capture_or_skip(dev)
    s = acc.Stream(dev)
    g1 = acc.Graph()
    with s, g1:
        a = acc.full(64, 1.0, device=dev)
    g2 = acc.Graph(pool=g1.pool())
    with s, g2:
        b = acc.full(64, 2.0, device=dev)
    assert g2.pool() == g1.pool()
    del a, b
    g1.reset()
    g2.reset()
    s.close()


def test_keep_graph_defers_instantiation_to_instantiate_or_replay(dev: str) -> None:
    _capture_or_skip(dev)
    mod = getattr(acc, dev)
    made: list[Any] = []
    x = acc.zeros(4, device=dev)
    g = mod.Graph(keep_graph=True)
    g.register_post_instantiate_hook(made.append)
    with pytest.raises(RuntimeError, match=r"capture_end\(\) must have been called"):
        g.instantiate()
    with mod.graph(g):
        _ = x.fill_(5.0)
    assert made == []                         # keep_graph: capture_end did not instantiate
    g.replay()                                # ... the first replay does
    assert made == [g]
    g.instantiate()                           # and, kept, it can be instantiated again
    g.replay()
    acc.synchronize(dev)
    assert made == [g, g] and x.tolist() == [5.0] * 4

    eager = mod.Graph()
    eager.register_post_instantiate_hook(made.append)
    with mod.graph(eager):
        _ = x.fill_(6.0)
    assert made[-1] is eager and len(made) == 3   # keep_graph=False: capture_end did
    with pytest.raises(RuntimeError, match="only when keep_graph=true"):
        eager.instantiate()
    eager.enable_debug_mode()                 # == keep_graph=True from now on
    eager.instantiate()
    g.reset()
    eager.reset()
    x.close()


# ---------------------------------------------------------------------- DOT

def _dot_nodes(text: str) -> list[str]:
    return re.findall(r'^\s+n\d+ \[label="([^"]*)"\];$', text, flags=re.MULTILINE)


def test_debug_dump_writes_the_recorded_nodes_as_dot(dev: str, tmp_path: Path) -> None:
    _capture_or_skip(dev)
    x = acc.zeros(4, device=dev)
    s = acc.Stream(dev)
    g = acc.Graph()
    g.enable_debug_mode()
    y = acc.full(4, 2.0, device=dev)
    with s, g:
        _ = x.fill_(1.0)
        _ = x.copy_(y)
    path = tmp_path / "g.dot"
    g.debug_dump(path)
    text = path.read_text(errors="replace")
    assert text.lstrip().startswith("digraph")
    if dev == "cpu":                          # our own DOT: one node per recorded operation
        assert [n.split("\\n")[0] for n in _dot_nodes(text)] == ["0: call _fill",
                                                                  "1: call memmove"]
        assert "n0 -> n1;" in text
    plain = acc.Graph()
    with s, plain:
        _ = x.fill_(1.0)
    with pytest.raises(RuntimeError, match="keep_graph=True or call enable_debug_mode"):
        plain.debug_dump(tmp_path / "no.dot")
    assert not (tmp_path / "no.dot").exists()
    g.reset()
    plain.reset()
    s.close()
    x.close()


def test_export_dot_hook_dumps_a_graph_that_is_not_kept(dev: str, tmp_path: Path) -> None:
    _capture_or_skip(dev)
    mod = getattr(acc, dev)
    x = acc.zeros(4, device=dev)
    g = mod.Graph()                           # keep_graph=False
    g.register_capture_end_hook(mod.graphs.export_dot(tmp_path / "g.dot", verbose=False))
    with mod.graph(g):
        _ = x.fill_(1.0)
    assert (tmp_path / "g.dot").read_text(errors="replace").lstrip().startswith("digraph")
    with pytest.raises(RuntimeError, match="no captured graph"):
        g.debug_dump(tmp_path / "after.dot")  # dropped once instantiated, as in torch
    g.reset()
    x.close()


def test_dot_on_a_backend_without_dot_is_a_clear_error(tmp_path: Path) -> None:
    registry.register("cpunodot", lambda: CpuBackend(name="cpunodot"), replace=True)
    try:
        b = registry.get_backend("cpunodot")
        b._caps = dataclasses.replace(b._caps, graph_dot=False)      # graphs, but no DOT
        acc.set_current_accelerator("cpunodot")
        x = acc.zeros(4, device="cpunodot")
        g = acc.Graph(keep_graph=True)
        with acc.Stream("cpunodot"), g:
            _ = x.fill_(1.0)
        with pytest.raises(acc.CaptureNotSupportedError, match="graph_dot is False"):
            g.debug_dump(tmp_path / "g.dot")
        g.close()
        x.close()
    finally:
        acc.set_current_accelerator("cpu")
        registry.unregister("cpunodot")


def test_raw_handles_refused_with_torch_messages() -> None:
    # torch 2.15 (libtorch_cuda's strings): raw_cuda_graph() without a kept graph says "No
    # cudaGraph_t is available: ...", raw_cuda_graph_exec() before instantiate() "You cannot
    # access the raw cudaGraphExec_t instance until instantiate() has been called"; checked
    # here on a cpu backend that claims native handles (the refusals come first)
    registry.register("cpuraw", lambda: CpuBackend(name="cpuraw"), replace=True)
    try:
        b = registry.get_backend("cpuraw")
        b._caps = dataclasses.replace(b._caps, graph_native_handles=True)
        acc.set_current_accelerator("cpuraw")
        x = acc.zeros(4, device="cpuraw")
        from accelrt._graph import DeviceGraph

        class RawGraph(DeviceGraph):   # a device module's graph class for this backend
            _backend_name = "cpuraw"

        g = RawGraph()
        with pytest.raises(RuntimeError, match=re.escape(
                "No cudaGraph_t is available: either capture_end() has not been called, or "
                "the underlying cudaGraph_t was destroyed (keep_graph=false, and capture has "
                "been finalized).")):
            g.raw_cuda_graph()
        with pytest.raises(RuntimeError, match=r"^You cannot access the raw cudaGraphExec_t "
                                               r"instance until instantiate\(\) has been called"):
            g.raw_cuda_graph_exec()
        with acc.Stream("cpuraw"), g:
            _ = x.fill_(1.0)
        with pytest.raises(RuntimeError, match=r"^No cudaGraph_t is available"):
            g.raw_cuda_graph()                      # keep_graph=False: dropped at the end
        g.close()
        x.close()
    finally:
        acc.set_current_accelerator("cpu")
        registry.unregister("cpuraw")


# ---------------------------------------------------------------------- device modules

def test_device_graph_signatures_are_torch_cuda() -> None:
    for cls in (acc.cpu.Graph, acc.cuda.CUDAGraph, acc.opencl.Graph):
        assert str(inspect.signature(cls)) == "(keep_graph: 'bool' = False) -> 'None'"
        assert list(inspect.signature(cls.capture_begin).parameters) == [
            "self", "pool", "capture_error_mode", "check_input_liveness"]
        assert list(inspect.signature(cls.debug_dump).parameters) == [
            "self", "debug_path", "verbose"]
        for name in ("instantiate", "raw_cuda_graph", "raw_cuda_graph_exec", "capture_end_pre",
                     "capture_end_post", "pools", "register_capture_start_hook",
                     "register_capture_end_hook", "register_post_instantiate_hook",
                     "register_replay_start_hook", "register_replay_end_hook"):
            assert callable(getattr(cls, name)), name
    assert list(inspect.signature(acc.cpu.graph).parameters) == [
        "cuda_graph", "pool", "stream", "capture_error_mode", "enable_annotations",
        "annotation_config", "check_input_liveness"]
    g = acc.cpu.Graph()
    for kw in ("enable_annotations", "check_input_liveness"):
        with pytest.raises(ValueError, match=f"{kw}=True is not supported"):
            acc.cpu.graph(g, **{kw: True})
    with pytest.raises(ValueError, match="check_input_liveness=True is not supported"):
        g.capture_begin(check_input_liveness=True)
    with pytest.raises(ValueError, match="capture_error_mode"):
        acc.cpu.graph(g, capture_error_mode="strict")


@pytest.mark.parametrize("config", [
    None, {}, {"key_by": "source"}, {"backend": "cupti", "record_py_stacks": True},
    {"py_stack_filter_paths": ("a/", "b")}, {"py_stack_filter_paths": None}])
def test_graph_annotation_config_accepted_as_torch_2_15(config: Any) -> None:
    # torch 2.15's graph(annotation_config=): checked even while annotations are off, then
    # unused; positional between enable_annotations and check_input_liveness
    g = acc.cpu.Graph()
    x = acc.zeros(4, device="cpu")
    with acc.cpu.graph(g, None, None, "global", False, config):
        _ = x.fill_(1.0)
    g.replay()
    assert x.numpy().tolist() == [1.0] * 4


@pytest.mark.parametrize(("config", "match"), [
    ({"bad": 1}, r"unrecognized annotation_config key\(s\) \['bad'\]"),
    ({"backend": "x"}, r"annotation_config\['backend'\] must be one of"),
    ({"key_by": None}, r"annotation_config\['key_by'\] must be one of"),
    ({"py_stack_filter_paths": [""]}, "nonempty path strings"),
    ({"py_stack_filter_paths": "a/"}, "nonempty path strings"),
    ({"record_py_stacks": True, "backend": "edge_walk"}, "requires the CUPTI"),
])
def test_graph_annotation_config_refused_as_torch_2_15(config: Any, match: str) -> None:
    g = acc.cpu.Graph()
    with pytest.raises(ValueError, match=match):
        acc.cpu.graph(g, annotation_config=config)
    with pytest.raises(TypeError, match="annotation_config must be a dict or None"):
        acc.cpu.graph(g, annotation_config=5)   # type: ignore[arg-type]
    x = acc.zeros(2, device="cpu")
    with acc.cpu.graph(g):          # a refused context left the graph free to capture
        _ = x.fill_(2.0)
    g.replay()
    assert x.numpy().tolist() == [2.0, 2.0]


def test_raw_handles_need_cuda_elsewhere_a_clear_error() -> None:
    acc.set_current_accelerator("cpu")
    g = acc.cpu.Graph(keep_graph=True)
    x = acc.zeros(4, device="cpu")
    with acc.cpu.graph(g):
        _ = x.fill_(1.0)
    for raw in (g.raw_cuda_graph, g.raw_cuda_graph_exec):
        with pytest.raises(acc.CaptureNotSupportedError, match="no native graph handles"):
            raw()
    g.reset()
    x.close()


def test_capture_end_pre_and_post(tmp_path: Path) -> None:
    acc.set_current_accelerator("cpu")
    x = acc.zeros(4, device="cpu")
    g = acc.cpu.Graph()
    s = acc.cpu.Stream()
    with s:
        g.capture_begin()
        _ = x.fill_(1.0)
        g.capture_end_pre()
    g.debug_dump(tmp_path / "g.dot")          # readable between pre and post
    with pytest.raises(RuntimeError, match="instantiate"):
        g.capture_end_post()                  # keep_graph=False: instantiate first
    g.instantiate()
    g.capture_end_post()
    with pytest.raises(RuntimeError, match="no captured graph"):
        g.debug_dump(tmp_path / "g2.dot")
    assert g.pools() == [g.pool()]
    g.reset()
    x.close()
    s.close()


# ---------------------------------------------------------------------- hooks

@pytest.fixture
def hooks() -> Iterator[tuple[list[tuple[str, Any]], list[Any]]]:
    """Every cpu module-level graph hook, recording (kind, argument)."""
    seen: list[tuple[str, Any]] = []
    handles = []
    for kind in ("capture_start", "capture_end", "instantiate", "replay_start", "replay_end",
                 "destroy"):
        reg = getattr(acc.cpu.graphs, f"register_graph_{kind}_hook")
        handles.append(reg(lambda arg, kind=kind: seen.append((kind, arg))))
    yield seen, handles
    for h in handles:
        h.remove()


def test_module_hooks_fire_in_torch_order(hooks: tuple[list[tuple[str, Any]], list[Any]]
                                          ) -> None:
    seen, handles = hooks
    acc.set_current_accelerator("cpu")
    x = acc.zeros(4, device="cpu")
    g = acc.cpu.Graph()
    with acc.cpu.graph(g):
        assert seen == [("capture_start", g)]
        _ = x.fill_(1.0)
    assert seen[1:] == [("capture_end", g), ("instantiate", g)]
    g.replay()
    assert seen[3:] == [("replay_start", g), ("replay_end", g)]
    g.reset()
    kind, exec_ids = seen[5]
    assert kind == "destroy" and isinstance(exec_ids, set) and len(exec_ids) == 1
    # accelrt.Graph on the cpu backend runs them too; a failing module hook is ignored
    failing = acc.cpu.graphs.register_graph_replay_start_hook(lambda g: 1 / 0)
    a = acc.Graph()
    with acc.Stream("cpu"), a:
        _ = x.fill_(2.0)
    a.replay()
    failing.remove()
    assert [k for k, _ in seen[6:]] == ["capture_start", "capture_end", "instantiate",
                                        "replay_start", "replay_end"]
    for h in handles:
        h.remove()
    del seen[:]
    a.replay()
    assert seen == []                         # removed
    a.close()
    x.close()


def test_destroy_hook_runs_when_a_graph_is_collected(
        hooks: tuple[list[tuple[str, Any]], list[Any]]) -> None:
    seen, _ = hooks
    acc.set_current_accelerator("cpu")
    x = acc.zeros(4, device="cpu")
    g = acc.cpu.Graph(keep_graph=True)
    with acc.cpu.graph(g):
        _ = x.fill_(1.0)
    g.instantiate()
    g.instantiate()
    del g, seen[:]                            # seen held the graph too
    gc.collect()
    destroyed = [arg for kind, arg in seen if kind == "destroy"]
    assert len(destroyed) == 1 and len(destroyed[0]) == 2   # two executable graphs
    x.close()


def test_per_graph_hooks_propagate_errors_and_balance_replay() -> None:
    acc.set_current_accelerator("cpu")
    x = acc.zeros(4, device="cpu")
    g = acc.cpu.Graph()
    with acc.cpu.graph(g):
        _ = x.fill_(1.0)
    ends: list[object] = []
    g.register_replay_end_hook(ends.append)
    h = g.register_replay_start_hook(lambda g: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        g.replay()                            # a start hook's error aborts before launch
    assert ends == []
    h.remove()
    with h:                                   # removing twice (here: with) does nothing
        pass
    g.replay()
    assert ends == [g]
    g.reset()
    x.close()


def test_hooks_are_per_backend() -> None:
    registry.register("cpuhooks", lambda: CpuBackend(name="cpuhooks"), replace=True)
    seen: list[object] = []
    h = acc.cpu.graphs.register_graph_capture_start_hook(seen.append)
    try:
        acc.set_current_accelerator("cpuhooks")
        x = acc.zeros(4, device="cpuhooks")
        g = acc.Graph()
        with acc.Stream("cpuhooks"), g:
            _ = x.fill_(1.0)
        assert seen == []                     # a cpuhooks graph: the cpu hooks do not run
        g.close()
        x.close()
    finally:
        h.remove()
        acc.set_current_accelerator("cpu")
        registry.unregister("cpuhooks")


# ---------------------------------------------------------------------- streams, modules

def test_every_stream_has_is_capturing(dev: str) -> None:
    s = acc.Stream(dev)
    assert s.is_capturing() is False
    assert getattr(acc, dev).Stream().is_capturing() is False
    assert getattr(acc, dev).is_current_stream_capturing() is False
    if s._b.graph_supported(0):
        g = acc.Graph()
        x = acc.zeros(4, device=dev)
        with s, g:
            assert s.is_capturing() and getattr(acc, dev).is_current_stream_capturing()
            _ = x.fill_(1.0)
        g.close()
    s.close()
    with pytest.raises(acc.ClosedError):
        s.is_capturing()


#: torch.cuda.graphs.__all__ (torch 2.14) less what needs PyTorch's autograd/tools ids
#: (docs/differences.md): make_graphed_callables, export_graph_data
TORCH_CUDA_GRAPHS = {
    "is_current_stream_capturing", "graph_pool_handle", "CUDAGraph", "graph", "export_dot",
    "register_graph_capture_start_hook", "register_graph_capture_end_hook",
    "register_graph_instantiate_hook", "register_graph_replay_start_hook",
    "register_graph_replay_end_hook", "register_graph_destroy_hook"}


@pytest.mark.parametrize("mod", ["cpu", "cuda", "opencl"])
def test_graphs_submodule_of_every_device_module(mod: str) -> None:
    graphs = importlib.import_module(f"accelrt.{mod}.graphs")
    device_module = getattr(acc, mod)
    assert graphs is device_module.graphs and set(graphs.__all__) == TORCH_CUDA_GRAPHS
    assert graphs.CUDAGraph is device_module.Graph and graphs.graph is device_module.graph
    for name in graphs.__all__:
        assert callable(getattr(graphs, name)), name
    assert graphs.is_current_stream_capturing() is False


def test_accelrt_graphs_is_torch_accelerator_graphs() -> None:
    import accelrt.graphs
    assert accelrt.graphs.Graph is acc.Graph and accelrt.graphs.__all__ == ["Graph", "generate_graph_pool_handle"]
    assert acc.graphs is accelrt.graphs


# ---------------------------------------------------------------------- CUDA (GPU)

@pytest.mark.skipif(CUDA_REASON is not None, reason=f"needs a CUDA GPU: {CUDA_REASON}")
def test_cuda_graph_raw_handles_and_dot_on_the_gpu(tmp_path: Path) -> None:
    acc.set_current_accelerator("cuda")
    x = acc.zeros(256, device="cuda")
    g = acc.cuda.CUDAGraph(keep_graph=True)
    with acc.cuda.graph(g):
        _ = x.fill_(3.0)
    raw = g.raw_cuda_graph()
    assert isinstance(raw, int) and raw != 0
    with pytest.raises(RuntimeError, match="until instantiate"):
        g.raw_cuda_graph_exec()
    g.instantiate()
    first = g.raw_cuda_graph_exec()
    g.instantiate()                           # made before the first one is destroyed
    assert first != 0 and g.raw_cuda_graph_exec() not in (0, first)
    g.debug_dump(tmp_path / "g.dot")
    assert "digraph" in (tmp_path / "g.dot").read_text(errors="replace")
    g.replay()
    acc.synchronize("cuda")
    assert x.tolist() == [3.0] * 256
    g.reset()
    x.close()


# ---------------------------------------------------------------------- torch.cuda names

def test_default_capture_stream_and_torch_cuda_names(dev: str) -> None:
    mod = getattr(acc, dev)
    assert mod.CUDAGraph is mod.Graph and mod.export_dot is mod.graphs.export_dot
    assert mod.graph.default_capture_stream is None
    _capture_or_skip(dev)
    s = acc.Stream(dev)
    mod.graph.default_capture_stream = s      # torch.cuda.graph's class attribute
    try:
        x = acc.zeros(4, device=dev)
        g = mod.CUDAGraph()
        ctx = mod.graph(g)
        assert ctx.capture_stream is s
        with ctx:
            assert acc.current_stream(dev) == s and s.is_capturing()
            _ = x.fill_(2.0)
        g.replay()
        acc.synchronize(dev)
        assert x.tolist() == [2.0] * 4
        assert mod.graph(mod.CUDAGraph(), stream=acc.Stream(dev)).capture_stream != s
        mod.graph.default_capture_stream = "s"   # type: ignore[assignment]
        with pytest.raises(TypeError, match="default_capture_stream must be an accelrt"):
            mod.graph(mod.CUDAGraph())
        other = "cpu" if dev != "cpu" else _other_cpu()
        mod.graph.default_capture_stream = acc.Stream(other)
        with pytest.raises(ValueError, match=f"captures {dev} work"):
            mod.graph(mod.CUDAGraph())
    finally:
        mod.graph.default_capture_stream = None
    assert mod.graph(mod.CUDAGraph()).capture_stream != s   # None: the per-device side stream
    g.reset()
    x.close()


def _other_cpu() -> str:
    name = "gt214other"
    if name not in registry.registered():
        acc.backends.register(name, lambda: CpuBackend(num_devices=1, name=name))
    return name


# ---------------------------------------------------------------------- destroy callbacks

def _captured_async_graph() -> tuple[Any, Any, Any, Any]:
    """A graph captured on an asynchronous cpu backend, its module, a side stream and the
    array its work fills (kept alive by the caller: the graph does not own it)."""
    from accelrt import backends
    backends.register("cpugdestroy", lambda: CpuBackend(num_devices=1, async_streams=True,
                                                        name="cpugdestroy"), replace=True)
    mod = backends.device_module("cpugdestroy")
    x = acc.zeros(4, device="cpugdestroy:0")
    g = mod.CUDAGraph()
    s = mod.Stream("cpugdestroy:0")
    with mod.graph(g, stream=s):
        x.fill_(2.0)
    return g, mod, s, x


def test_destroy_callbacks_fire_once_per_cycle_in_order_and_release_objects() -> None:
    g, mod, _, x = _captured_async_graph()
    seen: list[str] = []

    def boom() -> None:
        seen.append("boom")
        raise RuntimeError("ignored, as in torch")

    g.register_destroy_callback(lambda: seen.append("a"))
    g.register_destroy_callback(boom)
    h = g.register_destroy_callback(lambda: seen.append("removed"))
    h.remove()
    g.register_destroy_callback(lambda: seen.append("c"))

    class Obj:
        pass

    o = Obj()
    ref = weakref.ref(o)
    g.retain_object(o)
    early = Obj()
    early_ref = weakref.ref(early)
    g.retain_object(early).remove()
    del o, early
    assert ref() is not None and early_ref() is None   # retained until the graph goes
    g.replay()
    g.reset()
    assert seen == ["a", "boom", "c"] and ref() is None
    g.reset()                                           # a new cycle: nothing left to fire
    assert seen == ["a", "boom", "c"]
    g.register_destroy_callback(lambda: seen.append("collected"))
    del g
    gc.collect()
    assert seen[-1] == "collected"
    acc.synchronize("cpugdestroy:0")
    assert x.numpy().tolist() == [2.0] * 4
    with pytest.raises(TypeError, match="must be callable"):
        mod.CUDAGraph().register_destroy_callback(42)
    with pytest.raises(TypeError, match="synchronize_before_release must be a bool"):
        mod.CUDAGraph().retain_object(1, synchronize_before_release="yes")
    closed = mod.CUDAGraph()
    closed.close()
    with pytest.raises(acc.ClosedError):
        closed.register_destroy_callback(lambda: None)


@pytest.mark.parametrize("sync", [True, False], ids=["synchronized", "not-synchronized"])
def test_destroy_callbacks_wait_for_replays_only_when_asked(sync: bool) -> None:
    from helpers.gates import Gate, open_when_blocked
    g, _, s, x = _captured_async_graph()
    done_when_fired: list[bool] = []
    g.register_destroy_callback(lambda: done_when_fired.append(s.query()),
                                synchronize_before_release=sync)
    gate = Gate()
    with gate:
        s._b.launch_host_func(0, gate, s.stream_id)   # the replay waits behind the gate
        with s:
            g.replay()
        if sync:
            with open_when_blocked(gate):
                g.reset()                              # blocks on the stream until the gate opens
        else:
            g.reset()
    s.synchronize()
    assert done_when_fired == [sync]
    assert x.numpy().tolist() == [2.0] * 4


def test_generate_graph_pool_handle_shares_one_pool_between_graphs() -> None:
    import accelrt.graphs
    assert accelrt.graphs.generate_graph_pool_handle is acc.generate_graph_pool_handle
    assert "generate_graph_pool_handle" in acc.__all__
    pool = acc.generate_graph_pool_handle()
    assert pool != acc.generate_graph_pool_handle() and isinstance(pool, tuple)
    x, y = acc.zeros(4, device="cpu"), acc.zeros(4, device="cpu")
    g0, g1 = acc.Graph(pool=pool), acc.Graph(pool=pool)
    with acc.Stream("cpu"), g0:
        x.fill_(1.0)
    with acc.Stream("cpu"), g1:
        y.fill_(2.0)
    assert g0.pool() == g1.pool()
    g0.replay()
    g1.replay()
    acc.synchronize("cpu")
    assert x.numpy().tolist() == [1.0] * 4 and y.numpy().tolist() == [2.0] * 4


def test_a_capture_start_hook_that_raises_ends_the_capture() -> None:
    """The hook's error propagates, and the capture it interrupted does not stay live: the
    stream could not be synchronized or capture again otherwise."""
    x = acc.zeros(4, device="cpu")
    s = acc.Stream("cpu")
    g = acc.cpu.CUDAGraph()
    g.register_capture_start_hook(lambda _: 1 / 0)
    with pytest.raises(ZeroDivisionError), s, g:
        x.fill_(1.0)
    assert not s.is_capturing()
    s.synchronize()
    g2 = acc.cpu.Graph()
    with s, g2:
        x.fill_(2.0)
    g2.replay()
    s.synchronize()
    with pytest.raises(RuntimeError, match="replay"):
        g.replay()   # the aborted capture left nothing to replay
