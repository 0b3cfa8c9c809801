"""Graph capture on the cpu backend: open captures and the graphs they recorded.

A capture records the work submitted to its streams (``("call", fn)``, ``("record", event)``
and ``("wait", event)`` operations, in submission order); ending it stores the operations as a
:class:`RecordedGraph` under a new handle, which ``graph_replay`` submits again in order.
:class:`CpuGraphs` is the part of :class:`~accelrt.backends.cpu.CpuBackend` that holds both;
the backend checks its arguments and delegates.

Example::

    >>> import itertools, threading
    >>> from accelrt.backends.cpu._graphs import CpuGraphs
    >>> from accelrt.backends.cpu._streams import CpuStream
    >>> graphs = CpuGraphs(threading.RLock(), itertools.count(1))
    >>> s = CpuStream(device=0, handle=7, priority=0)
    >>> graphs.begin(0, s)
    >>> graphs.capturing[s].ops.append(("call", print))
    >>> g = graphs.end(0, s)
    >>> graphs.node_count(0, g), len(graphs)
    (1, 1)
    >>> graphs.destroy(0, g); s.close()
"""

from __future__ import annotations

import ctypes
import itertools
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

from ..._errors import DeviceError
from ..._handles import GraphHandle
from ._streams import Capture, CpuStream

__all__ = ["CpuGraphs", "RecordedGraph"]


def call_name(fn: Callable[..., object]) -> str:
    """The name of a recorded call (a ``functools.partial``'s function)."""
    while isinstance(fn, partial):
        fn = fn.func
    if fn is ctypes.memmove or fn is ctypes.memset:   # copies and fills: C functions
        return "memmove" if fn is ctypes.memmove else "memset"
    return str(getattr(fn, "__qualname__", None) or type(fn).__qualname__)


def dot_text(text: str) -> str:
    """``text`` inside a DOT double-quoted string (a newline becomes DOT's ``\\n``)."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class RecordedGraph:
    """The operations one capture recorded on device ``device``, replayed in order."""

    __slots__ = ("device", "ops")

    def __init__(self, device: int, ops: tuple[tuple[str, Any], ...]) -> None:
        self.device = device
        self.ops = ops


class CpuGraphs:
    """The open captures (``capturing``: every stream that records into one, joined streams
    included) and the captured graphs of one cpu backend instance.

    Args:
        lock: the backend's lock (re-entrant), which guards the writes here.
        handles: the backend's handle counter (graph handles share it with streams/events).
    """

    def __init__(self, lock: threading.RLock, handles: itertools.count[int]) -> None:
        self._lock = lock
        self._handles = handles
        #: stream -> the open capture it records into; guarded by lock (writes)
        self.capturing: dict[CpuStream, Capture] = {}
        self._graphs: dict[int, RecordedGraph] = {}   # guarded by lock (writes)

    def __len__(self) -> int:
        return len(self._graphs)

    def begin(self, index: int, s: CpuStream, mode: str = "global") -> None:
        """Open a capture on stream ``s`` of device ``index`` (not a default stream) in capture
        ``mode`` (see :class:`~._streams.Capture`), begun by the calling thread."""
        if s.handle == 0:
            raise DeviceError(f"cpu: cannot capture the default stream of cpu:{index}; "
                              "capture on a stream made with stream_create (CUDA forbids "
                              "capturing the legacy default stream)")
        with self._lock:
            if s in self.capturing:
                raise DeviceError(f"cpu: stream {s.handle} of cpu:{index} is already "
                                  "capturing; end that capture first")
            self.capturing[s] = Capture(index, s, mode)

    def end(self, index: int, s: CpuStream) -> GraphHandle:
        """Close the capture begun on ``s``; the handle of the graph it recorded."""
        with self._lock:
            cap = self.capturing.get(s)
            if cap is None:
                raise DeviceError(f"cpu: stream {s.handle} of cpu:{index} is not capturing; "
                                  "call graph_capture_begin first")
            if cap.origin is not s:
                raise DeviceError(f"cpu: the capture was begun on stream {cap.origin.handle}; "
                                  "end it on that stream")
            for joined in cap.streams:
                self.capturing.pop(joined, None)
            for ev in cap.events:
                if ev.capture is cap:
                    ev.capture = None
            unjoined = cap.unjoined()
            if unjoined:   # CUDA ends the capture and returns no graph
                raise DeviceError(
                    "cpu: the capture sequence contains a fork that was not joined to the "
                    f"primary stream (stream {unjoined[0].handle} of cpu:{index} captured "
                    f"work that stream {s.handle} never waited for); make the capturing "
                    "stream wait for the side stream before the capture ends: "
                    "current_stream().wait_stream(side_stream)")
            handle = next(self._handles)
            self._graphs[handle] = RecordedGraph(index, tuple(cap.ops))
        return GraphHandle(handle)

    def find(self, index: int, graph: GraphHandle) -> RecordedGraph | None:
        """The live graph ``graph`` of device ``index``, or ``None``."""
        g = self._graphs.get(graph)
        return None if g is None or g.device != index else g

    def get(self, index: int, graph: GraphHandle,
            check_index: Callable[[int], object] | None = None) -> RecordedGraph:
        """The live graph ``graph`` of device ``index``; ``ValueError`` if there is none
        (after ``check_index(index)``, which raises for a bad index, when given)."""
        g = self.find(index, graph)
        if g is None:
            if check_index is not None:
                check_index(index)
            raise ValueError(f"graph handle {graph} is not a live graph of cpu:{index}; use "
                             "a handle from graph_capture_end that was not destroyed")
        return g

    def destroy(self, index: int, graph: GraphHandle) -> None:
        """Forget a live graph of device ``index``."""
        with self._lock:
            if self.find(index, graph) is None:
                raise ValueError(f"graph handle {graph} is not a live graph of cpu:{index}")
            del self._graphs[graph]

    def node_count(self, index: int, graph: GraphHandle) -> int | None:
        """Number of recorded operations of a live graph (``None`` for an unknown handle)."""
        g = self.find(index, graph)
        return None if g is None else len(g.ops)

    def write_dot(self, index: int, graph: GraphHandle, path: str, verbose: bool) -> None:
        """Write a live graph's operations to ``path`` as a DOT digraph: one node per
        operation, edges in replay order; ``verbose`` adds each call's full description."""
        g = self.get(index, graph)   # the backend checked the index
        title = f"cpu:{index} graph {int(graph)}: {len(g.ops)} operations, replayed in order"
        lines = [f"digraph accelrt_cpu_graph_{int(graph)} {{",
                 f'  label="{dot_text(title)}";',
                 "  node [shape=box];"]
        for i, (kind, arg) in enumerate(g.ops):
            if kind == "call":
                text = f"{i}: call {call_name(arg)}"
                if verbose:
                    text += f"\n{arg!r}"
            else:
                what = "event record" if kind == "record" else "event wait"
                text = f"{i}: {what} {arg.device}:{id(arg):#x}" if verbose else f"{i}: {what}"
            lines.append(f'  n{i} [label="{dot_text(text)}"];')
        lines.extend(f"  n{i - 1} -> n{i};" for i in range(1, len(g.ops)))
        lines.append("}")
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
