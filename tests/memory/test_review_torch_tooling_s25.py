"""Review by tests of accelrt's memory introspection output against PyTorch's own tooling.

Users take accelrt's ``memory_summary()``, ``memory_stats()`` and snapshots into PyTorch's
tools, so those must read them as they read PyTorch's own output. The expectations here were
observed by running torch 2.14.1 (a CUDA build on a machine without a GPU, so only its
CPU-side code ran) on the same data, and are written as literals: these tests run without
torch (CI has none). Where torch is installed, the ``*_torch`` tests run PyTorch's code itself
on accelrt's output: ``torch.cuda.memory_summary`` over accelrt's ``memory_stats()``, its
flattening of ``memory_stats_as_nested_dict()``, and ``torch.cuda._memory_viz`` (functions and
command line) on ``_snapshot()``, ``memory_snapshot()`` and ``dump_snapshot()`` files.

The deliberate differences: the summary's title names accelrt and the backend, and its OOM
line the backend (docs/memory.md, "The summary table"); snapshots carry ``library_roots``
(docs/memory.md, "Snapshots and the history trace").
"""

from __future__ import annotations

import collections
import contextlib
import copy
import itertools
import os
import pickle
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

import accelrt as acc
from accelrt import backends, memory
from accelrt.memory import _config, _registry
from accelrt.memory._allocator import DeviceCachingAllocator
from accelrt.memory._config import parse_config
from accelrt.memory._summary import format_summary
from accelrt.memory.viz import segsum
from accelrt.testing import SimulatedBackend

MiB = 1 << 20
_OTHER_STREAM = 7            # a stream of the simulated backend that other work runs on
_names = itertools.count()


def fresh_backend() -> str:
    """A new simulated backend (two devices of 1 GiB; stream work completes only when told)
    under a new name of fixed length, so that the summary's title is the same every run."""
    name = f"tooling{next(_names) % 1000:03d}"
    backends.register(name, lambda: SimulatedBackend(name=name, capacity=1 << 30,
                                                     device_count=2, auto_complete=False))
    return name


@contextlib.contextmanager
def workload(name: str) -> Iterator[memory.MemPool]:
    """Every kind of block on backend ``name``, with history recorded: small and large pool
    blocks, a split whose freed part stays cached (an inactive split block), a free waiting on
    another stream's work (``active_pending_free``), a private pool's segment, an
    out-of-memory error and a block on device 1. Yields the private pool; frees it all on
    exit."""
    b = backends.get_backend(name)
    d0, d1 = f"{name}:0", f"{name}:1"
    for d in (d0, d1):
        memory.record_memory_history(max_entries=10_000, device=d)
    live: list[int] = []
    pool = memory.MemPool()
    try:
        live.append(memory.caching_allocator_alloc(1000, d0))         # small pool
        live.append(memory.caching_allocator_alloc(3 * MiB, d0))      # 20 MiB segment, split
        memory.caching_allocator_delete(memory.caching_allocator_alloc(5 * MiB, d0))
        with memory.use_mem_pool(pool, d0):
            live.append(memory.caching_allocator_alloc(4 * MiB, d0))
        with pytest.raises(acc.OutOfMemoryError):
            memory.caching_allocator_alloc(2 << 30, d0)
        live.append(memory.caching_allocator_alloc(25 * MiB, d1))
        pending = memory.caching_allocator_alloc(2 * MiB, d0)
        a0 = _registry.peek_allocator(name, 0)
        assert a0 is not None
        a0.record_stream(pending, _OTHER_STREAM)
        b.launch_work(_OTHER_STREAM)          # still using the block when it is freed
        memory.caching_allocator_delete(pending)
        yield pool
    finally:
        b.complete_all()
        for p in live:
            memory.caching_allocator_delete(p)
        for d in (d0, d1):
            memory.record_memory_history(None, device=d)


def torch_summary(tm: Any, stats: dict[str, int], device: int, abbreviated: bool) -> str:
    """``torch.cuda.memory_summary`` (module ``tm``) of ``stats`` instead of CUDA's."""
    saved = tm.memory_stats, tm._get_device_index
    tm.memory_stats = lambda device=None: stats
    tm._get_device_index = lambda device, optional=False: device
    try:
        return str(tm.memory_summary(device, abbreviated=abbreviated))
    finally:
        tm.memory_stats, tm._get_device_index = saved



