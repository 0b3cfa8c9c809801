"""``accelrt.Graph`` (``torch.accelerator.Graph``), the device modules' graph classes
(``torch.cuda.CUDAGraph``), the ``graph`` context manager and the graph hooks of
``torch.cuda.graphs``: capture stream work once, replay it many times.

A capture records the work submitted to one non-default stream. While a graph captures, memory
the caching allocator hands out on the capturing stream comes from a *private pool* of that
graph, so addresses baked into the graph stay valid and are not reused by other work; graphs
can share a pool (``Graph(pool=other.pool())``). The life of a graph follows PyTorch's:
``capture_begin`` -> ``capture_end`` (which instantiates the executable graph unless
``keep_graph=True``) -> ``instantiate`` (explicit, or on the first ``replay``) -> ``replay`` ...
-> ``reset``. Backends that cannot capture (``capabilities(index).graphs`` is False) raise
:class:`~accelrt.CaptureNotSupportedError`.

Hooks (``register_graph_capture_start_hook`` and the rest, ``torch.cuda.graphs``' names) are
kept per backend: a hook registered through ``accelrt.cuda.graphs`` runs for every graph that
captures cuda work, an :class:`accelrt.Graph` included.

Example::

    >>> import accelrt as acc
    >>> x = acc.zeros(4, device="cpu")
    >>> g = acc.cpu.Graph()
    >>> s = acc.Stream("cpu")
    >>> with acc.graph(g, stream=s):
    ...     _ = x.fill_(1.0)
    >>> g.replay()
    >>> g.reset()
"""

from __future__ import annotations

import collections
import itertools
import os
import threading
import warnings
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from . import _checked, _stream
from . import _device as _dev
from ._device import _lazy_init, _require_current, _tls
from ._errors import CaptureNotSupportedError, ClosedError, type_shown
from ._fork import reinit_after_fork
from ._graph_hooks import (HOOK_KINDS, RemovableHandle, _add_hook, _flag, _Retained, _run_global,
                           dump_dot, export_dot)
from ._graph_hooks import register_global_hook as register_global_hook
from ._graph_args import _check_annotation_config, _check_mode, _pool_id, _torch_only
from ._handles import GraphHandle, StreamHandle
from ._stream_core import _initialized

if TYPE_CHECKING:
    from types import TracebackType

    from ._backend import Backend
    from ._typing import PoolLike
    from .random import Generator

__all__ = ["DeviceGraph", "Graph", "RemovableHandle", "export_dot", "graph", "graph_pool_handle",
           "register_global_hook"]

_ids = itertools.count(1)
_lock = reinit_after_fork(threading.Lock())
#: The captures in progress per (backend name, device index), as ``id()`` of their graphs.
#: No lock: ``setdefault``/``append``/``remove`` are atomic, and a graph collected mid-capture
#: ends it from its finalizer, which may run while this thread holds any lock (``_lock`` too).
_active: dict[tuple[str, int], list[int]] = {}
#: The graph capturing each (backend name, device index, stream handle), for ``use_mem_pool``
#: (``CUDAGraph.get_currently_capturing_graph``); weak (a graph collected mid-capture still
#: ends it); no lock, as :data:`_active`.
_capturing: dict[tuple[str, int, int], weakref.ReferenceType[Graph]] = {}


def capturing_graph(backend: str, index: int, stream: int) -> Graph | None:
    """The graph whose capture is in progress on ``stream`` of ``backend:index``, or None.

    Example::

        >>> import accelrt as acc
        >>> from accelrt import _graph
        >>> s, g, x = acc.Stream("cpu:0"), acc.Graph(), acc.zeros(4, device="cpu:0")
        >>> with s, g:
        ...     _ = x.fill_(1.0)
        ...     _graph.capturing_graph("cpu", 0, s.stream_id) is g
        True
        >>> _graph.capturing_graph("cpu", 0, s.stream_id) is None
        True
    """
    ref = _capturing.get((backend, index, stream))
    return None if ref is None else ref()

_D = TypeVar("_D", bound="DeviceGraph")


def _graphsafe() -> Any:
    """:mod:`accelrt.random._graphsafe` (imported on first use: it loads the random module)."""
    from .random import _graphsafe as module
    return module


def graph_pool_handle() -> tuple[int, int]:
    """A new pool id that graphs can share: pass it to ``Graph(pool=...)``,
    ``capture_begin(pool=...)`` of a device module's graph, or ``graph(..., pool=...)``
    (``torch.cuda.graph_pool_handle``).

    As PyTorch's, a pool id made by the user is ``(0, n)``, with ``n`` from the counter that
    numbers ``MemPool`` ids too; the pool a capture makes for itself is ``(n, 0)``.

    Example::

        >>> import accelrt as acc
        >>> from accelrt._graph import graph_pool_handle
        >>> first, second = graph_pool_handle(), graph_pool_handle()
        >>> first[0] == second[0] == 0 and second[1] > first[1]
        True
    """
    from .memory import _user_pool_id
    return _user_pool_id()


def _capture_pool_id() -> tuple[int, int]:
    """The id of the private pool a capture makes for itself (``Graph.pool()`` without a
    ``pool``): ``(n, 0)``, as the capture ids PyTorch's ``capture_begin`` uses."""
    with _lock:
        return (next(_ids), 0)


