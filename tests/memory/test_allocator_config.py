"""Allocator options: PyTorch's PYTORCH_CUDA_ALLOC_CONF syntax (ALLOCATOR_SPEC §9)."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

from accelrt.memory import _allocator, _config, _registry
from accelrt.memory._allocator import DeviceCachingAllocator
from accelrt.memory._config import SIZE_MAX, AllocatorConfig, parse_config
from accelrt.testing import SimulatedBackend
from tests.helpers.expandable import fresh_fallback_warnings

MiB = 1 << 20


@pytest.fixture
def fresh_config(monkeypatch):
    """Isolate the process-wide options and allocator registry."""
    monkeypatch.setattr(_config, "_current", None)
    monkeypatch.setattr(_registry, "_allocators", {})
    monkeypatch.delenv(_config.ENV_VAR, raising=False)
    yield monkeypatch


def test_defaults():
    cfg = AllocatorConfig()
    assert cfg.large_segment_size == 20 * MiB
    assert cfg.max_split_size == SIZE_MAX
    assert cfg.max_non_split_rounding_size == 20 * MiB
    assert cfg.roundup_power2_divisions == (0,) * 16
    assert cfg.garbage_collection_threshold == 0.0
    assert not cfg.expandable_segments
    assert cfg.per_process_memory_fraction is None


def test_frozen():
    cfg = AllocatorConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.max_split_size = 1  # type: ignore[misc]


def test_basic_keys_and_whitespace():
    cfg = parse_config(" max_split_size_mb : 128 , garbage_collection_threshold:0.6,"
                       "expandable_segments:True,release_lock_on_cudamalloc:True,"
                       "per_process_memory_fraction:0.5,backend:native")
    assert cfg.max_split_size == 128 * MiB
    assert cfg.garbage_collection_threshold == 0.6
    assert cfg.expandable_segments
    assert cfg.release_lock_on_malloc
    assert cfg.per_process_memory_fraction == 0.5
    assert cfg.settings.startswith(" max_split_size_mb")


def test_large_segment_size_parsed_first():
    cfg = parse_config("max_split_size_mb:40,large_segment_size_mb:32")
    assert cfg.large_segment_size == 32 * MiB
    assert cfg.max_non_split_rounding_size == 32 * MiB  # defaults to large_segment_size
    with pytest.raises(ValueError, match="max_split_size_mb too small"):
        parse_config("max_split_size_mb:30,large_segment_size_mb:32")
    with pytest.raises(ValueError, match="large_segment_size_mb must be > 10"):
        parse_config("large_segment_size_mb:10")


def test_max_split_size_bounds():
    assert parse_config("max_split_size_mb:20").max_split_size == 20 * MiB
    with pytest.raises(ValueError, match="max_split_size_mb"):
        parse_config("max_split_size_mb:19")
    with pytest.raises(ValueError, match="max_non_split_rounding_mb"):
        parse_config("max_non_split_rounding_mb:5")
    assert parse_config("max_non_split_rounding_mb:64").max_non_split_rounding_size == 64 * MiB


def test_roundup_single_value():
    assert parse_config("roundup_power2_divisions:4").roundup_power2_divisions == (4,) * 16
    with pytest.raises(ValueError, match="power of 2"):
        parse_config("roundup_power2_divisions:3")


def test_roundup_list():
    t = parse_config("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]").roundup_power2_divisions
    # 256 MB -> interval index 8; the first key also fills the lower intervals
    assert t[:9] == (1,) * 9
    assert t[9] == 2
    assert t[10] == 4
    assert t[11:] == (8,) * 5
    t2 = parse_config("roundup_power2_divisions:[64:8,>:0]").roundup_power2_divisions
    assert t2[:7] == (8,) * 7 and t2[7:] == (0,) * 9
    with pytest.raises(ValueError, match="intervals must be powers of 2"):
        parse_config("roundup_power2_divisions:[100:2]")
    with pytest.raises(ValueError, match="power of 2 or 0"):
        parse_config("roundup_power2_divisions:[128:3]")


def test_booleans_exact():
    for bad in ("true", "1", "yes", "TRUE"):
        with pytest.raises(ValueError, match=("expandable_segments: Expected 'True' or 'False' "
                                              f"at index 2 in ConfigTokenizer but got '{bad}'")):
            parse_config(f"expandable_segments:{bad}")


def test_unknown_key_message():
    with pytest.raises(ValueError) as ei:
        parse_config("max_split_size_mb:100,foo:1")
    msg = str(ei.value)
    assert msg.startswith("Unrecognized key 'foo' in accelrt allocator config. Valid keys: ")
    assert "max_split_size_mb" in msg and "did you mean" not in msg    # nothing close to 'foo'


@pytest.mark.parametrize("bad", [
    "max_split_size_mb", "max_split_size_mb:", "max_split_size_mb:abc",
    "garbage_collection_threshold:1.0", "garbage_collection_threshold:0",
    "garbage_collection_threshold:x", "per_process_memory_fraction:1.5",
    "backend:cudaMalloc", "expandable_segments:True:False", "max_split_size_mb 100",
    "roundup_power2_divisions:[256:1", "pinned_num_register_threads:3",
    "pinned_num_register_threads:256", "pinned_max_cached_size_mb:-1",
])
def test_bad_values(bad):
    with pytest.raises(ValueError):
        parse_config(bad)


def test_not_a_string():
    with pytest.raises(TypeError):
        parse_config(123)  # type: ignore[arg-type]


def test_pinned_keys_stored():
    cfg = parse_config("pinned_use_cuda_host_register:False,pinned_num_register_threads:1,"
                       "pinned_reserve_segment_size_mb:64,pinned_use_background_threads:True,"
                       "pinned_free_catch_all:True,pinned_max_round_threshold_mb:16,"
                       "pinned_max_cached_size_mb:1024,graph_capture_record_stream_reuse:False")
    assert not cfg.pinned_use_host_register and cfg.pinned_use_background_threads
    assert cfg.pinned_free_catch_all and not cfg.graph_capture_record_stream_reuse
    assert cfg.pinned_num_register_threads == 1
    assert cfg.pinned_reserve_segment_size == 64 * MiB
    assert cfg.pinned_max_round_threshold == 16 * MiB
    assert cfg.pinned_max_cached_size == 1024 * MiB


@pytest.mark.parametrize(("setting", "words"), [
    ("pinned_use_cuda_host_register:True", ["cudaHostRegister", "host_malloc",
                                             "pinned_reserve_segment_size_mb"]),
    ("pinned_use_host_register:True", ["pinned_use_host_register:True", "cudaHostRegister"]),
    ("pinned_num_register_threads:8", ["pinned_use_cuda_host_register:True", "got 8"]),
    ("graph_capture_record_stream_reuse:True", ["record_stream", "capture ends"]),
])
def test_keys_without_an_implementation_are_refused(setting, words, fresh_config):
    """PyTorch accepts these; accelrt has no backend operation to honour them, so it says so
    instead of ignoring them, naming the key, what PyTorch does and what to do instead."""
    with pytest.raises(ValueError, match="is not supported|only sets") as ei:
        parse_config(f"max_split_size_mb:100,{setting}")
    msg = str(ei.value)
    assert setting.split(":")[0] in msg and "remove the key" in msg
    for w in words:
        assert w in msg, (w, msg)
    field = {"pinned_use_cuda_host_register": "pinned_use_host_register",
             "pinned_use_host_register": "pinned_use_host_register"}.get(
                 setting.split(":")[0], setting.split(":")[0])
    value = 8 if field == "pinned_num_register_threads" else True
    with pytest.raises(ValueError, match="remove the key"):
        AllocatorConfig(**{field: value})           # built directly: refused the same way
    fresh_config.setenv(_config.ENV_VAR, setting)       # the environment says where it came from
    with pytest.raises(ValueError, match=f"^{_config.ENV_VAR}=.*remove the key"):
        _config.get_config()


def test_reparse_resets_split_roundup_gc_but_keeps_others():
    base = parse_config("max_split_size_mb:100,roundup_power2_divisions:4,"
                        "garbage_collection_threshold:0.5,expandable_segments:True")
    cfg = parse_config("release_lock_on_cudamalloc:True", base)
    assert cfg.max_split_size == SIZE_MAX
    assert cfg.roundup_power2_divisions == (0,) * 16
    assert cfg.garbage_collection_threshold == 0.0
    assert cfg.expandable_segments  # untouched keys persist, as in PyTorch
    assert cfg.release_lock_on_malloc


def test_env_read_lazily(fresh_config):
    fresh_config.setenv(_config.ENV_VAR, "max_split_size_mb:64")
    assert _config.get_config().max_split_size == 64 * MiB
    assert _config.get_allocator_settings() == "max_split_size_mb:64"
    fresh_config.setenv(_config.ENV_VAR, "max_split_size_mb:128")
    assert _config.get_config().max_split_size == 64 * MiB  # read once


def test_bad_env_raises_on_first_use(fresh_config):
    fresh_config.setenv(_config.ENV_VAR, "nonsense:1")
    with pytest.raises(ValueError, match="Unrecognized key 'nonsense'"):
        _config.get_config()


def test_set_allocator_settings_applies_to_existing(fresh_config):
    b = SimulatedBackend()
    a = _allocator.get_allocator(b, 0)
    assert a.stats()["max_split_size"] == -1
    _config.set_allocator_settings("max_split_size_mb:40")
    assert _config.get_allocator_settings() == "max_split_size_mb:40"
    assert a.config.max_split_size == 40 * MiB
    # a 40 MiB request is oversize: the segment is never split for a smaller request
    p = a.malloc(40 * MiB, 0)
    a.free(p)
    q = a.malloc(3 * MiB, 0)
    assert q != p
    a.free(q)
    # memory_stats' max_split_size is captured when the allocator is created, as in PyTorch
    assert a.stats()["max_split_size"] == -1


def test_set_allocator_settings_bad_string_changes_nothing(fresh_config):
    _config.set_allocator_settings("max_split_size_mb:40")
    with pytest.raises(ValueError):
        _config.set_allocator_settings("max_split_size_mb:oops")
    assert _config.get_allocator_settings() == "max_split_size_mb:40"


def test_expandable_falls_back_for_backend_without_vm(fresh_config):
    """expandable_segments:True is a request (torch warns "expandable_segments not supported
    on this platform" once and behaves as False): an allocator of a backend without virtual
    memory takes the setting, warns once per backend and keeps ordinary segments."""
    b = SimulatedBackend(vm=False, name="novmcfg")
    a = _allocator.get_allocator(b, 0)
    with fresh_fallback_warnings():
        with pytest.warns(UserWarning, match="'novmcfg' backend has no virtual memory"):
            _config.set_allocator_settings("expandable_segments:True")
        assert _config.get_config().expandable_segments
        assert a.config.expandable_segments and not a.expandable
        # a new allocator made with the option: no second warning for the backend
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            a2 = DeviceCachingAllocator(b, 0, parse_config("expandable_segments:True"))
            p = a2.malloc(1024, 0)
            a2.set_config(parse_config("expandable_segments:True,page_reuse:True"))
            q = a2.malloc(3 * MiB, 0)
    assert not a2.expandable and not a2._page_reuse
    assert [s["is_expandable"] for s in a2.snapshot_segments()] == [False, False]
    st = a2.stats()
    assert st["segment.all.current"] == 2 and st["num_device_alloc"] == 2
    assert a2.memory_reserved() == 2 * MiB + 20 * MiB == b.used
    a2.free(p)
    a2.free(q)
    a2.empty_cache()
    assert a2.memory_reserved() == 0 == b.used


def test_page_reuse_key():
    assert parse_config("expandable_segments:True,page_reuse:True").page_reuse
    with pytest.raises(ValueError, match="page_reuse"):
        parse_config("page_reuse:maybe")


@pytest.mark.parametrize("bad", ["1.5", "-0.1", "nan", "inf"])
def test_per_process_memory_fraction_out_of_range_uses_pytorch_message(bad):
    # c10's CUDAAllocatorConfig: "per_process_memory_fraction is invalid, set it in [0.0, 1.0]"
    with pytest.raises(ValueError, match=r"per_process_memory_fraction is invalid, set it in "
                                         r"\[0\.0, 1\.0\]; got " + bad):
        parse_config(f"per_process_memory_fraction:{bad}")
    from accelrt import memory
    before = memory.get_allocator_settings()
    with pytest.raises(ValueError, match=r"per_process_memory_fraction is invalid, set it in "
                                         r"\[0\.0, 1\.0\]"):
        memory.set_allocator_settings(f"per_process_memory_fraction:{bad}")
    assert memory.get_allocator_settings() == before


@pytest.mark.parametrize("good", ["0", "0.0", "0.25", "1", "1.0"])
def test_per_process_memory_fraction_accepts_the_closed_unit_interval(good):
    assert parse_config(f"per_process_memory_fraction:{good}").per_process_memory_fraction \
        == float(good)


#: Observed on torch 2.14.1: torch._C._accelerator_setAllocatorSettings (and
#: PYTORCH_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF, read at the first getAllocatorSettings) raise
#: IndexError('stoull') for each of these and IndexError('stod') for the floats; the same
#: keys at 18446744073709551615 (2**64 - 1) are taken.
_BEYOND_STOULL = ["max_split_size_mb", "max_non_split_rounding_mb", "large_segment_size_mb",
                  "pinned_reserve_segment_size_mb", "pinned_max_round_threshold_mb",
                  "pinned_max_cached_size_mb", "roundup_power2_divisions"]


def test_numbers_beyond_stoull_and_stod_are_refused(fresh_config):
    _config.set_allocator_settings("max_split_size_mb:40")
    bad = ([f"{key}:18446744073709551616" for key in _BEYOND_STOULL]
           + ["max_split_size_mb:+18446744073709551616", "max_split_size_mb:99999999999999999999999",
              "roundup_power2_divisions:[18446744073709551616:4]",
              "roundup_power2_divisions:[64:18446744073709551616]",
              "pinned_num_register_threads:18446744073709551616"])
    for setting in bad:
        with pytest.raises(ValueError, match=r"18446744073709551615 \(2\*\*64 - 1\) is read, as "
                                             r"PyTorch's std::stoull reads it"):
            _config.set_allocator_settings(setting)
    for setting in ("per_process_memory_fraction:1e-400", "per_process_memory_fraction:1e-310",
                    "per_process_memory_fraction:-1e-400", "garbage_collection_threshold:1e-310"):
        with pytest.raises(ValueError, match="least normal double, as PyTorch's std::stod"):
            _config.set_allocator_settings(setting)
    assert _config.get_allocator_settings() == "max_split_size_mb:40"
    fresh_config.setattr(_config, "_current", None)
    fresh_config.setenv(_config.ENV_VAR, "max_split_size_mb:18446744073709551616")
    with pytest.raises(ValueError, match=r"^ACCELRT_ALLOC_CONF='max_split_size_mb:1844674407370"
                                         r"9551616': .*out of range"):
        _config.get_config()
    # the largest stoull reads is still taken (clamped), and so are 0 and normal doubles
    cfg = parse_config("max_split_size_mb:18446744073709551615,per_process_memory_fraction:0e5,"
                       "garbage_collection_threshold:2.3e-308")
    assert cfg.max_split_size == SIZE_MAX - MiB + 1 and cfg.per_process_memory_fraction == 0.0