def huge_stats() -> dict[str, int]:
    """Flat stats at the edges of the units: int64's maximum, PiB and millions of counts, each
    just under its threshold too; pool rows far below their ``all`` row (printed in its unit);
    a 13-digit OOM count (wider than the 12 characters PyTorch pads it to)."""
    st: dict[str, int] = {"num_ooms": 1234567890123, "num_alloc_retries": 123456789}
    sizes = ((1 << 63) - 1, 768 << 50, (768 << 50) - 1, 1 << 62)
    counts = ((1 << 63) - 1, 750_000_000, 749_999_999, 749_999)
    metrics = ("allocated_bytes", "active_bytes", "requested_bytes", "reserved_bytes",
               "inactive_split_bytes", "allocation", "active", "segment", "inactive_split")
    for i, key in enumerate(metrics):
        small = 12_345 * (i + 1)
        values = sizes if key.endswith("bytes") else counts
        for col, v in zip(("current", "peak", "allocated", "freed"), values):
            st[f"{key}.all.{col}"] = v - i
            st[f"{key}.large_pool.{col}"] = v - i - small
            st[f"{key}.small_pool.{col}"] = small
    for col, a, b in zip(("current", "peak", "allocated", "freed"), counts, sizes):
        st[f"oversize_allocations.{col}"] = a
        st[f"oversize_segments.{col}"] = b
    return st


def summary_lines(text: str, backend: str, device: int) -> list[str]:
    """``text``'s lines with accelrt's title and OOM line (docs/memory.md: they name accelrt
    and the backend, widths kept) put back into PyTorch's words, checking them on the way."""
    lines = text.splitlines()
    assert lines[1] == "|" + (" " * 18 + f"accelrt {backend.upper()} memory summary, device ID "
                              f"{device}").ljust(75) + "|"
    lines[1] = "|" + f"{'':17} PyTorch CUDA memory summary, device ID {device:<17d} " + "|"
    m = re.fullmatch(r"\| {11} (\S+) OOMs: (\d+) *\| {4} device malloc retries: (\d+) +\|",
                     lines[3])
    assert m is not None and m.group(1) == backend.upper(), lines[3]
    lines[3] = ("|  " + f"{'':9} CUDA OOMs: {int(m.group(2)):<12d} | {'':6} cudaMalloc retries: "
                f"{int(m.group(3)):<8d}  " + "|")
    return lines


# What torch 2.14.1's memory_summary prints for the stats of workload() on device 0 (torch's
# own memory_summary run over accelrt's memory_stats(); observed on torch 2.14.1). The
# abbreviated table is the same without the "from ... pool" rows.
TORCH_WORKLOAD_SUMMARY = """\
|===========================================================================|
|                  PyTorch CUDA memory summary, device ID 0                 |
|---------------------------------------------------------------------------|
|            CUDA OOMs: 1            |        cudaMalloc retries: 1         |
|===========================================================================|
|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |
|---------------------------------------------------------------------------|
| Allocated memory      |   7169 KiB |   9217 KiB |  14337 KiB |   7168 KiB |
|       from large pool |   7168 KiB |   9216 KiB |  14336 KiB |   7168 KiB |
|       from small pool |      1 KiB |      1 KiB |      1 KiB |      0 KiB |
|---------------------------------------------------------------------------|
| Active memory         |   9217 KiB |   9217 KiB |  14337 KiB |   5120 KiB |
|       from large pool |   9216 KiB |   9216 KiB |  14336 KiB |   5120 KiB |
|       from small pool |      1 KiB |      1 KiB |      1 KiB |      0 KiB |
|---------------------------------------------------------------------------|
| Requested memory      |   9216 KiB |   9216 KiB |  14336 KiB |   5120 KiB |
|       from large pool |   9216 KiB |   9216 KiB |  14336 KiB |   5120 KiB |
|       from small pool |      0 KiB |      0 KiB |      0 KiB |      0 KiB |
|---------------------------------------------------------------------------|
| GPU reserved memory   |  43008 KiB |  43008 KiB |  43008 KiB |      0 B   |
|       from large pool |  40960 KiB |  40960 KiB |  40960 KiB |      0 B   |
|       from small pool |   2048 KiB |   2048 KiB |   2048 KiB |      0 B   |
|---------------------------------------------------------------------------|
| Non-releasable memory |  33791 KiB |  35839 KiB |  40959 KiB |   7168 KiB |
|       from large pool |  31744 KiB |  33792 KiB |  38912 KiB |   7168 KiB |
|       from small pool |   2047 KiB |   2047 KiB |   2047 KiB |      0 KiB |
|---------------------------------------------------------------------------|
| Allocations           |       3    |       4    |       5    |       2    |
|       from large pool |       2    |       3    |       4    |       2    |
|       from small pool |       1    |       1    |       1    |       0    |
|---------------------------------------------------------------------------|
| Active allocs         |       4    |       4    |       5    |       1    |
|       from large pool |       3    |       3    |       4    |       1    |
|       from small pool |       1    |       1    |       1    |       0    |
|---------------------------------------------------------------------------|
| GPU reserved segments |       3    |       3    |       3    |       0    |
|       from large pool |       2    |       2    |       2    |       0    |
|       from small pool |       1    |       1    |       1    |       0    |
|---------------------------------------------------------------------------|
| Non-releasable allocs |       3    |       3    |       3    |       0    |
|       from large pool |       2    |       2    |       2    |       0    |
|       from small pool |       1    |       1    |       1    |       0    |
|---------------------------------------------------------------------------|
| Oversize allocations  |       0    |       0    |       0    |       0    |
|---------------------------------------------------------------------------|
| Oversize GPU segments |       0    |       0    |       0    |       0    |
|===========================================================================|
"""

