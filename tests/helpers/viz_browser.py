"""Headless Chromium driven over the DevTools protocol, and the snapshots the visualizer's
browser tests (tests/tools/test_viz_browser.py) and its documentation screenshots use.

Run as a script to regenerate the screenshots in docs/images/:
``python tests/helpers/viz_browser.py docs/images``.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
import uuid
from typing import Any

MiB = 1 << 20


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    """One headless Chromium with one page, driven through the DevTools protocol."""

    def __init__(self, executable: str) -> None:
        import websocket  # websocket-client

        self._profile = tempfile.mkdtemp(prefix="accelrt-viz-chromium-")
        self.proc = subprocess.Popen(
            [executable, "--headless=new", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
             "--disable-extensions", "--remote-debugging-port=0",
             "--remote-allow-origins=*", f"--user-data-dir={self._profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # Chromium writes the port it chose into the profile once its DevTools server is up.
        port_file = os.path.join(self._profile, "DevToolsActivePort")
        deadline = time.monotonic() + 30
        port = None
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                with open(port_file, encoding="ascii") as f:
                    first = f.readline().strip()
                if first.isdigit():
                    port = int(first)
                    break
            except OSError:
                pass
            time.sleep(0.02)    # polling another process's file: no event to wait on
        if port is None:
            self.close()
            raise RuntimeError("chromium did not start its DevTools server")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            targets = json.load(r)
        page = next(t for t in targets if t["type"] == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=60,
                                              suppress_origin=True)
        self._id = 0
        self.events: list[dict[str, Any]] = []
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def wait_event(self, method: str) -> dict[str, Any]:
        for i, e in enumerate(self.events):
            if e.get("method") == method:
                return self.events.pop(i)
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("method") == method:
                return msg
            self.events.append(msg)

    def errors(self) -> list[str]:
        """Console errors and uncaught exceptions seen so far."""
        out = []
        for e in self.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.exceptionThrown":
                out.append(json.dumps(p.get("exceptionDetails", {}))[:500])
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(json.dumps(p.get("args", []))[:500])
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(p["entry"].get("text", ""))
        return out

    def viewport(self, width: int, height: int) -> None:
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    def open(self, path: str) -> None:
        self.events.clear()
        self.send("Page.navigate", url="file://" + os.path.abspath(path))
        self.wait_event("Page.loadEventFired")

    def js(self, expr: str) -> Any:
        r = self.send("Runtime.evaluate", expression=expr, returnByValue=True,
                      awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expr}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def mouse(self, kind: str, x: float, y: float, **kw: Any) -> None:
        self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, **kw)

    def click(self, x: float, y: float) -> None:
        self.mouse("mouseMoved", x, y)
        self.mouse("mousePressed", x, y, button="left", buttons=1, clickCount=1)
        self.mouse("mouseReleased", x, y, button="left", buttons=0, clickCount=1)

    def click_element(self, selector: str) -> None:
        box = self.js(f"(function(){{var e=document.querySelector({json.dumps(selector)});"
                      "e.scrollIntoView({block:'center'});var r=e.getBoundingClientRect();"
                      "return [r.left+r.width/2,r.top+r.height/2];})()")
        self.click(*box)

    def screenshot(self, path: str, full_page: bool = False) -> None:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
        data = self.send("Page.captureScreenshot", **params)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self) -> None:
        try:
            if getattr(self, "ws", None) is not None:
                self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            shutil.rmtree(self._profile, ignore_errors=True)


# ---------------------------------------------------------------------- snapshots

def _load_weights(alloc: Any, dev: str) -> list[int]:
    return [alloc(12 * MiB, dev), alloc(8 * MiB, dev)]


def _activations(alloc: Any, dev: str, n: int) -> list[int]:
    out = []
    for i in range(n):          # a loop, not a comprehension: its own frame before 3.12
        out.append(alloc((2 + i % 3) * MiB, dev))
    return out


def _grow_cache(alloc: Any, dev: str) -> int:
    return alloc(30 * MiB, dev)


def real_snapshot(capacity: int = 96 * MiB) -> dict[str, Any]:
    """A snapshot recorded by accelrt's own caching allocator on a simulated backend with two
    devices: weights, activations freed again, one OOM on device 0, other work on device 1
    (the backend is closed and unregistered again before it returns)."""
    from accelrt import OutOfMemoryError, backends, memory
    from accelrt.testing._simulated import SimulatedBackend

    name = f"vizsim{uuid.uuid4().hex[:8]}"

    backends.register(name, lambda: SimulatedBackend(name=name, capacity=capacity, device_count=2))
    d0, d1 = f"{name}:0", f"{name}:1"
    alloc, free = memory.caching_allocator_alloc, memory.caching_allocator_delete
    for d in (d0, d1):
        memory.record_memory_history(max_entries=100_000, device=d)
    try:
        weights = _load_weights(alloc, d0)
        for _ in range(3):
            acts = _activations(alloc, d0, 6)
            for p in acts:
                free(p)
        cache = [_grow_cache(alloc, d0)]
        try:
            for _ in range(2):
                cache.append(_grow_cache(alloc, d0))
        except OutOfMemoryError:
            pass
        other = _activations(alloc, d1, 4)
        free(other[1])
        snap = memory._snapshot(name)
    finally:
        for d in (d0, d1):
            memory.record_memory_history(None, device=d)
    for p in weights + cache + other[:1] + other[2:]:
        free(p)
    backends.get_backend(name).close()
    backends.unregister(name)
    return snap


def big_snapshot(n_allocs: int = 50_000) -> dict[str, Any]:
    """A synthetic one-device, trace-only snapshot of ``2 * n_allocs`` trace entries
    (allocations and their frees at varied lifetimes, from a handful of code locations)."""
    stacks = [[{"filename": f"model/layer{i}.py", "line": 10 + i, "name": f"forward{i}"},
               {"filename": "/usr/lib/python3/site-packages/torch/nn/module.py", "line": 1500,
                "name": "_call_impl"},
               {"filename": "train.py", "line": 40, "name": "main"}] for i in range(8)]
    import heapq

    entries: list[dict[str, Any]] = []
    live: list[tuple[int, int, int]] = []        # heap of (free at step, addr, size)
    addr = 1 << 32                               # addresses are never reused
    state = 12345
    i = -1
    while len(entries) < 2 * n_allocs:
        i += 1
        state = (state * 1103515245 + 12345) & 0x7FFFFFFF
        size = ((state >> 8) % 64 + 1) * 64 * 1024
        if state % 97 == 0:
            size = (state % 7 + 1) * 16 * MiB
        life = 1 + (state >> 4) % (200 if state % 13 else 5000)
        entries.append({"action": "alloc", "addr": addr, "size": size,
                        "frames": stacks[state % 8]})
        heapq.heappush(live, (i + life, addr, size))
        addr += size
        while live and live[0][0] <= i:
            _, a, s = heapq.heappop(live)
            entries.append({"action": "free_completed", "addr": a, "size": s})
    return {"segments": [], "device_traces": [entries[:2 * n_allocs]]}


def main(out_dir: str) -> None:
    """Write the documentation screenshots."""
    from accelrt.memory.viz import trace_html

    exe = find_chromium()
    if exe is None:
        raise SystemExit("no chromium found")
    os.makedirs(out_dir, exist_ok=True)
    tmp = tempfile.mkdtemp()
    a = real_snapshot()
    b = real_snapshot(capacity=128 * MiB)
    page = os.path.join(tmp, "viz.html")
    with open(page, "w", encoding="utf-8") as f:
        f.write(trace_html(a, title="accelrt memory: train.pickle", compare=b,
                           compare_names=("train.pickle", "train_after.pickle")))
    br = Browser(exe)
    try:
        br.viewport(1366, 768)
        br.open(page)
        br.js("document.querySelector('#ooms button').click()")
        br.screenshot(os.path.join(out_dir, "memory_viz_laptop.png"))
        br.click_element("#end")
        br.click_element("#segs details.seg:nth-of-type(2) summary .lbl")
        br.js("new Promise(function(r){(function f(){if(document.querySelector('#segs table'))"
              "r(1);else requestAnimationFrame(f);})();})")
        br.click_element("#segs table tr:nth-child(2) td")
        br.js("window.scrollTo(0, document.getElementById('caption').offsetTop - 8)")
        br.screenshot(os.path.join(out_dir, "memory_viz_state.png"))
        br.viewport(500, 900)
        br.open(page)
        br.js("__viz.zoom(0.5); document.querySelector('#ooms button').click()")
        br.screenshot(os.path.join(out_dir, "memory_viz_narrow.png"))
        big = os.path.join(tmp, "big.html")
        with open(big, "w", encoding="utf-8") as f:
            f.write(trace_html(big_snapshot(), title="accelrt memory: 100,000 entries"))
        br.viewport(1366, 768)
        br.open(big)
        br.js("__viz.setView(20000, 26000)")
        br.js("new Promise(r => requestAnimationFrame(() => r(1)))")
        # click the largest allocation drawn in the middle of the view, then hover it
        x, y = br.js("(function(){var m=__viz.S.S?null:__viz.S.m,A=m.A,best=-1;"
                     "m.list.forEach(function(k){if(A.start[k]<22500&&A.end[k]>23500&&"
                     "(best<0||A.size[k]>A.size[best]))best=k;});"
                     "var r=document.getElementById('tl').getBoundingClientRect(),b=m.steps[best];"
                     "var bot=b[2*Math.max(0,b.length/2-1)+1];"
                     "for(var q=0;q<b.length;q+=2)if(b[q]<=23000)bot=b[q+1];"
                     "return [r.left+__viz.XP(23000),r.top+__viz.YP(bot+A.size[best]/2)];})()")
        br.click(x, y)
        br.mouse("mouseMoved", x + 1, y)
        br.screenshot(os.path.join(out_dir, "memory_viz_100k_zoomed.png"))
        print(br.errors())
    finally:
        br.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    import sys

    main(sys.argv[1] if len(sys.argv) > 1 else "docs/images")
