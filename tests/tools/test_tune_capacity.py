"""``accelrt memory tune`` models the user's device: the capacity and the out-of-memory
requests a snapshot records (or ``--device-memory``), settings that fit against those that run
out of memory; and each tool names the one that takes the other kind of file (issue 24, §3)."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from accelrt.memory.tools import _tune

TRACES = Path(__file__).parent.parent / "data" / "traces"
DLRM = str(TRACES / "trace_dlrm_train.json.gz")
MiB = 1 << 20

# 60 blocks of 4 MiB share 20 MiB segments of a 256 MiB cpu device; keeping every fifth leaves
# each segment one live block, so the 40 MiB request that follows runs out of memory under
# PyTorch's default policy although 192 MiB of the device are cached and free.
_FRAGMENTED = """
import accelrt as acc, sys
acc.set_current_accelerator('cpu')
acc.memory.record_memory_history()
MiB = 1 << 20
blocks = [acc.empty(4 * MiB, dtype='uint8', device='cpu:0') for _ in range(60)]
keep = blocks[::5]
del blocks
try:
    acc.empty(int(sys.argv[2]) * MiB, dtype='uint8', device='cpu:0')
except acc.OutOfMemoryError:
    print('OOM')
acc.memory.dump_snapshot(sys.argv[1])
"""


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "accelrt", *args], capture_output=True,  # noqa: PLW1510
                          text=True, timeout=120, env={**os.environ})


def _record(path: Path, request_mib: int) -> str:
    env = {**os.environ, "ACCELRT_CPU_MEMORY": "256MiB"}
    env.pop("ACCELRT_ALLOC_CONF", None)
    r = subprocess.run([sys.executable, "-c", _FRAGMENTED, str(path), str(request_mib)],  # noqa: PLW1510
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0 and r.stdout.strip() == "OOM", r.stderr
    return str(path)


@pytest.fixture(scope="module")
def fragmented(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _record(tmp_path_factory.mktemp("tune") / "fragmented.pickle", 40)


def test_snapshot_capacity_and_oom_decide_which_settings_fit(fragmented: str) -> None:
    r = cli("memory", "tune", fragmented, "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    # 240 MiB reserved when it ran out + 16 MiB the device reported free = the 256 MiB device
    assert res["device_memory_bytes"] == 256 * MiB
    assert "recorded out-of-memory" in res["capacity_source"]
    assert res["ooms"] == [{"size": 40 * MiB, "device_free": 16 * MiB}]
    by = {x["setting"]: x for x in res["results"]}
    # the recorded (default) setting runs out of memory in the replay as it did for real
    assert by[""]["oom"] is True
    assert by["expandable_segments:True,page_reuse:True"]["oom"] is False
    fit = [x for x in res["results"] if not x["oom"]]
    assert res["fits"] == len(fit) > 0
    assert res["results"][:len(fit)] == fit          # only settings that fit are ranked
    assert all(x["peak_reserved_bytes"] <= 256 * MiB for x in fit)
    # max_split_size_mb rows are judged under the capacity too (here they run out of memory)
    assert any(s.startswith("max_split_size_mb:") and by[s]["oom"] for s in by)
    assert res["accelrt_alloc_conf"] == "expandable_segments:True,page_reuse:True"


def test_snapshot_report_names_device_oom_and_defaults_as_recorded(fragmented: str) -> None:
    r = cli("memory", "tune", fragmented)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert ("device memory: 256 MiB (from the recorded out-of-memory: 240 MiB reserved + "
            "16.0 MiB free on the device)") in out
    assert "recorded out-of-memory: a request of 40.0 MiB" in out
    # a snapshot recorded with the defaults says so: not "no allocator settings recorded"
    assert "recorded setting: default (PyTorch's defaults, as recorded)" in out
    assert "no allocator settings recorded" not in out
    rows = [ln.split() for ln in out.splitlines() if ln[:6].strip() in ("-", "1", "2")]
    assert rows[0][:2] == ["1", "expandable_segments:True,page_reuse:True"]
    assert ["-", "default", "(recorded)", "out", "of", "memory"] in [r[:6] for r in rows]
    assert "would have run out of memory" in out
    assert "PyTorch: every setting PyTorch accepts ran out of the 256 MiB device" in out


def test_device_memory_overrides_the_snapshot(fragmented: str) -> None:
    r = cli("memory", "tune", fragmented, "--device-memory", "1GiB", "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["device_memory_bytes"] == 1 << 30
    assert res["capacity_source"] == "from --device-memory"
    assert not any(x["oom"] for x in res["results"])    # 1 GiB holds every setting


def test_oom_request_alone_exceeding_the_device(tmp_path: Path) -> None:
    path = _record(tmp_path / "huge.pickle", 300)
    r = cli("memory", "tune", path)
    assert r.returncode == 0, r.stderr
    assert ("the request of 300 MiB that ran out of memory alone exceeds the 256 MiB device: "
            "no setting can fit it") in r.stdout
    assert "nothing to recommend" in r.stdout
    r = cli("memory", "tune", path, "--json")
    res = json.loads(r.stdout)
    assert res["too_large"] == [300 * MiB] and res["fits"] == 0


def test_trace_replayed_under_device_memory() -> None:
    r = cli("memory", "tune", DLRM)
    assert r.returncode == 0, r.stderr
    assert ("device memory: not recorded; replayed on a simulated 80.0 GiB device (pass "
            "--device-memory SIZE") in r.stdout
    r = cli("memory", "tune", DLRM, "--device-memory", "1400MiB", "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["device_memory_bytes"] == 1400 * MiB
    by = {x["setting"]: x for x in res["results"]}
    # PyTorch's default policy reserves 1.40 GB on this trace: over 1400 MiB it runs out
    assert by[""]["oom"] is True and by["expandable_segments:True"]["oom"] is False
    assert all(by[s]["oom"] for s in by if s.startswith("max_split_size_mb:"))
    assert res["best_pytorch"] == "expandable_segments:True"
    r = cli("memory", "tune", DLRM, "--device-memory", "1300MiB")
    assert r.returncode == 0, r.stderr
    assert "live at its peak, more than the 1.27 GiB device: no setting can fit it" in r.stdout


@pytest.mark.parametrize("size", ["abc", "0", "1e9", "80GiBB", "12 parsecs", "9" * 5000,
                                  "\x1b[2J80GiB"])
def test_bad_device_memory_names_the_accepted_forms(size: str) -> None:
    r = cli("memory", "tune", DLRM, "--device-memory", size)
    assert r.returncode == 2
    assert "--device-memory" in r.stderr and "80GiB, 81559MiB" in r.stderr
    assert "Traceback" not in r.stderr and "\x1b" not in r.stderr


def test_parse_device_memory() -> None:
    assert _tune.parse_device_memory("80GiB") == 80 << 30
    assert _tune.parse_device_memory("81559MiB") == 81559 * MiB
    assert _tune.parse_device_memory("85899345920") == 80 << 30
    assert _tune.parse_device_memory("85.9GB") == 85_900_000_000
    with pytest.raises(ValueError, match="out of range"):
        _tune.parse_device_memory("512")


def test_viz_on_a_trace_names_replay_and_tune() -> None:
    r = cli("memory", "viz", DLRM)
    assert r.returncode == 2
    assert "is an allocation trace" in r.stderr
    assert f"accelrt replay {DLRM}" in r.stderr and f"accelrt memory tune {DLRM}" in r.stderr
    assert "Traceback" not in r.stderr


def _no_history(tmp_path: Path, snap: Any) -> str:
    p = tmp_path / "nohist.pickle"
    p.write_bytes(pickle.dumps(snap, protocol=4))
    return str(p)


@pytest.mark.parametrize("snap", [{"segments": [], "device_traces": [[]]},
                                  {"segments": []},
                                  {"segments": [], "device_traces": [[
                                      {"action": "snapshot", "addr": 0, "size": 0}]]}])
@pytest.mark.parametrize("cmd", [("replay",), ("memory", "tune")])
def test_snapshot_without_history_explains_how_to_record_and_names_viz(
        tmp_path: Path, snap: Any, cmd: tuple[str, ...]) -> None:
    path = _no_history(tmp_path, snap)
    r = cli(*cmd, path)
    assert r.returncode == 1
    assert "record_memory_history()" in r.stderr and "_record_memory_history()" in r.stderr
    assert f"accelrt memory viz {path}" in r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
