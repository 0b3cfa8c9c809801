"""The ``accelrt memory viz`` page in a real headless Chromium (DevTools protocol).

One browser serves the whole module. The snapshots are recorded by accelrt's own allocator
on a simulated two-device backend (with an OOM), plus a synthetic 100,000-entry trace for the
speed check. Skips with a reason when no chromium or no ``websocket-client`` is installed
(.ci/run installs both where it can).
"""

from __future__ import annotations

import json
import os
import statistics
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
from helpers.viz_browser import MiB, Browser, big_snapshot, find_chromium, real_snapshot  # noqa: E402

from accelrt.memory.viz import trace_html  # noqa: E402

CHROMIUM = find_chromium()
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium browser installed "
                       "(apt-get install chromium; .ci/run does so when it runs as root)"),
    pytest.mark.timeout(120),
]


@pytest.fixture(scope="module")
def browser():
    pytest.importorskip("websocket", reason="the websocket-client package is not installed")
    assert CHROMIUM is not None
    b = Browser(CHROMIUM)
    b.viewport(1366, 768)
    yield b
    b.close()


@pytest.fixture(scope="module")
def snaps():
    return real_snapshot(), real_snapshot(capacity=128 * MiB)


@pytest.fixture(scope="module")
def page(tmp_path_factory, snaps):
    path = tmp_path_factory.mktemp("viz") / "real.html"
    path.write_text(trace_html(snaps[0], title="real", compare=snaps[1],
                               compare_names=("a.pickle", "b.pickle")), encoding="utf-8")
    return str(path)


@pytest.fixture()
def opened(browser, page):
    browser.viewport(1366, 768)
    browser.open(page)
    yield browser
    assert browser.errors() == []


def text(b: Browser, selector: str) -> str:
    return b.js(f"document.querySelector({json.dumps(selector)}).textContent")


def canvas_point(b: Browser, entry: float, nbytes: float) -> tuple[float, float]:
    """Viewport coordinates of (trace entry, bytes) on the timeline."""
    return tuple(b.js(f"(function(){{var r=document.getElementById('tl').getBoundingClientRect();"
                      f"return [r.left+__viz.XP({entry}),r.top+__viz.YP({nbytes})];}})()"))


def until(b: Browser, cond: str, timeout_ms: int = 10_000) -> bool:
    """Wait, frame by frame in the page, until the JavaScript ``cond`` is true."""
    return b.js("new Promise(function(r){var t0=performance.now();(function f(){"
                f"if({cond})r(true);else if(performance.now()-t0>{timeout_ms})r(false);"
                "else requestAnimationFrame(f);})();})")


def frame(b: Browser) -> None:
    b.js("new Promise(r => requestAnimationFrame(() => r(1)))")


def test_page_loads_without_console_errors(opened) -> None:
    b = opened
    assert b.js("document.getElementById('device').options.length") == 2
    assert b.js("document.getElementById('tl').width") > 500
    assert b.js("__viz.S.perf.first") > 0
    assert "device 0:" in text(b, "#caption") and text(b, "#caption").endswith(", 1 OOM")


def test_zoom_and_pan_with_the_mouse(opened) -> None:
    b = opened
    full = b.js("__viz.S.view")
    # the y axis reaches the peak reserved memory: its top is inside the plot (8 px margin)
    assert b.js("__viz.YP(Math.max.apply(null, __viz.S.m.RES))") >= 8
    x, y = canvas_point(b, (full[0] + full[1]) / 2, 0)
    b.mouse("mouseWheel", x, y - 100, deltaX=0, deltaY=-400)
    frame(b)
    zoomed = b.js("__viz.S.view")
    assert zoomed[1] - zoomed[0] < 0.6 * (full[1] - full[0])
    # drag to the right: the view moves to earlier entries by the dragged share of the span
    b.mouse("mousePressed", x, y - 100, button="left", buttons=1, clickCount=1)
    b.mouse("mouseMoved", x + 150, y - 100, button="left", buttons=1)
    b.mouse("mouseReleased", x + 150, y - 100, button="left", buttons=0, clickCount=1)
    panned = b.js("__viz.S.view")
    assert panned[0] < zoomed[0] and panned[1] - panned[0] == pytest.approx(zoomed[1] - zoomed[0])
    b.click_element("#zfit")
    assert b.js("__viz.S.view") == full
    b.click_element("#zin")
    assert b.js("__viz.S.view[1]-__viz.S.view[0]") == pytest.approx((full[1] - full[0]) / 2)


