"""The floor of a pure-Python caching allocator: how fast can PyTorch's default policy replay?

Issue 13 asks the default policy to replay traces at no more than 30 *calls* per operation in
pure Python (calls: thread CPU time divided by that of one empty method call, measured in the
same process). This script answers whether *any* pure-Python allocator with that policy can,
by timing deliberately minimal allocators that implement only what the policy needs to choose
the same blocks, side by side with accelrt's :class:`~accelrt.memory._allocator.
DeviceCachingAllocator` and with the replay loop alone:

- sizes rounded up to 512 B; the small pool (rounded size <= 1 MiB) and the large pool;
- a miss takes a new segment from the device: 2 MiB for the small pool, 20 MiB for larger
  requests below 10 MiB, else the request rounded up to 2 MiB (a bump pointer starting where the
  simulated device's does, so the addresses are the simulated device's);
- best fit per (stream, pool): the smallest free block of the stream's pool that fits, ties
  to the lowest address;
- splitting: the small pool splits off a remainder of at least 512 B, the large pool one of
  more than 1 MiB; freeing merges the block with its free neighbours in the segment.

Nothing else: no statistics, no lock, no stream-ordered frees (events), no history, no
release of cached segments (the traces fit the simulated 80 GiB device without one; a miss
that would not fit raises ``MemoryError``), no argument checks, no other settings.

Before timing, every allocator is checked against accelrt: on every trace each operation must
return the address accelrt's allocator returns on a :class:`~accelrt.testing._simulated.
SimulatedBackend`, and the peak reserved bytes and segment mallocs must equal what
:func:`accelrt.memory.tools._replay.replay_ops` reports for the default policy; a random workload
on three streams (frees in random order, sizes from 1 B to 44 MiB, a third of them at the
sizes where the rules change), each of those sizes on an empty stream (a new segment), 6,000
mallocs in a row and bench_allocator.py's synthetic convnet are checked the same way.
A mismatch stops the script.

Three data-structure choices are timed (each a class below):

``floor``
    :class:`FloorAllocator`: block objects with ``__slots__`` linked to their neighbours, one
    sorted list of int keys ``size << 64 | address`` per (stream, pool), searched with
    ``bisect``. A free block holds its key (``None`` while allocated, which is also the free
    flag); blocks merged away are reused by later splits; a split or merge that leaves the new
    key where the old one was in the sorted order overwrites it in place instead of deleting
    and inserting.
``blocks``
    :class:`BlocksAllocator`: the same structures written plainly: pop the key, insert the
    remainder's, delete a merged neighbour's, a new object per split.
``dicts``
    :class:`DictAllocator`: no block objects: free blocks in two dicts (start -> size,
    end -> start), allocated blocks in a dict of (size, free list), segment starts in a set,
    the same sorted key lists.

Three more columns add to ``floor`` what accelrt must do beyond choosing blocks on these
traces:

``floor+lock``
    :class:`LockedFloorAllocator`: ``floor`` with accelrt's lock taken around the body of
    each ``malloc`` and ``free``, as accelrt takes it.
``floor+lock+stats``
    :class:`StatsFloorAllocator`: that, and PyTorch's statistics kept exactly: its
    ``stats()`` must equal accelrt's (all 123 keys) every 97 operations of every checked
    workload (and every 9,973, as for the next column).
``floor+lock+stats2``
    :class:`LogStatsFloorAllocator`: the same statistics, checked the same way, kept by a
    log: each operation appends one int to a list, folded with numpy (decode, ``cumsum``,
    ``max``) every 4,096 entries and when asked; only ``memory_allocated()``'s counter is kept
    at each operation.

and two references: ``accelrt`` (the default policy of accelrt's allocator, with its
statistics, lock and fast paths) and ``loop`` (the replay loop alone: ``malloc`` bumps a
counter and returns it, ``free`` bumps another), the share of every column that is the
harness's own. The replay loop, the calls unit and its calibration are bench_allocator.py's
(``_replay_timed``, ``alternate``: every variant run alternately ``--repeat`` times, each run
paired with a calibration right before and after it; the median is printed); the two
statistics columns are timed up to their ``settle()`` (peaks, a log's pending entries), so
what they defer is paid inside the timed region. ``immediate reuse`` is the share of mallocs
that take back the block the operation before freed.

What it shows (2-core shared machine, CPython 3.11.7, ``--repeat 5``, three runs; a column
moves by 1-5 calls between runs, with the machine's load), in calls per operation over the six
traces:

- ``loop``: 3.5 - 5.2
- ``floor``: 19.2 - 25.5 (``blocks``: 21.6 - 26.8, ``dicts``: 27.4 - 34.6)
- ``floor+lock``: 22.7 - 31.4
- ``floor+lock+stats``: 32.6 - 43.6
- ``floor+lock+stats2``: 30.7 - 40.5
- ``accelrt``: 42.7 - 60.4 (42.0 - 53.1 after the fast-path changes that followed this
  script: one run, ``--repeat 5``, 2026-11-26)

So a pure-Python allocator with PyTorch's default policy *can* replay these traces under 30
calls per operation, and still can with the lock, but not by much: the policy's own work
(lookup, split, merge, keeping the sorted lists) takes 15-18 calls above the loop, the lock 3-4
more, which leaves 3-8 calls per operation for statistics (3-4 on resnet50_train); keeping
PyTorch's statistics exactly costs 10-15 more inline, 8-13 with the log (the same run): the log
is cheaper by 0-5 calls (most on the long traces), and no design tried keeps them in the 3-8
calls left. Where the log's calls go: 3-5 on the hot path (the append about 1, the entry's
flags and the whole-segment checks 1-3, ``memory_allocated()``'s counter up to 2); the fold 3-4
calls per entry (a third to a half of it turning the list's ints, long out of the cache, into
an array; then decoding, ``cumsum`` of 10 series, sums) and about 1,400 calls per fold, which a
short trace's final fold pays whole. Also measured, not kept: the pool's three cumulative
counters packed into one int (64-bit fields, one ``+=`` per operation, unpacked at each settle)
is 0-3 calls *slower* than separate counters (packing costs three big-int operations per
malloc); the log handed through the lock's queue as its token (no attribute load), and no
``memory_allocated()`` counter, are within the noise (-2 to +2 calls); folding every 1,024,
2,048, 8,192 or 16,384 entries instead of 4,096 is no faster (1,024: 1-3 slower). Inline again,
with the inactive split counters derived instead of kept (blocks: +-1 in the branches that
split or merge; bytes: reserved - allocated - whole free segments) and both groups of peaks
settled where the direction turns (malloc to free, free to malloc: 26-41% of the operations
here) is 0-9 calls *slower* than the inline column: each turn costs a settle. Tricks that skip
work on some operations cannot lower the floor much: a malloc takes back the very block that
the operation before it freed in 0-13% of the mallocs on these traces (``immediate reuse``).
Also tried for ``floor`` and no faster, within the noise: the blocks kept in a second list
parallel to the sorted keys (no dict lookup after the search), and no reuse of merged-away
block objects.

Usage::

    python bench/replay_floor.py
    python bench/replay_floor.py --repeat 7 --traces DIR
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from bisect import bisect_left, insort
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from bench_allocator import _calibrate, _replay_timed, _traces, alternate

from accelrt.memory._allocator import DeviceCachingAllocator
from accelrt.memory._config import parse_config
from accelrt.memory._lock import FastLock
from accelrt.memory.tools._replay import replay_ops
from accelrt.testing._simulated import SimulatedBackend
from accelrt.memory.tools._synthetic import convnet_inference_ops

Op = tuple[bool, int, int, int]

_BASE = 1 << 44            # the simulated device 0's first malloc address
_CAPACITY = 80 << 30       # the simulated device's default capacity
_SMALL = 1 << 20           # largest rounded size of the small pool
_MASK = (1 << 64) - 1      # the address part of a key


class _Device:
    """The slow path shared by the allocators: a new segment from a bump-pointer device."""

    def __init__(self) -> None:
        self._next = _BASE
        self.reserved = 0
        self.peak_reserved = 0
        self.segment_mallocs = 0

    def _new_segment(self, rounded: int) -> tuple[int, int]:
        """(address, size) of a new segment for a request of ``rounded`` bytes."""
        if rounded <= _SMALL:
            seg = 2 << 20
        elif rounded < 10 << 20:
            seg = 20 << 20
        else:
            seg = -(-rounded // (2 << 20)) * (2 << 20)
        if self.reserved + seg > _CAPACITY:
            raise MemoryError(f"floor allocator: {seg} more bytes would exceed the device's "
                              f"{_CAPACITY}; it has no release-and-retry chain")
        addr = self._next
        self._next = addr + seg
        self.reserved += seg
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        self.segment_mallocs += 1
        return addr, seg


class _Block:
    __slots__ = ("addr", "fl", "key", "next", "prev", "req", "size")

    addr: int
    size: int
    prev: _Block | None
    next: _Block | None
    key: int | None            # its key in fl while free; None while allocated
    fl: list[int]              # the free list of its (stream, pool)
    req: int                   # the requested size (StatsFloorAllocator only)


class FloorAllocator(_Device):
    """The fastest of the three: see the module docstring (``floor``).

    Example::

        >>> a = FloorAllocator()
        >>> p = a.malloc(3 << 20, 0)
        >>> q = a.malloc(1000, 0)
        >>> a.free(p); a.peak_reserved == 22 << 20, a.segment_mallocs
        (True, 2)
        >>> a.malloc(1 << 21, 0) == p    # best fit: the freed 20 MiB segment, split again
        True
    """

    def __init__(self) -> None:
        super().__init__()
        self._blocks: dict[int, _Block] = {}
        self._lists: dict[int, tuple[list[int], list[int]]] = {}   # stream -> (small, large)
        self._spares: list[_Block] = []

    def malloc(self, size: int, stream: int) -> int:
        rounded = (size + 511) & -512
        try:
            lists = self._lists[stream]
        except KeyError:
            lists = self._lists[stream] = ([], [])
        if rounded <= 1048576:
            fl = lists[0]
            split_min = 512
        else:
            fl = lists[1]
            split_min = 1048577
        i = bisect_left(fl, rounded << 64)
        if i == len(fl):
            return self._miss(rounded, fl, split_min)
        addr = fl[i] & 0xFFFFFFFFFFFFFFFF
        blk = self._blocks[addr]
        blk.key = None
        rem = blk.size - rounded
        if rem < split_min:
            del fl[i]
            return addr
        # split: the remainder [addr + rounded, rem) stays free
        raddr = addr + rounded
        nx = blk.next
        spares = self._spares
        r = spares.pop() if spares else _Block()
        r.addr = raddr
        r.size = rem
        r.prev = blk
        r.next = nx
        r.fl = fl
        r.key = key = (rem << 64) | raddr
        if nx is not None:
            nx.prev = r
        blk.next = r
        blk.size = rounded
        self._blocks[raddr] = r
        if i and fl[i - 1] > key:          # the smaller key sorts lower: move it
            del fl[i]
            insort(fl, key, 0, i)
        else:                              # it sorts where the block's key was
            fl[i] = key
        return addr

    def _miss(self, rounded: int, fl: list[int], split_min: int) -> int:
        addr, seg = self._new_segment(rounded)
        blk = _Block()
        blk.addr = addr
        blk.size = seg
        blk.prev = blk.next = blk.key = None
        blk.fl = fl
        self._blocks[addr] = blk
        rem = seg - rounded
        if rem >= split_min:
            r = _Block()
            r.addr = raddr = addr + rounded
            r.size = rem
            r.prev = blk
            r.next = None
            r.fl = fl
            r.key = key = (rem << 64) | raddr
            blk.next = r
            blk.size = rounded
            self._blocks[raddr] = r
            insort(fl, key)
        return addr

    def free(self, ptr: int) -> None:
        blk = self._blocks[ptr]
        fl = blk.fl
        nx = blk.next
        pv = blk.prev
        if pv is not None and pv.key is not None:
            # merge into the free block before it (and the free one after it)
            size = pv.size + blk.size
            del self._blocks[ptr]
            self._spares.append(blk)
            if nx is not None and nx.key is not None:
                del fl[bisect_left(fl, nx.key)]
                del self._blocks[nx.addr]
                self._spares.append(nx)
                size += nx.size
                nx = nx.next
            blk = pv
            ptr = pv.addr
            j = bisect_left(fl, pv.key)
        elif nx is not None and nx.key is not None:
            # merge the free block after it into it
            j = bisect_left(fl, nx.key)
            del self._blocks[nx.addr]
            self._spares.append(nx)
            size = blk.size + nx.size
            nx = nx.next
        else:
            blk.key = key = (blk.size << 64) | ptr
            insort(fl, key)
            return
        blk.size = size
        blk.next = nx
        if nx is not None:
            nx.prev = blk
        # the merged block's key replaces the key at j (a neighbour's) if it sorts there
        blk.key = key = (size << 64) | ptr
        j1 = j + 1
        if j1 == len(fl) or fl[j1] > key:
            fl[j] = key
        else:
            del fl[j]
            insort(fl, key, j)


class LockedFloorAllocator(FloorAllocator):
    """``floor+lock``: :class:`FloorAllocator` with accelrt's allocator lock
    (:class:`~accelrt.memory._lock.FastLock`) taken around the body of ``malloc`` and ``free``
    as accelrt takes it: the same code, indented into ``try``/``finally``.

    Example::

        >>> a = LockedFloorAllocator()
        >>> a.free(a.malloc(1000, 0)); a.malloc(512, 0) == 1 << 44
        True
    """

    def __init__(self) -> None:
        super().__init__()
        lock = FastLock()
        self._acquire = lock.acquire
        self._release = lock.put

    def malloc(self, size: int, stream: int) -> int:
        self._acquire()
        try:
            rounded = (size + 511) & -512
            try:
                lists = self._lists[stream]
            except KeyError:
                lists = self._lists[stream] = ([], [])
            if rounded <= 1048576:
                fl = lists[0]
                split_min = 512
            else:
                fl = lists[1]
                split_min = 1048577
            i = bisect_left(fl, rounded << 64)
            if i == len(fl):
                return self._miss(rounded, fl, split_min)
            addr = fl[i] & 0xFFFFFFFFFFFFFFFF
            blk = self._blocks[addr]
            blk.key = None
            rem = blk.size - rounded
            if rem < split_min:
                del fl[i]
                return addr
            # split: the remainder [addr + rounded, rem) stays free
            raddr = addr + rounded
            nx = blk.next
            spares = self._spares
            r = spares.pop() if spares else _Block()
            r.addr = raddr
            r.size = rem
            r.prev = blk
            r.next = nx
            r.fl = fl
            r.key = key = (rem << 64) | raddr
            if nx is not None:
                nx.prev = r
            blk.next = r
            blk.size = rounded
            self._blocks[raddr] = r
            if i and fl[i - 1] > key:          # the smaller key sorts lower: move it
                del fl[i]
                insort(fl, key, 0, i)
            else:                              # it sorts where the block's key was
                fl[i] = key
            return addr
        finally:
            self._release(None)

    def free(self, ptr: int) -> None:
        self._acquire()
        try:
            blk = self._blocks[ptr]
            fl = blk.fl
            nx = blk.next
            pv = blk.prev
            if pv is not None and pv.key is not None:
                # merge into the free block before it (and the free one after it)
                size = pv.size + blk.size
                del self._blocks[ptr]
                self._spares.append(blk)
                if nx is not None and nx.key is not None:
                    del fl[bisect_left(fl, nx.key)]
                    del self._blocks[nx.addr]
                    self._spares.append(nx)
                    size += nx.size
                    nx = nx.next
                blk = pv
                ptr = pv.addr
                j = bisect_left(fl, pv.key)
            elif nx is not None and nx.key is not None:
                # merge the free block after it into it
                j = bisect_left(fl, nx.key)
                del self._blocks[nx.addr]
                self._spares.append(nx)
                size = blk.size + nx.size
                nx = nx.next
            else:
                blk.key = key = (blk.size << 64) | ptr
                insort(fl, key)
                return
            blk.size = size
            blk.next = nx
            if nx is not None:
                nx.prev = blk
            # the merged block's key replaces the key at j (a neighbour's) if it sorts there
            blk.key = key = (size << 64) | ptr
            j1 = j + 1
            if j1 == len(fl) or fl[j1] > key:
                fl[j] = key
            else:
                del fl[j]
                insort(fl, key, j)
        finally:
            self._release(None)


class _Row:
    """The statistics of one pool type (or, peaks only, of both: the ``all`` row)."""

    __slots__ = ("ba", "bf", "na", "nf", "pb", "pn", "pr", "psb", "psi", "ra", "reserved",
                 "rf", "sb", "sba", "sbf", "segments", "si", "sia", "sif")

    def __init__(self) -> None:
        self.na = self.nf = 0      # allocations (and active blocks): allocated, freed
        self.ba = self.bf = 0      # allocated (and active) bytes: allocated, freed
        self.ra = self.rf = 0      # requested bytes: allocated, freed
        self.pn = self.pb = self.pr = 0          # their peaks (settled before a decrease)
        self.si = self.sb = 0      # inactive split blocks and bytes, current
        self.sia = self.sif = self.sba = self.sbf = 0     # ... allocated and freed
        self.psi = self.psb = 0    # ... peaks (updated at each increase)
        self.segments = self.reserved = 0        # never decrease: no cache release


class StatsFloorAllocator(LockedFloorAllocator):
    """``floor+lock+stats``: :class:`FloorAllocator` with accelrt's lock taken around each
    call and PyTorch's statistics kept exactly (every key of accelrt's ``stats()`` for the
    default policy; checked against it): what the policy costs with the bookkeeping that
    ``memory_stats()`` needs and thread safety, still without events, history or options.

    The cumulative counts are kept as sums (current = allocated - freed); the peaks of
    allocations, allocated and requested bytes are settled only before a decrease that follows
    an increase (between two decreases values only grow), those of the inactive split
    counters at each increase.

    Example::

        >>> a = StatsFloorAllocator()
        >>> p = a.malloc(3 << 20, 0); q = a.malloc(1000, 0); a.free(p)
        >>> st = a.stats()
        >>> st["inactive_split_bytes.all.peak"], st["allocated_bytes.all.current"]
        (19921920, 1024)
    """

    def __init__(self) -> None:
        super().__init__()
        self._rows = (_Row(), _Row())              # small pool, large pool
        self._all = _Row()
        self._grew = False

    def settle(self) -> None:
        """Bring the peaks of allocations and allocated/requested bytes up to date (free
        inlines this)."""
        self._grew = False
        sm, lg = self._rows
        t = self._all
        n0 = sm.na - sm.nf
        n1 = lg.na - lg.nf
        if n0 > sm.pn:
            sm.pn = n0
        if n1 > lg.pn:
            lg.pn = n1
        if n0 + n1 > t.pn:
            t.pn = n0 + n1
        n0 = sm.ba - sm.bf
        n1 = lg.ba - lg.bf
        if n0 > sm.pb:
            sm.pb = n0
        if n1 > lg.pb:
            lg.pb = n1
        if n0 + n1 > t.pb:
            t.pb = n0 + n1
        n0 = sm.ra - sm.rf
        n1 = lg.ra - lg.rf
        if n0 > sm.pr:
            sm.pr = n0
        if n1 > lg.pr:
            lg.pr = n1
        if n0 + n1 > t.pr:
            t.pr = n0 + n1

    def _split_grew(self, c: _Row, blocks: int, nbytes: int) -> None:
        """The inactive split counters of ``c`` grew by ``blocks`` (0 or 1) and ``nbytes``
        (> 0), the peaks with them (the hot paths inline this)."""
        sm, lg = self._rows
        t = self._all
        if blocks:
            c.si += 1
            c.sia += 1
            if c.si > c.psi:
                c.psi = c.si
            if sm.si + lg.si > t.psi:
                t.psi = sm.si + lg.si
        c.sb += nbytes
        c.sba += nbytes
        if c.sb > c.psb:
            c.psb = c.sb
        if sm.sb + lg.sb > t.psb:
            t.psb = sm.sb + lg.sb

    def malloc(self, size: int, stream: int) -> int:
        self._acquire()
        try:
            rounded = (size + 511) & -512
            try:
                lists = self._lists[stream]
            except KeyError:
                lists = self._lists[stream] = ([], [])
            if rounded <= 1048576:
                fl = lists[0]
                split_min = 512
                c = self._rows[0]
            else:
                fl = lists[1]
                split_min = 1048577
                c = self._rows[1]
            i = bisect_left(fl, rounded << 64)
            if i == len(fl):
                addr = self._miss(rounded, fl, split_min)
                blk = self._blocks[addr]
                nx = blk.next
                c.segments += 1
                c.reserved += blk.size if nx is None else blk.size + nx.size
                if nx is not None:                     # a new split block
                    self._split_grew(c, 1, nx.size)
            else:
                addr = fl[i] & 0xFFFFFFFFFFFFFFFF
                blk = self._blocks[addr]
                blk.key = None
                bsize = blk.size
                rem = bsize - rounded
                nx = blk.next
                if rem < split_min:
                    del fl[i]
                    if nx is not None or blk.prev is not None:   # a split block, now active
                        c.si -= 1
                        c.sif += 1
                        c.sb -= bsize
                        c.sbf += bsize
                else:
                    if nx is not None or blk.prev is not None:   # already split: shrinks
                        c.sb -= rounded
                        c.sbf += rounded
                    else:
                        self._split_grew(c, 1, rem)
                    raddr = addr + rounded
                    spares = self._spares
                    r = spares.pop() if spares else _Block()
                    r.addr = raddr
                    r.size = rem
                    r.prev = blk
                    r.next = nx
                    r.fl = fl
                    r.key = key = (rem << 64) | raddr
                    if nx is not None:
                        nx.prev = r
                    blk.next = r
                    blk.size = bsize = rounded
                    self._blocks[raddr] = r
                    if i and fl[i - 1] > key:
                        del fl[i]
                        insort(fl, key, 0, i)
                    else:
                        fl[i] = key
                blk.req = size
                c.na += 1
                c.ba += bsize
                c.ra += size
                self._grew = True
                return addr
            blk.req = size
            c.na += 1
            c.ba += blk.size
            c.ra += size
            self._grew = True
            return addr
        finally:
            self._release(None)

    def free(self, ptr: int) -> None:
        self._acquire()
        try:
            if self._grew:   # settle, inlined
                self._grew = False
                sm, lg = self._rows
                t = self._all
                n0 = sm.na - sm.nf
                n1 = lg.na - lg.nf
                if n0 > sm.pn:
                    sm.pn = n0
                if n1 > lg.pn:
                    lg.pn = n1
                if n0 + n1 > t.pn:
                    t.pn = n0 + n1
                n0 = sm.ba - sm.bf
                n1 = lg.ba - lg.bf
                if n0 > sm.pb:
                    sm.pb = n0
                if n1 > lg.pb:
                    lg.pb = n1
                if n0 + n1 > t.pb:
                    t.pb = n0 + n1
                n0 = sm.ra - sm.rf
                n1 = lg.ra - lg.rf
                if n0 > sm.pr:
                    sm.pr = n0
                if n1 > lg.pr:
                    lg.pr = n1
                if n0 + n1 > t.pr:
                    t.pr = n0 + n1
            blk = self._blocks[ptr]
            osize = blk.size
            c = self._rows[osize > 1048576]
            c.nf += 1
            c.bf += osize
            c.rf += blk.req
            fl = blk.fl
            nx = blk.next
            pv = blk.prev
            if pv is not None and pv.key is not None:
                size = pv.size + osize
                merged = 1
                merged_bytes = pv.size
                del self._blocks[ptr]
                self._spares.append(blk)
                if nx is not None and nx.key is not None:
                    del fl[bisect_left(fl, nx.key)]
                    del self._blocks[nx.addr]
                    self._spares.append(nx)
                    size += nx.size
                    merged = 2
                    merged_bytes += nx.size
                    nx = nx.next
                blk = pv
                ptr = pv.addr
                j = bisect_left(fl, pv.key)
            elif nx is not None and nx.key is not None:
                j = bisect_left(fl, nx.key)
                del self._blocks[nx.addr]
                self._spares.append(nx)
                size = osize + nx.size
                merged = 1
                merged_bytes = nx.size
                nx = nx.next
            else:
                blk.key = key = (osize << 64) | ptr
                insort(fl, key)
                if nx is not None or pv is not None:       # one more inactive split block
                    self._split_grew(c, 1, osize)
                return
            blk.size = size
            blk.next = nx
            if nx is not None:
                nx.prev = blk
            blk.key = key = (size << 64) | ptr
            j1 = j + 1
            if j1 == len(fl) or fl[j1] > key:
                fl[j] = key
            else:
                del fl[j]
                insort(fl, key, j)
            if nx is not None or blk.prev is not None:
                # still split: net 1 - merged blocks, + osize bytes (_split_grew, inlined)
                if merged == 2:
                    c.si -= 1
                    c.sif += 1
                nbytes = c.sb + osize
                c.sb = nbytes
                c.sba += osize
                if nbytes > c.psb:
                    c.psb = nbytes
                sm, lg = self._rows
                if sm.sb + lg.sb > self._all.psb:
                    self._all.psb = sm.sb + lg.sb
            else:                                          # the whole segment is free
                c.si -= merged
                c.sif += merged
                c.sb -= merged_bytes
                c.sbf += merged_bytes
        finally:
            self._release(None)

    def stats(self) -> dict[str, int]:
        """The keys and values of accelrt's ``DeviceCachingAllocator.stats()``."""
        self.settle()
        small, large = self._rows
        out: dict[str, int] = {}
        segs = small.segments + large.segments
        for name, get in (
                ("allocation", lambda r: (r.na, r.nf, r.pn)),
                ("active", lambda r: (r.na, r.nf, r.pn)),
                ("allocated_bytes", lambda r: (r.ba, r.bf, r.pb)),
                ("active_bytes", lambda r: (r.ba, r.bf, r.pb)),
                ("requested_bytes", lambda r: (r.ra, r.rf, r.pr)),
                ("inactive_split", lambda r: (r.sia, r.sif, r.psi)),
                ("inactive_split_bytes", lambda r: (r.sba, r.sbf, r.psb)),
                ("segment", lambda r: (r.segments, 0, r.segments)),
                ("reserved_bytes", lambda r: (r.reserved, 0, r.reserved))):
            (sa, sf, sp), (la, lf, lp) = get(small), get(large)
            allp = get(self._all)[2] if name not in ("segment", "reserved_bytes") else sa + la
            for pool, (a, f, pk) in (("all", (sa + la, sf + lf, allp)),
                                     ("small_pool", (sa, sf, sp)), ("large_pool", (la, lf, lp))):
                out.update({f"{name}.{pool}.allocated": a, f"{name}.{pool}.current": a - f,
                            f"{name}.{pool}.freed": f, f"{name}.{pool}.peak": pk})
        for name in ("oversize_allocations", "oversize_segments"):
            out.update(dict.fromkeys(
                (f"{name}.{k}" for k in ("allocated", "current", "freed", "peak")), 0))
        out.update(dict.fromkeys(("num_alloc_retries", "num_device_free", "num_oom_rejections",
                                  "num_ooms", "num_sync_all_streams"), 0))
        out["num_device_alloc"] = segs
        out["max_split_size"] = -1
        return out


