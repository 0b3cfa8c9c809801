"""Files from strangers: ``accelrt replay`` and ``accelrt memory viz`` (and their library
functions) refuse hostile input with a one-line message and exit status 1, in bounded time and
memory, and never pass control characters from the file to the terminal.

The command line runs in a subprocess with a timeout (and an address-space limit where memory
is the attack), so a hang or a crash fails the test instead of the run.
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import resource
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelrt.memory.tools._files import read_input, short_repr, terminal_safe, write_atomic
from accelrt.memory.tools._replay import load_pickle, load_trace, trace_ops
from accelrt.memory._snapshot import check_snapshot, dump_snapshot
from accelrt.memory.viz import load_snapshot, segsum, trace_html, trace_text

MiB = 1 << 20
ESC = "\x1b]0;pwned\x07\x1b[2J\x9b\u202e"


def _limit_memory(nbytes: int) -> Any:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (nbytes, nbytes))
    return apply


def run_cli(*args: str, timeout: float = 60, memory: int | None = None,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, "-m", "accelrt", *args], capture_output=True, text=True,
        timeout=timeout, env=env, cwd=cwd,
        preexec_fn=None if memory is None else _limit_memory(memory))


def assert_one_line_error(proc: subprocess.CompletedProcess[str], match: str) -> None:
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and match in lines[0], proc.stderr[-2000:]


def snap_with(segments: list[Any] | None = None, traces: list[Any] | None = None) -> dict[str, Any]:
    return {"segments": segments or [], "device_traces": traces if traces is not None else [[]]}


# ---------------------------------------------------------------------- nesting

def test_deeply_nested_json_exits_1_with_one_line(tmp_path: Path) -> None:
    p = tmp_path / "nest.json"
    p.write_text("[" * 100_000)
    assert_one_line_error(run_cli("replay", str(p)), "nested too deeply")
    p.write_text('{"trace": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert_one_line_error(run_cli("replay", str(p)), "nested too deeply")
    with pytest.raises(ValueError, match="nested too deeply"):
        load_trace(str(p))


def test_deep_trace_entry_is_reported_briefly(tmp_path: Path) -> None:
    entry: Any = 1
    for _ in range(900):                  # loads (below the recursion limit), repr would not
        entry = [entry]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"trace": [entry]}))
    with pytest.raises(ValueError, match=r"entry 0 must be") as info:
        trace_ops(load_trace(str(p)), str(p))
    assert len(str(info.value)) < 400


# ---------------------------------------------------------------------- claimed sizes

def test_huge_claimed_segment_costs_nothing(tmp_path: Path) -> None:
    seg = {"address": 0, "total_size": 2**62, "stream": 0, "blocks": [
        {"size": 2**61, "requested_size": 2**61, "state": "active_allocated"},
        {"size": 2**61, "state": "inactive"}]}
    text = segsum(snap_with([seg]))
    bar = text.splitlines()[1]
    assert bar.startswith("[a") and len(bar) < 4200
    p = tmp_path / "huge.pickle"
    dump_snapshot(p, snap_with([seg]))
    for args in (("--segsum",), ("--trace",), ("-o", str(tmp_path / "huge.html"))):
        proc = run_cli("memory", "viz", str(p), *args, timeout=60, memory=1 << 30)
        assert proc.returncode == 0, proc.stderr[-2000:]


def test_blocks_past_the_segment_end_are_cut_off() -> None:
    seg = {"address": 0, "total_size": 40 * MiB, "stream": 0, "blocks": [
        {"size": 2**63, "requested_size": 2**63, "state": "active_allocated"}] * 1000}
    bar = segsum(snap_with([seg])).splitlines()[1]
    assert bar.startswith("[aa]")


def test_many_segments_and_entries_stay_fast(tmp_path: Path) -> None:
    n = 40_000        # the old linear lookup per entry took minutes here
    segs = [{"address": i * 4 * MiB, "total_size": 2 * MiB, "stream": 0, "blocks": []}
            for i in range(n)]
    trace = [{"action": "alloc", "addr": i * 4 * MiB + 512, "size": 512} for i in range(n)]
    p = tmp_path / "many.pickle"
    dump_snapshot(p, snap_with(segs, [trace]))
    proc = run_cli("memory", "viz", str(p), "--trace", timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"= seg_{n - 1}[512:512.0B]" in proc.stdout


@pytest.mark.parametrize("bad, match", [
    ({"address": -1}, "out of range"),
    ({"total_size": -5}, "out of range"),
    ({"total_size": 2**64}, "out of range"),
    ({"total_size": 10**5000}, "a huge int"),
    ({"total_size": float("nan")}, "expected int"),
    ({"total_size": "1"}, "expected int"),
    ({"stream": True}, "expected int"),
    ({"device": -1}, "out of range"),
    ({"blocks": [{"size": -1, "state": "inactive"}]}, "out of range"),
    ({"blocks": [{"size": 1, "state": "active_allocated", "requested_size": 1.5}]},
     "expected int"),
    ({"blocks": {"size": 1}}, "expected list"),
    ({"frames": "x"}, "expected list"),
])
def test_malformed_segments_are_value_errors(bad: dict[str, Any], match: str) -> None:
    seg = {"address": 0, "total_size": 2 * MiB, "stream": 0, "blocks": []} | bad
    with pytest.raises(ValueError, match=match):
        check_snapshot(snap_with([seg]))


def test_malformed_snapshot_exits_1_with_one_line(tmp_path: Path) -> None:
    p = tmp_path / "bad.pickle"
    for seg, match in (({"address": 0, "total_size": -5, "stream": 0, "blocks": []},
                        "out of range"),
                       ({"address": 0, "total_size": 10**5000, "stream": 0, "blocks": []},
                        "a huge int")):
        p.write_bytes(pickle.dumps(snap_with([seg])))
        assert_one_line_error(run_cli("memory", "viz", str(p), "--segsum"), match)


@pytest.mark.parametrize("entry, match", [
    ({"action": "alloc", "addr": 0, "size": -1}, "out of range"),
    ({"action": "snapshot", "size": "big"}, "expected int"),
    ({"action": "annotate", "addr": -3}, "out of range"),
    ({"action": "oom", "size": 1, "device_free": float("inf")}, "expected int"),
    ({"action": 7}, "expected str"),
])
def test_malformed_trace_entries_are_value_errors(entry: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        check_snapshot(snap_with(traces=[[entry]]))


def test_replay_rejects_out_of_range_ints(tmp_path: Path) -> None:
    p = tmp_path / "t.json"
    for entry in (["alloc", -16, 512, 0], ["alloc", 16, 2**64, 0], ["alloc", 16, 512, -1]):
        p.write_text(json.dumps({"trace": [entry]}))
        assert_one_line_error(run_cli("replay", str(p)), "out of range")
    p.write_text('{"trace": [["alloc", 16, ' + "9" * 5000 + ", 0]]}")
    assert_one_line_error(run_cli("replay", str(p)), "neither JSON nor")
    p.write_text('{"trace": [["alloc", 16, NaN, 0]]}')
    assert_one_line_error(run_cli("replay", str(p)), "must be an int")


def test_replay_of_a_pickle_with_a_huge_int(tmp_path: Path) -> None:
    p = tmp_path / "s.pickle"
    p.write_bytes(pickle.dumps({"device_traces": [[
        {"action": "alloc", "addr": 0, "size": 10**5000, "stream": 0}]]}))
    assert_one_line_error(run_cli("replay", str(p)), "size (a huge int) is out of range")


def test_shared_references_cannot_multiply_the_work(tmp_path: Path) -> None:
    seg = {"address": 0, "total_size": 2 * MiB, "stream": 0,
           "blocks": [{"size": 1, "state": "inactive"}] * 100_000}
    snap = snap_with([seg] * 100_000)     # 10**10 blocks for every reader, from a small file
    p = tmp_path / "dag.pickle"
    p.write_bytes(pickle.dumps(snap))
    assert p.stat().st_size < 2 * MiB
    assert_one_line_error(run_cli("memory", "viz", str(p), "--segsum", timeout=60),
                          "expands to more than")


# ---------------------------------------------------------------------- gzip bombs

@pytest.fixture(scope="module")
def bomb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """About 0.5 MB of gzip that inflates to 512 MiB (a pickle opcode, then zeros)."""
    p = tmp_path_factory.mktemp("bomb") / "bomb.pickle.gz"
    member = gzip.compress(bytes(MiB), 9)     # 512 gzip members of 1 MiB each
    with open(p, "wb") as f:
        f.write(gzip.compress(b"\x80"))
        f.writelines(member for _ in range(512))
    assert p.stat().st_size < MiB
    return p


@pytest.mark.parametrize("cmd", [("memory", "viz"), ("replay",)])
def test_gzip_bomb_is_refused_under_a_memory_limit(bomb: Path, cmd: tuple[str, ...]) -> None:
    proc = run_cli(*cmd, str(bomb), timeout=60, memory=768 * MiB)
    assert_one_line_error(proc, "refusing to inflate")


def test_bounded_reader(tmp_path: Path) -> None:
    p = tmp_path / "x.gz"
    p.write_bytes(gzip.compress(b"a" * 1000) + gzip.compress(b"b" * 10))   # two members
    assert read_input(str(p)) == b"a" * 1000 + b"b" * 10
    with pytest.raises(ValueError, match="more than 999 bytes"):
        read_input(str(p), limit=999)
    p.write_bytes(gzip.compress(b"abc")[:-6])
    with pytest.raises(ValueError, match="corrupt gzip"):
        read_input(str(p))


# ---------------------------------------------------------------------- the terminal

def test_trace_text_escapes_control_characters(tmp_path: Path) -> None:
    snap = snap_with(traces=[[{"action": ESC, "user_metadata": ESC},
                              {"action": "user_defined", "user_metadata": {"k": ESC}}]])
    text = trace_text(snap)
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "\\x1b]0;pwned\\x07" in text
    p = tmp_path / "esc.pickle"
    dump_snapshot(p, snap)
    for args in (("--trace",), ("--segsum",)):
        proc = run_cli("memory", "viz", str(p), *args)
        assert proc.returncode == 0, proc.stderr
        assert not any(c in proc.stdout for c in "\x1b\x07\x9b\u202e")


def test_error_messages_escape_file_content(tmp_path: Path) -> None:
    evil = b"\x80\x02c" + ESC.encode() + b"\nsystem\n)R."
    p = tmp_path / "evil.pickle"
    p.write_bytes(evil)
    proc = run_cli("memory", "viz", str(p), "--trace")
    assert_one_line_error(proc, "refusing to load")
    assert "\x1b" not in proc.stderr and "\x07" not in proc.stderr
    proc = run_cli("replay", str(p))
    assert_one_line_error(proc, "refusing to load")
    assert "\x1b" not in proc.stderr
    t = tmp_path / "t.json"
    t.write_text(json.dumps({"trace": [[ESC, 1, 2, 3, 4]]}))
    proc = run_cli("replay", str(t))
    assert_one_line_error(proc, "must be [action, addr, size, stream]")
    assert "\x1b" not in proc.stderr and "\u202e" not in proc.stderr


def test_html_page_carries_no_raw_control_characters() -> None:
    frames = [{"filename": ESC + "</script><script>alert(1)</script>", "line": 1, "name": ESC}]
    seg = {"address": 0, "total_size": 2 * MiB, "stream": 0, "frames": frames, "blocks": [
        {"size": 2 * MiB, "requested_size": 1, "state": "active_allocated", "frames": frames}]}
    page = trace_html(snap_with([seg], [[{"action": "alloc", "addr": 0, "size": 1,
                                          "frames": frames}]]))
    data = page[page.index('<script id="data"'):]
    data = data[:data.index("</script>")]
    assert "\x1b" not in page and "<script>alert" not in data


def test_terminal_safe_and_short_repr() -> None:
    assert terminal_safe("a\tb\nc\x1b\x7f\x85\u2028") == "a\tb\nc\\x1b\\x7f\\x85\\u2028"
    assert terminal_safe("é ü 日本") == "é ü 日本"
    assert terminal_safe(os.fsdecode(b"a\xff\xe9")) == "a\\xff\\xe9"   # undecodable bytes
    assert terminal_safe("\ud800", one_line=True) == "\\ud800"
    assert len(short_repr(list(range(10**5)))) < 200
    assert short_repr(10**5000) == "<int>"


# ---------------------------------------------------------------------- output file

def test_viz_never_overwrites_its_input(tmp_path: Path) -> None:
    p = tmp_path / "snapshot.html"
    dump_snapshot(p, snap_with())
    before = p.read_bytes()
    proc = run_cli("memory", "viz", str(p))
    assert proc.returncode == 0, proc.stderr
    assert p.read_bytes() == before
    out = tmp_path / "snapshot.html.viz.html"
    assert out.read_text().startswith("<!DOCTYPE html>") and str(out) in proc.stdout
    proc = run_cli("memory", "viz", str(p), "-o", str(p))
    assert proc.returncode == 2 and "the snapshot itself" in proc.stderr
    assert p.read_bytes() == before
    link = tmp_path / "link.html"
    link.symlink_to(p)
    proc = run_cli("memory", "viz", str(p), "-o", str(link))
    assert proc.returncode == 2 and p.read_bytes() == before
    proc = run_cli("memory", "viz", "snapshot.html", cwd=tmp_path)   # relative path
    assert proc.returncode == 0 and p.read_bytes() == before


def _undecodable_name(tmp_path: Path, name: bytes) -> Path:
    """``tmp_path / name`` for a name that is not UTF-8 (skips where the file system refuses
    such names, as macOS's does)."""
    path = Path(os.fsdecode(os.path.join(os.fsencode(tmp_path), name)))
    try:
        path.write_bytes(b"")
    except (OSError, UnicodeEncodeError):
        pytest.skip("this file system refuses file names that are not UTF-8")
    path.unlink()
    return path


def test_every_command_takes_file_names_that_are_not_utf8(tmp_path: Path) -> None:
    # a name with the byte 0xff, as a Latin-1 system writes "snapÿ"; Python holds it as the
    # lone surrogate U+DCFF, which neither a strict UTF-8 terminal nor an HTML page can carry
    frames = [{"filename": os.fsdecode(b"/home/\xe9t\xe9/train.py"), "line": 7, "name": "step"}]
    trace = [{"action": "alloc", "addr": 1 << 20, "size": 4 * MiB, "stream": 0,
              "frames": frames}]
    snap = _undecodable_name(tmp_path, b"snap\xff.pickle")
    dump_snapshot(snap, snap_with(traces=[trace]))
    env = dict(os.environ, PYTHONIOENCODING="utf-8:strict")    # a UTF-8 locale's terminal
    html_out = _undecodable_name(tmp_path, b"page\xfe.html")
    missing = str(snap) + "-missing"
    for args, status in [
            (("memory", "viz", str(snap)), 0),
            (("memory", "viz", str(snap), "-o", str(html_out), "--compare", str(snap)), 0),
            (("memory", "viz", str(snap), "--segsum"), 0),
            (("memory", "viz", str(snap), "--trace"), 0),
            (("memory", "tune", str(snap)), 0),
            (("memory", "tune", str(snap), "--json"), 0),
            (("replay", str(snap)), 0),
            (("replay", str(snap), "--json"), 0),
            (("memory", "viz", missing), 1),
            (("memory", "tune", missing), 1),
            (("replay", missing), 1)]:
        proc = subprocess.run([sys.executable, "-m", "accelrt", *args], capture_output=True,
                              timeout=120, env=env, check=False)
        err = proc.stderr.decode("utf-8")
        assert proc.returncode == status and "Traceback" not in err, (args, err[-2000:])
        out = proc.stdout.decode("utf-8")      # what reached the terminal is UTF-8
        if args[-1] not in ("--segsum", "--trace", "--json") and status == 0:
            assert ("snap\\xff" in out or "page\\xfe" in out), (args, out)
    page = snap.with_suffix(".html")
    text = page.read_bytes().decode("utf-8")
    assert "<title>accelrt memory: snap\\xff.pickle</title>" in text
    assert "snap\\\\xff.pickle" in html_out.read_bytes().decode("utf-8")   # the compare names
    assert sorted(os.listdir(tmp_path)) == sorted(
        os.path.basename(str(p)) for p in (snap, page, html_out))


def test_a_failed_write_leaves_no_file_behind(tmp_path: Path) -> None:
    # a full disk, made by a file-size limit: the page fails to write part way through
    snap = tmp_path / "s.pickle"
    dump_snapshot(snap, snap_with(traces=[[{"action": "alloc", "addr": 1 << 20, "size": MiB,
                                            "stream": 0, "frames": []}]]))
    kept = tmp_path / "kept.html"
    kept.write_bytes(b"an earlier page")

    def small_disk() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)     # EFBIG instead of a signal
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    for out in (tmp_path / "new.html", kept):
        proc = subprocess.run([sys.executable, "-m", "accelrt", "memory", "viz", str(snap),
                               "-o", str(out)], capture_output=True, text=True, timeout=120,
                              preexec_fn=small_disk, check=False)
        assert_one_line_error(proc, "cannot write")
    assert sorted(os.listdir(tmp_path)) == ["kept.html", "s.pickle"]    # no part, no temp
    assert kept.read_bytes() == b"an earlier page"


