"""Bad inputs that used to slip through: non-ASCII and sloppy device strings and counts, a
malformed ``mempool_id``, a stream handle that names no stream, and an environment error
blamed on the wrong variable."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

import accelrt as acc
from accelrt import memory
from accelrt._device import _parse
from accelrt.backends.cpu._config import config_error, parse_memory_size
from accelrt.backends.cuda._discovery import parse_visible_devices

# PyTorch's grammar (c10/core/Device.cpp): type, then optionally ':' and [1-9][0-9]* or 0,
# ASCII only, nothing else (no spaces, signs, '_' separators or leading zeros).
BAD_DEVICE_STRINGS = ["cpu:\u0661", "cpu:\u00b2", "cpu:\uff11", "cpu: 1", " cpu:1", "cpu:1 ",
                      "cpu:+1", "cpu:-1", "cpu:1_0", "cpu:01", "cpu:00", "cpu:0x1", "cpu:1\n",
                      "cp\u00fc", "cpu:", ":0", "cpu:0:1", "1cpu", "cpu:1.0"]


@pytest.mark.parametrize("s", BAD_DEVICE_STRINGS)
def test_device_strings_take_ascii_digits_only(s: str) -> None:
    with pytest.raises(ValueError, match="Invalid device string") as info:
        acc.device(s)
    assert repr(s) in str(info.value)
    assert "invalid literal" not in str(info.value)


@pytest.mark.parametrize("call", [
    lambda s: acc.memory_allocated(s),
    lambda s: acc.get_device_properties(s),
    lambda s: acc.Stream(s),
    lambda s: acc.empty(4, device=s),
    lambda s: acc.device("cpu", 0) == acc.device(s),
    lambda s: acc.synchronize(s),
], ids=["memory_allocated", "get_device_properties", "Stream", "empty", "device", "sync"])
@pytest.mark.parametrize("s", ["cpu:\u0661", "cpu:\u00b2"])
def test_every_entry_point_parses_the_same_way(call: Callable[[str], Any], s: str) -> None:
    with pytest.raises(ValueError, match="Invalid device string"):
        call(s)


def test_good_device_strings() -> None:
    assert acc.device("cpu:0").index == 0
    assert acc.device("cpu:10").index == 10
    assert acc.device("cpu").index is None
    assert _parse("_priv:3") == ("_priv", 3)             # PyTorch allows a leading '_'
    assert _parse("cpu4:2") == ("cpu4", 2)
    with pytest.raises(acc.BackendUnavailableError, match="Unknown backend 'nosuch_type9'.*Known backends: cuda, opencl, cpu"):
        acc.device("nosuch_type9:2")                     # no such backend: refused when made
    with pytest.raises(ValueError, match="Could not parse device index"):
        acc.device("cpu:" + "9" * 5000)                  # not int()'s 4300-digit error


@pytest.mark.parametrize("value, expected", [
    ("\u0661", []), ("0,\u0661", [0]), ("\u00b2", []), ("1,0", [1, 0]), ("2 ,1x", [2, 1])])
def test_cuda_visible_devices_ascii_digits_only(value: str, expected: list[int]) -> None:
    assert parse_visible_devices(value) == expected


@pytest.mark.parametrize("value", ["\u0664", "+2", "1_0", "\u00b2", "2.0", "0x2", "0"])
def test_cpu_device_count_ascii_digits_only(value: str) -> None:
    err = config_error({"ACCELRT_CPU_DEVICES": value})
    assert err is not None and err.startswith(f"ACCELRT_CPU_DEVICES={value!r}")


def test_cpu_device_count_accepts_spaces_around_digits() -> None:
    assert config_error({"ACCELRT_CPU_DEVICES": " 2 "}) is None


@pytest.mark.parametrize("value", ["\u0661GiB", "1_0", "+1", "\u00b2MiB", "1e3"])
def test_memory_sizes_ascii_digits_only(value: str) -> None:
    with pytest.raises(ValueError, match="is not a memory size"):
        parse_memory_size(value)
    err = config_error({"ACCELRT_CPU_MEMORY": value})
    assert err is not None and err.startswith("ACCELRT_CPU_MEMORY=")


def test_bad_cpu_memory_names_its_variable() -> None:
    # the cpu backend as the current accelerator also where a GPU would be the default
    env = dict(os.environ, ACCELRT_CPU_MEMORY="abc", ACCELRT_ACCELERATOR="cpu")
    code = ("import accelrt as acc\n"
            "for f in (lambda: acc.empty(3), acc.current_device_index, acc.synchronize):\n"
            "    try:\n"
            "        f()\n"
            "    except acc.BackendUnavailableError as e:\n"
            "        print(e)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=60)
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 3, proc.stdout + proc.stderr
    for line in lines:
        assert "ACCELRT_CPU_MEMORY='abc'" in line and "ACCELRT_CPU_DEVICES" not in line


@pytest.mark.parametrize("bad", ["x", (1,), 5, 1.5])
def test_memory_snapshot_rejects_a_malformed_mempool_id(bad: Any) -> None:
    with pytest.raises(TypeError, match="mempool_id must be a pair of ints"):
        memory.memory_snapshot(mempool_id=bad)


@pytest.mark.parametrize("bad", [("a", "b"), (True, 0), (1.0, 2)])
def test_memory_snapshot_rejects_mempool_id_items_that_are_no_ints(bad: Any) -> None:
    # torch 2.15: RuntimeError "mempool_id elements must be integers" (also a TypeError here)
    with pytest.raises(RuntimeError, match="mempool_id elements must be integers"):
        memory.memory_snapshot(mempool_id=bad)
    with pytest.raises(TypeError, match="mempool_id elements must be integers"):
        memory.memory_snapshot(mempool_id=bad)


def test_memory_snapshot_accepts_a_pool_id() -> None:
    assert memory.memory_snapshot(mempool_id=(0, 0)) == memory.memory_snapshot(
        mempool_id=[0, 0])
    pool = memory.MemPool()
    assert memory.memory_snapshot(mempool_id=pool.id) == []


def test_caching_allocator_alloc_rejects_a_dead_stream_handle(backend: str) -> None:
    dev = f"{backend}:0"
    with pytest.raises(ValueError, match="not a live stream handle"):
        memory.caching_allocator_alloc(512, dev, stream=0xDEAD0)
    with pytest.raises(ValueError, match="not a live stream handle"):
        memory.caching_allocator_alloc(512, dev, stream=-1)
    with pytest.raises(TypeError, match="Invalid type for stream argument"):
        memory.caching_allocator_alloc(512, dev, stream="s")
    before = acc.memory_allocated(dev)
    s = acc.Stream(dev)
    for stream in (s, s.stream_id, 0, None):
        p = memory.caching_allocator_alloc(512, dev, stream=stream)
        assert acc.memory_allocated(dev) == before + 512
        memory.caching_allocator_delete(p)
    assert acc.memory_allocated(dev) == before