# torch 2.14.1's memory_summary(3) of huge_stats() (observed): int64's maximum, PiB, counts
# in millions; a number wider than its field pushes the rest of the line right.
TORCH_HUGE_SUMMARY = """\
|===========================================================================|
|                  PyTorch CUDA memory summary, device ID 3                 |
|---------------------------------------------------------------------------|
|            CUDA OOMs: 1234567890123 |        cudaMalloc retries: 123456789  |
|===========================================================================|
|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |
|---------------------------------------------------------------------------|
| Allocated memory      |   8191 PiB |    768 PiB |    767 PiB |   4096 PiB |
|       from large pool |   8191 PiB |    767 PiB |    767 PiB |   4095 PiB |
|       from small pool |      0 PiB |      0 PiB |      0 PiB |      0 PiB |
|---------------------------------------------------------------------------|
| Active memory         |   8191 PiB |    767 PiB |    767 PiB |   4095 PiB |
|       from large pool |   8191 PiB |    767 PiB |    767 PiB |   4095 PiB |
|       from small pool |      0 PiB |      0 PiB |      0 PiB |      0 PiB |
|---------------------------------------------------------------------------|
| Requested memory      |   8191 PiB |    767 PiB |    767 PiB |   4095 PiB |
|       from large pool |   8191 PiB |    767 PiB |    767 PiB |   4095 PiB |
|       from small pool |      0 PiB |      0 PiB |      0 PiB |      0 PiB |
|---------------------------------------------------------------------------|
| GPU reserved memory   |   8191 PiB |    767 PiB |    767 PiB |   4095 PiB |
|       from large pool |   8191 PiB |    767 PiB |    767 PiB |   4095 PiB |
|       from small pool |      0 PiB |      0 PiB |      0 PiB |      0 PiB |
|---------------------------------------------------------------------------|
| Non-releasable memory |   8191 PiB |    767 PiB |    767 PiB |   4095 PiB |
|       from large pool |   8191 PiB |    767 PiB |    767 PiB |   4095 PiB |
|       from small pool |      0 PiB |      0 PiB |      0 PiB |      0 PiB |
|---------------------------------------------------------------------------|
| Allocations           | 9223372036854 M  |  749999 K  |  749999 K  |  749994    |
|       from large pool | 9223372036854 M  |  749925 K  |  749925 K  |  675924    |
|       from small pool |       0 M  |      74 K  |      74 K  |   74070    |
|---------------------------------------------------------------------------|
| Active allocs         | 9223372036854 M  |  749999 K  |  749999 K  |  749993    |
|       from large pool | 9223372036854 M  |  749913 K  |  749913 K  |  663578    |
|       from small pool |       0 M  |      86 K  |      86 K  |   86415    |
|---------------------------------------------------------------------------|
| GPU reserved segments | 9223372036854 M  |  749999 K  |  749999 K  |  749992    |
|       from large pool | 9223372036854 M  |  749901 K  |  749901 K  |  651232    |
|       from small pool |       0 M  |      98 K  |      98 K  |   98760    |
|---------------------------------------------------------------------------|
| Non-releasable allocs | 9223372036854 M  |  749999 K  |  749999 K  |  749991    |
|       from large pool | 9223372036854 M  |  749888 K  |  749888 K  |  638886    |
|       from small pool |       0 M  |     111 K  |     111 K  |  111105    |
|---------------------------------------------------------------------------|
| Oversize allocations  | 9223372036854 M  |     750 M  |  749999 K  |  749999    |
|---------------------------------------------------------------------------|
| Oversize GPU segments | 9223372036854 M  | 864691128455 M  | 864691128455 M  | 4611686018427 M  |
|===========================================================================|
"""