# The operation log of LogStatsFloorAllocator: one int64 per malloc or free.
_REQ = (1 << 40) - 1       # bits 0-39: the requested size
_XTRA = 0xFFF << 9         # bits 40-51 (as (v >> 31) & _XTRA): block size - rounded size
_D1 = 1 << 53              # bits 53-54: d: a malloc that did not split (1), a free's merges
_D2 = 2 << 53
_SEG = 1 << 61             # reserved - whole-free-segment bytes changed: next value of _seg
_FREE = 1 << 62            # a free (else a malloc)
_FOLD = 4096               # fold the log once a free finds this many entries


class LogStatsFloorAllocator(LockedFloorAllocator):
    """``floor+lock+stats2``: :class:`LockedFloorAllocator` with PyTorch's statistics kept
    exactly by an operation log folded with numpy (checked against accelrt's ``stats()`` as
    :class:`StatsFloorAllocator` is).

    The hot path only appends one int per operation to a list: a malloc that splits a block
    appends the requested size itself (the block's size is that rounded up to 512 B); other
    operations OR in flags: the bytes a block taken whole has beyond the rounded size, ``d``
    (a malloc that does not split; a free's number of merged neighbours), ``_SEG`` (the
    operation turned a whole free segment into a split or allocated one or back, or took a
    new segment: its bytes go to a second list) and ``_FREE``. A block's ``req`` holds its
    malloc's entry, so a free ORs flags into it. ``allocated`` (``memory_allocated()``) is
    kept current at each operation; everything else waits for :meth:`settle`, which every free
    calls once the log holds ``_FOLD`` entries, and ``stats()``.

    :meth:`settle` decodes the log into per-operation deltas of the five peaked quantities per
    pool: allocations, allocated bytes, requested bytes, inactive split blocks (= free blocks -
    whole free segments: delta ``free - d``, +-1 at a ``_SEG`` operation) and inactive split
    bytes (= reserved - allocated - whole free segments' bytes: delta ``-allocated delta``,
    +- the segment's bytes at a ``_SEG`` operation); a peak is the maximum of the running sum
    (``cumsum``), the ``all`` row's of the two pools' running sums added; ``allocated`` and
    ``freed`` are the sums of the positive and negative deltas, as accelrt nets each operation.

    Example::

        >>> a = LogStatsFloorAllocator()
        >>> p = a.malloc(3 << 20, 0); q = a.malloc(1000, 0); a.free(p)
        >>> st = a.stats()
        >>> st["inactive_split_bytes.all.peak"], st["allocated_bytes.all.current"], a.allocated
        (19921920, 1024, 1024)
    """

    def __init__(self) -> None:
        super().__init__()
        self._log: list[int] = []
        self._seg: list[int] = []
        self.allocated = 0
        self._segments = [0, 0]     # per pool; segments are never released here
        self._reserved = [0, 0]
        # (allocations, allocated, requested, inactive split, inactive split bytes) x
        # (small pool, large pool, all): current, peak, sums of increases and decreases
        self._cur = np.zeros(15, np.int64)
        self._peak = np.zeros(15, np.int64)
        self._inc = np.zeros(15, np.int64)
        self._dec = np.zeros(15, np.int64)
        # scratch for settle(), written once here so that no fold pays for page faults
        self._buf = np.zeros(35 * (_FOLD + 1024), np.int64)
        self._buf.fill(1)

    def _miss_logged(self, rounded: int, size: int, fl: list[int], split_min: int) -> int:
        addr = self._miss(rounded, fl, split_min)
        blk = self._blocks[addr]
        nx = blk.next
        bsize = blk.size
        seg = bsize if nx is None else bsize + nx.size
        pool = rounded > 1048576
        self._segments[pool] += 1
        self._reserved[pool] += seg
        self._seg.append(seg)
        if nx is None:
            blk.req = e = size | (bsize - rounded) << 31
            self._log.append(e | (_SEG | _D1))
        else:
            blk.req = size
            self._log.append(size | _SEG)
        self.allocated += bsize
        return addr

    def malloc(self, size: int, stream: int) -> int:
        self._acquire()
        try:
            rounded = (size + 511) & -512
            try:
                lists = self._lists[stream]
            except KeyError:
                lists = self._lists[stream] = ([], [])
            if rounded <= 1048576:
                fl = lists[0]
                split_min = 512
            else:
                fl = lists[1]
                split_min = 1048577
            i = bisect_left(fl, rounded << 64)
            if i == len(fl):
                return self._miss_logged(rounded, size, fl, split_min)
            addr = fl[i] & 0xFFFFFFFFFFFFFFFF
            blk = self._blocks[addr]
            blk.key = None
            bsize = blk.size
            rem = bsize - rounded
            if rem < split_min:
                del fl[i]
                blk.req = e = size | (rem << 31)
                if blk.next is None and blk.prev is None:      # a whole free segment
                    self._seg.append(bsize)
                    self._log.append(e | (_SEG | _D1))
                else:
                    self._log.append(e | _D1)
                self.allocated += bsize
                return addr
            blk.req = size
            self.allocated += rounded
            # split: the remainder [addr + rounded, rem) stays free
            raddr = addr + rounded
            nx = blk.next
            spares = self._spares
            r = spares.pop() if spares else _Block()
            r.addr = raddr
            r.size = rem
            r.prev = blk
            r.next = nx
            r.fl = fl
            r.key = key = (rem << 64) | raddr
            if nx is not None:
                nx.prev = r
                self._log.append(size)
            elif blk.prev is None:                             # a whole free segment
                self._seg.append(bsize)
                self._log.append(size | _SEG)
            else:
                self._log.append(size)
            blk.next = r
            blk.size = rounded
            self._blocks[raddr] = r
            if i and fl[i - 1] > key:          # the smaller key sorts lower: move it
                del fl[i]
                insort(fl, key, 0, i)
            else:                              # it sorts where the block's key was
                fl[i] = key
            return addr
        finally:
            self._release(None)

    def free(self, ptr: int) -> None:
        self._acquire()
        try:
            log = self._log
            if len(log) >= _FOLD:
                self.settle()
            blk = self._blocks[ptr]
            osize = blk.size
            self.allocated -= osize
            fl = blk.fl
            nx = blk.next
            pv = blk.prev
            if pv is not None and pv.key is not None:
                # merge into the free block before it (and the free one after it)
                size = pv.size + osize
                del self._blocks[ptr]
                self._spares.append(blk)
                if nx is not None and nx.key is not None:
                    e = blk.req | (_FREE | _D2)
                    del fl[bisect_left(fl, nx.key)]
                    del self._blocks[nx.addr]
                    self._spares.append(nx)
                    size += nx.size
                    nx = nx.next
                else:
                    e = blk.req | (_FREE | _D1)
                blk = pv
                ptr = pv.addr
                j = bisect_left(fl, pv.key)
            elif nx is not None and nx.key is not None:
                # merge the free block after it into it
                e = blk.req | (_FREE | _D1)
                j = bisect_left(fl, nx.key)
                del self._blocks[nx.addr]
                self._spares.append(nx)
                size = osize + nx.size
                nx = nx.next
            else:
                blk.key = key = (osize << 64) | ptr
                insort(fl, key)
                if nx is None and pv is None:                  # a whole free segment again
                    self._seg.append(osize)
                    log.append(blk.req | (_FREE | _SEG))
                else:
                    log.append(blk.req | _FREE)
                return
            blk.size = size
            blk.next = nx
            if nx is not None:
                nx.prev = blk
                log.append(e)
            elif blk.prev is None:                             # a whole free segment again
                self._seg.append(size)
                log.append(e | _SEG)
            else:
                log.append(e)
            # the merged block's key replaces the key at j (a neighbour's) if it sorts there
            blk.key = key = (size << 64) | ptr
            j1 = j + 1
            if j1 == len(fl) or fl[j1] > key:
                fl[j] = key
            else:
                del fl[j]
                insort(fl, key, j)
        finally:
            self._release(None)

    def settle(self) -> None:
        """Fold the log into the current values, peaks and sums (:meth:`free` calls this
        every ``_FOLD`` entries; call it with the lock held or no other thread running)."""
        log = self._log
        n = len(log)
        if not n:
            return
        buf = self._buf
        if len(buf) < 35 * n:           # a run of mallocs past _FOLD
            buf = self._buf = np.empty(35 * n, np.int64)
        # contiguous arrays carved from the scratch
        v, free, req, t, small = (buf[k * n:(k + 1) * n] for k in range(5))
        x = buf[5 * n:15 * n].reshape(10, n)     # deltas: small pool rows 0-4, large 5-9
        xs, xl = x[:5], x[5:]
        c = buf[15 * n:25 * n].reshape(10, n)    # their running sums
        tmp = buf[25 * n:35 * n].reshape(10, n)
        v[:] = log
        log.clear()
        np.right_shift(v, 62, out=free)
        np.bitwise_and(v, _REQ, out=req)
        np.less_equal(req, 1048576, out=small)
        sign = xl[0]
        np.multiply(free, -2, out=sign)
        sign += 1
        bsz = xl[1]                # block sizes: the rounded size, plus what a whole block has
        np.add(req, 511, out=bsz)
        bsz &= -512
        np.right_shift(v, 31, out=t)
        t &= _XTRA
        bsz += t
        bsz *= sign
        np.multiply(req, sign, out=xl[2])
        np.right_shift(v, 53, out=t)
        t &= 3
        np.subtract(free, t, out=xl[3])
        np.negative(bsz, out=xl[4])
        if self._seg:
            at = np.flatnonzero(v & _SEG)
            sg = sign[at]
            xl[3, at] += sg
            xl[4, at] += sg * np.array(self._seg, dtype=np.int64)
            self._seg.clear()
        np.multiply(xl, small, out=xs)
        xl -= xs
        np.maximum(x, 0, out=tmp)
        inc = tmp.sum(axis=1)
        tot = x.sum(axis=1)
        cur = self._cur
        x[:, 0] += cur[:10]
        np.cumsum(x, axis=1, out=c)
        peak = self._peak
        np.maximum(peak[:10], c.max(axis=1), out=peak[:10])
        both = tmp[:5]
        np.add(c[:5], c[5:], out=both)
        np.maximum(peak[10:], both.max(axis=1), out=peak[10:])
        cur[:10] += tot
        cur[10:] = cur[:5] + cur[5:10]
        self._inc[:10] += inc
        self._dec[:10] += inc - tot
        self._inc[10:] = self._inc[:5] + self._inc[5:10]
        self._dec[10:] = self._dec[:5] + self._dec[5:10]

    def stats(self) -> dict[str, int]:
        """The keys and values of accelrt's ``DeviceCachingAllocator.stats()``."""
        self.settle()
        inc, dec, peak = self._inc.tolist(), self._dec.tolist(), self._peak.tolist()
        out: dict[str, int] = {}
        for k, names in enumerate((("allocation", "active"), ("allocated_bytes", "active_bytes"),
                                   ("requested_bytes",), ("inactive_split",),
                                   ("inactive_split_bytes",))):
            for pool, q in (("all", 10 + k), ("small_pool", k), ("large_pool", 5 + k)):
                for name in names:
                    out.update({f"{name}.{pool}.allocated": inc[q],
                                f"{name}.{pool}.current": inc[q] - dec[q],
                                f"{name}.{pool}.freed": dec[q], f"{name}.{pool}.peak": peak[q]})
        for name, (sv, lv) in (("segment", self._segments), ("reserved_bytes", self._reserved)):
            for pool, val in (("all", sv + lv), ("small_pool", sv), ("large_pool", lv)):
                out.update({f"{name}.{pool}.allocated": val, f"{name}.{pool}.current": val,
                            f"{name}.{pool}.freed": 0, f"{name}.{pool}.peak": val})
        for name in ("oversize_allocations", "oversize_segments"):
            out.update(dict.fromkeys(
                (f"{name}.{k}" for k in ("allocated", "current", "freed", "peak")), 0))
        out.update(dict.fromkeys(("num_alloc_retries", "num_device_free", "num_oom_rejections",
                                  "num_ooms", "num_sync_all_streams"), 0))
        out["num_device_alloc"] = self._segments[0] + self._segments[1]
        out["max_split_size"] = -1
        return out


