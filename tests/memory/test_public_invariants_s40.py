"""One stateful property test of the public memory API, used the way code written against
``torch.cuda`` uses it, against a model, with PyTorch's invariants checked after every step.

The rules are public calls on a two-device cpu backend (synchronous and asynchronous streams
as parametrisations): arrays made (filled with a byte of their own), refilled, copied between
devices and dropped on several streams and devices; ``caching_allocator_alloc`` /
``caching_allocator_delete`` (also of pointers it never gave); ``record_stream`` on the array's
device or the other one, with that stream held back by a gate in the asynchronous mode;
``MemPool`` (``no_split`` too) + ``use_mem_pool``; graph capture into a new pool or a
``MemPool``, replayed once (arrays dropped in the capture, some after ``record_stream``);
``empty_cache`` (also inside ``use_mem_pool``); ``reset_peak_memory_stats``;
``reset_accumulated_memory_stats``; ``set_allocator_settings`` (``expandable_segments``,
``page_reuse``, ``max_split_size_mb``, ``garbage_collection_threshold``,
``roundup_power2_divisions``); ``set_per_process_memory_fraction`` and out-of-memory errors;
``record_memory_history`` on and off; ``memory_summary``.

The invariants (PyTorch's: shared/ALLOCATOR_SPEC.md §2-§6, §12, §14), per device, after every
step:

* the live allocations are exactly the snapshot's ``active_allocated`` blocks, each at its
  address, with its requested size, stream and pool, of PyTorch's rounded size (more only
  where PyTorch takes a block whole: a large block whose remainder is not split, a
  ``no_split`` pool's segment); ``memory_allocated()`` is the sum of their sizes;
* ``memory_stats()`` agrees with ``memory_allocated()``/``memory_reserved()`` and, for
  ``all``/``small_pool``/``large_pool``, with the snapshot's segments and blocks
  (``allocation``, ``allocated_bytes``, ``active``, ``active_bytes``, ``requested_bytes``,
  ``segment``, ``reserved_bytes``, ``inactive_split``, ``inactive_split_bytes``,
  ``oversize_*``, each private pool's ``reserved_bytes_by_private_pools``);
  ``requested_bytes`` is the live allocations' requested sizes plus those of the blocks
  pending a free; every ``peak >= current`` and no lower than any value seen since the last
  ``reset_peak_memory_stats``; every ``allocated - freed`` is ``current`` minus its value at
  the last ``reset_accumulated_memory_stats``; ``num_ooms`` counts the out-of-memory errors;
  ``num_sync_all_streams`` is ``num_alloc_retries`` plus the ``empty_cache()`` calls (a
  graph's capture makes one, of every device, as ``torch.accelerator.empty_cache()``);
  ``get_memory_info()`` sees the reserved bytes as used; ``MemPool.snapshot()`` and
  ``memory_snapshot(mempool_id)`` are that pool's segments;
* after ``empty_cache()`` every segment holds a live or pending block, or belongs to a private
  pool still referenced (a live ``MemPool``, a graph not reset);
* the history (``_snapshot()["device_traces"]``) has one ``alloc`` per allocation, one
  ``free_requested`` per free and one ``oom`` per out-of-memory error, in the model's order,
  with their addresses, sizes, streams and pools; at most one ``free_completed`` per
  ``free_requested`` (after it, and before the address is handed out again), the blocks
  still pending exactly those whose ``free_completed`` is missing; segment events that add
  up to the change of ``memory_reserved()`` and to ``num_device_alloc``/``num_device_free``;
* no address is handed out twice while live, and each array holds its own byte whenever it
  is checked and when it is dropped (nothing written through another array, by a copy, a
  replay or the allocator reached it).

``ACCELRT_S40_EXAMPLES=N`` runs N examples of 80 steps per mode (a long local run; the default
keeps the test to a few seconds) and prints how many steps ran.
"""

from __future__ import annotations

import collections
import gc
import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import hypothesis.strategies as st
import numpy as np
import pytest
from helpers.gates import Gate, open_when_blocked
from hypothesis import settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import accelrt as acc
from accelrt import OutOfMemoryError, backends, memory
from accelrt.backends.cpu import CpuBackend

MiB = 1 << 20
LIMIT = 1 << 30                          # each simulated device's memory
_backend_names = itertools.count()

#: (settings string, what it sets: max_split_size in bytes or None, the 16 roundup divisions,
#: gc threshold, expandable_segments and page_reuse (None: left as they were: PyTorch keeps
#: the keys a string leaves out, except the three it resets))
_NO_DIV = (0,) * 16
CONFIGS: list[tuple[str, int | None, tuple[int, ...], float, bool | None, bool | None]] = [
    ("", None, _NO_DIV, 0.0, None, None),
    ("expandable_segments:False,page_reuse:False", None, _NO_DIV, 0.0, False, False),
    ("expandable_segments:False", None, _NO_DIV, 0.0, False, None),
    ("max_split_size_mb:40", 40 * MiB, _NO_DIV, 0.0, None, None),
    ("expandable_segments:True", None, _NO_DIV, 0.0, True, None),
    ("expandable_segments:True,page_reuse:True", None, _NO_DIV, 0.0, True, True),
    ("roundup_power2_divisions:[1:2,>:4],max_split_size_mb:24", 24 * MiB,
     (2,) + (4,) * 15, 0.0, None, None),
    ("roundup_power2_divisions:4", None, (4,) * 16, 0.0, None, None),
    ("garbage_collection_threshold:0.6", None, _NO_DIV, 0.6, None, None),
    ("garbage_collection_threshold:0.8,max_split_size_mb:30", 30 * MiB, _NO_DIV, 0.8,
     None, None),
]
FRACTIONS = [0.03, 0.1, 0.5, 1.0]
TYPES = ("small", "large")
COUNTED = ("allocation", "allocated_bytes", "active", "active_bytes", "requested_bytes",
           "reserved_bytes", "segment", "inactive_split", "inactive_split_bytes")
