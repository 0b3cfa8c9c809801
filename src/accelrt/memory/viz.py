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
import html
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from ._files import read_input, short_repr, terminal_safe
from ._replay import load_pickle
from ._snapshot import check_snapshot

__all__ = ["format_bytes", "load_snapshot", "segsum", "trace_html", "trace_text", "viz_main"]

PAGE_SIZE = 20 << 20          # one character of segsum's bars
_MAX_BAR = 4096               # characters of one segsum bar at most (80 GiB at 20 MiB each)
_MAX_POINTS = 4000            # timeline points embedded in the HTML (peaks preserved)
_MAX_BANDS = 1000             # largest allocations drawn as their own band in the timeline
_MAX_BAND_POINTS = 200_000    # numbers in all band edges together (bounds the page size)


def format_bytes(num: float) -> str:
    """``3.0MiB``-style size, as the PyTorch visualizer prints it.

    Example::

        >>> from accelrt.memory.viz import format_bytes
        >>> format_bytes(512), format_bytes(3 << 20)
        ('512.0B', '3.0MiB')
    """
    for unit in ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi"):
        if abs(num) < 1024.0:
            return f"{num:3.1f}{unit}B"
        num /= 1024.0
    return f"{num:.1f}YiB"


def load_snapshot(path: str) -> dict[str, Any]:
    """Read and check a snapshot pickle (optionally gzipped).

    Raises:
        OSError: the file cannot be read.
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
    return check_snapshot(load_pickle(read_input(path), path), path)


def _report_free(external: int, internal: int) -> str:
    total = external + internal
    suffix = f" ({internal / total * 100:.1f}% internal)" if total else ""
    return f"{format_bytes(total)}{suffix}"


def _block_requested(b: dict[str, Any]) -> int:
    return int(b.get("requested_size", b["size"]))


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
            out.append(terminal_safe(f"# {action} {text}".rstrip(), one_line=True))
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

def _where(frames: Any) -> str:
    """``file:line:function`` of the innermost frame, or ``""``."""
    top = frames[0] if isinstance(frames, list) and frames and isinstance(frames[0], dict) else {}
    return f"{top.get('filename', '')}:{top.get('line', '')}:{top.get('name', '')}" if top else ""


def _timeline(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Active and reserved bytes after each event, downsampled keeping each bucket's peak,
    and the stacked bands of the largest allocations.

    The ``_MAX_BANDS`` largest allocations seen in the trace are stacked bottom-up in
    allocation order (a band drops when one below it is freed, as in PyTorch's active memory
    timeline); every other allocation is summed into one band on top (``kept`` is the height
    of the stack of large bands after each point). A band is ``[first entry, last entry,
    size, where, [entry, bottom, entry, bottom, ...]]``, the bottom edge as a step function.
    """
    completes = any(e["action"] == "free_completed" for e in entries)
    free_action = "free_completed" if completes else "free_requested"
    # Pass 1: the lifetime of every allocation seen (addr reuse gives a new lifetime).
    allocs: list[list[Any]] = []            # [start, end, size, where]
    live_ids: dict[int, int] = {}
    for i, e in enumerate(entries):
        if e["action"] == "alloc":
            live_ids[e["addr"]] = len(allocs)
            allocs.append([i, len(entries) - 1, e["size"], _where(e.get("frames"))])
        elif e["action"] == free_action and e["addr"] in live_ids:
            allocs[live_ids.pop(e["addr"])][1] = i
    by_size = sorted(range(len(allocs)), key=lambda k: -allocs[k][2])
    n_bands = _MAX_BANDS
    while True:
        kept_ids = set(by_size[:n_bands])
        out = _replay_bands(entries, free_action, allocs, kept_ids)
        if n_bands <= 1 or sum(len(b[4]) for b in out["bands"]) <= _MAX_BAND_POINTS:
            return out
        n_bands //= 2                       # long-lived bands stepping often: draw fewer


