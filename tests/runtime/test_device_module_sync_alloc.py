"""Sync debug mode and pluggable-allocator functions bound in every device module (torch.cuda's
``set_sync_debug_mode``, ``get_sync_debug_mode``, ``change_current_allocator``,
``get_allocator_backend``, ``CUDAPluggableAllocator``), with the device type fixed."""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

import accelrt as acc
import numpy as np

from accelrt import _backend
from accelrt.backends.cpu import CpuBackend
from tests.helpers.pluggable import numpy_allocator

MODULES = ["cpu", "cuda", "opencl"]


@pytest.fixture
def fresh() -> Iterator[tuple[str, Any]]:
    """A fresh 2-device cpu backend under a unique name and its device module."""
    name = "cpusd_" + uuid.uuid4().hex[:8]
    acc.backends.register(name, lambda: CpuBackend(num_devices=2, name=name))
    yield name, acc.backends.device_module(name)
    acc.set_sync_debug_mode("default", name)
    with _backend._lock:   # there is no public unregister
        _backend._factories.pop(name, None)
        _backend._instances.pop(name, None)
        _backend._failures.pop(name, None)


@pytest.mark.parametrize("mod", MODULES)
def test_every_module_has_the_names(mod: str) -> None:
    m = getattr(acc, mod)
    for n in ("set_sync_debug_mode", "get_sync_debug_mode", "change_current_allocator",
              "get_allocator_backend", "CUDAPluggableAllocator", "PluggableAllocator"):
        assert n in m.__all__ and hasattr(m, n), n
    assert m.CUDAPluggableAllocator is acc.memory.PluggableAllocator


def test_module_mode_is_its_backends_mode(fresh: tuple[str, Any]) -> None:
    name, ns = fresh
    assert ns.get_sync_debug_mode() == 0
    ns.set_sync_debug_mode("warn")
    assert ns.get_sync_debug_mode() == 1 == acc.get_sync_debug_mode(name)
    assert acc.get_sync_debug_mode("cpu") == 0          # other backends untouched
    with pytest.warns(UserWarning, match="synchronizing"):
        ns.synchronize(0)   # the module's own synchronize is checked, once initialised
    ns.set_sync_debug_mode("error")
    with pytest.raises(RuntimeError, match="synchronizing"):
        ns.synchronize(1)
    with pytest.raises(RuntimeError, match="synchronizing"):
        ns.current_stream(0).synchronize()
    ns.set_sync_debug_mode(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ns.synchronize(0)
    with pytest.raises(RuntimeError, match="invalid value of debug_mode"):
        ns.set_sync_debug_mode("loud")


def test_module_allocator_backend_and_swap_refusal(fresh: tuple[str, Any]) -> None:
    name, ns = fresh
    assert ns.get_allocator_backend() == "native"
    alloc = acc.memory.PluggableAllocator.from_callables(
        lambda size, device, stream: 0, lambda ptr, size, device, stream: None)
    ns.memory_allocated(0)   # a query alone does not initialise the allocator
    acc.memory.caching_allocator_delete(acc.memory.caching_allocator_alloc(64, f"{name}:0"))
    with pytest.raises(RuntimeError, match="Can't swap an already initialized allocator"):
        ns.change_current_allocator(alloc)
    assert ns.get_allocator_backend() == "native"


def test_module_swaps_its_backends_allocator(fresh: tuple[str, Any]) -> None:
    name, ns = fresh
    plug, held = numpy_allocator()
    assert isinstance(plug, ns.CUDAPluggableAllocator)
    ns.change_current_allocator(plug)
    assert ns.get_allocator_backend() == "pluggable"
    assert acc.memory.get_allocator_backend("cpu") == "native"
    x = acc.asarray(np.arange(4, dtype=np.int32), device=f"{name}:0", copy=True)
    assert len(held) == 1 and x.tolist() == [0, 1, 2, 3]
    del x
    assert held == {}
