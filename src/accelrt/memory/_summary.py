"""``memory_summary``: PyTorch's 75-column allocator table, as a pure function of the stats.

The layout, units and rounding follow ``torch.cuda.memory_summary`` byte for byte; only the
title names accelrt and the backend, and the OOM/retry line names the backend instead of
CUDA/cudaMalloc (widths kept). The unit of every row of a metric is chosen from that metric's
``all`` row, column by column, so a small-pool row of 1000 bytes prints ``0 KiB`` beside a
large ``all`` value, exactly as PyTorch does.

Example::

    >>> from accelrt.memory._summary import format_summary
    >>> text = format_summary({}, device=0, backend="cpu")
    >>> text.splitlines()[1]
    '|                  accelrt CPU memory summary, device ID 0                  |'
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["format_count", "format_size", "format_summary"]

_WIDTH = 75

_SIZE_METRICS = (
    ("allocated_bytes", "Allocated memory"),
    ("active_bytes", "Active memory"),
    ("requested_bytes", "Requested memory"),
    ("reserved_bytes", "GPU reserved memory"),
    ("inactive_split_bytes", "Non-releasable memory"),
)
_COUNT_METRICS = (
    ("allocation", "Allocations"),
    ("active", "Active allocs"),
    ("segment", "GPU reserved segments"),
    ("inactive_split", "Non-releasable allocs"),
)
_OVERSIZE = (
    ("oversize_allocations", "Oversize allocations"),
    ("oversize_segments", "Oversize GPU segments"),
)
_COLUMNS = ("current", "peak", "allocated", "freed")
_SIZE_UNITS = ("B  ", "KiB", "MiB", "GiB", "TiB", "PiB")
_COUNT_UNITS = (" ", "K", "M")


def _scaled(value: int, pref: float, units: tuple[str, ...], step: int,
            limit: int) -> tuple[int, str]:
    """``value`` divided by ``step`` (rounding down) and the next of ``units`` while ``pref``
    (divided alike) is at least ``limit``: PyTorch's unit choice for sizes and counts."""
    unit = units[0]
    for nxt in units[1:]:
        if pref < limit:
            break
        unit = nxt
        value //= step
        pref /= step
    return value, unit


def format_size(sz: int, pref_sz: float) -> str:
    """Format ``sz`` bytes in the unit that suits ``pref_sz`` (10 characters).

    Example::

        >>> from accelrt.memory._summary import format_size
        >>> format_size(786432, 786432), format_size(1024, 3146752)
        ('   768 KiB', '     1 KiB')
    """
    sz, unit = _scaled(sz, pref_sz, _SIZE_UNITS, 1024, 768 * 1024)
    return f"{sz:6d} {unit}"


def format_count(cnt: int, pref_cnt: float) -> str:
    """Format a count in the unit that suits ``pref_cnt`` (10 characters).

    Example::

        >>> from accelrt.memory._summary import format_count
        >>> format_count(1234567, 1234567)
        '   1234 K '
    """
    cnt, unit = _scaled(cnt, pref_cnt, _COUNT_UNITS, 1000, 750 * 1000)
    return f"{cnt:7d} {unit} "


def _title(backend: str, device: int) -> str:
    text = f"accelrt {backend.upper()} memory summary, device ID {device}"
    lead = max(1, min(18, _WIDTH - 1 - len(text)))
    return (" " * lead + text).ljust(_WIDTH)


def _oom_line(backend: str, ooms: int, retries: int) -> str:
    left = f"  {'':9} {backend.upper()} OOMs: {ooms}".ljust(35)
    return f"{left} | {'':3} device malloc retries: {retries:<8d}  "


def format_summary(stats: Mapping[str, int], device: int, backend: str,
                   abbreviated: bool = False) -> str:
    """Render ``memory_summary``'s table from a flat ``memory_stats`` dict.

    Missing keys count as 0, so an allocator that has not started prints an all-zero table.

    Args:
        stats: flat stats with PyTorch's keys (``"allocated_bytes.all.current"``, ...).
        device: device index shown in the title.
        backend: backend name shown in the title and the OOM line (``"cuda"``).
        abbreviated: leave out the per-pool (large/small) rows.

    Returns:
        The table, 75 characters between ``|`` borders per line, ending in a newline.

    Example::

        >>> from accelrt.memory._summary import format_summary
        >>> s = format_summary({"allocated_bytes.all.current": 512}, 0, "cpu", abbreviated=True)
        >>> [l for l in s.splitlines() if "Allocated memory" in l]
        ['| Allocated memory      |    512 B   |      0 B   |      0 B   |      0 B   |']
    """
    get = stats.get
    lines = ["=" * _WIDTH, _title(backend, device), "-" * _WIDTH,
             _oom_line(backend, int(get("num_ooms", 0)), int(get("num_alloc_retries", 0))),
             "=" * _WIDTH,
             "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  "]
    pools: list[tuple[str, str | None]] = [("all", None)]
    if not abbreviated:
        pools += [("large_pool", "      from large pool"), ("small_pool", "      from small pool")]
    for metrics, fmt in ((_SIZE_METRICS, format_size), (_COUNT_METRICS, format_count)):
        for key, name in metrics:
            lines.append("-" * _WIDTH)
            prefs: list[int] | None = None
            for pool, label in pools:
                vals = [int(get(f"{key}.{pool}.{col}", 0)) for col in _COLUMNS]
                if prefs is None:
                    prefs = vals
                cells = " | ".join(fmt(v, p) for v, p in zip(vals, prefs))
                lines.append(f" {label or name:<21} | {cells} ")
    for key, name in _OVERSIZE:
        lines.append("-" * _WIDTH)
        vals = [int(get(f"{key}.{col}", 0)) for col in _COLUMNS]
        cells = " | ".join(format_count(v, v) for v in vals)
        lines.append(f" {name:<21} | {cells} ")
    lines.append("=" * _WIDTH)
    return "|" + "|\n|".join(lines) + "|\n"
