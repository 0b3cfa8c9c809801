"""accelrt.memory.viz: segsum, trace_text, the self-contained HTML page and the CLI entry."""

from __future__ import annotations

import gzip
import json
import pickle
import re
import shutil
import subprocess
import uuid

import pytest

from accelrt.memory._snapshot import dump_snapshot
from accelrt.memory.viz import (
    format_bytes,
    load_snapshot,
    segsum,
    trace_html,
    trace_text,
    viz_main,
)

MiB = 1 << 20
CALLS: list[str] = []


def _evil(arg: str) -> None:
    CALLS.append(arg)


class Evil:
    def __reduce__(self):
        return (_evil, ("ran",))


def torch_like_snapshot() -> dict:
    """The shape of a PyTorch 2.x ``_snapshot()`` (with keys accelrt does not use)."""
    frames = [{"filename": "train.py", "line": 12, "name": "forward"}]
    return {
        "segments": [
            {"device": 0, "address": 1 << 32, "total_size": 40 * MiB, "allocated_size": 24 * MiB,
             "active_size": 24 * MiB, "requested_size": 23 * MiB, "stream": 0,
             "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
             "frames": frames, "blocks": [
                 {"address": 1 << 32, "size": 24 * MiB, "requested_size": 23 * MiB,
                  "state": "active_allocated", "frames": frames},
                 {"address": (1 << 32) + 24 * MiB, "size": 16 * MiB, "requested_size": 0,
                  "state": "inactive", "frames": []}]},
            {"device": 0, "address": 1 << 33, "total_size": 2 * MiB, "allocated_size": 512,
             "active_size": 1024, "requested_size": 500, "stream": 5, "segment_type": "small",
             "segment_pool_id": (0, 0), "is_expandable": False, "frames": [], "blocks": [
                 {"address": 1 << 33, "size": 512, "requested_size": 500,
                  "state": "active_allocated", "frames": []},
                 {"address": (1 << 33) + 512, "size": 512, "requested_size": 512,
                  "state": "active_pending_free", "frames": []},
                 {"address": (1 << 33) + 1024, "size": 2 * MiB - 1024, "requested_size": 0,
                  "state": "inactive", "frames": []}]},
        ],
        "device_traces": [[
            {"action": "segment_alloc", "addr": 1 << 32, "size": 40 * MiB, "stream": 0,
             "time_us": 1, "compile_context": "N/A", "user_metadata": ""},
            {"action": "alloc", "addr": 1 << 32, "size": 23 * MiB, "stream": 0, "time_us": 2,
             "frames": frames},
            {"action": "alloc", "addr": (1 << 32) + 24 * MiB, "size": MiB, "stream": 0,
             "time_us": 3},
            {"action": "free_requested", "addr": (1 << 32) + 24 * MiB, "size": MiB,
             "stream": 0, "time_us": 4},
            {"action": "free_completed", "addr": (1 << 32) + 24 * MiB, "size": MiB,
             "stream": 0, "time_us": 5},
            {"action": "alloc", "addr": (1 << 32) + 24 * MiB, "size": 2 * MiB, "stream": 0,
             "time_us": 6},
            {"action": "oom", "device_free": 3 * MiB, "size": 60 * MiB, "stream": 0,
             "time_us": 7},
        ], []],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "expandable_segments": False},
        "external_annotations": [],
    }


def test_format_bytes() -> None:
    assert format_bytes(0) == "0.0B"
    assert format_bytes(1023) == "1023.0B"
    assert format_bytes(1536) == "1.5KiB"
    assert format_bytes(20 * MiB) == "20.0MiB"
    assert format_bytes(3 << 30) == "3.0GiB"


def test_segsum_layout_and_totals() -> None:
    lines = segsum(torch_like_snapshot()).splitlines()
    assert lines[0] == "Summary of segments >= 20.0MiB in size"
    # the 2 MiB segment has no bar; the 40 MiB one has two 20 MiB pages: "a" then the 3 MiB
    # remainder of a's 23 MiB requested in page 2 (15% full -> digit? no: first range -> "a")
    assert lines[1] == "[aa] 40.0MiB allocated, 17.0MiB (5.9% internal) free"
    assert lines[2] == "segments: 2"
    assert lines[3] == "total_reserved: 42.0MiB"
    assert lines[4] == f"total_allocated: {format_bytes(23 * MiB + 500)}"
    total_free = 42 * MiB - 23 * MiB - 500
    assert lines[5].startswith(f"total_free: {format_bytes(total_free)} (")
    assert "Legend:" in lines


