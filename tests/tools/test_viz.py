"""accelrt.memory.viz: segsum, trace_text, the self-contained HTML page and the CLI entry."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import re
import subprocess
import sys
import uuid

import pytest

from accelrt.memory._snapshot import dump_snapshot
from accelrt.memory.viz import (
    format_bytes,
    load_snapshot,
    memory_by_location,
    segsum,
    trace_html,
    trace_text,
    viz_main,
)
from tests.helpers.evil_pickle import CALLS, Evil

MiB = 1 << 20


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
    assert re.findall(r"https?://[^\s\"']+", page) == []
    assert "innerHTML" not in page and "insertAdjacentHTML" not in page \
        and "document.write" not in page
    data = _embedded(page)
    (dev,) = data["devices"]
    assert dev["device"] == 0 and dev["entries"] == 7
    assert [s["total"] for s in dev["segments"]] == [40 * MiB, 2 * MiB]
    assert dev["segments"][1]["blocks"][1]["state"] == "active_pending_free"
    stack = dev["segments"][0]["blocks"][0]["stack"]
    assert [data["frames"][f] for f in data["stacks"][stack]] == ["train.py:12:forward"]
    assert data["frames"][data["loc"][stack]] == "train.py:12:forward"
    assert dev["segev"] == [[0, 1, 1 << 32, 40 * MiB]]
    assert dev["ooms"] == [[6, 60 * MiB, 3 * MiB, -1]]


def test_device_view_lifetimes() -> None:
    """Each allocation's alloc / free-request / free-completed entries; blocks of the final
    snapshot not allocated in the trace (and frees of allocations older than the trace) come
    in with start -1, so that the state rebuilt at the last entry is the snapshot's."""
    a = _embedded(trace_html(torch_like_snapshot()))["devices"][0]["allocs"]
    rows = list(zip(a["start"], a["freq"], a["end"], a["size"], a["addr"]))
    assert a["bsize"] == [24 * MiB, MiB, 2 * MiB, 512, 512]   # the block, where known
    assert rows == [
        (1, -1, -1, 23 * MiB, 1 << 32),                    # still live
        (2, 3, 4, MiB, (1 << 32) + 24 * MiB),              # requested at 3, completed at 4
        (5, -1, -1, 2 * MiB, (1 << 32) + 24 * MiB),        # the address reused
        (-1, -1, -1, 512, 1 << 33),                        # blocks allocated before the trace
        (-1, 6, -1, 512, (1 << 33) + 512)]                 # pending free at the end
    entries = [{"action": "free_requested", "addr": 64, "size": 10},   # older than the trace
               {"action": "alloc", "addr": 8, "size": 4},
               {"action": "alloc", "addr": 8, "size": 6}]               # its free was lost
    a = _embedded(trace_html({"segments": [], "device_traces": [entries]}))["devices"][0]["allocs"]
    assert list(zip(a["start"], a["freq"], a["end"], a["size"])) == [
        (-1, 0, 0, 10), (1, -1, 2, 4), (2, -1, -1, 6)]


def test_html_has_one_view_per_device() -> None:
    snap = torch_like_snapshot()
    snap["segments"].append({"device": 2, "address": 1 << 40, "total_size": 2 * MiB,
                             "stream": 0, "blocks": [{"size": 2 * MiB, "requested_size": 0,
                                                      "state": "inactive"}]})
    devs = _embedded(trace_html(snap))["devices"]
    assert [d["device"] for d in devs] == [0, 2]
    assert [len(d["segments"]) for d in devs] == [2, 1] and devs[1]["entries"] == 0


