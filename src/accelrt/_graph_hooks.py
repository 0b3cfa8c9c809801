"""Graph hooks: the handle ``register_*_hook`` returns, the module-level hooks of
``torch.cuda.graphs`` (``register_graph_<kind>_hook``) per backend, and :func:`export_dot`.

:class:`accelrt.Graph` (:mod:`accelrt._graph`) runs them at each step of its life: its own
hooks, then the module-level ones of its backend (:func:`_run_global`), where a failing
module-level hook never breaks the step, as in PyTorch.

Example::

    >>> from accelrt._graph_hooks import register_global_hook
    >>> seen = []
    >>> h = register_global_hook("cpu", "replay_start", seen.append)
    >>> h.remove()
"""

from __future__ import annotations

import collections
import itertools
import os
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from ._errors import CaptureNotSupportedError, type_shown
from ._fork import reinit_after_fork

if TYPE_CHECKING:
    from ._graph import Graph
    from ._stream import Stream

__all__ = ["HOOK_KINDS", "RemovableHandle", "export_dot", "register_global_hook"]

#: guards the creation of the per-backend hook tables
_lock = reinit_after_fork(threading.Lock())


class RemovableHandle:
    """What a ``register_*_hook`` call returns (``torch.utils.hooks.RemovableHandle``):
    :meth:`remove` unregisters the hook; ``with handle:`` removes it at the end of the block.

    Example::

        >>> import accelrt as acc
        >>> h = acc.cpu.graphs.register_graph_replay_start_hook(lambda g: None)
        >>> h.remove(); h.remove()     # idempotent
    """

    _next_id: ClassVar[itertools.count[int]] = itertools.count()

    def __init__(self, hooks: collections.OrderedDict[int, Any]) -> None:
        self.id = next(RemovableHandle._next_id)
        self._hooks = weakref.ref(hooks)

    def remove(self) -> None:
        """Unregister the hook (nothing happens if it was removed already)."""
        hooks = self._hooks()
        if hooks is not None:
            hooks.pop(self.id, None)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"<accelrt RemovableHandle id={self.id}>"


def _flag(name: str, value: object) -> bool:
    """``value`` if it is a bool; else a ``TypeError`` naming the argument ``name``."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type_shown(value)}")
    return value


def _add_hook(hooks: collections.OrderedDict[int, Any], fn: Any) -> RemovableHandle:
    if not callable(fn):
        raise TypeError(f"a hook must be callable, got {type_shown(fn)}")
    handle = RemovableHandle(hooks)
    hooks[handle.id] = fn
    return handle


#: ``torch.cuda.graphs``' module-level hook kinds; each hook receives the graph, except
#: ``destroy`` hooks, which receive the set of executable-graph ids of the destroyed graph.
HOOK_KINDS = ("capture_start", "capture_end", "instantiate", "replay_start", "replay_end",
              "destroy")
#: Module-level hooks per backend name and kind (``accelrt.cuda.graphs.register_graph_*``);
#: registration and removal are single dict operations, runs iterate over a copy.
_global_hooks: dict[str, dict[str, collections.OrderedDict[int, Callable[..., None]]]] = {}


def register_global_hook(backend_name: str, kind: str,
                         fn: Callable[..., None]) -> RemovableHandle:
    """Register a ``torch.cuda.graphs.register_graph_<kind>_hook`` hook for the graphs of
    backend ``backend_name`` (what the device modules' ``graphs`` submodules call)."""
    if kind not in HOOK_KINDS:
        raise ValueError(f"unknown graph hook kind {kind!r}; use one of {HOOK_KINDS}")
    with _lock:
        kinds = _global_hooks.setdefault(backend_name, {})
        hooks = kinds.setdefault(kind, collections.OrderedDict())
    return _add_hook(hooks, fn)


def _run_global(backend_name: str, kind: str, arg: object) -> None:
    """Run the module-level hooks of one kind; a failing hook never breaks the graph's step
    (nor the other hooks), as in PyTorch."""
    hooks = _global_hooks.get(backend_name, {}).get(kind)
    if not hooks:
        return
    for fn in list(hooks.values()):
        try:
            fn(arg)
        except Exception:  # noqa: BLE001, S112 - PyTorch swallows module-level hook errors
            continue


def dump_dot(graph: Graph, path: str, verbose: bool) -> None:
    """Write ``graph``'s captured graph to ``path`` in DOT format (``debug_dump``,
    :func:`export_dot`).

    Raises:
        RuntimeError: no captured graph is readable.
        CaptureNotSupportedError: the backend cannot write DOT.
    """
    graph._check_open()
    _flag("verbose", verbose)
    b = graph._b
    if graph._handle is None or b is None or not graph._template:
        raise RuntimeError("there is no captured graph to dump: make the graph with "
                           "keep_graph=True or call enable_debug_mode() before the capture "
                           "ends (or dump it from a capture-end hook: export_dot())")
    if not b.capabilities(graph._index).graph_dot:
        raise CaptureNotSupportedError(
            f"the {b.name} backend cannot write a graph in DOT format (its "
            "capabilities().graph_dot is False); debug_dump()/export_dot() need cuda or cpu")
    b.graph_debug_dot(graph._index, graph._handle, path, verbose)


def export_dot(path: str | os.PathLike[str], *,
               verbose: bool = True) -> Callable[[Graph], None]:
    """A capture-end hook that writes the captured graph to ``path`` in Graphviz DOT format
    (``torch.cuda.graphs.export_dot``): register it with a graph's
    ``register_capture_end_hook`` (or ``register_graph_capture_end_hook``); it works whatever
    ``keep_graph`` is, since it runs while the captured graph is still there.

    Example::

        >>> import pathlib, tempfile, accelrt as acc
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "g.dot"
        >>> g = acc.cpu.Graph()
        >>> _ = g.register_capture_end_hook(acc.cpu.graphs.export_dot(path))
        >>> x = acc.zeros(4, device="cpu")
        >>> with acc.cpu.graph(g):
        ...     _ = x.fill_(1.0)
        >>> path.read_text().startswith("digraph")
        True
    """
    target = os.fspath(path)
    _flag("verbose", verbose)

    def _hook(cuda_graph: Graph) -> None:
        dump_dot(cuda_graph, target, verbose)

    return _hook


class _Retained:
    """The destroy callbacks and retained objects of one capture cycle of a
    :class:`DeviceGraph`, and the streams to synchronize before they are released."""

    __slots__ = ("callbacks", "objects", "streams", "sync")

    def __init__(self) -> None:
        self.callbacks: collections.OrderedDict[int, Callable[[], None]] = \
            collections.OrderedDict()
        self.objects: collections.OrderedDict[int, object] = collections.OrderedDict()
        self.streams: set[Stream] = set()
        self.sync = False

    def fire(self) -> None:
        """Synchronize the replay streams (if asked), run the callbacks (ignoring their
        errors), then drop the callbacks and the retained objects."""
        if self.sync:
            for s in self.streams:
                try:
                    s.synchronize()
                except Exception:  # noqa: BLE001, S112 - the callbacks must still run
                    continue
        callbacks = list(self.callbacks.values())
        self.callbacks.clear()
        for cb in callbacks:
            try:
                cb()
            except Exception:  # noqa: BLE001, S112 - one failure must not skip the rest
                continue
        self.objects.clear()
        self.streams.clear()