def generate_graph_pool_handle() -> tuple[int, int]:
    """A new memory-pool id for graphs to share, allocating nothing: pass it to
    ``Graph(pool=...)`` of several graphs so that they draw from one private pool
    (an accelrt addition: torch 2.15's ``torch.accelerator`` has none; the same id as
    :func:`graph_pool_handle`, which is ``torch.cuda``'s name).

    Example::

        >>> import accelrt as acc
        >>> pool = acc.generate_graph_pool_handle()
        >>> x = acc.zeros(4, device="cpu")
        >>> g0, g1 = acc.Graph(pool=pool), acc.Graph(pool=pool)
        >>> with acc.Stream("cpu"), g0:
        ...     _ = x.fill_(1.0)
        >>> with acc.Stream("cpu"), g1:
        ...     _ = x.fill_(2.0)
        >>> g0.pool() == g1.pool()
        True
    """
    return graph_pool_handle()


def _graph_backend(name: str | None) -> Backend:
    if name is not None:
        from . import _backend
        return _backend.get_backend(name)
    return _dev._current_backend if _dev._current_backend is not None else _require_current()


# ---------------------------------------------------------------------- graphs
class Graph:
    """A captured sequence of stream work that can be replayed (``torch.accelerator.Graph``).

    ``with g:`` synchronizes the device, empties the caches and captures the body's work on
    the *current* stream (which must not be the default stream: ``with stream, g:``), as
    PyTorch's does; :meth:`capture_begin` / :meth:`capture_end` do the same by hand. To close
    the object when a block ends, use ``contextlib.closing(g)`` (as for :class:`Stream`).

    Args:
        keep_graph: if False, :meth:`capture_end` instantiates the executable graph and the
            captured graph is no longer available; if True, the captured graph is kept (for
            :meth:`debug_dump`) and the executable graph is made by :meth:`instantiate`, or by
            the first :meth:`replay`.
        pool: a memory pool to share (:meth:`pool` of another graph, a
            :func:`graph_pool_handle`, or a ``MemPool``); ``None``: a new private pool.
        capture_error_mode: ``"default"``, ``"global"``, ``"thread_local"`` or ``"relaxed"``
            (how a backend treats unsafe calls during capture; see docs/differences.md).

    The attributes ``graph_pool`` and ``capture_error_mode`` hold the last two and may be
    changed before capturing again (after :meth:`reset`). Calling ``__init__`` again on a
    graph object does nothing (a capture in progress goes on), as for
    ``torch.cuda.CUDAGraph``, which is built in ``__new__``.

    Raises:
        TypeError: ``keep_graph`` is not a bool, or ``pool`` is not a pool.
        AcceleratorValueError: an unknown ``capture_error_mode`` (a ``ValueError`` and, as
            PyTorch's "Unknown capture error mode", a ``RuntimeError``).

    Example::

        >>> import accelrt as acc
        >>> x = acc.zeros(4, device="cpu:0")
        >>> g = acc.cpu.Graph()     # acc.Graph() follows the current accelerator
        >>> with acc.Stream("cpu:0"), g:
        ...     _ = x.fill_(2.0)
        >>> g.replay()
        >>> isinstance(g.pool(), tuple)
        True
    """

    __slots__ = ("__weakref__", "_allocator", "_b", "_capturing", "_closed", "_exec",
                 "_exec_ids", "_handle", "_hooks", "_index", "_keep_graph", "_pool",
                 "_pools_kept", "_rng", "_stream", "_template", "capture_error_mode",
                 "graph_pool")

    #: Fixed backend for device-specific subclasses (``accelrt.cuda.CUDAGraph``); ``None``:
    #: the current accelerator.
    _backend_name: ClassVar[str | None] = None

    def __init__(self, keep_graph: bool = False, *, pool: PoolLike = None,
                 capture_error_mode: str = "default") -> None:
        if _initialized(self):
            return   # as torch.cuda.CUDAGraph: a second __init__ changes nothing
        if not isinstance(keep_graph, bool):
            raise TypeError(f"keep_graph must be a bool, got {type_shown(keep_graph)}")
        _pool_id(pool)
        mode = _check_mode(capture_error_mode)   # (every check before the first field)
        self.graph_pool = pool
        self.capture_error_mode = mode
        self._keep_graph = keep_graph
        self._b: Backend | None = None
        self._index = -1
        self._stream = StreamHandle(0)
        self._handle: GraphHandle | None = None
        self._pool: tuple[int, int] | None = None
        self._pools_kept: list[tuple[int, int]] = []   # other pools kept (_retain_pool)
        self._allocator: Any = None
        self._capturing = False
        self._closed = False
        self._exec = False        # the executable graph exists (instantiate() ran)
        self._template = False    # the captured graph may be read (keep_graph, capture-end hooks)
        self._exec_ids: set[int] = set()
        self._rng: dict[Any, Any] = {}   # generator state -> random._graphsafe.GraphRng
        self._hooks: dict[str, collections.OrderedDict[int, Callable[[Any], None]]] = {
            k: collections.OrderedDict() for k in HOOK_KINDS[:-1]}

    # ------------------------------------------------------------------ capture
    def capture_begin(self) -> None:
        """Begin capturing the work submitted to the current stream of the current device,
        with the ``graph_pool`` and ``capture_error_mode`` given at construction.

        Raises:
            RuntimeError: the graph is already captured or capturing, or the current stream
                is the default stream.
            CaptureNotSupportedError: the backend cannot capture graphs.
        """
        b = _graph_backend(self._backend_name)
        self._begin(b, _tls.device.get(b.name, 0), None, self.graph_pool,
                    self.capture_error_mode)

    def _begin(self, b: Backend, index: int, stream_obj: _stream.Stream | None, pool: Any,
               capture_error_mode: str) -> None:
        """Begin capturing on ``stream_obj`` (default: the current stream of ``b:index``),
        then run the capture-start hooks."""
        self._check_open()
        capture_error_mode = _check_mode(capture_error_mode)   # a str subclass: its value
        if self._capturing or self._handle is not None:
            raise RuntimeError("This CUDAGraph instance already owns a captured graph (or is "
                               "capturing); call reset() before capturing again")
        if self._backend_name is not None and b.name != self._backend_name:
            raise ValueError(f"a {type(self).__name__} captures {self._backend_name} work, not "
                             f"{b.name} work; use accelrt.Graph")
        pid = _pool_id(pool)
        if not b.capabilities(index).graphs:
            raise CaptureNotSupportedError(
                f"the {b.name} backend cannot capture graphs; use a backend with graph "
                "support (cuda, cpu) or run the work eagerly")
        _lazy_init(b, index)
        if stream_obj is None:
            stream_obj = _stream._current(b, index)
        stream = stream_obj._handle
        if stream == b.default_stream(index):
            raise RuntimeError("CUDA graphs must be captured on a non-default stream. "
                               "(However, after capture, it's ok to replay them on the "
                               "default stream.) Wrap the capture in `with accelrt.Stream():` "
                               "or use accelrt.graph(), which does")
        if pid is None:
            pid = _capture_pool_id()
        from .memory import _allocator
        a = _allocator.get_allocator(b, index)
        attach = getattr(pool, "_attach", None)
        if callable(attach):   # a MemPool: let it track this allocator for its own release
            attach(a)
        key = (b.name, index)
        thread = threading.get_ident()

        def stream_filter(s: int) -> bool:
            if s == stream:
                return True
            # a stream that joined the capture (waited on an event of the capturing stream)
            return (threading.get_ident() == thread and len(_active.get(key, ())) == 1
                    and s != b.default_stream(index)
                    and b.stream_is_capturing(index, StreamHandle(s)))

        a.begin_allocate_to_pool(pid, stream_filter, capture=True)
        try:
            if capture_error_mode != "default" and b.capabilities(index).graph_capture_modes:
                b.graph_capture_begin_mode(index, stream, capture_error_mode)
            else:   # the backend's own mode
                b.graph_capture_begin(index, stream)
        except BaseException:
            a.end_allocate_to_pool(pid)
            a.release_pool(pid)
            raise
        _active.setdefault(key, []).append(id(self))
        _capturing[(b.name, index, int(stream))] = weakref.ref(self)
        self._b, self._index, self._stream = b, index, stream
        self._pool, self._allocator, self._capturing = pid, a, True
        self._exec, self._template, self._exec_ids = False, False, set()
        _graphsafe().capture_begin(self, b, index)   # the generators count within the graph
        # the capture is live: work a hook submits to this stream is captured
        _run_global(b.name, "capture_start", self)
        try:
            for hook in list(self._hooks["capture_start"].values()):
                hook(self)
        except BaseException:
            # the hook's error propagates; the capture it interrupted must not stay live
            # (the stream would refuse every later sync and capture)
            self._abort_capture()
            raise

    def _abort_capture(self, finalizer: bool = False) -> None:
        """End a capture in progress and drop what it captured, releasing its pool (from
        :meth:`__del__`: ``finalizer``, without blocking on the allocator's lock)."""
        try:
            self._capture_end_pre(warn=False, finalizer=finalizer)
        finally:
            self._reset(finalizer)

    def capture_end(self) -> None:
        """End the capture begun by :meth:`capture_begin`: run the capture-end hooks (the
        captured graph is readable there), then, unless ``keep_graph=True``, instantiate the
        executable graph and drop the captured one.

        Raises:
            RuntimeError: no capture is in progress, or the current stream is not the one
                it began on (PyTorch's "Capture must end on the same stream it began on").
        """
        self._capture_end_pre(warn=True)
        self._finish_capture()

    def _finish_capture(self) -> None:
        b = self._b
        assert b is not None
        _run_global(b.name, "capture_end", self)
        for hook in list(self._hooks["capture_end"].values()):
            hook(self)
        if not self._keep_graph:
            self.instantiate()
        self._capture_end_post()

    def _capture_end_pre(self, warn: bool, finalizer: bool = False) -> None:
        """End the backend's capture; the captured graph stays readable (``finalizer``: from
        :meth:`__del__`, which must not block on the allocator's lock)."""
        if not self._capturing:
            self._check_open()
            raise RuntimeError("capture_end() called before capture_begin(); begin a capture "
                               "first")
        b, index = self._b, self._index
        assert b is not None
        if warn and _stream._current(b, index)._handle != self._stream:   # (torch's check)
            raise RuntimeError("Capture must end on the same stream it began on; make that "
                               "stream current again (`with stream:`) first")
        self._capturing = False
        _active[(b.name, index)].remove(id(self))
        _capturing.pop((b.name, index, int(self._stream)), None)
        _graphsafe().capture_end(self)
        try:
            anyb: Any = b   # called untyped: a compiled caller would cast the result
            self._handle = _checked.graph(b, index, self._stream,
                                          anyb.graph_capture_end(index, self._stream))
        finally:
            end = (self._allocator.end_allocate_to_pool_from_finalizer if finalizer
                   else self._allocator.end_allocate_to_pool)
            end(self._pool)
            if self._handle is None:   # no graph (an unjoined fork): no pool, or it leaked
                self._reset(finalizer)
        self._template = True
        if warn and b.graph_node_count(index, self._handle) == 0:
            warnings.warn("The CUDA Graph is empty. This usually means that the graph was "
                          "attempted to be captured on wrong device or stream.", UserWarning,
                          stacklevel=3)

    def _capture_end_post(self) -> None:
        """Finish :meth:`_capture_end_pre`: without ``keep_graph`` the captured graph is no
        longer readable (the executable graph must exist)."""
        self._check_open()
        if self._handle is None or self._capturing:
            raise RuntimeError("capture_end_post() needs a capture ended by capture_end_pre()")
        if not self._keep_graph and not self._exec:
            raise RuntimeError("with keep_graph=False, instantiate() must run before "
                               "capture_end_post() (capture_end() does both)")
        self._template = self._keep_graph

    def instantiate(self) -> None:
        """Make the executable graph from the captured one (again, with ``keep_graph=True``:
        the previous executable graph is destroyed), then run the instantiate hooks.
        :meth:`capture_end` calls it when ``keep_graph`` is False, :meth:`replay` when it was
        not called yet.

        Raises:
            RuntimeError: nothing was captured, or the graph was instantiated already and
                ``keep_graph`` is False.
        """
        self._check_open()
        b = self._b
        if self._handle is None or b is None:
            raise RuntimeError("capture_end() must have been called before calling "
                               "instantiate(); capture a graph first")
        if self._exec and not self._keep_graph:
            raise RuntimeError("instantiate() is intended to be called by the user only when "
                               "keep_graph=true; make the graph with Graph(keep_graph=True) to "
                               "instantiate it again")
        anyb: Any = b   # called untyped: a compiled caller would cast the result
        self._exec_ids.add(_checked.handle(
            b, ("graph_instantiate", (self._index, self._handle)),
            anyb.graph_instantiate(self._index, self._handle), "an executable graph id",
            nonzero=False))
        self._exec = True
        _run_global(b.name, "instantiate", self)
        for hook in list(self._hooks["instantiate"].values()):
            hook(self)

    def replay(self) -> None:
        """Submit the captured work on the current stream of the graph's device (instantiating
        it first if that was not done), between the replay-start and replay-end hooks.

        Raises:
            RuntimeError: nothing has been captured.
        """
        if self._handle is None:
            self._check_open()
            raise RuntimeError("Called replay() without a preceding successful capture: "
                               "there is no captured graph; capture one with "
                               "capture_begin()/capture_end() or accelrt.graph()")
        if not self._exec:
            self.instantiate()
        b, index = self._b, self._index
        assert b is not None
        _run_global(b.name, "replay_start", self)
        for hook in list(self._hooks["replay_start"].values()):
            hook(self)
        try:
            stream = _stream._current(b, index)._handle
            if self._rng:
                _graphsafe().replay_prologue(self, b, index, stream)
            b.graph_replay(index, self._handle, stream)
        finally:   # an end balances every start, even when the launch failed
            _run_global(b.name, "replay_end", self)
            for hook in list(self._hooks["replay_end"].values()):
                hook(self)

    def reset(self) -> None:
        """Destroy the captured graph (running the destroy hooks) and drop its reference to
        the private pool; the object can capture again.

        Memory still allocated from the pool stays valid; the pool's cached memory becomes
        releasable once no graph or ``MemPool`` uses it.
        """
        self._check_open()
        if self._capturing:
            raise RuntimeError("reset() during capture; call capture_end() first")
        self._reset(finalizer=False)

    def pool(self) -> tuple[int, int]:
        """Id of this graph's private memory pool, to share it with another capture.

        Raises:
            RuntimeError: no capture has ended (none began, one is in progress, or the graph
                was reset since), as PyTorch's.
        """
        self._check_open()
        if self._pool is None or self._handle is None:
            raise RuntimeError("pool() without a preceding successful capture: call it after "
                               "capture_end() and before reset()")
        return self._pool

    # ------------------------------------------------------------------ debugging
    def enable_debug_mode(self) -> None:
        """Keep the captured graph (as ``keep_graph=True``) so that :meth:`debug_dump` can
        write it; call it before the capture ends."""
        self._check_open()
        self._keep_graph = True

    def debug_dump(self, path: str | os.PathLike[str]) -> None:
        """Write the captured graph to ``path`` in Graphviz DOT format.

        Raises:
            RuntimeError: there is no captured graph to write: capture with
                ``keep_graph=True`` or after :meth:`enable_debug_mode` (or dump from a
                capture-end hook, see :func:`export_dot`).
            CaptureNotSupportedError: the backend cannot write DOT
                (``capabilities().graph_dot`` is False).

        Example::

            >>> import pathlib, tempfile, accelrt as acc
            >>> g = acc.cpu.Graph(keep_graph=True)
            >>> x = acc.zeros(4, device="cpu")
            >>> with acc.Stream("cpu"), g:
            ...     _ = x.fill_(1.0)
            >>> path = pathlib.Path(tempfile.mkdtemp()) / "g.dot"
            >>> g.debug_dump(path)
            >>> path.read_text().startswith("digraph")
            True
        """
        dump_dot(self, os.fspath(path), True)

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Destroy the captured graph and release its pool now (:meth:`reset`), and close the
        object; idempotent. A replay already submitted still runs. Afterwards every operation
        raises :class:`accelrt.ClosedError`. ``with g:`` captures (PyTorch's meaning); use
        ``contextlib.closing(g)`` for a block that closes it.

        Raises:
            RuntimeError: a capture is in progress; call :meth:`capture_end` first.

        Example::

            >>> import contextlib, accelrt as acc
            >>> x = acc.zeros(4, device="cpu")
            >>> with contextlib.closing(acc.cpu.Graph()) as g:
            ...     with acc.cpu.graph(g):
            ...         _ = x.fill_(1.0)
            ...     g.replay()
            >>> g.is_closed
            True
        """
        with _stream._close_lock:
            if self._closed:
                return
            if self._capturing:
                raise RuntimeError("close() during capture; call capture_end() first")
            self._closed = True
        self._reset(finalizer=False)

    @property
    def is_closed(self) -> bool:
        """True once :meth:`close` closed the graph."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"this {type(self).__name__} was closed; create a new graph "
                              "instead of using a closed one")

    def __enter__(self) -> None:
        """Synchronize the device, empty every device's cache and the pinned-host cache, and
        begin capturing on the current stream (``torch.accelerator.Graph.__enter__``)."""
        self._check_open()
        b = _graph_backend(self._backend_name)
        _free_for_capture(b, _tls.device.get(b.name, 0))
        self.capture_begin()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if not self._capturing:
            return
        try:
            self._capture_end_pre(warn=exc_type is None)
            self._finish_capture()
        except Exception:
            if exc_type is None:
                raise
            # the body already failed: its error matters more than the broken capture
            self.reset()

    def _reset(self, finalizer: bool) -> None:
        # finalizer: called by __del__, which the garbage collector may run inside the
        # allocator's critical section on this thread: release the pool without blocking.
        b = self._b
        if self._handle is not None and b is not None:
            handle, self._handle = self._handle, None
            exec_ids, self._exec_ids = self._exec_ids, set()
            self._exec = self._template = False
            _checked.destroy_graph(b, self._index, handle)
            _run_global(b.name, "destroy", exec_ids)
        self._rng = {}   # (PyTorch's reset unregisters the generators)
        if self._pool is not None and self._allocator is not None:
            a, pids = self._allocator, [self._pool, *self._pools_kept]
            self._allocator = self._pool = None
            self._pools_kept = []
            for pid in pids:
                if finalizer:
                    a.release_pool_from_finalizer(pid)
                else:
                    a.release_pool(pid)

    def _retain_pool(self, pool_id: tuple[int, int]) -> None:
        """Keep memory pool ``pool_id`` (one more reference) until this graph is reset or
        destroyed, as :meth:`DeviceGraph.pools` then lists it: what ``use_mem_pool`` does for
        the graph capturing the current stream (``torch.cuda.CUDAGraph._retain_pool``)."""
        if self._allocator is None or pool_id == self._pool or pool_id in self._pools_kept:
            return
        self._allocator.create_pool(pool_id)
        self._pools_kept.append(pool_id)

    def __del__(self) -> None:
        # collected mid-capture: end and drop the capture (stream, device stay usable; pool
        # released), silently; PyTorch's destructor leaves both (docs/differences.md)
        try:
            if self._capturing:
                self._abort_capture(finalizer=True)
            else:
                self._reset(finalizer=True)
        except Exception:  # noqa: BLE001, S110 - never raise from a finaliser
            pass

    def __reduce__(self) -> Any:
        # (copy.copy() shared the graph and pool, both then released; torch cannot copy one)
        raise TypeError(f"cannot copy or pickle {self!r}: a Graph is work captured in this "
                        "process, with its executable graph and memory pool (a copy would "
                        "share them, as a torch Graph cannot be copied either); capture "
                        "another Graph, or pass the object itself around")

    def __repr__(self) -> str:
        state = ("closed" if self._closed else "capturing" if self._capturing else
                 "captured" if self._handle is not None else "empty")
        dev = f" on {self._b.name}:{self._index}" if self._b is not None else ""
        return f"<accelrt.Graph {state}{dev}>"


