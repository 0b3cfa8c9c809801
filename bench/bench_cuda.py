"""CUDA backend benchmarks (needs an NVIDIA GPU; prints "no GPU: <reason>" and exits 0 without).

1. **Trace replay with real memory**: the traces in ``tests/data/traces`` replayed through
   accelrt's caching allocator over the CUDA backend (default settings,
   ``expandable_segments:True`` and the low-fragmentation policy
   ``expandable_segments:True,page_reuse:True``, whose real driver time per operation checks the
   H100 prices :func:`accelrt.memory.tools._replay.driver_cost_us` charges), side by side with the peers run by
   ``--peer-script`` (a replay script for the peers, not shipped; default
   ``$ACCELRT_SHARED/tools/replay_peer.py``) as subprocesses (``torch``, ``torch_expandable``,
   ``cupy``, ``driverpool``; a peer that cannot run is reported with its error).
2. **Runtime calls** vs ``torch.cuda`` and CuPy (each when importable): stream creation, event
   record, event query, stream query, caching-allocator malloc+free of 1 MiB.
3. **Copy bandwidth**: device-to-device and pinned host-to-device, 256 MiB, timed with events,
   accelrt vs ``torch``.
4. **Random fill**: ``accelrt.random.uniform_`` of float32, 1 Mi and 64 Mi elements, mean of 20
   calls between two events (ms per call and GB/s written), vs ``torch.Tensor.uniform_``. At
   1 Mi elements the host's per-call cost, not the kernel, sets the time.

Each ``bench_*(loops)`` returns seconds per call, lookups hoisted; timings are the median of
``--repeat`` runs.

Usage::

    python bench/bench_cuda.py                      # everything
    python bench/bench_cuda.py --only replay --json out.json
    python bench/bench_cuda.py --traces DIR --peer-script PATH
    python bench/bench_cuda.py --only replay --peers none     # accelrt's rows only
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("ACCELRT_SHARED", ROOT.parent / "shared"))
TRACES = ("resnet50_train", "varlen_encoder")
PEERS = ("torch", "torch_expandable", "cupy", "driverpool")
SETTINGS = ("", "expandable_segments:True", "expandable_segments:True,page_reuse:True")
COPY_BYTES = 256 << 20


def _median(fn: Callable[[], float], repeat: int) -> float:
    gc.collect()
    return statistics.median(fn() for _ in range(repeat))


# ---------------------------------------------------------------------- 1. trace replay

def replay_accelrt(trace: Path, conf: str) -> dict[str, Any]:
    """Replay ``trace`` through a fresh caching allocator on cuda:0 with real device memory."""
    from accelrt import backends
    from accelrt.memory._allocator import DeviceCachingAllocator
    from accelrt.memory._config import parse_config
    from accelrt.memory.tools._replay import _peak_live, load_trace, trace_ops

    b = backends.get_backend("cuda")
    b.init_device(0)
    ops = trace_ops(load_trace(str(trace)), str(trace))
    alloc = DeviceCachingAllocator(b, 0, parse_config(conf))
    malloc, free = alloc.malloc, alloc.free
    stream = b.default_stream(0)
    handles: dict[int, int] = {}
    t0 = time.perf_counter()
    for is_alloc, addr, size, _ in ops:
        if is_alloc:
            handles[addr] = malloc(size, stream)
        else:
            free(handles.pop(addr))
    b.synchronize(0)
    secs = time.perf_counter() - t0
    st = alloc.stats()
    for ptr in handles.values():
        free(ptr)
    alloc.empty_cache()
    live = _peak_live(ops)
    reserved = int(st["reserved_bytes.all.peak"])
    return {"trace": trace.name, "allocator": "accelrt" + (f" [{conf}]" if conf else ""),
            "ops": len(ops), "peak_live": live, "peak_reserved": reserved,
            "reserved_over_live": round(reserved / live, 4), "device_mallocs":
            int(st["num_device_alloc"]), "us_per_op": round(secs / len(ops) * 1e6, 3)}


def replay_peer(script: Path, trace: Path, which: str) -> dict[str, Any]:
    """Run one peer of ``replay_peer.py`` in its own process (fresh GPU state)."""
    try:
        out = subprocess.run([sys.executable, str(script), str(trace), which],
                             capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        return {"trace": trace.name, "allocator": which, "error": "timed out"}
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["failed"])[-1]
        return {"trace": trace.name, "allocator": which, "error": last}
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def run_replay(traces_dir: Path, script: Path,
               peers: tuple[str, ...] = PEERS) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name in TRACES:
        trace = traces_dir / f"trace_{name}.json.gz"
        if not trace.exists():
            rows.append({"trace": trace.name, "allocator": "-", "error": "trace not found"})
            continue
        for conf in SETTINGS:
            rows.append(replay_accelrt(trace, conf))
        for peer in peers:
            if script.exists():
                rows.append(replay_peer(script, trace, peer))
            else:
                rows.append({"trace": trace.name, "allocator": peer,
                             "error": f"{script} not found"})
    return rows


def print_replay(rows: list[dict[str, Any]]) -> None:
    print(f"{'trace':28} {'allocator':36} {'peak reserved':>15} {'res/live':>9} "
          f"{'mallocs':>8} {'us/op':>8}")
    for r in rows:
        if "error" in r:
            print(f"{r['trace']:28} {r['allocator']:36} error: {r['error']}")
            continue
        mallocs = r.get("device_mallocs")
        print(f"{r['trace']:28} {r['allocator']:36} {r['peak_reserved']:>15,} "
              f"{r['reserved_over_live']:>9.4f} {'-' if mallocs is None else mallocs:>8} "
              f"{r['us_per_op']:>8.3f}")


# ---------------------------------------------------------------------- 2. runtime calls

def _timed(fn: Callable[..., Any], *args: Any) -> Callable[[int], float]:
    """Seconds per call of ``fn(*args)`` over ``loops`` calls: the same loop for every library
    (a bound method called with its positional argument in the loop, no lambda around it)."""
    def bench(loops: int) -> float:
        t0 = time.perf_counter()
        if not args:
            for _ in range(loops):
                fn()
        else:
            (a,) = args
            for _ in range(loops):
                fn(a)
        return (time.perf_counter() - t0) / loops
    return bench


def accelrt_calls() -> dict[str, Callable[[int], float]]:
    import accelrt as acc
    acc.set_current_accelerator("cuda")
    Stream, Event = acc.cuda.Stream, acc.cuda.Event
    s, s2 = Stream(0), Stream(0)
    ev = Event()
    alloc, delete = acc.memory.caching_allocator_alloc, acc.memory.caching_allocator_delete
    return {"stream create": _timed(Stream, 0), "event record": _timed(ev.record, s),
            "event query": _timed(ev.query), "stream query": _timed(s.query),
            "wait_stream": _timed(s.wait_stream, s2),
            "malloc+free 1MiB": _timed(lambda: delete(alloc(1 << 20, 0, s)))}


def torch_calls() -> dict[str, Callable[[int], float]] | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    torch.zeros(1, device="cuda")
    s, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    ev = torch.cuda.Event()
    alloc, delete = torch.cuda.caching_allocator_alloc, torch.cuda.caching_allocator_delete
    return {"stream create": _timed(torch.cuda.Stream), "event record": _timed(ev.record, s),
            "event query": _timed(ev.query), "stream query": _timed(s.query),
            "wait_stream": _timed(s.wait_stream, s2),
            "malloc+free 1MiB": _timed(lambda: delete(alloc(1 << 20, 0, s)))}


def cupy_calls() -> dict[str, Callable[[int], float]] | None:
    try:
        import cupy
    except ImportError:
        return None
    s = cupy.cuda.Stream(non_blocking=True)
    ev = cupy.cuda.Event()
    pool = cupy.get_default_memory_pool()
    # ``done`` is a property in CuPy: those two rows read it through a lambda
    return {"stream create": _timed(lambda: cupy.cuda.Stream(non_blocking=True)),
            "event record": _timed(ev.record, s), "event query": _timed(lambda: ev.done),
            "stream query": _timed(lambda: s.done),
            "malloc+free 1MiB": _timed(pool.malloc, 1 << 20)}


def run_calls(loops: int, repeat: int) -> dict[str, dict[str, float]]:
    table: dict[str, dict[str, float]] = {}
    for who, make in (("accelrt", accelrt_calls), ("torch", torch_calls), ("cupy", cupy_calls)):
        fns = make()
        if fns is None:
            continue
        for what, fn in fns.items():
            fn(max(loops // 10, 1))   # warm up (pools, caches)
            table.setdefault(what, {})[who] = _median(lambda fn=fn: fn(loops), repeat) * 1e6
    return table


def print_calls(table: dict[str, dict[str, float]]) -> None:
    peers = ("accelrt", "torch", "cupy")
    print(f"{'call (us)':20}" + "".join(f"{p:>12}" for p in peers))
    for what, row in table.items():
        print(f"{what:20}" + "".join(f"{row[p]:>12.3f}" if p in row else f"{'-':>12}"
                                     for p in peers))


# ---------------------------------------------------------------------- 3. copy bandwidth

def accelrt_bandwidth(repeat: int) -> dict[str, float]:
    from accelrt import backends
    b = backends.get_backend("cuda")
    s = b.stream_create(0, 0)
    start, end = (b.event_create(0, True, False, False) for _ in range(2))
    src, dst = b.malloc(0, COPY_BYTES), b.malloc(0, COPY_BYTES)
    host = b.host_malloc(COPY_BYTES)
    out = {}
    try:
        for kind, d, sp in (("d2d", dst, src), ("h2d pinned", dst, host)):
            def once(kind: str = kind, d: int = d, sp: int = sp) -> float:
                b.event_record(0, start, s)
                b.memcpy(0, d, sp, COPY_BYTES, kind.split()[0], s)
                b.event_record(0, end, s)
                b.event_synchronize(0, end)
                return b.event_elapsed_time(0, start, end) / 1e3
            once()
            out[kind] = COPY_BYTES / _median(once, repeat) / 1e9
    finally:
        b.free(0, src)
        b.free(0, dst)
        b.host_free(host)
    return out


def torch_bandwidth(repeat: int) -> dict[str, float] | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    host = torch.empty(COPY_BYTES, dtype=torch.uint8, pin_memory=True)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = {}
    for kind, s in (("d2d", src), ("h2d pinned", host)):
        def once(s: Any = s) -> float:
            start.record()
            dst.copy_(s, non_blocking=True)
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        once()
        out[kind] = COPY_BYTES / _median(once, repeat) / 1e9
    return out


def run_bandwidth(repeat: int) -> dict[str, dict[str, float]]:
    table: dict[str, dict[str, float]] = {}
    for who, fn in (("accelrt", accelrt_bandwidth), ("torch", torch_bandwidth)):
        r = fn(repeat)
        for kind, gbs in (r or {}).items():
            table.setdefault(kind, {})[who] = gbs
    return table


def print_bandwidth(table: dict[str, dict[str, float]]) -> None:
    print(f"{'copy 256 MiB (GB/s)':20}{'accelrt':>12}{'torch':>12}")
    for kind, row in table.items():
        print(f"{kind:20}" + "".join(f"{row[p]:>12.1f}" if p in row else f"{'-':>12}"
                                     for p in ("accelrt", "torch")))


# ---------------------------------------------------------------------- 4. random fill

RAND_SIZES = (1 << 20, 1 << 26)
RAND_CALLS = 20


def accelrt_rand(device: str = "cuda:0") -> dict[str, dict[str, float]]:
    """``accelrt.random.uniform_`` of float32 on ``device``: ms per call (mean of
    ``RAND_CALLS`` between two events, after one warm-up call) and GB/s written."""
    import accelrt as acc
    out = {}
    for n in RAND_SIZES:
        x = acc.empty(n, dtype="float32", device=device)
        acc.random.uniform_(x)
        acc.synchronize(device)
        start, end = (acc.Event(device, enable_timing=True) for _ in range(2))
        start.record()
        for _ in range(RAND_CALLS):
            acc.random.uniform_(x)
        end.record()
        end.synchronize()
        ms = start.elapsed_time(end) / RAND_CALLS
        out[str(n)] = {"ms": ms, "gbs": 4 * n / ms / 1e6}
        del x
    return out


def torch_rand() -> dict[str, dict[str, float]] | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    out = {}
    for n in RAND_SIZES:
        x = torch.empty(n, dtype=torch.float32, device="cuda")
        x.uniform_()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(RAND_CALLS):
            x.uniform_()
        end.record()
        end.synchronize()
        ms = start.elapsed_time(end) / RAND_CALLS
        out[str(n)] = {"ms": ms, "gbs": 4 * n / ms / 1e6}
        del x
    return out


def run_rand() -> dict[str, dict[str, dict[str, float]]]:
    """``{elements: {who: {"ms": ..., "gbs": ...}}}`` for accelrt and torch (when importable)."""
    table: dict[str, dict[str, dict[str, float]]] = {}
    for who, fn in (("accelrt", accelrt_rand), ("torch", torch_rand)):
        for n, row in (fn() or {}).items():
            table.setdefault(n, {})[who] = row
    return table


def print_rand(table: dict[str, dict[str, dict[str, float]]]) -> None:
    print(f"{'uniform_ float32':20}{'accelrt ms':>12}{'GB/s':>9}{'torch ms':>12}{'GB/s':>9}")
    for n, row in table.items():
        cells = "".join(f"{row[p]['ms']:>12.3f}{row[p]['gbs']:>9.1f}" if p in row
                        else f"{'-':>12}{'-':>9}" for p in ("accelrt", "torch"))
        print(f"{int(n):<20,}{cells}")


# ---------------------------------------------------------------------- main

def _peers(text: str) -> tuple[str, ...]:
    """``--peers``: a comma-separated subset of :data:`PEERS`, or ``none``."""
    names = tuple(p for p in text.replace(" ", "").split(",") if p and p != "none")
    unknown = [p for p in names if p not in PEERS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown peer {', '.join(unknown)}: choose from {', '.join(PEERS)} or none")
    return names


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("replay", "calls", "bandwidth", "rand"), action="append")
    ap.add_argument("--traces", type=Path, default=ROOT / "tests" / "data" / "traces")
    ap.add_argument("--peer-script", type=Path, default=SHARED / "tools" / "replay_peer.py")
    ap.add_argument("--peers", type=_peers, default=PEERS,
                    help=f"peers replayed beside accelrt: a comma-separated subset of "
                         f"{','.join(PEERS)}, or none (default: all)")
    ap.add_argument("--loops", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", type=Path, help="also write the results as JSON here")
    args = ap.parse_args(argv)

    from accelrt import backends
    reason = backends.unavailable_reason("cuda")
    if reason is not None:
        print(f"no GPU: {reason}")
        return 0
    parts = args.only or ["replay", "calls", "bandwidth", "rand"]
    results: dict[str, Any] = {"device": None}
    import accelrt as acc
    results["device"] = acc.cuda.get_device_name(0)
    print(f"device: {results['device']}")
    if "replay" in parts:
        results["replay"] = run_replay(args.traces, args.peer_script, args.peers)
        print_replay(results["replay"])
    if "calls" in parts:
        results["calls_us"] = run_calls(args.loops, args.repeat)
        print_calls(results["calls_us"])
    if "bandwidth" in parts:
        results["bandwidth_gbs"] = run_bandwidth(args.repeat)
        print_bandwidth(results["bandwidth_gbs"])
    if "rand" in parts:
        results["rand"] = run_rand()
        print_rand(results["rand"])
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