def test_write_atomic_keeps_what_open_would(tmp_path: Path) -> None:
    old = tmp_path / "old.html"
    old.write_bytes(b"x")
    old.chmod(0o640)
    write_atomic(str(old), b"new")
    assert old.read_bytes() == b"new" and stat.S_IMODE(old.stat().st_mode) == 0o640
    link = tmp_path / "link.html"
    link.symlink_to(old)
    write_atomic(str(link), b"through")           # a link is written through, as open does
    assert link.is_symlink() and old.read_bytes() == b"through"
    write_atomic(os.devnull, b"not replaced")     # not a regular file: written in place
    assert not stat.S_ISREG(os.stat(os.devnull).st_mode)
    with pytest.raises(OSError):
        write_atomic(str(tmp_path / "no-such-folder" / "p.html"), b"")
    assert sorted(os.listdir(tmp_path)) == ["link.html", "old.html"]


def test_write_atomic_updates_a_writable_file_in_a_folder_it_cannot_create_files_in(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a read-only folder (simulated: the suite runs as root, which chmod does not stop)
    page = tmp_path / "page.html"
    page.write_bytes(b"old")
    real_open = os.open

    def no_new_files(name: str, flags: int, *args: int) -> int:
        if flags & os.O_CREAT:
            raise PermissionError(13, "Permission denied", name)
        return real_open(name, flags, *args)

    monkeypatch.setattr(os, "open", no_new_files)
    write_atomic(str(page), b"new")                # in place, as open() would
    assert page.read_bytes() == b"new" and os.listdir(tmp_path) == ["page.html"]
    with pytest.raises(PermissionError):           # a new file there: still refused
        write_atomic(str(tmp_path / "other.html"), b"x")
    assert os.listdir(tmp_path) == ["page.html"]


def test_default_output_replaces_the_extension(tmp_path: Path) -> None:
    p = tmp_path / "s.pickle"
    dump_snapshot(p, snap_with())
    proc = run_cli("memory", "viz", str(p))
    assert proc.returncode == 0 and (tmp_path / "s.html").exists()


# ---------------------------------------------------------------------- fuzzing

_leaf = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                  st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
                  st.sampled_from(["alloc", "free_requested", "free_completed",
                                   "segment_alloc", "segment_free", "segment_map",
                                   "segment_unmap", "oom", "snapshot", "active_allocated",
                                   "inactive", "active_pending_free"]))