# torch 2.14.1's memory_summary(1, abbreviated=True) of a started allocator that did nothing
# (every stat 0; observed): what accelrt prints for a device whose allocator never started.
TORCH_ZERO_SUMMARY = """\
|===========================================================================|
|                  PyTorch CUDA memory summary, device ID 1                 |
|---------------------------------------------------------------------------|
|            CUDA OOMs: 0            |        cudaMalloc retries: 0         |
|===========================================================================|
|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |
|---------------------------------------------------------------------------|
| Allocated memory      |      0 B   |      0 B   |      0 B   |      0 B   |
|---------------------------------------------------------------------------|
| Active memory         |      0 B   |      0 B   |      0 B   |      0 B   |
|---------------------------------------------------------------------------|
| Requested memory      |      0 B   |      0 B   |      0 B   |      0 B   |
|---------------------------------------------------------------------------|
| GPU reserved memory   |      0 B   |      0 B   |      0 B   |      0 B   |
|---------------------------------------------------------------------------|
| Non-releasable memory |      0 B   |      0 B   |      0 B   |      0 B   |
|---------------------------------------------------------------------------|
| Allocations           |       0    |       0    |       0    |       0    |
|---------------------------------------------------------------------------|
| Active allocs         |       0    |       0    |       0    |       0    |
|---------------------------------------------------------------------------|
| GPU reserved segments |       0    |       0    |       0    |       0    |
|---------------------------------------------------------------------------|
| Non-releasable allocs |       0    |       0    |       0    |       0    |
|---------------------------------------------------------------------------|
| Oversize allocations  |       0    |       0    |       0    |       0    |
|---------------------------------------------------------------------------|
| Oversize GPU segments |       0    |       0    |       0    |       0    |
|===========================================================================|
"""


# torch 2.14.1's memory_summary(0, abbreviated=True) of oversize_stats() (observed).
TORCH_OVERSIZE_SUMMARY = """\
|===========================================================================|
|                  PyTorch CUDA memory summary, device ID 0                 |
|---------------------------------------------------------------------------|
|            CUDA OOMs: 0            |        cudaMalloc retries: 0         |
|===========================================================================|
|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |
|---------------------------------------------------------------------------|
| Allocated memory      |  97280 KiB |  97280 KiB | 128000 KiB |  30720 KiB |
|---------------------------------------------------------------------------|
| Active memory         |  97280 KiB |  97280 KiB | 128000 KiB |  30720 KiB |
|---------------------------------------------------------------------------|
| Requested memory      |  92160 KiB |  92160 KiB | 122880 KiB |  30720 KiB |
|---------------------------------------------------------------------------|
| GPU reserved memory   | 112640 KiB | 112640 KiB | 112640 KiB |      0 B   |
|---------------------------------------------------------------------------|
| Non-releasable memory |  15360 KiB |  15360 KiB |  15360 KiB |      0 B   |
|---------------------------------------------------------------------------|
| Allocations           |       4    |       4    |       5    |       1    |
|---------------------------------------------------------------------------|
| Active allocs         |       4    |       4    |       5    |       1    |
|---------------------------------------------------------------------------|
| GPU reserved segments |       4    |       4    |       4    |       0    |
|---------------------------------------------------------------------------|
| Non-releasable allocs |       1    |       1    |       1    |       0    |
|---------------------------------------------------------------------------|
| Oversize allocations  |       3    |       3    |       4    |       1    |
|---------------------------------------------------------------------------|
| Oversize GPU segments |       4    |       4    |       4    |       0    |
|===========================================================================|
"""


@contextlib.contextmanager
def oversize_stats() -> Iterator[dict[str, int]]:
    """The stats of an allocator with ``max_split_size_mb:20``: three 30 MiB (oversize)
    blocks, one freed and its cached block reused whole by a 25 MiB request (oversize too),
    and a 5 MiB block in a 20 MiB segment (a segment of max_split_size counts as oversize, as
    PyTorch's alloc_block counts it)."""
    a = DeviceCachingAllocator(SimulatedBackend(capacity=1 << 30), 0,
                               parse_config("max_split_size_mb:20"))
    ps = [a.malloc(30 * MiB, 0) for _ in range(3)]
    a.free(ps.pop())
    ps += [a.malloc(25 * MiB, 0), a.malloc(5 * MiB, 0)]
    try:
        yield a.sorted_stats()
    finally:
        for p in ps:
            a.free(p)


def abbreviate(table: str) -> str:
    return "".join(line for line in table.splitlines(keepends=True) if "from " not in line)


# ====================================================================== memory_summary

@pytest.mark.parametrize("abbreviated", [False, True])
def test_summary_of_a_workload_is_torchs(abbreviated: bool) -> None:
    name = fresh_backend()
    with workload(name):
        text = memory.memory_summary(f"{name}:0", abbreviated=abbreviated)
    want = TORCH_WORKLOAD_SUMMARY if not abbreviated else abbreviate(TORCH_WORKLOAD_SUMMARY)
    assert text.endswith("|\n")
    assert summary_lines(text, name, 0) == want.splitlines()