def _replay_bands(entries: list[dict[str, Any]], free_action: str, allocs: list[list[Any]],
                  kept_ids: set[int]) -> dict[str, Any]:
    """Pass 2 of :func:`_timeline`: the totals and each large band's bottom edge."""
    active = reserved = kept_sum = 0
    xs: list[int] = []
    act: list[int] = []
    res: list[int] = []
    kept: list[int] = []
    stack: list[int] = []                   # live large allocation ids, bottom first
    bottoms: dict[int, list[int]] = {}
    live_ids: dict[int, int] = {}
    n_allocs = 0
    for i, e in enumerate(entries):
        a = e["action"]
        if a == "alloc":
            active += e["size"]
            k = live_ids[e["addr"]] = n_allocs      # allocations numbered as in pass 1
            n_allocs += 1
            if k in kept_ids:
                bottoms[k] = [i, kept_sum]
                stack.append(k)
                kept_sum += e["size"]
        elif a == free_action:
            active -= e["size"]
            k = live_ids.pop(e["addr"], -1)
            if k in kept_ids:
                pos = stack.index(k)
                stack.pop(pos)
                kept_sum -= allocs[k][2]
                for above in stack[pos:]:
                    bottoms[above] += [i, bottoms[above][-1] - allocs[k][2]]
        elif a in ("segment_alloc", "segment_map"):
            reserved += e["size"]
        elif a in ("segment_free", "segment_unmap"):
            reserved -= e["size"]
        else:
            continue
        xs.append(i)
        act.append(active)
        res.append(reserved)
        kept.append(kept_sum)
    if len(xs) > _MAX_POINTS:
        step = -(-len(xs) // _MAX_POINTS)
        xs2, act2, res2, kept2 = [], [], [], []
        for k in range(0, len(xs), step):
            j = max(range(k, min(k + step, len(xs))), key=act.__getitem__)
            xs2.append(xs[j])
            act2.append(act[j])
            res2.append(max(res[k:k + step]))
            kept2.append(kept[j])
        xs, act, res, kept = xs2, act2, res2, kept2
    bands = [[allocs[k][0], allocs[k][1], allocs[k][2], allocs[k][3], bottoms[k]]
             for k in sorted(kept_ids)]
    return {"x": xs, "active": act, "reserved": res, "kept": kept, "bands": bands,
            "elided": len(allocs) - len(kept_ids)}


def _segment_view(seg: dict[str, Any]) -> dict[str, Any]:
    blocks = []
    for b in seg["blocks"]:
        blocks.append({"size": b["size"], "state": b["state"],
                       "requested": int(b.get("requested_size") or 0),
                       "where": _where(b.get("frames"))})
    return {"device": seg.get("device", 0), "address": seg["address"],
            "total": seg["total_size"], "stream": seg["stream"],
            "type": seg.get("segment_type", ""), "pool": list(seg.get("segment_pool_id", (0, 0))),
            "expandable": bool(seg.get("is_expandable", False)), "blocks": blocks}


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__</title>
<meta name="viewport" content="width=device-width,initial-scale=1">
<style>
body{font:13px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;max-width:1200px}
h1{font-size:1.3em} h2{font-size:1.1em;margin-top:1.5em}
svg.tl{background:#fafafa;border:1px solid #ddd;width:100%;max-width:960px;height:auto;display:block}
.seg{margin:2px 0;display:flex;align-items:center;gap:8px}
.bar{position:relative;flex:none;height:14px;border:1px solid #999;background:#eee;overflow:hidden}
.bar div{position:absolute;top:0;height:100%;box-sizing:border-box}
.bar div.sep{border-right:1px solid #fff}
.lbl{font:11px monospace;white-space:nowrap;flex:none;width:27em;overflow:hidden;text-overflow:ellipsis}
.k{display:inline-block;width:10px;height:10px;margin:0 4px 0 12px;vertical-align:-1px}
.k:first-child{margin-left:0}
pre{background:#f4f4f4;padding:8px;overflow:auto}
</style></head><body>
<h1>__TITLE__</h1>
<p id="totals"></p>
<h2>Active memory timeline</h2>
<p><span class="k" style="background:#3b75af;height:2px;vertical-align:3px"></span>active (allocated)
<span class="k" style="background:#999999;height:2px;vertical-align:3px"></span>reserved (segments)
<span class="k" style="background:linear-gradient(90deg,#4e79a7,#f28e2b,#e15759,#59a14f)"></span>the largest allocations, one band each, stacked in allocation order
<span class="k" style="background:#c4d5e7"></span>all smaller allocations (hover a band for details)</p>
<div id="timelines"></div>
<h2>Segments</h2>
<p><span class="k" style="background:#3b75af"></span>allocated
<span class="k" style="background:#ef8636"></span>freed, waiting on a stream
<span class="k" style="background:#cccccc"></span>free (cached)
&nbsp; (bar length grows with the square root of the segment size; hover a block for details)</p>
<div id="segments"></div>
<h2>Segment summary</h2>
<pre id="segsum"></pre>
<script id="data" type="application/json">__DATA__</script>
<script>
(function(){
"use strict";
var D=JSON.parse(document.getElementById("data").textContent);
var UNITS=["B","KiB","MiB","GiB","TiB","PiB"];
function fmt(n){var i=0;n=+n;
 while(Math.abs(n)>=1024&&i<UNITS.length-1){n/=1024;i++;}return n.toFixed(1)+" "+UNITS[i];}
function nice(v){var p=Math.pow(10,Math.floor(Math.log10(v))),m=v/p;
 return (m<=1?1:m<=2?2:m<=5?5:10)*p;}
function byteTicks(ymax){var u=1;while(ymax/u>=1024&&u<Math.pow(1024,5))u*=1024;
 var step=nice(ymax/u/4)*u,t=[0];while(t[t.length-1]<ymax)t.push(t.length*step);return t;}
function el(tag,attrs,parent){var e=document.createElementNS("http://www.w3.org/2000/svg",tag);
 for(var k in attrs)e.setAttribute(k,attrs[k]);if(parent)parent.appendChild(e);return e;}
document.getElementById("totals").textContent="segments: "+D.segments.length+
 ", reserved: "+fmt(D.reserved)+", allocated: "+fmt(D.allocated);
document.getElementById("segsum").textContent=D.segsum;
var host=document.getElementById("timelines");
if(!D.timelines.length){host.textContent="No trace recorded (call record_memory_history() before dump_snapshot()).";}
D.timelines.forEach(function(t){
 var W=960,H=280,L=72,R=16,T=12,B=40,n=t.x.length;
 var cap=document.createElement("p");cap.textContent="device "+t.device+": "+t.entries+
  " entries, "+(t.elided?t.bands.length+" largest of "+(t.bands.length+t.elided):"all "+t.bands.length)+
  " allocations drawn as bands, peak active "+fmt(Math.max.apply(null,t.active.concat([0])))+
  ", peak reserved "+fmt(Math.max.apply(null,t.reserved.concat([0])));host.appendChild(cap);
 var svg=el("svg",{"class":"tl",viewBox:"0 0 "+W+" "+H,width:W,height:H});host.appendChild(svg);
 var ymax=Math.max(1,Math.max.apply(null,t.active.concat(t.reserved)));
 var yt=byteTicks(ymax);ymax=Math.max(ymax,yt[yt.length-1]);
 var xmax=Math.max(1,t.entries-1);
 function X(v){return L+(W-L-R)*v/xmax;} function Y(v){return H-B-(H-B-T)*v/ymax;}
 yt.forEach(function(v){el("line",{x1:L,x2:W-R,y1:Y(v),y2:Y(v),stroke:"#e2e2e2"},svg);
  el("text",{x:L-6,y:Y(v)+4,"text-anchor":"end","font-size":11},svg).textContent=fmt(v);});
 var xs=nice(xmax/8);
 for(var xv=0;xv<=xmax;xv+=xs){el("line",{x1:X(xv),x2:X(xv),y1:H-B,y2:H-B+4,stroke:"#888"},svg);
  el("text",{x:X(xv),y:H-B+16,"text-anchor":"middle","font-size":11},svg).textContent=String(xv);}
 el("line",{x1:L,x2:W-R,y1:H-B,y2:H-B,stroke:"#888"},svg);
 el("line",{x1:L,x2:L,y1:T,y2:H-B,stroke:"#888"},svg);
 el("text",{x:(W+L)/2,y:H-6,"text-anchor":"middle","font-size":11},svg).textContent="trace entry (event number)";
 function steps(ys){var p=[];for(var i=0;i<n;i++){var x=X(t.x[i]).toFixed(1);
  if(i)p.push(x+","+Y(ys[i-1]).toFixed(1));p.push(x+","+Y(ys[i]).toFixed(1));}return p;}
 var PAL=["#4e79a7","#f28e2b","#e15759","#76b7b2","#59a14f","#edc948","#b07aa1","#ff9da7","#9c755f","#86bcb6"];
 t.bands.forEach(function(b,bi){var lo=[],hi=[],pts=b[4],end=X(b[1]).toFixed(1);
  for(var i=0;i<pts.length;i+=2){var x=X(pts[i]).toFixed(1),nx=i+2<pts.length?X(pts[i+2]).toFixed(1):end;
   lo.push(x+","+Y(pts[i+1]).toFixed(1),nx+","+Y(pts[i+1]).toFixed(1));
   hi.push(x+","+Y(pts[i+1]+b[2]).toFixed(1),nx+","+Y(pts[i+1]+b[2]).toFixed(1));}
  var g=el("polygon",{points:lo.concat(hi.reverse()).join(" "),fill:PAL[bi%PAL.length],stroke:"none"},svg);
  el("title",{},g).textContent=fmt(b[2])+" allocated at entry "+b[0]+", "+
   (b[1]>=t.entries-1?"still live":"freed at entry "+b[1])+(b[3]?"\\n"+b[3]:"");});
 if(n){var a=steps(t.active);
  var g=el("polygon",{points:a.concat(steps(t.kept).reverse()).join(" "),fill:"#3b75af","fill-opacity":0.3,stroke:"none"},svg);
  el("title",{},g).textContent=t.elided+" smaller allocations";
  el("polyline",{points:steps(t.reserved).join(" "),fill:"none",stroke:"#999999","stroke-width":1.5},svg);
  el("polyline",{points:a.join(" "),fill:"none",stroke:"#3b75af","stroke-width":1.2},svg);}
});
var colors={active_allocated:"#3b75af",active_pending_free:"#ef8636",inactive:"#cccccc"};
var names={active_allocated:"allocated",active_pending_free:"freed, waiting on a stream",inactive:"free"};
var segs=document.getElementById("segments");
var maxTotal=Math.max.apply(null,D.segments.map(function(s){return s.total;}).concat([1]));
function cell(bar,run,s,px){var d=document.createElement("div");
 d.style.left=(100*run.start/s.total)+"%";d.style.width=(100*run.size/s.total)+"%";
 d.style.background=colors[run.state]||"#c33";if(run.size/s.total*px>=4)d.className="sep";
 var b=run.first;d.title=run.count>1?run.count+" "+(names[run.state]||run.state)+" blocks, "+fmt(run.size):
  b.state+" "+fmt(b.size)+(b.state=="active_allocated"?" (requested "+fmt(b.requested)+")":"")+
  (b.where?"\\n"+b.where:"");bar.appendChild(d);}
D.segments.forEach(function(s){
 var row=document.createElement("div");row.className="seg";
 var lbl=document.createElement("span");lbl.className="lbl";
 lbl.textContent="dev"+s.device+" 0x"+s.address.toString(16)+" "+fmt(s.total)+" "+s.type+
  (s.expandable?" exp":"")+(s.stream?" stream "+s.stream:"")+(s.pool[0]||s.pool[1]?" pool "+s.pool:"");
 lbl.title=lbl.textContent+", "+s.blocks.length+" blocks";row.appendChild(lbl);
 var bar=document.createElement("div");bar.className="bar";
 var px=Math.max(4,Math.round(640*Math.sqrt(s.total/maxTotal)));bar.style.width=px+"px";
 var run=null,off=0;
 s.blocks.forEach(function(b){var narrow=b.size/s.total*px<3;
  if(run&&run.narrow&&narrow&&run.state==b.state){run.size+=b.size;run.count++;}
  else{if(run)cell(bar,run,s,px);run={start:off,size:b.size,state:b.state,count:1,first:b,narrow:narrow};}
  off+=b.size;});
 if(run)cell(bar,run,s,px);
 row.appendChild(bar);segs.appendChild(row);
});
})();
</script></body></html>
"""


def trace_html(snapshot: dict[str, Any], title: str = "accelrt memory snapshot") -> str:
    """A self-contained HTML page (inline data and JavaScript, nothing fetched) showing the
    active and reserved memory over each device's trace and the block map of every segment.

    Example::

        >>> from accelrt.memory.viz import trace_html
        >>> page = trace_html({"segments": [], "device_traces": [[]]})
        >>> page.startswith("<!DOCTYPE html>") and "http" not in page.replace("http://www.w3.org", "")
        True
    """
    check_snapshot(snapshot)
    segs = [_segment_view(s) for s in snapshot["segments"]]
    data = {
        "segments": segs,
        "reserved": sum(s["total"] for s in segs),
        "allocated": sum(b["size"] for s in segs for b in s["blocks"]
                         if b["state"] == "active_allocated"),
        "timelines": [dict(_timeline(t), device=d, entries=len(t))
                      for d, t in enumerate(snapshot["device_traces"]) if t],
        "segsum": segsum(snapshot),
    }
    blob = json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")
    return _PAGE.replace("__TITLE__", html.escape(title)).replace("__DATA__", blob)


def viz_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``accelrt memory viz SNAPSHOT [-o FILE.html] [--segsum | --trace]``.

    Returns 0 on success, 1 when the snapshot cannot be read (a one-line message on stderr),
    2 on bad arguments (including an output file that is the snapshot itself). Text that
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
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    def fail(msg: str) -> int:
        print(f"accelrt memory viz: error: {terminal_safe(msg, one_line=True)}", file=sys.stderr)
        return 1

    out = args.output if args.output is not None else _default_output(args.snapshot)
    if not (args.segsum or args.trace) and _same_file(out, args.snapshot):
        print(f"accelrt memory viz: error: {terminal_safe(out, one_line=True)} is the snapshot "
              "itself; choose another output file with -o", file=sys.stderr)
        return 2
    try:
        snap = load_snapshot(args.snapshot)
        if args.segsum:
            text = segsum(snap)
        elif args.trace:
            text = trace_text(snap) + "\n"
        else:
            text = trace_html(snap, title=f"accelrt memory: {os.path.basename(args.snapshot)}")
    except (OSError, ValueError, MemoryError, RecursionError, OverflowError) as exc:
        return fail(str(exc))
    if args.segsum or args.trace:
        sys.stdout.write(terminal_safe(text))
        return 0
    try:
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        return fail(f"cannot write {out}: {exc}")
    print(f"wrote {terminal_safe(out, one_line=True)}")
    return 0


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
