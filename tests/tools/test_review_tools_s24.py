"""Review of the offline memory tools by what users and hostile users pass them (issue 24, §3):
``accelrt memory tune --device-memory`` in every form a user types, capacities below the live
peak, above it, and between the settings; snapshots in PyTorch's format that record an
out-of-memory and the default settings; each tool given the other kind of file; corrupt, empty
and mistyped files; the ``--json`` outputs; and the Python functions behind the commands given
arguments of the wrong type.

Tiny synthetic traces and snapshots keep the file fast; most commands run in-process through
:func:`accelrt.cli.main` (an exception escaping it fails the test as a traceback would), and a
few in a subprocess with a timeout, where a traceback on stderr is what the user would see.
"""

from __future__ import annotations

import contextlib
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

from accelrt.cli import main
from accelrt.memory import viz
from accelrt.memory.tools import _replay, _tune
from accelrt.memory.tools._files import read_input

MiB = 1 << 20
GiB = 1 << 30
_SEG = (1 << 32, (1 << 32) + (64 << 20))     # two 20 MiB segments' addresses


# ---------------------------------------------------------------------- fixtures

def pt_settings(conf: str = "", **fields: Any) -> dict[str, Any]:
    """``allocator_settings`` as PyTorch's ``_snapshot()`` records them (its defaults: an
    unlimited ``max_split_size`` is SIZE_MAX, written as int64 -1)."""
    s: dict[str, Any] = {
        "PYTORCH_CUDA_ALLOC_CONF": conf, "max_split_size": -1,
        "garbage_collection_threshold": 0.0, "expandable_segments": False,
        "pinned_num_register_threads": 1, "release_lock_on_cudamalloc": False,
        "pinned_use_cuda_host_register": False, "graph_capture_record_stream_reuse": False,
        "roundup_power2_divisions": {str(1 << i): 0 for i in range(16)}}
    s.update(fields)
    return s


def entry(action: str, addr: int, size: int) -> dict[str, Any]:
    """A trace entry as PyTorch writes it (an ``oom`` entry has ``device_free``, no ``addr``)."""
    e: dict[str, Any] = {"action": action, "size": size, "stream": 0, "compile_context": "N/A",
                         "user_metadata": "", "time_us": 1, "frames": []}
    e["device_free" if action == "oom" else "addr"] = addr
    return e


def fragmented_entries(oom_size: int = 30 * MiB, device_free: int = 4 * MiB) -> list[Any]:
    """Ten 4 MiB blocks fill two 20 MiB segments; one block stays live in each, then a request
    of ``oom_size`` ran out of memory with ``device_free`` bytes free on the device."""
    tr = []
    for b in _SEG:
        tr.append(entry("segment_alloc", b, 20 * MiB))
        tr += [entry("alloc", b + i * 4 * MiB, 4 * MiB) for i in range(5)]
    for b in _SEG:
        for i in range(1, 5):
            tr += [entry("free_requested", b + i * 4 * MiB, 4 * MiB),
                   entry("free_completed", b + i * 4 * MiB, 4 * MiB)]
    return [*tr, entry("oom", device_free, oom_size), entry("snapshot", 0, 0)]


def pt_snapshot(traces: list[Any] | None = None, settings: Any = None,
                **extra: Any) -> dict[str, Any]:
    """A snapshot in the layout of PyTorch's ``torch.cuda.memory._snapshot()``: the two
    segments left by :func:`fragmented_entries`, each with one live 4 MiB block."""
    segs = [{"device": 0, "address": b, "total_size": 20 * MiB, "allocated_size": 4 * MiB,
             "active_size": 4 * MiB, "requested_size": 4 * MiB, "stream": 0,
             "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
             "frames": [],
             "blocks": [{"address": b, "size": 4 * MiB, "requested_size": 4 * MiB,
                         "state": "active_allocated", "frames": []},
                        {"address": b + 4 * MiB, "size": 16 * MiB, "requested_size": 0,
                         "state": "inactive", "frames": []}]} for b in _SEG]
    snap = {"segments": segs,
            "device_traces": [fragmented_entries()] if traces is None else traces,
            "allocator_settings": pt_settings() if settings is None else settings,
            "external_annotations": []}
    snap.update(extra)
    return snap


