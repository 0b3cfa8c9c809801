"""Look at allocator snapshots: text summaries and a self-contained HTML page.

Works on the pickles written by :func:`accelrt.memory.dump_snapshot` and by PyTorch's
``torch.cuda.memory._dump_snapshot`` (read with a data-only unpickler: no code can run).
Every function here is pure: a snapshot dict in, a string out.

* :func:`segsum` -- one bar per segment, 20 MiB per character, with internal/external free
  memory (the layout of PyTorch's ``_memory_viz.py segsum``).
* :func:`trace_text` -- the recorded history as Python-like lines (``a = seg_0[0:3.0MiB]``,
  ``del a``, ``b = cudaMalloc(...)``), like ``_memory_viz.py trace``.
* :func:`trace_html` -- one HTML file, no network access: an active/reserved memory timeline
  over the trace and a map of every segment's blocks, drawn by inline JavaScript.

Command line: ``accelrt memory viz SNAPSHOT -o FILE.html`` (:func:`viz_main`).

Example::

    >>> from accelrt.memory.viz import segsum
    >>> snap = {"segments": [{"address": 0, "total_size": 20 << 20, "stream": 0, "blocks": [
    ...     {"size": 4 << 20, "requested_size": 3 << 20, "state": "active_allocated"},
    ...     {"size": 16 << 20, "requested_size": 0, "state": "inactive"}]}], "device_traces": []}
    >>> print(segsum(snap).splitlines()[1])
    [a] 20.0MiB allocated, 17.0MiB (5.9% internal) free
"""

from __future__ import annotations

import argparse
import bisect
import json
import numbers
import os
import sys
from collections.abc import Sequence
from typing import Any

from ._files import file_name, parse_args, read_input, short_repr, terminal_safe, write_atomic
from .._history import is_library_file
from ._replay import WrongFileKindError, is_pickle, is_segment_list, load_pickle
from . import _viz_page
from .._snapshot import check_snapshot, history_real_size
from ..._errors import type_shown

__all__ = ["format_bytes", "load_snapshot", "memory_by_location", "segsum", "trace_html",
           "trace_text", "viz_main"]

PAGE_SIZE = 20 << 20          # one character of segsum's bars
_MAX_BAR = 4096               # characters of one segsum bar at most (80 GiB at 20 MiB each)


def format_bytes(num: float) -> str:
    """``3.0MiB``-style size, as the PyTorch visualizer prints it.

    Example::

        >>> from accelrt.memory.viz import format_bytes
        >>> format_bytes(512), format_bytes(3 << 20)
        ('512.0B', '3.0MiB')

    Raises:
        TypeError: ``num`` is not a real number.
    """
    if type(num) not in (int, float) and (isinstance(num, bool)
                                          or not isinstance(num, numbers.Real)):
        raise TypeError(f"num must be a number of bytes, got {type_shown(num)}")
    for unit in ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi"):
        if abs(num) < 1024.0:
            return f"{num:3.1f}{unit}B"
        num /= 1024.0
    return f"{num:.1f}YiB"


