"""``accelrt.Graph`` and the ``accelrt.graph`` context manager: capture stream work once,
replay it many times (``torch.cuda.CUDAGraph`` / ``torch.cuda.graph`` semantics).

Capture runs on a non-default stream of the current device. While a graph captures, memory
the caching allocator hands out on the capturing stream comes from a *private pool* of that
graph, so addresses baked into the graph stay valid and are not reused by other work; graphs
can share a pool with ``capture_begin(pool=other.pool())``. Backends that cannot capture
(``Backend.graph_supported`` is False) raise :class:`~accelrt.CaptureNotSupportedError`.

Example::

    >>> import accelrt as acc
    >>> x = acc.zeros(4, device="cpu")
    >>> g = acc.Graph()
    >>> s = acc.Stream("cpu")
    >>> with acc.graph(g, stream=s):
    ...     _ = x.fill_(1.0)
    >>> g.replay()
    >>> g.reset()
"""

from __future__ import annotations

import gc
import itertools
import threading
import warnings
from typing import TYPE_CHECKING, Any, ClassVar

from . import _device as _dev
from . import _stream
from ._device import _lazy_init, _require_current, _tls
from ._errors import CaptureNotSupportedError, ClosedError
from ._fork import reinit_after_fork
from ._handles import GraphHandle, StreamHandle

if TYPE_CHECKING:
    from types import TracebackType

    from ._backend import Backend
    from ._typing import PoolLike

__all__ = ["Graph", "graph", "graph_pool_handle"]

_CAPTURE_MODES = ("global", "thread_local", "relaxed")
_ids = itertools.count(1)
_lock = reinit_after_fork(threading.Lock())
#: Captures in progress per (backend name, device index); guarded by _lock.
_active: dict[tuple[str, int], int] = {}


def graph_pool_handle() -> tuple[int, int]:
    """A new pool id that graphs can share: pass it to ``capture_begin(pool=...)`` or
    ``graph(..., pool=...)`` (``torch.cuda.graph_pool_handle``).

    Example::

        >>> import accelrt as acc
        >>> from accelrt._graph import graph_pool_handle
        >>> graph_pool_handle() != graph_pool_handle()
        True
    """
    with _lock:
        return (next(_ids), 0)


def _graph_backend(name: str | None) -> Backend:
    if name is not None:
        from . import _backend
        return _backend.get_backend(name)
    return _dev._current_backend if _dev._current_backend is not None else _require_current()


def _pool_id(pool: Any) -> tuple[int, int] | None:
    """Normalise a ``pool`` argument: None, a pool id tuple, or a ``MemPool``."""
    if pool is None:
        return None
    pid = getattr(pool, "id", pool)
    if (isinstance(pid, tuple) and len(pid) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in pid)):
        return pid
    raise TypeError(f"pool must be None, a pool id from Graph.pool() / graph_pool_handle(), "
                    f"or a MemPool, got {pool!r}")


