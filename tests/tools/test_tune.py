"""``accelrt memory tune``: candidate settings replayed and ranked, recommendations, errors."""

from __future__ import annotations

import gzip
import io
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from accelrt.memory.tools import _tune
from accelrt.memory.tools._replay import replay_main

TRACES = Path(__file__).parent.parent / "data" / "traces"
RESNET = str(TRACES / "trace_resnet50_train.json.gz")
MiB = 1 << 20


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "accelrt", *args], capture_output=True,  # noqa: PLW1510
                          text=True, timeout=120, env={**os.environ})


def _entry(action: str, addr: int, size: int) -> dict[str, Any]:
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": 0,
            "frames": []}


def _history(n: int = 40) -> list[dict[str, Any]]:
    """Mixed large/small allocations whose frees leave holes (some fragmentation)."""
    out = []
    for i in range(n):
        out.append(_entry("alloc", 1000 + i, (i % 7 + 1) * 3 * MiB + (i % 3) * 4096))
        if i % 2:
            out.append(_entry("free_requested", 1000 + i - 1, 0))
    return out


def _snapshot(tmp_path: Path, traces: list[list[Any]], settings: Any = None,
              name: str = "snap.pickle") -> str:
    snap: dict[str, Any] = {"segments": [], "device_traces": traces,
                            "external_annotations": []}
    if settings is not None:
        snap["allocator_settings"] = settings
    p = tmp_path / name
    p.write_bytes(pickle.dumps(snap, protocol=4))
    return str(p)


def test_shared_trace_recommends_and_ranks() -> None:
    r = cli("memory", "tune", RESNET)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "recorded setting: default" in out and "GiB" in out
    assert "PyTorch: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n" in out
    assert "ACCELRT_ALLOC_CONF=expandable_segments:True,page_reuse:True" in out
    assert "saves" in out and "%" in out
    assert r.stderr == ""          # no progress bar when stderr is not a terminal


