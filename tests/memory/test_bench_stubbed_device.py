"""bench/bench_allocator.py's stubbed simulated device (``stubbed_device``, the "device
stubbed" rows of bench/bench_builds.py) keeps only the device's byte count and call counts:
the allocator must make the same choices on it as on the simulated device, address for
address, or those rows would time other work."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import bench_allocator as ba  # noqa: E402

TRACES = ROOT / "tests" / "data" / "traces"


def replay(a: Any, ops: Any) -> tuple[list[int], dict[str, Any], dict[str, int]]:
    handles: dict[int, int] = {}
    got = []
    for is_alloc, addr, size, stream in ops:
        if is_alloc:
            handles[addr] = a.malloc(size, stream)
            got.append(handles[addr])
        else:
            a.free(handles.pop(addr))
    calls = {k: v for k, v in a._b._devices[0].calls.items() if k != "vm_unmapped_mappings"}
    return got, dict(a.stats()), calls


@pytest.mark.parametrize("conf", ["expandable_segments:True",
                                  "expandable_segments:True,page_reuse:True"])
@pytest.mark.parametrize("name", ["dlrm_train", "pointcloud_varsize_train"])
def test_the_stubbed_device_gets_the_same_blocks(conf: str, name: str) -> None:
    impl = ba.Impl("this", "accelrt")
    ops = dict(ba._traces([str(TRACES)]))[name]
    real, stubbed = replay(impl.new(conf), ops), replay(impl.new_stubbed(conf), ops)
    assert real == stubbed
    assert stubbed[2]["vm_map"] > 0


def test_the_stubbed_device_refuses_a_mapping_beyond_its_capacity() -> None:
    impl = ba.Impl("this", "accelrt")
    dev = ba.stubbed_device(impl.backend)(capacity=8 << 20)
    assert dev.vm_map(0, 0, 6 << 20) and not dev.vm_map(0, 0, 4 << 20)
    dev.vm_unmap(0, 0, 6 << 20)
    assert dev.vm_map(0, 0, 8 << 20)
    assert dev._devices[0].calls["vm_map"] == 2 and dev._devices[0].calls["vm_unmap"] == 1