def test_summary_at_the_edges_of_the_units_is_torchs() -> None:
    text = format_summary(huge_stats(), 3, "cuda")
    assert summary_lines(text, "cuda", 3) == TORCH_HUGE_SUMMARY.splitlines()
    assert summary_lines(format_summary(huge_stats(), 3, "cuda", abbreviated=True), "cuda", 3) \
        == abbreviate(TORCH_HUGE_SUMMARY).splitlines()


def test_summary_of_oversize_blocks_is_torchs() -> None:
    with oversize_stats() as st:
        text = format_summary(st, 0, "cpu", abbreviated=True)
    assert summary_lines(text, "cpu", 0) == TORCH_OVERSIZE_SUMMARY.splitlines()


def test_summary_of_a_device_that_never_allocated_is_torchs_zero_table() -> None:
    name = fresh_backend()
    text = memory.memory_summary(f"{name}:1", abbreviated=True)
    assert memory.memory_stats(f"{name}:1") == {}           # the allocator did not start
    assert summary_lines(text, name, 1) == TORCH_ZERO_SUMMARY.splitlines()


# ====================================================================== memory_stats

def flatten_as_torch(nested: dict[Any, Any]) -> list[tuple[str, Any]]:
    """torch.cuda.memory_stats' flattening of memory_stats_as_nested_dict: dotted paths, a
    tuple key (a private pool id) joined with "_", other keys with str(), pairs sorted."""
    out: list[tuple[str, Any]] = []

    def walk(prefix: str, obj: Any) -> None:
        if not isinstance(obj, dict):
            out.append((prefix, obj))
            return
        for k, v in obj.items():
            part = k if isinstance(k, str) else "_".join(map(str, k)) if isinstance(k, tuple) \
                else str(k)
            walk(f"{prefix}.{part}" if prefix else part, v)

    walk("", nested)
    return sorted(out)


def test_flat_stats_are_torchs_flattening_of_the_nested_ones() -> None:
    name = fresh_backend()
    d0 = f"{name}:0"
    with workload(name) as pool:
        # more pools until their ids have two lengths ("0_10" sorts before "0_9"); a pool's
        # entry stays after it is gone, its segment released
        ids = [pool.id]
        while len({len(str(i[1])) for i in ids}) < 2:
            p = memory.MemPool()
            with memory.use_mem_pool(p, d0):
                memory.caching_allocator_delete(memory.caching_allocator_alloc(512, d0))
            ids.append(p.id)
            del p
        flat = memory.memory_stats(d0)
        nested = memory.memory_stats_as_nested_dict(d0)
    assert type(flat) is collections.OrderedDict and type(nested) is dict
    assert list(flat.items()) == flatten_as_torch(nested)
    assert sorted(nested["reserved_bytes_by_private_pools"]) == sorted(ids)
    assert list(flat) != sorted(flat, key=lambda k: [int(x) if x.isdigit() else x
                                                    for x in re.split(r"[._]", k)])
    assert {type(v) for v in flat.values()} == {int}
    unused = f"{fresh_backend()}:0"
    assert memory.memory_stats_as_nested_dict(unused) == {}     # before any use: as torch
    assert flatten_as_torch({}) == list(memory.memory_stats(unused).items()) == []


# ====================================================================== snapshots

# torch 2.14.1's torch.cuda.memory._snapshot() keys, in order (observed: its
# _cuda_memorySnapshot and _dump_snapshot run without a GPU); accelrt adds library_roots last.
TORCH_SNAPSHOT_KEYS = ["segments", "device_traces", "allocator_settings",
                       "external_annotations", "host_segments", "host_traces"]

# torch 2.14.1's allocator_settings with PYTORCH_CUDA_ALLOC_CONF unset (observed), in order;
# the other settings below change only the keys they name.
TORCH_DEFAULT_SETTINGS: dict[str, Any] = {
    "PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1, "garbage_collection_threshold": 0.0,
    "expandable_segments": False, "pinned_num_register_threads": 1,
    "release_lock_on_cudamalloc": False, "pinned_use_cuda_host_register": False,
    "graph_capture_record_stream_reuse": False, "max_round_threshold": -1,
    "max_cached_size": -1,
    "roundup_power2_divisions": {str(1 << k): 0 for k in range(16)},
}


