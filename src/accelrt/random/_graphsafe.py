"""Graph-safe random numbers: what a graph capture does to a generator, as PyTorch's
``CUDAGeneratorState`` capture and replay protocol and ``CUDAGraph.register_generator_state``.

A capture does not consume a generator. A draw on a capturing stream takes counter blocks of
its generator *within the graph* (from 0, in capture order); the queued fill reads its seed and first block when it runs, from the graph's cell for
that generator. Each replay first queues, on the replay stream, the setting of that cell to the
generator's seed and current offset, then advances the generator past every block the capture
took. So each replay draws the numbers that running the captured work eagerly at that point
would draw, and every replay draws new ones.

PyTorch's rules (2.13 and later: a capture's state per generator state, keyed by the
capture). A graph counts and advances generator *state objects*, which
``Generator.graphsafe_get_state`` shares and ``graphsafe_set_state`` swaps, as PyTorch keys
``CUDAGraph``'s registrations by ``CUDAGeneratorState``:

* ``capture_begin`` registers the default generator of the capture's device; a device graph's
  ``register_generator_state(generator)`` registers another one; ``reset()`` drops them.
* A draw on a capturing stream from any other generator registers it with the capturing
  graph at that draw (PyTorch's ``get_capture_state(capture_id, create_if_not_found)``).
* A draw on a stream that is not capturing is an ordinary one, also from a generator that a
  capture in progress is drawing from: it advances the generator, which each later replay
  starts from.
* On a capturing stream (the current stream of the current device, as PyTorch asks),
  ``get_offset``, ``set_offset``, ``seed`` and ``clone_state`` raise
  ``RuntimeError``, and ``manual_seed`` raises unless the seed is the generator's (then it is
  a no-op): :func:`check_not_capturing`. ``get_state`` and ``set_state`` read and set the
  generator's offset within the capture (:func:`intragraph_offset`; ``set_state`` takes only
  the generator's seed).

On a backend that makes random numbers on the device (``Capabilities.device_rng``, CUDA's
Philox kernel, which takes the seed and offset as launch arguments), a captured draw keeps the
blocks it reserved at capture time: every replay repeats the capture's numbers
(docs/random.md).

Example::

    >>> import accelrt as acc
    >>> g, x = acc.cpu.Graph(), acc.zeros(4, device="cpu:0")
    >>> with acc.cpu.graph(g):
    ...     _ = acc.random.uniform_(x)
    >>> g.replay(); first = x.tolist()
    >>> g.replay(); first != x.tolist()
    True
"""

from __future__ import annotations

import functools
import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _graph
from .._errors import AcceleratorTypeError, type_shown
from .._fork import reinit_after_fork
from .._handles import StreamHandle
from . import _philox

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._backend import Backend
    from .._graph import Graph
    from .._typing import PhiloxWord
    from ._generator import Generator, _State

__all__ = ["GraphRng", "capture_begin", "capture_end", "capturing", "check_not_capturing",
           "intragraph_offset", "philox_state", "register", "replay_prologue", "reserve"]

_M64 = (1 << 64) - 1
#: guards every graph's generator registrations and their intragraph counts
_lock = reinit_after_fork(threading.Lock())


class GraphRng:
    """One generator state registered with one graph (PyTorch keys a graph's registrations
    by ``CUDAGeneratorState``, the object :meth:`Generator.graphsafe_get_state` shares).

    Attributes:
        state: the generator state (``accelrt.random._generator._State``).
        increment: the counter blocks the last capture took (PyTorch's whole-graph increment).
        intragraph: the blocks taken so far by the capture in progress.
        cell: ``[seed, first block]`` (uint64) of the replay whose work runs: set in stream
            order by each replay, read by the captured fills when they run (and by the
            kernels that :func:`philox_state` gave views of it).
    """

    __slots__ = ("cell", "increment", "intragraph", "state")

    def __init__(self, state: _State) -> None:
        self.state = state
        self.increment = 0
        self.intragraph = 0
        self.cell = np.zeros(2, np.uint64)


def register(graph: Graph, generator: Generator) -> None:
    """Register the state ``generator`` uses now with ``graph`` (once; a capture in progress
    takes it at once)."""
    with _lock:
        _registration(graph, generator)


def _registration(graph: Graph, generator: Generator) -> GraphRng:
    """The registration with ``graph`` of the state ``generator`` uses now, made on first
    use (hold ``_lock``)."""
    st = generator._st
    reg = graph._rng.get(st)
    if reg is None:
        reg = graph._rng[st] = GraphRng(st)
    return reg


def capture_begin(graph: Graph, b: Backend, index: int) -> None:
    """Register the default generator of ``b:index`` and start counting, within the graph,
    the blocks of every registered generator (PyTorch's ``capture_prologue``)."""
    from ._generator import _default_for
    register(graph, _default_for(b, index))
    with _lock:
        for reg in graph._rng.values():
            reg.intragraph = 0


def capture_end(graph: Graph) -> None:
    """Stop counting: each registered generator's whole-graph increment is what the capture
    took (PyTorch's ``capture_epilogue``)."""
    with _lock:
        for reg in graph._rng.values():
            reg.increment = reg.intragraph


def replay_prologue(graph: Graph, b: Backend, index: int, stream: StreamHandle) -> None:
    """Before a replay on ``stream``: for each generator the capture drew from, queue the
    setting of the graph's cell to the generator's seed and offset, and advance the generator
    past the capture's blocks (PyTorch's ``replay_prologue``)."""
    for reg in list(graph._rng.values()):
        if reg.increment:
            seed, offset = reg.state.reserve(reg.increment)
            b.launch_host_func(index, functools.partial(_set_cell, reg.cell, seed, offset),
                               stream)


