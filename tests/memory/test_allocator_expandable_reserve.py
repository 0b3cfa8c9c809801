"""PyTorch 2.15's expandable-segment reserve: ``expandable_segments_reserve`` and
``expandable_segments_reserve_by_class``, the reservations they size and the OOM messages."""

from __future__ import annotations

import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelrt import OutOfMemoryError
from accelrt.memory._allocator import DeviceCachingAllocator
from accelrt.memory._config import ReserveSpec, parse_config, reserve_bytes
from accelrt.testing import SimulatedBackend

MiB = 1 << 20
GiB = 1 << 30
BAD = "Ignoring invalid expandable-segment reserve value"


def make(conf: str, **kw):
    b = SimulatedBackend(**kw)
    return DeviceCachingAllocator(b, 0, parse_config(conf)), b


# ---------------------------------------------------------------------- parsing

@pytest.mark.parametrize(("value", "spec"), [
    ("0.5", ReserveSpec(True, 0.5)), ("40G", ReserveSpec(False, 40.0)),
    ("40g", ReserveSpec(False, 40.0)), (".25", ReserveSpec(True, 0.25)),
    ("1e-1", ReserveSpec(True, 0.1)), ("+2.", ReserveSpec(True, 2.0)),
    ("1E1G", ReserveSpec(False, 10.0)),
])
def test_reserve_values(value: str, spec: ReserveSpec) -> None:
    cfg = parse_config(f"expandable_segments_reserve:{value}")
    assert cfg.expandable_segments_reserve == spec


@pytest.mark.parametrize("value", ["abc", "G", "-1", "0", "0G", "inf", "nan", "1e400", "0x10",
                                   "5e", "1_0", "40GG", "40GiB", "1e-400", "٣"])
def test_bad_reserve_value_warns_and_keeps_the_reserve(value: str) -> None:
    base = parse_config("expandable_segments_reserve:0.5")
    with pytest.warns(UserWarning, match=BAD) as rec:
        cfg = parse_config(f"expandable_segments_reserve:{value}", base)
    assert len(rec) == 1 and "positive, finite fraction like 0.5" in str(rec[0].message)
    assert cfg.expandable_segments_reserve == ReserveSpec(True, 0.5)
    with pytest.warns(UserWarning, match=BAD):
        assert parse_config(f"expandable_segments_reserve:{value}").expandable_segments_reserve \
            is None


def test_by_class_skips_bad_entries_and_keeps_the_others() -> None:
    with pytest.warns(UserWarning, match=BAD + " '12X'"):
        cfg = parse_config("expandable_segments_reserve:0.9,"
                           "expandable_segments_reserve_by_class:[serving:0.25,bad:12X,ads:8G]")
    assert dict(cfg.expandable_segments_reserve_by_class) == {
        "serving": ReserveSpec(True, 0.25), "ads": ReserveSpec(False, 8.0)}
    assert cfg.expandable_segments_reserve == ReserveSpec(True, 0.9)


def test_reserve_keys_persist_across_parses_and_a_repeated_list_replaces() -> None:
    # PyTorch never resets the reserve fields: a parse without them keeps them; a new list
    # replaces the whole map, and [] empties it
    cfg = parse_config("expandable_segments_reserve:2G,"
                       "expandable_segments_reserve_by_class:[a:0.1,b:0.2,a:0.3,]")
    assert cfg.expandable_segments_reserve_by_class == (
        ("b", ReserveSpec(True, 0.2)), ("a", ReserveSpec(True, 0.3)))
    cfg = parse_config("max_split_size_mb:64", cfg)
    assert cfg.expandable_segments_reserve == ReserveSpec(False, 2.0)
    assert len(cfg.expandable_segments_reserve_by_class) == 2
    cfg = parse_config("expandable_segments_reserve_by_class:[c:1G]", cfg)
    assert cfg.expandable_segments_reserve_by_class == (("c", ReserveSpec(False, 1.0)),)
    cfg = parse_config("expandable_segments_reserve_by_class:[]", cfg)
    assert cfg.expandable_segments_reserve_by_class == ()
    assert cfg.expandable_segments_reserve == ReserveSpec(False, 2.0)


