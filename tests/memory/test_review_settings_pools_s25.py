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

import copy
import gc
import pickle
import threading
from typing import Any

import pytest

import accelrt as acc
from accelrt import memory
from accelrt.memory import _config, _registry
from accelrt.memory._allocator import DeviceCachingAllocator
from accelrt.memory._config import SIZE_MAX, AllocatorConfig, parse_config
from accelrt.testing import SimulatedBackend, leak_check

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
    # 2**64 - 1, the largest that torch 2.14.1's stoull reads (observed; one more: IndexError)
    ("max_split_size_mb:18446744073709551615", "max_split_size", SIZE_MAX - MiB + 1),
    ("large_segment_size_mb:11", "large_segment_size", 11 * MiB),
    ("large_segment_size_mb:18446744073709551615", "large_segment_size", SIZE_MAX - MiB + 1),
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
    # PyTorch's ROCm spellings, which it accepts on every build
    ("release_lock_on_hipmalloc:True", "release_lock_on_malloc", True),
    ("pinned_use_hip_host_register:False", "pinned_use_host_register", False),
    # the other keys, and accelrt's aliases of the cuda-named ones
    ("release_lock_on_malloc:True", "release_lock_on_malloc", True),
    ("throw_on_cudamalloc_oom:True", "throw_on_malloc_oom", True),
    ("throw_on_malloc_oom:True", "throw_on_malloc_oom", True),
    ("graph_capture_record_stream_reuse:False", "graph_capture_record_stream_reuse", False),
    ("per_process_memory_fraction:0.25", "per_process_memory_fraction", 0.25),
    ("pinned_use_background_threads:True", "pinned_use_background_threads", True),
    ("pinned_free_catch_all:True", "pinned_free_catch_all", True),
    ("page_reuse:True", "page_reuse", True),
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


def power2_div(size: int, div_factor: int) -> int:
    """PyTorch's test_cuda.py helper: ``size`` rounded up to one of ``div_factor`` steps
    between the powers of two around it."""
    pow2 = 1
    while pow2 < size:
        pow2 *= 2
    if pow2 == size:
        return pow2
    step = pow2 // 2 // div_factor
    ret = pow2 // 2
    while ret < size:
        ret += step
    return ret


def test_pytorch_allocator_settings_sequence(fresh_config: pytest.MonkeyPatch, dev: str) -> None:
    """PyTorch's test_allocator_settings, on a simulated device: the single-value and list
    forms of roundup_power2_divisions, a parse resetting them, and the refused strings."""
    d = f"{dev}:0"
    nbytes, nbytes_big = 4 * 21 * MiB, 4 * 100 * MiB

    def allocated() -> int:
        return memory.memory_stats(d)["active_bytes.all.allocated"]

    def requested() -> int:
        return memory.memory_stats(d)["requested_bytes.all.allocated"]

    memory.set_allocator_settings("")
    live = [memory.caching_allocator_alloc(nbytes, d)]
    start, start_requested = allocated(), requested()
    memory.set_allocator_settings("roundup_power2_divisions:4")
    live.append(memory.caching_allocator_alloc(nbytes, d))
    assert allocated() - start == power2_div(nbytes, 4)
    assert requested() - start_requested == nbytes
    memory.set_allocator_settings("garbage_collection_threshold:0.5")
    memory.set_allocator_settings("garbage_collection_threshold:0.5,max_split_size_mb:40")
    start = allocated()                       # the divisions were reset by the last parse
    live.append(memory.caching_allocator_alloc(nbytes, d))
    assert allocated() - start == nbytes
    memory.set_allocator_settings("garbage_collection_threshold:0.5,roundup_power2_divisions:"
                                  "[64:8,128:2,256:2,512:2,1024:1,>:1]")
    start = allocated()
    live.append(memory.caching_allocator_alloc(nbytes, d))
    assert allocated() - start == power2_div(nbytes, 8)
    start = allocated()
    live.append(memory.caching_allocator_alloc(nbytes_big, d))
    assert allocated() - start == power2_div(nbytes_big, 2)
    memory.set_allocator_settings("release_lock_on_cudamalloc:True")
    start = allocated()
    live.append(memory.caching_allocator_alloc(nbytes, d))
    assert allocated() - start == nbytes
    for bad in ("foo:1,bar:2", "garbage_collection_threshold:1.2", "max_split_size_mb:2",
                "release_lock_on_cudamalloc:none", "pinned_use_cuda_host_register:none",
                "pinned_num_register_threads:none", "pinned_num_register_threads:1024"):
        with pytest.raises(ValueError):
            memory.set_allocator_settings(bad)
    assert memory.get_allocator_settings() == "release_lock_on_cudamalloc:True"
    for p in live:
        memory.caching_allocator_delete(p)


