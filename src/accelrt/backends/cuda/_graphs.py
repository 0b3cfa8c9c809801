"""Graph capture on CUDA: the graphs part of :class:`~accelrt.backends.cuda.CudaBackend`.

``cuStreamBeginCapture``/``cuStreamEndCapture`` on a stream of the streams part
(:class:`~._streams.CudaStreams`, whose capturing streams and lock this part shares, since its
stream and event operations refuse or relax work on a capturing stream), then
``cuGraphInstantiate``/``cuGraphLaunch``/``cuGraphDestroy`` of the captured ``CUgraph``.

Example::

    >>> from accelrt.backends.cuda._graphs import CudaGraphs
    >>> CudaGraphs.__name__
    'CudaGraphs'
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..._errors import DeviceError
from ..._handles import GraphHandle, StreamHandle
from ._cu import as_handle, check
from ._streams import _SPECIAL_STREAMS, CudaStreams

if TYPE_CHECKING:
    from ._backend import _Device

__all__ = ["CudaGraphs", "capture_mode", "exec_graph_id", "instantiate_flags"]


def instantiate_flags(drv: Any) -> int:
    """``cuGraphInstantiate``'s flags, PyTorch's (``CUDAGraph::instantiate``):
    ``AUTO_FREE_ON_LAUNCH``, so a graph whose captured stream-ordered allocations
    (``backend:cudaMallocAsync``) outlive a replay, such as its outputs, can be replayed again
    (without it the second ``cuGraphLaunch`` fails with ``CUDA_ERROR_INVALID_VALUE``), and
    ``USE_NODE_PRIORITY``: kernels run at the priority of the stream they were captured on.

    Example::

        >>> from accelrt.backends.cuda._graphs import instantiate_flags
        >>> from accelrt.backends.cuda._cu import load_driver
        >>> drv = load_driver()
        >>> drv is None or instantiate_flags(drv) == 1 | 8
        True
    """
    f = drv.CUgraphInstantiate_flags
    return (int(f.CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH)
            | int(f.CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY))


def exec_graph_id(drv: Any, exe: Any) -> int:
    """The id of the executable graph ``exe`` (a ``CUgraphExec``): ``cuGraphExecGetId``, the
    id ``cuGraphDebugDotPrint`` prints, where the bindings have it (cuda-bindings 13, CUDA
    13.0's driver API); with cuda-bindings 12, which lack it, the ``CUgraphExec`` handle's
    value, unique among live executable graphs.

    Example::

        >>> import types
        >>> from accelrt.backends.cuda._graphs import exec_graph_id
        >>> exec_graph_id(types.SimpleNamespace(), 0x5000)   # bindings without cuGraphExecGetId
        20480
    """
    get_id = getattr(drv, "cuGraphExecGetId", None)
    if get_id is None:
        return int(exe)
    return int(check(get_id(exe), "cuGraphExecGetId"))


#: ``capture_error_mode`` -> the name of its ``CUstreamCaptureMode`` value
_CAPTURE_MODES = {"global": "CU_STREAM_CAPTURE_MODE_GLOBAL",
                  "thread_local": "CU_STREAM_CAPTURE_MODE_THREAD_LOCAL",
                  "relaxed": "CU_STREAM_CAPTURE_MODE_RELAXED"}


def capture_mode(drv: Any, mode: str) -> Any:
    """The ``CUstreamCaptureMode`` of a capture mode name (PyTorch's ``capture_error_mode``
    other than ``"default"``).

    Raises:
        ValueError: not ``"global"``, ``"thread_local"`` or ``"relaxed"``.

    Example::

        >>> import types
        >>> from accelrt.backends.cuda._graphs import capture_mode
        >>> modes = types.SimpleNamespace(CU_STREAM_CAPTURE_MODE_RELAXED=2)
        >>> capture_mode(types.SimpleNamespace(CUstreamCaptureMode=modes), "relaxed")
        2
    """
    name = _CAPTURE_MODES.get(mode) if type(mode) is str else None
    if name is None:
        raise ValueError(f"capture mode must be one of {tuple(_CAPTURE_MODES)}, got {mode!r}")
    return getattr(drv.CUstreamCaptureMode, name)


class CudaGraphs:
    """The captured graphs of one CUDA backend (a part it holds and delegates to).

    Args:
        drv: the driver bindings.
        use: makes a device's primary context current and returns its state.
        streams: the backend's streams part (stream checks, capturing streams and their lock).
    """

    def __init__(self, drv: Any, use: Callable[[int], _Device], streams: CudaStreams) -> None:
        self._drv = drv
        self._use = use
        self._streams = streams
        self._capturing = streams._capturing        # the same dict: stream -> device index
        self._graph_lock = streams._graph_lock
        #: CUgraph handle -> [index, CUgraph, CUgraphExec or None]; guarded by _graph_lock
        self._graphs: dict[int, list[Any]] = {}

    # ------------------------------------------------------------------ graphs
    def graph_capture_begin(self, index: int, stream: StreamHandle, mode: str = "global") -> None:
        """``cuStreamBeginCapture`` in capture ``mode`` (``"global"``, as
        ``CUDAGraph.capture_begin``'s default, ``"thread_local"`` or ``"relaxed"``), kept with
        the calling thread for :meth:`~._streams.CudaStreams.synchronize`'s refusal."""
        cu_mode = capture_mode(self._drv, mode)
        stream = self._streams.check_stream(self._use(index), stream)
        if stream in _SPECIAL_STREAMS:
            raise DeviceError("cuda: graphs must be captured on a non-default stream; "
                              "capture on a stream made with accelrt.Stream()")
        with self._graph_lock:
            if stream in self._capturing:
                raise DeviceError(f"cuda: stream {stream:#x} is already capturing; end that "
                                  "capture first")
            check(self._drv.cuStreamBeginCapture(stream, cu_mode), "cuStreamBeginCapture")
            self._capturing[stream] = index
            self._streams._capture_modes[stream] = (threading.get_ident(), mode)

    def graph_capture_end(self, index: int, stream: StreamHandle) -> GraphHandle:
        stream = self._streams.check_stream(self._use(index), stream)
        drv = self._drv
        with self._graph_lock:
            if self._capturing.get(stream) != index:
                raise DeviceError(f"cuda: stream {stream:#x} of cuda:{index} is not capturing; "
                                  "call graph_capture_begin first")
            del self._capturing[stream]
            self._streams._capture_modes.pop(stream, None)
            graph = check(drv.cuStreamEndCapture(stream), "cuStreamEndCapture")
            handle = int(graph)
            self._graphs[handle] = [index, graph, None]
        return GraphHandle(handle)

    def _graph_rec(self, index: int, graph: GraphHandle) -> list[Any]:
        rec = self._graphs.get(graph) if type(graph) is int else None
        if rec is None or rec[0] != index:
            raise ValueError(f"graph handle {as_handle(graph, 'graph'):#x} is not a live graph "
                             f"of cuda:{index}; use a handle from graph_capture_end that was "
                             "not destroyed")
        return rec

    def graph_instantiate(self, index: int, graph: GraphHandle) -> int:
        self._use(index)
        rec = self._graph_rec(index, graph)
        drv = self._drv
        exe = check(drv.cuGraphInstantiate(rec[1], instantiate_flags(drv)), "cuGraphInstantiate")
        try:
            exec_id = exec_graph_id(drv, exe)
        except BaseException:
            drv.cuGraphExecDestroy(exe)
            raise
        with self._graph_lock:
            old, rec[2] = rec[2], exe
        if old is not None:
            check(drv.cuGraphExecDestroy(old), "cuGraphExecDestroy")
        return exec_id

    def graph_replay(self, index: int, graph: GraphHandle, stream: StreamHandle) -> None:
        d = self._use(index)
        rec = self._graph_rec(index, graph)
        stream = self._streams.check_stream(d, stream)
        if rec[2] is None:
            self.graph_instantiate(index, graph)
        check(self._drv.cuGraphLaunch(rec[2], stream), "cuGraphLaunch")

    def graph_destroy(self, index: int, graph: GraphHandle) -> None:
        self._use(index)
        graph = GraphHandle(as_handle(graph, "graph"))
        with self._graph_lock:
            rec = self._graphs.get(graph)
            if rec is None or rec[0] != index:
                raise ValueError(f"graph handle {graph:#x} is not a live graph of cuda:{index}")
            del self._graphs[graph]
        if rec[2] is not None:
            check(self._drv.cuGraphExecDestroy(rec[2]), "cuGraphExecDestroy")
        check(self._drv.cuGraphDestroy(rec[1]), "cuGraphDestroy")

    def graph_debug_dot(self, index: int, graph: GraphHandle, path: str,
                        verbose: bool) -> None:
        self._use(index)
        rec = self._graph_rec(index, graph)
        drv = self._drv
        flags = int(drv.CUgraphDebugDot_flags.CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE) if verbose else 0
        check(drv.cuGraphDebugDotPrint(rec[1], os.fsencode(path), flags),
              "cuGraphDebugDotPrint")

    def graph_native_handles(self, index: int, graph: GraphHandle) -> tuple[int, int | None]:
        rec = self._graph_rec(index, graph)
        return int(rec[1]), (None if rec[2] is None else int(rec[2]))

    def graph_node_count(self, index: int, graph: GraphHandle) -> int | None:
        rec = self._graphs.get(graph) if type(graph) is int else None
        if rec is None or rec[0] != index:
            return None
        _, count = check(self._drv.cuGraphGetNodes(rec[1], 0), "cuGraphGetNodes")
        return int(count)