class _PlainBlock:
    __slots__ = ("addr", "fl", "free", "next", "prev", "size")

    def __init__(self, addr: int, size: int, prev: _PlainBlock | None,
                 nxt: _PlainBlock | None, fl: list[int], free: bool) -> None:
        self.addr = addr
        self.size = size
        self.prev = prev
        self.next = nxt
        self.fl = fl
        self.free = free


class BlocksAllocator(_Device):
    """``blocks``: the structures of :class:`FloorAllocator`, written plainly.

    Example::

        >>> a = BlocksAllocator()
        >>> a.free(a.malloc(1000, 0)); a.malloc(512, 0) == 1 << 44
        True
    """

    def __init__(self) -> None:
        super().__init__()
        self._blocks: dict[int, _PlainBlock] = {}
        self._lists: dict[int, tuple[list[int], list[int]]] = {}

    def malloc(self, size: int, stream: int) -> int:
        rounded = (size + 511) & -512
        lists = self._lists.get(stream)
        if lists is None:
            lists = self._lists[stream] = ([], [])
        if rounded <= _SMALL:
            fl, split_min = lists[0], 512
        else:
            fl, split_min = lists[1], _SMALL + 1
        i = bisect_left(fl, rounded << 64)
        if i < len(fl):
            blk = self._blocks[fl.pop(i) & _MASK]
            blk.free = False
        else:
            addr, seg = self._new_segment(rounded)
            blk = self._blocks[addr] = _PlainBlock(addr, seg, None, None, fl, False)
        rem = blk.size - rounded
        if rem >= split_min:
            raddr = blk.addr + rounded
            r = _PlainBlock(raddr, rem, blk, blk.next, fl, True)
            if blk.next is not None:
                blk.next.prev = r
            blk.next = r
            blk.size = rounded
            self._blocks[raddr] = r
            insort(fl, (rem << 64) | raddr)
        return blk.addr

    def free(self, ptr: int) -> None:
        blk = self._blocks[ptr]
        fl = blk.fl
        nx = blk.next
        if nx is not None and nx.free:
            fl.remove((nx.size << 64) | nx.addr)
            del self._blocks[nx.addr]
            blk.size += nx.size
            blk.next = nx.next
            if nx.next is not None:
                nx.next.prev = blk
        pv = blk.prev
        if pv is not None and pv.free:
            fl.remove((pv.size << 64) | pv.addr)
            del self._blocks[ptr]
            pv.size += blk.size
            pv.next = blk.next
            if blk.next is not None:
                blk.next.prev = pv
            blk = pv
        blk.free = True
        insort(fl, (blk.size << 64) | blk.addr)