def test_user_frames_and_code_locations() -> None:
    import accelrt
    from accelrt.memory.tools.viz import _is_user_frame

    assert _is_user_frame("/opt/me/train.py") and _is_user_frame("model/layer.py")
    # a folder's name never decides: projects in folders named accelrt or torch are the user's
    assert _is_user_frame("/u/me/accelrt/train.py") and _is_user_frame("/x/torch/run.py")
    here = os.path.join(os.path.dirname(accelrt.__file__), "memory", "_allocator.py")
    for f in ("/usr/lib/python3.11/site-packages/torch/nn/module.py", "<frozen runpy>",
              "/x/dist-packages/y.py", "??", "/src/c10/cuda/CUDACachingAllocator.cpp",
              "/opt/lib/python3.11/threading.py", "C:\\Python311\\Lib\\threading.py", here):
        assert not _is_user_frame(f), f
    lib = {"filename": "/v/site-packages/torch/nn/module.py", "line": 1, "name": "call"}
    mine = {"filename": "train.py", "line": 7, "name": "step"}
    snap = {"segments": [{"address": 0, "total_size": 100, "stream": 0, "blocks": [
        {"size": 30, "state": "active_allocated", "frames": [lib, mine]},
        {"size": 20, "state": "active_allocated", "frames": [lib]},
        {"size": 10, "state": "active_allocated"},
        {"size": 5, "state": "active_pending_free", "frames": [mine]},
        {"size": 35, "state": "inactive"}]}], "device_traces": []}
    for bl in snap["segments"][0]["blocks"]:
        bl["requested_size"] = bl["size"]
    assert memory_by_location(snap) == {0: {"train.py:7:step": (30, 1),
                                            "/v/site-packages/torch/nn/module.py:1:call": (20, 1),
                                            "(no stack recorded)": (10, 1)}}


def test_recorded_library_roots_decide_the_user_frames() -> None:
    # recorded on another machine: its libraries sit where no folder name gives them away,
    # and the user's project sits in a folder named accelrt
    roots = ["/opt/py/", "/srv/deps/"]
    frames = [{"filename": "/srv/deps/numpy/core.py", "line": 1, "name": "empty"},
              {"filename": "/u/me/accelrt/train.py", "line": 9, "name": "step"},
              {"filename": "/opt/py/runpy.py", "line": 2, "name": "_run_code"}]
    snap = {"segments": [{"address": 0, "total_size": 100, "stream": 0, "blocks": [
        {"size": 100, "requested_size": 100, "state": "active_allocated", "frames": frames}]}],
        "device_traces": [], "library_roots": roots}
    assert memory_by_location(snap) == {0: {"/u/me/accelrt/train.py:9:step": (100, 1)}}
    data = _embedded(trace_html(snap))
    assert [f for f, u in zip(data["frames"], data["user"]) if u] == \
        ["/u/me/accelrt/train.py:9:step"]
    with pytest.raises(ValueError, match="library_roots"):
        trace_html({**snap, "library_roots": [3]})


