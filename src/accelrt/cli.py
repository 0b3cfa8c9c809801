"""The ``accelrt`` command line: ``accelrt info``, ``accelrt replay``, ``accelrt memory viz``,
``accelrt memory tune``.

``accelrt info`` lists every known backend (usable or not, and why not), every device of the
usable ones with its properties and free/total memory, and runs a short self-check on each
device: allocate through the caching allocator, copy host -> device -> device -> host and
compare, time work between two events on a new stream, synchronize, and check the memory
went back to the allocator. The exit status is 1 if any self-check fails, no backend is
usable, or ``ACCELRT_ACCELERATOR`` names a backend that cannot be used. ``--json`` prints
one JSON object for machines.

``accelrt replay ...``, ``accelrt memory viz ...`` and ``accelrt memory tune ...`` hand their
arguments to :func:`accelrt.memory.tools._replay.replay_main`, :func:`accelrt.memory.viz.viz_main`
and :func:`accelrt.memory.tools._tune.tune_main`.

Example::

    >>> from accelrt.cli import collect_info
    >>> info = collect_info(self_check=False)
    >>> "cpu" in [b["name"] for b in info["backends"] if b["available"]]
    True
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import platform
import sys
import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["collect_info", "format_info", "main", "self_check"]

#: Bytes moved by the self-check's copy round trip.
CHECK_BYTES = 1 << 20


def _version() -> str:
    from . import __version__
    return __version__


def _err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _allocated(dev: str) -> int | None:
    """Bytes the caching allocator has handed out on ``dev``, or None if unknown."""
    try:
        from . import memory
        fn = getattr(memory, "memory_allocated", None)
        if fn is not None:
            return int(fn(dev))
    except Exception:  # noqa: BLE001 - the check below is then skipped
        return None
    return None


def _step(steps: list[dict[str, Any]], name: str, fn: Any) -> Any:
    """Run one self-check step, recording pass/fail, time and detail; return its value."""
    t0 = time.perf_counter()
    try:
        detail = fn()
    except Exception as exc:  # noqa: BLE001 - a failing step is reported, not raised
        steps.append({"name": name, "ok": False, "ms": (time.perf_counter() - t0) * 1e3,
                      "detail": _err(exc)})
        return None
    steps.append({"name": name, "ok": True, "ms": (time.perf_counter() - t0) * 1e3,
                  "detail": detail})
    return detail


class _CheckFailed(Exception):
    pass


def _check_dtype(dev: str) -> np.dtype:
    """``uint8`` if the device supports it, else its smallest supported dtype."""
    import accelrt as acc
    try:
        names = sorted(acc.get_device_capability(dev)["supported_dtypes"])
    except Exception:  # noqa: BLE001 - the allocate step then reports the problem
        return np.dtype("uint8")
    if "uint8" in names or not names:
        return np.dtype("uint8")
    return min((np.dtype(n) for n in names), key=lambda d: (d.itemsize, d.kind == "b", d.name))


def self_check(dev: str, nbytes: int = CHECK_BYTES) -> dict[str, Any]:
    """Exercise one device end to end and report each step.

    Steps: ``allocate`` (an array from the caching allocator), ``copy round-trip`` (host ->
    device, device -> device, device -> host, contents compared), ``stream + events`` (work
    on a new stream between two timing events, ``elapsed_time``), ``synchronize``, and
    ``free`` (the memory returns to the allocator when the arrays are collected).

    Args:
        dev: a device string such as ``"cpu:0"``.
        nbytes: bytes to allocate and copy.

    Returns:
        ``{"ok": bool, "steps": [{"name", "ok", "ms", "detail"}, ...]}``.

    Example::

        >>> from accelrt.cli import self_check
        >>> self_check("cpu:0", nbytes=4096)["ok"]
        True
    """
    import accelrt as acc

    steps: list[dict[str, Any]] = []
    before = _allocated(dev)
    arrays: dict[str, Any] = {}
    dtype = _check_dtype(dev)
    count = max(1, nbytes // dtype.itemsize)
    nbytes = count * dtype.itemsize
    pattern = (np.arange(count, dtype=np.uint32) * 2654435761 >> 24).astype(dtype)

    def allocate() -> str:
        arrays["a"] = acc.empty(count, dtype=dtype, device=dev)
        arrays["b"] = acc.empty(count, dtype=dtype, device=dev)
        after = _allocated(dev)
        if before is not None and after is not None and after - before < 2 * nbytes:
            raise _CheckFailed(f"memory_allocated grew by {after - before} bytes, expected "
                               f">= {2 * nbytes}")
        return f"2 x {nbytes} bytes ({dtype.name})"

    def round_trip() -> str:
        a, b = arrays["a"], arrays["b"]
        a.copy_(pattern)
        b.copy_(a)
        back = np.array(b.numpy(), copy=True)
        if not np.array_equal(back, pattern):
            bad = int(np.count_nonzero(back != pattern))
            raise _CheckFailed(f"{bad} of {count} {dtype.name} elements differ after h2d, "
                               "d2d, d2h")
        return f"{count} x {dtype.name} ({nbytes} bytes) h2d, d2d, d2h"

    def stream_events() -> str:
        a = arrays["a"]
        s = acc.Stream(dev)
        start = acc.Event(dev, enable_timing=True)
        end = acc.Event(dev, enable_timing=True)
        s.wait_stream(acc.current_stream(dev))
        with s:
            start.record(s)
            a.fill_(fill_value)
            end.record(s)
        end.synchronize()
        ms = start.elapsed_time(end)
        if not ms >= 0.0:
            raise _CheckFailed(f"elapsed_time returned {ms!r}")
        if not end.query() or not s.query():
            raise _CheckFailed("stream or event not complete after Event.synchronize()")
        if not bool(np.all(a.numpy() == np.array(fill_value, dtype))):
            raise _CheckFailed("fill_ on the side stream did not land")
        return f"elapsed {ms:.3f} ms"

    fill_value = True if dtype.kind == "b" else 0x5A

    def synchronize() -> str:
        acc.synchronize(dev)
        return "ok"

    def free() -> str:
        arrays.clear()   # reference counting frees both arrays here
        after = _allocated(dev)
        if before is None or after is None:
            return "not measured"
        if after != before:
            raise _CheckFailed(f"memory_allocated is {after} bytes after freeing, was "
                               f"{before} before the check")
        return "returned to the allocator"

    for name, fn in (("allocate", allocate), ("copy round-trip", round_trip),
                     ("stream + events", stream_events), ("synchronize", synchronize),
                     ("free", free)):
        _step(steps, name, fn)
        if not steps[-1]["ok"] and name == "allocate":
            break
    arrays.clear()
    return {"ok": all(s["ok"] for s in steps), "steps": steps}


_run_self_check = self_check


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)   # JSON has no NaN or infinity: "nan", "inf", "-inf"
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return _jsonable(value.item())
    return str(value)


def collect_info(self_check: bool = True, backends: Sequence[str] | None = None
                 ) -> dict[str, Any]:
    """Gather what ``accelrt info`` shows, as a JSON-serialisable dict.

    Args:
        self_check: run :func:`self_check` on every device.
        backends: only these backends (default: every registered one).

    Returns:
        ``{"version", "python", "numpy", "platform", "build" ("compiled" or "pure": which
        build of accelrt is loaded), "build_reason" (why, in one line), "compiled_modules",
        "allocator_build" ("pure" or "compiled", see :data:`accelrt.memory.compiled`),
        "random_host" ("C" where the compiled build's C Philox is loaded, else "numpy"),
        "random_host_isa" (the instruction set of the C Philox's loops: "avx512f" or
        "baseline"; None in the pure build),
        "current_accelerator", "ok", "entry_point_problems" (why entries of the
        ``accelrt.backends`` entry-point group were ignored),
        "backends": [{"name", "available", "reason", "devices": [{"device", "properties",
        "memory": {"free", "total"}, "notes" (only where there is one: expandable segments
        asked for on a device without virtual memory), "self_check"}]}]}``; ``ok`` is False
        if a device query or a self-check failed.

    Example::

        >>> from accelrt.cli import collect_info
        >>> info = collect_info(self_check=False, backends=["cpu"])
        >>> info["backends"][0]["devices"][0]["device"]
        'cpu:0'
    """
    import accelrt as acc

    from . import _backend
    from ._build_info import build_info
    from .random import _philox

    run_check = self_check
    build = build_info()
    names = list(backends) if backends is not None else _backend.registered()
    try:
        cur = acc.current_accelerator()
        current = None if cur is None else cur.type
    except Exception as exc:  # noqa: BLE001 - reported, e.g. a bad ACCELRT_ACCELERATOR
        current = f"error: {_err(exc)}"
    info: dict[str, Any] = {
        "version": _version(), "python": platform.python_version(), "numpy": np.__version__,
        "platform": platform.platform(),
        "build": build.build, "build_reason": build.reason,
        "compiled_modules": len(build.modules),
        "allocator_build": "compiled" if acc.memory.compiled else "pure",
        "random_host": "numpy" if _philox._kernel is None else "C",
        "random_host_isa": None if _philox._kernel is None else _philox._kernel.isa(),
        "current_accelerator": current, "ok": True,
        "entry_point_problems": _backend.entry_point_problems(),
        "backends": [],
    }
    for name in names:
        reason = _backend.unavailable_reason(name)
        entry: dict[str, Any] = {"name": name, "available": reason is None, "reason": reason,
                                 "devices": []}
        info["backends"].append(entry)
        if reason is not None:
            continue
        b = _backend.get_backend(name)
        try:   # checked again: a backend may change its answer after it was created
            count = _backend._checked_device_count(name, b)
        except Exception as exc:  # noqa: BLE001 - one broken backend must not hide others
            entry["available"], entry["reason"] = False, _err(exc)
            continue
        for i in range(count):
            dev = f"{name}:{i}"
            d: dict[str, Any] = {"device": dev}
            try:
                d["properties"] = _jsonable(acc.get_device_properties(dev))
                free_b, total_b = b.get_memory_info(i)
                d["memory"] = {"free": int(free_b), "total": int(total_b)}
            except Exception as exc:  # noqa: BLE001 - one broken device must not hide others
                d["error"] = _err(exc)
                info["ok"] = False
            note = _expandable_note(b, i)
            if note is not None:
                d["notes"] = [note]
            if run_check:
                with warnings.catch_warnings():
                    if note is not None:   # (said in the note: not again on stderr)
                        from .memory._config import EXPANDABLE_FALLBACK
                        warnings.filterwarnings("ignore", EXPANDABLE_FALLBACK, UserWarning)
                    d["self_check"] = _run_self_check(dev)
                info["ok"] = info["ok"] and d["self_check"]["ok"]
            entry["devices"].append(d)
    return info


def _expandable_note(b: Any, index: int) -> str | None:
    """What ``expandable_segments:True`` does on device ``index`` of backend ``b`` when the
    device has no virtual memory (its allocator keeps ordinary segments); else ``None``."""
    from .memory._config import get_config
    try:
        if not get_config().expandable_segments or b.capabilities(index).virtual_memory:
            return None
    except Exception:  # noqa: BLE001 - a bad ACCELRT_ALLOC_CONF: the self-check reports it
        return None
    return ("expandable_segments:True is set, but this device has no virtual memory: its "
            "caching allocator uses ordinary segments")


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _step_text(step: dict[str, Any]) -> str:
    if not step["ok"]:
        return f"{step['name']} FAILED ({step['detail']})"
    if step["name"] == "stream + events":   # show the measured event time too
        return f"{step['name']} {step['ms']:.2f} ms ({step['detail']})"
    return f"{step['name']} {step['ms']:.2f} ms"


_SHOWN = {"name", "total_memory", "multi_processor_count", "type", "index", "gcnArchName"}


def _build_line(info: dict[str, Any]) -> str:
    """``build: compiled (N modules, mypyc): why`` or ``build: pure Python: why``."""
    if "build" not in info:   # a dict from an older accelrt
        return "build: unknown"
    what = (f"compiled ({info['compiled_modules']} modules, mypyc)"
            if info["build"] == "compiled" else "pure Python")
    return f"build: {what}: {info['build_reason']}"


#: ``accelrt info``'s words for where the host's random numbers are computed.
_RANDOM_HOST = {"C": "C (the compiled build's Philox4x32-10)",
                "numpy": "numpy (the pure build's Philox4x32-10 pipeline)"}


def _random_host(info: dict[str, Any]) -> str:
    text = _RANDOM_HOST.get(str(info.get("random_host")), "unknown")
    isa = info.get("random_host_isa")
    return text if not isa else f"{text[:-1]}, {isa} loops)"


def format_info(info: dict[str, Any]) -> str:
    """Render :func:`collect_info`'s dict as short human-readable text.

    Example::

        >>> from accelrt.cli import collect_info, format_info
        >>> "cpu:0" in format_info(collect_info(self_check=False, backends=["cpu"]))
        True
    """
    lines = [f"accelrt {info['version']} (Python {info['python']}, numpy {info['numpy']})",
             _build_line(info),
             f"caching allocator: {info['allocator_build']} build",
             f"host random numbers: {_random_host(info)}",
             f"current accelerator: {info['current_accelerator']}", "", "backends:"]
    width = max([len(b["name"]) for b in info["backends"]] + [4])
    for b in info["backends"]:
        if b["available"]:
            n = len(b["devices"])
            lines.append(f"  {b['name']:<{width}}  available    {n} device{'s' * (n != 1)}")
        else:
            reason = str(b["reason"])
            prefix = f"Backend {b['name']!r} is not available: "
            reason = reason.removeprefix(prefix)
            lines.append(f"  {b['name']:<{width}}  unavailable  {reason}")
    for problem in info.get("entry_point_problems", ()):
        lines.append(f"  note: {problem}")
    devices = [d for b in info["backends"] for d in b["devices"]]
    if devices:
        lines += ["", "devices:"]
    for d in devices:
        if "error" in d:
            lines.append(f"  {d['device']}  ERROR {d['error']}")
        else:
            p, m = d["properties"], d["memory"]
            lines.append(f"  {d['device']}  {p.get('name', '?')}  "
                         f"{p.get('multi_processor_count', '?')} compute units  memory "
                         f"{_bytes(m['free'])} free / {_bytes(m['total'])}")
            extras = ", ".join(f"{k}={v}" for k, v in p.items() if k not in _SHOWN)
            if extras:
                lines.append(f"      {extras}")
        for note in d.get("notes", ()):
            lines.append(f"      note: {note}")
        check = d.get("self_check")
        if check is not None:
            verdict = "PASS" if check["ok"] else "FAIL"
            parts = [_step_text(s) for s in check["steps"]]
            lines.append(f"      self-check {verdict}: " + "; ".join(parts))
    if any("self_check" in d for d in devices):
        lines += ["", "all self-checks passed" if info["ok"] else "SOME CHECKS FAILED"]
    return "\n".join(lines)


def _info_problems(info: dict[str, Any]) -> list[str]:
    """What makes ``accelrt info`` fail besides the self-checks: an ``ACCELRT_ACCELERATOR``
    that cannot be used, or no usable backend at all."""
    out = []
    cur = info.get("current_accelerator")
    if isinstance(cur, str) and cur.startswith("error: "):
        out.append(cur.removeprefix("error: "))
    if not any(b["available"] for b in info["backends"]):
        names = ", ".join(b["name"] for b in info["backends"])
        out.append(f"no usable backend among {names}; see the reasons above ('cpu' needs only "
                   "numpy: check ACCELRT_CPU_* variables)")
    return out


def _delegate(module: str, func: str, argv: list[str], what: str) -> int:
    try:
        mod = importlib.import_module(module)
        fn = getattr(mod, func)
    except (ImportError, AttributeError) as exc:
        print(f"accelrt: '{what}' is not available in this installation: {module}.{func} "
              f"cannot be loaded ({_err(exc)}); reinstall accelrt", file=sys.stderr)
        return 2
    try:
        return int(fn(argv))
    except SystemExit as exc:   # the subcommand's own argparse: --help, usage errors
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="accelrt", description="accelrt: a device-agnostic accelerator runtime.")
    p.add_argument("--version", action="version", version=f"accelrt {_version()}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    info = sub.add_parser("info", help="backends, devices, memory and a self-check per device",
                          description=_INFO_DESCRIPTION,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    info.add_argument("--json", action="store_true", help="print one JSON object")
    info.add_argument("--no-check", action="store_true", help="skip the per-device self-check")
    info.add_argument("--backend", action="append", metavar="NAME",
                      help="only this backend (repeatable)")
    sub.add_parser("replay", add_help=False,
                   help="replay an allocation trace through the allocator (see replay --help)")
    mem = sub.add_parser("memory", help="memory tools: viz (snapshot page), tune (setting "
                                         "advice)", description=_MEMORY_DESCRIPTION,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    mem_sub = mem.add_subparsers(dest="memory_command", metavar="COMMAND")
    mem_sub.add_parser("viz", add_help=False,
                       help="render a memory snapshot as HTML (see memory viz --help)")
    mem_sub.add_parser("tune", add_help=False,
                       help="replay a snapshot under candidate allocator settings and "
                            "recommend one (see memory tune --help)")
    return p


#: exit status after the reader of our output went away (128 + SIGPIPE, as a shell reports)
_EXIT_BROKEN_PIPE = 141


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``accelrt`` command line; return the exit status.

    Output piped into a reader that stops early (``accelrt info | head -1``) ends quietly with
    status 141, as a program killed by ``SIGPIPE`` does, instead of a ``BrokenPipeError``
    traceback.

    Args:
        argv: the arguments after the program name (default ``sys.argv[1:]``).

    Example::

        >>> from accelrt.cli import main
        >>> main(["info", "--backend", "cpu", "--json", "--no-check"])  # doctest: +ELLIPSIS
        {...}
        0
    """
    try:
        code = _main(argv)
        sys.stdout.flush()     # a late broken pipe shows up here, not at interpreter exit
    except BrokenPipeError:
        _silence_stdout()
        return _EXIT_BROKEN_PIPE
    return code


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that flushing it again at exit cannot fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # stdout is not a real file (tests)
        pass


_INFO_DESCRIPTION = """List every known backend (usable or not, and why not), every device of the usable ones with
its properties and free/total memory, and run a short self-check on each device (allocate,
copy host -> device -> device -> host, time work between two events on a new stream,
synchronize, free). Exit status: 0 when all is well; 1 when a self-check or a device query
fails, no backend is usable, or ACCELRT_ACCELERATOR names a backend that cannot be used;
2 on bad arguments."""

_MEMORY_DESCRIPTION = """Memory tools:
  accelrt memory viz SNAPSHOT -o FILE.html   render a memory snapshot as an interactive page
  accelrt memory tune SNAPSHOT_OR_TRACE      replay it under candidate allocator settings and
                                             recommend PYTORCH_CUDA_ALLOC_CONF /
                                             ACCELRT_ALLOC_CONF
See 'accelrt memory viz --help' and 'accelrt memory tune --help'."""


def _main(argv: Sequence[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["replay"]:
        return _delegate("accelrt.memory.tools._replay", "replay_main", args[1:], "accelrt replay")
    if args[:2] == ["memory", "viz"]:
        return _delegate("accelrt.memory.viz", "viz_main", args[2:], "accelrt memory viz")
    if args[:2] == ["memory", "tune"]:
        return _delegate("accelrt.memory.tools._tune", "tune_main", args[2:], "accelrt memory tune")
    parser = _parser()
    try:
        ns = parser.parse_args(args)
    except SystemExit as exc:   # --help, --version, usage errors
        return int(exc.code or 0)
    if ns.command == "info":
        from . import _backend
        if ns.backend:
            known = _backend.registered()
            unknown = [n for n in ns.backend if n not in known]
            if unknown:
                print(f"accelrt info: unknown backend(s) {', '.join(unknown)}; known: "
                      f"{', '.join(known)}", file=sys.stderr)
                return 2
        info = collect_info(self_check=not ns.no_check, backends=ns.backend)
        problems = _info_problems(info)
        if problems:
            info["ok"] = False
        if ns.json:
            print(json.dumps(info, indent=2))
        else:
            print(format_info(info))
        for problem in problems:
            print(f"accelrt info: error: {problem}", file=sys.stderr)
        return 0 if info["ok"] else 1
    if ns.command == "memory":
        print("usage: accelrt memory viz SNAPSHOT -o FILE.html | accelrt memory tune "
              "SNAPSHOT_OR_TRACE (see accelrt memory --help)", file=sys.stderr)
        return 2
    parser.print_help(sys.stderr)
    return 2