class DictAllocator(_Device):
    """``dicts``: no block objects; free blocks in dicts by start and by end.

    Example::

        >>> a = DictAllocator()
        >>> a.free(a.malloc(1000, 0)); a.malloc(512, 0) == 1 << 44
        True
    """

    def __init__(self) -> None:
        super().__init__()
        self._live: dict[int, tuple[int, list[int]]] = {}   # allocated: addr -> (size, list)
        self._free_size: dict[int, int] = {}                # free: addr -> size
        self._free_end: dict[int, int] = {}                 # free: end -> addr
        self._segments: set[int] = set()                    # segment start addresses
        self._lists: dict[int, tuple[list[int], list[int]]] = {}

    def malloc(self, size: int, stream: int) -> int:
        rounded = (size + 511) & -512
        lists = self._lists.get(stream)
        if lists is None:
            lists = self._lists[stream] = ([], [])
        if rounded <= _SMALL:
            fl, split_min = lists[0], 512
        else:
            fl, split_min = lists[1], _SMALL + 1
        i = bisect_left(fl, rounded << 64)
        if i < len(fl):
            key = fl.pop(i)
            addr = key & _MASK
            bsize = key >> 64
            del self._free_size[addr]
            del self._free_end[addr + bsize]
        else:
            addr, bsize = self._new_segment(rounded)
            self._segments.add(addr)
        rem = bsize - rounded
        if rem >= split_min:
            raddr = addr + rounded
            insort(fl, (rem << 64) | raddr)
            self._free_size[raddr] = rem
            self._free_end[addr + bsize] = raddr
            bsize = rounded
        self._live[addr] = (bsize, fl)
        return addr

    def free(self, ptr: int) -> None:
        size, fl = self._live.pop(ptr)
        free_size, free_end, segments = self._free_size, self._free_end, self._segments
        end = ptr + size
        nsize = free_size.get(end)
        if nsize is not None and end not in segments:     # (the next segment's first block)
            del fl[bisect_left(fl, (nsize << 64) | end)]
            del free_size[end]
            size += nsize
            end += nsize
        prev = free_end.get(ptr)
        if prev is not None and ptr not in segments:     # (the last block of the one before)
            psize = ptr - prev
            del fl[bisect_left(fl, (psize << 64) | prev)]
            del free_end[ptr]
            ptr = prev
            size += psize
        free_size[ptr] = size
        free_end[end] = ptr
        insort(fl, (size << 64) | ptr)