def test_viz_finds_the_users_frames_in_a_folder_named_accelrt(tmp_path) -> None:
    # a project (and its snapshot) under a folder named accelrt, as a `git clone` of this
    # repository is: its frames are the user's, in a snapshot with library_roots and without
    proj = tmp_path / "accelrt" / "proj"
    proj.mkdir(parents=True)
    (proj / "train.py").write_text(
        "import sys\n"
        "import accelrt as acc\n"
        "def load_weights():\n"
        "    return acc.memory.caching_allocator_alloc(3 << 20, 'cpu:0')\n"
        "acc.memory.record_memory_history(device='cpu:0')\n"
        "w = load_weights()\n"
        "acc.memory.dump_snapshot(sys.argv[1])\n")
    snap_path = proj / "snap.pickle"
    r = subprocess.run([sys.executable, str(proj / "train.py"), str(snap_path)], cwd=proj,
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    snap = load_snapshot(str(snap_path))
    assert snap["library_roots"] and all(r.endswith(os.sep) for r in snap["library_roots"])
    old = {k: v for k, v in snap.items() if k != "library_roots"}   # PyTorch's, older accelrt's
    for s in (snap, old):
        data = _embedded(trace_html(s))
        user = [f for f, u in zip(data["frames"], data["user"]) if u]
        assert any(f.endswith("train.py:4:load_weights") for f in user), user
        assert all("/accelrt/proj/train.py:" in f for f in user), user
        locs = memory_by_location(s)[0]
        assert [loc.rsplit("/", 1)[1] for loc in locs] == ["train.py:4:load_weights"]


def test_compare_lists_what_grew_by_code_location() -> None:
    before = torch_like_snapshot()
    after = torch_like_snapshot()
    after["segments"][0]["blocks"][1] = {"address": (1 << 32) + 24 * MiB, "size": 16 * MiB,
                                         "requested_size": 16 * MiB, "state": "active_allocated",
                                         "frames": [{"filename": "eval.py", "line": 3,
                                                     "name": "cache"}]}
    after["segments"][1]["blocks"][0]["state"] = "inactive"
    cmp = _embedded(trace_html(before, compare=after, compare_names=("a.pickle", "b.pickle")))
    assert cmp["compare"] == {"a": "a.pickle", "b": "b.pickle", "devices": {"0": [
        ["eval.py:3:cache", 0, 0, 16 * MiB, 1],
        ["train.py:12:forward", 24 * MiB, 1, 24 * MiB, 1],
        ["(no stack recorded)", 512, 1, 0, 0]]}}
    assert _embedded(trace_html(before))["compare"] is None


def test_html_escapes_hostile_strings() -> None:
    snap = torch_like_snapshot()
    snap["segments"][0]["blocks"][0]["frames"] = [
        {"filename": "</script><script>alert(1)</script>", "line": 1, "name": "x"}]
    page = trace_html(snap, title="<b>t</b>")
    assert "<script>alert(1)" not in page and "</script><script>" not in page
    assert "<b>t</b>" not in page and "&lt;b&gt;t&lt;/b&gt;" in page
    assert "</script><script>alert(1)</script>:1:x" in _embedded(page)["frames"]
    assert page.count("</script>") == 2          # the data block's and the code's own


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
    assert len(_embedded(out.read_text())["devices"][0]["segments"]) == 2
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


def test_viz_main_compare(tmp_path, capsys) -> None:
    a, b = tmp_path / "a.pickle", tmp_path / "b.pickle"
    dump_snapshot(a, torch_like_snapshot())
    dump_snapshot(b, {"segments": [], "device_traces": [[]]})
    out = tmp_path / "cmp.html"
    assert viz_main([str(a), "--compare", str(b), "-o", str(out)]) == 0
    cmp = _embedded(out.read_text())["compare"]
    assert (cmp["a"], cmp["b"]) == ("a.pickle", "b.pickle")
    assert cmp["devices"]["0"][0] == ["(no stack recorded)", 512, 1, 0, 0]
    capsys.readouterr()
    # the compared file is refused as the output, and a bad one is named
    assert viz_main([str(a), "--compare", str(b), "-o", str(b)]) == 2
    assert "is the --compare snapshot itself" in capsys.readouterr().err
    evil = tmp_path / "evil.pickle"
    evil.write_bytes(pickle.dumps(Evil()))
    assert viz_main([str(a), "--compare", str(evil), "-o", str(out)]) == 1
    assert "refusing to load" in capsys.readouterr().err and CALLS == []
    assert b.read_bytes()[:1] == b"\x80"          # untouched


def test_torch_memory_viz_reads_our_dump(tmp_path) -> None:
    """PyTorch's own _memory_viz functions read a dump_snapshot file (skips without torch)."""
    import copy

    mv = pytest.importorskip("torch.cuda._memory_viz")
    from accelrt import backends, memory
    from accelrt.testing._simulated import SimulatedBackend

    name = f"vizcompat{uuid.uuid4().hex[:8]}"      # a fresh backend each run

    backends.register(name, lambda: SimulatedBackend(name=name, capacity=1 << 30, device_count=2))
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
    def ident(lines: list[str]) -> list[str]:
        return lines

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