@pytest.mark.parametrize(("conf", "changed"), [
    ("", {}),
    # observed on torch 2.14.1 with PYTORCH_CUDA_ALLOC_CONF set to conf:
    ("pinned_max_round_threshold_mb:64", {"max_round_threshold": 64 * MiB}),
    ("pinned_max_cached_size_mb:128,pinned_max_round_threshold_mb:3",
     {"max_round_threshold": 3 * MiB, "max_cached_size": 128 * MiB}),
    ("pinned_max_round_threshold_mb:0,pinned_max_cached_size_mb:17592186044415",
     {"max_round_threshold": 0, "max_cached_size": -MiB}),       # clamped, then int64
    ("pinned_max_round_threshold_mb:99999999999999999", {"max_round_threshold": -MiB}),
    (("max_split_size_mb:300,roundup_power2_divisions:[256:4,>:8],expandable_segments:True,"
      "garbage_collection_threshold:0.5"),
     {"max_split_size": 300 * MiB, "garbage_collection_threshold": 0.5,
      "expandable_segments": True,
      "roundup_power2_divisions": {str(1 << k): 4 if k <= 8 else 8 for k in range(16)}}),
])
def test_snapshot_settings_are_torchs(monkeypatch: pytest.MonkeyPatch, conf: str,
                                      changed: dict[str, Any]) -> None:
    monkeypatch.setattr(_config, "_current", None)
    monkeypatch.setattr(_registry, "_allocators", {})
    monkeypatch.setenv(_config.ENV_VAR, conf)
    snap = memory._snapshot(fresh_backend())
    want = {**TORCH_DEFAULT_SETTINGS, "PYTORCH_CUDA_ALLOC_CONF": conf, **changed}
    settings = snap["allocator_settings"]
    assert list(settings.items()) == list(want.items())
    assert [type(v) for v in settings.values()] == [type(v) for v in want.values()]


def test_snapshot_top_level_keys_are_torchs(tmp_path: Any) -> None:
    name = fresh_backend()
    with workload(name):
        path = tmp_path / "snap.pickle"
        memory.dump_snapshot(path)                  # the current accelerator's
        snaps = [memory._snapshot(name), acc.cpu.memory._snapshot()]
    with open(path, "rb") as f:
        snaps.append(pickle.load(f))
    for snap in snaps:
        assert list(snap) == [*TORCH_SNAPSHOT_KEYS, "library_roots"]
        assert snap["host_segments"] == [] and snap["host_traces"] == []


# The order in which torch 2.14's _cuda_memorySnapshot fills each dict (a segment or block
# whose stack was gathered has its "frames" put last, after the gathering); the keys of the
# TypedDicts of torch.cuda.memory._snapshot's docstring are among them.
SEGMENT_ORDER = ["device", "address", "total_size", "allocated_size", "active_size",
                 "requested_size", "stream", "segment_type", "segment_pool_id",
                 "is_expandable", "frames", "blocks"]
BLOCK_ORDER = ["address", "size", "requested_size", "state", "frames"]
ENTRY_ORDER = ["action", "addr", "size", "stream", "time_us", "compile_context",
               "user_metadata", "pool_id", "frames"]
DOCUMENTED = {   # torch 2.14.1's _snapshot docstring: Segment, Block, TraceEntry, Frame
    "segment": {"address": int, "total_size": int, "stream": int, "segment_type": str,
                "segment_pool_id": tuple, "allocated_size": int, "active_size": int,
                "blocks": list},
    "block": {"size": int, "requested_size": int, "address": int, "state": str,
              "frames": list},
    "entry": {"action": str, "addr": int, "frames": list, "size": int, "stream": int,
              "pool_id": tuple},
    "frame": {"filename": str, "line": int, "name": str},
}


def check_types(d: dict[str, Any], kind: str) -> None:
    for key, typ in DOCUMENTED[kind].items():
        if key in d:
            assert type(d[key]) is typ, (kind, key, d[key])
    for f in d.get("frames", ()):
        assert list(f) == list(DOCUMENTED["frame"]) and \
            [type(v) for v in f.values()] == list(DOCUMENTED["frame"].values())


def test_snapshot_fields_follow_torchs_format() -> None:
    name = fresh_backend()
    with workload(name) as pool:
        memory._snapshot(name)             # its "snapshot" entries are in the next ones
        snaps = [memory._snapshot(name), pickle.loads(pickle.dumps(memory._snapshot(name)))]
        pool_segments = pool.snapshot()
    for snap in snaps:
        states = set()
        for seg in snap["segments"]:
            assert list(seg) == SEGMENT_ORDER
            assert set(DOCUMENTED["segment"]) <= set(seg)
            check_types(seg, "segment")
            assert seg["segment_type"] in ("small", "large")
            for blk in seg["blocks"]:
                assert list(blk) == BLOCK_ORDER
                check_types(blk, "block")
                states.add(blk["state"])
        # the docstring's "active_awaiting_free" is written "active_pending_free" by torch
        # 2.14.1's libtorch_python (its string table has no other name)
        assert states == {"active_allocated", "active_pending_free", "inactive"}
        entries = [e for trace in snap["device_traces"] for e in trace]
        assert {e["action"] for e in entries} == {"segment_alloc", "alloc", "free_requested",
                                                  "free_completed", "oom", "snapshot"}
        for e in entries:
            order = ENTRY_ORDER if e["action"] != "oom" else \
                [k if k != "addr" else "device_free" for k in ENTRY_ORDER]
            # an entry recorded without a stack (here the "snapshot" one) has no "frames"
            # key, as in torch 2.14.1
            assert list(e) == (order if e["action"] != "snapshot" else order[:-1])
            check_types(e, "entry")
            assert type(e["time_us"]) is int and e["compile_context"] == "N/A"
    assert [s["segment_pool_id"] for s in pool_segments] == [pool.id]