class Graph:
    """A captured sequence of stream work that can be replayed (``torch.cuda.CUDAGraph``).

    Use it through :class:`graph`, or call :meth:`capture_begin` / :meth:`capture_end`
    around work submitted to the current, non-default stream.

    Example::

        >>> import accelrt as acc
        >>> x = acc.zeros(4, device="cpu:0")
        >>> g = acc.cpu.Graph()     # acc.Graph() follows the current accelerator
        >>> with acc.Stream("cpu:0"):
        ...     g.capture_begin()
        ...     _ = x.fill_(2.0)
        ...     g.capture_end()
        >>> g.replay()
        >>> isinstance(g.pool(), tuple)
        True
    """

    __slots__ = ("__weakref__", "_allocator", "_b", "_capturing", "_closed", "_handle", "_index",
                 "_pool", "_stream")

    #: Fixed backend for device-specific subclasses (``accelrt.cuda.CUDAGraph``); ``None``:
    #: the current accelerator.
    _backend_name: ClassVar[str | None] = None

    def __init__(self) -> None:
        self._b: Backend | None = None
        self._index = -1
        self._stream = StreamHandle(0)
        self._handle: GraphHandle | None = None
        self._pool: tuple[int, int] | None = None
        self._allocator: Any = None
        self._capturing = False
        self._closed = False

    def capture_begin(self, pool: PoolLike = None, capture_error_mode: str = "global") -> None:
        """Begin capturing work submitted to the current stream of the current device.

        Args:
            pool: share the private memory pool of another graph (``other.pool()``), a
                :func:`graph_pool_handle`, or a ``MemPool``; ``None`` makes a new pool.
            capture_error_mode: ``"global"``, ``"thread_local"`` or ``"relaxed"``; accepted for
                PyTorch compatibility (the CUDA backend captures in thread-local mode).

        Raises:
            RuntimeError: the graph is already captured or capturing, or the current stream
                is the default stream.
            CaptureNotSupportedError: the backend cannot capture graphs.
            ValueError: unknown ``capture_error_mode``.
        """
        b = _graph_backend(self._backend_name)
        index = _tls.device.get(b.name, 0)
        self._begin(b, index, None, pool, capture_error_mode)

    def _begin(self, b: Backend, index: int, stream_obj: _stream.Stream | None, pool: Any,
               capture_error_mode: str) -> None:
        """Begin capturing on ``stream_obj`` (default: the current stream of ``b:index``)."""
        self._check_open()
        if capture_error_mode not in _CAPTURE_MODES:
            raise ValueError(f"capture_error_mode must be one of {_CAPTURE_MODES}, got "
                             f"{capture_error_mode!r}")
        if self._capturing or self._handle is not None:
            raise RuntimeError("this Graph is already captured or capturing; call reset() "
                               "before capturing again")
        if self._backend_name is not None and b.name != self._backend_name:
            raise ValueError(f"a {type(self).__name__} captures {self._backend_name} work, not "
                             f"{b.name} work; use accelrt.Graph")
        pid = _pool_id(pool)
        if not b.graph_supported(index):
            raise CaptureNotSupportedError(
                f"the {b.name} backend cannot capture graphs; use a backend with graph "
                "support (cuda, cpu) or run the work eagerly")
        _lazy_init(b, index)
        if stream_obj is None:
            stream_obj = _stream._current(b, index)
        stream = stream_obj._handle
        if stream == b.default_stream(index):
            raise RuntimeError("graphs must be captured on a non-default stream: wrap the "
                               "capture in `with accelrt.Stream():` or use accelrt.graph(), "
                               "which does (replaying on the default stream is fine)")
        if pid is None:
            pid = graph_pool_handle()
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
            return (threading.get_ident() == thread and _active.get(key, 0) == 1
                    and s != b.default_stream(index)
                    and b.stream_is_capturing(index, StreamHandle(s)))

        a.begin_allocate_to_pool(pid, stream_filter)
        try:
            b.graph_capture_begin(index, stream)
        except BaseException:
            a.end_allocate_to_pool(pid)
            a.release_pool(pid)
            raise
        with _lock:
            _active[key] = _active.get(key, 0) + 1
        self._b, self._index, self._stream = b, index, stream
        self._pool, self._allocator, self._capturing = pid, a, True

    def capture_end(self) -> None:
        """End the capture begun by :meth:`capture_begin` and make the graph replayable.

        Raises:
            RuntimeError: no capture is in progress.
        """
        if not self._capturing:
            self._check_open()
            raise RuntimeError("capture_end() without capture_begin(); begin a capture first")
        self._end_capture(warn=True)

    def _end_capture(self, warn: bool) -> None:
        b, index = self._b, self._index
        assert b is not None
        self._capturing = False
        with _lock:
            key = (b.name, index)
            _active[key] -= 1
            if not _active[key]:
                del _active[key]
        try:
            self._handle = b.graph_capture_end(index, self._stream)
        finally:
            self._allocator.end_allocate_to_pool(self._pool)
        if warn and b.graph_node_count(index, self._handle) == 0:
            warnings.warn("The CUDA Graph is empty. This usually means that the graph was "
                          "attempted to be captured on wrong device or stream.", UserWarning,
                          stacklevel=2)

    def replay(self) -> None:
        """Submit the captured work on the current stream of the graph's device.

        Raises:
            RuntimeError: nothing has been captured.
        """
        if self._handle is None:
            self._check_open()
            raise RuntimeError("replay() needs a captured graph; capture one with "
                               "capture_begin()/capture_end() or accelrt.graph()")
        b, index = self._b, self._index
        assert b is not None
        b.graph_replay(index, self._handle, _stream._current(b, index)._handle)

    def reset(self) -> None:
        """Destroy the captured graph and drop its reference to the private pool.

        Memory still allocated from the pool stays valid; the pool's cached memory becomes
        releasable once no graph or ``MemPool`` uses it.
        """
        self._check_open()
        if self._capturing:
            raise RuntimeError("reset() during capture; call capture_end() first")
        self._reset(finalizer=False)

    def close(self) -> None:
        """Destroy the captured graph and release its pool now (:meth:`reset`), and close the
        object; idempotent. A replay already submitted still runs. Afterwards every operation
        raises :class:`accelrt.ClosedError`. ``with Graph() as g:`` closes it at the end of the
        block (ending a capture still open there, as :class:`graph` does on an error).

        Raises:
            RuntimeError: a capture is in progress; call :meth:`capture_end` first.

        Example::

            >>> import accelrt as acc
            >>> x = acc.zeros(4, device="cpu")
            >>> with acc.Graph() as g:
            ...     with acc.graph(g):
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

    def __enter__(self) -> Graph:  # noqa: PYI034 - typing.Self needs Python 3.11
        self._check_open()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._capturing:   # the block raised inside a manual capture: end it first
            self._end_capture(warn=False)
        self.close()

    def _reset(self, finalizer: bool) -> None:
        # finalizer: called by __del__, which the garbage collector may run inside the
        # allocator's critical section on this thread: release the pool without blocking.
        b = self._b
        if self._handle is not None and b is not None:
            handle, self._handle = self._handle, None
            b.graph_destroy(self._index, handle)
        if self._pool is not None and self._allocator is not None:
            a, pid = self._allocator, self._pool
            self._allocator = None
            if finalizer:
                a.release_pool_from_finalizer(pid)
            else:
                a.release_pool(pid)

    def pool(self) -> tuple[int, int]:
        """Id of this graph's private memory pool, to share it with another capture.

        Raises:
            RuntimeError: the graph has not begun a capture yet.
        """
        self._check_open()
        if self._pool is None:
            raise RuntimeError("pool() is only available after capture_begin()")
        return self._pool

    def __del__(self) -> None:
        try:
            if not self._capturing:
                self._reset(finalizer=True)
        except Exception:  # noqa: BLE001, S110 - never raise from a finaliser
            pass

    def __repr__(self) -> str:
        state = ("closed" if self._closed else "capturing" if self._capturing else
                 "captured" if self._handle is not None else "empty")
        dev = f" on {self._b.name}:{self._index}" if self._b is not None else ""
        return f"<accelrt.Graph {state}{dev}>"


class graph:
    """Context manager that captures the work of its body into ``cuda_graph``
    (``torch.cuda.graph``).

    It synchronizes the device, collects garbage and empties the allocator's cache, then
    captures on ``stream`` (default: a side stream of the current device, shared by all
    ``graph`` contexts on that device) with allocations going to the graph's private pool.
    If the body raises, the capture is still ended (as in PyTorch) and the body's exception
    propagates; call :meth:`Graph.reset` before capturing again.

    Args:
        cuda_graph: the :class:`Graph` to capture into.
        pool: a pool to share (see :meth:`Graph.capture_begin`).
        stream: the non-default stream to capture on.
        capture_error_mode: see :meth:`Graph.capture_begin`.

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
    #: Graph class accepted and backend used (``accelrt.cuda.graph`` fixes cuda).
    _graph_class: ClassVar[type[Graph]] = Graph

    def __init__(self, cuda_graph: Graph, pool: PoolLike = None,
                 stream: _stream.Stream | None = None,
                 capture_error_mode: str = "global") -> None:
        if not isinstance(cuda_graph, Graph):
            raise TypeError(f"graph() takes an accelrt.Graph, got {type(cuda_graph).__name__}")
        cuda_graph._check_open()
        name = self._graph_class._backend_name
        if name is not None and type(cuda_graph)._backend_name not in (None, name):
            raise ValueError(f"this graph() captures {name} work; got a "
                             f"{type(cuda_graph)._backend_name} graph")
        if stream is not None and not isinstance(stream, _stream.Stream):
            raise TypeError(f"stream must be an accelrt.Stream or None, got "
                            f"{type(stream).__name__}")
        _pool_id(pool)
        self.cuda_graph = cuda_graph
        self.pool = pool
        self.capture_error_mode = capture_error_mode
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
        _stream._synchronize(b, index)   # as torch.cuda.graph: not a checked sync
        gc.collect()
        from .memory import _allocator
        a = _allocator.peek_allocator(b.name, index)
        if a is not None:
            a.empty_cache()
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
