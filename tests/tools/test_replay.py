"""accelrt replay: trace loading, the simulated device, and replay results."""

from __future__ import annotations

import gzip
import itertools
import json
import os
import pickle

import pytest

from accelrt import OutOfMemoryError
from accelrt.memory._config import parse_config
from accelrt.memory.tools._replay import (
    load_pickle,
    load_trace,
    replay_main,
    replay_ops,
    trace_ops,
)
from accelrt.testing._simulated import SimulatedBackend
from tests.helpers.evil_pickle import CALLS, Evil

MiB = 1 << 20
# The shared real traces, vendored under tests/data/traces.
TRACE_DIRS = [os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "traces")]


def shared_trace(name: str) -> str:
    for d in TRACE_DIRS:
        path = os.path.join(d, f"trace_{name}.json.gz")
        if os.path.exists(path):
            return path
    pytest.skip(f"trace_{name}.json.gz not found in {TRACE_DIRS}")


def write_json(path, trace, gz=False) -> str:
    data = json.dumps({"info": {}, "trace": trace}).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return str(path)


# ---------------------------------------------------------------------- simulated backend

def test_simulated_counts_bytes_and_runs_out() -> None:
    b = SimulatedBackend(capacity=10 * MiB, device_count=2)
    assert b.device_count() == 2
    assert b.get_device_properties(1)["total_memory"] == 10 * MiB
    p = b.malloc(0, 6 * MiB)
    q = b.malloc(1, 6 * MiB)                 # devices are independent
    assert p and q and p != q
    assert b.malloc(0, 6 * MiB) == 0         # plain out-of-memory: 0, no exception
    assert b.get_memory_info(0) == (4 * MiB, 10 * MiB)
    b.free(0, p)
    assert b.get_memory_info(0) == (10 * MiB, 10 * MiB)
    with pytest.raises(ValueError, match="already freed"):
        b.free(0, p)


def test_simulated_addresses_never_overlap() -> None:
    b = SimulatedBackend()
    spans = []
    for size in (1, 511, 512, 513, 3 * MiB):
        p = b.malloc(0, size)
        assert p % 512 == 0
        spans.append((p, p + size))
    spans.sort()
    assert all(a[1] <= b2[0] for a, b2 in itertools.pairwise(spans))