# The segments and blocks of workload() (device, type, size, allocated, active, requested,
# pool; blocks as state, size, requested size): what torch's _memory_viz reads from them
# (the segsum below is torch 2.14.1's own of this snapshot, observed).
WORKLOAD_SEGMENTS = [
    (0, "small", 2 * MiB, 1024, 1024, 1000, (0, 0),
     [("active_allocated", 1024, 1000), ("inactive", 2 * MiB - 1024, 0)]),
    (0, "large", 20 * MiB, 3 * MiB, 5 * MiB, 5 * MiB, (0, 0),
     [("active_allocated", 3 * MiB, 3 * MiB), ("active_pending_free", 2 * MiB, 2 * MiB),
      ("inactive", 15 * MiB, 0)]),
    (0, "large", 20 * MiB, 4 * MiB, 4 * MiB, 4 * MiB, "the MemPool's id",
     [("active_allocated", 4 * MiB, 4 * MiB), ("inactive", 16 * MiB, 0)]),
    (1, "large", 26 * MiB, 26 * MiB, 26 * MiB, 25 * MiB, (0, 0),
     [("active_allocated", 26 * MiB, 25 * MiB)]),
]
TORCH_WORKLOAD_SEGSUM = """\
Summary of segments >= 20.0MiB in size
[a] 20.0MiB allocated, 17.0MiB (0.0% internal) free
[a] 20.0MiB allocated, 16.0MiB (0.0% internal) free
[aa] 26.0MiB allocated, 1.0MiB (100.0% internal) free
segments: 4
total_reserved: 68.0MiB
total_allocated: 32.0MiB
total_free: 36.0MiB (2.8% internal)

Legend:
    [a     ] - a segment in the allocator
     ^-- a page 20.0MiB of memory in the segment
    a-z: pages filled with a single block's content
    ' ': page is completely free
    *: page if completely full with multiple blocks
    0-9: page is partially full with tensors of multiple blocks (9 == 90% full)
    (X% internal) - of the free memory, X% is free because we rounded the size of the allocation.
"""


def describe(segments: list[dict[str, Any]], pool: memory.MemPool) -> list[Any]:
    return [(s["device"], s["segment_type"], s["total_size"], s["allocated_size"],
             s["active_size"], s["requested_size"],
             "the MemPool's id" if s["segment_pool_id"] == pool.id else s["segment_pool_id"],
             [(b["state"], b["size"], b["requested_size"]) for b in s["blocks"]])
            for s in segments]


def test_snapshot_blocks_and_segsum_are_what_torch_reads() -> None:
    name = fresh_backend()
    with workload(name) as pool:
        snap = memory._snapshot(name)
        stats = memory.memory_stats(f"{name}:0")
    assert describe(snap["segments"], pool) == WORKLOAD_SEGMENTS
    for seg in snap["segments"]:                   # torch's segsum and trace rely on these
        addr = seg["address"]
        for b in seg["blocks"]:
            assert b["address"] == addr
            addr += b["size"]
        assert addr - seg["address"] == seg["total_size"]
    on0 = [s for s in snap["segments"] if s["device"] == 0]
    assert sum(s["total_size"] for s in on0) == stats["reserved_bytes.all.current"]
    assert sum(s["allocated_size"] for s in on0) == stats["allocated_bytes.all.current"]
    assert sum(s["active_size"] for s in on0) == stats["active_bytes.all.current"]
    assert sum(s["requested_size"] for s in on0) == stats["requested_bytes.all.current"]
    # accelrt's segsum has torch's layout; only its legend words two lines its own way
    ours, theirs = segsum(snap).splitlines(), TORCH_WORKLOAD_SEGSUM.splitlines()
    reworded = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    assert len(ours) == len(theirs) and reworded == [len(theirs) - 3, len(theirs) - 1]


# ====================================================================== against torch itself

