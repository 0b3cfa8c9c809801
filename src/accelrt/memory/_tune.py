"""``accelrt memory tune``: which allocator setting would have used the least memory?

The workload (a snapshot pickle with history, or a trace in the shared JSON format) is replayed
by :func:`accelrt.memory._replay.replay_ops` on a simulated 80 GiB device once per candidate
setting, and the candidates are ranked by peak reserved memory, then device mallocs (ties keep
the order below; the time per operation is shown, not ranked, as it varies from run to run).
The candidates are chosen from what the settings do, not fitted to the trace:

* the recorded setting (the snapshot's ``allocator_settings``; PyTorch's defaults if none);
* ``expandable_segments:True`` (grow one mapping instead of caching many segments);
* ``max_split_size_mb`` at the large-allocation sizes the workload requests (the median, 90th
  and 99th percentile of requests over 1 MiB, at least ``large_segment_size_mb``): blocks larger
  than this are never split, so big cached blocks stop being carved up by small requests;
* ``roundup_power2_divisions`` 1, 2, 4 and 8 (requests rounded to fewer sizes reuse more);
* ``garbage_collection_threshold`` 0.6 and 0.8, which PyTorch applies only under a memory
  fraction: it is replayed with ``per_process_memory_fraction`` capping the device at the
  recorded setting's peak reserved bytes (PyTorch's defaults' where the recorded setting runs
  out of memory, e.g. under a recorded ``per_process_memory_fraction`` too small for it);
* the best value of each PyTorch key above combined with ``expandable_segments:True``;
* accelrt's low-fragmentation policy ``expandable_segments:True,page_reuse:True``
  (``page_reuse`` is accelrt's own key: PyTorch rejects it).

Example::

    >>> from accelrt.memory._tune import tune_ops
    >>> MiB = 1 << 20
    >>> ops = [(True, 1, 30 * MiB, 0), (True, 2, 3 * MiB, 0), (False, 1, 0, 0),
    ...        (True, 3, 25 * MiB, 0), (False, 2, 0, 0), (False, 3, 0, 0)]
    >>> result = tune_ops(ops)
    >>> result["results"][0]["peak_reserved_bytes"] <= result["baseline"]["peak_reserved_bytes"]
    True
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from ._files import terminal_safe
from ._replay import (
    Op,
    _entries_from_json,
    _peak_live,
    _read_bytes,
    _trace_name,
    human_bytes,
    load_pickle,
    replay_ops,
    trace_ops,
)

__all__ = ["ACCELRT_POLICY", "NoHistoryError", "candidate_settings", "format_tune",
           "load_workload", "pytorch_part", "recorded_setting", "tune_main", "tune_ops"]

_MiB = 1 << 20
_SMALL = 1 << 20                   # PyTorch's small-request limit (kSmallSize)
_SIMULATED_TOTAL = 80 << 30        # the replay device's capacity (SimulatedBackend's default)
_PROGRESS_MIN_OPS = 200_000        # total replayed ops from which a progress bar is shown
#: accelrt's low-fragmentation policy.
ACCELRT_POLICY = "expandable_segments:True,page_reuse:True"
_ACCELRT_ONLY = ("page_reuse",)
#: keys PyTorch reads from PYTORCH_CUDA_ALLOC_CONF only in a program's API, not the env line.
_API_ONLY = ("per_process_memory_fraction",)


class NoHistoryError(ValueError):
    """The file holds no allocation history to replay."""


# ---------------------------------------------------------------------- loading

def _snapshot_entries(trace: list[Any], path: str, device: int) -> list[Any]:
    out: list[Any] = []
    for i, e in enumerate(trace):
        if not isinstance(e, dict):
            raise ValueError(f"{path}: device {device} trace entry {i} is not a dict")  # noqa: TRY004
        try:
            out.append((e["action"], e.get("addr", 0), e["size"], e.get("stream", 0)))
        except KeyError as exc:
            raise ValueError(f"{path}: device {device} trace entry {i} has no {exc} key") \
                from exc
    return out


_NO_HISTORY = ("record it before taking the snapshot: torch.cuda.memory._record_memory_history() "
               "in PyTorch, accelrt.memory.record_memory_history() in accelrt")


def load_workload(path: str, device: int | None = None) -> tuple[list[Op], Any, int]:
    """Read a snapshot or trace file: its replayable operations, recorded settings and device.

    Args:
        path: a snapshot pickle (gzipped or not) or a trace in the shared JSON format.
        device: which device's history to replay; ``None`` picks the only device that has
            history (an error if several have).

    Returns:
        ``(ops, allocator_settings or None, device)``.

    Raises:
        OSError: the file cannot be read.
        NoHistoryError: the chosen device has no allocation history.
        ValueError: the file is malformed, ``device`` is out of range, or several devices have
            history and ``device`` is ``None``.

    Example::

        >>> import pickle, os, tempfile
        >>> from accelrt.memory._tune import load_workload
        >>> d = tempfile.TemporaryDirectory()
        >>> p = os.path.join(d.name, "s.pickle")
        >>> snap = {"segments": [], "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": ""},
        ...         "device_traces": [[], [{"action": "alloc", "addr": 16, "size": 512,
        ...                                  "stream": 0}]]}
        >>> with open(p, "wb") as f:
        ...     pickle.dump(snap, f)
        >>> ops, settings, dev = load_workload(p)
        >>> ops, dev
        ([(True, 16, 512, 0)], 1)
        >>> d.cleanup()
    """
    data = _read_bytes(path)
    settings: Any = None
    if data[:1] == b"\x80":
        obj = load_pickle(data, path)
        if not isinstance(obj, dict) or not isinstance(obj.get("device_traces"), list) \
                or not all(isinstance(t, list) for t in obj["device_traces"]):
            raise NoHistoryError(f"{path}: the snapshot has no 'device_traces' (no allocation "
                                 f"history to replay); {_NO_HISTORY}")
        traces: list[list[Any]] = obj["device_traces"]
        settings = obj.get("allocator_settings")
        with_history = [i for i, t in enumerate(traces) if t]
        if device is None:
            if len(with_history) > 1:
                raise ValueError(f"{path}: devices {', '.join(map(str, with_history))} have "
                                 "allocation history; choose one with --device N")
            device = with_history[0] if with_history else 0
        if not 0 <= device < max(len(traces), 1):
            raise ValueError(f"{path}: --device {device} is out of range: the snapshot has "
                             f"{len(traces)} device(s) (0..{len(traces) - 1})")
        entries = _snapshot_entries(traces[device], path, device) if traces else []
        if not entries:
            where = (f"; devices with history: {', '.join(map(str, with_history))}"
                     if with_history else "")
            raise NoHistoryError(f"{path}: device {device} has no allocation history to "
                                 f"replay{where}; {_NO_HISTORY}")
    else:
        try:
            obj = json.loads(data)
        except RecursionError:
            raise ValueError(f"{path}: refusing to load: the JSON is nested too deeply for a "
                             "trace") from None
        except ValueError as exc:
            raise ValueError(f"{path}: neither JSON nor a snapshot pickle "
                             f"({terminal_safe(str(exc)[:200], one_line=True)})") from None
        entries = _entries_from_json(obj, path)
        if device not in (None, 0):
            raise ValueError(f"{path}: --device {device} is out of range: a JSON trace holds "
                             "one device's history (device 0)")
        device = 0
        info = obj.get("info")
        if isinstance(info, dict):
            settings = info.get("allocator_settings")
    ops = trace_ops(entries, path)
    if not any(is_alloc for is_alloc, _, _, _ in ops):
        raise NoHistoryError(f"{path}: the history of device {device} holds no allocation to "
                             f"replay; {_NO_HISTORY}")
    return ops, settings, device


def recorded_setting(settings: Any) -> str:
    """The settings string a snapshot's ``allocator_settings`` describes (``""``: defaults).

    Uses the recorded ``PYTORCH_CUDA_ALLOC_CONF`` string when it parses, else rebuilds one from
    the recorded ``expandable_segments``, ``max_split_size``, ``garbage_collection_threshold``
    and ``roundup_power2_divisions`` fields.

    Example::

        >>> from accelrt.memory._tune import recorded_setting
        >>> recorded_setting({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
        'expandable_segments:True'
        >>> recorded_setting({"expandable_segments": True, "max_split_size": 256 << 20})
        'expandable_segments:True,max_split_size_mb:256'
        >>> recorded_setting(None)
        ''
    """
    from . import _config
    if not isinstance(settings, dict):
        return ""
    text = settings.get("PYTORCH_CUDA_ALLOC_CONF")
    if isinstance(text, str) and text:
        try:
            parsed = _config.parse_config(text)
        except (TypeError, ValueError):
            pass   # not accelrt's syntax: fall back to the fields
        else:
            if parsed.backend == "native":   # replays model the caching allocator only
                return text
    parts: list[str] = []
    if settings.get("expandable_segments") is True:
        parts.append("expandable_segments:True")
    ms = settings.get("max_split_size")
    if isinstance(ms, int) and not isinstance(ms, bool) and 0 < ms < 1 << 63:
        parts.append(f"max_split_size_mb:{max(ms // _MiB, 1)}")
    gc = settings.get("garbage_collection_threshold")
    if isinstance(gc, (int, float)) and not isinstance(gc, bool) and 0.0 < gc < 1.0:
        parts.append(f"garbage_collection_threshold:{gc}")
    div = settings.get("roundup_power2_divisions")
    if isinstance(div, dict):
        vals = {v for v in div.values() if isinstance(v, int) and not isinstance(v, bool)}
        if len(vals) == 1 and (v := vals.pop()) > 0 and v & (v - 1) == 0:
            parts.append(f"roundup_power2_divisions:{v}")
    text = ",".join(parts)
    try:
        _config.parse_config(text)
    except (TypeError, ValueError):
        return ""
    return text


# ---------------------------------------------------------------------- candidates

def _percentile(sorted_vals: Sequence[int], q: float) -> int:
    i = min(len(sorted_vals) - 1, max(0, math.ceil(q * len(sorted_vals)) - 1))
    return sorted_vals[i]


def _split_sizes_mb(ops: Sequence[Op], floor_mb: int) -> list[int]:
    large = sorted(size for is_alloc, _, size, _ in ops if is_alloc and size > _SMALL)
    if not large:
        return []
    out: list[int] = []
    for q in (0.5, 0.9, 0.99):
        mb = max(floor_mb, -(-_percentile(large, q) // _MiB))
        if mb not in out:
            out.append(mb)
    return out


def candidate_settings(ops: Sequence[Op], recorded: str = "") -> list[str]:
    """The settings tried on ``ops`` in the first round (see the module docstring).

    Example::

        >>> from accelrt.memory._tune import candidate_settings
        >>> ops = [(True, i, (i + 1) << 22, 0) for i in range(100)]
        >>> [c for c in candidate_settings(ops) if c.startswith("max_split")]
        ['max_split_size_mb:200', 'max_split_size_mb:360', 'max_split_size_mb:396']
    """
    from . import _config
    floor_mb = _config.AllocatorConfig().large_segment_size // _MiB
    out = [recorded, "", "expandable_segments:True"]
    out += [f"max_split_size_mb:{mb}" for mb in _split_sizes_mb(ops, floor_mb)]
    out += [f"roundup_power2_divisions:{n}" for n in (1, 2, 4, 8)]
    out.append(ACCELRT_POLICY)
    seen: list[str] = []
    for c in out:
        if c not in seen:
            seen.append(c)
    return seen


def pytorch_part(setting: str) -> str:
    """The keys of ``setting`` that belong in ``PYTORCH_CUDA_ALLOC_CONF`` (drops accelrt's
    ``page_reuse`` and ``per_process_memory_fraction``, which PyTorch sets in code).

    Example::

        >>> from accelrt.memory._tune import pytorch_part
        >>> pytorch_part("expandable_segments:True,page_reuse:True")
        'expandable_segments:True'
    """
    keep = [p for p in _split(setting) if p.split(":", 1)[0] not in _ACCELRT_ONLY + _API_ONLY]
    return ",".join(keep)


def _split(setting: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    cur = ""
    for ch in setting:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        parts.append(cur)
    return parts


def _is_pytorch(setting: str) -> bool:
    return all(p.split(":", 1)[0] not in _ACCELRT_ONLY for p in _split(setting))


def _fraction(setting: str) -> float | None:
    for p in _split(setting):
        k, _, v = p.partition(":")
        if k == "per_process_memory_fraction":
            return float(v)
    return None


# ---------------------------------------------------------------------- running

class _Progress:
    """``tuning [#####     ]  45%  setting 6  812,345 ops/s  6 s left`` on a tty."""

    def __init__(self, stream: TextIO | None, total_ops: int) -> None:
        self._s = stream
        self._total = max(total_ops, 1)
        self._done = 0
        self._t0 = time.monotonic()
        self._last = 0.0
        self.label = ""

    def advance(self, n: int) -> None:
        self._done += n
        if self._s is None:
            return
        now = time.monotonic()
        if now - self._last < 0.1 and self._done < self._total:
            return
        self._last = now
        frac = min(self._done / self._total, 1.0)
        elapsed = max(now - self._t0, 1e-9)
        rate = self._done / elapsed
        left = (self._total - self._done) / rate if rate > 0 else 0.0
        bar = "#" * int(frac * 24)
        self._s.write(f"\rtuning [{bar:<24}] {frac * 100:3.0f}%  {self.label}  "
                      f"{rate:,.0f} ops/s  {left:.0f} s left ")
        self._s.flush()

    def close(self) -> None:
        if self._s is not None:
            self._s.write("\r" + " " * 100 + "\r")
            self._s.flush()


def _run(ops: Sequence[Op], setting: str, on_chunk: Callable[[int], None] | None
         ) -> dict[str, Any]:
    from .._errors import OutOfMemoryError
    from . import _config
    cfg = _config.parse_config(setting)
    row: dict[str, Any] = {"setting": setting, "pytorch_compatible": _is_pytorch(setting),
                           "capped": _fraction(setting) is not None}
    try:
        r = replay_ops(ops, cfg, on_chunk=on_chunk)
    except OutOfMemoryError:
        row.update(oom=True, peak_reserved_bytes=None, device_mallocs=None, vm_maps=None,
                   driver_us_h100=None, us_per_op=None)
        return row
    row.update(oom=False, peak_reserved_bytes=r["peak_reserved_bytes"],
               device_mallocs=r["device_mallocs"], vm_maps=r["vm_maps"],
               driver_us_h100=r["driver_us_h100"], us_per_op=r["us_per_op"])
    return row


def _rank_key(row: dict[str, Any]) -> tuple[Any, ...]:
    if row["oom"]:
        return (1, 0, 0, 0.0)
    # then the driver calls priced at H100 cost (mallocs and frees, or mappings under
    # expandable segments); not the Python time: it varies from run to run; ties keep the
    # order tried (recorded first)
    return (0, row["peak_reserved_bytes"], row["driver_us_h100"], 0.0)


def tune_ops(ops: Sequence[Op], recorded: str = "", *, name: str = "trace",
             progress: TextIO | None = None) -> dict[str, Any]:
    """Replay ``ops`` under every candidate setting and rank them.

    Args:
        ops: from :func:`accelrt.memory._replay.trace_ops`.
        recorded: the setting the workload ran with (``""``: the defaults); savings are
            measured against it.
        name: the workload's name in the result.
        progress: a text stream for a progress bar (rate, time left), or ``None``.

    Returns:
        ``{"trace", "ops", "peak_live_bytes", "recorded_setting", "baseline", "results",
        "best", "best_pytorch"}``; ``results`` are ranked best first, each ``{"setting",
        "pytorch_compatible", "capped", "oom", "peak_reserved_bytes", "saving_bytes", "saving_fraction",
        "device_mallocs", "vm_maps", "driver_us_h100", "us_per_op"}``: the device calls are
        ``cudaMalloc``s, or mappings under expandable segments, and ``driver_us_h100`` prices
        them at H100 cost.

    Raises:
        ValueError: ``recorded`` is not a valid settings string.

    Example::

        >>> from accelrt.memory._tune import tune_ops
        >>> r = tune_ops([(True, 1, 512, 0), (False, 1, 0, 0)])
        >>> r["best"]["saving_bytes"]
        0
    """
    from . import _config
    _config.parse_config(recorded)   # a bad recorded string is the caller's error
    first = candidate_settings(ops, recorded)
    n_gc, n_combined = 2, 3   # at most; the bar's total is an estimate
    bar = _Progress(progress, len(ops) * (len(first) + n_gc + n_combined))
    rows: list[dict[str, Any]] = []

    def run(setting: str) -> dict[str, Any]:
        if any(r["setting"] == setting for r in rows):
            return next(r for r in rows if r["setting"] == setting)
        bar.label = f"setting {len(rows) + 1}"
        row = _run(ops, setting, bar.advance)
        rows.append(row)
        return row

    try:
        for setting in first:
            run(setting)
        # what the other settings are measured against while tuning: the recorded setting, or
        # PyTorch's defaults where the recorded one ran out of memory (a too small recorded
        # per_process_memory_fraction: the out-of-memory case this tool is for)
        ref = next((r for r in (rows[0], run("")) if not r["oom"]), None)
        # garbage collection acts only under a memory fraction: cap at the reference's peak
        if ref is not None and ref["peak_reserved_bytes"]:
            frac = math.ceil(ref["peak_reserved_bytes"] / _SIMULATED_TOTAL * 1e4) / 1e4
            frac = min(frac, 1.0)
            for t in (0.6, 0.8):
                run(f"garbage_collection_threshold:{t},per_process_memory_fraction:{frac}")
        # the best value of each PyTorch key, combined with expandable segments
        for key in ("max_split_size_mb", "roundup_power2_divisions",
                    "garbage_collection_threshold"):
            mine = [r for r in rows if r["setting"].startswith(key) and not r["oom"]]
            if mine and ref is not None:
                best = min(mine, key=_rank_key)
                if best["peak_reserved_bytes"] < ref["peak_reserved_bytes"]:   # it helped
                    run("expandable_segments:True," + best["setting"])
    finally:
        bar.close()
    base = rows[0]
    for r in rows:
        if r["oom"] or base["oom"]:
            r["saving_bytes"] = r["saving_fraction"] = None
        else:
            r["saving_bytes"] = base["peak_reserved_bytes"] - r["peak_reserved_bytes"]
            r["saving_fraction"] = round(r["saving_bytes"] / base["peak_reserved_bytes"], 4) \
                if base["peak_reserved_bytes"] else 0.0
    ranked = sorted(rows, key=_rank_key)
    # a cap fitted to this run's peak would fail a slightly larger run: never recommended
    uncapped = [r for r in ranked if not r["capped"]]
    best_pt = next(r for r in uncapped if r["pytorch_compatible"])
    live = _peak_live(ops)
    return {"trace": name, "ops": len(ops), "peak_live_bytes": live,
            "recorded_setting": recorded, "baseline": base, "results": ranked,
            "best": uncapped[0], "best_pytorch": best_pt}


# ---------------------------------------------------------------------- output

def _shown(setting: str, recorded: bool = False) -> str:
    """The setting as the table shows it (one the tuner capped without its fraction: see the
    note; the recorded one whole)."""
    if _fraction(setting) is not None and not recorded:
        setting = ",".join(p for p in _split(setting)
                           if not p.startswith("per_process_memory_fraction:"))
    return setting or "default"


def _saving_text(row: dict[str, Any]) -> str:
    if row["saving_bytes"] is None:
        return "-"
    if row["saving_bytes"] == 0:
        return "0"
    return f"{human_bytes(row['saving_bytes'])} ({row['saving_fraction'] * 100:.1f}%)"


def format_tune(result: dict[str, Any], path: str, device: int) -> str:
    """The human-readable report of :func:`tune_ops` (the table, then the lines to use).

    Example::

        >>> from accelrt.memory._tune import format_tune, tune_ops
        >>> print(format_tune(tune_ops([(True, 1, 512, 0)]), "t.json", 0).splitlines()[0])
        t.json: device 0, 1 operations, peak live 512 B
    """
    base = result["baseline"]
    rec = result["recorded_setting"]
    lines = [(f"{terminal_safe(path, one_line=True)}: device {device}, {result['ops']:,} "
              f"operations, peak live {human_bytes(result['peak_live_bytes'])}"),
             f"recorded setting: {_shown(rec, recorded=True)}"
             + ("" if rec else " (no allocator settings recorded: PyTorch's defaults)"),
             ""]
    head = ("rank", "setting", "peak reserved", "saving", "mallocs+maps", "driver ms",
            "us/op")
    body = []
    for i, r in enumerate(result["results"], 1):
        mark = " (recorded)" if r is base else " *" if r["capped"] else ""
        shown = _shown(r["setting"], recorded=r is base) + mark
        if r["oom"]:
            body.append((str(i), shown, "out of memory", "-", "-", "-", "-"))
            continue
        body.append((str(i), shown, human_bytes(r["peak_reserved_bytes"]),
                     _saving_text(r), f"{r['device_mallocs'] + r['vm_maps']:,}",
                     f"{r['driver_us_h100'] / 1000:.1f}", f"{r['us_per_op']:.2f}"))
    widths = [max(len(c) for c in col) for col in zip(head, *body)]
    for row in (head, *body):
        lines.append("  ".join(c.ljust(w) if j == 1 else c.rjust(w)
                               for j, (c, w) in enumerate(zip(row, widths))).rstrip())
    capped = [r for r in result["results"] if r["capped"] and r is not base]
    if capped:
        frac = _fraction(capped[0]["setting"])
        whose = "defaults'" if base["oom"] else "recorded"
        lines.append(f"* replayed with per_process_memory_fraction:{frac} (the {whose} peak "
                     "reserved of the simulated")
        lines.append("  80 GiB device): garbage_collection_threshold acts only under a memory "
                     "fraction;")
        lines.append("  a cap fitted to one run is not recommended.")
    if base["oom"] and not all(r["oom"] for r in result["results"]):
        lines.append("the recorded setting ran out of memory replaying its own history on the "
                     "simulated 80 GiB device" + _cap_text(rec, result["peak_live_bytes"]))
    lines.append("")
    best, best_pt = result["best"], result["best_pytorch"]
    lines += _advice("PyTorch", best_pt, base)
    if best is not best_pt or best["oom"]:
        lines += _advice("accelrt", best, base)
    else:
        lines.append(f"accelrt: ACCELRT_ALLOC_CONF={best['setting']}" if best["setting"] else
                     "accelrt: leave ACCELRT_ALLOC_CONF unset")
    lines.append("(peak reserved on a simulated device; us/op is this machine's allocator time "
                 "per malloc/free, not the GPU's)")
    return "\n".join(lines)


def _advice(who: str, row: dict[str, Any], base: dict[str, Any]) -> list[str]:
    var = "PYTORCH_CUDA_ALLOC_CONF" if who == "PyTorch" else "ACCELRT_ALLOC_CONF"
    setting = pytorch_part(row["setting"]) if who == "PyTorch" else row["setting"]
    lines = []
    if row["oom"]:
        return [(f"{who}: every setting ran out of the simulated 80 GiB device; nothing to "
                 "recommend")]
    if base["oom"]:
        lines.append(f"{who}: {var}={setting}" if setting else f"{who}: leave {var} unset")
        lines.append(f"  peaks at {human_bytes(row['peak_reserved_bytes'])} reserved, where the "
                     "recorded setting ran out of memory")
        return lines
    if row is base or not row["saving_bytes"]:
        keep = pytorch_part(base["setting"]) if who == "PyTorch" else base["setting"]
        lines.append(f"{who}: the recorded setting is already the best for {who}"
                     + (f"; keep {var}={keep}" if keep else f"; leave {var} unset"))
        return lines
    lines.append(f"{who}: {var}={setting}" if setting else f"{who}: leave {var} unset")
    lines.append(f"  saves {_saving_text(row)} of peak reserved against the recorded setting")
    return lines


def _cap_text(setting: str, peak_live: int) -> str:
    frac = _fraction(setting)
    if frac is None:
        return ""
    return (f":\n  its per_process_memory_fraction:{frac} caps the device at "
            f"{human_bytes(int(frac * _SIMULATED_TOTAL))}, under the {human_bytes(peak_live)} "
            "this history\n  holds live at its peak: raise the fraction or leave it unset")


def _json_result(result: dict[str, Any], path: str, device: int) -> dict[str, Any]:
    best, best_pt = result["best"], result["best_pytorch"]
    return {"trace": path, "device": device, "ops": result["ops"],
            "peak_live_bytes": result["peak_live_bytes"],
            "recorded_setting": result["recorded_setting"],
            "results": result["results"],
            "best": best["setting"], "best_pytorch": best_pt["setting"],
            "pytorch_alloc_conf": pytorch_part(best_pt["setting"]),
            "accelrt_alloc_conf": best["setting"]}


def tune_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``accelrt memory tune SNAPSHOT_OR_TRACE [--device N] [--json]``.

    Returns the exit status: 0 on success, 1 when the file cannot be read or has no history to
    replay, 2 on bad arguments.

    Example::

        >>> import json, os, tempfile
        >>> from accelrt.memory._tune import tune_main
        >>> d = tempfile.TemporaryDirectory()
        >>> p = os.path.join(d.name, "t.json")
        >>> with open(p, "w") as f:
        ...     json.dump({"trace": [["alloc", 16, 512, 0], ["free_requested", 16, 512, 0]]}, f)
        >>> tune_main([p, "--json"])  # doctest: +ELLIPSIS
        {"trace": ..., "device": 0, "ops": 2, ...}
        0
        >>> d.cleanup()
    """
    parser = argparse.ArgumentParser(
        prog="accelrt memory tune",
        description="Replay a memory snapshot's history (or an allocation trace) under "
                    "candidate allocator settings on a simulated device, rank them by peak "
                    "reserved memory, and print the PYTORCH_CUDA_ALLOC_CONF and "
                    "ACCELRT_ALLOC_CONF lines to use.")
    parser.add_argument("path", metavar="SNAPSHOT_OR_TRACE",
                        help="a snapshot pickle with history (torch.cuda.memory._dump_snapshot "
                             "or accelrt.memory.dump_snapshot) or a trace in the shared JSON "
                             "format (.json or .json.gz)")
    parser.add_argument("--device", type=int, default=None, metavar="N",
                        help="which device's history to replay (needed when several devices "
                             "have history)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object (every setting tried, ranked)")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    if args.device is not None and args.device < 0:
        print(f"accelrt memory tune: error: --device must be >= 0, got {args.device}",
              file=sys.stderr)
        return 2
    try:
        ops, settings, device = load_workload(args.path, args.device)
        recorded = recorded_setting(settings)
        total = len(ops) * 16
        progress = sys.stderr if total >= _PROGRESS_MIN_OPS and sys.stderr.isatty() else None
        result = tune_ops(ops, recorded, name=_trace_name(args.path), progress=progress)
    except (OSError, ValueError, MemoryError, RecursionError, OverflowError) as exc:
        print(f"accelrt memory tune: error: {terminal_safe(str(exc), one_line=True)}",
              file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(_json_result(result, args.path, device)))
    else:
        print(format_tune(result, args.path, device))
    return 0