def test_segsum_marks_streams_and_shared_pages() -> None:
    seg = {"address": 0, "total_size": 20 * MiB, "stream": 9, "blocks": [
        {"size": 5 * MiB, "requested_size": 5 * MiB, "state": "active_allocated"},
        {"size": 5 * MiB, "requested_size": 5 * MiB, "state": "active_allocated"},
        {"size": 10 * MiB, "requested_size": 0, "state": "inactive"}]}
    line = segsum({"segments": [seg], "device_traces": []}).splitlines()[1]
    assert line == "[5] 20.0MiB allocated, 10.0MiB (0.0% internal) free stream_9"


def test_trace_text_names_and_actions() -> None:
    out = trace_text(torch_like_snapshot()).splitlines()
    assert out[0] == "Device 0 ----------------"
    assert out[1] == "7 entries"
    assert out[2] == f"a = cudaMalloc({1 << 32}, 40.0MiB)"
    assert out[3] == "b = a[0:23.0MiB]"
    assert out[4] == f"c = a[{24 * MiB}:1.0MiB]"
    assert out[5] == "del c # 1.0MiB"
    assert out[6] == "# free completed for c 1.0MiB"
    assert out[7] == f"c = a[{24 * MiB}:2.0MiB]"          # the freed name is reused
    assert out[8] == "raise OutOfMemoryError() # 60.0MiB requested, 3.0MiB free on the device"
    assert out[9] == "TOTAL MEM: 25.0MiB"
    assert "Device 1" not in trace_text(torch_like_snapshot())


def test_trace_text_unknown_addresses_use_snapshot_segments() -> None:
    snap = torch_like_snapshot()
    snap["device_traces"] = [[{"action": "alloc", "addr": (1 << 33) + 512, "size": 512},
                              {"action": "alloc", "addr": 77, "size": 512},
                              {"action": "free_requested", "addr": 99, "size": 512},
                              {"action": "snapshot", "addr": 0, "size": 1024}]]
    out = trace_text(snap).splitlines()
    assert out[2] == "a = seg_1[512:512.0B]"
    assert out[3] == "b = MEM[77:512.0B]"
    assert out[4] == "del 99 # 512.0B"
    assert out[5] == "# snapshot taken, 1.0KiB active"


def _embedded(page: str) -> dict:
    m = re.search(r'<script id="data" type="application/json">(.*?)</script>', page, re.DOTALL)
    assert m, "data block missing"
    return json.loads(m.group(1))


def test_html_is_self_contained_and_carries_the_data() -> None:
    page = trace_html(torch_like_snapshot())
    assert page.startswith("<!DOCTYPE html>")
    assert "<script src" not in page and "<link" not in page and "import " not in page
    assert re.findall(r"https?://[^\s\"']+", page) == ["http://www.w3.org/2000/svg"]
    data = _embedded(page)
    assert [s["total"] for s in data["segments"]] == [40 * MiB, 2 * MiB]
    assert data["reserved"] == 42 * MiB
    assert data["segments"][1]["blocks"][1]["state"] == "active_pending_free"
    t = data["timelines"][0]
    assert t["device"] == 0 and t["entries"] == 7
    assert max(t["active"]) == 25 * MiB and max(t["reserved"]) == 40 * MiB
    assert data["segments"][0]["blocks"][0]["where"] == "train.py:12:forward"


def test_html_escapes_hostile_strings() -> None:
    snap = torch_like_snapshot()
    snap["segments"][0]["blocks"][0]["frames"] = [
        {"filename": "</script><script>alert(1)</script>", "line": 1, "name": "x"}]
    page = trace_html(snap, title="<b>t</b>")
    assert "<script>alert(1)" not in page
    assert "<b>t</b>" not in page and "&lt;b&gt;t&lt;/b&gt;" in page
    assert _embedded(page)["segments"][0]["blocks"][0]["where"].startswith("</script>")


def test_timeline_downsampling_keeps_the_peak() -> None:
    entries = []
    for i in range(20000):
        entries.append({"action": "alloc", "addr": i, "size": 512 + (i == 12345) * 10 * MiB})
        entries.append({"action": "free_requested", "addr": i,
                        "size": 512 + (i == 12345) * 10 * MiB})
    page = trace_html({"segments": [], "device_traces": [entries]})
    t = _embedded(page)["timelines"][0]
    assert len(t["x"]) <= 4000
    assert max(t["active"]) == 10 * MiB + 512