def as_json_trace(entries: list[dict[str, Any]]) -> dict[str, Any]:
    return {"info": {}, "trace": [[e["action"], e.get("addr", 0), e["size"], e["stream"]]
                                  for e in entries]}


def write(tmp: Path, name: str, data: bytes) -> str:
    p = tmp / name
    p.write_bytes(data)
    return str(p)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("review24")
    return {
        "snapshot": write(tmp, "frag.pickle", pickle.dumps(pt_snapshot())),
        "trace": write(tmp, "frag.json", json.dumps(as_json_trace(fragmented_entries()))
                       .encode()),
        "nohist": write(tmp, "nohist.pickle", pickle.dumps(pt_snapshot(traces=[[]]))),
    }


def run(*args: str) -> tuple[int, str, str]:
    """``accelrt ARGS`` in-process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "accelrt", *args], capture_output=True,  # noqa: PLW1510
                          text=True, timeout=60, env=dict(os.environ, OMP_NUM_THREADS="1"))


def tune_json(*args: str) -> dict[str, Any]:
    code, out, err = run("memory", "tune", *args, "--json")
    assert code == 0, err
    res: dict[str, Any] = json.loads(out)
    return res


def one_line_error(code: int, out: str, err: str, status: int = 1) -> str:
    assert code == status, (code, err)
    assert "Traceback" not in err and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


# ---------------------------------------------------------------------- --device-memory

@pytest.mark.parametrize(("text", "size"), [
    ("85899345920", 80 * GiB), ("80GiB", 80 * GiB), ("80 GiB", 80 * GiB), ("80gib", 80 * GiB),
    ("80GIB", 80 * GiB), (" 80GiB ", 80 * GiB), ("80G", 80 * GiB), ("81559MiB", 81559 * MiB),
    ("81559mib", 81559 * MiB), ("80GB", 80 * 10**9), ("80gb", 80 * 10**9),
    ("85.9GB", 85_900_000_000), ("1.5GiB", 3 * GiB // 2), (".5GiB", GiB // 2),
    ("0.5 GiB", GiB // 2), ("1048576", MiB), ("1MiB", MiB), ("1024KiB", MiB),
    ("2000MB", 2 * 10**9), ("1TiB", 1 << 40), ("0.5TB", 5 * 10**11),
])
def test_device_memory_sizes_a_user_types(text: str, size: int) -> None:
    assert _tune.parse_device_memory(text) == size


@pytest.mark.parametrize(("text", "why"), [
    ("0", "not a memory size"), ("0GiB", "not a memory size"), ("-1", "not a memory size"),
    ("-80GiB", "not a memory size"), ("abc", "not a memory size"), ("", "not a memory size"),
    ("80 parsecs", "not a memory size"), ("1e9", "not a memory size"),
    ("0x10", "not a memory size"), ("1,000", "not a memory size"), ("80GiBB", "not a memory size"),
    ("nan", "not a memory size"), ("inf", "not a memory size"), ("9" * 70, "not a memory size"),
    ("80KiB", "out of range"), ("1048575", "out of range"), ("0.0000001GiB", "out of range"),
    ("1048576TiB", "out of range"), ("999999999999999TB", "out of range"),
])
def test_device_memory_refuses_what_is_not_a_device_size(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why) as info:
        _tune.parse_device_memory(text)
    assert "--device-memory" in str(info.value) and "80GiB, 81559MiB" in str(info.value)


def test_device_memory_range_message_states_the_bounds_it_applies() -> None:
    with pytest.raises(ValueError, match="at least 1 MiB and less than 1 EiB"):
        _tune.parse_device_memory(str(1 << 60))
    assert _tune.parse_device_memory(str((1 << 60) - 1)) == (1 << 60) - 1


@pytest.mark.parametrize("bad", [80 * GiB, None, b"80GiB", 80.0])
def test_parse_device_memory_of_a_non_str_is_a_type_error(bad: Any) -> None:
    with pytest.raises(TypeError, match="--device-memory must be a str"):
        _tune.parse_device_memory(bad)


@pytest.mark.parametrize("size", ["0", "-5", "lots", "80 GiB of HBM", "1e12"])
def test_bad_device_memory_on_the_command_line_is_a_usage_error(files: dict[str, str],
                                                               size: str) -> None:
    line = one_line_error(*run("memory", "tune", files["trace"], f"--device-memory={size}"),
                          status=2)
    assert "--device-memory" in line and "80GiB" in line


# ---------------------------------------------------------------------- capacity

def test_capacity_below_the_live_peak_fits_no_setting(files: dict[str, str]) -> None:
    code, out, err = run("memory", "tune", files["trace"], "--device-memory", "30MiB")
    assert code == 0, err        # the report is the answer: no setting fits
    assert ("the history holds 40.0 MiB live at its peak, more than the 30.0 MiB device: "
            "no setting can fit it") in out
    assert "0 setting(s) fit the 30.0 MiB device" in out
    assert "PyTorch: every setting ran out of the 30.0 MiB device; nothing to recommend" in out
    assert "accelrt: every setting ran out of the 30.0 MiB device; nothing to recommend" in out
    ranks = [ln.split()[0] for ln in out.splitlines() if "out of memory" in ln and "  " in ln]
    assert ranks and set(ranks) == {"-"}


def test_nothing_fits_recommends_nothing_in_json(files: dict[str, str]) -> None:
    res = tune_json(files["trace"], "--device-memory", "30MiB")
    assert res["fits"] == 0 and all(r["oom"] for r in res["results"])
    # "" would tell a script to leave the variables unset, as if the defaults fit
    assert res["best"] is None and res["best_pytorch"] is None
    assert res["pytorch_alloc_conf"] is None and res["accelrt_alloc_conf"] is None


def test_capacity_that_only_some_settings_fit(files: dict[str, str]) -> None:
    res = tune_json(files["trace"], "--device-memory", "44MiB")
    assert res["device_memory_bytes"] == 44 * MiB
    assert res["capacity_source"] == "from --device-memory"
    fit = [r for r in res["results"] if not r["oom"]]
    oom = [r for r in res["results"] if r["oom"]]
    assert fit and oom and res["fits"] == len(fit)
    assert res["results"] == fit + oom                 # only settings that fit are ranked
    assert fit == sorted(fit, key=lambda r: (r["peak_reserved_bytes"], r["driver_us_h100"]))
    assert all(r["peak_reserved_bytes"] <= 44 * MiB for r in fit)
    assert all(r["peak_reserved_bytes"] is None and r["alloc_retries"] is None for r in oom)
    assert res["accelrt_alloc_conf"] == "expandable_segments:True,page_reuse:True"
    assert res["best_pytorch"] is None                 # every PyTorch setting ran out
    code, out, _ = run("memory", "tune", files["trace"], "--device-memory", "44MiB")
    assert (f"{len(fit)} setting(s) fit the 44.0 MiB device, ranked; {len(oom)} would have "
            "run out of memory (-)") in out
    assert "PyTorch: every setting PyTorch accepts ran out of the 44.0 MiB device" in out


def test_max_split_rows_are_replayed_under_the_capacity(files: dict[str, str]) -> None:
    for size in ("44MiB", "1GiB"):
        res = tune_json(files["trace"], "--device-memory", size)
        rows = [r for r in res["results"] if r["setting"].startswith("max_split_size_mb:")]
        assert rows
        for r in rows:
            assert isinstance(r["oom"], bool)
            if not r["oom"]:
                assert r["peak_reserved_bytes"] <= res["device_memory_bytes"]
                assert isinstance(r["alloc_retries"], int) and r["alloc_retries"] >= 0


def test_oom_request_alone_exceeding_the_device(tmp_path: Path) -> None:
    snap = pt_snapshot(traces=[fragmented_entries(oom_size=100 * MiB)])
    path = write(tmp_path, "big.pickle", pickle.dumps(snap))
    code, out, err = run("memory", "tune", path)
    assert code == 0, err
    assert ("the request of 100 MiB that ran out of memory alone exceeds the 44.0 MiB device: "
            "no setting can fit it") in out
    assert "the request that ran out of memory is too large for any; nothing to recommend" in out
    res = tune_json(path)
    assert res["too_large"] == [100 * MiB] and res["fits"] == 0 and res["best"] is None
    # a larger --device-memory overrides the recorded capacity: the request then fits
    res = tune_json(path, "--device-memory", "1GiB")
    assert res["too_large"] == [] and res["fits"] == len(res["results"])


def test_json_trace_oom_entries_and_device_memory(tmp_path: Path) -> None:
    trace = as_json_trace(fragmented_entries(oom_size=100 * MiB))
    path = write(tmp_path, "t.json.gz", gzip.compress(json.dumps(trace).encode()))
    res = tune_json(path, "--device-memory", "64MiB")
    assert res["ooms"] == [{"size": 100 * MiB, "device_free": None}]
    assert res["too_large"] == [100 * MiB] and res["fits"] == 0


def test_gc_cap_follows_the_peak_on_a_large_device(files: dict[str, str]) -> None:
    for size in ("80GiB", "900TiB"):
        res = tune_json(files["trace"], "--device-memory", size)
        ref = next(r for r in res["results"] if r["setting"] == "")
        capped = [r for r in res["results"] if r["capped"]]
        assert capped
        for r in capped:
            frac = float(r["setting"].rpartition("per_process_memory_fraction:")[2])
            cap = frac * res["device_memory_bytes"]
            # "replayed with the recorded peak reserved": within 1% of it, never under it
            assert ref["peak_reserved_bytes"] <= cap <= ref["peak_reserved_bytes"] * 1.01


def test_cap_fraction() -> None:
    assert _tune.cap_fraction(60 * GiB, 80 * GiB) == "0.75"
    assert _tune.cap_fraction(80 * GiB, 80 * GiB) == "1.0"
    for peak, cap in ((2 * MiB, 80 * GiB), (5 * GiB, 1 << 59), (1, (1 << 60) - 1),
                      (6962544640, 80 * GiB)):
        frac = _tune.cap_fraction(peak, cap)
        assert "e" not in frac and float(frac) <= 1.0
        # within 1% of the peak, or the finest of 18 decimals (a byte of a 1 EiB device)
        assert peak <= float(frac) * cap <= peak * 1.01 + cap * 1e-18


# ---------------------------------------------------------------------- snapshots

def test_pytorch_snapshot_records_capacity_oom_and_defaults(files: dict[str, str]) -> None:
    code, out, err = run("memory", "tune", files["snapshot"])
    assert code == 0, err
    assert "recorded setting: default (PyTorch's defaults, as recorded)" in out
    assert "no allocator settings recorded" not in out
    assert ("device memory: 44.0 MiB (from the recorded out-of-memory: 40.0 MiB reserved + "
            "4.00 MiB free on the device)") in out
    assert "recorded out-of-memory: a request of 30.0 MiB with 4.00 MiB free on the device" in out
    res = tune_json(files["snapshot"])
    assert res["settings_recorded"] is True and res["recorded_setting"] == ""
    assert res["device_memory_bytes"] == 44 * MiB
    assert res["ooms"] == [{"size": 30 * MiB, "device_free": 4 * MiB}]
    by = {r["setting"]: r for r in res["results"]}
    assert by[""]["oom"] is True          # the recorded setting ran out, as it did for real
    assert res["accelrt_alloc_conf"] == "expandable_segments:True,page_reuse:True"


@pytest.mark.parametrize(("settings", "shown"), [
    (pt_settings(), "default (PyTorch's defaults, as recorded)"),
    (pt_settings("expandable_segments:True", expandable_segments=True),
     "expandable_segments:True"),
    (pt_settings("", max_split_size=256 * MiB), "max_split_size_mb:256"),
    (pt_settings("pinned_use_cuda_host_register:True,expandable_segments:True",
                 expandable_segments=True), "expandable_segments:True"),
    (None, "default (no allocator settings recorded: PyTorch's defaults)"),
])
def test_recorded_settings_line(tmp_path: Path, settings: Any, shown: str) -> None:
    snap = pt_snapshot()
    if settings is None:
        del snap["allocator_settings"]
    else:
        snap["allocator_settings"] = settings
    path = write(tmp_path, "s.pickle", pickle.dumps(snap))
    code, out, err = run("memory", "tune", path, "--device-memory", "1GiB")
    assert code == 0, err
    assert f"recorded setting: {shown}\n" in out


def test_gzipped_snapshot_and_path_objects(tmp_path: Path) -> None:
    path = tmp_path / "s.pickle.gz"
    path.write_bytes(gzip.compress(pickle.dumps(pt_snapshot())))
    w = _tune.read_workload(path)             # an os.PathLike works like its str
    assert w.capacity == 44 * MiB and len(w.ooms) == 1
    assert _tune.load_workload(bytes(path))[2] == 0
    assert _replay.load_trace(path)[0] == ("segment_alloc", _SEG[0], 20 * MiB, 0)


def test_multi_device_snapshot_needs_device(tmp_path: Path) -> None:
    snap = pt_snapshot(traces=[fragmented_entries(), fragmented_entries()])
    path = write(tmp_path, "two.pickle", pickle.dumps(snap))
    line = one_line_error(*run("memory", "tune", path))
    assert "devices 0, 1 have allocation history; choose one with --device N" in line
    res = tune_json(path, "--device", "1")
    assert res["device"] == 1
    assert res["device_memory_bytes"] is None   # the segments are device 0's
    line = one_line_error(*run("memory", "tune", path, "--device", "2"))
    assert "--device 2 is out of range" in line
    assert one_line_error(*run("memory", "tune", path, "--device", "-1"), status=2)


# ---------------------------------------------------------------------- the other kind of file

def test_viz_given_a_trace_names_replay_and_tune(files: dict[str, str]) -> None:
    for extra in ((), ("--segsum",), ("--trace",)):
        line = one_line_error(*run("memory", "viz", files["trace"], *extra), status=2)
        assert f"accelrt replay {files['trace']}" in line
        assert f"accelrt memory tune {files['trace']}" in line
    with pytest.raises(_replay.WrongFileKindError, match="accelrt replay"):
        viz.load_snapshot(Path(files["trace"]))        # a path object, as the str


@pytest.mark.parametrize("cmd", [("replay",), ("memory", "tune")])
def test_snapshot_without_history_names_viz_and_how_to_record(files: dict[str, str],
                                                             cmd: tuple[str, ...]) -> None:
    line = one_line_error(*run(*cmd, files["nohist"]))
    assert f"'accelrt memory viz {files['nohist']}' draws its segments" in line
    assert "torch.cuda.memory._record_memory_history()" in line
    assert "accelrt.memory.record_memory_history()" in line


def test_replay_and_tune_take_a_snapshot_with_history(files: dict[str, str]) -> None:
    code, out, err = run("replay", files["snapshot"], "--json")
    assert code == 0, err and json.loads(out)["ops"] == 18
    code, _, err = run("memory", "viz", files["snapshot"], "--segsum")
    assert code == 0, err


@pytest.mark.parametrize("trace", [{"trace": []}, {"trace": [["free_requested", 16, 512, 0]]},
                                   {"trace": [["alloc", 16, 0, 0]]}])
def test_tune_on_a_trace_without_allocations_does_not_send_the_user_to_viz(
        tmp_path: Path, trace: Any) -> None:
    path = write(tmp_path, "t.json", json.dumps(trace).encode())
    line = one_line_error(*run("memory", "tune", path))
    assert "the trace holds no allocation to replay" in line
    assert "viz" not in line and "snapshot" not in line      # viz refuses a trace


# ---------------------------------------------------------------------- corrupt files

_SNAP_ENTRY = entry("alloc", 16, 512)
_CORRUPT: dict[str, bytes] = {
    "empty.json": b"",
    "list.json": b"[]",
    "object.json": b"{}",
    "null.json": b"null",
    "trace_str.json": b'{"trace": "alloc"}',
    "entry_str.json": b'{"trace": ["alloc 16 512 0"]}',
    "entry_short.json": b'{"trace": [["alloc", 16, 512]]}',
    "size_float.json": b'{"trace": [["alloc", 16, 1.5, 0]]}',
    "size_neg.json": b'{"trace": [["alloc", 16, -512, 0]]}',
    "addr_str.json": b'{"trace": [["alloc", "0x10", 512, 0]]}',
    "truncated.json": b'{"trace": [["alloc", 16, 512, 0]',
    "text.txt": b"hello\n",
    "binary.bin": bytes(range(256)),
    "truncated.json.gz": gzip.compress(b'{"trace": [["alloc", 16, 512, 0]]}')[:20],
    "empty.gz": gzip.compress(b""),
    "truncated.pickle": pickle.dumps(pt_snapshot())[:200],
    "bad.pickle": b"\x80\x05garbage",
    "list.pickle": pickle.dumps([]),
    "int.pickle": pickle.dumps(5),
    "traces_dict.pickle": pickle.dumps({"segments": [], "device_traces": {"0": []}}),
    "traces_none.pickle": pickle.dumps({"segments": [], "device_traces": None}),
    "traces_tuple.pickle": pickle.dumps({"segments": [], "device_traces": ([_SNAP_ENTRY],)}),
    "entry_list.pickle": pickle.dumps({"segments": [], "device_traces": [[["alloc", 16, 512,
                                                                           0]]]}),
    "no_action.pickle": pickle.dumps({"segments": [], "device_traces": [[{"addr": 16,
                                                                          "size": 512}]]}),
    "no_size.pickle": pickle.dumps({"segments": [], "device_traces": [[{"action": "alloc",
                                                                        "addr": 16}]]}),
    "action_list.pickle": pickle.dumps(pt_snapshot(traces=[[{**_SNAP_ENTRY, "action": ["alloc"]}]])),
    "action_bytes.pickle": pickle.dumps(pt_snapshot(traces=[[{**_SNAP_ENTRY, "action": b"alloc"}]])),
    "size_str.pickle": pickle.dumps(pt_snapshot(traces=[[{**_SNAP_ENTRY, "size": "512"}]])),
    "segments_int.pickle": pickle.dumps(pt_snapshot(segments=7)),
    "segment_size_list.pickle": pickle.dumps(pt_snapshot(traces=[[
        entry("segment_alloc", 16, [20 * MiB]), _SNAP_ENTRY,   # type: ignore[arg-type]
        entry("oom", 0, 40 * MiB)]])),
    "segment_size_str.pickle": pickle.dumps(pt_snapshot(traces=[[
        entry("segment_alloc", 16, "20MiB"), _SNAP_ENTRY,      # type: ignore[arg-type]
        entry("oom", 0, 40 * MiB)]])),
    "oom_size_str.pickle": pickle.dumps(pt_snapshot(traces=[[_SNAP_ENTRY,
                                                             entry("oom", 0, "big")]])),  # type: ignore[arg-type]
    "global.pickle": b"\x80\x04\x95\x15\x00\x00\x00\x00\x00\x00\x00\x8c\x02os\x8c\x06system"
                     b"\x93\x8c\x04true\x85R.",
}
_REFUSED_BY_ALL = ("empty.json", "truncated.json", "text.txt", "binary.bin", "truncated.json.gz",
                   "empty.gz", "truncated.pickle", "bad.pickle", "list.pickle", "int.pickle",
                   "traces_dict.pickle", "traces_none.pickle", "traces_tuple.pickle",
                   "entry_list.pickle", "no_action.pickle", "no_size.pickle",
                   "action_list.pickle", "action_bytes.pickle", "size_str.pickle",
                   "global.pickle")


@pytest.fixture(scope="module")
def corrupt(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("corrupt24")
    return {name: write(tmp, name, data) for name, data in _CORRUPT.items()}


_COMMANDS = {"replay": ("replay",), "replay --json": ("replay", "--json"),
             "tune": ("memory", "tune"), "tune --json": ("memory", "tune", "--json"),
             "viz --segsum": ("memory", "viz", "--segsum")}


@pytest.mark.parametrize("cmd", list(_COMMANDS))
@pytest.mark.parametrize("name", sorted(_CORRUPT))
def test_corrupt_files_give_one_line_and_a_nonzero_status(corrupt: dict[str, str], name: str,
                                                         cmd: str) -> None:
    args = _COMMANDS[cmd]
    if args[0] == "memory" and args[1] == "viz":
        code, out, err = run(*args[:2], corrupt[name], *args[2:])
    else:
        code, out, err = run(*args, corrupt[name])
    if name in _REFUSED_BY_ALL or cmd.startswith(("tune", "viz")):
        line = one_line_error(code, out, err, status=code if code in (1, 2) else 1)
        assert corrupt[name] in line or name in line, line
    else:       # replay of a JSON trace with no operation, or that ignores what tune reads
        assert "Traceback" not in err
        assert code != 0 or out


def test_tune_refuses_malformed_segment_data_by_name(corrupt: dict[str, str]) -> None:
    assert "'segments' must be a list" in one_line_error(*run("memory", "tune",
                                                              corrupt["segments_int.pickle"]))
    line = one_line_error(*run("memory", "tune", corrupt["segment_size_list.pickle"]))
    assert "entry 0: size must be an int" in line
    line = one_line_error(*run("memory", "tune", corrupt["action_list.pickle"]))
    assert "'action' must be a str" in line
    line = one_line_error(*run("replay", corrupt["action_bytes.pickle"]))
    assert "'action' must be a str" in line


@pytest.mark.parametrize("cmd", [("replay",), ("memory", "tune"), ("memory", "viz")])
def test_missing_directory_and_unreadable_paths(tmp_path: Path, cmd: tuple[str, ...]) -> None:
    assert "No such file" in one_line_error(*run(*cmd, str(tmp_path / "missing.json")))
    assert "Is a directory" in one_line_error(*run(*cmd, str(tmp_path)))
    if hasattr(os, "geteuid") and os.geteuid() != 0:     # root reads any file
        p = tmp_path / "secret.json"
        p.write_bytes(b'{"trace": []}')
        p.chmod(0)
        assert "Permission denied" in one_line_error(*run(*cmd, str(p)))


@pytest.mark.parametrize(("cmd", "name"), [
    (("replay",), "empty.json"), (("memory", "tune"), "segment_size_list.pickle"),
    (("memory", "tune"), "action_list.pickle"), (("memory", "viz"), "truncated.pickle"),
    (("memory", "tune", "--json"), "segments_int.pickle"),
])
def test_subprocess_never_prints_a_traceback(corrupt: dict[str, str], cmd: tuple[str, ...],
                                             name: str) -> None:
    r = run_cli(*cmd, corrupt[name])
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_subprocess_on_a_directory_and_a_missing_path(tmp_path: Path) -> None:
    for path in (str(tmp_path), str(tmp_path / "nope.pickle")):
        r = run_cli("memory", "tune", path)
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr


# ---------------------------------------------------------------------- --json outputs

_REPLAY_KEYS = {"trace", "ops", "peak_live_bytes", "peak_reserved_bytes", "reserved_over_live",
                "device_mallocs", "device_frees", "vm_maps", "vm_unmaps", "driver_us_h100",
                "us_per_op", "steady_driver_calls", "steady_driver_calls_per_1k_ops"}
_TUNE_KEYS = {"trace", "device", "ops", "peak_live_bytes", "recorded_setting",
              "settings_recorded", "device_memory_bytes", "capacity_source", "ooms", "too_large",
              "private_pool_allocs", "fits", "results", "best", "best_pytorch", "pytorch_alloc_conf",
              "accelrt_alloc_conf"}
_ROW_KEYS = {"setting", "pytorch_compatible", "capped", "oom", "peak_reserved_bytes",
             "saving_bytes", "saving_fraction", "device_mallocs", "vm_maps", "driver_us_h100",
             "us_per_op", "alloc_retries"}


def _driver_calls(row: dict[str, Any]) -> int:
    return int(row["device_mallocs"] + row["device_frees"] + row["vm_maps"] + row["vm_unmaps"])


@pytest.mark.parametrize("conf", ["", "expandable_segments:True",
                                  "expandable_segments:True,page_reuse:True"])
def test_replay_json_keys_and_steady_state(files: dict[str, str], conf: str) -> None:
    code, out, err = run("replay", files["trace"], files["snapshot"], "--json",
                         "--alloc-conf", conf)
    assert code == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert len(rows) == 2
    ops = _replay.trace_ops(_replay.load_trace(files["trace"]))
    for row in rows:
        assert set(row) == _REPLAY_KEYS
        assert row["ops"] == len(ops) == 18
        steady = row["ops"] - _replay.steady_start(row["ops"])
        assert 0 <= row["steady_driver_calls"] <= _driver_calls(row)
        assert row["steady_driver_calls_per_1k_ops"] == round(
            row["steady_driver_calls"] * 1000 / steady, 2)
    # the steady state's calls are the whole replay's less those of the ops before it
    from accelrt.memory import _config
    cfg = _config.parse_config(conf)
    whole = _replay.replay_ops(ops, cfg)
    before = _replay.replay_ops(ops[:_replay.steady_start(len(ops))], cfg)
    assert whole["steady_driver_calls"] == _driver_calls(whole) - _driver_calls(before)
    assert rows[0]["steady_driver_calls"] == whole["steady_driver_calls"]


@pytest.mark.parametrize("n", [0, 1, 2, 3])
def test_steady_state_of_a_few_operations(n: int) -> None:
    ops = [(True, 16, 512, 0), (False, 16, 0, 0), (True, 32, 30 * MiB, 0)][:n]
    r = _replay.replay_ops(ops)
    steady = n - _replay.steady_start(n)
    # fewer than 3 operations have no steady state: no driver call can be in it
    assert r["steady_driver_calls"] == (0 if steady == 0 else 1)
    assert r["steady_driver_calls_per_1k_ops"] == (
        round(r["steady_driver_calls"] * 1000 / steady, 2) if steady else 0.0)


def test_tune_json_keys(files: dict[str, str]) -> None:
    for path in (files["trace"], files["snapshot"]):
        res = tune_json(path)
        assert set(res) == _TUNE_KEYS
        assert res["results"] and all(set(r) == _ROW_KEYS for r in res["results"])
        assert res["fits"] == sum(not r["oom"] for r in res["results"])
        for o in res["ooms"]:
            assert set(o) == {"size", "device_free"}


def test_replay_out_of_memory_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "huge.json",
                 json.dumps({"trace": [["alloc", 16, 100 * GiB, 0]]}).encode())
    line = one_line_error(*run("replay", path))
    assert line.startswith(f"accelrt replay: error: {path}: out of memory on the simulated "
                           "device")


# ---------------------------------------------------------------------- Python API types

@pytest.mark.parametrize("fn", [viz.load_snapshot, read_input, _replay.load_trace,
                                _tune.read_workload])
@pytest.mark.parametrize("bad", [0, 5, None, 3.0, ["a.pickle"]])
def test_file_arguments_must_be_file_names(fn: Any, bad: Any) -> None:
    # an int would be read (and closed) as an open file descriptor
    with pytest.raises(TypeError, match="path must be a file name"):
        fn(bad)


def test_viz_functions_name_their_wrong_arguments() -> None:
    snap = {"segments": [], "device_traces": [[]]}
    with pytest.raises(TypeError, match="title must be a str"):
        viz.trace_html(snap, title=5)  # type: ignore[arg-type]
    for names in (5, ("a",), ("a", "b", "c"), ("a", 1)):
        with pytest.raises(TypeError, match="compare_names must be a pair of str"):
            viz.trace_html(snap, compare=snap, compare_names=names)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="compared snapshot: expected a dict"):
        viz.trace_html(snap, compare=5)  # type: ignore[arg-type]
    for fn in (viz.segsum, viz.trace_text, viz.memory_by_location, viz.trace_html):
        with pytest.raises(ValueError, match="snapshot: expected a dict, got list"):
            fn([])  # type: ignore[arg-type]
    for bad in ("1 MiB", None, True):
        with pytest.raises(TypeError, match="num must be a number of bytes"):
            viz.format_bytes(bad)  # type: ignore[arg-type]
    import numpy as np
    assert viz.format_bytes(np.int64(3 * MiB)) == "3.0MiB"


@pytest.mark.parametrize("fn", [viz.viz_main, _replay.replay_main, _tune.tune_main])
@pytest.mark.parametrize("bad", ["snap.pickle", b"snap.pickle", 5, [5], ("a", None)])
def test_entry_points_take_a_list_of_str(fn: Any, bad: Any) -> None:
    with pytest.raises(TypeError, match="argv must be a list of str"):
        fn(bad)


def test_tune_python_api_argument_types(files: dict[str, str]) -> None:
    with pytest.raises(TypeError, match="device must be an int or None"):
        _tune.read_workload(files["trace"], "0")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="device must be an int or None"):
        _tune.read_workload(files["trace"], True)
    ops = [(True, 16, 512, 0), (False, 16, 0, 0)]
    for bad in ("80GiB", 80.0, 0, -1, True):
        with pytest.raises(ValueError, match="device_memory must be a positive number"):
            _tune.tune_ops(ops, device_memory=bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="allocator settings must be a str"):
        _tune.tune_ops(ops, 5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Unrecognized key 'bogus'"):
        _tune.tune_ops(ops, "bogus:1")