class LoopOnly:
    """The replay loop's own cost: ``malloc`` and ``free`` only bump a counter."""

    def __init__(self) -> None:
        self.mallocs = 0
        self.frees = 0

    def malloc(self, size: int, stream: int) -> int:
        self.mallocs += 1
        return self.mallocs

    def free(self, ptr: int) -> None:
        self.frees += 1


FLOORS: dict[str, Callable[[], Any]] = {
    "floor": FloorAllocator, "blocks": BlocksAllocator, "dicts": DictAllocator,
    "floor+lock": LockedFloorAllocator, "floor+lock+stats": StatsFloorAllocator,
    "floor+lock+stats2": LogStatsFloorAllocator}


def _accelrt() -> DeviceCachingAllocator:
    return DeviceCachingAllocator(SimulatedBackend(), 0, parse_config(""))


def replay_addresses(alloc: Any, ops: Sequence[Op]) -> list[int]:
    """Replay ``ops`` through ``alloc``; the address each malloc returned, in order."""
    handles: dict[int, int] = {}
    out: list[int] = []
    for is_alloc, addr, size, stream in ops:
        if is_alloc:
            handles[addr] = ptr = alloc.malloc(size, stream)
            out.append(ptr)
        else:
            alloc.free(handles.pop(addr))
    return out