TRACED = ("alloc", "free_requested", "oom")
DEFAULT_POOL = (0, 0)

#: seconds a held stream waits at most: a call that waits for it without the machine's
#: :meth:`~PublicMemoryMachine.call` (which opens the gate once the call blocks) fails the test
#: instead of hanging it
GATE_LIMIT = 30.0

sizes = st.one_of(st.integers(1, 4096), st.integers(4097, MiB),
                  st.integers(MiB + 1, 12 * MiB), st.integers(12 * MiB, 30 * MiB))
devices = st.integers(0, 1)
T = TypeVar("T")


class BoundedGate(Gate):
    """A :class:`helpers.gates.Gate` that gives up after :data:`GATE_LIMIT` seconds and says
    so in ``timed_out``."""

    timed_out = False

    def __call__(self) -> None:
        if not self.event.wait(GATE_LIMIT):
            self.timed_out = True


def round_size(size: int, divisions: tuple[int, ...]) -> int:
    """PyTorch's ``round_size`` (shared/ALLOCATOR_SPEC.md §2), written from the spec."""
    if size < 512:
        return 512
    d = divisions[min(max(size.bit_length() - 1 - 20, 0), 15)]
    if d > 1 and size > 512 * d:
        if size & (size - 1) == 0:
            return size
        floor = 1 << (size.bit_length() - 1)
        step = floor >> (d.bit_length() - 1)
        if step == 0:
            return 2 * floor
        f = size & ~(step - 1)
        return size if f == size else f + step
    return -(-size // 512) * 512


def segment_size(rounded: int) -> int:
    """PyTorch's ``get_allocation_size``: the segment a miss of ``rounded`` bytes allocates."""
    if rounded <= MiB:
        return 2 * MiB
    if rounded < 10 * MiB:
        return 20 * MiB
    return -(-rounded // (2 * MiB)) * 2 * MiB


@dataclass
class Live:
    """One live allocation of the model."""

    dev: int
    addr: int
    size: int                        # requested bytes
    rounded: int                     # PyTorch's round_size when it was made
    stream: acc.Stream               # the stream it was made on (an array's is filled there)
    pool: tuple[int, int]            # its pool id ((0, 0): the default pools)
    no_split: bool                   # from a no_split MemPool
    max_split: int | None            # max_split_size when it was made
    byte: int | None                 # an array's contents (None: a raw allocation)
    arr: acc.Array | None = None


@dataclass
class Recording:
    """What the history of one device must hold since recording started."""

    reserved_at_start: int
    before: set[int]                   # addresses live or pending when recording started
    device_calls: tuple[int, int]      # num_device_alloc/free minus their segment events
    expected: list[tuple[Any, ...]] = field(default_factory=list)


class PublicMemoryMachine(RuleBasedStateMachine):
    """The public memory API of one two-device backend against a model (module docstring)."""

    async_mode = False   # set by the test's parametrisation
    steps = 0            # steps run in this process (the long run reports them)
    features: collections.Counter[str] = collections.Counter()

    def __init__(self) -> None:
        super().__init__()
        # a backend of its own for each example: nothing an example leaves in an allocator
        # (its caches, high-water marks) changes the next one's outcomes, and so
        # hypothesis's draws
        name = f"inv{'async' if self.async_mode else 'sync'}{next(_backend_names)}"
        self.name = name
        backends.register(name, lambda: CpuBackend(
            num_devices=2, async_streams=self.async_mode, memory_limit=LIMIT, name=name))
        acc.set_current_accelerator(name)
        self.devs = [f"{name}:0", f"{name}:1"]
        self.live: dict[int, Live] = {}
        self.ids = itertools.count()
        self.pools: dict[int, memory.MemPool] = {}            # live MemPool objects
        self.no_split: set[tuple[int, int]] = set()            # ids of no_split pools
        self.graphs: dict[int, tuple[acc.Graph, tuple[int, int]]] = {}
        self.gate: BoundedGate | None = None                   # on a use stream
        self.max_split: int | None = None
        self.divisions = _NO_DIV
        self.expandable = False
        self.allowed: list[int | None] = [None, None]
        self.acc_base: list[dict[str, int]] = [{}, {}]
        self.recording: list[Recording] | None = None
        self.ooms = [0, 0]
        self.syncs = [0, 0]          # empty_cache() calls that synchronize (since a reset)
        self.seen = [[0, 0], [0, 0]]  # highest allocated, reserved seen since a peak reset
        self.byte = itertools.cycle(range(1, 256))
        self.freed_raw: list[int] = []
        # per device: its default stream, a work stream (allocations, captures) and a use
        # stream (record_stream targets, held back by the gate)
        self.streams = [{"default": acc.current_stream(dev), "work": acc.Stream(dev),
                         "use": acc.Stream(dev)} for dev in self.devs]
        memory.set_allocator_settings("expandable_segments:False,page_reuse:False")
        for dev in self.devs:
            memory.set_per_process_memory_fraction(1.0, dev)   # (starts its allocator)

    # ------------------------------------------------------------------ helpers
    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn``; while the gate holds a stream back, open it if ``fn`` blocks
        (``empty_cache``, the release before an out-of-memory error and a capture wait for
        every stream). The model's ``gate`` stays set until :meth:`release_use_stream`
        (whether it opened depends on timing, which hypothesis's draws must not)."""
        gate = self.gate
        if gate is None or gate.event.is_set():
            return fn()
        with open_when_blocked(gate, open_on_exit=False):
            return fn()

    def alive_pools(self) -> set[tuple[int, int]]:
        return {p.id for p in self.pools.values()} | {pid for _, pid in self.graphs.values()}

    def _expect(self, d: int, *entry: Any) -> None:
        if self.recording is not None:
            self.recording[d].expected.append(entry)

    def _add(self, d: int, addr: int, size: int, stream: acc.Stream, pool: tuple[int, int],
             no_split: bool, byte: int | None, arr: acc.Array | None) -> None:
        for other in self.live.values():
            assert (other.dev, other.addr) != (d, addr), f"{addr:#x} handed out twice"
        self.live[next(self.ids)] = Live(d, addr, size, round_size(size, self.divisions),
                                         stream, pool, no_split, self.max_split, byte, arr)
        self._expect(d, "alloc", addr, size, stream.stream_id, pool)

    def _check_content(self, lv: Live) -> None:
        if lv.arr is None or lv.byte is None:
            return
        lv.stream.synchronize()      # (a default or work stream: never held back)
        view = lv.arr.numpy()
        bad = int((view != lv.byte).sum())
        del view                     # (a view keeps the memory)
        assert bad == 0, f"{bad} of {lv.size} bytes of the array at {lv.addr:#x} changed"

    def _make(self, d: int, size: int, stream: acc.Stream, raw: bool,
              pool: memory.MemPool | None = None) -> None:
        """Allocate ``size`` bytes on ``stream`` (into ``pool``): a raw pointer or an array
        filled with a new byte; an out-of-memory error is checked instead."""
        dev = self.devs[d]

        def alloc() -> tuple[int, acc.Array | None]:
            if raw:
                return memory.caching_allocator_alloc(size, dev, stream), None
            with stream:
                arr = acc.empty(size, dtype="uint8", device=dev)
                arr.fill_(byte)
            return arr.data_ptr(), arr

        byte = None if raw else next(self.byte)
        pid = DEFAULT_POOL if pool is None else pool.id
        try:
            if pool is None:
                addr, arr = self.call(alloc)
            else:
                with memory.use_mem_pool(pool, dev):
                    addr, arr = self.call(alloc)
        except OutOfMemoryError:
            self._oom_expected(d, size, stream, pid)
            return
        self._add(d, addr, size, stream, pid, pid in self.no_split, byte, arr)

    def _oom_expected(self, d: int, size: int, stream: acc.Stream,
                      pool: tuple[int, int]) -> None:
        """An out-of-memory error: justified only if the memory left under the limit cannot
        hold the request's segment (after the release every such error does first)."""
        self.ooms[d] += 1
        rounded = round_size(size, self.divisions)
        self._expect(d, "oom", 0, rounded, stream.stream_id, pool)
        if self.expandable:
            return   # (pages: the memory needed is not the request's segment)
        dev = self.devs[d]
        limit = LIMIT if self.allowed[d] is None else min(LIMIT, self.allowed[d])
        assert memory.memory_reserved(dev) + segment_size(rounded) > limit, (
            f"out of memory for {size} bytes with {memory.memory_reserved(dev)} reserved "
            f"under a limit of {limit}")

    def _pick(self, data: st.DataObject, arrays_only: bool = False) -> Live:
        keys = sorted(k for k, lv in self.live.items() if lv.arr is not None or not arrays_only)
        return self.live[data.draw(st.sampled_from(keys))]

    def _arrays(self) -> bool:
        return any(lv.arr is not None for lv in self.live.values())

    # ------------------------------------------------------------------ rules: memory
    @rule(d=devices, size=sizes, where=st.sampled_from(["default", "work"]))
    def make_array(self, d: int, size: int, where: str) -> None:
        self._make(d, size, self.streams[d][where], raw=False)

    @rule(d=devices, size=sizes, where=st.sampled_from(["default", "work", "use"]))
    def raw_alloc(self, d: int, size: int, where: str) -> None:
        self._make(d, size, self.streams[d][where], raw=True)

    @precondition(lambda self: self.live)
    @rule(data=st.data(), how=st.sampled_from(["del", "close", "close_on_use"]))
    def drop(self, data: st.DataObject, how: str) -> None:
        lv = self._pick(data)
        self._check_content(lv)
        del self.live[next(k for k, v in self.live.items() if v is lv)]
        if lv.arr is None:
            memory.caching_allocator_delete(lv.addr)
            self.freed_raw.append(lv.addr)
        elif how == "close_on_use":
            lv.arr.close(stream=self.streams[data.draw(devices)]["use"])
        elif how == "close":
            lv.arr.close()
        lv.arr = None           # (del: the last reference goes)
        self._expect(lv.dev, "free_requested", lv.addr, lv.size, lv.stream.stream_id, lv.pool)

    @precondition(_arrays)
    @rule(data=st.data(), d=devices)
    def record_stream(self, data: st.DataObject, d: int) -> None:
        """An array used on the use stream of either device."""
        arr = self._pick(data, arrays_only=True).arr
        assert arr is not None
        arr.record_stream(self.streams[d]["use"])

    @precondition(_arrays)
    @rule(data=st.data())
    def refill(self, data: st.DataObject) -> None:
        lv = self._pick(data, arrays_only=True)
        assert lv.arr is not None
        lv.byte = next(self.byte)
        with lv.stream:
            lv.arr.fill_(lv.byte)

    @precondition(_arrays)
    @rule(data=st.data(), d=devices)
    def copy_to(self, data: st.DataObject, d: int) -> None:
        """A copy of an array on either device (made on its current stream)."""
        lv = self._pick(data, arrays_only=True)
        assert lv.arr is not None
        lv.stream.synchronize()      # (its fill is on its own stream)
        stream = self.streams[d]["default"]
        try:
            new = self.call(lambda: lv.arr.to(self.devs[d], copy=True))  # type: ignore[union-attr]
        except OutOfMemoryError:
            self._oom_expected(d, lv.size, stream, DEFAULT_POOL)
            return
        # the copy runs ordered with the current streams of both devices, not with the
        # source's own stream, whose next allocation could take the source's block once it
        # is freed (PyTorch's rule: record_stream, or wait): wait for the copy
        stream.synchronize()
        self.streams[lv.dev]["default"].synchronize()
        self._add(d, new.data_ptr(), lv.size, stream, DEFAULT_POOL, False, lv.byte, new)

    @rule()
    def check_contents(self) -> None:
        for lv in self.live.values():
            self._check_content(lv)

    @rule(d=devices, what=st.sampled_from(["freed", "array", "foreign"]))
    def bad_delete(self, d: int, what: str) -> None:
        """``caching_allocator_delete`` of a pointer it did not give (or gave and took back)
        raises and changes nothing."""
        arrays = [lv.addr for lv in self.live.values() if lv.arr is not None]
        ptr = {"freed": self.freed_raw[-1] if self.freed_raw else 12345,
               "array": arrays[-1] if arrays else 4096, "foreign": 0x5000}[what]
        if any(lv.addr == ptr and lv.arr is None for lv in self.live.values()):
            return      # (handed out again since)
        before = [memory.memory_stats(dev) for dev in self.devs]
        with pytest.raises(ValueError, match="invalid device pointer") as err:
            memory.caching_allocator_delete(ptr)
        assert isinstance(err.value, RuntimeError)      # (PyTorch's error is one)
        assert [memory.memory_stats(dev) for dev in self.devs] == before

    @precondition(lambda self: self.async_mode and self.gate is None)
    @rule(d=devices)
    def hold_use_stream(self, d: int) -> None:
        """Hold one device's use stream back: frees recorded on it stay pending."""
        use = self.streams[d]["use"]
        self.gate = BoundedGate()
        use._b.launch_host_func(use.device_index, self.gate, use.stream_id)

    @precondition(lambda self: self.gate is not None)
    @rule()
    def release_use_stream(self) -> None:
        assert self.gate is not None
        self.gate.open()
        self.gate = None
        for s in self.streams:
            s["use"].synchronize()

    @rule(d=devices)
    def synchronize(self, d: int) -> None:
        self.call(lambda: acc.synchronize(self.devs[d]))

    # ------------------------------------------------------------------ rules: pools, graphs
    @rule(no_split=st.booleans())
    def new_pool(self, no_split: bool) -> None:
        pool = memory.MemPool(no_split=no_split)
        self.pools[next(self.ids)] = pool
        if no_split:
            self.no_split.add(pool.id)

    @precondition(lambda self: self.pools)
    @rule(data=st.data(), d=devices, size=sizes, where=st.sampled_from(["default", "work"]),
          raw=st.booleans())
    def pool_alloc(self, data: st.DataObject, d: int, size: int, where: str,
                   raw: bool) -> None:
        pool = self.pools[data.draw(st.sampled_from(sorted(self.pools)))]
        self._make(d, size, self.streams[d][where], raw, pool)

    @precondition(lambda self: self.pools)
    @rule(data=st.data())
    def drop_pool(self, data: st.DataObject) -> None:
        """The MemPool object goes (its live blocks stay valid; its cache is given back, and
        giving a segment back waits for the device's work, as ``cudaFree`` does)."""
        k = data.draw(st.sampled_from(sorted(self.pools)))

        def drop() -> None:
            del self.pools[k]

        self.call(drop)

    @precondition(lambda self: self.pools)
    @rule(data=st.data(), d=devices)
    def empty_cache_in_pool(self, data: st.DataObject, d: int) -> None:
        """``empty_cache()`` while a ``use_mem_pool`` is open on device ``d``: torch 2.15's
        ``release_cached_blocks`` keeps the default pools only while a graph captures, so it
        empties both devices as a plain ``empty_cache()`` does."""
        pool = self.pools[data.draw(st.sampled_from(sorted(self.pools)))]
        with memory.use_mem_pool(pool, self.devs[d]):
            self.call(memory.empty_cache)
        for dd in range(2):
            self.syncs[dd] += 1
        self._check_emptied()

    @precondition(lambda self: len(self.graphs) < 3)
    @rule(data=st.data(), d=devices, into_pool=st.booleans(),
          made=st.lists(st.tuples(st.integers(1, 256 * 1024),
                                  st.sampled_from(["keep", "drop", "record_drop"])),
                        min_size=1, max_size=4))
    def capture(self, data: st.DataObject, d: int, made: list[tuple[int, str]],
                into_pool: bool) -> None:
        """A graph captured on the work stream allocates arrays (some dropped in the
        capture, maybe after a record_stream), fills them, and is replayed once; the
        survivors live in its pool."""
        if self.allowed[d] is not None:
            return      # (an out-of-memory error inside a capture: not modelled)
        mempool = None
        if into_pool and self.pools:
            mempool = self.pools[data.draw(st.sampled_from(sorted(self.pools)))]
            if mempool.id in self.no_split:
                mempool = None
        g = acc.Graph(pool=mempool)
        stream = self.streams[d]["work"]
        kept: list[tuple[acc.Array, int, int]] = []
        traced: list[tuple[Any, ...]] = []

        def run() -> None:
            with stream, g:
                for size, fate in made:
                    arr = acc.empty(size, dtype="uint8", device=self.devs[d])
                    traced.append(("alloc", arr.data_ptr(), size))
                    byte = next(self.byte)
                    arr.fill_(byte)
                    if fate == "keep":
                        kept.append((arr, size, byte))
                        continue
                    if fate == "record_drop":
                        arr.record_stream(self.streams[d]["use"])
                    traced.append(("free_requested", arr.data_ptr(), size))
                    del arr

        self.call(run)
        for dd in range(2):      # (torch.accelerator.empty_cache(): every device)
            self.syncs[dd] += 1
        pid = g.pool()
        with stream:         # (a replay runs on the current stream, as torch's)
            g.replay()
        stream.synchronize()
        self.graphs[next(self.ids)] = (g, pid)
        for action, addr, size in traced:
            self._expect(d, action, addr, size, stream.stream_id, pid)
        for arr, size, byte in kept:
            for other in self.live.values():
                assert (other.dev, other.addr) != (d, arr.data_ptr()), "handed out twice"
            self.live[next(self.ids)] = Live(d, arr.data_ptr(), size,
                                             round_size(size, self.divisions), stream, pid,
                                             False, self.max_split, byte, arr)
        self._check_emptied()

    @precondition(lambda self: self.graphs)
    @rule(data=st.data())
    def reset_graph(self, data: st.DataObject) -> None:
        """The graph goes (with it, maybe the last reference to a MemPool it captured into,
        whose cache is then given back: inside :meth:`call`)."""
        held = [self.graphs.pop(data.draw(st.sampled_from(sorted(self.graphs))))[0]]

        def close() -> None:
            g = held.pop()
            g.reset()
            g.close()

        self.call(close)

    # ------------------------------------------------------------------ rules: settings, stats
    @rule()
    def empty_cache(self) -> None:
        self.call(memory.empty_cache)
        for d in range(2):
            self.syncs[d] += 1
        self._check_emptied()

    def _check_emptied(self) -> None:
        """After an ``empty_cache()``: no segment holds only free blocks, unless a private
        pool still referenced owns it."""
        alive = self.alive_pools()
        for seg in memory.memory_snapshot():
            held = any(b["state"] != "inactive" for b in seg["blocks"])
            assert held or tuple(seg["segment_pool_id"]) in alive, (
                f"empty_cache() kept a free segment of pool {seg['segment_pool_id']}: {seg}")

    @rule(d=devices)
    def reset_peak(self, d: int) -> None:
        memory.reset_peak_memory_stats(self.devs[d])
        s = memory.memory_stats(self.devs[d])
        self.seen[d] = [s["allocated_bytes.all.current"], s["reserved_bytes.all.current"]]
        assert all(s[k] == s[k[:-len("peak")] + "current"] for k in s if k.endswith(".peak"))

    @rule(d=devices)
    def reset_accumulated(self, d: int) -> None:
        dev = self.devs[d]
        memory.reset_accumulated_memory_stats(dev)
        self.ooms[d] = self.syncs[d] = 0
        s = memory.memory_stats(dev)
        self.acc_base[d] = {k[:-len(".current")]: v for k, v in s.items()
                            if k.endswith(".current")}
        assert all(s[k] == 0 for k in s if k.endswith((".allocated", ".freed"))
                   or k in ("num_alloc_retries", "num_ooms", "num_sync_all_streams",
                            "num_device_alloc", "num_device_free"))
        if self.recording is not None:
            segs = self._segment_events(memory._snapshot(dev)["device_traces"][d])
            self.recording[d].device_calls = (-segs[0], -segs[1])

    @rule(conf=st.sampled_from(CONFIGS))
    def set_settings(self, conf: tuple[Any, ...]) -> None:
        text, max_split, divisions, gc_threshold, expandable, page_reuse = conf
        memory.set_allocator_settings(text)
        self.max_split, self.divisions = max_split, divisions
        if expandable is not None:
            self.expandable = expandable
        got = memory._snapshot(self.devs[0])["allocator_settings"]
        assert got["PYTORCH_CUDA_ALLOC_CONF"] == text
        assert got["max_split_size"] == (-1 if max_split is None else max_split)
        assert got["garbage_collection_threshold"] == gc_threshold
        assert got["expandable_segments"] == self.expandable
        assert tuple(got["roundup_power2_divisions"].values()) == divisions

    @rule(d=devices, f=st.sampled_from(FRACTIONS))
    def set_fraction(self, d: int, f: float) -> None:
        memory.set_per_process_memory_fraction(f, self.devs[d])
        self.allowed[d] = None if f == 1.0 else int(f * LIMIT)
        assert memory.get_per_process_memory_fraction(self.devs[d]) == (
            1.0 if f == 1.0 else int(f * LIMIT) / LIMIT)

    @rule(d=devices, raw=st.booleans())
    def out_of_memory(self, d: int, raw: bool) -> None:
        """A request over the limit raises and changes no allocation."""
        dev = self.devs[d]
        size = (LIMIT if self.allowed[d] is None else self.allowed[d]) + 1
        before = memory.memory_allocated(dev)
        with pytest.raises(OutOfMemoryError):
            if raw:
                self.call(lambda: memory.caching_allocator_alloc(size, dev))
            else:
                self.call(lambda: acc.empty(size, dtype="uint8", device=dev))
        self._oom_expected(d, size, self.streams[d]["default"], DEFAULT_POOL)
        assert memory.memory_allocated(dev) == before

    @rule(on=st.booleans(), context=st.sampled_from([None, "alloc", "all"]))
    def history(self, on: bool, context: str | None) -> None:
        if not on:
            memory.record_memory_history(None)
            self.recording = None
            return
        if self.recording is not None:
            return
        memory.record_memory_history("all", context=context, stacks="python")
        self.recording = []
        segments = memory.memory_snapshot()
        for d, dev in enumerate(self.devs):
            before = {lv.addr for lv in self.live.values() if lv.dev == d}
            before |= {b["address"] for seg in segments if seg["device"] == d
                       for b in seg["blocks"] if b["state"] == "active_pending_free"}
            s = memory.memory_stats(dev)
            self.recording.append(Recording(memory.memory_reserved(dev), before,
                                            (s["num_device_alloc"], s["num_device_free"])))

    @rule(d=devices, abbreviated=st.booleans())
    def summary(self, d: int, abbreviated: bool) -> None:
        dev = self.devs[d]
        s = memory.memory_stats(dev)
        nested = memory.memory_stats_as_nested_dict(dev)
        assert nested["allocated_bytes"]["all"]["current"] == s["allocated_bytes.all.current"]
        text = memory.memory_summary(dev, abbreviated=abbreviated)
        assert "Allocated memory" in text and ("from large pool" in text) != abbreviated

    # ------------------------------------------------------------------ invariants
    @invariant()
    def consistent(self) -> None:
        type(self).steps += 1
        assert not (self.gate and self.gate.timed_out), \
            "a call waited for the held stream outside PublicMemoryMachine.call"
        segments = memory.memory_snapshot()
        order = [(s["device"], s["address"]) for s in segments]
        assert order == sorted(order), "segments not sorted by device and address"
        traces = memory._snapshot(self.devs[0])["device_traces"]
        for d in range(2):
            segs = [s for s in segments if s["device"] == d]
            pending = self._check_device(d, segs)
            if self.recording is not None:
                self._check_trace(d, traces[d], pending)
            if EXAMPLES:
                self._count_features(d, segs, pending)
        for pool in self.pools.values():
            mine = [s for s in segments if tuple(s["segment_pool_id"]) == pool.id]
            assert pool.snapshot() == mine
            assert memory.memory_snapshot(pool.id) == mine

    def _tally(self, segs: list[dict[str, Any]]) -> tuple[dict[str, dict[str, int]],
                                                         dict[tuple[int, int], list[int]],
                                                         dict[int, Any], dict[int, int]]:
        """What the snapshot's segments add up to: the statistics per pool type, the bytes
        of each private pool (small, large), the allocated blocks (address -> segment, block)
        and the pending ones (address -> requested size)."""
        exp = {t: dict.fromkeys(COUNTED, 0) for t in TYPES}
        by_pool: dict[tuple[int, int], list[int]] = {}
        allocated: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
        pending: dict[int, int] = {}
        end = 0
        for seg in segs:
            assert seg["address"] >= end, "segments overlap"
            end = seg["address"] + seg["total_size"]
            e = exp[seg["segment_type"]]
            e["reserved_bytes"] += seg["total_size"]
            pid = tuple(seg["segment_pool_id"])
            if pid != DEFAULT_POOL:
                by_pool.setdefault(pid, [0, 0])[seg["segment_type"] == "large"] += \
                    seg["total_size"]
            e["segment"] += not seg["is_expandable"]
            split = len(seg["blocks"]) > 1 and not seg["is_expandable"]
            addr = seg["address"]
            for blk in seg["blocks"]:
                assert blk["address"] == addr and blk["size"] > 0, "blocks not contiguous"
                addr += blk["size"]
                state = blk["state"]
                if state == "active_allocated":
                    e["allocation"] += 1
                    e["allocated_bytes"] += blk["size"]
                    allocated[blk["address"]] = (seg, blk)
                elif state == "active_pending_free":
                    pending[blk["address"]] = blk["requested_size"]
                if state != "inactive":
                    e["active"] += 1
                    e["active_bytes"] += blk["size"]
                    e["requested_bytes"] += blk["requested_size"]
                elif split:
                    e["inactive_split"] += 1
                    e["inactive_split_bytes"] += blk["size"]
            assert addr == end, "blocks do not fill their segment"
        return exp, by_pool, allocated, pending

    def _check_device(self, d: int, segs: list[dict[str, Any]]) -> dict[int, int]:
        """The device's statistics against its snapshot and the model; returns the pending
        blocks (address -> requested size)."""
        dev = self.devs[d]
        s = memory.memory_stats(dev)
        live = {lv.addr: lv for lv in self.live.values() if lv.dev == d}
        exp, by_pool, allocated, pending = self._tally(segs)
        assert set(allocated) == set(live), (
            f"allocated blocks {sorted(map(hex, allocated))} but live {sorted(map(hex, live))}")
        for addr, lv in live.items():
            self._check_block(lv, *allocated[addr])
        allocated_bytes = sum(blk["size"] for _, blk in allocated.values())
        reserved = sum(seg["total_size"] for seg in segs)
        assert memory.memory_allocated(dev) == s["allocated_bytes.all.current"] \
            == allocated_bytes
        assert memory.memory_reserved(dev) == s["reserved_bytes.all.current"] == reserved
        assert s["requested_bytes.all.current"] == (sum(lv.size for lv in live.values())
                                                    + sum(pending.values()))
        for name in COUNTED:
            small, large = exp["small"][name], exp["large"][name]
            assert (s[f"{name}.small_pool.current"], s[f"{name}.large_pool.current"],
                    s[f"{name}.all.current"]) == (small, large, small + large), name
        for (a, b), (small, large) in by_pool.items():
            key = f"reserved_bytes_by_private_pools.{a}_{b}"
            assert (s[f"{key}.small_pool.current"], s[f"{key}.large_pool.current"],
                    s[f"{key}.all.current"]) == (small, large, small + large), key
        split = self.max_split if self.max_split is not None else 1 << 62
        assert s["oversize_allocations.current"] == sum(
            blk["size"] >= split for _, blk in allocated.values())
        assert s["oversize_segments.current"] == sum(
            seg["total_size"] >= split for seg in segs if not seg["is_expandable"])
        self._check_counters(d, s)
        free, total = memory.get_memory_info(dev)
        assert (total, total - free) == (LIMIT, reserved)
        return pending

    def _check_counters(self, d: int, s: dict[str, int]) -> None:
        dev = self.devs[d]
        assert s["num_ooms"] == self.ooms[d]
        assert s["num_sync_all_streams"] == s["num_alloc_retries"] + self.syncs[d]
        base = self.acc_base[d]
        for k, v in s.items():
            if k.endswith(".current"):
                key = k[:-len(".current")]
                assert s[f"{key}.peak"] >= v, key
                if not key.startswith("reserved_bytes_by_"):
                    assert s[f"{key}.allocated"] - s[f"{key}.freed"] == v - base.get(key, 0), key
        seen = self.seen[d]
        seen[0] = max(seen[0], s["allocated_bytes.all.current"])
        seen[1] = max(seen[1], s["reserved_bytes.all.current"])
        assert memory.max_memory_allocated(dev) == s["allocated_bytes.all.peak"] >= seen[0]
        assert memory.max_memory_reserved(dev) == s["reserved_bytes.all.peak"] >= seen[1]

    def _check_block(self, lv: Live, seg: dict[str, Any], blk: dict[str, Any]) -> None:
        """A live allocation's block: its requested size, pool, stream, and PyTorch's rounded
        size, or more where PyTorch takes a block whole."""
        assert blk["requested_size"] == lv.size
        assert tuple(seg["segment_pool_id"]) == lv.pool
        assert seg["stream"] == lv.stream.stream_id
        size, rounded = blk["size"], lv.rounded
        if lv.no_split:
            # never split: a segment of its own (or whole pages of an expandable one)
            assert size >= rounded, (seg, lv)
            assert len(seg["blocks"]) == 1 or seg["is_expandable"], (seg, lv)
        elif size != rounded:
            # only a large block whose remainder was not worth splitting: at most 1 MiB more,
            # or an oversize block reused for an oversize request
            extra = size - rounded
            assert seg["segment_type"] == "large" and extra > 0, (blk, lv)
            oversize = lv.max_split is not None and rounded >= lv.max_split
            assert extra <= MiB or (oversize and extra < 20 * MiB), (blk, lv)

    @staticmethod
    def _segment_events(trace: list[dict[str, Any]]) -> tuple[int, int, int]:
        """Device calls in a trace: (allocations and mappings, frees and unmappings, the
        bytes they add to the reserved memory)."""
        up = [e["size"] for e in trace if e["action"] in ("segment_alloc", "segment_map")]
        down = [e["size"] for e in trace if e["action"] in ("segment_free", "segment_unmap")]
        return len(up), len(down), sum(up) - sum(down)

    def _check_trace(self, d: int, trace: list[dict[str, Any]], pending: dict[int, int]
                     ) -> None:
        rec = self.recording[d]  # type: ignore[index]
        got = [(e["action"], e.get("addr", 0), e["size"], e["stream"], tuple(e["pool_id"]))
               for e in trace if e["action"] in TRACED]
        assert got == rec.expected, f"device {d}: trace {got} != model {rec.expected}"
        state: dict[int, tuple[str, int]] = dict.fromkeys(rec.before, ("before", 0))
        for e in trace:
            act, addr, size = e["action"], e.get("addr", 0), e["size"]
            if act == "alloc":
                assert state.get(addr, ("done", 0))[0] == "done", \
                    f"{addr:#x} allocated again before its free completed"
                state[addr] = ("live", size)
            elif act == "free_requested":
                was = state.get(addr, ("?", 0))
                assert was[0] == "before" or was == ("live", size), e
                state[addr] = ("requested", size)
            elif act == "free_completed":
                was = state.get(addr, ("?", 0))
                assert was[0] == "before" or was == ("requested", size), e
                state[addr] = ("done", size)
        for addr in pending:
            assert state.get(addr, ("?", 0))[0] in ("requested", "before"), \
                f"{addr:#x} pending a free that the trace never requested"
        for addr, (what, _) in state.items():
            assert what != "requested" or addr in pending, \
                f"{addr:#x}: free_completed missing from the trace"
        ups, downs, grown = self._segment_events(trace)
        s = memory.memory_stats(self.devs[d])
        assert rec.reserved_at_start + grown == s["reserved_bytes.all.current"], \
            "segment events do not add up to memory_reserved()"
        assert (s["num_device_alloc"], s["num_device_free"]) == (
            rec.device_calls[0] + ups, rec.device_calls[1] + downs)

    def _count_features(self, d: int, segs: list[dict[str, Any]],
                        pending: dict[int, int]) -> None:
        """What the long run reached (printed with its step count)."""
        f = type(self).features
        f["pending free"] += bool(pending)
        f["pending free behind the gate"] += bool(pending) and self.gate is not None
        f["expandable segment"] += any(s["is_expandable"] for s in segs)
        f["MemPool segment"] += any(s["segment_pool_id"][0] == 0
                                    and s["segment_pool_id"][1] != 0 for s in segs)
        f["graph pool segment"] += any(s["segment_pool_id"][0] != 0 for s in segs)
        f["split segment"] += any(len(s["blocks"]) > 1 for s in segs)
        f["memory fraction set"] += self.allowed[d] is not None
        f["history recorded"] += self.recording is not None

    # ------------------------------------------------------------------ teardown
    def teardown(self) -> None:
        try:
            self._free_everything()
        finally:
            for ss in self.streams:
                ss["work"].close()
                ss["use"].close()
            b = backends.get_backend(self.name)
            backends.unregister(self.name)
            b.close()

    def _free_everything(self) -> None:
        """Free what the example made: then nothing stays reserved."""
        type(self).features["out-of-memory errors"] += sum(self.ooms)
        if self.gate is not None:
            self.gate.open()
        for lv in self.live.values():
            if lv.arr is None:
                memory.caching_allocator_delete(lv.addr)
            else:
                lv.arr.close()
        self.live.clear()
        while self.graphs:   # (no local keeps a graph: one made with a MemPool keeps it)
            self.graphs.popitem()[1][0].close()
        self.pools.clear()
        gc.collect()
        memory.record_memory_history(None)
        for dev in self.devs:
            acc.synchronize(dev)
        memory.empty_cache()
        for dev in self.devs:
            assert memory.memory_reserved(dev) == 0, memory.memory_snapshot()


EXAMPLES = int(os.environ.get("ACCELRT_S40_EXAMPLES", "0"))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_public_memory_api_keeps_pytorchs_invariants(mode: str) -> None:
    machine = type(f"PublicMemory_{mode}", (PublicMemoryMachine,),
                   {"async_mode": mode == "async", "steps": 0,
                    "features": collections.Counter()})
    run_state_machine_as_test(machine, settings=settings(
        max_examples=EXAMPLES or 35, stateful_step_count=80 if EXAMPLES else 50))
    if EXAMPLES:
        print(f"\n{machine.__name__}: {machine.steps} steps;",
              ", ".join(f"{k}: {v}" for k, v in sorted(machine.features.items())))


# ---------------------------------------------------------------------- regressions
# (plain tests of what the state machine found)

@pytest.fixture
def two_devices() -> str:
    """A fresh two-device cpu backend, the current accelerator for the test."""
    name = f"invreg{next(_backend_names)}"
    backends.register(name, lambda: CpuBackend(num_devices=2, name=name))
    acc.set_current_accelerator(name)
    return name


@pytest.mark.parametrize("entry", ["Graph", "graph"])
def test_a_capture_empties_the_cache_of_every_device(two_devices: str, entry: str) -> None:
    """``torch.accelerator.Graph.__enter__`` calls ``torch.accelerator.empty_cache()`` and
    ``torch.cuda.graph.__enter__`` ``torch.cuda.empty_cache()``: PyTorch's ``emptyCache``
    empties the allocator of every device (``for (auto& da : device_allocator)
    da->emptyCache()``), so a capture on device 0 gives back device 1's cached segments (and
    counts a ``num_sync_all_streams`` there); both entries empty the pinned host cache too
    (``empty_host_cache()``, ``torch._C._host_emptyCache()``). accelrt emptied only the
    capturing device, and ``graph`` no host cache."""
    d0, d1 = f"{two_devices}:0", f"{two_devices}:1"
    acc.empty(1000, dtype="uint8", device=d0).close()
    acc.empty(1000, dtype="uint8", device=d1).close()
    acc.pin_memory(np.ones(1000, dtype=np.uint8))      # (dropped: its block stays cached)
    assert memory.memory_reserved(d1) == memory.memory_reserved(d0) == 2 * MiB
    assert memory.host_memory_stats()["allocated_bytes.current"] > 0
    s, g = acc.Stream(d0), acc.Graph()
    with s, (g if entry == "Graph" else acc.graph(g, stream=s)):
        acc.empty(10, dtype="uint8", device=d0).fill_(1)
    assert memory.memory_reserved(d1) == 0
    assert memory.memory_stats(d1)["num_sync_all_streams"] == 1
    assert memory.host_memory_stats()["allocated_bytes.current"] == 0
    g.close()
    s.close()


def test_empty_cache_inside_use_mem_pool_empties_the_default_pool(two_devices: str) -> None:
    """torch 2.15's ``release_cached_blocks`` skips the default pools (and the wait for
    pending frees) only while a graph captures on the device (its ``CaptureTracker`` count,
    set by ``markCaptureBegin``, and the current stream capturing): ``use_mem_pool``'s
    routing (``beginAllocateToPool``) is not a capture. accelrt kept the default pools and
    their pending frees for as long as any routing was open."""
    d0 = f"{two_devices}:0"
    use = acc.Stream(d0)
    x = acc.empty(1000, dtype="uint8", device=d0)
    x.record_stream(use)
    x.close()                                       # pending: its event waits on `use`
    acc.empty(MiB, dtype="uint8", device=d0).close()      # a cached 2 MiB segment
    pool = memory.MemPool()
    with memory.use_mem_pool(pool, d0):
        memory.empty_cache()
        assert memory.memory_reserved(d0) == 0
    assert memory.memory_stats(d0)["num_sync_all_streams"] == 1
    use.close()


def test_a_free_inside_use_mem_pool_is_not_deferred(two_devices: str) -> None:
    """A block used on another stream and freed inside ``use_mem_pool`` records its events
    at once and is reused once they completed (torch 2.15's ``free`` defers such frees only
    during a graph capture; the reproducer of pytorch#175015): accelrt deferred it until the
    routing ended, as if a graph captured."""
    d0 = f"{two_devices}:0"
    s2 = acc.Stream(d0)
    pool = memory.MemPool()
    with memory.use_mem_pool(pool, d0):
        a = acc.empty(MiB, dtype="uint8", device=d0)
        ptr = a.data_ptr()
        a.record_stream(s2)
        with s2:
            a.fill_(1)
        a.close()
        acc.synchronize(d0)
        b = acc.empty(MiB, dtype="uint8", device=d0)
        assert b.data_ptr() == ptr
        b.close()
    s2.close()


def test_an_out_of_memory_inside_use_mem_pool_releases_the_cache(two_devices: str) -> None:
    """torch 2.15's ``malloc`` releases the cached blocks and retries before raising unless
    a graph captures (``!is_capture_context()``: "user mempools should be able to reclaim
    cached memory"); accelrt skipped the release inside ``use_mem_pool`` and raised."""
    d0 = f"{two_devices}:0"
    total = memory.get_memory_info(d0)[1]
    memory.set_per_process_memory_fraction(30 * MiB / total, d0)
    acc.empty(3 * MiB, dtype="uint8", device=d0).close()     # a cached 20 MiB segment
    pool = memory.MemPool()
    with memory.use_mem_pool(pool, d0):
        x = acc.empty(3 * MiB, dtype="uint8", device=d0)   # a second 20 MiB: over 30 MiB
    stats = memory.memory_stats(d0)
    assert (stats["num_alloc_retries"], stats["num_ooms"]) == (1, 0)
    assert memory.memory_reserved(d0) == 20 * MiB
    x.close()
    del pool
    memory.set_per_process_memory_fraction(1.0, d0)


def test_a_use_on_oom_pool_lends_before_the_cache_is_released(two_devices: str) -> None:
    """torch 2.15's ``malloc`` tries the ``use_on_oom`` pools (``try_mempool_fallback``)
    right after the new segment failed, before releasing cached memory and retrying: the
    default pool's cache stays. accelrt looked there last, after emptying the cache, so the
    request got a new segment instead of the pool's cached block."""
    d0 = f"{two_devices}:0"
    total = memory.get_memory_info(d0)[1]
    side = acc.Stream(d0)
    with side:               # the default pool: 20 MiB cached for another stream
        acc.empty(3 * MiB, dtype="uint8", device=d0).close()
    pool = memory.MemPool(use_on_oom=True)
    with memory.use_mem_pool(pool, d0):
        lent = acc.empty(12 * MiB, dtype="uint8", device=d0)  # the pool: 12 MiB cached
        lent_ptr = lent.data_ptr()
        lent.close()
    memory.set_per_process_memory_fraction(40 * MiB / total, d0)   # 32 MiB + 12 MiB > 40
    x = acc.empty(12 * MiB, dtype="uint8", device=d0)
    assert x.data_ptr() == lent_ptr
    stats = memory.memory_stats(d0)
    assert (stats["num_alloc_retries"], stats["num_sync_all_streams"]) == (0, 0)
    assert memory.memory_reserved(d0) == 32 * MiB
    x.close()
    del pool
    memory.set_per_process_memory_fraction(1.0, d0)
    side.close()