def test_a_class_named_like_a_key_is_a_class() -> None:
    cfg = parse_config("expandable_segments_reserve_by_class:[large_segment_size_mb:0.5]")
    assert cfg.large_segment_size == 20 * MiB
    assert cfg.expandable_segments_reserve_by_class == (
        ("large_segment_size_mb", ReserveSpec(True, 0.5)),)


@pytest.mark.parametrize("text", [
    "expandable_segments_reserve_by_class:0.5",
    "expandable_segments_reserve_by_class:[a:0.5",
    "expandable_segments_reserve_by_class:[a 0.5]",
    "expandable_segments_reserve_by_class:[a:]",
    "expandable_segments_reserve_by_class:[,a:0.5]",
    "expandable_segments_reserve_by_class:[a:0.5:1]",
    "expandable_segments_reserve:",
    "expandable_segments_reserve:[0.5]",
    "expandable_segments_reserve",
])
def test_malformed_structure_raises(text: str) -> None:
    with pytest.raises(ValueError, match="accelrt allocator config"):
        parse_config(text)


_NAMES = st.sampled_from(["a", "b", "serving", "x_1"])
_GOOD = st.one_of(
    st.floats(min_value=1e-3, max_value=4.0).map(lambda f: (repr(f), ReserveSpec(True, f))),
    st.integers(min_value=1, max_value=200).map(lambda n: (f"{n}G", ReserveSpec(False, n))))
_BADV = st.sampled_from(["0", "-0.5", "abc", "G", "1e999", "nan", "2x"]).map(lambda t: (t, None))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just("global"), st.one_of(_GOOD, _BADV)),
    st.tuples(st.just("classes"), st.lists(st.tuples(_NAMES, st.one_of(_GOOD, _BADV)),
                                           max_size=5))), max_size=6))
def test_reserve_parsing_against_a_model(items) -> None:
    parts: list[str] = []
    want_global = None
    want_classes: dict[str, ReserveSpec] = {}
    bad = 0
    for kind, val in items:
        if kind == "global":
            parts.append(f"expandable_segments_reserve:{val[0]}")
            if val[1] is None:
                bad += 1
            else:
                want_global = val[1]
        else:
            parts.append("expandable_segments_reserve_by_class:["
                         + ",".join(f"{n}:{v[0]}" for n, v in val) + "]")
            want_classes = {}
            for n, (_, spec) in val:
                if spec is None:
                    bad += 1
                else:
                    want_classes.pop(n, None)
                    want_classes[n] = spec
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        cfg = parse_config(",".join(parts))
    assert sum(BAD in str(w.message) for w in rec) == bad == len(rec)
    assert cfg.expandable_segments_reserve == want_global
    assert cfg.expandable_segments_reserve_by_class == tuple(want_classes.items())