def test_simulated_addresses_stay_in_their_region_when_reused_forever() -> None:
    """A long replay mallocs far more bytes over time than a device's address region holds;
    the bump pointer used to run into the device's virtual range and then the next device."""
    tib = 1 << 40
    b = SimulatedBackend(capacity=2 * tib, device_count=2)
    base, vm_base, next_base = 1 << 44, (1 << 44) + (1 << 43), 2 << 44
    first = b.malloc(0, tib)
    for _ in range(20):                      # 20 TiB over time, at most 2 TiB live
        p = b.malloc(0, tib)
        assert p and base <= p and p + tib <= vm_base and p != first
        b.free(0, p)
    for _ in range(20):
        r = b.vm_reserve(0, tib)
        assert vm_base <= r and r + tib <= next_base
        b.vm_release(0, r, tib)
    assert b.malloc(0, tib) and b.malloc(0, 1) == 0      # capacity still counts bytes
    b2 = SimulatedBackend(capacity=tib, device_count=1)
    empty = b2.malloc(0, 0)                  # a 0-byte block keeps its own address
    for _ in range(20):                      # 10 TiB over time: past the 8 TiB region
        p = b2.malloc(0, tib // 2)
        assert p != empty
        b2.free(0, p)


def test_simulated_virtual_memory() -> None:
    b = SimulatedBackend(capacity=8 * MiB)
    assert b.vm_supported(0) and b.vm_granularity(0) == 2 * MiB
    base = b.vm_reserve(0, 64 * MiB)
    assert b.vm_map(0, base, 4 * MiB)
    assert b.get_memory_info(0)[0] == 4 * MiB
    assert not b.vm_map(0, base + 4 * MiB, 6 * MiB)     # over capacity
    with pytest.raises(ValueError, match="overlaps"):
        b.vm_map(0, base + 2 * MiB, 2 * MiB)
    with pytest.raises(ValueError, match="aligned"):
        b.vm_map(0, base + 4 * MiB, 1000)
    with pytest.raises(ValueError, match="not inside a reservation"):
        b.vm_map(0, base + 64 * MiB, 2 * MiB)
    with pytest.raises(ValueError, match="still has mapped pages"):
        b.vm_release(0, base, 64 * MiB)
    with pytest.raises(ValueError, match="cuts a mapping"):   # whole mappings only, as on CUDA
        b.vm_unmap(0, base, 2 * MiB)
    assert b.vm_map(0, base + 4 * MiB, 2 * MiB)
    b.vm_unmap(0, base, 6 * MiB)              # a run of two whole mappings in one call
    with pytest.raises(ValueError, match="not entirely mapped"):
        b.vm_unmap(0, base, 2 * MiB)
    b.vm_release(0, base, 64 * MiB)
    assert b.get_memory_info(0)[0] == 8 * MiB
    calls = b.calls(0)
    assert (calls["vm_map"], calls["vm_unmap"], calls["vm_unmapped_mappings"]) == (2, 1, 2)
    assert (calls["vm_reserve"], calls["vm_release"], calls["malloc"]) == (1, 1, 0)


def test_simulated_bad_arguments() -> None:
    with pytest.raises(ValueError):
        SimulatedBackend(capacity=0)
    with pytest.raises(TypeError):
        SimulatedBackend(capacity=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        SimulatedBackend(device_count=0)
    with pytest.raises(TypeError):
        SimulatedBackend().malloc(0, "1")  # type: ignore[arg-type]


def test_simulated_streams_and_events_complete_at_once() -> None:
    b = SimulatedBackend()
    s = b.stream_create(0, 0)
    e = b.event_create(0, True, False, False)
    b.event_record(0, e, s)
    assert b.event_query(0, e) and b.stream_query(0, s)
    ran = []
    b.launch_host_func(0, lambda: ran.append(1), s)
    assert ran == [1]
    h = b.host_malloc(100)
    assert b.host_bytes() == 100
    b.host_free(h)
    with pytest.raises(ValueError):
        b.host_free(h)


# ---------------------------------------------------------------------- loading

def test_trace_ops_skips_unknown_frees_and_other_actions() -> None:
    entries = [["free_requested", 1, 512, 0], ["segment_alloc", 0, 2 * MiB, 0],
               ["alloc", 10, 100, 0], ["alloc", 20, 0, 0], ["free_completed", 10, 100, 0],
               ["free_requested", 10, 100, 0], ["free_requested", 10, 100, 0],
               ["free_requested", 20, 0, 0]]
    assert trace_ops(entries) == [(True, 10, 100, 0), (False, 10, 0, 0)]


@pytest.mark.parametrize("entry, match", [
    ("alloc", r"entry 0 must be \[action, addr, size, stream\]"),
    (["alloc", 1, 2], "entry 0 must be"),
    ([1, 1, 2, 0], "entry 0 must be"),
    (["alloc", "0x10", 512, 0], "addr must be an int"),
    (["alloc", 16, 1.5, 0], "size must be an int"),
    (["alloc", 16, -1, 0], "size -1 is out of range"),
    (["alloc", 16, 512, None], "stream must be an int"),
])
def test_trace_ops_rejects_malformed_entries(entry, match) -> None:
    with pytest.raises(ValueError, match=match):
        trace_ops([entry], "t.json")


def test_load_trace_formats(tmp_path) -> None:
    trace = [["alloc", 16, 512, 0], ["free_requested", 16, 512, 0]]
    assert load_trace(write_json(tmp_path / "a.json", trace)) == trace
    assert load_trace(write_json(tmp_path / "a.json.gz", trace, gz=True)) == trace
    snap = {"segments": [], "device_traces": [[], [
        {"action": "alloc", "addr": 16, "size": 512, "stream": 3, "time_us": 1},
        {"action": "free_requested", "addr": 16, "size": 512, "stream": 3},
        {"action": "oom", "device_free": 0, "size": 512}]]}
    p = tmp_path / "snap.pickle"
    p.write_bytes(pickle.dumps(snap))
    assert load_trace(str(p)) == [("alloc", 16, 512, 3), ("free_requested", 16, 512, 3),
                                  ("oom", 0, 512, 0)]


@pytest.mark.parametrize("content, match", [
    (b"{not json", "neither JSON nor a snapshot pickle"),
    (b'{"trace": 5}', "'trace' list"),
    (b"[1, 2]", "'trace' list"),
    (b"\x1f\x8bgarbage", "corrupt gzip"),
    (pickle.dumps({"segments": []}), "'device_traces' list"),
    (pickle.dumps({"device_traces": [[{"action": "alloc"}], []]}), "has no 'size' key"),
    (pickle.dumps({"device_traces": [[{"action": "alloc", "size": 1}],
                                     [{"action": "alloc", "size": 1}]]}), "2 devices"),
    (pickle.dumps({"device_traces": [[5]]}), "is not a dict"),
    (pickle.dumps(Evil()), "refusing to load"),
])
def test_load_trace_rejects_bad_files(tmp_path, content: bytes, match: str) -> None:
    p = tmp_path / "bad"
    p.write_bytes(content)
    with pytest.raises(ValueError, match=match):
        load_trace(str(p))
    assert CALLS == []


def test_load_pickle_plain_data_only() -> None:
    data = {"a": [1, 2.5, None, True, "s", (0, 1), 2**70], "n": {"x": -1}}
    assert load_pickle(pickle.dumps(data, protocol=2)) == data
    assert load_pickle(pickle.dumps(data | {"b": b"raw"}, protocol=5)) == data | {"b": b"raw"}
    import collections
    with pytest.raises(ValueError, match="collections.OrderedDict"):
        load_pickle(pickle.dumps(collections.OrderedDict(a=1)))
    with pytest.raises(ValueError, match="not a valid pickle"):
        load_pickle(pickle.dumps(data)[:-5])


def test_trace_ops_frees_on_free_completed_when_free_requested_was_skipped() -> None:
    entries = [["alloc", 16, 512, 0], ["free_completed", 16, 512, 0],
               ["alloc", 16, 1024, 0], ["free_requested", 16, 1024, 0],
               ["free_completed", 16, 1024, 0], ["alloc", 16, 2048, 0]]
    assert trace_ops(entries) == [(True, 16, 512, 0), (False, 16, 0, 0), (True, 16, 1024, 0),
                                  (False, 16, 0, 0), (True, 16, 2048, 0)]
    r = replay_ops(trace_ops(entries))
    assert r["peak_live_bytes"] == 2048


def test_trace_ops_rejects_a_second_alloc_of_a_live_address() -> None:
    with pytest.raises(ValueError, match="entry 1: address 16 is allocated again"):
        trace_ops([["alloc", 16, 512, 0], ["alloc", 16, 512, 0]])


@pytest.mark.parametrize("obj, match", [
    ({"s": {1, 2}}, "a set is not plain"),
    ([frozenset([1])], "a frozenset is not plain"),
    ({"b": bytearray(b"x")}, "a bytearray is not plain"),
])
def test_load_pickle_refuses_non_plain_builtins(obj, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        load_pickle(pickle.dumps(obj, protocol=5))


def test_load_pickle_refuses_cycles_and_deep_nesting() -> None:
    loop: list = []
    loop.append(loop)
    with pytest.raises(ValueError, match="cycle"):
        load_pickle(pickle.dumps({"frames": loop}))
    n = 20_000                            # EMPTY_LIST x n, APPEND x (n - 1): n-deep lists
    deep = b"\x80\x02" + b"]" * n + b"a" * (n - 1) + b"."
    with pytest.raises(ValueError, match="nested more than 64 deep"):
        load_pickle(deep)
    shared = [{"name": "f"}]              # shared (not cyclic) references are fine
    wide = [shared] * 10
    for _ in range(20):                   # 2**20 paths: checked in O(objects) with a memo
        wide = [wide, wide]
    out = load_pickle(pickle.dumps(wide))
    assert out[0] is out[1] and out[0][0] is out[0][1]
    for _ in range(20):                   # 2**40 paths: every reader would walk them all
        wide = [wide, wide]
    with pytest.raises(ValueError, match="expands to more than"):
        load_pickle(pickle.dumps(wide))


# ---------------------------------------------------------------------- replay

def test_replay_worked_example() -> None:
    ops = [(True, 1, 3 * MiB, 0), (True, 2, 1000, 0), (False, 1, 0, 0), (False, 2, 0, 0)]
    r = replay_ops(ops, name="ex")
    assert r["trace"] == "ex" and r["ops"] == 4
    assert r["peak_live_bytes"] == 3 * MiB + 1000
    assert r["peak_reserved_bytes"] == 22 * MiB          # a 20 MiB and a 2 MiB segment
    assert r["device_mallocs"] == 2
    assert r["reserved_over_live"] == round(22 * MiB / (3 * MiB + 1000), 4)
    assert r["us_per_op"] > 0


def test_replay_reuses_cached_blocks_and_honours_config() -> None:
    ops = []
    for k in range(50):
        ops += [(True, k, 3 * MiB, 0), (False, k, 0, 0)]
    r = replay_ops(ops)
    assert r["device_mallocs"] == 1 and r["peak_reserved_bytes"] == 20 * MiB
    r = replay_ops(ops, parse_config("expandable_segments:True"))
    assert r["peak_reserved_bytes"] == 20 * MiB          # one large page
    streams = [(True, 1, 4096, 0), (False, 1, 0, 0), (True, 2, 4096, 7), (False, 2, 0, 7)]
    assert replay_ops(streams)["device_mallocs"] == 2     # blocks never cross streams


def test_replay_out_of_simulated_memory() -> None:
    with pytest.raises(OutOfMemoryError):
        replay_ops([(True, 1, 81 << 30, 0)])


def test_replay_main_json_and_table(tmp_path, capsys) -> None:
    path = write_json(tmp_path / "small.json.gz",
                      [["alloc", 16, 3 * MiB, 0], ["alloc", 32, 1000, 0],
                       ["free_requested", 16, 3 * MiB, 0]], gz=True)
    assert replay_main([path, "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["trace"] == "small" and row["ops"] == 3
    assert {"ops", "peak_live_bytes", "peak_reserved_bytes", "device_mallocs", "us_per_op",
            "trace", "reserved_over_live"} <= set(row)
    assert replay_main([path, "--alloc-conf", "expandable_segments:True"]) == 0
    out = capsys.readouterr().out
    assert "alloc conf: expandable_segments:True" in out
    assert "peak reserved" in out and "small" in out
    # the table shows a policy's driver calls too (mappings and their H100 time)
    head, row_line = out.splitlines()[1:3]
    # (columns widen with their values: us/op is wider than its title on a loaded machine)
    assert " ".join(head.split()).endswith(
        "device mallocs vm maps vm unmaps driver ms (H100) us/op")
    mallocs, maps, unmaps, driver_ms, _ = row_line.split()[-5:]
    # one 20 MiB page of the large pool, one 2 MiB page of the small pool; nothing unmapped
    assert (mallocs, maps, unmaps) == ("0", "2", "0")
    assert float(driver_ms) == pytest.approx(2 * 73.5 / 1000, abs=0.05)


def test_replay_main_errors(tmp_path, capsys) -> None:
    good = write_json(tmp_path / "g.json", [["alloc", 16, 512, 0]])
    bad = tmp_path / "b.json"
    bad.write_text("{oops")
    assert replay_main([good, str(bad), "--json"]) == 1   # the good one is still reported
    captured = capsys.readouterr()
    assert json.loads(captured.out)["ops"] == 1
    assert "neither JSON" in captured.err
    assert replay_main([str(tmp_path / "missing.json")]) == 1
    assert replay_main([good, "--alloc-conf", "no_such_key:1"]) == 2
    assert "Unrecognized key" in capsys.readouterr().err
    assert replay_main([]) == 2


@pytest.mark.parametrize("name, live, native, expandable", [
    ("resnet50_train", 5_762_142_352, 6_962_544_640, 5_865_734_144),
    ("varlen_encoder", 1_246_027_776, 1_608_515_584, 1_495_269_376),
])
def test_shared_traces_match_pytorch(name, live, native, expandable) -> None:
    """Conformance: PyTorch's peak reserved bytes on the shared real traces."""
    ops = trace_ops(load_trace(shared_trace(name)))
    r = replay_ops(ops)
    assert r["peak_live_bytes"] == live
    assert r["peak_reserved_bytes"] == native
    assert replay_ops(ops, parse_config("expandable_segments:True"))[
        "peak_reserved_bytes"] == expandable


def test_progress_bar_text() -> None:
    import io
    out = io.StringIO()
    ops = [(True, k, 512, 0) for k in range(20000)]
    replay_ops(ops, name="big", progress=out)
    text = out.getvalue()
    assert "\rreplaying big [" in text and "100.0%" in text
    assert "\x1b" not in text                            # plain text, no escape codes
    assert text.endswith("\r")                           # the line is cleared at the end


def test_replay_main_no_progress_when_not_a_tty(tmp_path, capsys) -> None:
    path = write_json(tmp_path / "t.json", [["alloc", k, 512, 0] for k in range(10)])
    assert replay_main([path]) == 0
    assert "replaying" not in capsys.readouterr().err


def test_replay_counts_the_steady_state_driver_calls(tmp_path, capsys) -> None:
    """Issue 24 §2: the driver calls of the last third of the operations (mallocs, frees,
    mappings made and removed), and the existing JSON fields unchanged beside them."""
    # 9 ops: the steady state is ops 6..8; the first segment is malloc'd before it
    ops = [(True, 1, 3 * MiB, 0), (False, 1, 0, 0), (True, 2, 3 * MiB, 0), (False, 2, 0, 0),
           (True, 3, 3 * MiB, 0), (False, 3, 0, 0),
           (True, 4, 30 * MiB, 0), (True, 5, 40 * MiB, 0), (False, 4, 0, 0)]
    r = replay_ops(ops)
    assert r["device_mallocs"] == 3                   # one before, two in the steady state
    assert r["steady_driver_calls"] == 2
    assert r["steady_driver_calls_per_1k_ops"] == round(2 * 1000 / 3, 2)
    # mappings made and removed count one by one (a GPU unmaps and releases each)
    lowfrag = parse_config("expandable_segments:True,page_reuse:True")
    first = replay_ops(ops[:6], lowfrag)
    r = replay_ops(ops[:6] + [(True, 4, 30 * MiB, 0), (False, 4, 0, 0), (True, 5, 3 * MiB, 0)],
                   lowfrag)
    # (30 MiB after 4 MiB mapped: 13 more pages, each a mapping while the mark is small)
    assert r["steady_driver_calls"] == 13 == (r["vm_maps"] + r["vm_unmaps"]
                                              - first["vm_maps"] - first["vm_unmaps"])
    assert replay_ops(ops[:6])["steady_driver_calls"] == 0     # cached: no driver call
    assert replay_ops([])["steady_driver_calls"] == 0
    path = write_json(tmp_path / "t.json", [["alloc", k, 512, 0] for k in range(1, 4)])
    assert replay_main([path, "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    # the new keys come last; the others keep their order and values
    assert list(row) == ["trace", "ops", "peak_live_bytes", "peak_reserved_bytes",
                         "reserved_over_live", "device_mallocs", "device_frees", "vm_maps",
                         "vm_unmaps", "driver_us_h100", "us_per_op", "steady_driver_calls",
                         "steady_driver_calls_per_1k_ops"]
    assert (row["device_mallocs"], row["steady_driver_calls"]) == (1, 0)