class DeviceGraph(Graph):
    """Base of the device modules' graph classes (``torch.cuda.CUDAGraph``:
    ``accelrt.cuda.CUDAGraph``, ``accelrt.cpu.Graph``, ...): an :class:`Graph` whose
    :meth:`capture_begin` takes the pool and capture mode, with ``torch.cuda.CUDAGraph``'s
    per-graph hooks, :meth:`capture_end_pre`/:meth:`capture_end_post`, :meth:`pools` and the
    raw handles of a CUDA graph.

    Example::

        >>> import accelrt as acc
        >>> g = acc.cpu.Graph(keep_graph=True)
        >>> x = acc.zeros(4, device="cpu")
        >>> with acc.cpu.graph(g):
        ...     _ = x.fill_(3.0)
        >>> g.instantiate(); g.replay()
    """

    __slots__ = ("_retained",)

    def __init__(self, keep_graph: bool = False) -> None:
        if _initialized(self):
            return   # as torch.cuda.CUDAGraph: a second __init__ changes nothing
        super().__init__(keep_graph, capture_error_mode="global")
        self._retained = _Retained()

    # ------------------------------------------------------------------ retained resources
    def register_destroy_callback(self, cb: Callable[[], None], *,
                                  synchronize_before_release: bool = False) -> RemovableHandle:
        """Run ``cb()`` when this graph is destroyed (:meth:`reset`, :meth:`close`, or
        collected), just before its backend resources are freed; callbacks run once per
        capture cycle, in registration order, and an exception in one is ignored so the rest
        still run (``torch.cuda.CUDAGraph.register_destroy_callback``).

        Destruction does not wait for replays already submitted: with
        ``synchronize_before_release=True`` every stream the graph was replayed on (from now
        on) is synchronized before the callbacks run, so a callback may free memory the graph
        uses. Returns a handle whose ``remove()`` unregisters ``cb``.

        Example::

            >>> import accelrt as acc
            >>> g = acc.cpu.CUDAGraph()
            >>> x = acc.zeros(4, device="cpu")
            >>> with acc.cpu.graph(g):
            ...     _ = x.fill_(1.0)
            >>> h = g.register_destroy_callback(lambda: print("released"),
            ...                                 synchronize_before_release=True)
            >>> g.replay(); g.reset()
            released
        """
        if not callable(cb):
            raise TypeError(f"a destroy callback must be callable, got {type_shown(cb)}")
        self._check_open()
        r = self._retained
        r.sync = r.sync or _flag("synchronize_before_release", synchronize_before_release)
        return _add_hook(r.callbacks, cb)

    def retain_object(self, obj: object, *,
                      synchronize_before_release: bool = False) -> RemovableHandle:
        """Keep ``obj`` alive until this graph is destroyed (:meth:`reset`, :meth:`close`, or
        collected), then drop it (``torch.cuda.CUDAGraph.retain_object``): e.g. the last
        reference to an array the captured work reads. ``synchronize_before_release`` as in
        :meth:`register_destroy_callback`; the handle's ``remove()`` drops it early."""
        self._check_open()
        r = self._retained
        r.sync = r.sync or _flag("synchronize_before_release", synchronize_before_release)
        handle = RemovableHandle(r.objects)
        r.objects[handle.id] = obj
        return handle

    def replay(self) -> None:
        """Submit the captured work on the current stream (see :meth:`Graph.replay`); with a
        ``synchronize_before_release`` registration, the stream is remembered for it."""
        r = self._retained
        if r.sync and self._b is not None:
            r.streams.add(_stream._current(self._b, self._index))
        super().replay()

    def _reset(self, finalizer: bool) -> None:
        # torch: the current cycle's callbacks fire before the graph's resources are freed,
        # and a fresh holder serves the next capture
        r, self._retained = self._retained, _Retained()
        r.fire()
        super()._reset(finalizer)

    def capture_begin(self, pool: PoolLike = None, capture_error_mode: str = "global",
                      check_input_liveness: bool = False) -> None:
        """Begin capturing the work submitted to the current stream of the current device.

        Args:
            pool: share the private memory pool of another graph (``other.pool()``), a
                :func:`graph_pool_handle`, or a ``MemPool``; ``None`` makes a new pool.
            capture_error_mode: ``"global"``, ``"thread_local"``, ``"relaxed"`` or
                ``"default"`` (see docs/differences.md).
            check_input_liveness: PyTorch's tensor-liveness tracking; only False here.

        Raises:
            RuntimeError: the graph is already captured or capturing, or the current stream
                is the default stream.
            CaptureNotSupportedError: the backend cannot capture graphs.
            ValueError: unknown ``capture_error_mode``, or ``check_input_liveness=True``.
        """
        _torch_only("check_input_liveness", check_input_liveness)
        b = _graph_backend(self._backend_name)
        self._begin(b, _tls.device.get(b.name, 0), None, pool, capture_error_mode)

    def capture_end_pre(self) -> None:
        """End the capture without finishing it: the captured graph stays readable (for
        :meth:`raw_cuda_graph`, :meth:`debug_dump`) until :meth:`capture_end_post`."""
        self._capture_end_pre(warn=True)

    def capture_end_post(self) -> None:
        """Finish a capture ended by :meth:`capture_end_pre`: with ``keep_graph=False`` the
        graph must be instantiated (:meth:`instantiate`) and the captured graph is dropped."""
        self._capture_end_post()

    def pools(self) -> list[tuple[int, int]]:
        """Ids of every memory pool this graph keeps: its own (:meth:`pool`), then those a
        ``use_mem_pool`` block allocated from during its capture (kept until :meth:`reset`),
        as ``torch.cuda.CUDAGraph.pools``."""
        return [self.pool(), *self._pools_kept]

    def debug_dump(self, debug_path: str | os.PathLike[str], *,
                   verbose: bool = True) -> None:
        """Write the captured graph to ``debug_path`` in Graphviz DOT format (``verbose``:
        the most detailed output); see :meth:`Graph.debug_dump`."""
        dump_dot(self, os.fspath(debug_path), verbose)

    # ------------------------------------------------------------------ raw handles
    def _native(self, executable: bool) -> int:
        self._check_open()
        b = self._b if self._b is not None else _graph_backend(self._backend_name)
        index = self._index if self._b is not None else _tls.device.get(b.name, 0)
        if not b.capabilities(index).graph_native_handles:
            raise CaptureNotSupportedError(
                f"the {b.name} backend has no native graph handles (raw_cuda_graph() and "
                "raw_cuda_graph_exec() return CUDA's cudaGraph_t / cudaGraphExec_t); use "
                "debug_dump() to inspect a graph")
        if executable:
            if self._handle is None or not self._exec:
                raise RuntimeError("You cannot access the raw cudaGraphExec_t instance until "
                                   "instantiate() has been called")
            exe = b.graph_native_handles(self._index, self._handle)[1]
            assert exe is not None
            return exe
        if self._handle is None or not self._template:
            raise RuntimeError("No cudaGraph_t is available: either capture_end() has not "
                               "been called, or the underlying cudaGraph_t was destroyed "
                               "(keep_graph=false, and capture has been finalized). Make the "
                               "graph with keep_graph=True (or read it in a capture-end "
                               "hook) to keep it")
        return b.graph_native_handles(self._index, self._handle)[0]

    def raw_cuda_graph(self) -> int:
        """The captured ``cudaGraph_t`` (``CUgraph``) as an int: with ``keep_graph=True`` after
        the capture, or inside a capture-end hook.

        Raises:
            RuntimeError: the captured graph is not kept.
            CaptureNotSupportedError: the backend has no native graph handles (not cuda).
        """
        return self._native(False)

    def raw_cuda_graph_exec(self) -> int:
        """The executable ``cudaGraphExec_t`` (``CUgraphExec``) as an int, once instantiated
        (a later :meth:`instantiate` destroys it).

        Raises:
            RuntimeError: the graph was not instantiated.
            CaptureNotSupportedError: the backend has no native graph handles (not cuda).
        """
        return self._native(True)

    # ------------------------------------------------------------------ hooks
    def _hook(self, kind: str, hook: Callable[[Any], None]) -> RemovableHandle:
        self._check_open()
        return _add_hook(self._hooks[kind], hook)

    def register_capture_start_hook(self: _D, hook: Callable[[_D], None]) -> RemovableHandle:
        """Run ``hook(graph)`` right after this graph's capture begins (work it submits to the
        capturing stream is captured); errors propagate. Returns a handle to remove it."""
        return self._hook("capture_start", hook)

    def register_capture_end_hook(self: _D, hook: Callable[[_D], None]) -> RemovableHandle:
        """Run ``hook(graph)`` when the capture ends, while the captured graph is readable
        (before instantiation). Returns a handle to remove it."""
        return self._hook("capture_end", hook)

    def register_post_instantiate_hook(self: _D,
                                       hook: Callable[[_D], None]) -> RemovableHandle:
        """Run ``hook(graph)`` after each instantiation. Returns a handle to remove it."""
        return self._hook("instantiate", hook)

    def register_replay_start_hook(self: _D, hook: Callable[[_D], None]) -> RemovableHandle:
        """Run ``hook(graph)`` at the start of every :meth:`replay`, before the launch (keep
        it cheap). Returns a handle to remove it."""
        return self._hook("replay_start", hook)

    def register_replay_end_hook(self: _D, hook: Callable[[_D], None]) -> RemovableHandle:
        """Run ``hook(graph)`` at the end of every :meth:`replay`, once the work is submitted
        (not finished), even if the launch failed. Returns a handle to remove it."""
        return self._hook("replay_end", hook)

    def register_generator_state(self, generator: Generator) -> None:
        """Register ``generator`` (an ``accelrt.random.Generator``) with this graph: each
        replay then draws new numbers from it, as the eager work would
        (``torch.cuda.CUDAGraph.register_generator_state``; docs/random.md). Optional, as in
        PyTorch 2.13 and later: a generator joins the capture at its first draw in it.
        :meth:`reset` drops the registrations.

        Raises:
            TypeError: ``generator`` is not an ``accelrt.random.Generator``.

        Example::

            >>> import accelrt as acc
            >>> gen = acc.random.Generator("cpu:0").manual_seed(1)
            >>> g, x = acc.cpu.Graph(), acc.zeros(4, device="cpu:0")
            >>> g.register_generator_state(gen)
            >>> with acc.cpu.graph(g):
            ...     _ = acc.random.uniform_(x, generator=gen)
            >>> g.replay(); gen.get_offset()
            1
        """
        from .random import Generator as Gen
        if not isinstance(generator, Gen):
            raise TypeError(f"register_generator_state() takes an accelrt.random.Generator, "
                            f"got {type_shown(generator)}")
        _graphsafe().register(self, generator)

    @classmethod
    def get_currently_capturing_graph(cls) -> Graph:
        """The graph capturing the current stream of the current device, or ``RuntimeError``
        (``torch.cuda.CUDAGraph.get_currently_capturing_graph``).

        Example::

            >>> import accelrt as acc
            >>> g = acc.cpu.Graph()
            >>> with acc.cpu.graph(g):
            ...     same, _ = acc.cpu.Graph.get_currently_capturing_graph() is g, acc.ones(1)
            >>> same
            True
        """
        b = _graph_backend(cls._backend_name)
        index = _tls.device.get(b.name, 0)
        g = capturing_graph(b.name, index, int(_stream._current(b, index)._handle))
        if g is None:
            raise RuntimeError("The current stream is not currently capturing.")
        return g