def test_large_segment_size_is_clamped_like_max_split_size() -> None:
    cfg = parse_config("large_segment_size_mb:18446744073709551615")
    assert cfg.large_segment_size == cfg.max_non_split_rounding_size <= SIZE_MAX
    with pytest.raises(ValueError, match="max_split_size_mb too small"):
        parse_config("large_segment_size_mb:18446744073709551615,max_split_size_mb:64")


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
    # (torch 2.15's ConfigTokenizer::toBool wording, which counts the tokens)
    ("expandable_segments:true", ("expandable_segments: Expected 'True' or 'False' at index 2 "
                                 "in ConfigTokenizer but got 'true'")),
    ("expandable_segments:1", "Expected 'True' or 'False' at index 2"),
    ("expandable_segments:TRUE", "Expected 'True' or 'False' at index 2"),
    ("release_lock_on_cudamalloc:none", ("release_lock_on_cudamalloc: Expected 'True' or "
                                        "'False' at index 2 in ConfigTokenizer but got 'none'")),
    ("pinned_use_cuda_host_register:none", "Expected 'True' or 'False' at index 2"),
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
    ("pinned_use_hip_host_register:True", "pinned_use_hip_host_register:True is not supported"),
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


@pytest.mark.parametrize("settings", [
    "x" * 100_000,
    "max_split_size_mb:" + "1" * 100_000,                 # past Python's int() digit limit
    "large_segment_size_mb:" + "1" * 5_000,
    "roundup_power2_divisions:[" + "9" * 100 + "1:2]",
    "expandable_segments:" + "T" * 100_000,
    "garbage_collection_threshold:0." + "0" * 100_000 + "1",
    "backend:" + "n" * 100_000,
    "max_split_size_mb:128," * 10_000 + "foo:1",
])
def test_a_long_hostile_string_gets_a_short_clear_error(settings: str) -> None:
    with pytest.raises(ValueError) as ei:
        parse_config(settings)
    msg = str(ei.value)
    assert len(msg) < 1000 and msg.startswith(("accelrt allocator config: ",
                                               "Unrecognized key"))


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
    memory.set_allocator_settings("max_split_size_mb:18446744073709551615")
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


# ====================================================================== MemPool, use_mem_pool

def owners(backend: str) -> dict[int, tuple[int, int]]:
    """Address of each live block -> its segment's pool id."""
    return {b["address"]: s["segment_pool_id"] for s in memory._snapshot(backend)["segments"]
            for b in s["blocks"] if b["state"] == "active_allocated"}


