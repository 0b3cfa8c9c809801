"""The submodules of a device module that are not functions of one concept: ``streams``
(its classes), ``profiler`` (the device profiler's switch) and ``graphs`` (its graph classes
and the capture hooks), as ``torch.cuda.streams``, ``torch.cuda.profiler`` and
``torch.cuda.graphs``.

Example::

    >>> import accelrt as acc
    >>> acc.cpu.streams.Event is acc.cpu.Event, acc.cpu.graphs.CUDAGraph is acc.cpu.Graph
    (True, True)
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from .. import _graph

if TYPE_CHECKING:
    from ._module import DeviceModule

__all__ = ["GraphsModule", "ProfilerModule", "StreamsModule"]


class StreamsModule(types.ModuleType):
    """``torch.cuda.streams`` for one device module: ``accelrt.cuda.streams`` (importable)
    has the module's ``Stream``, ``ExternalStream`` and ``Event`` classes.

    Example::

        >>> import accelrt as acc
        >>> acc.cpu.streams.Stream is acc.cpu.Stream
        True
    """

    def __init__(self, dm: DeviceModule[Any, Any]) -> None:
        super().__init__(f"{dm.module}.streams", f"``torch.cuda.streams`` of {dm.module}.")
        self.__all__ = ["Event", "ExternalStream", "Stream"]
        self.Stream = dm.Stream
        self.ExternalStream = dm.ExternalStream
        self.Event = dm.Event


class ProfilerModule(types.ModuleType):
    """``torch.cuda.profiler`` for one device module: :meth:`start`, :meth:`stop` and
    :meth:`profile` switch the collection of a device profiler started with collection off
    (cuda: ``cuProfilerStart``/``cuProfilerStop`` on the current device's context, as
    PyTorch's ``cudaProfilerStart``). Other backends have no device profiler: there they raise
    :class:`~accelrt.BackendUnavailableError`, as ``torch.cuda.profiler`` fails without CUDA.

    Example::

        >>> import accelrt as acc
        >>> try:
        ...     acc.cpu.profiler.start()
        ... except acc.BackendUnavailableError as e:
        ...     print(str(e)[:33])
        cpu: profiler.start() switches a
    """

    def __init__(self, dm: DeviceModule[Any, Any]) -> None:
        super().__init__(f"{dm.module}.profiler", f"``torch.cuda.profiler`` of {dm.module}.")
        self.__all__ = ["profile", "start", "stop"]
        self._dm = dm
        for name in self.__all__:   # module attributes, as dir() and inspect show them
            setattr(self, name, getattr(self, name))

    def start(self) -> None:
        """Start the device profiler's collection (``torch.cuda.profiler.start``).

        Raises:
            BackendUnavailableError: the backend has no device profiler, or cannot be used.
            DeviceError: the driver refused.
        """
        self._dm._profiler_start()

    def stop(self) -> None:
        """Stop the device profiler's collection (``torch.cuda.profiler.stop``)."""
        self._dm._profiler_stop()

    def profile(self) -> contextlib.AbstractContextManager[None]:
        """``with profile():`` collects for the body only (``torch.cuda.profiler.profile``)."""
        return _profiling(self)


@contextlib.contextmanager
def _profiling(p: ProfilerModule) -> Iterator[None]:
    p.start()
    try:
        yield
    finally:
        p.stop()


class GraphsModule(types.ModuleType):
    """``torch.cuda.graphs`` for one device module: ``accelrt.cuda.graphs`` (importable as
    ``import accelrt.cuda.graphs``) has the module's ``CUDAGraph`` (its graph class),
    ``graph``, ``graph_pool_handle``, ``is_current_stream_capturing``, ``export_dot`` and the
    ``register_graph_*_hook`` functions, whose hooks run for every graph capturing this
    backend's work (an :class:`accelrt.Graph` too). ``make_graphed_callables`` and
    ``export_graph_data`` need PyTorch's autograd and CUDA tools ids (docs/differences.md).

    Example::

        >>> import accelrt as acc
        >>> seen = []
        >>> h = acc.cpu.graphs.register_graph_instantiate_hook(seen.append)
        >>> x = acc.zeros(4, device="cpu")
        >>> g = acc.cpu.graphs.CUDAGraph()
        >>> with acc.cpu.graphs.graph(g):
        ...     _ = x.fill_(1.0)
        >>> seen == [g]
        True
        >>> h.remove()
    """

    def __init__(self, dm: DeviceModule[Any, Any]) -> None:
        super().__init__(f"{dm.module}.graphs", f"``torch.cuda.graphs`` of {dm.module}.")
        self._name = dm.name
        self.CUDAGraph = dm.Graph
        self.graph = dm.graph
        self.graph_pool_handle = dm.graph_pool_handle
        self.is_current_stream_capturing = dm.is_current_stream_capturing
        self.export_dot = _graph.export_dot
        self.RemovableHandle = _graph.RemovableHandle
        self.__all__ = ["CUDAGraph", "export_dot", "graph", "graph_pool_handle",
                        "is_current_stream_capturing", "register_graph_capture_end_hook",
                        "register_graph_capture_start_hook", "register_graph_destroy_hook",
                        "register_graph_instantiate_hook", "register_graph_replay_end_hook",
                        "register_graph_replay_start_hook"]
        for name in [n for n in self.__all__ if n.startswith("register_")]:   # as profiler's
            setattr(self, name, getattr(self, name))

    def register_graph_capture_start_hook(
            self, fn: Callable[[_graph.Graph], None]) -> _graph.RemovableHandle:
        """Run ``fn(graph)`` as each graph's capture begins (the capture is live: work ``fn``
        submits to the capturing stream is captured). A failing hook is ignored. Returns a
        handle whose ``remove()`` unregisters it."""
        return _graph.register_global_hook(self._name, "capture_start", fn)

    def register_graph_capture_end_hook(
            self, fn: Callable[[_graph.Graph], None]) -> _graph.RemovableHandle:
        """Run ``fn(graph)`` as each graph's capture ends, while the captured graph is
        readable (before instantiation). A failing hook is ignored. Returns a handle."""
        return _graph.register_global_hook(self._name, "capture_end", fn)

    def register_graph_instantiate_hook(
            self, fn: Callable[[_graph.Graph], None]) -> _graph.RemovableHandle:
        """Run ``fn(graph)`` right after each graph is instantiated. A failing hook is
        ignored. Returns a handle."""
        return _graph.register_global_hook(self._name, "instantiate", fn)

    def register_graph_replay_start_hook(
            self, fn: Callable[[_graph.Graph], None]) -> _graph.RemovableHandle:
        """Run ``fn(graph)`` at the start of every replay of every graph, before the launch
        (keep it cheap). A failing hook is ignored. Returns a handle."""
        return _graph.register_global_hook(self._name, "replay_start", fn)

    def register_graph_replay_end_hook(
            self, fn: Callable[[_graph.Graph], None]) -> _graph.RemovableHandle:
        """Run ``fn(graph)`` at the end of every replay, once submitted (not finished), even
        if the launch failed. A failing hook is ignored. Returns a handle."""
        return _graph.register_global_hook(self._name, "replay_end", fn)

    def register_graph_destroy_hook(
            self, fn: Callable[[set[int]], None]) -> _graph.RemovableHandle:
        """Run ``fn(exec_ids)`` when a graph is destroyed (``reset``, ``close``, or
        collected), with the ids of the executable graphs it instantiated since its capture
        (CUDA's ``cuGraphExecGetId``). A failing hook is ignored. Returns a handle."""
        return _graph.register_global_hook(self._name, "destroy", fn)