def load_snapshot(path: str) -> dict[str, Any]:
    """Read and check a snapshot pickle (optionally gzipped). A pickled list of segments
    (``torch.cuda.memory_snapshot()``, ``accelrt.memory.memory_snapshot()``) is read as a
    snapshot of those segments without history, as PyTorch's ``_memory_viz.py`` reads it.

    Args:
        path: the file: a str, bytes or ``os.PathLike`` file name.

    Raises:
        TypeError: ``path`` is not a file name.
        OSError: the file cannot be read.
        WrongFileKindError: the file is an allocation trace in the shared JSON format (the
            message names ``accelrt replay`` and ``accelrt memory tune``, which take it).
        ValueError: not a snapshot pickle, a pickle that asks for code, or missing keys.

    Example::

        >>> import os, tempfile
        >>> from accelrt.memory._snapshot import dump_snapshot
        >>> from accelrt.memory.viz import load_snapshot
        >>> d = tempfile.TemporaryDirectory()
        >>> p = os.path.join(d.name, "s.pickle")
        >>> dump_snapshot(p, {"segments": [], "device_traces": [[]]})
        >>> load_snapshot(p)["segments"]
        []
        >>> d.cleanup()
    """
    path = file_name(path)
    data = read_input(path)
    obj = None if is_pickle(data) else _json_object(data)
    if obj is not None:
        shown = terminal_safe(path, one_line=True)
        if not isinstance(obj.get("trace"), list):
            raise ValueError(f"{shown}: a JSON object, not a snapshot pickle: 'accelrt memory "
                             "viz' draws the pickles that accelrt.memory.dump_snapshot and "
                             "torch.cuda.memory._dump_snapshot write")
        raise WrongFileKindError(
            f"{shown} is an allocation trace (JSON), not a snapshot pickle: replay it with "
            f"'accelrt replay {shown}' or rank allocator settings for it with 'accelrt memory "
            f"tune {shown}'; 'accelrt memory viz' draws snapshots "
            "(accelrt.memory.dump_snapshot, torch.cuda.memory._dump_snapshot)")
    obj = load_pickle(data, path)
    if is_segment_list(obj):        # a pickled torch.cuda.memory_snapshot(): segments only
        obj = {"segments": obj, "device_traces": []}
    return check_snapshot(obj, path)


def _json_object(data: bytes) -> dict[str, Any] | None:
    """``data`` as a JSON object (a trace in the shared format, or a snapshot someone wrote as
    JSON), or ``None`` if it is none."""
    if data.lstrip()[:1] != b"{":
        return None
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def _report_free(external: int, internal: int) -> str:
    total = external + internal
    suffix = f" ({internal / total * 100:.1f}% internal)" if total else ""
    return f"{format_bytes(total)}{suffix}"


def _block_requested(b: dict[str, Any]) -> int:
    """The bytes asked for in a block: its ``requested_size``, else (PyTorch 1.13/2.0
    snapshots) the ``real_size`` of its latest ``history`` entry, else its ``size``, as
    PyTorch's ``_memory_viz.py`` and visualizer read them."""
    if "requested_size" in b:
        return int(b["requested_size"])
    real = history_real_size(b)
    return int(b["size"] if real is None else real)


def _block_frames(b: dict[str, Any]) -> Any:
    """A block's stack: its ``frames``, else (PyTorch 1.13/2.0) its latest ``history``
    entry's."""
    if "frames" in b:
        return b["frames"]
    history = b.get("history")
    return history[0].get("frames") if history else None