_keys = st.sampled_from(["address", "total_size", "stream", "blocks", "size", "state",
                         "requested_size", "frames", "device", "segment_pool_id", "action",
                         "addr", "device_free", "user_metadata", "is_expandable",
                         "segment_type", "filename", "line", "name"])
_plain = st.recursive(_leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.tuples(inner, inner),
    st.dictionaries(_keys, inner, max_size=6)), max_leaves=30)
_block = st.fixed_dictionaries(
    {"size": st.integers(0, 2**64 - 1), "state": st.sampled_from(
        ["active_allocated", "inactive", "active_pending_free"]),
     "requested_size": st.integers(0, 2**64 - 1)}, optional={"frames": _plain})
_segment = st.fixed_dictionaries(
    {"address": st.integers(0, 2**64 - 1), "total_size": st.integers(0, 2**64 - 1),
     "stream": st.integers(0, 2**64 - 1), "blocks": st.lists(_block, max_size=4)},
    optional={"device": _plain, "segment_pool_id": _plain, "frames": _plain,
              "is_expandable": _plain})
_entry = st.fixed_dictionaries(
    {"action": _leaf}, optional={"addr": st.integers(0, 2**64 - 1) | _plain,
                                 "size": st.integers(0, 2**64 - 1) | _plain,
                                 "device_free": st.integers(0, 2**64 - 1),
                                 "frames": _plain, "user_metadata": _plain})
