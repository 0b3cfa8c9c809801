"""The core asks ``capabilities()`` before an optional operation and never calls one to find
out whether it works (issue 21 §5): ``Array.fill_`` and ``fill`` (``device_fill``), a
non-blocking copy's keep-alive and ``launch_host_func`` (``host_functions``)."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterator

import numpy as np
import pytest

import accelrt as acc
from accelrt import _backend
from accelrt.backends import Backend, Capabilities
from accelrt.backends.cpu import CpuBackend
from accelrt.testing import backend_conformance


class _Counting(CpuBackend):
    """Async cpu devices whose capabilities a test sets, counting fill/launch_host_func."""

    caps: dict[str, bool] = {}
    fills = 0
    host_funcs = 0

    def capabilities(self, index: int) -> Capabilities:
        return dataclasses.replace(super().capabilities(index), **self.caps)

    def fill(self, index: int, ptr: int, pattern: bytes, count: int, stream: int) -> None:
        type(self).fills += 1
        super().fill(index, ptr, pattern, count, stream)

    def launch_host_func(self, index: int, fn: Callable[[], None], stream: int) -> None:
        type(self).host_funcs += 1
        super().launch_host_func(index, fn, stream)


def _register(cls: type[CpuBackend]) -> str:
    name = "capask_" + uuid.uuid4().hex[:8]
    acc.backends.register(name, lambda: cls(num_devices=1, async_streams=True, name=name))
    return name


@pytest.fixture
def counting() -> Iterator[tuple[str, type[_Counting]]]:
    made: list[str] = []

    def make(**caps: bool) -> tuple[str, type[_Counting]]:
        cls = type("Counting", (_Counting,), {"caps": caps, "fills": 0, "host_funcs": 0})
        made.append(_register(cls))
        return made[-1], cls

    yield make   # type: ignore[misc]
    for name in made:
        acc.synchronize(f"{name}:0")
        with _backend._lock:
            _backend._factories.pop(name, None)
            inst = _backend._instances.pop(name, None)
            _backend._failures.pop(name, None)
        if inst is not None:
            inst.close()


@pytest.mark.parametrize("dtype", ["float32", "int16", "float64"])
def test_fill_uses_the_kernel_only_where_declared(counting, dtype: str) -> None:
    with_fill, cls_with = counting(device_fill=True)
    without, cls_without = counting(device_fill=False)
    for name, cls, calls in ((with_fill, cls_with, 1), (without, cls_without, 0)):
        x = acc.empty(37, dtype=dtype, device=f"{name}:0").fill_(3)
        assert np.array_equal(x.numpy(), np.full(37, 3, dtype))
        assert cls.fills == calls, name


def test_fill_without_the_operation_uploads(counting) -> None:
    name, cls = counting(device_fill=False)
    b = acc.backends.get_backend(name)
    b.fill = Backend.fill.__get__(b)            # the contract's default: NotImplementedError
    x = acc.empty(5, dtype="float32", device=f"{name}:0").fill_(-1.25)
    assert x.numpy().tolist() == [-1.25] * 5


def test_a_not_implemented_error_of_a_declared_fill_is_not_swallowed(counting) -> None:
    """Before, any NotImplementedError from ``fill`` sent ``fill_`` to the upload path, also
    one raised by a bug inside a backend that declares the operation."""
    name, cls = counting(device_fill=True)
    b = acc.backends.get_backend(name)

    def broken(*args: object) -> None:
        raise NotImplementedError("a bug deep inside the backend")

    b.fill = broken
    x = acc.empty(5, dtype="float32", device=f"{name}:0")
    with pytest.raises(NotImplementedError, match="a bug deep inside"):
        x.fill_(2.5)


def test_non_blocking_copy_without_host_functions_synchronizes_without_calling(
        counting) -> None:
    name, cls = counting(host_functions=False)
    x = acc.empty(1000, dtype="float32", device=f"{name}:0")
    host = np.arange(1000, dtype=np.float32)
    x.copy_(host, non_blocking=True)
    assert cls.host_funcs == 0            # never called to find out
    del host                              # the copy is done: the stream was synchronized
    assert x.numpy()[999] == 999.0


def test_non_blocking_copy_with_host_functions_holds_the_source(counting) -> None:
    name, cls = counting(host_functions=True)
    x = acc.empty(1000, dtype="float32", device=f"{name}:0")
    x.copy_(np.arange(1000, dtype=np.float32), non_blocking=True)
    assert cls.host_funcs >= 1
    assert x.numpy()[999] == 999.0


def test_conformance_suite_needs_fill_only_where_declared() -> None:
    name = "capask_" + uuid.uuid4().hex[:8]

    class NoFill(CpuBackend):
        fill = Backend.fill                      # type: ignore[assignment]

        def capabilities(self, index: int) -> Capabilities:
            return dataclasses.replace(super().capabilities(index), device_fill=False)

    class Lies(NoFill):
        def capabilities(self, index: int) -> Capabilities:
            return dataclasses.replace(super().capabilities(index), device_fill=True)

    checks = ["memset_fill", "capabilities_match_operations"]
    out = backend_conformance.run(lambda: NoFill(num_devices=1, name=name), checks=checks)
    assert out == dict.fromkeys(checks, "passed")
    for check in checks:   # each catches a backend that declares fill without it
        with pytest.raises((AssertionError, NotImplementedError)):
            backend_conformance.run(lambda: Lies(num_devices=1, name=name), checks=[check])