def test_detail_control_sets_how_many_allocations_are_drawn(opened) -> None:
    b = opened
    n = b.js("__viz.S.m.n")
    assert b.js("__viz.S.m.list.length") == n          # 1000 largest by default: all of them
    b.js("var s=document.getElementById('detail');s.value='100';"
         "s.dispatchEvent(new Event('change'))")
    assert b.js("__viz.S.m.layoutN") == min(100, n)
    sizes = b.js("__viz.S.m.A.size")
    kept = b.js("__viz.S.m.list.map(function(k){return __viz.S.m.A.size[k];})")
    assert sorted(kept, reverse=True) == sorted(sizes, reverse=True)[:len(kept)]


def test_click_an_allocation_shows_its_stack_user_frames_first(opened) -> None:
    b = opened
    # the 12 MiB weight: allocated first on device 0 and never freed
    k = b.js("__viz.S.m.A.size.indexOf(12*1048576)")
    start = b.js(f"__viz.S.m.A.start[{k}]")
    bottom = b.js(f"__viz.S.m.steps[{k}][1]")
    b.click(*canvas_point(b, start + 5, bottom + 6 * MiB))
    stack = text(b, "#stack").splitlines()
    assert stack[0].startswith("Allocation: 12.0 MiB at 0x") and "still allocated" in stack[0]
    assert stack[1].startswith("Your code (")
    assert "_load_weights" in stack[2] and "real_snapshot" in stack[3]
    lib = next(i for i, s in enumerate(stack) if s.startswith("Libraries"))
    assert all("site-packages" not in s for s in stack[2:lib])
    assert any("site-packages" in s or "/lib/python" in s for s in stack[lib:])
    assert b.js("__viz.S.moment") in (start + 4, start + 5, start + 6)
    # the pane's text can be copied
    try:
        b.send("Browser.grantPermissions", permissions=["clipboardReadWrite",
                                                        "clipboardSanitizedWrite"])
        readable = True
    except RuntimeError:            # an older Chromium: check the button's answer only
        readable = False
    b.click_element("#copy")
    assert until(b, "document.getElementById('copy').textContent=='Copied'")
    if readable:
        assert b.js("navigator.clipboard.readText()") == text(b, "#stack")


def test_hover_shows_the_allocation(opened) -> None:
    b = opened
    k = b.js("__viz.S.m.A.size.indexOf(8*1048576)")
    x, y = canvas_point(b, b.js(f"__viz.S.m.A.start[{k}]") + 3,
                        b.js(f"__viz.S.m.steps[{k}][1]") + 4 * MiB)
    b.mouse("mouseMoved", x, y)
    tip = text(b, "#tip")
    assert tip.startswith("8.0 MiB at 0x") and "_load_weights" in tip
    assert b.js("getComputedStyle(document.getElementById('tip')).display") == "block"


def test_peak_and_oom_are_one_click_away(opened, snaps) -> None:
    b = opened
    b.click_element("#end")
    b.click_element("#peak")
    peak = b.js("__viz.S.m.peakEntry")
    assert b.js("__viz.S.moment") == peak and "(peak)" in text(b, "#statehead")
    assert b.js("__viz.S.state.allocated") == b.js("__viz.S.m.peakBytes") == 80 * MiB
    oom_entry = next(i for i, e in enumerate(snaps[0]["device_traces"][0]) if e["action"] == "oom")
    b.click_element("#ooms button")
    assert b.js("__viz.S.moment") == oom_entry
    stack = text(b, "#stack").splitlines()
    free = [e for e in snaps[0]["device_traces"][0] if e["action"] == "oom"][0]["device_free"]
    assert stack[0] == (f"Out of memory at entry {oom_entry}: 30.0 MiB requested, "
                        f"{free / MiB:.1f} MiB free on the device")
    assert "_grow_cache" in stack[2]
    # the OOM is marked on the timeline: a red line at its entry
    x = b.js(f"Math.round(__viz.XP({oom_entry}))")
    rgb = b.js(f"Array.from(document.getElementById('tl').getContext('2d')"
               f".getImageData({x}*devicePixelRatio,20,1,1).data)")
    assert rgb[0] > 180 and rgb[1] < 90 and rgb[2] < 90


def test_state_at_a_moment_matches_the_snapshot(opened, snaps) -> None:
    b = opened
    b.click_element("#end")
    snap = snaps[0]
    segs = [s for s in snap["segments"] if s["device"] == 0]
    st = b.js("(function(){var s=__viz.S.state;return s.segments.map(function(g){return "
              "[g.address,g.total,g.blocks.map(function(x){return [x.address,x.size,x.state];})];"
              "});})()")
    assert [[s[0], s[1]] for s in st] == [[s["address"], s["total_size"]] for s in segs]
    for got, seg in zip(st, segs):
        want = [[bl["address"], bl["size"], bl["state"]] for bl in seg["blocks"]
                if bl["state"] != "inactive"]
        assert [x for x in got[2] if x[2] != "inactive"] == want
        assert sum(x[1] for x in got[2]) == seg["total_size"]
    assert text(b, "#statesum").startswith(f"{len(segs)} segments")
    assert len(b.js("Array.from(document.querySelectorAll('#segs details.seg'))")) == len(segs)
    # at every entry the allocated bytes of the state equal the timeline's active line
    check = b.js("(function(){var m=__viz.S.m,bad=[];for(var p=1;p<m.P;p++){"
                 "var s=__viz.stateAt(m.X[p]);if(s.allocated+s.pending!=m.ACT[p])bad.push(m.X[p]);}"
                 "return bad;})()")
    assert check == []
    # a segment's block list opens on click and lists its blocks
    b.click_element("#segs details.seg summary .lbl")
    assert until(b, "document.querySelector('#segs details.seg table')")
    rows = b.js("document.querySelector('#segs details.seg table').rows.length")
    assert rows == 1 + len(segs[0]["blocks"])