def _segment_bar(seg: dict[str, Any]) -> tuple[str, int, int, int]:
    """(bar, allocated, internal free, external free) of one segment.

    One character per 20 MiB page, but never more than :data:`_MAX_BAR` characters: a larger
    segment's characters each stand for an equal share of it. The work is proportional to the
    number of blocks plus characters, never to the size a file claims; blocks that reach past
    the segment's end are cut off.
    """
    total = seg["total_size"]
    pages = max(1, min(_MAX_BAR, -(-total // PAGE_SIZE)))
    page = max(PAGE_SIZE, -(-total // pages))      # bytes per character
    chars = [" "] * pages
    fill = [0.0] * pages
    allocated = internal = external = 0
    offset = 0
    n = 0
    for b in seg["blocks"]:
        size = b["size"]
        if b["state"] == "active_allocated":
            used = _block_requested(b)
            allocated += used
            internal += size - used
            letter = chr(ord("a") + n % 26)
            n += 1
            end = min(offset + used, total)
            if used and offset < end:
                for p in range(offset // page, min(pages, (end - 1) // page + 1)):
                    lo, hi = max(offset, p * page), min(end, (p + 1) * page)
                    fill[p] += (hi - lo) / page
                    chars[p] = letter if chars[p] == " " else \
                        "0123456789*"[min(10, int(fill[p] * 10))]
        else:
            external += size
        offset += size
    return "".join(chars), allocated, internal, external


def segsum(snapshot: dict[str, Any]) -> str:
    """How full each segment is, one bar per segment (PyTorch's ``segsum`` layout).

    Segments are listed smallest first; only those of at least 20 MiB get a bar, all count in
    the totals. A bar has one character per 20 MiB, at most 4096 (a larger segment's
    characters each stand for 1/4096 of it). Internal free memory is rounding inside allocated blocks, external free memory
    the unallocated blocks.

    Raises:
        ValueError: the snapshot lacks keys the summary needs.

    Example::

        >>> from accelrt.memory.viz import segsum
        >>> segsum({"segments": [], "device_traces": []}).splitlines()[1:3]
        ['segments: 0', 'total_reserved: 0.0B']
    """
    check_snapshot(snapshot)
    return _segsum(snapshot)


def _segsum(snapshot: dict[str, Any]) -> str:
    """:func:`segsum` of a checked snapshot."""
    segs = sorted(snapshot["segments"], key=lambda s: (
        s["total_size"], sum(b["size"] for b in s["blocks"] if b["state"] == "active_allocated")))
    out = [f"Summary of segments >= {format_bytes(PAGE_SIZE)} in size"]
    reserved = allocated = internal = external = 0
    for seg in segs:
        bar, a, i, e = _segment_bar(seg)
        reserved += seg["total_size"]
        allocated += a
        internal += i
        external += e
        if seg["total_size"] >= PAGE_SIZE:
            stream = f" stream_{seg['stream']}" if seg["stream"] else ""
            out.append(f"[{bar}] {format_bytes(seg['total_size'])} allocated, "
                       f"{_report_free(e, i)} free{stream}")
    out += [f"segments: {len(segs)}", f"total_reserved: {format_bytes(reserved)}",
            f"total_allocated: {format_bytes(allocated)}",
            f"total_free: {_report_free(external, internal)}", "",
            "Legend:",
            "    [a     ] - a segment in the allocator",
            f"     ^-- a page {format_bytes(PAGE_SIZE)} of memory in the segment",
            "    a-z: pages filled with a single block's content",
            "    ' ': page is completely free",
            "    *: page is completely full with multiple blocks",
            "    0-9: page is partially full with tensors of multiple blocks (9 == 90% full)",
            ("    (X% internal) - of the free memory, X% is free because allocation sizes "
             "were rounded up.")]
    return "\n".join(out) + "\n"


class _Names:
    """Short names a, b, ..., z, a1, ... handed out and recycled like variables."""

    def __init__(self) -> None:
        self._next = 0
        self._free: list[str] = []

    def take(self) -> str:
        if self._free:
            return self._free.pop()
        r, m = divmod(self._next, 26)
        self._next += 1
        return chr(ord("a") + m) + (str(r) if r else "")

    def give_back(self, name: str) -> None:
        self._free.append(name)


class _Ranges:
    """Named address ranges ``[base, base + size)`` found by address in O(log n)."""

    def __init__(self) -> None:
        self._bases: list[int] = []
        self._items: list[tuple[str, int]] = []     # (name, size), parallel to _bases

    def add(self, base: int, name: str, size: int) -> None:
        i = bisect.bisect_left(self._bases, base)
        if i < len(self._bases) and self._bases[i] == base:
            self._items[i] = (name, size)
        else:
            self._bases.insert(i, base)
            self._items.insert(i, (name, size))

    def pop(self, base: int) -> tuple[str, int] | None:
        i = bisect.bisect_left(self._bases, base)
        if i < len(self._bases) and self._bases[i] == base:
            del self._bases[i]
            return self._items.pop(i)
        return None

    def find(self, addr: int) -> str | None:
        """``name[offset`` of the range holding ``addr`` that starts closest below it."""
        i = bisect.bisect_right(self._bases, addr) - 1
        if i >= 0:
            name, size = self._items[i]
            if addr < self._bases[i] + size:
                return f"{name}[{addr - self._bases[i]}"
        return None


def _trace_device(snapshot: dict[str, Any], device: int, entries: list[dict[str, Any]]) -> list[str]:
    out = [f"{len(entries)} entries"]
    names = _Names()
    segs = _Ranges()                                # segments seen in the trace
    allocs: dict[int, str] = {}                     # live allocation address -> name
    known = _Ranges()                               # segments of the snapshot
    for i, s in enumerate(snapshot["segments"]):
        if s.get("device", device) == device:
            known.add(s["address"], f"seg_{i}", s["total_size"])
    live = 0

    def where(addr: int) -> str:
        return segs.find(addr) or known.find(addr) or f"MEM[{addr}"

    for e in entries:
        action = e["action"]
        if action == "alloc":
            name = names.take()
            allocs[e["addr"]] = name
            live += e["size"]
            out.append(f"{name} = {where(e['addr'])}:{format_bytes(e['size'])}]")
        elif action == "free_requested":
            out.append(f"del {allocs.get(e['addr'], e['addr'])} # {format_bytes(e['size'])}")
        elif action == "free_completed":
            freed = allocs.pop(e["addr"], None)
            live -= e["size"]
            out.append(f"# free completed for {freed or e['addr']} {format_bytes(e['size'])}")
            if freed is not None:
                names.give_back(freed)
        elif action in ("segment_alloc", "segment_map"):
            name = names.take()
            old = segs.pop(e["addr"])
            if old is not None:
                names.give_back(old[0])
            segs.add(e["addr"], name, e["size"])
            verb = "cudaMalloc" if action == "segment_alloc" else "map"
            out.append(f"{name} = {verb}({e['addr']}, {format_bytes(e['size'])})")
        elif action in ("segment_free", "segment_unmap"):
            name_size = segs.pop(e["addr"])
            verb = "cudaFree" if action == "segment_free" else "unmap"
            out.append(f"{verb}({name_size[0] if name_size else e['addr']}) "
                       f"# {format_bytes(e['size'])}")
            if name_size is not None:
                names.give_back(name_size[0])
        elif action == "oom":
            out.append(f"raise OutOfMemoryError() # {format_bytes(e['size'])} requested, "
                       f"{format_bytes(e['device_free'])} free on the device")
        elif action == "snapshot":
            out.append(f"# snapshot taken, {format_bytes(e.get('size', 0))} active")
        else:
            meta = e.get("user_metadata", "")
            text = meta if isinstance(meta, str) else short_repr(meta)
            of = allocs.get(e.get("addr", -1))     # torch 2.14's _annotate_tensor names one
            out.append(terminal_safe(f"# {action} {of + ': ' if of else ''}{text}".rstrip(),
                                     one_line=True))
    out.append(f"TOTAL MEM: {format_bytes(live)}")
    return out


def trace_text(snapshot: dict[str, Any]) -> str:
    """The recorded history of every device as Python-like lines.

    ``a = seg_0[0:3.0MiB]`` allocates 3 MiB at offset 0 of segment ``seg_0``; ``del a`` is the
    free request, ``# free completed for a`` the moment the memory became reusable;
    ``b = cudaMalloc(addr, 20.0MiB)`` / ``cudaFree(b)`` are device allocations.

    Example::

        >>> from accelrt.memory.viz import trace_text
        >>> snap = {"segments": [], "device_traces": [[
        ...     {"action": "segment_alloc", "addr": 0, "size": 2 << 20},
        ...     {"action": "alloc", "addr": 512, "size": 1000},
        ...     {"action": "free_requested", "addr": 512, "size": 1000},
        ...     {"action": "free_completed", "addr": 512, "size": 1000}]]}
        >>> print(trace_text(snap))
        Device 0 ----------------
        4 entries
        a = cudaMalloc(0, 2.0MiB)
        b = a[512:1000.0B]
        del b # 1000.0B
        # free completed for b 1000.0B
        TOTAL MEM: 0.0B
    """
    check_snapshot(snapshot)
    out: list[str] = []
    for device, entries in enumerate(snapshot["device_traces"]):
        if entries:
            out.append(f"Device {device} ----------------")
            out += _trace_device(snapshot, device, entries)
    return "\n".join(out)


# ---------------------------------------------------------------------- HTML

_NO_STACK = "(no stack recorded)"
_MAX_COMPARE_ROWS = 2000      # code locations listed in a comparison at most


def _is_user_frame(filename: str, roots: Sequence[str] | None = None) -> bool:
    """A frame of the user's own Python code (not a library, the interpreter, or C++), by the
    recording machine's library folders ``roots`` (a snapshot's ``library_roots``; see
    :func:`accelrt.memory._history.is_library_file` for snapshots without them)."""
    return not is_library_file(filename, roots)


class _Stacks:
    """Frames and stacks interned into tables (the page refers to them by index); the user's
    frames are told from the libraries' by the snapshot's ``library_roots``."""

    def __init__(self, snapshot: dict[str, Any]) -> None:
        self._roots: list[str] | None = snapshot.get("library_roots")
        self.frames: list[str] = []
        self.user: list[int] = []
        self.stacks: list[list[int]] = []
        self.loc: list[int] = []            # per stack: its code location (a frame index)
        self._frame_ids: dict[str, int] = {}
        self._stack_ids: dict[tuple[int, ...], int] = {}

    def _frame(self, f: dict[str, Any]) -> int:
        fn = str(f.get("filename", ""))
        text = f"{fn}:{f.get('line', '')}:{f.get('name', '')}"
        k = self._frame_ids.get(text)
        if k is None:
            k = self._frame_ids[text] = len(self.frames)
            self.frames.append(text)
            self.user.append(int(_is_user_frame(fn, self._roots)))
        return k

    def add(self, frames: Any) -> int:
        """The index of the stack of ``frames`` (innermost first), -1 for none."""
        if not isinstance(frames, list) or not frames:
            return -1
        ids = tuple(self._frame(f) for f in frames if isinstance(f, dict))
        if not ids:
            return -1
        k = self._stack_ids.get(ids)
        if k is None:
            k = self._stack_ids[ids] = len(self.stacks)
            self.stacks.append(list(ids))
            self.loc.append(next((i for i in ids if self.user[i]), ids[0]))
        return k

    def location(self, stack: int) -> str:
        return self.frames[self.loc[stack]] if stack >= 0 else _NO_STACK


def _block_addresses(seg: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """(address, block) of each block: its own ``address`` or the running offset."""
    out = []
    addr = seg["address"]
    for b in seg["blocks"]:
        a = b.get("address", addr)
        out.append((a if isinstance(a, int) else addr, b))
        addr = (a if isinstance(a, int) else addr) + b["size"]
    return out


def _device_view(device: int, entries: list[dict[str, Any]], segments: list[dict[str, Any]],
                 st: _Stacks) -> dict[str, Any]:
    """What the page needs of one device: every allocation's lifetime, the segment events,
    the OOMs and the final segments (from which the page rebuilds the state at any entry).

    An allocation is ``start`` (entry of its ``alloc``, -1 when made before the trace began),
    ``freq`` (entry of its free request, -1 if none), ``end`` (entry where its memory became
    free again, -1 if still live at the end), ``size`` (as the trace records it: the size
    asked for), ``addr``, ``stack`` (an index into the stack table, -1 for none) and ``bsize``
    (the size of its block in the final snapshot where it is still there, else ``size``). Snapshot blocks still allocated at the end with no
    ``alloc`` in the trace are added with ``start = -1``, so that the state at the last
    entry is the snapshot's.
    """
    completes = any(e["action"] == "free_completed" for e in entries)
    cols: dict[str, list[int]] = {k: [] for k in ("start", "freq", "end", "size", "addr",
                                                  "stack")}
    live: dict[int, int] = {}

    def new(start: int, freq: int, end: int, size: int, addr: int, stack: int) -> int:
        for k, v in zip(cols, (start, freq, end, size, addr, stack)):
            cols[k].append(v)
        return len(cols["start"]) - 1

    segev: list[list[int]] = []
    ooms: list[list[int]] = []
    for i, e in enumerate(entries):
        a = e["action"]
        if a == "alloc":
            old = live.pop(e["addr"], None)
            if old is not None:                 # a lost free: end the old lifetime here
                cols["end"][old] = i
            live[e["addr"]] = new(i, -1, -1, e["size"], e["addr"], st.add(e.get("frames")))
        elif a == "free_requested":
            k = live.get(e["addr"])
            if k is None:                       # allocated before the trace began
                k = new(-1, i, -1, e["size"], e["addr"], st.add(e.get("frames")))
                if completes:
                    live[e["addr"]] = k
            cols["freq"][k] = i
            if not completes:
                cols["end"][k] = i
                live.pop(e["addr"], None)
        elif a == "free_completed":
            k = live.pop(e["addr"], None)
            if k is None:
                k = new(-1, i, i, e["size"], e["addr"], st.add(e.get("frames")))
            cols["end"][k] = i
            if cols["freq"][k] < 0:
                cols["freq"][k] = i
        elif a in ("segment_alloc", "segment_map", "segment_free", "segment_unmap"):
            kind = {"segment_alloc": 1, "segment_free": -1, "segment_map": 2,
                    "segment_unmap": -2}[a]
            segev.append([i, kind, e["addr"], e["size"]])
        elif a == "oom":
            ooms.append([i, e["size"], int(e.get("device_free", 0)), st.add(e.get("frames"))])
    last = len(entries) - 1
    bsize: dict[int, int] = {}
    segs = []
    for s in segments:
        blocks = []
        for addr, b in _block_addresses(s):
            stack = st.add(_block_frames(b))
            state = b["state"]
            if state in ("active_allocated", "active_pending_free"):
                if addr in live:                # traces record the size asked for
                    bsize[live[addr]] = b["size"]
                else:
                    pending = state == "active_pending_free"
                    new(-1, last if pending else -1, -1, b["size"], addr, stack)
            blocks.append({"address": addr, "size": b["size"], "state": state,
                           "requested": int(b.get("requested_size") or 0)
                           if state == "inactive" else _block_requested(b),
                           "stack": stack})
        segs.append({"address": s["address"], "total": s["total_size"], "stream": s["stream"],
                     "type": s.get("segment_type", ""),
                     "pool": list(s.get("segment_pool_id", (0, 0))),
                     "expandable": bool(s.get("is_expandable", False)), "blocks": blocks})
    cols["bsize"] = [bsize.get(k, size) for k, size in enumerate(cols["size"])]
    return {"device": device, "entries": len(entries), "allocs": cols, "segev": segev,
            "ooms": ooms, "segments": segs}


def _devices(snapshot: dict[str, Any]) -> list[int]:
    """Devices with a trace or a segment, in order."""
    found = {d for d, t in enumerate(snapshot["device_traces"]) if t}
    found.update(int(s.get("device", 0)) for s in snapshot["segments"])
    return sorted(found) or [0]


def memory_by_location(snapshot: dict[str, Any]) -> dict[int, dict[str, tuple[int, int]]]:
    """Bytes and blocks allocated at the snapshot's moment, per device and code location.

    The code location of a block is the innermost frame of the user's own code in its
    recorded stack (else its innermost frame, else ``(no stack recorded)``).

    Example::

        >>> from accelrt.memory.viz import memory_by_location
        >>> f = [{"filename": "train.py", "line": 3, "name": "step"}]
        >>> snap = {"segments": [{"address": 0, "total_size": 4096, "stream": 0, "blocks": [
        ...     {"size": 1024, "requested_size": 1000, "state": "active_allocated", "frames": f},
        ...     {"size": 3072, "requested_size": 0, "state": "inactive"}]}], "device_traces": []}
        >>> memory_by_location(snap)
        {0: {'train.py:3:step': (1024, 1)}}
    """
    check_snapshot(snapshot)
    return _by_location(snapshot)


def _by_location(snapshot: dict[str, Any]) -> dict[int, dict[str, tuple[int, int]]]:
    """:func:`memory_by_location` of a checked snapshot."""
    st = _Stacks(snapshot)
    out: dict[int, dict[str, tuple[int, int]]] = {}
    for s in snapshot["segments"]:
        per = out.setdefault(int(s.get("device", 0)), {})
        for b in s["blocks"]:
            if b["state"] == "active_allocated":
                loc = st.location(st.add(_block_frames(b)))
                nbytes, count = per.get(loc, (0, 0))
                per[loc] = (nbytes + b["size"], count + 1)
    return out


def _comparison(a: dict[str, Any], b: dict[str, Any], names: tuple[str, str]) -> dict[str, Any]:
    """Rows ``[location, bytes in a, blocks in a, bytes in b, blocks in b]`` per device,
    largest growth from ``a`` to ``b`` first."""
    la, lb = _by_location(a), _by_location(b)
    devices: dict[str, list[list[Any]]] = {}
    for d in sorted(set(la) | set(lb)):
        pa, pb = la.get(d, {}), lb.get(d, {})
        rows = [(loc, *pa.get(loc, (0, 0)), *pb.get(loc, (0, 0))) for loc in set(pa) | set(pb)]
        rows.sort(key=lambda r: (r[1] - r[3], r[0]))
        devices[str(d)] = [list(r) for r in rows[:_MAX_COMPARE_ROWS]]
    return {"a": names[0], "b": names[1], "devices": devices}


def trace_html(snapshot: dict[str, Any], title: str = "accelrt memory snapshot",
               compare: dict[str, Any] | None = None,
               compare_names: tuple[str, str] = ("this snapshot", "the other snapshot")) -> str:
    """A self-contained, interactive HTML page (inline data and JavaScript, nothing fetched).

    Per device: the active and reserved memory over the trace with the largest allocations
    as stacked bands (zoom, pan, a detail control), the full stack of an allocation, the
    allocator's segments and blocks at any entry (one click to the peak and to each OOM),
    memory by code location, and with ``compare`` what grew by code location from
    ``snapshot`` to ``compare``. Strings from the files are shown as text, never as markup.

    Raises:
        TypeError: ``title`` is not a str, or ``compare_names`` not a pair of str.
        ValueError: a snapshot lacks keys the page needs.

    Example::

        >>> from accelrt.memory.viz import trace_html
        >>> page = trace_html({"segments": [], "device_traces": [[]]})
        >>> page.startswith("<!DOCTYPE html>") and "http" not in page.replace("http://www.w3.org", "")
        True
    """
    if not isinstance(title, str):
        raise TypeError(f"title must be a str, got {type_shown(title)}")
    if (not isinstance(compare_names, (tuple, list)) or len(compare_names) != 2
            or not all(isinstance(n, str) for n in compare_names)):
        raise TypeError(f"compare_names must be a pair of str, got {short_repr(compare_names)}")
    check_snapshot(snapshot)
    if compare is not None:
        check_snapshot(compare, "compared snapshot")
    st = _Stacks(snapshot)
    by_dev: dict[int, list[dict[str, Any]]] = {}
    for s in snapshot["segments"]:
        by_dev.setdefault(int(s.get("device", 0)), []).append(s)
    traces = snapshot["device_traces"]
    devices = [_device_view(d, traces[d] if d < len(traces) else [], by_dev.get(d, []), st)
               for d in _devices(snapshot)]
    data = {
        "devices": devices, "frames": st.frames, "user": st.user, "stacks": st.stacks,
        "loc": st.loc, "segsum": _segsum(snapshot),
        "compare": None if compare is None else _comparison(snapshot, compare, compare_names),
    }
    return _viz_page.render(title, data)


def viz_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``accelrt memory viz SNAPSHOT [-o FILE.html] [--compare OTHER]
    [--segsum | --trace]``.

    Returns 0 on success, 1 when the snapshot cannot be read (a one-line message on stderr),
    2 on bad arguments (including an output file that is the snapshot itself, and an
    allocation trace, which ``accelrt replay`` and ``accelrt memory tune`` take). Text that
    came from the file is printed with control characters escaped.

    Example::

        >>> import os, tempfile
        >>> from accelrt.memory._snapshot import dump_snapshot
        >>> from accelrt.memory.viz import viz_main
        >>> tmp = tempfile.TemporaryDirectory()
        >>> d = tmp.name
        >>> dump_snapshot(os.path.join(d, "s.pickle"), {"segments": [], "device_traces": [[]]})
        >>> viz_main([os.path.join(d, "s.pickle"), "-o", os.path.join(d, "s.html")])
        ... # doctest: +ELLIPSIS
        wrote ...s.html
        0
        >>> tmp.cleanup()
    """
    parser = argparse.ArgumentParser(
        prog="accelrt memory viz",
        description="Render an allocator snapshot (dump_snapshot or "
                    "torch.cuda.memory._dump_snapshot pickle) as a self-contained HTML page, "
                    "or print it as text.")
    parser.add_argument("snapshot", metavar="SNAPSHOT", help="snapshot pickle file")
    parser.add_argument("-o", "--output", metavar="FILE.html", default=None,
                        help="HTML file to write (default: SNAPSHOT with .html for its "
                             "extension; never the snapshot itself)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--segsum", action="store_true",
                       help="print the segment summary instead of writing HTML")
    group.add_argument("--trace", action="store_true",
                       help="print the recorded history instead of writing HTML")
    parser.add_argument("--compare", metavar="OTHER", default=None,
                        help="another snapshot pickle: the page adds a table of what grew, "
                             "by code location, from SNAPSHOT to OTHER")
    args = parse_args(parser, argv)
    if isinstance(args, int):
        return args
    def fail(msg: str) -> int:
        print(f"accelrt memory viz: error: {terminal_safe(msg, one_line=True)}", file=sys.stderr)
        return 1

    out = args.output if args.output is not None else _default_output(args.snapshot)
    inputs = {"the snapshot": args.snapshot, "the --compare snapshot": args.compare}
    for what, path in inputs.items():
        if not (args.segsum or args.trace) and path is not None and _same_file(out, path):
            print(f"accelrt memory viz: error: {terminal_safe(out, one_line=True)} is {what} "
                  "itself; choose another output file with -o", file=sys.stderr)
            return 2
    text, page = "", b""
    try:
        snap = load_snapshot(args.snapshot)
        if args.segsum:
            text = segsum(snap)
        elif args.trace:
            text = trace_text(snap) + "\n"
        else:
            other = None if args.compare is None else load_snapshot(args.compare)
            names = (_shown_name(args.snapshot),
                     _shown_name(args.compare) if args.compare is not None else "")
            page = trace_html(snap, title=f"accelrt memory: {names[0]}", compare=other,
                              compare_names=names).encode("utf-8")
    except WrongFileKindError as exc:     # a usage error: the other command takes the file
        print(f"accelrt memory viz: error: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError, MemoryError, RecursionError, OverflowError) as exc:
        return fail(str(exc))
    if args.segsum or args.trace:
        sys.stdout.write(terminal_safe(text))
        return 0
    try:
        write_atomic(out, page)
    except OSError as exc:
        return fail(f"cannot write {out}: {exc}")
    print(f"wrote {terminal_safe(out, one_line=True)}")
    return 0


def _shown_name(path: str) -> str:
    """A file's name as the page shows it (a byte that is not UTF-8 as ``\\xff``)."""
    return terminal_safe(os.path.basename(path), one_line=True)


def _default_output(snapshot: str) -> str:
    """``SNAPSHOT`` with ``.html`` for its extension, or ``.viz.html`` added when that would
    be the snapshot itself (``snap.html``)."""
    out = os.path.splitext(snapshot)[0] + ".html"
    return snapshot + ".viz.html" if _same_file(out, snapshot) else out


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:         # one of them does not exist (yet)
        return os.path.abspath(a) == os.path.abspath(b)