#: Sizes where the policy's rules change (pool, split, segment size), each tried exactly and
#: 512 B either side by :func:`random_ops`.
EDGES = (512, 1 << 20, (1 << 20) + 512, 2 << 20, 3 << 20, 10 << 20, 19 << 20, 20 << 20,
         21 << 20, 22 << 20)


def random_ops(count: int, seed: int = 0, streams: Sequence[int] = (0, 7, 1 << 40)) -> list[Op]:
    """A random workload on several streams: mallocs of 1 B .. 24 MiB (log-uniform; one in
    three at or next to a size in :data:`EDGES` or a sum of two of them), frees of random live
    blocks, then frees of all that is left."""
    rng = random.Random(seed)
    ops: list[Op] = []
    live: list[int] = []
    for handle in range(count):
        if live and rng.random() < 0.48:
            ops.append((False, live.pop(rng.randrange(len(live))), 0, 0))
            continue
        if rng.random() < 1 / 3:
            size = rng.choice(EDGES) + rng.choice((0, 0, rng.choice(EDGES))) + rng.choice(
                (-512, -1, 0, 1, 512))
        else:
            size = int(2 ** rng.uniform(0, 24.6))
        ops.append((True, handle, max(1, size), rng.choice(streams)))
        live.append(handle)
    ops.extend((False, h, 0, 0) for h in live)
    return ops


