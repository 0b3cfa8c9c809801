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


__all__ = ["FLAT_KEYS", "SORTED_KEYS", "STAT_TYPES", "DeviceStats", "HotCounters", "Stat"]

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

    Fields: ``n``/``b``/``r`` current allocation count, allocated bytes and requested bytes;
    ``pn``/``pb`` count and bytes of blocks freed but awaiting their events; ``tn``/``tb``/
    ``tr`` sums of increases since the last accumulated reset; ``k*`` peaks; ``b*`` bases
    (current values at the last accumulated reset); ``sn``/``sb`` inactive_split count and
    bytes, with their sums of increases ``tsn``/``tsb``, peaks ``ksn``/``ksb`` and bases
    ``bsn``/``bsb``; ``a`` the ``all`` row and ``o`` the other pool type (pool rows only, so
    that the hot path reaches them in one attribute load).

    Plain int fields on purpose: small-int arithmetic on slots is the cheapest update CPython
    has (packing several counters into one big int costs more per operation than it saves).
    """

    __slots__ = (
        "a",
        "b",
        "bab",
        "ban",
        "bb",
        "bn",
        "br",
        "bsb",
        "bsn",
        "kab",
        "kan",
        "kb",
        "kn",
        "kr",
        "ksb",
        "ksn",
        "n",
        "o",
        "pb",
        "pn",
        "r",
        "sb",
        "sn",
        "tb",
        "tn",
        "tr",
        "tsb",
        "tsn",
    )

    def __init__(self) -> None:
        self.a: HotCounters | None = None   # the ``all`` row (set by DeviceStats)
        self.o: HotCounters | None = None   # the other pool type's counters
        self.n = 0
        self.b = 0
        self.r = 0
        self.pn = 0
        self.pb = 0
        self.tn = 0
        self.tb = 0
        self.tr = 0
        self.kn = 0
        self.kb = 0
        self.kr = 0
        self.kan = 0
        self.kab = 0
        self.bn = 0
        self.bb = 0
        self.br = 0
        self.ban = 0
        self.bab = 0
        self.sn = 0
        self.sb = 0
        self.tsn = 0
        self.tsb = 0
        self.ksn = 0
        self.ksb = 0
        self.bsn = 0
        self.bsb = 0


class DeviceStats:
    """All statistics of one allocator.

    Attributes:
        hot: ``(all, small, large)`` :class:`HotCounters`; the ``all`` entry only holds peaks
            and bases (its current values are sums of the other two).
        segment, reserved_bytes: ``(all, small, large)`` :class:`Stat` triples.
        oversize_allocations, oversize_segments: :class:`Stat`.
        num_*: scalar counters; ``max_split_size``: -1 when unlimited.
        dirty: which allocation stats grew since the last :meth:`settle`: False (none), the
            :class:`HotCounters` of one pool type, or True (both).
        pending_seen: a free waited for events since the last peak reset.
        dirty_split: True when an inactive_split stat grew since :meth:`settle_split`.
    """

    __slots__ = (
        "dirty",
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
        "segment",
    )

    def __init__(self, max_split_size: int) -> None:
        self.hot = (HotCounters(), HotCounters(), HotCounters())
        a, s, g = self.hot
        s.a = g.a = a
        s.o = g
        g.o = s
        self.segment = (Stat(), Stat(), Stat())
        self.reserved_bytes = (Stat(), Stat(), Stat())
        self.oversize_allocations = Stat()
        self.oversize_segments = Stat()
        self.num_alloc_retries = 0
        self.num_ooms = 0
        self.num_sync_all_streams = 0
        self.num_device_alloc = 0
        self.num_device_free = 0
        self.num_oom_rejections = 0
        self.max_split_size = max_split_size
        self.dirty: bool | HotCounters = False
        self.dirty_split = False
        self.pending_seen = False

    # ------------------------------------------------------------------ hot stats
    def settle(self) -> None:
        """Bring the allocation peaks (pool types and ``all``) up to date.

        Only the pool type(s) marked in :attr:`dirty` are compared. While no free has waited
        for events since the last peak reset (``pending_seen`` False), ``active`` equals
        ``allocation`` at all times, so the active peaks are not compared here but copied
        from the allocation peaks by :meth:`_materialize_active`.
        """
        a, s, g = self.hot
        d = self.dirty
        full = self.pending_seen
        sn = s.n
        sb = s.b
        sr = s.r
        gn = g.n
        gb = g.b
        gr = g.r
        if d is not g:
            if sn > s.kn:
                s.kn = sn
            if sb > s.kb:
                s.kb = sb
            if sr > s.kr:
                s.kr = sr
            if full:
                if sn + s.pn > s.kan:
                    s.kan = sn + s.pn
                if sb + s.pb > s.kab:
                    s.kab = sb + s.pb
        if d is not s:
            if gn > g.kn:
                g.kn = gn
            if gb > g.kb:
                g.kb = gb
            if gr > g.kr:
                g.kr = gr
            if full:
                if gn + g.pn > g.kan:
                    g.kan = gn + g.pn
                if gb + g.pb > g.kab:
                    g.kab = gb + g.pb
        n = sn + gn
        b = sb + gb
        if n > a.kn:
            a.kn = n
        if b > a.kb:
            a.kb = b
        if sr + gr > a.kr:
            a.kr = sr + gr
        if full:
            an = n + s.pn + g.pn
            if an > a.kan:
                a.kan = an
            ab = b + s.pb + g.pb
            if ab > a.kab:
                a.kab = ab
        self.dirty = False

    def _materialize_active(self) -> None:
        if not self.pending_seen:
            for c in self.hot:
                c.kan = c.kn
                c.kab = c.kb

    def mark_pending(self) -> None:
        """Call (with peaks settled) before the first free that waits for events."""
        if not self.pending_seen:
            self._materialize_active()
            self.pending_seen = True

    def settle_split(self) -> None:
        """Bring the inactive_split peaks (pool types and ``all``) up to date."""
        a, s, g = self.hot
        sn = s.sn
        sb = s.sb
        gn = g.sn
        gb = g.sb
        if sn > s.ksn:
            s.ksn = sn
        if sb > s.ksb:
            s.ksb = sb
        if gn > g.ksn:
            g.ksn = gn
        if gb > g.ksb:
            g.ksb = gb
        if sn + gn > a.ksn:
            a.ksn = sn + gn
        if sb + gb > a.ksb:
            a.ksb = sb + gb
        self.dirty_split = False

    def settle_all(self) -> None:
        """Bring every lazily tracked peak up to date."""
        self.dirty = True
        self.settle()
        self.settle_split()
        self._materialize_active()

    def allocated_bytes(self) -> int:
        """``allocated_bytes.all.current`` (O(1))."""
        h = self.hot
        return h[1].b + h[2].b

    def max_allocated_bytes(self) -> int:
        """``allocated_bytes.all.peak`` (O(1))."""
        if self.dirty:
            self.settle()
        return self.hot[0].kb

    # ------------------------------------------------------------------ views
    def flat_values(self) -> list[int]:
        """The values of PyTorch's flat ``memory_stats`` keys, in :data:`FLAT_KEYS` (sorted)
        order: for each stat ``allocated``, ``current``, ``freed``, ``peak``; rows ``all``,
        ``large_pool``, ``small_pool``."""
        self.settle_all()
        a, s, g = self.hot
        vals: list[int] = []
        add = vals.extend
        sn, sb, sr, stn, stb, str_ = s.n, s.b, s.r, s.tn, s.tb, s.tr
        gn, gb, gr, gtn, gtb, gtr = g.n, g.b, g.r, g.tn, g.tb, g.tr
        ssn, ssb, stsn, stsb = s.sn, s.sb, s.tsn, s.tsb
        gsn, gsb, gtsn, gtsb = g.sn, g.sb, g.tsn, g.tsb
        an, ab, ar = sn + gn, sb + gb, sr + gr
        atn, atb, atr = stn + gtn, stb + gtb, str_ + gtr
        apn, apb = s.pn + g.pn, s.pb + g.pb
        asn, asb, atsn, atsb = ssn + gsn, ssb + gsb, stsn + gtsn, stsb + gtsb
        add((
            # active
            atn, an + apn, a.ban + atn - an - apn, a.kan,
            gtn, gn + g.pn, g.ban + gtn - gn - g.pn, g.kan,
            stn, sn + s.pn, s.ban + stn - sn - s.pn, s.kan,
            # active_bytes
            atb, ab + apb, a.bab + atb - ab - apb, a.kab,
            gtb, gb + g.pb, g.bab + gtb - gb - g.pb, g.kab,
            stb, sb + s.pb, s.bab + stb - sb - s.pb, s.kab,
            # allocated_bytes
            atb, ab, a.bb + atb - ab, a.kb,
            gtb, gb, g.bb + gtb - gb, g.kb,
            stb, sb, s.bb + stb - sb, s.kb,
            # allocation
            atn, an, a.bn + atn - an, a.kn,
            gtn, gn, g.bn + gtn - gn, g.kn,
            stn, sn, s.bn + stn - sn, s.kn,
            # inactive_split
            atsn, asn, a.bsn + atsn - asn, a.ksn,
            gtsn, gsn, g.bsn + gtsn - gsn, g.ksn,
            stsn, ssn, s.bsn + stsn - ssn, s.ksn,
            # inactive_split_bytes
            atsb, asb, a.bsb + atsb - asb, a.ksb,
            gtsb, gsb, g.bsb + gtsb - gsb, g.ksb,
            stsb, ssb, s.bsb + stsb - ssb, s.ksb,
            self.max_split_size, self.num_alloc_retries, self.num_device_alloc,
            self.num_device_free, self.num_oom_rejections, self.num_ooms,
            self.num_sync_all_streams))
        for st in (self.oversize_allocations, self.oversize_segments):
            add((st.allocated, st.current, st.freed, st.peak))
        add((atr, ar, a.br + atr - ar, a.kr,
             gtr, gr, g.br + gtr - gr, g.kr,
             str_, sr, s.br + str_ - sr, s.kr))
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
        return [*self.segment, *self.reserved_bytes, self.oversize_allocations,
                self.oversize_segments]

    def reset_peak(self) -> None:
        """``peak = current`` for every stat (PyTorch's ``reset_peak_memory_stats``)."""
        self.settle_all()
        a, s, g = self.hot
        for c in (s, g):
            c.kn, c.kb, c.kr, c.kan, c.kab = c.n, c.b, c.r, c.n + c.pn, c.b + c.pb
            c.ksn, c.ksb = c.sn, c.sb
        n, b, r = s.n + g.n, s.b + g.b, s.r + g.r
        a.kn, a.kb, a.kr, a.kan, a.kab = n, b, r, n + s.pn + g.pn, b + s.pb + g.pb
        a.ksn, a.ksb = s.sn + g.sn, s.sb + g.sb
        self.pending_seen = s.pn + g.pn > 0
        for st in self._rare():
            st.reset_peak()

    def reset_accumulated(self) -> None:
        """``allocated = freed = 0`` for every stat and the ``num_*`` counters to 0."""
        self.settle_all()
        a, s, g = self.hot
        for c in (s, g):
            c.tn = c.tb = c.tr = c.tsn = c.tsb = 0
            c.bn, c.bb, c.br, c.ban, c.bab = c.n, c.b, c.r, c.n + c.pn, c.b + c.pb
            c.bsn, c.bsb = c.sn, c.sb
        n, b, r = s.n + g.n, s.b + g.b, s.r + g.r
        a.bn, a.bb, a.br, a.ban, a.bab = n, b, r, n + s.pn + g.pn, b + s.pb + g.pb
        a.bsn, a.bsb = s.sn + g.sn, s.sb + g.sb
        for st in self._rare():
            st.reset_accumulated()
        self.num_alloc_retries = 0
        self.num_ooms = 0
        self.num_sync_all_streams = 0
        self.num_device_alloc = 0
        self.num_device_free = 0
        self.num_oom_rejections = 0