def test_timeline_stacks_the_largest_allocations() -> None:
    """Each large allocation is a band stacked in allocation order; when one is freed the
    bands above it drop by its size (PyTorch's active memory timeline)."""
    t = _embedded(trace_html(torch_like_snapshot()))["timelines"][0]
    assert t["bands"] == [[1, 6, 23 * MiB, "train.py:12:forward", [1, 0]],
                          [2, 4, MiB, "", [2, 23 * MiB]],
                          [5, 6, 2 * MiB, "", [5, 23 * MiB]]]
    assert t["kept"] == t["active"] and t["elided"] == 0
    entries = [{"action": "alloc", "addr": 1, "size": 10}, {"action": "alloc", "addr": 2, "size": 5},
               {"action": "alloc", "addr": 3, "size": 7}, {"action": "free_requested", "addr": 1,
                                                           "size": 10}]
    t = _embedded(trace_html({"segments": [], "device_traces": [entries]}))["timelines"][0]
    assert [b[4] for b in t["bands"]] == [[0, 0], [1, 10, 3, 0], [2, 15, 3, 5]]
    assert [b[1] for b in t["bands"]] == [3, 3, 3]


def test_timeline_sums_small_allocations_into_one_band(monkeypatch) -> None:
    """Beyond _MAX_BANDS (or the point budget), the smaller allocations form one band on top
    of the large ones: ``kept`` is the height of the large bands, ``active`` the total."""
    from accelrt.memory import viz

    entries = [{"action": "alloc", "addr": a, "size": s} for a, s in ((1, 4), (2, 9), (3, 1))]
    monkeypatch.setattr(viz, "_MAX_BANDS", 1)
    t = viz._timeline(entries)
    assert [b[2] for b in t["bands"]] == [9] and t["elided"] == 2
    assert t["kept"] == [0, 9, 9] and t["active"] == [4, 13, 14]
    monkeypatch.setattr(viz, "_MAX_BANDS", 3)
    monkeypatch.setattr(viz, "_MAX_BAND_POINTS", 4)     # 3 bands need 6 numbers: halve to 1
    t = viz._timeline(entries)
    assert len(t["bands"]) == 1 and t["elided"] == 2


def test_load_snapshot_reads_torch_pickles_and_gzip(tmp_path) -> None:
    p = tmp_path / "torch.pickle"
    p.write_bytes(pickle.dumps(torch_like_snapshot(), protocol=2))
    assert load_snapshot(str(p))["segments"][0]["segment_pool_id"] == (0, 0)
    g = tmp_path / "snap.pickle.gz"
    g.write_bytes(gzip.compress(pickle.dumps(torch_like_snapshot())))
    assert len(load_snapshot(str(g))["device_traces"][0]) == 7


def test_load_snapshot_refuses_code(tmp_path) -> None:
    p = tmp_path / "evil.pickle"
    p.write_bytes(pickle.dumps({"segments": [], "device_traces": [], "x": Evil()}))
    with pytest.raises(ValueError, match="refusing to load"):
        load_snapshot(str(p))
    assert CALLS == []


@pytest.mark.parametrize("payload, match", [
    (b"not a pickle at all", "not a valid pickle"),
    (pickle.dumps([1, 2, 3]), "expected a dict"),
    (pickle.dumps({"segments": []}), "missing key 'device_traces'"),
    (pickle.dumps({"segments": [{"address": 0, "total_size": 1, "stream": 0,
                                 "blocks": [{"size": "big", "state": "inactive"}]}],
                   "device_traces": []}), r"\['size'\]: expected int"),
])
def test_load_snapshot_rejects_malformed(tmp_path, payload: bytes, match: str) -> None:
    p = tmp_path / "bad.pickle"
    p.write_bytes(payload)
    with pytest.raises(ValueError, match=match):
        load_snapshot(str(p))


def test_viz_main_writes_html(tmp_path, capsys) -> None:
    src = tmp_path / "snap.pickle"
    dump_snapshot(src, torch_like_snapshot())
    out = tmp_path / "page.html"
    assert viz_main([str(src), "-o", str(out)]) == 0
    assert _embedded(out.read_text())["reserved"] == 42 * MiB
    assert viz_main([str(src)]) == 0                      # default: next to the snapshot
    assert (tmp_path / "snap.html").exists()
    assert viz_main([str(src), "--segsum"]) == 0
    assert "segments: 2" in capsys.readouterr().out
    assert viz_main([str(src), "--trace"]) == 0
    assert "b = a[0:23.0MiB]" in capsys.readouterr().out


def _one_segment(**seg_extra) -> dict:
    block = {"size": 4096, "state": "active_allocated", "requested_size": 4000, "frames": []}
    seg = {"address": 0, "total_size": 4096, "stream": 0, "device": 0, "blocks": [block]}
    seg.update(seg_extra)
    return {"segments": [seg], "device_traces": [[{"action": "alloc", "addr": 0, "size": 4000,
                                                   "stream": 0, "frames": []}]]}