def immediate_reuse(ops: Sequence[Op]) -> float:
    """The share of mallocs of ``ops`` that return the very block (address and size) that the
    operation just before them freed: the most that a trick pairing a free with the next
    malloc (as accelrt's deferred free does) could skip."""
    a = FloorAllocator()
    handles: dict[int, int] = {}
    freed: tuple[int, int] | None = None
    same = mallocs = 0
    for is_alloc, addr, size, stream in ops:
        if is_alloc:
            handles[addr] = ptr = a.malloc(size, stream)
            mallocs += 1
            same += freed == (ptr, a._blocks[ptr].size)
            freed = None
        else:
            ptr = handles.pop(addr)
            freed = (ptr, a._blocks[ptr].size)
            a.free(ptr)
    return same / mallocs if mallocs else 0.0


def edge_ops() -> list[Op]:
    """Each size at or next to :data:`EDGES` (or a sum of two) on a stream of its own, so that
    it misses and takes a new segment: two mallocs of it, a free of the first and a third
    malloc of it, then frees of the rest."""
    sizes = sorted({max(1, a + b + d) for a in EDGES for b in (0, *EDGES)
                    for d in (-512, -1, 0, 1, 512)})
    ops: list[Op] = []
    for stream, size in enumerate(sizes, 1):
        h = 3 * stream
        ops += [(True, h, size, stream), (True, h + 1, size, stream), (False, h, 0, stream),
                (True, h + 2, size, stream), (False, h + 1, 0, stream), (False, h + 2, 0, stream)]
    return ops


