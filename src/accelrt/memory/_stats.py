"""Statistics of one caching allocator, in PyTorch's ``DeviceStats`` schema.

Every stat has ``current``, ``peak``, ``allocated`` (sum of increases) and ``freed`` (sum of
decreases); arrays hold three of them: ``all``, ``small_pool`` and ``large_pool``.

The five stats touched on every allocation (``allocation``, ``allocated_bytes``, ``active``,
``active_bytes``, ``requested_bytes``) live in :class:`HotCounters`, one per pool type, laid
out for the allocator's hot path: only the current values and the running sums of increases
are updated per call; ``active`` is ``allocation`` plus the blocks whose free is pending;
``freed`` is derived from the invariant ``current = base + allocated - freed``; the ``all``
row is the sum of both pool types; peaks are brought up to date (:meth:`DeviceStats.settle`)
before any of those stats decreases and before any read, which gives exactly the maxima of
the current values.

``reserved_bytes_by_private_pools`` (PyTorch 2.14's ``DeviceStats`` map of that name) has a
``reserved_bytes``-like triple per private pool id, changed with the pool's segments only (off
the malloc/free fast paths): an entry is made by the pool's first segment and kept, its
``current`` back at 0, after the pool is gone; the flat keys are
``reserved_bytes_by_private_pools.{a}_{b}.{all,large_pool,small_pool}.{field}``.

All objects here are guarded by the owning allocator's lock.

Example::

    >>> from accelrt.memory._stats import DeviceStats
    >>> st = DeviceStats(max_split_size=-1)
    >>> st.reserved_bytes[0].increase(2 * 2**20)
    >>> d = st.as_flat_dict()
    >>> d["reserved_bytes.all.current"], d["max_split_size"]
    (2097152, -1)
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._block import PrivatePool
    from ._interface import AllocatorCore


__all__ = ["FLAT_KEYS", "PRIVATE_POOLS", "SORTED_KEYS", "STAT_TYPES", "DeviceStats",
           "HotCounters", "Stat", "flat_stats", "max_memory_allocated", "nest_host_stats",
           "nest_stats", "reset_accumulated_stats", "reset_peak_stats", "sorted_stats"]

#: Names of the three stat types, in index order.
STAT_TYPES = ("all", "small_pool", "large_pool")


_FIELDS = ("allocated", "current", "freed", "peak")     # alphabetical
_TYPES = ("all", "large_pool", "small_pool")            # alphabetical
#: PyTorch's flat stat keys, in sorted order (``memory_stats()`` order), which is the order
#: of :meth:`DeviceStats.flat_values`.
FLAT_KEYS = tuple(
    [f"{n}.{t}.{f}" for n in ("active", "active_bytes", "allocated_bytes", "allocation",
                              "inactive_split", "inactive_split_bytes")
     for t in _TYPES for f in _FIELDS]
    + ["max_split_size", "num_alloc_retries", "num_device_alloc", "num_device_free",
       "num_oom_rejections", "num_ooms", "num_sync_all_streams"]
    + [f"{n}.{f}" for n in ("oversize_allocations", "oversize_segments") for f in _FIELDS]
    + [f"{n}.{t}.{f}" for n in ("requested_bytes", "reserved_bytes", "segment")
       for t in _TYPES for f in _FIELDS])
#: The same keys: :data:`FLAT_KEYS` is sorted already (a test checks it).
SORTED_KEYS = FLAT_KEYS
#: PyTorch's statistic of per-private-pool reserved bytes; its flat keys sort right before
#: ``segment.*`` (``"reserved_bytes."`` < ``"reserved_bytes_"`` < ``"segment"``).
PRIVATE_POOLS = "reserved_bytes_by_private_pools"
_PRIVATE_AT = FLAT_KEYS.index("segment.all.allocated")
#: The rows of a triple in flat-key (alphabetical) order: (name, index).
_ROWS = (("all", 0), ("large_pool", 2), ("small_pool", 1))


class Stat:
    """One statistic: ``current``, ``peak``, ``allocated``, ``freed`` (PyTorch's ``Stat``).

    Example::

        >>> from accelrt.memory._stats import Stat
        >>> s = Stat(); s.increase(3); s.decrease(1)
        >>> (s.current, s.peak, s.allocated, s.freed)
        (2, 3, 3, 1)
    """

    __slots__ = ("allocated", "current", "freed", "peak")

    def __init__(self) -> None:
        self.current = 0
        self.peak = 0
        self.allocated = 0
        self.freed = 0

    def increase(self, n: int) -> None:
        """Add ``n``: current and allocated grow, peak follows."""
        c = self.current + n
        self.current = c
        if c > self.peak:
            self.peak = c
        self.allocated += n

    def decrease(self, n: int) -> None:
        """Remove ``n``: current shrinks, freed grows."""
        self.current -= n
        self.freed += n

    def reset_peak(self) -> None:
        self.peak = self.current

    def reset_accumulated(self) -> None:
        self.allocated = 0
        self.freed = 0

    def as_dict(self) -> dict[str, int]:
        return {"current": self.current, "peak": self.peak, "allocated": self.allocated,
                "freed": self.freed}


class HotCounters:
    """The per-allocation stats of one pool type (see the module docstring).

    Current values: ``allocations``, ``allocated_bytes``, ``requested_bytes``, and
    ``pending_frees`` / ``pending_bytes`` (blocks freed but awaiting their events: ``active`` is
    ``allocations + pending_frees``). ``*_sum``: sums of increases since the last accumulated
    reset (PyTorch's ``allocated`` field). ``*_peak``: peaks (``active_peak`` and
    ``active_bytes_peak`` for the active stats). ``*_base``: the current values at the last
    accumulated reset (``freed = base + sum - current``). ``inactive_split`` /
    ``inactive_split_bytes`` with their ``_sum``, ``_peak`` and ``_base``: PyTorch's
    inactive_split stats. ``all_row``: the ``all`` row, ``other_row``: the other pool type's
    counters (so that the hot path reaches them in one attribute load; on the ``all`` row
    itself both are that row).
    ``grew``: an allocation stat of this row grew since :meth:`DeviceStats.settle` (an
    allocation sets it with one store).

    Plain int fields on purpose: small-int arithmetic on slots is the cheapest update CPython
    has (packing several counters into one big int costs more per operation than it saves).
    """

    __slots__ = (
        "active_base",
        "active_bytes_base",
        "active_bytes_peak",
        "active_peak",
        "all_row",
        "allocated_bytes",
        "allocated_bytes_base",
        "allocated_bytes_peak",
        "allocated_bytes_sum",
        "allocations",
        "allocations_base",
        "allocations_peak",
        "allocations_sum",
        "grew",
        "inactive_split",
        "inactive_split_base",
        "inactive_split_bytes",
        "inactive_split_bytes_base",
        "inactive_split_bytes_peak",
        "inactive_split_bytes_sum",
        "inactive_split_peak",
        "inactive_split_sum",
        "other_row",
        "pending_bytes",
        "pending_frees",
        "requested_bytes",
        "requested_bytes_base",
        "requested_bytes_peak",
        "requested_bytes_sum",
    )

    def __init__(self) -> None:
        # the ``all`` row and the other pool type's counters: set by DeviceStats on the pool
        # rows; itself until then (typed without None, so that the compiled build reads
        # their fields directly)
        self.all_row: HotCounters = self
        self.other_row: HotCounters = self
        self.allocations = 0
        self.allocated_bytes = 0
        self.requested_bytes = 0
        self.pending_frees = 0
        self.pending_bytes = 0
        self.allocations_sum = 0
        self.allocated_bytes_sum = 0
        self.requested_bytes_sum = 0
        self.allocations_peak = 0
        self.allocated_bytes_peak = 0
        self.requested_bytes_peak = 0
        self.active_peak = 0
        self.active_bytes_peak = 0
        self.allocations_base = 0
        self.allocated_bytes_base = 0
        self.requested_bytes_base = 0
        self.active_base = 0
        self.active_bytes_base = 0
        self.inactive_split = 0
        self.inactive_split_bytes = 0
        self.inactive_split_sum = 0
        self.inactive_split_bytes_sum = 0
        self.inactive_split_peak = 0
        self.inactive_split_bytes_peak = 0
        self.inactive_split_base = 0
        self.inactive_split_bytes_base = 0
        self.grew = False       # an allocation stat of this row grew since the last settle

    def count_split(self, nbytes: int) -> None:
        """One more inactive split block, of ``nbytes``: a whole block was split, or a split
        block was cached without merging. The increases update this row's peaks and the
        ``all`` row's at once.

        Example::

            >>> from accelrt.memory._stats import DeviceStats
            >>> small = DeviceStats(-1).hot[1]
            >>> small.count_split(512)
            >>> small.inactive_split, small.all_row.inactive_split_bytes_peak
            (1, 512)
        """
        n = self.inactive_split + 1
        self.inactive_split = n
        self.inactive_split_sum += 1
        b = self.inactive_split_bytes + nbytes
        self.inactive_split_bytes = b
        self.inactive_split_bytes_sum += nbytes
        self.raise_split_peaks(n, b)
        other = self.other_row
        self.all_row.raise_split_peaks(n + other.inactive_split, b + other.inactive_split_bytes)

    def raise_peaks(self, n: int, nbytes: int, requested: int) -> None:
        """Raise the allocation peaks to ``n`` allocations, ``nbytes`` allocated and
        ``requested`` requested bytes where those are higher (the one peak update of
        :meth:`DeviceStats.settle`, for a pool type's row and the ``all`` row)."""
        if n > self.allocations_peak:
            self.allocations_peak = n
        if nbytes > self.allocated_bytes_peak:
            self.allocated_bytes_peak = nbytes
        if requested > self.requested_bytes_peak:
            self.requested_bytes_peak = requested

    def raise_active_peaks(self, n: int, nbytes: int) -> None:
        """Raise the active peaks to ``n`` blocks and ``nbytes`` where those are higher."""
        if n > self.active_peak:
            self.active_peak = n
        if nbytes > self.active_bytes_peak:
            self.active_bytes_peak = nbytes

    def raise_split_peaks(self, n: int, nbytes: int) -> None:
        """Raise the inactive_split peaks to ``n`` blocks and ``nbytes`` where those are
        higher."""
        if n > self.inactive_split_peak:
            self.inactive_split_peak = n
        if nbytes > self.inactive_split_bytes_peak:
            self.inactive_split_bytes_peak = nbytes


#: The hot stats' current values in the order of :func:`_current`, and their peak and base
#: fields in the same order.
_PEAKS = ("allocations_peak", "allocated_bytes_peak", "requested_bytes_peak", "active_peak",
          "active_bytes_peak", "inactive_split_peak", "inactive_split_bytes_peak")
_BASES = ("allocations_base", "allocated_bytes_base", "requested_bytes_base", "active_base",
          "active_bytes_base", "inactive_split_base", "inactive_split_bytes_base")


def _current(c: HotCounters) -> tuple[int, ...]:
    return (c.allocations, c.allocated_bytes, c.requested_bytes,
            c.allocations + c.pending_frees, c.allocated_bytes + c.pending_bytes,
            c.inactive_split, c.inactive_split_bytes)


class DeviceStats:
    """All statistics of one allocator.

    Attributes:
        hot: ``(all, small, large)`` :class:`HotCounters`; the ``all`` entry only holds peaks
            and bases (its current values are sums of the other two).
        segment, reserved_bytes: ``(all, small, large)`` :class:`Stat` triples.
        oversize_allocations, oversize_segments: :class:`Stat`.
        num_*: scalar counters; ``max_split_size``: -1 when unlimited.
        reserved_bytes_by_private_pools: private pool id -> ``(all, small, large)``
            :class:`Stat` triple of the pool's reserved bytes (:meth:`count_pool_reserved`).
        pending_seen: a free waited for events since the last peak reset.
        dirty_split: True when an inactive_split stat grew since :meth:`settle_split`.
    """

    __slots__ = (
        "dirty_split",
        "hot",
        "max_split_size",
        "num_alloc_retries",
        "num_device_alloc",
        "num_device_free",
        "num_oom_rejections",
        "num_ooms",
        "num_sync_all_streams",
        "oversize_allocations",
        "oversize_segments",
        "pending_seen",
        "reserved_bytes",
        "reserved_bytes_by_private_pools",
        "segment",
    )

    def __init__(self, max_split_size: int) -> None:
        self.hot = (HotCounters(), HotCounters(), HotCounters())
        a, s, g = self.hot
        s.all_row = g.all_row = a
        s.other_row = g
        g.other_row = s
        self.segment = (Stat(), Stat(), Stat())
        self.reserved_bytes = (Stat(), Stat(), Stat())
        self.reserved_bytes_by_private_pools: dict[tuple[int, int], tuple[Stat, Stat, Stat]] = {}
        self.oversize_allocations = Stat()
        self.oversize_segments = Stat()
        self.num_alloc_retries = 0
        self.num_ooms = 0
        self.num_sync_all_streams = 0
        self.num_device_alloc = 0
        self.num_device_free = 0
        self.num_oom_rejections = 0
        self.max_split_size = max_split_size
        self.dirty_split = False
        self.pending_seen = False

    # ------------------------------------------------------------------ hot stats
    def settle(self) -> None:
        """Bring the allocation peaks (pool types and ``all``) up to date.

        Only the pool type(s) whose ``grew`` flag is set are compared. While no free has waited
        for events since the last peak reset (``pending_seen`` False), ``active`` equals
        ``allocation`` at all times, so the active peaks are not compared here but copied
        from the allocation peaks by :meth:`_materialize_active`.
        """
        if self.pending_seen:
            self._settle_full()
            return
        a, s, g = self.hot
        if s.grew:
            s.raise_peaks(s.allocations, s.allocated_bytes, s.requested_bytes)
            s.grew = False
        if g.grew:
            g.raise_peaks(g.allocations, g.allocated_bytes, g.requested_bytes)
            g.grew = False
        a.raise_peaks(s.allocations + g.allocations, s.allocated_bytes + g.allocated_bytes,
                      s.requested_bytes + g.requested_bytes)

    def _settle_full(self) -> None:
        """:meth:`settle` once a free has waited for events: the active peaks too."""
        a, s, g = self.hot
        for c in (s, g):
            if c.grew:
                c.raise_peaks(c.allocations, c.allocated_bytes, c.requested_bytes)
                c.raise_active_peaks(c.allocations + c.pending_frees,
                                     c.allocated_bytes + c.pending_bytes)
        n = s.allocations + g.allocations
        b = s.allocated_bytes + g.allocated_bytes
        a.raise_peaks(n, b, s.requested_bytes + g.requested_bytes)
        a.raise_active_peaks(n + s.pending_frees + g.pending_frees,
                             b + s.pending_bytes + g.pending_bytes)
        s.grew = g.grew = False

    def settle_grown(self) -> None:
        """:meth:`settle` if an allocation stat grew since the last one (before a decrease)."""
        h = self.hot
        if h[1].grew or h[2].grew:
            self.settle()

    def _materialize_active(self) -> None:
        if not self.pending_seen:
            for c in self.hot:
                c.active_peak = c.allocations_peak
                c.active_bytes_peak = c.allocated_bytes_peak

    def mark_pending(self) -> None:
        """Call (with peaks settled) before the first free that waits for events."""
        if not self.pending_seen:
            self._materialize_active()
            self.pending_seen = True

    def settle_split(self) -> None:
        """Bring the inactive_split peaks (pool types and ``all``) up to date."""
        a, s, g = self.hot
        s.raise_split_peaks(s.inactive_split, s.inactive_split_bytes)
        g.raise_split_peaks(g.inactive_split, g.inactive_split_bytes)
        a.raise_split_peaks(s.inactive_split + g.inactive_split,
                            s.inactive_split_bytes + g.inactive_split_bytes)
        self.dirty_split = False

    def settle_all(self) -> None:
        """Bring every lazily tracked peak up to date."""
        h = self.hot
        h[1].grew = h[2].grew = True
        self.settle()
        self.settle_split()
        self._materialize_active()

    def count_segment(self, type_index: int, size: int, oversize: bool, added: bool) -> None:
        """Count a segment of ``size`` bytes in pool type ``type_index`` (1 small, 2 large)
        that was ``added`` (a device allocation) or released (a device free)."""
        changes = ((self.segment[0], 1), (self.segment[type_index], 1),
                   (self.reserved_bytes[0], size), (self.reserved_bytes[type_index], size))
        if added:
            for stat, n in changes:   # (Stat.increase, inlined)
                c = stat.current + n
                stat.current = c
                if c > stat.peak:
                    stat.peak = c
                stat.allocated += n
            if oversize:
                self.oversize_segments.increase(1)
            self.num_device_alloc += 1
        else:
            for stat, n in changes:   # (Stat.decrease, inlined)
                stat.current -= n
                stat.freed += n
            if oversize:
                self.oversize_segments.decrease(1)
            self.num_device_free += 1

    def count_pool_reserved(self, owner: PrivatePool | None, type_index: int,
                            nbytes: int) -> None:
        """``nbytes`` more (less, if negative) held by a segment of pool type ``type_index``
        (1 small, 2 large) of private pool ``owner`` (``None``: the default pool, which has no
        entry): a segment allocated or freed, pages mapped or unmapped. Updates the pool's
        ``reserved`` and its ``reserved_bytes_by_private_pools`` rows ``all`` and
        ``type_index``, as PyTorch's ``alloc_block``, ``release_block``, ``map_block`` and
        ``unmap_block`` do. The retired twin of the default pool (id ``(0, 0)``,
        :func:`~accelrt.memory._pools.retire_segments`) has no entry either.

        Example::

            >>> from accelrt.memory._stats import DeviceStats
            >>> from accelrt.memory._block import PrivatePool
            >>> st = DeviceStats(-1)
            >>> pool = PrivatePool((1, 2), st.hot[1], st.hot[2])
            >>> st.count_pool_reserved(pool, 2, 20 << 20)
            >>> st.count_pool_reserved(pool, 2, -(20 << 20))
            >>> arr = st.reserved_bytes_by_private_pools[(1, 2)]
            >>> pool.reserved, arr[0].current, arr[2].peak, arr[1].peak
            (0, 0, 20971520, 0)
        """
        if owner is None:
            return
        owner.reserved += nbytes
        pid = owner.id
        if pid == (0, 0):
            return
        arr = self.reserved_bytes_by_private_pools.get(pid)
        if arr is None:
            arr = self.reserved_bytes_by_private_pools[pid] = (Stat(), Stat(), Stat())
        for stat in (arr[0], arr[type_index]):
            if nbytes >= 0:
                stat.increase(nbytes)
            else:
                stat.decrease(-nbytes)

    def private_pool_items(self) -> list[tuple[str, int]]:
        """The flat ``reserved_bytes_by_private_pools.{a}_{b}.{row}.{field}`` items, sorted
        by key (none before a private pool's first segment)."""
        items: list[tuple[str, int]] = []
        for (a, b), arr in self.reserved_bytes_by_private_pools.items():
            head = f"{PRIVATE_POOLS}.{a}_{b}."
            for row, i in _ROWS:
                st = arr[i]
                key = head + row
                items += [(key + ".allocated", st.allocated), (key + ".current", st.current),
                          (key + ".freed", st.freed), (key + ".peak", st.peak)]
        items.sort()
        return items

    def allocated_bytes(self) -> int:
        """``allocated_bytes.all.current`` (O(1))."""
        h = self.hot
        return h[1].allocated_bytes + h[2].allocated_bytes

    def max_allocated_bytes(self) -> int:
        """``allocated_bytes.all.peak`` (O(1))."""
        self.settle_grown()
        return self.hot[0].allocated_bytes_peak

    # ------------------------------------------------------------------ views
    def flat_values(self) -> list[int]:
        """The values of PyTorch's flat ``memory_stats`` keys, in :data:`FLAT_KEYS` (sorted)
        order: for each stat ``allocated``, ``current``, ``freed``, ``peak``; rows ``all``,
        ``large_pool``, ``small_pool``."""
        self.settle_all()
        a, s, g = self.hot
        vals: list[int] = []
        add = vals.extend
        sn, sb, sr = s.allocations, s.allocated_bytes, s.requested_bytes
        stn, stb, str_ = s.allocations_sum, s.allocated_bytes_sum, s.requested_bytes_sum
        gn, gb, gr = g.allocations, g.allocated_bytes, g.requested_bytes
        gtn, gtb, gtr = g.allocations_sum, g.allocated_bytes_sum, g.requested_bytes_sum
        ssn, ssb = s.inactive_split, s.inactive_split_bytes
        stsn, stsb = s.inactive_split_sum, s.inactive_split_bytes_sum
        gsn, gsb = g.inactive_split, g.inactive_split_bytes
        gtsn, gtsb = g.inactive_split_sum, g.inactive_split_bytes_sum
        an, ab, ar = sn + gn, sb + gb, sr + gr
        atn, atb, atr = stn + gtn, stb + gtb, str_ + gtr
        apn, apb = s.pending_frees + g.pending_frees, s.pending_bytes + g.pending_bytes
        asn, asb, atsn, atsb = ssn + gsn, ssb + gsb, stsn + gtsn, stsb + gtsb
        add((
            # active
            atn, an + apn, a.active_base + atn - an - apn, a.active_peak,
            gtn, gn + g.pending_frees, g.active_base + gtn - gn - g.pending_frees, g.active_peak,
            stn, sn + s.pending_frees, s.active_base + stn - sn - s.pending_frees, s.active_peak,
            # active_bytes
            atb, ab + apb, a.active_bytes_base + atb - ab - apb, a.active_bytes_peak,
            gtb, gb + g.pending_bytes, g.active_bytes_base + gtb - gb - g.pending_bytes,
            g.active_bytes_peak,
            stb, sb + s.pending_bytes, s.active_bytes_base + stb - sb - s.pending_bytes,
            s.active_bytes_peak,
            # allocated_bytes
            atb, ab, a.allocated_bytes_base + atb - ab, a.allocated_bytes_peak,
            gtb, gb, g.allocated_bytes_base + gtb - gb, g.allocated_bytes_peak,
            stb, sb, s.allocated_bytes_base + stb - sb, s.allocated_bytes_peak,
            # allocation
            atn, an, a.allocations_base + atn - an, a.allocations_peak,
            gtn, gn, g.allocations_base + gtn - gn, g.allocations_peak,
            stn, sn, s.allocations_base + stn - sn, s.allocations_peak,
            # inactive_split
            atsn, asn, a.inactive_split_base + atsn - asn, a.inactive_split_peak,
            gtsn, gsn, g.inactive_split_base + gtsn - gsn, g.inactive_split_peak,
            stsn, ssn, s.inactive_split_base + stsn - ssn, s.inactive_split_peak,
            # inactive_split_bytes
            atsb, asb, a.inactive_split_bytes_base + atsb - asb, a.inactive_split_bytes_peak,
            gtsb, gsb, g.inactive_split_bytes_base + gtsb - gsb, g.inactive_split_bytes_peak,
            stsb, ssb, s.inactive_split_bytes_base + stsb - ssb, s.inactive_split_bytes_peak,
            self.max_split_size, self.num_alloc_retries, self.num_device_alloc,
            self.num_device_free, self.num_oom_rejections, self.num_ooms,
            self.num_sync_all_streams))
        for st in (self.oversize_allocations, self.oversize_segments):
            add((st.allocated, st.current, st.freed, st.peak))
        add((atr, ar, a.requested_bytes_base + atr - ar, a.requested_bytes_peak,
             gtr, gr, g.requested_bytes_base + gtr - gr, g.requested_bytes_peak,
             str_, sr, s.requested_bytes_base + str_ - sr, s.requested_bytes_peak))
        for arr in (self.reserved_bytes, self.segment):
            for st in (arr[0], arr[2], arr[1]):     # all, large_pool, small_pool
                add((st.allocated, st.current, st.freed, st.peak))
        return vals

    def as_flat_dict(self) -> dict[str, int]:
        """PyTorch's flat ``memory_stats`` keys (unsorted)."""
        return dict(zip(FLAT_KEYS, self.flat_values()))

    def sorted_values(self) -> list[int]:
        """The values of :meth:`as_flat_dict` in :data:`SORTED_KEYS` order, so that
        ``OrderedDict(zip(SORTED_KEYS, values))`` is ``memory_stats()``."""
        return self.flat_values()

    def _rare(self) -> list[Stat]:
        rare = [*self.segment, *self.reserved_bytes, self.oversize_allocations,
                self.oversize_segments]
        for arr in self.reserved_bytes_by_private_pools.values():
            rare += arr
        return rare

    def _set_rows(self, names: tuple[str, ...]) -> None:
        """Set the fields ``names`` (in :data:`_CURRENT` order) of every row to the current
        values (the ``all`` row to the sums of the pool rows)."""
        a, s, g = self.hot
        for c in (s, g):
            for name, value in zip(names, _current(c)):
                setattr(c, name, value)
        for name, sv, gv in zip(names, _current(s), _current(g)):
            setattr(a, name, sv + gv)

    def reset_peak(self) -> None:
        """``peak = current`` for every stat (PyTorch's ``reset_peak_memory_stats``)."""
        self.settle_all()
        self._set_rows(_PEAKS)
        a, s, g = self.hot
        self.pending_seen = s.pending_frees + g.pending_frees > 0
        for st in self._rare():
            st.reset_peak()

    def reset_accumulated(self) -> None:
        """``allocated = freed = 0`` for every stat and the ``num_*`` counters to 0."""
        self.settle_all()
        for c in self.hot[1:]:
            c.allocations_sum = c.allocated_bytes_sum = c.requested_bytes_sum = 0
            c.inactive_split_sum = c.inactive_split_bytes_sum = 0
        self._set_rows(_BASES)
        for st in self._rare():
            st.reset_accumulated()
        self.num_alloc_retries = 0
        self.num_ooms = 0
        self.num_sync_all_streams = 0
        self.num_device_alloc = 0
        self.num_device_free = 0
        self.num_oom_rejections = 0


# ------------------------------------------------- the allocator's statistics API
# (the DeviceCachingAllocator methods stats, sorted_stats, ... call these)


def flat_stats(a: AllocatorCore) -> dict[str, int]:
    """PyTorch's flat ``memory_stats`` dict (unsorted).

    Example::

        >>> from accelrt.backends import get_backend
        >>> from accelrt.memory import _allocator, _stats
        >>> alloc = _allocator.DeviceCachingAllocator(get_backend("cpu"), 0)
        >>> ptr = alloc.malloc(1000, 0)
        >>> alloc.free(ptr)
        >>> _stats.flat_stats(alloc)["requested_bytes.small_pool.freed"]
        1000
    """
    with a._lock:
        a.settle_locked()
        st = a._stats
        vals = st.flat_values()
        private = st.private_pool_items() if st.reserved_bytes_by_private_pools else None
    flat = dict(zip(FLAT_KEYS, vals))
    if private:
        flat.update(private)
    return flat


def sorted_stats(a: AllocatorCore) -> collections.OrderedDict[str, int]:
    """:func:`flat_stats` as an ``OrderedDict`` sorted by key (``memory_stats()``).

    Example::

        >>> from accelrt.backends import get_backend
        >>> from accelrt.memory._allocator import DeviceCachingAllocator
        >>> a = DeviceCachingAllocator(get_backend("cpu"), 0)
        >>> st = a.sorted_stats()
        >>> list(st) == sorted(st), st == a.stats()
        (True, True)
    """
    with a._lock:
        a.settle_locked()
        st = a._stats
        vals = st.sorted_values()
        if not st.reserved_bytes_by_private_pools:
            return collections.OrderedDict(zip(SORTED_KEYS, vals))
        private = st.private_pool_items()
    at = _PRIVATE_AT
    out = collections.OrderedDict(zip(SORTED_KEYS[:at], vals[:at]))
    out.update(private)
    out.update(zip(SORTED_KEYS[at:], vals[at:]))
    return out


def nest_stats(flat: Mapping[str, int], private_pools: bool = True) -> dict[Any, Any]:
    """``memory_stats_as_nested_dict()`` from ``memory_stats()``: the dotted keys as nested
    dicts (``{"allocated_bytes": {"all": {"peak": ...}}}``), where, as in PyTorch,
    ``reserved_bytes_by_private_pools`` is keyed by pool id tuples and, with
    ``private_pools`` (a device allocator's statistics, not the host pool's), is there (maybe
    empty) whenever there are statistics (``{}`` stays ``{}``).

    Example::

        >>> from accelrt.memory._stats import nest_stats
        >>> nest_stats({"num_ooms": 0, "reserved_bytes_by_private_pools.1_2.all.peak": 5})
        {'num_ooms': 0, 'reserved_bytes_by_private_pools': {(1, 2): {'all': {'peak': 5}}}}
        >>> nest_stats({"num_ooms": 0})
        {'num_ooms': 0, 'reserved_bytes_by_private_pools': {}}
    """
    nested: dict[Any, Any] = {}
    for key, value in flat.items():
        *path, leaf = key.split(".")
        parts: list[Any] = path
        if path and path[0] == PRIVATE_POOLS:       # "a_b" -> (a, b), as PyTorch's key
            a, b = path[1].split("_")
            parts = [PRIVATE_POOLS, (int(a), int(b)), *path[2:]]
        d = nested
        for part in parts:
            d = d.setdefault(part, {})
        d[leaf] = value
    if private_pools and nested and PRIVATE_POOLS not in nested:
        nested[PRIVATE_POOLS] = {}
        nested = dict(sorted(nested.items()))
    return nested


_STAT_KEYS = ("current", "peak", "allocated", "freed")
_DURATION_KEYS = ("total", "max", "min", "count", "avg")
#: torch 2.14.1's key order of ``host_memory_stats_as_nested_dict()`` (observed:
#: ``torch._C._cuda_hostMemoryStats()``, which runs without a GPU), with each stat's own keys
#: in its order
_HOST_NESTED_ORDER: dict[str, tuple[str, ...]] = {
    "num_host_alloc": (), "num_host_free": (), "allocations": _STAT_KEYS,
    "active_requests": _STAT_KEYS, "allocated_bytes": _STAT_KEYS, "active_bytes": _STAT_KEYS,
    "host_alloc_time": _DURATION_KEYS, "host_free_time": _DURATION_KEYS}


def nest_host_stats(flat: Mapping[str, int]) -> dict[str, Any]:
    """``host_memory_stats_as_nested_dict()`` from the pinned pool's ``host_memory_stats()``:
    :func:`nest_stats` in PyTorch's key order (a key PyTorch does not have comes last).

    Example::

        >>> from accelrt.memory._stats import nest_host_stats
        >>> nest_host_stats({"allocations.freed": 0, "allocations.current": 1,
        ...                  "num_host_alloc": 1})
        {'num_host_alloc': 1, 'allocations': {'current': 1, 'freed': 0}}
    """
    nested = nest_stats(flat, private_pools=False)
    out: dict[str, Any] = {}
    for key, inner in _HOST_NESTED_ORDER.items():
        if key in nested:
            value = nested.pop(key)
            if isinstance(value, dict):
                value = {k: value.pop(k) for k in inner if k in value} | value
            out[key] = value
    out.update(nested)
    return out


def max_memory_allocated(a: AllocatorCore) -> int:
    """``allocated_bytes.all.peak``."""
    with a._lock:
        a.settle_locked()
        return a._stats.max_allocated_bytes()


def reset_peak_stats(a: AllocatorCore) -> None:
    """Set every peak to its current value."""
    with a._lock:
        a.settle_locked()
        a._stats.reset_peak()


def reset_accumulated_stats(a: AllocatorCore) -> None:
    """Zero every ``allocated``/``freed`` sum and the ``num_*`` counters."""
    with a._lock:
        a._flush_deferred()
        a._stats.reset_accumulated()