def test_torch_memory_summary_reads_accelrt_stats_torch() -> None:
    tm = pytest.importorskip("torch.cuda.memory")
    from accelrt.memory._stats import FLAT_KEYS
    name = fresh_backend()
    with workload(name):
        for dev in (0, 1):
            stats = memory.memory_stats(f"{name}:{dev}")
            for abbreviated in (False, True):
                ours = memory.memory_summary(f"{name}:{dev}", abbreviated=abbreviated)
                assert summary_lines(ours, name, dev) == \
                    torch_summary(tm, stats, dev, abbreviated).splitlines()
        assert torch_summary(tm, memory.memory_stats(f"{name}:0"), 0, False) == \
            TORCH_WORKLOAD_SUMMARY
    assert torch_summary(tm, huge_stats(), 3, False) == TORCH_HUGE_SUMMARY
    with oversize_stats() as st:
        assert torch_summary(tm, st, 0, True) == TORCH_OVERSIZE_SUMMARY
    assert torch_summary(tm, dict.fromkeys(FLAT_KEYS, 0), 1, True) == TORCH_ZERO_SUMMARY


def test_torch_flattens_accelrt_nested_stats_to_accelrt_flat_stats_torch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    tm = pytest.importorskip("torch.cuda.memory")
    name = fresh_backend()
    with workload(name):
        nested = memory.memory_stats_as_nested_dict(f"{name}:0")
        flat = memory.memory_stats(f"{name}:0")
    monkeypatch.setattr(tm, "memory_stats_as_nested_dict", lambda device=None: nested)
    theirs = tm.memory_stats(0)                    # torch's own flattening and sort
    assert list(theirs.items()) == list(flat.items()) == flatten_as_torch(nested)


def test_torch_memory_viz_reads_accelrt_snapshots_torch(tmp_path: Any) -> None:
    mv = pytest.importorskip("torch.cuda._memory_viz")
    name = fresh_backend()
    with workload(name) as pool:
        before = memory._snapshot(name)
        path = tmp_path / "snap.pickle"
        with open(path, "wb") as f:
            pickle.dump(before, f)
        segs = memory.memory_snapshot()            # the current accelerator's: another backend
        pool_segs = pool.snapshot()
    with open(path, "rb") as f:
        snap = pickle.load(f)
    assert mv.segsum(copy.deepcopy(snap)) == TORCH_WORKLOAD_SEGSUM
    assert mv.segsum({"segments": copy.deepcopy(pool_segs)}).count("\n[a]") == 1
    trace = mv.trace(copy.deepcopy(snap))
    for line in ("Device 0 ----", "Device 1 ----", "b = a[0:1000.0B]", "d = c[0:3.0MiB]",
                 "raise OutOfMemoryError # 2.0GiB requested", "del h # 2.0MiB",
                 "b = a[0:25.0MiB]"):
        assert line in trace

    def ident(lines: str) -> str:
        return lines

    for fn in (mv.segments, mv.memory):            # every block's bytes, accounted once
        lines = fn(copy.deepcopy(snap), format_flamegraph=ident).splitlines()
        assert sum(int(line.rsplit(" ", 1)[1]) for line in lines) == \
            sum(s["total_size"] for s in snap["segments"])
    folded = mv.compare(snap["segments"], snap["segments"][1:], format_flamegraph=ident)
    assert {line.split(";")[:3] == ["only_before", "stream_0",
                                    f"seg_{snap['segments'][0]['address']}"]
            for line in folded.splitlines()} == {True}
    for page in (mv.trace_plot(copy.deepcopy(snap)), mv.segment_plot(copy.deepcopy(snap)),
                 mv.trace_plot(copy.deepcopy(snap), plot_segments=True, filter_freed=True)):
        assert "add_local_files" in page
    assert isinstance(segs, list)


def test_torch_memory_viz_command_line_reads_a_dump_torch(tmp_path: Any) -> None:
    torch = pytest.importorskip("torch")
    name = fresh_backend()
    snap_file = tmp_path / "snap.pickle"
    with workload(name):
        from accelrt.memory._snapshot import dump_snapshot
        dump_snapshot(snap_file, memory._snapshot(name))
    home = tmp_path / "home"                        # flamegraph.pl: echo the folded lines
    (home / ".cache").mkdir(parents=True)
    script = home / ".cache" / "flamegraph.pl"
    script.write_text("#!/bin/sh\ncat\n")
    script.chmod(0o755)
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": os.pathsep.join(
        [os.path.dirname(os.path.dirname(torch.__file__)), *sys.path])}
    # ("compare" is left out: torch 2.14.1's command line passes it whole snapshot dicts, which
    # it iterates as segment lists, so it fails on PyTorch's own dumps as well)
    for args in (["stats"], ["trace"], ["segments", "-o", "seg.txt"],
                 ["memory", "-o", "mem.txt"], ["trace_plot", "-o", "t.html"],
                 ["segment_plot", "-o", "s.html"]):
        r = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", args[0],
                            str(snap_file), *args[1:]], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, (args, r.stderr[-2000:])
        if args[0] == "stats":
            assert r.stdout.startswith(TORCH_WORKLOAD_SEGSUM)
    assert "inactive;<gaps> 15728640" in (tmp_path / "seg.txt").read_text()