def malloc_run_ops(count: int = 6000, seed: int = 1) -> list[Op]:
    """``count`` mallocs of 1 B .. 4 MiB in a row, then their frees in random order: a log
    that outgrows :class:`LogStatsFloorAllocator`'s scratch before any free folds it."""
    rng = random.Random(seed)
    ops: list[Op] = [(True, h, int(2 ** rng.uniform(0, 22)), 0) for h in range(count)]
    order = list(range(count))
    rng.shuffle(order)
    return ops + [(False, h, 0, 0) for h in order]


STATS: dict[str, Callable[[], Any]] = {"floor+lock+stats": StatsFloorAllocator,
                                       "floor+lock+stats2": LogStatsFloorAllocator}


def check_stats(name: str, ops: Sequence[Op], every: int = 97) -> None:
    """The ``stats()`` of each allocator of :data:`STATS` equal accelrt's every ``every``
    operations of ``ops`` and after the last (and ``LogStatsFloorAllocator.allocated`` its
    ``allocated_bytes.all.current``); then the same every 9,973 operations, so that the log
    is also folded in long runs (every ``_FOLD`` entries); raises SystemExit if not."""
    for label, cls in STATS.items():
        for step in (every, 9973):
            ours, theirs = cls(), _accelrt()
            h_ours: dict[int, int] = {}
            h_theirs: dict[int, int] = {}
            for k, (is_alloc, addr, size, stream) in enumerate(ops):
                if is_alloc:
                    h_ours[addr] = ours.malloc(size, stream)
                    h_theirs[addr] = theirs.malloc(size, stream)
                else:
                    ours.free(h_ours.pop(addr))
                    theirs.free(h_theirs.pop(addr))
                if k % step == 0 or k == len(ops) - 1:
                    a, b = ours.stats(), dict(theirs.stats())
                    if a != b or getattr(ours, "allocated", b["allocated_bytes.all.current"]) \
                            != b["allocated_bytes.all.current"]:
                        diff = {key: (a.get(key), b.get(key)) for key in sorted(set(a) | set(b))
                                if a.get(key) != b.get(key)}
                        raise SystemExit(f"{name}: after operation {k}, {label}'s stats() "
                                         f"differ from accelrt's (ours, accelrt): {diff}")


def check(name: str, ops: Sequence[Op]) -> None:
    """Every floor allocator returns accelrt's address for each malloc of ``ops`` and ends with
    replay_ops's peak reserved bytes and device mallocs, and :func:`check_stats` holds; raises
    SystemExit if not."""
    want = replay_addresses(_accelrt(), ops)
    ref = replay_ops(ops, parse_config(""))
    for label, cls in FLOORS.items():
        a = cls()
        got = replay_addresses(a, ops)
        if got != want:
            i = next(i for i, (g, w) in enumerate(zip(got, want)) if g != w)
            raise SystemExit(f"{name}: {label} malloc #{i} returned {got[i]:#x}, accelrt "
                             f"{want[i]:#x}")
        if (a.peak_reserved, a.segment_mallocs) != (ref["peak_reserved_bytes"],
                                                    ref["device_mallocs"]):
            raise SystemExit(f"{name}: {label} peak reserved {a.peak_reserved}, segment "
                             f"mallocs {a.segment_mallocs}; replay_ops: "
                             f"{ref['peak_reserved_bytes']}, {ref['device_mallocs']}")
    check_stats(name, ops)


def _replayer(new: Callable[[], Any], ops: Sequence[Op]) -> Callable[[], tuple[float, int]]:
    settle = hasattr(new, "settle")
    return lambda: _replay_timed(new, ops, settle)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--traces", action="append",
                        help="folder of trace_*.json.gz files (repeatable; default: "
                             "tests/data/traces and ../shared/traces)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--loops", type=int, default=20000,
                        help="sets the calibration length, as in bench_allocator.py")
    args = parser.parse_args()
    cal = max(1000, args.loops * 5)
    folders = args.traces or [os.path.join(root, "tests", "data", "traces"),
                              os.path.join(root, "..", "shared", "traces")]
    traces = _traces(folders)
    if not traces:
        raise SystemExit(f"no trace_*.json* files in {', '.join(folders)}")
    check("edge sizes", edge_ops())
    check("random 3-stream workload", random_ops(30000))
    check("6,000 mallocs in a row", malloc_run_ops())
    check("synthetic convnet b1-32", convnet_inference_ops(batches=60, seed=0))
    for name, ops in traces:
        check(name, ops)
    print(f"checked: {', '.join(FLOORS)} return accelrt's address for every malloc and its peak "
          f"reserved bytes and segment mallocs, {' and '.join(STATS)} also its stats() (every "
          f"97 and every 9,973 operations), on {len(traces)} traces, the edge sizes, a "
          f"random 3-stream workload, a run of 6,000 mallocs and the synthetic convnet ({sys.implementation.name} {sys.version.split()[0]})")
    print()
    columns: dict[str, Callable[[], Any]] = {**FLOORS, "accelrt": _accelrt, "loop": LoopOnly}
    print(f"## Default-policy replay, calls per operation (median of {args.repeat} alternating "
          f"runs)")
    print("| trace | ops | " + " | ".join(columns) + " | floor - loop | accelrt / floor | "
          "immediate reuse |")
    print("|---|---|" + "---|" * (len(columns) + 3))
    for name, ops in traces:
        res = alternate({label: _replayer(new, ops) for label, new in columns.items()},
                        args.repeat, cal)
        calls = {label: res[label][0] for label in columns}
        print(f"| {name} | {len(ops):,} | " + " | ".join(f"{c:.1f}" for c in calls.values())
              + f" | {calls['floor'] - calls['loop']:.1f} | "
              f"{calls['accelrt'] / calls['floor']:.2f}x | {immediate_reuse(ops):.1%} |",
              flush=True)
    print(f"| empty method call (the unit) | {_calibrate(cal) * 1e9:.1f} ns thread CPU time |")


if __name__ == "__main__":
    main()