def test_memory_by_code_location(opened) -> None:
    b = opened
    b.click_element("#peak")
    rows = b.js("Array.from(document.querySelectorAll('#byloc tr')).slice(1)"
                ".map(function(r){return Array.from(r.cells).map(function(c){return c.textContent;});})")
    assert [r[0].rsplit(":", 1)[1] for r in rows] == ["_grow_cache", "_load_weights"]
    assert [r[1:] for r in rows] == [["60.0 MiB", "2", "75.0%"], ["20.0 MiB", "2", "25.0%"]]
    assert "80.0 MiB in 2 locations" in text(b, "#lochead")


def test_compare_two_snapshots(opened) -> None:
    b = opened
    assert b.js("document.getElementById('cmpsec').hidden") is False
    assert text(b, "#cmphead").startswith("What grew from a.pickle to b.pickle on device 0")
    first = b.js("Array.from(document.querySelectorAll('#cmp tr')[1].cells)"
                 ".map(function(c){return c.textContent;})")
    assert first[0].endswith(":_grow_cache")
    assert first[1:] == ["60.0 MiB (2)", "90.0 MiB (3)", "+30.0 MiB"]


def test_device_switch(opened, snaps) -> None:
    b = opened
    b.js("var s=document.getElementById('device');s.value='1';s.dispatchEvent(new Event('change'))")
    assert text(b, "#caption").startswith("device 1:") and text(b, "#ooms") == ""
    assert b.js("__viz.S.state.allocated") == b.js("__viz.S.m.peakBytes")
    rows = b.js("Array.from(document.querySelectorAll('#byloc tr')).slice(1)"
                ".map(function(r){return r.cells[0].textContent;})")
    assert len(rows) == 1 and rows[0].endswith(":_activations")
    b.click_element("#end")
    held = sum(bl["size"] for s in snaps[0]["segments"] if s["device"] == 1
               for bl in s["blocks"] if bl["state"] == "active_allocated")
    assert b.js("__viz.S.state.allocated") == held == (2 + 4 + 2) * MiB     # the 3 MiB freed
    assert "device 1" in text(b, "#cmphead")


def test_hostile_strings_stay_text(browser, tmp_path) -> None:
    evil = '</script><img src=x onerror="window.PWNED=1"><b id=evil>'
    frames = [{"filename": evil + ".py", "line": 1, "name": "<script>window.PWNED=2</script>"}]
    snap = {"segments": [{"device": 0, "address": 4096, "total_size": 8192, "stream": 0,
                          "blocks": [{"address": 4096, "size": 4096, "requested_size": 4096,
                                      "state": "active_allocated", "frames": frames},
                                     {"address": 8192, "size": 4096, "requested_size": 0,
                                      "state": "inactive"}]}],
            "device_traces": [[{"action": "alloc", "addr": 4096, "size": 4096,
                                "frames": frames}]]}
    path = tmp_path / "evil.html"
    path.write_text(trace_html(snap, title=evil), encoding="utf-8")
    browser.open(str(path))
    assert browser.errors() == []
    assert browser.js("window.PWNED === undefined && !document.getElementById('evil') && "
                      "document.querySelectorAll('img').length === 0")
    assert evil in text(browser, "#byloc") and browser.js("document.title") == evil


def test_narrow_window_has_no_horizontal_scroll(browser, page) -> None:
    browser.viewport(500, 900)
    try:
        browser.open(page)
        assert browser.errors() == []
        assert browser.js("document.documentElement.scrollWidth") <= 500
        assert browser.js("document.getElementById('tl').getBoundingClientRect().width") <= 500
        # the panes stack: the state pane sits below the stack pane
        top_stack = browser.js("document.getElementById('stack').getBoundingClientRect().top")
        top_state = browser.js("document.getElementById('statehead').getBoundingClientRect().top")
        assert top_state > top_stack
    finally:
        browser.viewport(1366, 768)


