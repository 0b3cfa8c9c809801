"""Review by tests of the allocator settings and the memory pools (issue 25).

The settings parser is checked against PyTorch's (c10's ``ConfigTokenizer`` and
``AcceleratorAllocatorConfig``/``CUDAAllocatorConfig::parseArgs``): what it accepts, what each
key then holds, and the error for what it refuses (always a ``ValueError``, PyTorch's class for
every refused value; the message carries PyTorch's sentence where PyTorch has one). A refused
string changes nothing: ``get_allocator_settings()`` and the options in force stay as they
were, and the next valid string applies. Where accelrt refuses what PyTorch's ``std::stoull``
half-reads (``128.5`` read as 128, ``-1`` as 2**64 - 1), docs/memory.md says so.

``MemPool``/``use_mem_pool`` follow ``torch/cuda/memory.py`` and the caching allocator's
private pools (``beginAllocateToPool``, ``releasePool``, ``emptyCache``): every statistic is
checked against a model of what was allocated, and nothing leaks (the suite's leak check runs
after every test).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

import accelrt as acc
from accelrt import memory
from accelrt.memory import _config, _registry
from accelrt.memory._allocator import DeviceCachingAllocator
from accelrt.memory._config import SIZE_MAX, AllocatorConfig, parse_config
from accelrt.testing import SimulatedBackend

MiB = 1 << 20
KiB = 1 << 10


@pytest.fixture
def fresh_config(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """Process-wide options and allocator registry of this test only."""
    monkeypatch.setattr(_config, "_current", None)
    monkeypatch.setattr(_registry, "_allocators", {})
    monkeypatch.delenv(_config.ENV_VAR, raising=False)
    return monkeypatch


def divisions(settings: str) -> tuple[int, ...]:
    return parse_config(settings).roundup_power2_divisions


# ====================================================================== settings: accepted

@pytest.mark.parametrize(("settings", "field", "value"), [
    # separators and spaces (C's isspace: space, \t, \n, \v, \f, \r)
    ("", "max_split_size", SIZE_MAX),
    ("   ", "max_split_size", SIZE_MAX),
    (" max_split_size_mb : 128 ", "max_split_size", 128 * MiB),
    ("max_split_size_mb\t:\n128\r", "max_split_size", 128 * MiB),
    ("max_split_size_mb:128,", "max_split_size", 128 * MiB),           # trailing comma
    ("max_split_size_mb:128 , ", "max_split_size", 128 * MiB),
    ("max_split_size_mb:+128", "max_split_size", 128 * MiB),
    ("max_split_size_mb:0128", "max_split_size", 128 * MiB),
    # repeated keys: the last one wins
    ("max_split_size_mb:64,max_split_size_mb:128", "max_split_size", 128 * MiB),
    ("expandable_segments:True,expandable_segments:False", "expandable_segments", False),
    ("garbage_collection_threshold:0.2,garbage_collection_threshold:0.7",
     "garbage_collection_threshold", 0.7),
    # boundaries
    ("max_split_size_mb:20", "max_split_size", 20 * MiB),
    ("max_non_split_rounding_mb:20", "max_non_split_rounding_size", 20 * MiB),
    ("max_split_size_mb:17592186044415", "max_split_size", SIZE_MAX - MiB + 1),
    ("max_split_size_mb:99999999999999999999999", "max_split_size", SIZE_MAX - MiB + 1),
    ("large_segment_size_mb:11", "large_segment_size", 11 * MiB),
    ("large_segment_size_mb:99999999999999999999999", "large_segment_size", SIZE_MAX - MiB + 1),
    ("garbage_collection_threshold:1e-9", "garbage_collection_threshold", 1e-9),
    ("garbage_collection_threshold:.5", "garbage_collection_threshold", 0.5),
    ("garbage_collection_threshold:0.999999", "garbage_collection_threshold", 0.999999),
    ("roundup_power2_divisions:1", "roundup_power2_divisions", (1,) * 16),
    ("roundup_power2_divisions:1024", "roundup_power2_divisions", (1024,) * 16),
    ("roundup_power2_divisions:[]", "roundup_power2_divisions", (0,) * 16),
    ("roundup_power2_divisions:[256:1,]", "roundup_power2_divisions", (1,) * 9 + (0,) * 7),
    ("roundup_power2_divisions:[1:2]", "roundup_power2_divisions", (2,) + (0,) * 15),
    ("roundup_power2_divisions:[1048576:2]", "roundup_power2_divisions", (2,) * 16),
    ("roundup_power2_divisions:[64:8,>:0]", "roundup_power2_divisions", (8,) * 7 + (0,) * 9),
    ("expandable_segments:True", "expandable_segments", True),
    ("release_lock_on_cudamalloc:True", "release_lock_on_malloc", True),
    ("release_lock_on_cudamalloc:False", "release_lock_on_malloc", False),
    ("pinned_use_cuda_host_register:False", "pinned_use_host_register", False),
    ("pinned_num_register_threads:1", "pinned_num_register_threads", 1),
    ("pinned_reserve_segment_size_mb:1", "pinned_reserve_segment_size", MiB),
    ("pinned_max_cached_size_mb:0", "pinned_max_cached_size", 0),
    ("pinned_max_round_threshold_mb:0", "pinned_max_round_threshold", 0),
    ("backend:native,backend:native", "backend", "native"),
])
def test_accepted(settings: str, field: str, value: Any) -> None:
    assert getattr(parse_config(settings), field) == value


def test_repeated_roundup_keys_edit_one_table() -> None:
    """PyTorch parses every ``roundup_power2_divisions`` of a string into the same table (reset
    once, when the string's parse starts): a later list changes only what it names."""
    assert divisions("roundup_power2_divisions:[256:1,>:4],roundup_power2_divisions:[1024:2]") \
        == (2,) * 11 + (4,) * 5
    assert divisions("roundup_power2_divisions:4,roundup_power2_divisions:[64:2]") \
        == (2,) * 7 + (4,) * 9
    assert divisions("roundup_power2_divisions:[64:2],roundup_power2_divisions:4") == (4,) * 16
    assert divisions("roundup_power2_divisions:[64:2],roundup_power2_divisions:[]") \
        == (2,) * 7 + (0,) * 9
    # a new parse starts from zeros, whatever the base held
    base = parse_config("roundup_power2_divisions:8")
    assert parse_config("roundup_power2_divisions:[64:2]", base).roundup_power2_divisions \
        == (2,) * 7 + (0,) * 9


def test_roundup_greater_than_first_leaves_the_first_interval() -> None:
    """``>`` fills the intervals after the last one named; before any, that is after interval
    0 (sizes below 2 MiB), as in PyTorch (``last_index + 1`` with ``last_index = 0``)."""
    assert divisions("roundup_power2_divisions:[>:4]") == (0,) + (4,) * 15
    assert divisions("roundup_power2_divisions:[>:4,>:2]") == (0,) + (2,) * 15
    assert divisions("roundup_power2_divisions:[>:4,64:2]") == (2,) * 7 + (4,) * 9
    assert divisions("roundup_power2_divisions:[1:8,>:4]") == (8,) + (4,) * 15
    assert divisions("roundup_power2_divisions:[1024:2],roundup_power2_divisions:[>:8]") \
        == (2,) + (8,) * 15
    # what it changes: a request in [1, 2) MiB is not rounded to a quarter
    a = DeviceCachingAllocator(SimulatedBackend(), 0,
                               parse_config("roundup_power2_divisions:[>:4]"))
    assert a.round_size(MiB + 1) == MiB + 512
    assert a.round_size(2 * MiB + 1) == 2 * MiB + 512 * KiB


def test_large_segment_size_is_clamped_like_max_split_size() -> None:
    cfg = parse_config("large_segment_size_mb:99999999999999999999999")
    assert cfg.large_segment_size == cfg.max_non_split_rounding_size <= SIZE_MAX
    with pytest.raises(ValueError, match="max_split_size_mb too small"):
        parse_config("large_segment_size_mb:99999999999999999999999,max_split_size_mb:64")


# ====================================================================== settings: refused

REFUSED = [
    # empty items (PyTorch: "Unrecognized key ','"), not trailing commas
    (",", "empty item"),
    (",,", "empty item"),
    (",max_split_size_mb:128", "empty item"),
    ("max_split_size_mb:128,,expandable_segments:True", "empty item"),
    ("roundup_power2_divisions:[,256:1]", "empty item"),
    ("roundup_power2_divisions:[256:1,,512:2]", "empty item"),
    # structure
    (":", "Unrecognized key ':'"),
    ("]", "Unrecognized key ']'"),
    ("max_split_size_mb", "ended"),
    ("max_split_size_mb:", "ended"),
    ("max_split_size_mb:128:256", "expected ','"),
    ("max_split_size_mb:[128]", "missing value"),
    ("max_split_size_mb=128", "Unrecognized key 'max_split_size_mb=128'"),
    ("roundup_power2_divisions:[256:1", "ended"),
    ("roundup_power2_divisions:[256:1]]", "expected ','"),
    ("roundup_power2_divisions:[[256:1]]", "expected ':'"),
    ("roundup_power2_divisions:[256]", "expected ':'"),
    ("roundup_power2_divisions:[256:]", "roundup_power2_divisions"),
    # keys: exact spelling and case
    ("foo:1,bar:2", "Unrecognized key 'foo'"),
    ("Expandable_Segments:True", ("Unrecognized key 'Expandable_Segments'.*did you mean "
                                 "expandable_segments")),
    ("MAX_SPLIT_SIZE_MB:128", "Unrecognized key 'MAX_SPLIT_SIZE_MB'"),
    # booleans: exactly True or False
    ("expandable_segments:true", ("Expected a single True/False argument for "
                                 "expandable_segments, got 'true'")),
    ("expandable_segments:1", "Expected a single True/False argument"),
    ("expandable_segments:TRUE", "Expected a single True/False argument"),
    ("release_lock_on_cudamalloc:none", ("Expected a single True/False argument for "
                                        "release_lock_on_cudamalloc")),
    ("pinned_use_cuda_host_register:none", "Expected a single True/False argument"),
    # sizes in MB: whole ASCII decimal numbers, in range
    ("max_split_size_mb:0", "max_split_size_mb too small, must be >= 20"),
    ("max_split_size_mb:2", "max_split_size_mb too small, must be >= 20"),
    ("max_split_size_mb:19", "max_split_size_mb too small, must be >= 20"),
    ("max_split_size_mb:-1", "max_split_size_mb too small, must be >= 20"),
    ("max_split_size_mb:128.5", "whole number"),
    ("max_split_size_mb:1e3", "whole number"),
    ("max_split_size_mb:1_000", "whole number"),
    ("max_split_size_mb:\uff11\uff12\uff18", "whole number"),      # fullwidth digits
    ("max_split_size_mb:\u00a0128", "whole number"),                # no-break space
    ("max_split_size_mb:0x80", "whole number"),
    ("max_non_split_rounding_mb:19", "max_non_split_rounding_mb too small, must be >= 20"),
    ("large_segment_size_mb:10", "large_segment_size_mb must be > 10 MB"),
    ("large_segment_size_mb:-5", "large_segment_size_mb must be > 10 MB"),
    ("max_split_size_mb:30,large_segment_size_mb:32", ("max_split_size_mb too small, must be "
                                                      ">= 32")),
    ("pinned_reserve_segment_size_mb:0", ("Pinned reserve segment size has to be greater "
                                         "than 0")),
    ("pinned_reserve_segment_size_mb:-1", ("Pinned reserve segment size has to be greater "
                                          "than 0")),
    ("pinned_max_cached_size_mb:-1", "pinned_max_cached_size_mb must be >= 0"),
    # garbage_collection_threshold: a float in (0, 1)
    ("garbage_collection_threshold:0", r"is invalid, set it in \(0.0, 1.0\)"),
    ("garbage_collection_threshold:1", r"is invalid, set it in \(0.0, 1.0\)"),
    ("garbage_collection_threshold:1.5", r"is invalid, set it in \(0.0, 1.0\)"),
    ("garbage_collection_threshold:1.2", r"is invalid, set it in \(0.0, 1.0\)"),
    ("garbage_collection_threshold:-0.5", r"is invalid, set it in \(0.0, 1.0\)"),
    ("garbage_collection_threshold:nan", r"is invalid, set it in \(0.0, 1.0\)"),
    ("garbage_collection_threshold:0.5_0", "garbage_collection_threshold expects"),
    ("garbage_collection_threshold:\u0660.5", "garbage_collection_threshold expects"),
    ("garbage_collection_threshold:half", "garbage_collection_threshold expects"),
    # roundup_power2_divisions: powers of two (0 only inside a list)
    ("roundup_power2_divisions:0", "For roundups, the divisions has to be power of 2"),
    ("roundup_power2_divisions:3", "For roundups, the divisions has to be power of 2"),
    ("roundup_power2_divisions:-4", "For roundups, the divisions has to be power of 2"),
    ("roundup_power2_divisions:1.5", "whole number"),
    ("roundup_power2_divisions:[256:3]", ("For roundups, the divisions has to be power of 2 or "
                                         "0 to disable roundup")),
    ("roundup_power2_divisions:[256:-1]", "the divisions has to be power of 2 or 0"),
    ("roundup_power2_divisions:[100:2]", "intervals must be powers of 2"),
    ("roundup_power2_divisions:[0:2]", "intervals must be powers of 2"),
    ("roundup_power2_divisions:[-256:2]", "intervals must be powers of 2"),
    ("roundup_power2_divisions:[<:2]", "whole number"),
    # pinned_num_register_threads: a power of 2 <= 128, and only 1 without host register
    ("pinned_num_register_threads:none", "whole number"),
    ("pinned_num_register_threads:0", ("Number of register threads has to be power of 2, "
                                      "got 0")),
    ("pinned_num_register_threads:3", ("Number of register threads has to be power of 2, "
                                      "got 3")),
    ("pinned_num_register_threads:1024", ("Number of register threads should be less than or "
                                         "equal to 128, got 1024")),
    ("pinned_num_register_threads:8", "remove the key"),
    ("pinned_use_cuda_host_register:True", "remove the key"),
    # backend
    ("backend:cudaMalloc", "Unknown allocator backend"),
    ("backend:Native", "Unknown allocator backend"),
]


@pytest.mark.parametrize(("settings", "message"), REFUSED)
def test_refused(settings: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_config(settings)


@pytest.mark.parametrize(("settings", "message"), REFUSED[::4])
def test_a_refused_string_changes_nothing(fresh_config: pytest.MonkeyPatch, settings: str,
                                         message: str) -> None:
    """After a refused string the options in force and the stored string are as before, and a
    valid string still applies (through accelrt.memory and through a device module)."""
    a = _registry.get_allocator(SimulatedBackend(), 0)
    memory.set_allocator_settings("max_split_size_mb:64,roundup_power2_divisions:4")
    before = _config.get_config()
    for setter in (memory.set_allocator_settings,
                   acc.backends.device_module("cpu").set_allocator_settings):
        with pytest.raises(ValueError, match=message) as ei:
            setter(settings)
        assert str(ei.value).startswith("set_allocator_settings=")
        assert _config.get_config() is before and a.config is before
        assert memory.get_allocator_settings() == \
            "max_split_size_mb:64,roundup_power2_divisions:4"
    memory.set_allocator_settings("garbage_collection_threshold:0.5")
    cfg = _config.get_config()
    assert a.config is cfg and cfg.garbage_collection_threshold == 0.5
    assert cfg.max_split_size == SIZE_MAX and cfg.roundup_power2_divisions == (0,) * 16
    assert acc.backends.device_module("cpu").get_allocator_settings() == \
        "garbage_collection_threshold:0.5"


@pytest.mark.parametrize("bad", [None, 5, b"max_split_size_mb:64", ["expandable_segments:True"]])
def test_settings_must_be_a_str(fresh_config: pytest.MonkeyPatch, bad: Any) -> None:
    with pytest.raises(TypeError, match="must be a str"):
        memory.set_allocator_settings(bad)
    assert memory.get_allocator_settings() == ""


def test_a_bad_environment_names_itself(fresh_config: pytest.MonkeyPatch) -> None:
    fresh_config.setenv(_config.ENV_VAR, "max_split_size_mb:100,,page_reuse:True")
    with pytest.raises(ValueError, match=r"^ACCELRT_ALLOC_CONF='max_split_size_mb:100,,"
                                         r"page_reuse:True': .*empty item"):
        _config.get_config()
    fresh_config.setenv(_config.ENV_VAR, "max_split_size_mb:100,")     # trailing comma: fine
    assert _config.get_config().max_split_size == 100 * MiB


def test_huge_max_split_size_is_reported_as_pytorch_int64(fresh_config: pytest.MonkeyPatch,
                                                          dev: str) -> None:
    """PyTorch clamps a huge ``max_split_size_mb`` to ``SIZE_MAX // MB`` MB and reports the
    size as an int64 (``static_cast<int64_t>``): -1 MiB; ``SIZE_MAX`` itself (no limit) is -1."""
    memory.set_allocator_settings("max_split_size_mb:99999999999999999999")
    assert memory._snapshot(dev)["allocator_settings"]["max_split_size"] == -MiB
    d = f"{dev}:0"
    memory.caching_allocator_delete(memory.caching_allocator_alloc(512, d))
    assert memory.memory_stats(d)["max_split_size"] == -MiB
    memory.set_allocator_settings("")
    assert memory._snapshot(dev)["allocator_settings"]["max_split_size"] == -1


# ====================================================================== settings at run time

def test_expandable_segments_changed_after_allocations(fresh_config: pytest.MonkeyPatch,
                                                       current: str) -> None:
    """Segments made before a change keep their kind; new ones take the new setting; the
    statistics match the segments throughout and everything is returned by empty_cache."""
    d = f"{current}:0"
    p = memory.caching_allocator_alloc(30 * MiB, d)
    memory.set_allocator_settings("expandable_segments:True")
    q = memory.caching_allocator_alloc(30 * MiB, d)
    memory.set_allocator_settings("expandable_segments:False")
    r = memory.caching_allocator_alloc(30 * MiB, d)
    kinds = {b["address"]: s["is_expandable"] for s in memory.memory_snapshot()
             for b in s["blocks"] if b["state"] == "active_allocated"}
    assert (kinds[p], kinds[q], kinds[r]) == (False, True, False)
    stats = memory.memory_stats(d)
    segs = memory.memory_snapshot()
    assert stats["reserved_bytes.all.current"] == sum(s["total_size"] for s in segs)
    assert stats["allocated_bytes.all.current"] == 90 * MiB
    assert stats["allocation.all.current"] == 3
    for ptr in (p, q, r):
        memory.caching_allocator_delete(ptr)
    memory.empty_cache()
    assert memory.memory_reserved(d) == 0 and memory.memory_snapshot() == []


def test_set_allocator_settings_is_serialized(fresh_config: pytest.MonkeyPatch) -> None:
    """Two threads setting different keys at once: each parse starts from the options the
    other one stored, so a key one of them set is not lost (PyTorch edits one shared state)."""
    real = _config.parse_config
    first_parsed = threading.Event()
    release = threading.Event()

    def slow_parse(settings: str, base: AllocatorConfig | None = None) -> AllocatorConfig:
        cfg = real(settings, base)
        if settings == "expandable_segments:True":
            first_parsed.set()
            release.wait(0.5)        # the other thread runs now, unless it must wait
        return cfg

    fresh_config.setattr(_config, "parse_config", slow_parse)
    t = threading.Thread(target=memory.set_allocator_settings,
                         args=("expandable_segments:True",))
    t.start()
    first_parsed.wait(5)
    other = threading.Thread(target=memory.set_allocator_settings,
                             args=("release_lock_on_cudamalloc:True",))
    other.start()
    other.join(0.2)
    release.set()
    t.join()
    other.join()
    cfg = _config.get_config()
    assert cfg.expandable_segments and cfg.release_lock_on_malloc
    assert memory.get_allocator_settings() == "release_lock_on_cudamalloc:True"