def test_json_output_is_ranked_and_pytorch_line_has_only_pytorch_keys() -> None:
    r = cli("memory", "tune", RESNET, "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    rows = res["results"]
    ok = [x["peak_reserved_bytes"] for x in rows if not x["oom"]]
    assert ok == sorted(ok)
    settings = [x["setting"] for x in rows]
    for want in ("", "expandable_segments:True", "roundup_power2_divisions:4",
                 "expandable_segments:True,page_reuse:True"):
        assert want in settings
    assert any(s.startswith("max_split_size_mb:") for s in settings)
    assert any(s.startswith("garbage_collection_threshold:") for s in settings)
    assert "page_reuse" not in res["pytorch_alloc_conf"]
    assert res["recorded_setting"] == "" and res["device"] == 0
    base = next(x for x in rows if x["setting"] == "")
    assert base["saving_bytes"] == 0
    best = next(x for x in rows if x["setting"] == res["accelrt_alloc_conf"])
    assert best["saving_bytes"] > 0 and not best["capped"]


def test_max_split_candidates_follow_the_large_request_sizes() -> None:
    ops = [(True, i, s * MiB, 0) for i, s in enumerate([2] * 50 + [40] * 40 + [300] * 10)]
    got = [c for c in _tune.candidate_settings(ops) if c.startswith("max_split_size_mb")]
    assert got == ["max_split_size_mb:20", "max_split_size_mb:40", "max_split_size_mb:300"]
    small = [(True, i, 4096, 0) for i in range(10)]       # no large requests: no candidates
    assert not [c for c in _tune.candidate_settings(small) if "max_split" in c]


def test_saving_is_against_the_recorded_setting(tmp_path: Path) -> None:
    path = _snapshot(tmp_path, [_history()], {"PYTORCH_CUDA_ALLOC_CONF":
                                               "roundup_power2_divisions:2"})
    _, settings, _ = _tune.load_workload(path)
    assert _tune.recorded_setting(settings) == "roundup_power2_divisions:2"
    r = cli("memory", "tune", path)
    assert r.returncode == 0, r.stderr
    assert "recorded setting: roundup_power2_divisions:2" in r.stdout
    line = next(ln for ln in r.stdout.splitlines() if "(recorded)" in ln)
    assert line.split()[1] == "roundup_power2_divisions:2"


def test_recorded_setting_rebuilt_from_fields() -> None:
    assert _tune.recorded_setting({"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync",
                                   "expandable_segments": True, "max_split_size": -1}) \
        == "expandable_segments:True"
    assert _tune.recorded_setting({"roundup_power2_divisions": {"1": 4, "2": 4}}) == \
        "roundup_power2_divisions:4"
    assert _tune.recorded_setting("junk") == ""


def test_multi_device_snapshot_needs_device(tmp_path: Path) -> None:
    path = _snapshot(tmp_path, [_history(), [], _history(20)])
    r = cli("memory", "tune", path)
    assert r.returncode == 1
    assert "devices 0, 2 have allocation history" in r.stderr and "--device N" in r.stderr
    r = cli("memory", "tune", path, "--device", "2", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["device"] == 2
    r = cli("memory", "tune", path, "--device", "1")
    assert r.returncode == 1 and "device 1 has no allocation history" in r.stderr
    assert "devices with history: 0, 2" in r.stderr
    r = cli("memory", "tune", path, "--device", "7")
    assert r.returncode == 1 and "out of range" in r.stderr


@pytest.mark.parametrize("traces", [[[]], [[], []], None])
def test_no_history_is_a_clear_error(tmp_path: Path, traces: Any) -> None:
    if traces is None:
        p = tmp_path / "nohist.pickle"
        p.write_bytes(pickle.dumps({"segments": []}))
        path = str(p)
    else:
        path = _snapshot(tmp_path, traces)
    r = cli("memory", "tune", path)
    assert r.returncode == 1
    assert "no allocation history" in r.stderr.lower() or "no 'device_traces'" in r.stderr
    assert "record_memory_history" in r.stderr
    assert "Traceback" not in r.stderr


def test_frees_only_history_is_no_history(tmp_path: Path) -> None:
    path = _snapshot(tmp_path, [[_entry("free_requested", 5, 512)]])
    with pytest.raises(_tune.NoHistoryError, match="no allocation"):
        _tune.load_workload(path)


def test_real_accelrt_snapshot(tmp_path: Path) -> None:
    code = (
        "import accelrt as acc, sys\n"
        "acc.set_current_accelerator('cpu')\n"     # record and dump cpu:0, also beside a GPU
        "acc.memory.record_memory_history()\n"
        "keep = [acc.empty(n * 300000, dtype='uint8', device='cpu:0') for n in range(1, 30)]\n"
        "del keep[::2]\n"
        "more = [acc.empty(n * 500000, dtype='uint8', device='cpu:0') for n in range(1, 10)]\n"
        "acc.memory.dump_snapshot(sys.argv[1])\n")
    path = str(tmp_path / "real.pickle")
    r = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True,  # noqa: PLW1510
                       timeout=120)
    assert r.returncode == 0, r.stderr
    r = cli("memory", "tune", path, "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["ops"] > 30 and res["results"][0]["peak_reserved_bytes"] >= res["peak_live_bytes"]


def test_progress_bar_shows_rate_and_time_left() -> None:
    ops = [(True, i, (i % 5 + 1) * MiB, 0) for i in range(20000)]
    buf = io.StringIO()
    _tune.tune_ops(ops, progress=buf)
    text = buf.getvalue()
    assert "tuning [" in text and "ops/s" in text and "s left" in text
    assert text.endswith("\r")        # the bar is wiped at the end


def test_gzipped_snapshot_and_bad_args(tmp_path: Path) -> None:
    p = tmp_path / "s.pickle.gz"
    p.write_bytes(gzip.compress(pickle.dumps({"device_traces": [_history()]})))
    assert cli("memory", "tune", str(p)).returncode == 0
    r = cli("memory", "tune", str(p), "--device", "-1")
    assert r.returncode == 2 and "--device" in r.stderr
    r = cli("memory", "tune", str(tmp_path / "missing.pickle"))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    r = cli("memory", "tune", "--help")
    assert r.returncode == 0 and "PYTORCH_CUDA_ALLOC_CONF" in r.stdout


def test_replay_shows_settings_and_human_sizes(capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACCELRT_ALLOC_CONF", raising=False)
    assert replay_main([RESNET]) == 0
    out = capsys.readouterr().out
    assert "alloc conf: default (ACCELRT_ALLOC_CONF is not set)" in out
    assert "5.37 GiB" in out and "6.48 GiB" in out      # peak live, peak reserved
    assert replay_main([RESNET, "--alloc-conf", "expandable_segments:True"]) == 0
    assert "alloc conf: expandable_segments:True (from --alloc-conf)" in capsys.readouterr().out


def test_a_workload_too_big_for_the_simulated_device() -> None:
    # a device of 1 GiB, not the default 80 GiB: the expandable settings map the request page
    # by page (2 MiB) until the device is full, 40,000 maps and unmaps a setting on 80 GiB
    result = _tune.tune_ops([(True, 1, (1 << 30) + 1, 0), (False, 1, 0, 0)],
                            device_memory=1 << 30)
    assert all(r["oom"] for r in result["results"])
    text = _tune.format_tune(result, "big", 0)
    assert "out of memory" in text and "nothing to recommend" in text


def test_recorded_setting_already_best_is_kept(tmp_path: Path) -> None:
    # one allocation: every setting reserves the same, so the recorded one is kept
    path = _snapshot(tmp_path, [[_entry("alloc", 1, 512)]],
                     {"PYTORCH_CUDA_ALLOC_CONF": "roundup_power2_divisions:4"})
    r = cli("memory", "tune", path)
    assert r.returncode == 0, r.stderr
    assert ("PyTorch: the recorded setting is already the best for PyTorch; keep "
            "PYTORCH_CUDA_ALLOC_CONF=roundup_power2_divisions:4") in r.stdout


def test_recorded_fraction_too_small_for_its_own_history_ranks_the_others(
        tmp_path: Path) -> None:
    # recorded on a 141 GiB H200 under a 0.5 fraction: 60 GiB live fits there, but the same
    # fraction of the simulated 80 GiB device is 40 GiB: the recorded setting runs out of memory
    GiB = 1 << 30
    trace = [_entry("alloc", 1 + i, 10 * GiB) for i in range(6)]
    trace += [_entry("free_completed", 1 + i, 10 * GiB) for i in range(6)]
    path = _snapshot(tmp_path, [trace],
                     {"PYTORCH_CUDA_ALLOC_CONF": "per_process_memory_fraction:0.5"})
    r = cli("memory", "tune", path)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    out = r.stdout
    assert "recorded setting: per_process_memory_fraction:0.5" in out
    rows = [ln.split() for ln in out.splitlines() if ln[:6].strip().isdigit()
            or ln[:6].strip() == "-"]
    assert rows[0][1] == "default" and rows[0][2:4] == ["60.0", "GiB"]
    # only settings that fit are ranked: the one that ran out of memory has no rank
    assert rows[-1][:3] == ["-", "per_process_memory_fraction:0.5", "(recorded)"]
    assert rows[-1][3:6] == ["out", "of", "memory"]
    assert "caps the device at 40.0 GiB, under the 60.0 GiB" in out
    assert "PyTorch: leave PYTORCH_CUDA_ALLOC_CONF unset" in out
    assert "where the recorded setting ran out of memory" in out
    assert "already the best" not in out
    # the garbage-collection candidates are capped at the defaults' peak, not skipped
    r = cli("memory", "tune", path, "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    by = {x["setting"]: x for x in res["results"]}
    assert by["per_process_memory_fraction:0.5"]["oom"] is True
    assert any(s.startswith("garbage_collection_threshold:0.6,per_process_memory_fraction:0.75")
               for s in by)
    assert res["best"] == res["best_pytorch"] == ""