def _free_for_capture(b: Backend, index: int) -> None:
    """What torch's capture entries (``accelerator.Graph``, ``cuda.graph``) do first: sync the
    device (not a checked sync; no ``gc.collect()``, as torch 2.15 without
    ``force_cudagraph_gc``), then empty every device's cache (PyTorch's ``emptyCache``
    empties every device's allocator) and the pinned host cache."""
    _stream._synchronize(b, index)
    from .memory import _host, _registry
    _registry.empty_backend_cache(b)
    host = _host.peek_host_allocator(b.name)
    if host is not None:
        host.empty_cache()


class graph:
    """Context manager that captures the work of its body into ``cuda_graph``
    (``torch.cuda.graph``).

    It synchronizes the device and empties every device's cache and the host's, then captures on
    ``stream`` (default: a side stream of the current device of the graph's backend, shared
    by all ``graph`` contexts there; ``accelrt.graph(accelrt.cpu.Graph())`` captures cpu
    work whatever the current accelerator) with allocations going to the graph's pool.
    If the body raises, the capture is still ended (as in PyTorch) and the body's exception
    propagates; call :meth:`Graph.reset` before capturing again.

    Args:
        cuda_graph: the :class:`Graph` to capture into.
        pool: a pool to share (see :meth:`Graph.capture_begin`).
        stream: the non-default stream to capture on.
        capture_error_mode: see :meth:`DeviceGraph.capture_begin`.
        enable_annotations, check_input_liveness: PyTorch's kernel-annotation and
            tensor-liveness options; only False here (they need PyTorch's kernels/tensors).
        annotation_config: the annotations' options (torch 2.15): checked as torch checks
            them (an unknown key or value raises ``ValueError``), then unused.
    A :class:`Graph` made with ``pool=`` shares that pool when ``pool`` is not given here.

    ``graph.default_capture_stream`` (``torch.cuda.graph``'s class attribute): set it to a
    stream to make it the capture stream of every ``graph`` context of this class made
    without ``stream=`` (PyTorch's way of choosing the side stream); while it is ``None``
    (the default) each device has its own shared side stream. PyTorch fills it lazily with
    one stream of the device current at the first capture; accelrt leaves it to the user so
    that a capture on another device never runs on the first device's stream.

    Example::

        >>> import accelrt as acc
        >>> x = acc.zeros(4, device="cpu")
        >>> g = acc.cpu.Graph()     # acc.Graph() follows the current accelerator
        >>> with acc.cpu.graph(g):
        ...     side = acc.current_stream("cpu")
        ...     _ = x.fill_(1.0)
        >>> side != acc.current_stream("cpu")
        True
    """

    _default_streams: ClassVar[dict[tuple[str, int], _stream.Stream]] = {}   # guarded by _lock
    #: The capture stream of contexts made without ``stream=`` when set (see above).
    default_capture_stream: ClassVar[_stream.Stream | None] = None
    #: Graph class accepted and backend used (``accelrt.cuda.graph`` fixes cuda).
    _graph_class: ClassVar[type[Graph]] = Graph

    def __init__(self, cuda_graph: Graph, pool: PoolLike = None,
                 stream: _stream.Stream | None = None,
                 capture_error_mode: str = "global", enable_annotations: bool = False,
                 annotation_config: Mapping[str, object] | None = None,
                 check_input_liveness: bool = False) -> None:
        _torch_only("enable_annotations", enable_annotations)
        _check_annotation_config(annotation_config)
        _torch_only("check_input_liveness", check_input_liveness)
        capture_error_mode = _check_mode(capture_error_mode)
        if not isinstance(cuda_graph, Graph):
            raise TypeError(f"graph() takes an accelrt.Graph, got {type_shown(cuda_graph)}")
        cuda_graph._check_open()
        # the generic graph() captures a device module's graph on that module's backend
        name = self._graph_class._backend_name or type(cuda_graph)._backend_name
        if name is not None and type(cuda_graph)._backend_name not in (None, name):
            raise ValueError(f"this graph() captures {name} work; got a "
                             f"{type(cuda_graph)._backend_name} graph")
        if stream is not None and not isinstance(stream, _stream.Stream):
            raise TypeError(f"stream must be an accelrt.Stream or None, got "
                            f"{type_shown(stream)}")
        _pool_id(pool)
        self.cuda_graph = cuda_graph
        self.pool = pool if pool is not None else cuda_graph.graph_pool
        self.capture_error_mode = capture_error_mode
        if stream is None:
            stream = type(self).default_capture_stream
            if stream is not None and not isinstance(stream, _stream.Stream):
                raise TypeError(f"graph.default_capture_stream must be an accelrt.Stream or "
                                f"None, got {type_shown(stream)}")
            if stream is not None and name is not None and stream.device_type != name:
                raise ValueError(f"graph.default_capture_stream is a {stream.device_type} "
                                 f"stream; this graph() captures {name} work: set a {name} "
                                 "stream or None")
        if stream is None:
            b = _graph_backend(name)
            index = _tls.device.get(b.name, 0)
            with _lock:
                stream = self._default_streams.get((b.name, index))
                if stream is None or stream._b is not b or stream._closed:
                    # none yet, a replaced backend, or a user closed the shared side stream
                    stream = self._default_streams[(b.name, index)] = \
                        _stream.Stream(_dev._device_obj(b.name, index))
        self.capture_stream = stream

    def __enter__(self) -> None:
        s = self.capture_stream
        b, index = s._b, s._index
        _free_for_capture(b, index)
        s.__enter__()
        try:
            self.cuda_graph._begin(b, index, s, self.pool, self.capture_error_mode)
        except BaseException:
            s.__exit__(None, None, None)
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            try:
                self.cuda_graph.capture_end()
            except Exception:
                if exc_type is None:
                    raise
                # the body already failed: its error matters more than the broken capture
                self.cuda_graph.reset()
        finally:
            self.capture_stream.__exit__(exc_type, exc, tb)