def _set_cell(cell: np.ndarray, seed: int, offset: int) -> None:
    cell[0] = seed
    cell[1] = offset


def _capturing_graph(b: Backend, index: int, stream: StreamHandle) -> Graph | None:
    """The graph capturing ``stream`` of ``b:index``: the one that began on it, or, for a
    stream that joined a capture (it waited on the capturing stream), the device's only
    capture in progress."""
    g = _graph.capturing_graph(b.name, index, int(stream))
    if g is None and b.stream_is_capturing(index, stream):
        live = [ref() for (name, i, _), ref in list(_graph._capturing.items())
                if name == b.name and i == index]
        found = [x for x in live if x is not None]
        if len(found) == 1:
            g = found[0]
    return g


def reserve(gen: Generator, b: Backend, index: int, stream: StreamHandle,
            nblocks: int) -> tuple[int, int, np.ndarray | None]:
    """``nblocks`` counter blocks of ``gen`` for a draw on ``stream`` while a capture is in
    progress somewhere: ``(seed, first block, None)`` on a stream that is not capturing (the
    generator advances), ``(0, first block within the graph, cell)`` on a capturing one (the
    capturing graph registers ``gen`` if it has not yet, as PyTorch 2.13 and later do).
    """
    graph = _capturing_graph(b, index, stream)
    if graph is None:
        seed, offset = gen._st.reserve(nblocks)
        return seed, offset, None
    with _lock:
        reg = _registration(graph, gen)
        first = reg.intragraph
        reg.intragraph = first + nblocks
    return 0, first, reg.cell


def _current(b: Backend) -> tuple[int, StreamHandle]:
    """The current device of ``b`` and its current stream: where PyTorch's generator calls
    ask whether a capture is under way (``currentStreamCaptureIdMayInitCtx``)."""
    from .. import _device, _stream
    index = _device._current_index(b)
    return index, _stream._current(b, index)._handle


def capturing(gen: Generator) -> bool:
    """Whether the current stream of the current device of ``gen``'s backend is capturing."""
    if not _graph._capturing:
        return False
    index, stream = _current(gen._b)
    return gen._b.stream_is_capturing(index, stream)


def intragraph_offset(gen: Generator, new: int | None = None) -> int | None:
    """On a capturing stream (:func:`capturing`): ``gen``'s offset within the capturing
    graph, set to ``new`` first when given (``gen`` joins the capture); ``None`` elsewhere,
    and on a backend that makes random numbers on the device (its captured draws advance
    the generator). PyTorch's ``philox_offset_per_thread`` and
    ``set_philox_offset_per_thread`` in a capture, which ``get_state`` and ``set_state``
    use (so a checkpoint's saved state rewinds the capture's draws)."""
    b = gen._b
    if not _graph._capturing or b.capabilities(gen._index).device_rng:
        return None
    graph = _capturing_graph(b, *_current(b))
    if graph is None:
        return None
    with _lock:
        reg = _registration(graph, gen)
        if new is not None:
            reg.intragraph = new
        return reg.intragraph


def check_not_capturing(gen: Generator, call: str) -> None:
    """Refuse ``gen.<call>`` on a capturing stream (:func:`capturing`; PyTorch's
    ``assertNotCapturing`` in ``CUDAGeneratorImpl``)."""
    if capturing(gen):
        index = _current(gen._b)[0]
        raise RuntimeError(
            f"Cannot call Generator.{call} during graph capture: the current stream of "
            f"{gen._b.name}:{index} is capturing; call it before the capture begins or "
            "after it ends")


def fill_at(cell: np.ndarray, first: int, ptr: int, n: int, dtype: np.dtype, dist: str,
            params: Sequence[Any]) -> None:
    """A captured fill: :func:`accelrt.random._philox.fill_at` at the replay's seed and
    first block (``cell``) plus the capture's ``first`` block."""
    _philox.fill_at(ptr, n, dtype, dist, int(cell[0]), (int(cell[1]) + first) & _M64, params)


def philox_state(gen: Generator, increment: object
                 ) -> tuple[PhiloxWord, PhiloxWord, PhiloxWord]:
    """:meth:`Generator.philox_state`: reserve ``ceil(increment / 4)`` counter blocks of
    ``gen`` for a kernel of the caller's (within the graph capturing the current stream of
    the current device, if one is)."""
    if type(increment) is bool or not isinstance(increment, (int, np.integer)):
        raise AcceleratorTypeError(f"philox_state expected an int, but got "
                                   f"{type_shown(increment)}")
    n = int(increment)
    if n < 0:
        raise OverflowError(f"philox_state(increment={n}): can't convert negative int to "
                            "unsigned; reserve 0 or more outputs")
    if n > _M64:
        raise OverflowError(f"philox_state(increment={n}): int too big to convert (at most "
                            "2**64 - 1)")
    nblocks = -(-n // 4)
    b, index = gen._b, gen._index
    cell = None
    if _graph._capturing and not b.capabilities(index).device_rng:
        # the current stream of the current device, as the other generator calls ask
        seed, first, cell = reserve(gen, b, *_current(b), nblocks)
    else:
        seed, first = gen._st.reserve(nblocks)
    if cell is not None:   # views of the graph's cell: each replay sets them before it runs
        words = cell.view(np.int64)
        return words[0:1], words[1:2], np.array([first], np.int64)
    host = np.array([seed, first], np.uint64).view(np.int64)
    return host[0:1], host[1:2], np.zeros(1, np.int64)