def test_resolve_truncates_and_saturates() -> None:
    assert ReserveSpec(False, 1e20).resolve(1) == 2**64 - 1
    assert ReserveSpec(True, 0.3).resolve(10) == 3
    total = 100 * GiB
    assert reserve_bytes(parse_config(""), total) == total + total // 8
    assert reserve_bytes(parse_config("expandable_segments_reserve:1e20G"), total) == (
        total + total // 8)
    assert reserve_bytes(parse_config("expandable_segments_reserve:0.9"), total) == (
        int(0.9 * total))


# ---------------------------------------------------------------------- reservations

@pytest.mark.parametrize(("value", "reserved"), [
    (None, 90 * GiB), ("0.5", 40 * GiB), ("40G", 40 * GiB), ("2.0", 90 * GiB),
    ("0.0001", 20 * MiB),   # 8.4 MB: one 20 MiB page
])
def test_reserve_sizes_new_segments(value: str | None, reserved: int) -> None:
    conf = "expandable_segments:True" + (f",expandable_segments_reserve:{value}" if value else "")
    a, b = make(conf)        # an 80 GiB device
    p = a.malloc(3 * MiB, 0)
    assert list(b.reservations.values()) == [reserved]
    a.free(p)


def test_by_class_does_not_apply_to_untagged_streams() -> None:
    a, b = make("expandable_segments:True,expandable_segments_reserve_by_class:[tiny:0.05]")
    a.malloc(30 * GiB, 0)    # the global (full) reserve: no stream is tagged in accelrt
    assert list(b.reservations.values()) == [90 * GiB]


def test_request_larger_than_the_reserve_fails_through_the_oom_path() -> None:
    a, b = make("expandable_segments:True,expandable_segments_reserve:0.05")   # 4 GiB
    seen: list[tuple[int, int, int, int]] = []
    a.attach_oom_observer(lambda *args: seen.append(args))
    p = a.malloc(1 * GiB, 0)
    a.free(p)                                # cached: the retry releases it
    with pytest.raises(OutOfMemoryError) as ei:
        a.malloc(16 * GiB, 0)                # far below the device's 80 GiB
    msg = str(ei.value)
    assert "expandable-segment reserve of 4.00 GiB" in msg
    assert "expandable_segments_reserve or expandable_segments_reserve_by_class" in msg
    assert "at least 16.00 GiB" in msg
    assert "VSZ" not in msg and "If reserved but unallocated" not in msg
    assert "ACCELRT_CPU_MEMORY" not in msg
    st_ = a.stats()
    assert st_["num_ooms"] == 1 and len(seen) == 1 and seen[0][1] == 16 * GiB
    assert st_["num_alloc_retries"] == 1 and a.memory_reserved() == 0 == b.used
    assert b.reservations == {}              # no reservation was made for the request
    q = a.malloc(3 * GiB, 0)                 # what fits still works
    assert 3 * GiB <= a.memory_reserved() < 4 * GiB
    a.free(q)


def test_request_larger_than_the_device_does_not_blame_the_reserve() -> None:
    a, _ = make("expandable_segments:True,expandable_segments_reserve:0.05")
    with pytest.raises(OutOfMemoryError) as ei:
        a.malloc(100 * GiB, 0)
    msg = str(ei.value)
    assert "expandable-segment" not in msg
    assert "expandable_segments is enabled" in msg and "(VSZ)" in msg
    assert a.stats()["num_ooms"] == 1


@pytest.mark.parametrize(("conf", "hint"), [
    ("", ("If reserved but unallocated memory is large try setting "
          "ACCELRT_ALLOC_CONF=expandable_segments:True")),
    ("expandable_segments:True", ("expandable_segments is enabled. If instead the process is "
                                  "running out of virtual address space (VSZ)")),
])
def test_oom_hint_depends_on_expandable_segments(conf: str, hint: str) -> None:
    a, _ = make(conf, capacity=100 * MiB)
    with pytest.raises(OutOfMemoryError) as ei:
        a.malloc(200 * MiB, 0)
    msg = str(ei.value)
    assert hint in msg
    other = ("If reserved but unallocated" if conf else "expandable_segments is enabled")
    assert other not in msg


def test_tune_and_replay_keep_the_reserve_keys() -> None:
    from accelrt.memory.tools import _replay, _tune
    text = ("expandable_segments:True,expandable_segments_reserve:0.5,"
            "expandable_segments_reserve_by_class:[serving:8G]")
    assert _tune.recorded_setting({"PYTORCH_CUDA_ALLOC_CONF": text}) == text
    cfg = _replay._parse_conf(text)
    assert _replay.settings_text(cfg) == text
    a = _replay._make_allocator(cfg, 64 * GiB)
    p = a.malloc(3 * MiB, 0)
    assert list(a._b.reservations.values()) == [-(-32 * GiB // (20 * MiB)) * 20 * MiB]  # half
    a.free(p)