def _bad_block(**kw) -> dict:
    snap = _one_segment()
    snap["segments"][0]["blocks"][0].update(kw)
    return snap


def _bad_entry(**kw) -> dict:
    snap = _one_segment()
    snap["device_traces"][0][0].update(kw)
    return snap


@pytest.mark.parametrize("snap, match", [
    (_one_segment(segment_pool_id=5), r"\['segment_pool_id'\]: expected a pair of ints"),
    (_one_segment(device="cuda"), r"\['device'\]: expected int"),
    (_one_segment(frames={"a": 1}), r"\['frames'\]: expected list"),
    (_bad_block(frames=7), r"\['blocks'\]\[0\]\['frames'\]: expected list"),
    (_bad_block(frames=[3]), r"\['frames'\]\[0\]: expected a dict"),
    (_bad_block(state="inactive", requested_size="x"), r"\['requested_size'\]: expected int"),
    (_bad_entry(stream="s"), r"\['stream'\]: expected int"),
])
def test_viz_main_reports_malformed_optional_fields(tmp_path, capsys, snap, match) -> None:
    """Such files crashed the HTML writer with a bare TypeError/ValueError traceback."""
    p = tmp_path / "bad.pickle"
    p.write_bytes(pickle.dumps(snap))
    assert viz_main([str(p), "-o", str(tmp_path / "bad.html")]) == 1
    assert re.search(match, capsys.readouterr().err)


def test_viz_main_errors(tmp_path, capsys) -> None:
    assert viz_main([str(tmp_path / "missing.pickle")]) == 1
    assert "error" in capsys.readouterr().err
    evil = tmp_path / "evil.pickle"
    evil.write_bytes(pickle.dumps(Evil()))
    assert viz_main([str(evil)]) == 1
    assert "refusing to load" in capsys.readouterr().err
    assert CALLS == []
    assert viz_main([]) == 2
    assert viz_main(["a", "--segsum", "--trace"]) == 2


NODE_RUNNER = r"""
const fs = require("fs");
const html = fs.readFileSync(process.argv[2], "utf8");
const data = html.match(/<script id="data" type="application\/json">([\s\S]*?)<\/script>/)[1];
const code = html.match(/<script>\n([\s\S]*?)<\/script>/)[1];
function mk(tag) {
  return {tag, children: [], style: {}, attrs: {}, textContent: "",
          appendChild(c) { this.children.push(c); return c; },
          setAttribute(k, v) { this.attrs[k] = String(v); }};
}
const ids = {};
global.document = {
  getElementById(id) {
    if (id === "data") return {textContent: data};
    return ids[id] || (ids[id] = mk(id));
  },
  createElement: mk, createElementNS: (ns, tag) => mk(tag),
};
eval(code);
const lines = [], polys = [], labels = [];
(function walk(e) {
  if (e.tag === "polyline") lines.push(e.attrs.points.split(" ").length);
  if (e.tag === "polygon") polys.push(e.attrs.points.split(" ").length);
  if (e.tag === "text") labels.push(e.textContent);
  e.children.forEach(walk);
})(ids["timelines"]);
const rows = ids["segments"].children;
const bars = rows.map(r => r.children[1].children.length);
const cells = rows.map(r => r.children[1].children.map(
  c => ({left: parseFloat(c.style.left), width: parseFloat(c.style.width), title: c.title,
         sep: c.className === "sep"})));
console.log(JSON.stringify({lines, polys, labels, bars, cells,
                            totals: ids["totals"].textContent}));
"""


NO_NODE = pytest.mark.skipif(shutil.which("node") is None, reason="node.js is not installed")


def _run_page(tmp_path, snap: dict) -> dict:
    page = tmp_path / "p.html"
    page.write_text(trace_html(snap))
    runner = tmp_path / "run.js"
    runner.write_text(NODE_RUNNER)
    out = subprocess.run(["node", str(runner), str(page)], capture_output=True, text=True,
                         timeout=60, check=True)
    return json.loads(out.stdout)


@NO_NODE
def test_html_script_draws_in_a_dom_stub(tmp_path) -> None:
    """Run the page's inline JavaScript against a minimal DOM: it must draw each series as a
    step line (two points per memory event but the first), fill the area under the active
    line, and draw one bar per segment with one cell per block."""
    result = _run_page(tmp_path, torch_like_snapshot())
    assert result["lines"] == [9, 9]        # reserved and active, 5 memory events each
    assert result["polys"] == [4, 4, 4, 18]  # 3 allocation bands, then the smaller-allocation
    #                                        band between the band stack and the active line
    assert result["bars"] == [2, 3]
    assert result["totals"] == "segments: 2, reserved: 42.0 MiB, allocated: 24.0 MiB"
    first = result["cells"][0]
    assert [c["left"] for c in first] == [0, 60] and [c["width"] for c in first] == [60, 40]
    assert first[0]["title"] == "active_allocated 24.0 MiB (requested 23.0 MiB)\ntrain.py:12:forward"