_snapshot = st.one_of(
    _plain,
    st.fixed_dictionaries({"segments": st.lists(st.one_of(_segment, _plain), max_size=4),
                           "device_traces": st.lists(st.lists(st.one_of(_entry, _plain),
                                                              max_size=6), max_size=3)}))


@settings(max_examples=120, suppress_health_check=[HealthCheck.too_slow])
@given(_snapshot)
def test_fuzz_malformed_snapshots_raise_only_value_error(snap: Any) -> None:
    try:
        check_snapshot(snap)
    except ValueError:
        return
    for fn in (segsum, trace_text, trace_html):
        out = fn(snap)
        assert isinstance(out, str)
    assert "\x1b" not in trace_text(snap)


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(_snapshot)
def test_fuzz_pickled_snapshots_load_or_raise_value_error(snap: Any) -> None:
    data = pickle.dumps(snap, protocol=4)
    for cut in (len(data), len(data) // 2):
        try:
            check_snapshot(load_pickle(data[:cut]))
        except ValueError:
            pass


def test_load_snapshot_rejects_non_snapshots(tmp_path: Path) -> None:
    p = tmp_path / "x.pickle"
    for obj in ([1, 2], {"segments": "nope"}, {"segments": [], "device_traces": [5]}):
        p.write_bytes(pickle.dumps(obj))
        with pytest.raises(ValueError):
            load_snapshot(str(p))


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(_plain, st.fixed_dictionaries({"device_traces": st.one_of(
    _plain, st.lists(st.one_of(_plain, st.lists(st.one_of(_entry, _plain), max_size=5)),
                     max_size=3))})))