class Model:
    """What the statistics of one device must say, from what the test allocated (requests of
    at most 1 MiB take 2 MiB segments of their own here, larger ones up to 10 MiB a 20 MiB
    segment, and segments are never shared between two requests of the model)."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.live: dict[int, int] = {}        # address -> rounded size
        self.segments: dict[int, int] = {}    # address -> segment size, allocated or cached

    def alloc(self, size: int, stream: acc.Stream | None = None) -> int:
        ptr = memory.caching_allocator_alloc(size, self.device, stream)
        self.live[ptr] = max(512, -(-size // 512) * 512)
        self.segments[ptr] = 2 * MiB if size <= MiB else 20 * MiB
        return ptr

    def free(self, ptr: int) -> None:
        memory.caching_allocator_delete(ptr)
        del self.live[ptr]

    def release(self, ptrs: list[int]) -> None:
        for p in ptrs:
            del self.segments[p]

    def check(self) -> None:
        st = memory.memory_stats(self.device)
        assert st["allocated_bytes.all.current"] == sum(self.live.values())
        assert st["allocation.all.current"] == len(self.live)
        assert st["reserved_bytes.all.current"] == sum(self.segments.values())
        assert st["segment.all.current"] == len(self.segments)
        assert memory.memory_allocated(self.device) == sum(self.live.values())
        assert memory.memory_reserved(self.device) == sum(self.segments.values())


def test_use_mem_pool_routes_every_stream_of_the_thread(current: str) -> None:
    """PyTorch's ``use_mem_pool`` routes the calling thread's allocations on any stream
    (``_cuda_beginAllocateCurrentThreadToPool``), and nothing of another thread."""
    d = f"{current}:0"
    pool = memory.MemPool()
    m = Model(d)
    s = acc.Stream(d)
    other: list[int] = []
    with memory.use_mem_pool(pool):
        p = m.alloc(MiB)
        with s:
            q = m.alloc(3 * MiB)
        r = m.alloc(100, s)
        t = threading.Thread(target=lambda: other.append(memory.caching_allocator_alloc(100, d)))
        t.start()
        t.join()
    after = m.alloc(3 * MiB)
    o = owners(current)
    assert o[p] == o[q] == o[r] == pool.id
    assert o[after] == o[other[0]] == (0, 0)
    memory.caching_allocator_delete(other[0])
    m.segments[other[0]] = 2 * MiB
    m.check()
    for ptr in (p, q, r, after):
        m.free(ptr)
    m.check()
    s.close()
    memory.empty_cache()            # the pool is alive: only the default pool's memory goes
    m.release([after, other[0]])
    m.check()
    del pool
    gc.collect()                    # its cached memory goes back with it
    m.release([p, q, r])
    m.check()


def test_nested_pools_and_the_same_pool_twice(dev: str) -> None:
    d = f"{dev}:0"
    a, b = memory.MemPool(), memory.MemPool()
    with memory.use_mem_pool(a, d):
        x = memory.caching_allocator_alloc(MiB, d)
        with memory.use_mem_pool(b, d):
            assert (a.use_count(), b.use_count()) == (2, 2)
            y = memory.caching_allocator_alloc(MiB, d)
        z = memory.caching_allocator_alloc(MiB, d)          # back in the outer pool
        with pytest.raises(RuntimeError, match="already"):  # PyTorch: "already recording"
            with memory.use_mem_pool(a, d):
                pass
        assert a.use_count() == 2
    w = memory.caching_allocator_alloc(MiB, d)
    o = owners(dev)
    assert (o[x], o[y], o[z], o[w]) == (a.id, b.id, a.id, (0, 0))
    assert (a.use_count(), b.use_count()) == (1, 1)
    assert {s["segment_pool_id"] for s in a.snapshot()} == {a.id}
    assert len(b.snapshot()) == 1
    for p in (x, y, z, w):
        memory.caching_allocator_delete(p)


def test_the_same_pool_on_two_threads(dev: str) -> None:
    """Only one context per pool and device at a time (PyTorch's beginAllocateToPool check);
    after the first ends, the other thread may use it."""
    d = f"{dev}:0"
    pool = memory.MemPool()
    inside, leave = threading.Event(), threading.Event()
    got: list[int] = []

    def worker() -> None:
        with memory.use_mem_pool(pool, d):
            got.append(memory.caching_allocator_alloc(MiB, d))
            inside.set()
            leave.wait(5)

    t = threading.Thread(target=worker)
    t.start()
    inside.wait(5)
    with pytest.raises(RuntimeError, match="already allocating to pool"):
        with memory.use_mem_pool(pool, d):
            pass
    mine = memory.caching_allocator_alloc(MiB, d)       # this thread: the default pool
    leave.set()
    t.join()
    with memory.use_mem_pool(pool, d):
        again = memory.caching_allocator_alloc(MiB, d)
    o = owners(dev)
    assert (o[got[0]], o[mine], o[again]) == (pool.id, (0, 0), pool.id)
    assert pool.use_count() == 1
    for p in (got[0], mine, again):
        memory.caching_allocator_delete(p)


def test_use_mem_pool_on_another_device(current: str) -> None:
    d0, d1 = f"{current}:0", f"{current}:1"
    pool = memory.MemPool()
    m0, m1 = Model(d0), Model(d1)
    with memory.use_mem_pool(pool, d1):
        p = m1.alloc(3 * MiB)
        q = m0.alloc(3 * MiB)               # device 0 is not routed
    assert owners(current)[p] == pool.id and owners(current)[q] == (0, 0)
    assert [s["device"] for s in pool.snapshot()] == [1]
    m1.free(p)
    m0.free(q)
    memory.empty_cache()                    # the pool is alive on device 1: kept
    m0.release([q])
    m0.check()
    m1.check()
    del pool
    gc.collect()
    m1.release([p])
    m1.check()


def test_an_exception_inside_restores_the_pool_state(current: str) -> None:
    d = f"{current}:0"
    pool = memory.MemPool()
    with pytest.raises(KeyError):
        with memory.use_mem_pool(pool):
            p = memory.caching_allocator_alloc(MiB, d)
            raise KeyError("inside")
    assert pool.use_count() == 1
    q = memory.caching_allocator_alloc(MiB, d)              # the default pool again
    with memory.use_mem_pool(pool):                         # and the pool can be used again
        r = memory.caching_allocator_alloc(MiB, d)
    o = owners(current)
    assert (o[p], o[q], o[r]) == (pool.id, (0, 0), pool.id)
    for ptr in (p, q, r):
        memory.caching_allocator_delete(ptr)


def test_a_collected_pool_keeps_its_live_blocks(current: str) -> None:
    """A pool collected with live blocks returns only its cached memory; a live block stays
    valid and, freed later, is given back by the next empty_cache (PyTorch's freeable pool)."""
    d = f"{current}:0"
    m = Model(d)
    pool = memory.MemPool()
    with memory.use_mem_pool(pool):
        live = m.alloc(5 * MiB)
        small = m.alloc(100)
    m.free(small)
    m.check()
    del pool
    gc.collect()
    m.release([small])
    m.check()
    assert memory.memory_snapshot()[0]["segment_pool_id"] != (0, 0)
    m.free(live)
    m.check()                                   # cached until empty_cache
    memory.empty_cache()
    m.release([live])
    m.check()


def test_mem_pool_no_split_and_stats(current: str) -> None:
    d = f"{current}:0"
    pool = memory.MemPool(no_split=True)
    with memory.use_mem_pool(pool):
        a = memory.caching_allocator_alloc(512, d)
        b = memory.caching_allocator_alloc(512, d)
    st = memory.memory_stats(d)
    assert st["allocated_bytes.all.current"] == 4 * MiB     # whole segments
    assert st["requested_bytes.all.current"] == 1024
    assert st["segment.all.current"] == 2
    memory.caching_allocator_delete(a)
    memory.caching_allocator_delete(b)
    del pool
    gc.collect()
    assert memory.memory_reserved(d) == 0


def test_mem_pool_with_a_pluggable_allocator(current: str) -> None:
    import numpy as np
    held: dict[int, Any] = {}
    calls: list[tuple[str, int]] = []

    def alloc(size: int, device: int, stream: int) -> int:
        buf = np.empty(size + 64, np.uint8)
        ptr = (buf.ctypes.data + 63) & ~63
        held[ptr] = buf
        calls.append(("alloc", size))
        return ptr

    def free(ptr: int, size: int, device: int, stream: int) -> None:
        calls.append(("free", size))
        del held[ptr]

    d = f"{current}:0"
    pool = memory.MemPool(allocator=memory.PluggableAllocator.from_callables(alloc, free))
    with leak_check():
        with memory.use_mem_pool(pool):
            p = memory.caching_allocator_alloc(3 * MiB, d)
        assert calls == [("alloc", 20 * MiB)]
        assert memory.memory_stats(d)["reserved_bytes.all.current"] == 20 * MiB
        memory.caching_allocator_delete(p)
    memory.empty_cache()                        # the pool is alive: its segment stays
    assert calls == [("alloc", 20 * MiB)]
    del pool
    gc.collect()
    assert calls == [("alloc", 20 * MiB), ("free", 20 * MiB)] and not held
    assert memory.memory_reserved(d) == 0


def test_empty_cache_while_a_pool_is_in_use(current: str) -> None:
    """A use_mem_pool context open on the device does not stop empty_cache from giving back
    the default pool's cache: torch 2.15's ``release_cached_blocks`` skips the default pools
    only while a graph captures (``markCaptureBegin``), not for a mere pool routing (older
    PyTorch skipped them while any ``beginAllocateToPool`` was in force, and so did this
    test until session 40)."""
    d = f"{current}:0"
    cached = memory.caching_allocator_alloc(MiB, d)
    memory.caching_allocator_delete(cached)
    pool = memory.MemPool()
    with memory.use_mem_pool(pool):
        memory.empty_cache()
        assert memory.memory_reserved(d) == 0
    assert memory.memory_stats(d)["num_sync_all_streams"] == 1


@pytest.mark.parametrize("duplicate", [copy.copy, copy.deepcopy, pickle.dumps])
def test_a_mem_pool_cannot_be_copied(dev: str, duplicate: Any) -> None:
    """A copy would share the pool's id but not its lifetime (the original's collection
    releases the pool the copy still routes to); torch's MemPool cannot be copied either."""
    d = f"{dev}:0"
    pool = memory.MemPool()
    with pytest.raises(TypeError, match="cannot copy or pickle MemPool"):
        duplicate(pool)
    with memory.use_mem_pool(pool, d):
        p = memory.caching_allocator_alloc(512, d)
    assert owners(dev)[p] == pool.id and pool.use_count() == 1
    memory.caching_allocator_delete(p)


def test_a_pool_dropped_inside_its_context(current: str) -> None:
    """``del pool`` inside ``use_mem_pool`` does not end it: the context keeps the pool until
    it exits; then the pool goes, its live blocks stay, and they are given back once freed."""
    d = f"{current}:0"
    m = Model(d)
    pool = memory.MemPool()
    pid = pool.id
    with memory.use_mem_pool(pool):
        p = m.alloc(MiB)
        del pool
        gc.collect()
        q = m.alloc(3 * MiB)
        assert owners(current)[p] == owners(current)[q] == pid
    gc.collect()
    m.check()
    for ptr in (p, q):
        m.free(ptr)
    m.check()
    memory.empty_cache()
    m.release([p, q])
    m.check()


def test_a_pool_shared_with_a_graph_outlives_the_pool_object() -> None:
    """A graph captured into a MemPool holds a reference to the pool (PyTorch's
    capture_begin(pool=...)): collecting the MemPool keeps the pool's memory until the graph
    is gone too."""
    acc.set_current_accelerator("cpu")

    def pool_bytes(pid: tuple[int, int]) -> int:
        return sum(s["total_size"] for s in memory.memory_snapshot()
                   if s["segment_pool_id"] == pid)

    pool = memory.MemPool()
    pid = pool.id
    g = acc.Graph(pool=pool)
    s = acc.Stream("cpu:0")
    with s, g:
        x = acc.empty((MiB,), dtype="uint8", device="cpu:0")
        x.fill_(1)
    assert pool.use_count() == 2 and pool_bytes(pid) == 2 * MiB
    del x, pool
    gc.collect()
    memory.empty_cache()
    assert pool_bytes(pid) == 2 * MiB             # the graph still holds the pool
    g.reset()
    del g
    gc.collect()
    memory.empty_cache()
    assert pool_bytes(pid) == 0
    s.close()


def test_a_pool_collected_inside_the_allocators_critical_section(
        fresh_config: pytest.MonkeyPatch, current: str) -> None:
    """The collector may run a MemPool's finalizer at any object allocation, also inside the
    allocator's critical section on the thread holding its (non-reentrant) lock: the
    finalizer must not block there; the release and the return of the pool's cached memory
    complete at the allocator's next drain point (here: the statistics getter)."""
    d = f"{current}:0"
    pool = memory.MemPool()
    with memory.use_mem_pool(pool):
        memory.caching_allocator_delete(memory.caching_allocator_alloc(MiB, d))
    a = _registry.peek_allocator(current, 0)
    assert a is not None and memory.memory_reserved(d) == 2 * MiB

    class Holder:
        pass

    holder = Holder()
    holder.__dict__.update(pool=pool, me=holder)     # a cycle: only the collector frees it
    del pool, holder
    done = threading.Event()

    def critical_section() -> None:
        with a._lock:           # as if the collector ran here, inside a malloc
            gc.collect()
        done.set()

    threading.Thread(target=critical_section, daemon=True).start()
    assert done.wait(2), "the MemPool finalizer blocked on the allocator's lock"
    assert memory.memory_reserved(d) == 0
    assert memory.memory_snapshot() == []
