"""``accelrt.memory.viz``: look at allocator snapshots (text summaries, a self-contained HTML
page), the public face of :mod:`accelrt.memory.tools.viz`, where the offline tools live.

Example::

    >>> from accelrt.memory.viz import segsum
    >>> snap = {"segments": [{"address": 0, "total_size": 20 << 20, "stream": 0, "blocks": [
    ...     {"size": 20 << 20, "requested_size": 20 << 20, "state": "active_allocated"}]}],
    ...     "device_traces": []}
    >>> segsum(snap).splitlines()[1]
    '[a] 20.0MiB allocated, 0.0B free'
"""

from __future__ import annotations

from .tools.viz import (
    format_bytes,
    load_snapshot,
    memory_by_location,
    segsum,
    trace_html,
    trace_text,
    viz_main,
)

__all__ = ["format_bytes", "load_snapshot", "memory_by_location", "segsum", "trace_html",
           "trace_text", "viz_main"]