def test_fuzz_replay_of_malformed_snapshot_pickles(tmp_path_factory: pytest.TempPathFactory,
                                                   snap: Any) -> None:
    p = tmp_path_factory.mktemp("fuzz") / "s.pickle"
    p.write_bytes(pickle.dumps(snap, protocol=4))
    try:
        ops = trace_ops(load_trace(str(p)), str(p))
    except ValueError:
        return
    assert all(isinstance(op, tuple) and len(op) == 4 for op in ops)


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(_plain, st.tuples(_leaf, _leaf, _leaf, _leaf)), max_size=8))
def test_fuzz_trace_entries_raise_only_value_error(entries: list[Any]) -> None:
    from accelrt.memory.tools._replay import replay_ops
    try:
        ops = trace_ops(entries)
    except ValueError:
        return
    try:
        replay_ops(ops)
    except MemoryError:       # the simulated device is out of memory: reported, exit 1
        pass


def test_replay_of_a_snapshot_with_a_non_list_trace(tmp_path: Path) -> None:
    p = tmp_path / "s.pickle"
    p.write_bytes(pickle.dumps({"device_traces": [5]}))
    assert_one_line_error(run_cli("replay", str(p)), "must be a list of lists")


def test_gzip_from_a_pipe(tmp_path: Path) -> None:
    data = gzip.compress(pickle.dumps(snap_with()))
    proc = subprocess.run([sys.executable, "-m", "accelrt", "memory", "viz", "/dev/stdin",
                           "--segsum"], input=data, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert b"segments: 0" in proc.stdout
