"""memory_summary: PyTorch's table layout, byte for byte, from a stats dict."""

from __future__ import annotations

import pytest

from accelrt.memory._summary import format_count, format_size, format_summary

MiB = 1 << 20


def _stat(prefix: str, all_: int, large: int, small: int, freed: bool = False) -> dict[str, int]:
    out = {}
    for pool, v in (("all", all_), ("large_pool", large), ("small_pool", small)):
        for col in ("current", "peak", "allocated"):
            out[f"{prefix}.{pool}.{col}"] = v
        out[f"{prefix}.{pool}.freed"] = 0
    return out


def worked_example_stats() -> dict[str, int]:
    """ALLOCATOR_SPEC §5/§13: one live 3 MiB block and one live 1000-byte block."""
    st: dict[str, int] = {}
    st |= _stat("allocated_bytes", 3 * MiB + 1024, 3 * MiB, 1024)
    st |= _stat("active_bytes", 3 * MiB + 1024, 3 * MiB, 1024)
    st |= _stat("requested_bytes", 3 * MiB + 1000, 3 * MiB, 1000)
    st |= _stat("reserved_bytes", 22 * MiB, 20 * MiB, 2 * MiB)
    st |= _stat("inactive_split_bytes", 17 * MiB + 2 * MiB - 1024, 17 * MiB, 2 * MiB - 1024)
    for key in ("allocation", "active", "segment", "inactive_split"):
        st |= _stat(key, 2, 1, 1)
    for key in ("oversize_allocations", "oversize_segments"):
        for col in ("current", "peak", "allocated", "freed"):
            st[f"{key}.{col}"] = 0
    st |= {"num_alloc_retries": 0, "num_ooms": 0, "num_sync_all_streams": 0,
           "num_device_alloc": 2, "num_device_free": 0, "max_split_size": -1}
    return st


EXPECTED_HEAD = """\
|===========================================================================|
|                  accelrt CUDA memory summary, device ID 0                 |
|---------------------------------------------------------------------------|
|            CUDA OOMs: 0            |     device malloc retries: 0         |
|===========================================================================|
|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |
|---------------------------------------------------------------------------|
| Allocated memory      |   3073 KiB |   3073 KiB |   3073 KiB |      0 B   |
|       from large pool |   3072 KiB |   3072 KiB |   3072 KiB |      0 B   |
|       from small pool |      1 KiB |      1 KiB |      1 KiB |      0 B   |
|---------------------------------------------------------------------------|
| Active memory         |   3073 KiB |   3073 KiB |   3073 KiB |      0 B   |
|       from large pool |   3072 KiB |   3072 KiB |   3072 KiB |      0 B   |
|       from small pool |      1 KiB |      1 KiB |      1 KiB |      0 B   |
|---------------------------------------------------------------------------|
| Requested memory      |   3072 KiB |   3072 KiB |   3072 KiB |      0 B   |
|       from large pool |   3072 KiB |   3072 KiB |   3072 KiB |      0 B   |
|       from small pool |      0 KiB |      0 KiB |      0 KiB |      0 B   |
|---------------------------------------------------------------------------|
| GPU reserved memory   |  22528 KiB |  22528 KiB |  22528 KiB |      0 B   |
|       from large pool |  20480 KiB |  20480 KiB |  20480 KiB |      0 B   |
|       from small pool |   2048 KiB |   2048 KiB |   2048 KiB |      0 B   |
|---------------------------------------------------------------------------|
| Non-releasable memory |  19455 KiB |  19455 KiB |  19455 KiB |      0 B   |
|       from large pool |  17408 KiB |  17408 KiB |  17408 KiB |      0 B   |
|       from small pool |   2047 KiB |   2047 KiB |   2047 KiB |      0 B   |
|---------------------------------------------------------------------------|
| Allocations           |       2    |       2    |       2    |       0    |
|       from large pool |       1    |       1    |       1    |       0    |
|       from small pool |       1    |       1    |       1    |       0    |
"""

EXPECTED_TAIL = """\
|---------------------------------------------------------------------------|
| Oversize allocations  |       0    |       0    |       0    |       0    |
|---------------------------------------------------------------------------|
| Oversize GPU segments |       0    |       0    |       0    |       0    |
|===========================================================================|
"""