def test_100k_entries_render_and_zoom_fast(browser, tmp_path) -> None:
    """Generous bounds only (a loaded CI machine); the measured numbers are in
    docs/memory_viz.md."""
    path = tmp_path / "big.html"
    path.write_text(trace_html(big_snapshot()), encoding="utf-8")
    browser.viewport(1366, 768)
    browser.open(str(path))
    assert browser.errors() == []
    assert browser.js("__viz.S.m.E") == 100_000
    first = browser.js("__viz.S.perf.first")
    assert 0 < first < 15_000
    x, y = canvas_point(browser, 50_000, 0)
    browser.js("__viz.S.perf.draws.length=0")
    for i in range(12):
        browser.mouse("mouseWheel", x, y - 100, deltaX=0, deltaY=-300 if i < 8 else 300)
        frame(browser)
    draws = browser.js("__viz.S.perf.draws")
    assert len(draws) >= 10 and statistics.median(draws) < 250
    browser.js("var s=document.getElementById('detail');s.value='1000000000';"
               "s.dispatchEvent(new Event('change'))")
    frame(browser)
    assert browser.js("__viz.S.m.list.length") == browser.js("__viz.S.m.n") > 50_000
    assert browser.js("__viz.S.perf.draws[__viz.S.perf.draws.length-1]") < 2000
    print(f"\n100k entries: first render {first:.0f} ms, zoom step median "
          f"{statistics.median(draws):.1f} ms, max {max(draws):.1f} ms")


def test_blocks_too_narrow_to_see_are_merged(browser, tmp_path) -> None:
    """A 2 MiB segment holding hundreds of small blocks drew as a white bar (every
    sub-pixel cell was all separator): narrow neighbours of one state merge into one cell."""
    blocks = [{"address": 4096 * i, "size": 4096, "requested_size": 4000,
               "state": "active_allocated"} for i in range(400)]
    blocks.append({"address": 400 * 4096, "size": 2 * MiB - 400 * 4096, "requested_size": 0,
                   "state": "inactive"})
    snap = {"segments": [{"device": 0, "address": 0, "total_size": 2 * MiB, "stream": 0,
                          "blocks": blocks}], "device_traces": [[]]}
    path = tmp_path / "narrow.html"
    path.write_text(trace_html(snap), encoding="utf-8")
    browser.open(str(path))
    assert browser.errors() == []
    cells = browser.js("Array.from(document.querySelectorAll('#segs .sbar div')).map("
                       "function(c){return [parseFloat(c.style.left),parseFloat(c.style.width),"
                       "c.title];})")
    assert len(cells) == 2 and cells[0][2] == "400 allocated blocks, 1.6 MiB"
    assert cells[1][0] == pytest.approx(78.125)
    assert sum(c[1] for c in cells) == pytest.approx(100)
    assert "No trace recorded" not in text(browser, "#caption")
    assert text(browser, "#statesum").startswith("1 segments, 2.0 MiB reserved, 1.6 MiB")


def test_torch_snapshot_state_and_pending_frees(browser, tmp_path) -> None:
    """A PyTorch-shaped snapshot (free_requested/free_completed pairs, a segment and blocks
    older than the trace, a block freed but waiting on a stream, an OOM without a stack)."""
    from test_viz import torch_like_snapshot

    snap = torch_like_snapshot()
    base = 1 << 32       # the 2 MiB allocation of entry 5 is still there at the end
    snap["segments"][0]["blocks"][1:] = [
        {"address": base + 24 * MiB, "size": 2 * MiB, "requested_size": 2 * MiB,
         "state": "active_allocated", "frames": []},
        {"address": base + 26 * MiB, "size": 14 * MiB, "requested_size": 0,
         "state": "inactive", "frames": []}]
    path = tmp_path / "torch.html"
    path.write_text(trace_html(snap), encoding="utf-8")
    browser.open(str(path))
    assert browser.errors() == []
    browser.click_element("#end")
    got = browser.js("__viz.S.state.segments.map(function(g){return [g.address,g.total,"
                     "g.blocks.filter(function(x){return x.state!='inactive';})"
                     ".map(function(x){return [x.address,x.size,x.state];})];})")
    want = [[s["address"], s["total_size"],
             [[bl["address"], bl["size"], bl["state"]] for bl in s["blocks"]
              if bl["state"] != "inactive"]] for s in snap["segments"]]
    assert got == want
    assert "512.0 B freed but waiting on a stream" in text(browser, "#statesum")
    # the 1 MiB allocation is pending between its free request (3) and completion (4)
    assert browser.js("__viz.stateAt(3).pending") == MiB
    assert browser.js("__viz.stateAt(4).pending") == 0
    browser.click_element("#ooms button")
    assert text(browser, "#stack").splitlines()[0] == \
        "Out of memory at entry 6: 60.0 MiB requested, 3.0 MiB free on the device"
    assert "(no stack recorded" in text(browser, "#stack")