@NO_NODE
def test_html_axes_have_round_ticks_covering_the_peak(tmp_path) -> None:
    """Regression: the y grid stopped below the peak (the top of the reserved line had no
    label) and the x axis had no ticks at all."""
    labels = _run_page(tmp_path, torch_like_snapshot())["labels"]
    mib_ticks = [float(v.split()[0]) for v in labels if v.endswith(" MiB") or v == "0.0 B"]
    assert mib_ticks == [0, 10, 20, 30, 40]                 # peak reserved is 40 MiB
    assert labels[labels.index("40.0 MiB") + 1:labels.index("40.0 MiB") + 8] == [
        "0", "1", "2", "3", "4", "5", "6"]                   # entries 0..6
    assert "trace entry (event number)" in labels


@NO_NODE
def test_html_merges_blocks_too_narrow_to_see(tmp_path) -> None:
    """Regression: a 2 MiB segment holding hundreds of small blocks drew as a white bar,
    because every sub-pixel cell was all white separator. Narrow neighbours of one state
    are now merged into one cell, and cells are placed absolutely so they never overflow."""
    blocks = [{"size": 4096, "requested_size": 4000, "state": "active_allocated"}] * 400
    blocks += [{"size": 2 * MiB - 400 * 4096, "requested_size": 0, "state": "inactive"}]
    snap = torch_like_snapshot()
    snap["segments"].append({"address": 1 << 34, "total_size": 2 * MiB, "stream": 0,
                             "blocks": blocks})
    cells = _run_page(tmp_path, snap)["cells"][2]
    assert len(cells) == 2
    assert cells[0]["title"] == "400 allocated blocks, 1.6 MiB"
    assert cells[1]["left"] == pytest.approx(78.125)
    assert sum(c["width"] for c in cells) == pytest.approx(100)


def test_torch_memory_viz_reads_our_dump(tmp_path) -> None:
    """PyTorch's own _memory_viz functions read a dump_snapshot file (skips without torch)."""
    import copy

    mv = pytest.importorskip("torch.cuda._memory_viz")
    from accelrt import backends, memory
    from accelrt.memory._simulated import SimulatedBackend

    name = f"vizcompat{uuid.uuid4().hex[:8]}"      # a fresh backend each run

    class Sim(SimulatedBackend):
        pass

    Sim.name = name
    backends.register(name, lambda: Sim(capacity=1 << 30, device_count=2))
    mib = 1 << 20
    d0, d1 = f"{name}:0", f"{name}:1"
    for d in (d0, d1):
        memory.record_memory_history(max_entries=1000, device=d)
    try:
        live = [memory.caching_allocator_alloc(3 * mib, d0),
                memory.caching_allocator_alloc(1000, d0),
                memory.caching_allocator_alloc(25 * mib, d1)]
        gone = memory.caching_allocator_alloc(5 * mib, d0)
        memory.caching_allocator_delete(gone)
        path = tmp_path / "snap.pickle"
        dump_snapshot(path, memory._snapshot(name))
    finally:
        for d in (d0, d1):
            memory.record_memory_history(None, device=d)
    with open(path, "rb") as f:
        snap = pickle.load(f)
    ident = lambda lines: lines

    summary = mv.segsum(copy.deepcopy(snap))
    assert "segments: 3" in summary and "total_reserved: 48.0MiB" in summary
    trace = mv.trace(copy.deepcopy(snap))
    assert "a = cudaMalloc(" in trace and "del e # 5.0MiB" in trace
    assert "Device 1 ----" in trace
    segs = mv.segments(copy.deepcopy(snap), format_flamegraph=ident)
    assert "active_allocated;" in segs and f"seg_{snap['segments'][0]['address']};" in segs
    assert "3145728" in mv.memory(copy.deepcopy(snap), format_flamegraph=ident)
    assert "only_before" in mv.compare(snap["segments"], snap["segments"][:1],
                                       format_flamegraph=ident)
    for fn in (mv.trace_plot, mv.segment_plot):
        assert "<html" in fn(copy.deepcopy(snap)).lower()
    assert "<html" in mv.trace_plot(copy.deepcopy(snap), plot_segments=True,
                                    filter_freed=True).lower()
    for ptr in live:
        memory.caching_allocator_delete(ptr)
