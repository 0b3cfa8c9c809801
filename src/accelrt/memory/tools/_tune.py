"""``accelrt memory tune``: which allocator setting would have used the least memory?

The workload (a snapshot pickle with history, or a trace in the shared JSON format) is replayed
by :func:`accelrt.memory.tools._replay.replay_ops` on a simulated 80 GiB device once per candidate
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

    >>> from accelrt.memory.tools._tune import tune_ops
    >>> MiB = 1 << 20
    >>> ops = [(True, 1, 30 * MiB, 0), (True, 2, 3 * MiB, 0), (False, 1, 0, 0),
    ...        (True, 3, 25 * MiB, 0), (False, 2, 0, 0), (False, 3, 0, 0)]
    >>> result = tune_ops(ops)
    >>> result["results"][0]["peak_reserved_bytes"] <= result["baseline"]["peak_reserved_bytes"]
    True
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from ._files import file_name, parse_args, terminal_safe
from ._replay import (
    NO_HISTORY_HINT,
    NoHistoryError,
    Op,
    _as_int,
    _check_device,
    _entries_from_json,
    _peak_live,
    _read_bytes,
    _replay,
    _trace_name,
    device_trace,
    human_bytes,
    is_pickle,
    load_pickle,
    no_history_message,
    snapshot_pools,
    PoolPlan,
    pool_plan,
    snapshot_entries,
    snapshot_traces,
    trace_ops,
)
from ..._errors import type_shown

__all__ = ["ACCELRT_POLICY", "NoHistoryError", "Workload", "candidate_settings", "cap_fraction",
           "format_tune", "load_workload", "parse_device_memory", "pytorch_part",
           "read_workload", "recorded_setting", "settings_recorded", "tune_main", "tune_ops",
           "with_oom_requests"]

_MiB = 1 << 20
_SMALL = 1 << 20                   # PyTorch's small-request limit (kSmallSize)
_SIMULATED_TOTAL = 80 << 30        # the replay device's capacity when none is known
_PROBE = 1 << 64                   # replayed addresses of the requests that ran out of memory
_PROGRESS_MIN_OPS = 200_000        # total replayed ops from which a progress bar is shown
#: accelrt's low-fragmentation policy.
ACCELRT_POLICY = "expandable_segments:True,page_reuse:True"
_ACCELRT_ONLY = ("page_reuse",)
#: keys PyTorch reads from PYTORCH_CUDA_ALLOC_CONF only in a program's API, not the env line.
_API_ONLY = ("per_process_memory_fraction",)
#: keys of a snapshot's ``allocator_settings`` that PyTorch and accelrt record.
_SETTINGS_KEYS = ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments", "max_split_size",
                  "garbage_collection_threshold", "roundup_power2_divisions")
_SIZE_FORMS = ("bytes (85899345920) or a number with a unit: KiB, MiB, GiB, TiB (powers of "
               "1024: 80GiB, 81559MiB) or KB, MB, GB, TB (powers of 1000: 85.9GB)")


# ---------------------------------------------------------------------- loading

_NO_HISTORY = NO_HISTORY_HINT


def parse_device_memory(text: str) -> int:
    """``--device-memory SIZE``: bytes, or a number with a binary or decimal unit.

    Raises:
        TypeError: ``text`` is not a str.
        ValueError: ``text`` is not such a size, or is out of range (at least 1 MiB, less
            than 1 EiB); the message names the accepted forms.

    Example::

        >>> from accelrt.memory.tools._tune import parse_device_memory
        >>> parse_device_memory("80GiB") == 80 << 30, parse_device_memory("81559MiB")
        (True, 85520809984)
    """
    from ...backends.cpu._config import parse_memory_size
    if not isinstance(text, str):
        raise TypeError(f"--device-memory must be a str such as '80GiB', got "
                        f"{type_shown(text)}")
    shown = terminal_safe(repr(text[:40] + ("..." if len(text) > 40 else "")), one_line=True)
    try:
        size = parse_memory_size(text.strip()) if len(text) <= 64 else -1
    except (TypeError, ValueError):
        size = -1
    if size < 1:
        raise ValueError(f"--device-memory {shown} is not a memory size; use {_SIZE_FORMS}")
    if size < _MiB or size >= 1 << 60:
        raise ValueError(f"--device-memory {shown} is out of range: give the device's memory, "
                         f"at least 1 MiB and less than 1 EiB, as {_SIZE_FORMS}")
    return size


@dataclasses.dataclass(eq=False, repr=False)   # only its __init__: a plain record
class Workload:
    """What ``accelrt memory tune`` reads of a file (see :func:`read_workload`).

    Attributes:
        ops: the replayed operations (without the requests that ran out of memory).
        settings: the recorded ``allocator_settings`` (``None`` if the file has none).
        device: the device whose history it is.
        ooms: the requests that ran out of memory, each ``{"position"`` (operations before
            it), ``"size"``, ``"stream"``, ``"device_free"`` (``None`` if not recorded),
            ``"reserved"`` (the allocator's reserved bytes then, ``None`` if unknown)``}``.
        capacity: the device memory the file records, or ``None``.
        capacity_source: how ``capacity`` was found (``""`` when it was not).
        private_pool_allocs: how many of its replayed allocations a snapshot records in a
            private pool (``MemPool``, graph capture); each setting replays them in private
            pools of the same ids (``plan``).
        plan: where the history used private pools
            (:class:`~accelrt.memory.tools._replay.PoolPlan`; ``None`` if it did not).
    """

    ops: list[Op]
    settings: Any
    device: int
    ooms: list[dict[str, Any]]
    capacity: int | None
    capacity_source: str
    private_pool_allocs: int = 0
    plan: PoolPlan | None = None


def _reserved_at_ooms(snapshot: dict[str, Any], entries: list[Any], device: int, path: str
                      ) -> list[int | None]:
    """The bytes the allocator held at each ``oom`` entry of ``entries`` (from
    :func:`~accelrt.memory.tools._replay.snapshot_entries`): the snapshot's segments of
    ``device`` at its end, less the segment changes the trace records after (``None`` where
    the segments do not say)."""
    n_oom = sum(action == "oom" and bool(size) for action, _, size, _ in entries)
    segments = snapshot.get("segments", [])
    if not isinstance(segments, list):
        raise ValueError(f"{path}: 'segments' must be a list of segment dicts, got "  # noqa: TRY004
                         f"{type_shown(segments)}")
    final = 0
    for seg in segments:
        if not isinstance(seg, dict):
            return [None] * n_oom
        size, dev = seg.get("total_size"), seg.get("device", 0)
        if dev != device:
            continue
        if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size < 1 << 64:
            return [None] * n_oom       # a segment of unknown size: the total is unknown
        final += size
    delta = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}
    cur = 0
    at_oom: list[int] = []
    for i, (action, _, size, _) in enumerate(entries):
        sign = delta.get(action, 0)
        if sign:
            cur += sign * _as_int(size, "size", i, path)
        elif action == "oom" and size:
            at_oom.append(cur)
    start = final - cur          # what the allocator held when the history began
    if start < 0:                # the history grew more than the segments hold: unknown
        return [None] * n_oom
    return [start + c if start + c >= 0 else None for c in at_oom]


def read_workload(path: str, device: int | None = None) -> Workload:
    """Read a snapshot or trace file: its operations, recorded settings, the requests that ran
    out of memory and the device memory it records.

    A snapshot records no device capacity as such; where it records an out-of-memory
    (``oom`` entry, with the ``device_free`` bytes the driver reported), the capacity is what
    the allocator held then plus that free memory: the memory the process could use. A trace
    in the JSON format records none (``--device-memory``).

    Args:
        path: a snapshot pickle (gzipped or not) or a trace in the shared JSON format (a
            str, bytes or ``os.PathLike`` file name).
        device: which device's history to read; ``None`` picks the only device that has
            history (an error if several have).

    Raises:
        TypeError: ``path`` is not a file name, or ``device`` not an int or ``None``.
        OSError: the file cannot be read.
        NoHistoryError: the chosen device has no allocation history.
        ValueError: the file is malformed, ``device`` is out of range, or several devices have
            history and ``device`` is ``None``.

    Example::

        >>> import pickle
        >>> from accelrt.memory.tools._files import example_file
        >>> from accelrt.memory.tools._tune import read_workload
        >>> MiB = 1 << 20
        >>> snap = {"segments": [{"address": 0, "total_size": 20 * MiB, "stream": 0}],
        ...         "device_traces": [[
        ...             {"action": "alloc", "addr": 16, "size": 20 * MiB, "stream": 0},
        ...             {"action": "oom", "size": 60 * MiB, "device_free": 44 * MiB,
        ...              "stream": 0}]]}
        >>> w = read_workload(example_file("s.pickle", pickle.dumps(snap)))
        >>> w.ops, w.capacity // MiB, [o["size"] // MiB for o in w.ooms]
        ([(True, 16, 20971520, 0)], 64, [60])
    """
    path = file_name(path)
    _check_device(device)
    data = _read_bytes(path)
    settings: Any = None
    pools = None
    oom_at: list[tuple[int, int, int]] = []
    free: list[int | None] = []
    reserved: list[int | None] = []
    snapshot = is_pickle(data)
    if snapshot:
        obj = load_pickle(data, path)
        traces = snapshot_traces(obj, path)
        settings = obj.get("allocator_settings")
        with_history = [i for i, t in enumerate(traces) if t]
        device, raw = device_trace(traces, path, device)
        entries = snapshot_entries(raw, path, device)
        if not entries:
            where = (f"; devices with history: {', '.join(map(str, with_history))}"
                     if with_history else "")
            raise NoHistoryError(no_history_message(path, f"device {device}") + where)
        for e, (action, _, size, _) in zip(raw, entries):
            if action == "oom" and size:    # as trace_ops keeps them: one per request
                f = e.get("device_free")
                free.append(f if isinstance(f, int) and not isinstance(f, bool)
                            and 0 <= f < 1 << 64 else None)
        reserved = _reserved_at_ooms(obj, entries, device, path)
        pools = snapshot_pools(raw, path, device)
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
    ops = trace_ops(entries, path, oom_at)
    if not any(is_alloc for is_alloc, _, _, _ in ops):
        if not snapshot:        # a trace: 'accelrt memory viz' does not draw it
            raise NoHistoryError(f"{terminal_safe(path, one_line=True)}: the trace holds no "
                                 "allocation to replay (no 'alloc' entry of a nonzero size)")
        raise NoHistoryError(no_history_message(path, f"the history of device {device}")
                             .replace("has no allocation history", "holds no allocation"))
    ooms = [{"position": pos, "size": size, "stream": stream,
             "device_free": free[k] if k < len(free) else None,
             "reserved": reserved[k] if k < len(reserved) else None}
            for k, (pos, size, stream) in enumerate(oom_at)]
    seen = [o["reserved"] + o["device_free"] for o in ooms
            if o["reserved"] is not None and o["device_free"] is not None]
    capacity = max(seen) if seen and max(seen) > 0 else None
    source = ""
    if capacity is not None:
        held, free_b = next((o["reserved"], o["device_free"]) for o in ooms
                            if o["reserved"] is not None and o["device_free"] is not None
                            and o["reserved"] + o["device_free"] == capacity)
        source = (f"from the recorded out-of-memory: {human_bytes(held)} reserved + "
                  f"{human_bytes(free_b)} free on the device")
    plan = None if pools is None else pool_plan(entries, pools)
    pooled = 0 if plan is None else len(plan.route)
    return Workload(ops, settings, device, ooms, capacity, source, pooled, plan)


def load_workload(path: str, device: int | None = None) -> tuple[list[Op], Any, int]:
    """Read a snapshot or trace file: its replayable operations, recorded settings and device
    (:func:`read_workload` without the out-of-memory requests and capacity).

    Returns:
        ``(ops, allocator_settings or None, device)``.

    Raises:
        OSError, NoHistoryError, ValueError: as :func:`read_workload`.

    Example::

        >>> import pickle
        >>> from accelrt.memory.tools._files import example_file
        >>> from accelrt.memory.tools._tune import load_workload
        >>> snap = {"segments": [], "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": ""},
        ...         "device_traces": [[], [{"action": "alloc", "addr": 16, "size": 512,
        ...                                  "stream": 0}]]}
        >>> ops, settings, dev = load_workload(example_file("s.pickle", pickle.dumps(snap)))
        >>> ops, dev
        ([(True, 16, 512, 0)], 1)
    """
    w = read_workload(path, device)
    return w.ops, w.settings, w.device


def settings_recorded(settings: Any) -> bool:
    """Whether a file's ``allocator_settings`` record the settings (defaults included).

    Example::

        >>> from accelrt.memory.tools._tune import settings_recorded
        >>> settings_recorded({"PYTORCH_CUDA_ALLOC_CONF": ""}), settings_recorded(None)
        (True, False)
    """
    return isinstance(settings, dict) and any(k in settings for k in _SETTINGS_KEYS)


def recorded_setting(settings: Any) -> str:
    """The settings string a snapshot's ``allocator_settings`` describes (``""``: defaults).

    Uses the recorded ``PYTORCH_CUDA_ALLOC_CONF`` string when it parses, else rebuilds one from
    the recorded ``expandable_segments``, ``max_split_size``, ``garbage_collection_threshold``
    and ``roundup_power2_divisions`` fields. A string asking for expandable segments on a
    device that had no virtual memory (the field says ``False``: ordinary segments were used)
    is replayed without them.

    Example::

        >>> from accelrt.memory.tools._tune import recorded_setting
        >>> recorded_setting({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
        'expandable_segments:True'
        >>> recorded_setting({"expandable_segments": True, "max_split_size": 256 << 20})
        'expandable_segments:True,max_split_size_mb:256'
        >>> recorded_setting(None)
        ''
    """
    from .. import _config
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
                if parsed.expandable_segments and settings.get("expandable_segments") is False:
                    # asked for, but the device had no virtual memory: ordinary segments
                    text = ",".join(p for p in text.split(",") if p.split(":", 1)[0].strip()
                                    not in ("expandable_segments", "page_reuse"))
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

        >>> from accelrt.memory.tools._tune import candidate_settings
        >>> ops = [(True, i, (i + 1) << 22, 0) for i in range(100)]
        >>> [c for c in candidate_settings(ops) if c.startswith("max_split")]
        ['max_split_size_mb:200', 'max_split_size_mb:360', 'max_split_size_mb:396']
    """
    from .. import _config
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

        >>> from accelrt.memory.tools._tune import pytorch_part
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


def _fraction(setting: str) -> str | None:
    """The ``per_process_memory_fraction`` of ``setting`` as written there, or ``None``."""
    for p in _split(setting):
        k, _, v = p.partition(":")
        if k == "per_process_memory_fraction":
            return v
    return None


def cap_fraction(peak: int, capacity: int) -> str:
    """The ``per_process_memory_fraction`` that caps a ``capacity``-byte device at ``peak``
    bytes: rounded up to 4 decimals, or to as many more as keep the cap within 1% of ``peak``
    (a small workload on a large device: 4 decimals of 1 EiB are 115 TB).

    Example::

        >>> from accelrt.memory.tools._tune import cap_fraction
        >>> GiB = 1 << 30
        >>> cap_fraction(60 * GiB, 80 * GiB), cap_fraction(6962544640, 80 * GiB)
        ('0.75', '0.0811')
        >>> cap_fraction(2 << 20, 80 * GiB), cap_fraction(5 * GiB, 1 << 59)
        ('0.0000245', '0.0000000094')
    """
    frac, digits = 1.0, 4
    for digits in range(4, 19):
        scale = 10 ** digits
        frac = math.ceil(peak / capacity * scale) / scale
        if frac >= 1.0:
            return "1.0"
        if frac * capacity <= peak * 1.01:
            break
    return f"{frac:.{digits}f}".rstrip("0")


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


def _run(ops: Sequence[Op], setting: str, on_chunk: Callable[[int], None] | None,
         capacity: int, routing: Any = None) -> dict[str, Any]:
    from ..._errors import OutOfMemoryError
    from .. import _config
    cfg = _config.parse_config(setting)
    row: dict[str, Any] = {"setting": setting, "pytorch_compatible": _is_pytorch(setting),
                           "capped": _fraction(setting) is not None}
    try:
        r, st = _replay(ops, cfg, "trace", None, on_chunk, capacity, routing)
    except OutOfMemoryError:
        row.update(oom=True, peak_reserved_bytes=None, device_mallocs=None, vm_maps=None,
                   driver_us_h100=None, us_per_op=None, alloc_retries=None)
        return row
    row.update(oom=False, peak_reserved_bytes=r["peak_reserved_bytes"],
               device_mallocs=r["device_mallocs"], vm_maps=r["vm_maps"],
               driver_us_h100=r["driver_us_h100"], us_per_op=r["us_per_op"],
               alloc_retries=int(st["num_alloc_retries"]))
    return row


def _rank_key(row: dict[str, Any]) -> tuple[Any, ...]:
    if row["oom"]:
        return (1, 0, 0, 0.0)
    # then the driver calls priced at H100 cost (mallocs and frees, or mappings under
    # expandable segments); not the Python time: it varies from run to run; ties keep the
    # order tried (recorded first)
    return (0, row["peak_reserved_bytes"], row["driver_us_h100"], 0.0)


def with_oom_requests(ops: Sequence[Op], ooms: Sequence[dict[str, Any]]) -> list[Op]:
    """``ops`` with each request that ran out of memory put back where it was made, and freed
    at once (its lifetime is unknown): a setting fits the workload only if it serves these too.

    Example::

        >>> from accelrt.memory.tools._tune import with_oom_requests
        >>> with_oom_requests([(True, 1, 512, 0)], [{"position": 1, "size": 4096, "stream": 0}])
        [(True, 1, 512, 0), (True, 18446744073709551616, 4096, 0), (False, 18446744073709551616, 0, 0)]
    """
    out: list[Op] = []
    k = 0
    order = sorted(ooms, key=lambda o: int(o["position"]))
    for n, o in enumerate(order):
        out.extend(ops[k:o["position"]])
        k = o["position"]
        out += [(True, _PROBE + n, o["size"], o["stream"]), (False, _PROBE + n, 0, o["stream"])]
    out.extend(ops[k:])
    return out


def _routing(plan: PoolPlan | None, ooms: Sequence[dict[str, Any]]) -> Any:
    """``plan``'s routing of the operations with ``ooms`` put back (``None`` without a plan)."""
    if plan is None:
        return None
    if len(plan.ooms) != len(ooms):
        raise ValueError(f"plan records {len(plan.ooms)} out-of-memory request(s) but ooms "
                         f"holds {len(ooms)}: pass the plan and ooms of one Workload")
    return plan.routing(with_ooms=True)


def tune_ops(ops: Sequence[Op], recorded: str = "", *, name: str = "trace",
             progress: TextIO | None = None, device_memory: int | None = None,
             ooms: Sequence[dict[str, Any]] = (), capacity_source: str = "",
             settings_recorded: bool = False, plan: PoolPlan | None = None) -> dict[str, Any]:
    """Replay ``ops`` under every candidate setting and rank them.

    Args:
        ops: from :func:`accelrt.memory.tools._replay.trace_ops`.
        recorded: the setting the workload ran with (``""``: the defaults); savings are
            measured against it.
        name: the workload's name in the result.
        progress: a text stream for a progress bar (rate, time left), or ``None``.
        device_memory: the user's device memory in bytes: every setting is replayed on a
            simulated device of this size, where the allocator frees its cache and retries, or
            runs out of memory, as it would there (``None``: 80 GiB, and said so).
        ooms: the requests that ran out of memory (:attr:`Workload.ooms`: ``position``,
            ``size``, ``stream``): each is replayed where it was made (and freed at once), so a
            setting fits only if it would have served them.
        capacity_source: how ``device_memory`` was found, for the report.
        settings_recorded: whether the file recorded its settings (``recorded == ""`` is then
            the recorded defaults, not a guess).
        plan: where the history used private pools (:attr:`Workload.plan`, whose ``ooms``
            are ``ooms``): every setting replays those allocations in private pools of the
            same ids (``None``: all in the default pool).

    Returns:
        ``{"trace", "ops", "peak_live_bytes", "recorded_setting", "settings_recorded",
        "device_memory_bytes", "capacity_source", "ooms", "too_large", "baseline", "results",
        "fits", "best", "best_pytorch"}``; ``results`` are ranked best first, those that run
        out of memory last (``fits`` counts the others), each ``{"setting",
        "pytorch_compatible", "capped", "oom", "peak_reserved_bytes", "saving_bytes",
        "saving_fraction", "device_mallocs", "vm_maps", "driver_us_h100", "us_per_op",
        "alloc_retries"}``: the device calls are ``cudaMalloc``s, or mappings under expandable
        segments, ``driver_us_h100`` prices them at H100 cost, ``alloc_retries`` counts the
        times the allocator had to free its cache to fit a request; ``too_large`` lists the
        sizes of the out-of-memory requests that alone exceed the device memory.

    Raises:
        ValueError: ``recorded`` is not a valid settings string, or ``device_memory`` is not
            a positive int.

    Example::

        >>> from accelrt.memory.tools._tune import tune_ops
        >>> r = tune_ops([(True, 1, 512, 0), (False, 1, 0, 0)])
        >>> r["best"]["saving_bytes"]
        0
        >>> MiB = 1 << 20
        >>> r = tune_ops([(True, 1, 30 * MiB, 0)], device_memory=64 * MiB,
        ...              ooms=[{"position": 1, "size": 40 * MiB, "stream": 0}])
        >>> r["fits"], r["too_large"]
        (0, [])
    """
    from .. import _config
    _config.parse_config(recorded)   # a bad recorded string is the caller's error
    if device_memory is not None and (not isinstance(device_memory, int)
                                      or isinstance(device_memory, bool) or device_memory < 1):
        raise ValueError(f"device_memory must be a positive number of bytes, got "
                         f"{device_memory!r}")
    capacity = _SIMULATED_TOTAL if device_memory is None else device_memory
    routing = _routing(plan, ooms)
    live_ops = list(ops)
    ops = with_oom_requests(ops, ooms)
    first = candidate_settings(live_ops, recorded)
    n_gc, n_combined = 2, 3   # at most; the bar's total is an estimate
    bar = _Progress(progress, len(ops) * (len(first) + n_gc + n_combined))
    rows: list[dict[str, Any]] = []

    def run(setting: str) -> dict[str, Any]:
        if any(r["setting"] == setting for r in rows):
            return next(r for r in rows if r["setting"] == setting)
        bar.label = f"setting {len(rows) + 1}"
        row = _run(ops, setting, bar.advance, capacity, routing)
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
            frac = cap_fraction(ref["peak_reserved_bytes"], capacity)
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
    shown_ooms = [{"size": o["size"], "device_free": o.get("device_free")} for o in ooms]
    return {"trace": name, "ops": len(live_ops), "peak_live_bytes": live,
            "recorded_setting": recorded, "settings_recorded": settings_recorded,
            "device_memory_bytes": device_memory, "capacity_source": capacity_source,
            "ooms": shown_ooms,
            "too_large": [o["size"] for o in ooms if o["size"] > capacity],
            "baseline": base, "results": ranked, "fits": sum(not r["oom"] for r in rows),
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


def _device_text(result: dict[str, Any]) -> str:
    """The device the replays model, as the report names it."""
    mem = result.get("device_memory_bytes")
    return (f"the simulated {human_bytes(_SIMULATED_TOTAL)} device" if mem is None
            else f"the {human_bytes(mem)} device")


def _capacity(result: dict[str, Any]) -> int:
    mem = result.get("device_memory_bytes")
    return _SIMULATED_TOTAL if mem is None else int(mem)


def format_tune(result: dict[str, Any], path: str, device: int) -> str:
    """The human-readable report of :func:`tune_ops` (the device, the table, then the lines to
    use).

    Example::

        >>> from accelrt.memory.tools._tune import format_tune, tune_ops
        >>> print(format_tune(tune_ops([(True, 1, 512, 0)]), "t.json", 0).splitlines()[0])
        t.json: device 0, 1 operations, peak live 512 B
    """
    base = result["baseline"]
    rec = result["recorded_setting"]
    mem = result.get("device_memory_bytes")
    if rec:
        rec_note = ""
    elif result.get("settings_recorded"):
        rec_note = " (PyTorch's defaults, as recorded)"
    else:
        rec_note = " (no allocator settings recorded: PyTorch's defaults)"
    if mem is None:
        dev_line = (f"device memory: not recorded; replayed on a simulated "
                    f"{human_bytes(_SIMULATED_TOTAL)} device (pass --device-memory SIZE, e.g. "
                    "80GiB, to model your GPU)")
    else:
        dev_line = (f"device memory: {human_bytes(mem)} "
                    f"({result.get('capacity_source') or 'from --device-memory'})")
    lines = [(f"{terminal_safe(path, one_line=True)}: device {device}, {result['ops']:,} "
              f"operations, peak live {human_bytes(result['peak_live_bytes'])}"),
             f"recorded setting: {_shown(rec, recorded=True)}{rec_note}", dev_line]
    ooms = result.get("ooms") or []
    for o in ooms:
        free = ("" if o.get("device_free") is None
                else f" with {human_bytes(o['device_free'])} free on the device")
        lines.append(f"recorded out-of-memory: a request of {human_bytes(o['size'])}{free}; "
                     "replayed where it was made")
    pooled = result.get("private_pool_allocs") or 0
    if pooled:
        lines.append(f"private pools: {pooled:,} of the allocations were made in a private pool "
                     "(MemPool, graph capture); every setting replays them in a private pool of "
                     "the same id")
    for size in result.get("too_large") or []:
        lines.append(f"the request of {human_bytes(size)} that ran out of memory alone exceeds "
                     f"{_device_text(result)}: no setting can fit it; make that request "
                     "smaller (a smaller batch, shorter sequences) or use a larger device")
    if result["peak_live_bytes"] > _capacity(result) and not result.get("too_large"):
        lines.append(f"the history holds {human_bytes(result['peak_live_bytes'])} live at its "
                     f"peak, more than {_device_text(result)}: no setting can fit it")
    lines.append("")
    head = ("rank", "setting", "peak reserved", "saving", "mallocs+maps", "retries",
            "driver ms", "us/op")
    body = []
    rank = 0
    for r in result["results"]:
        mark = " (recorded)" if r is base else " *" if r["capped"] else ""
        shown = _shown(r["setting"], recorded=r is base) + mark
        if r["oom"]:
            body.append(("-", shown, "out of memory", "-", "-", "-", "-", "-"))
            continue
        rank += 1
        body.append((str(rank), shown, human_bytes(r["peak_reserved_bytes"]),
                     _saving_text(r), f"{r['device_mallocs'] + r['vm_maps']:,}",
                     f"{r['alloc_retries']:,}",
                     f"{r['driver_us_h100'] / 1000:.1f}", f"{r['us_per_op']:.2f}"))
    widths = [max(len(c) for c in col) for col in zip(head, *body)]
    for row in (head, *body):
        lines.append("  ".join(c.ljust(w) if j == 1 else c.rjust(w)
                               for j, (c, w) in enumerate(zip(row, widths))).rstrip())
    n_oom = len(result["results"]) - result.get("fits", len(result["results"]))
    lines.append(f"{result.get('fits', 0)} setting(s) fit {_device_text(result)}, ranked; "
                 f"{n_oom} would have run out of memory (-)"
                 + ("; retries: times the allocator had to free its cache to fit a request"
                    if mem is not None else ""))
    capped = [r for r in result["results"] if r["capped"] and r is not base]
    if capped:
        frac = _fraction(capped[0]["setting"])
        whose = "defaults'" if base["oom"] else "recorded"
        lines.append(f"* replayed with per_process_memory_fraction:{frac} (the {whose} peak "
                     f"reserved of {_device_text(result)}):")
        lines.append("  garbage_collection_threshold acts only under a memory fraction;")
        lines.append("  a cap fitted to one run is not recommended.")
    if base["oom"] and not all(r["oom"] for r in result["results"]):
        lines.append("the recorded setting ran out of memory replaying its own history on "
                     + _device_text(result) + _cap_text(rec, result))
    lines.append("")
    best, best_pt = result["best"], result["best_pytorch"]
    lines += _advice("PyTorch", best_pt, base, result)
    if best is not best_pt or best["oom"]:
        lines += _advice("accelrt", best, base, result)
    else:
        lines.append(f"accelrt: ACCELRT_ALLOC_CONF={best['setting']}" if best["setting"] else
                     "accelrt: leave ACCELRT_ALLOC_CONF unset")
    lines.append("(peak reserved on a simulated device; us/op is this machine's allocator time "
                 "per malloc/free, not the GPU's)")
    return "\n".join(lines)


def _advice(who: str, row: dict[str, Any], base: dict[str, Any],
            result: dict[str, Any]) -> list[str]:
    var = "PYTORCH_CUDA_ALLOC_CONF" if who == "PyTorch" else "ACCELRT_ALLOC_CONF"
    setting = pytorch_part(row["setting"]) if who == "PyTorch" else row["setting"]
    lines = []
    if row["oom"]:
        why = "; the request that ran out of memory is too large for any" \
            if result.get("too_large") else ""
        some = "" if all(r["oom"] for r in result["results"]) else f" {who} accepts"
        return [(f"{who}: every setting{some} ran out of {_device_text(result)}{why}; nothing "
                 "to recommend")]
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


def _cap_text(setting: str, result: dict[str, Any]) -> str:
    frac = _fraction(setting)
    if frac is None:
        return ""
    return (f":\n  its per_process_memory_fraction:{frac} caps the device at "
            f"{human_bytes(int(float(frac) * _capacity(result)))}, under the "
            f"{human_bytes(result['peak_live_bytes'])} this history\n  holds live at its peak: "
            "raise the fraction or leave it unset")


def _json_result(result: dict[str, Any], path: str, device: int) -> dict[str, Any]:
    best, best_pt = result["best"], result["best_pytorch"]

    def fitting(row: dict[str, Any], setting: str) -> str | None:
        # nothing to recommend (null) when even the best row ran out of memory: "" would
        # read as "the defaults fit"
        return None if row["oom"] else setting

    return {"trace": path, "device": device, "ops": result["ops"],
            "peak_live_bytes": result["peak_live_bytes"],
            "recorded_setting": result["recorded_setting"],
            "settings_recorded": result["settings_recorded"],
            "device_memory_bytes": result["device_memory_bytes"],
            "capacity_source": result["capacity_source"],
            "ooms": result["ooms"], "too_large": result["too_large"],
            "private_pool_allocs": result.get("private_pool_allocs", 0),
            "fits": result["fits"],
            "results": result["results"],
            "best": fitting(best, best["setting"]),
            "best_pytorch": fitting(best_pt, best_pt["setting"]),
            "pytorch_alloc_conf": fitting(best_pt, pytorch_part(best_pt["setting"])),
            "accelrt_alloc_conf": fitting(best, best["setting"])}


def tune_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``accelrt memory tune SNAPSHOT_OR_TRACE [--device N]
    [--device-memory SIZE] [--json]``.

    Returns the exit status: 0 on success, 1 when the file cannot be read or has no history to
    replay, 2 on bad arguments (a ``--device-memory`` that is not a size included).

    Example::

        >>> from accelrt.memory.tools._files import example_file
        >>> from accelrt.memory.tools._tune import tune_main
        >>> p = example_file("t.json", b'{"trace": [["alloc", 16, 512, 0], '
        ...                              b'["free_requested", 16, 512, 0]]}')
        >>> tune_main([p, "--json"])  # doctest: +ELLIPSIS
        {"trace": ..., "device": 0, "ops": 2, ...}
        0
    """
    parser = argparse.ArgumentParser(
        prog="accelrt memory tune",
        description="Replay a memory snapshot's history (or an allocation trace) under "
                    "candidate allocator settings on a simulated device of your GPU's memory, "
                    "say which settings would run out of memory, rank those that fit by peak "
                    "reserved memory, and print the PYTORCH_CUDA_ALLOC_CONF and "
                    "ACCELRT_ALLOC_CONF lines to use.")
    parser.add_argument("path", metavar="SNAPSHOT_OR_TRACE",
                        help="a snapshot pickle with history (torch.cuda.memory._dump_snapshot "
                             "or accelrt.memory.dump_snapshot) or a trace in the shared JSON "
                             "format (.json or .json.gz)")
    parser.add_argument("--device", type=int, default=None, metavar="N",
                        help="which device's history to replay (needed when several devices "
                             "have history)")
    parser.add_argument("--device-memory", default=None, metavar="SIZE",
                        help="the GPU's memory, e.g. 80GiB, 81559MiB or a byte count: every "
                             "setting is replayed under it (default: what a snapshot's "
                             "recorded out-of-memory shows, else a simulated 80 GiB device)")
    args = parse_args(parser, argv,
                      json_help="print one JSON object (every setting tried, ranked)")
    if isinstance(args, int):
        return args
    if args.device is not None and args.device < 0:
        print(f"accelrt memory tune: error: --device must be >= 0, got {args.device}",
              file=sys.stderr)
        return 2
    device_memory = None
    if args.device_memory is not None:
        try:
            device_memory = parse_device_memory(args.device_memory)
        except ValueError as exc:
            print(f"accelrt memory tune: error: {exc}", file=sys.stderr)
            return 2
    try:
        w = read_workload(args.path, args.device)
        recorded = recorded_setting(w.settings)
        source = "from --device-memory" if device_memory is not None else w.capacity_source
        if device_memory is None:
            device_memory = w.capacity
        total = len(w.ops) * 16
        progress = sys.stderr if total >= _PROGRESS_MIN_OPS and sys.stderr.isatty() else None
        result = tune_ops(w.ops, recorded, name=_trace_name(args.path), progress=progress,
                          device_memory=device_memory, ooms=w.ooms, capacity_source=source,
                          settings_recorded=settings_recorded(w.settings), plan=w.plan)
        result["private_pool_allocs"] = w.private_pool_allocs
    except (OSError, ValueError, MemoryError, RecursionError, OverflowError) as exc:
        print(f"accelrt memory tune: error: {terminal_safe(str(exc), one_line=True)}",
              file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(_json_result(result, args.path, w.device)))
    else:
        print(format_tune(result, args.path, w.device))
    return 0