def test_worked_example_byte_exact() -> None:
    text = format_summary(worked_example_stats(), device=0, backend="cuda")
    assert text.startswith(EXPECTED_HEAD)
    assert text.endswith(EXPECTED_TAIL)
    lines = text.splitlines()
    assert len(lines) == 47
    assert {len(line) for line in lines} == {77}
    assert "| GPU reserved segments |       2    |       2    |       2    |       0    |" in lines
    assert "| Non-releasable allocs |       2    |       2    |       2    |       0    |" in lines


def test_abbreviated_drops_pool_rows() -> None:
    text = format_summary(worked_example_stats(), device=0, backend="cuda", abbreviated=True)
    assert "from large pool" not in text and "from small pool" not in text
    assert "| Allocated memory      |   3073 KiB |   3073 KiB |   3073 KiB |      0 B   |" in text
    assert len(text.splitlines()) == 29


@pytest.mark.parametrize("backend", ["cpu", "cuda", "opencl", "mydevice"])
@pytest.mark.parametrize("device", [0, 7, 12345])
def test_every_line_is_75_wide(backend: str, device: int) -> None:
    text = format_summary({"num_ooms": 3, "num_alloc_retries": 12}, device, backend)
    lines = text.splitlines()
    assert {len(line) for line in lines} == {77}
    assert f"accelrt {backend.upper()} memory summary, device ID {device}" in lines[1]
    assert f"{backend.upper()} OOMs: 3 " in lines[3]
    assert "device malloc retries: 12 " in lines[3]


def test_units_follow_the_all_row_per_column() -> None:
    st = {"allocated_bytes.all.current": 800 * MiB, "allocated_bytes.small_pool.current": 512,
          "allocated_bytes.all.peak": 512, "allocated_bytes.small_pool.peak": 512}
    lines = format_summary(st, 0, "cpu").splitlines()
    row = next(i for i, line in enumerate(lines) if "Allocated memory" in line)
    assert lines[row].split("|")[2] == "    800 MiB "
    assert lines[row].split("|")[3] == "    512 B   "
    # small pool row: current in MiB (from the all row) -> 0 MiB, peak stays in bytes
    assert lines[row + 2].split("|")[2] == "      0 MiB "
    assert lines[row + 2].split("|")[3] == "    512 B   "


def test_format_size_and_count_thresholds() -> None:
    assert format_size(512, 512) == "   512 B  "
    assert format_size(786431, 786431) == "786431 B  "
    assert format_size(786432, 786432) == "   768 KiB"
    assert format_size(805306368, 805306368) == "   768 MiB"
    assert format_size(3 << 40, 3 << 40) == "  3072 GiB"
    assert format_count(749999, 749999) == " 749999   "
    assert format_count(750000, 750000) == "    750 K "
    assert format_count(1234567, 1234567) == "   1234 K "
    assert format_count(2_000_000_000, 2_000_000_000) == "   2000 M "


def test_matches_torch_memory_summary_on_random_stats(monkeypatch) -> None:
    """Byte-for-byte against torch.cuda.memory_summary itself (skips without torch)."""
    import random

    tm = pytest.importorskip("torch.cuda.memory")
    rng = random.Random(7)
    keys = [f"{k}.{p}.{c}" for k in ("allocated_bytes", "active_bytes", "requested_bytes",
                                      "reserved_bytes", "inactive_split_bytes", "allocation",
                                      "active", "segment", "inactive_split")
            for p in ("all", "large_pool", "small_pool")
            for c in ("current", "peak", "allocated", "freed")]
    keys += [f"{k}.{c}" for k in ("oversize_allocations", "oversize_segments")
             for c in ("current", "peak", "allocated", "freed")]
    edges = [0, 1, 767, 768 * 1024 - 1, 768 * 1024, 749_999, 750_000, 750_000_000]
    for _ in range(300):
        st = {k: rng.choice(edges + [rng.randrange(2 ** rng.randint(1, 60))]) for k in keys}
        st["num_ooms"] = rng.randrange(10 ** rng.randint(1, 13))
        st["num_alloc_retries"] = rng.randrange(10 ** rng.randint(1, 9))
        monkeypatch.setattr(tm, "memory_stats", lambda device=None, st=st: st)
        for abbreviated in (False, True):
            theirs = tm.memory_summary(0, abbreviated=abbreviated).splitlines()
            ours = format_summary(st, 0, "cuda", abbreviated).splitlines()
            assert len(theirs) == len(ours)
            for i, (t, o) in enumerate(zip(theirs, ours)):
                if i in (1, 3):       # title and OOM line name accelrt/device: widths kept
                    assert len(t) == len(o), (t, o)
                else:
                    assert t == o, (t, o)
