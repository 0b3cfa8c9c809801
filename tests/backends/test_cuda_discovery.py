"""CUDA discovery: reasons, CUDA_VISIBLE_DEVICES, NVML-first and no context (runs without a GPU).

The NVIDIA packages are replaced in these tests by small stand-ins that fail the way a machine
without them fails (module missing, NVML library missing, driver too old, no GPU), so what is
tested is accelrt's decision and message, not a GPU.
"""

from __future__ import annotations

import enum
import subprocess
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from accelrt import _backend as registry
from accelrt.backends.cuda import CudaBackend, _cu, _discovery
from accelrt.backends.cuda._discovery import Probe, parse_visible_devices


class FakeResult(enum.IntEnum):
    """The CUresult values discovery looks at (same numbers as CUDA's)."""

    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_OUT_OF_MEMORY = 2
    CUDA_ERROR_NOT_INITIALIZED = 3
    CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803   # the driver API has no "insufficient driver"
    CUDA_ERROR_NO_DEVICE = 100


class DriverLibMissing(Exception):
    """What cuda.bindings raises when libcuda cannot be loaded (the type varies by version)."""


def make_driver(*, init: int | None = 0, version: int = 12040, count: int = 1,
                bindings: int = 12000) -> Any:
    """A cuda.bindings.driver stand-in. ``init=None``: libcuda missing."""
    calls: list[str] = []

    def cuInit(flags: int) -> tuple[Any]:
        calls.append("cuInit")
        if init is None:
            raise DriverLibMissing("libcuda.so.1: cannot open shared object file")
        return (FakeResult(init),)

    def cuDriverGetVersion() -> tuple[Any, int]:
        calls.append("cuDriverGetVersion")
        return (FakeResult.CUDA_SUCCESS, version)

    def cuDeviceGetCount() -> tuple[Any, int]:
        calls.append("cuDeviceGetCount")
        return (FakeResult.CUDA_SUCCESS, count)

    def forbidden(*args: Any) -> None:
        raise AssertionError("discovery must not create a CUDA context")

    def cuGetErrorString(err: Any) -> tuple[Any, bytes]:
        return (FakeResult.CUDA_SUCCESS, b"fake description")

    return types.SimpleNamespace(
        CUDA_VERSION=bindings, CUresult=FakeResult, cuInit=cuInit,
        cuDriverGetVersion=cuDriverGetVersion, cuDeviceGetCount=cuDeviceGetCount,
        cuGetErrorString=cuGetErrorString, cuCtxCreate=forbidden,
        cuDevicePrimaryCtxRetain=forbidden, cuCtxSetCurrent=forbidden, calls=calls)


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


def make_nvml(*, init_error: int | None = None, count: int = 2, version: int = 12040,
              uuids: list[str] | None = None) -> Any:
    """A pynvml stand-in; ``init_error`` is the NVML error nvmlInit raises."""
    state = {"inits": 0, "shutdowns": 0}
    uuids = uuids or [f"GPU-{i:08x}-aaaa-bbbb-cccc-000000000000" for i in range(count)]

    def nvmlInit() -> None:
        if init_error is not None:
            raise NVMLError(init_error)
        state["inits"] += 1

    def nvmlShutdown() -> None:
        state["shutdowns"] += 1

    return types.SimpleNamespace(
        NVMLError=NVMLError, NVML_ERROR_DRIVER_NOT_LOADED=9, NVML_ERROR_LIBRARY_NOT_FOUND=12,
        nvmlInit=nvmlInit, nvmlShutdown=nvmlShutdown,
        nvmlSystemGetCudaDriverVersion=lambda: version,
        nvmlDeviceGetCount=lambda: count,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetUUID=lambda h: uuids[h].encode(),
        state=state)


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Install stand-ins: ``env(driver=..., nvml=...)``; restores discovery afterwards."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def install(driver: Any, nvml: Any) -> Probe:
        monkeypatch.setattr(_cu, "load_driver", lambda: driver)
        monkeypatch.setattr(_cu, "load_nvml", lambda: nvml)
        _discovery.reset()
        return _discovery.probe()

    yield install
    monkeypatch.undo()
    _discovery.reset()
    registry._reset_for_tests("cuda")


# ---------------------------------------------------------------------- reasons

def test_cuda_bindings_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", None)
    _discovery.reset()
    registry._reset_for_tests("cuda")
    try:
        reason = CudaBackend.unavailable_reason()
        assert reason is not None
        assert "cuda-bindings" in reason and 'pip install "accelrt[cuda]"' in reason
        full = registry.unavailable_reason("cuda")
        assert full is not None and full.startswith("Backend 'cuda' is not available:")
        assert 'pip install "accelrt[cuda]"' in full
    finally:
        monkeypatch.undo()
        _discovery.reset()
        registry._reset_for_tests("cuda")


def test_no_driver_when_nvml_and_libcuda_are_missing(env: Any) -> None:
    p = env(make_driver(init=None), make_nvml(init_error=12))
    assert p.count == 0 and p.source == "none"
    assert "no NVIDIA driver was found" in p.reason
    assert "libnvidia-ml" in p.reason and "libcuda" in p.reason


def test_no_driver_without_nvidia_ml_py(env: Any) -> None:
    p = env(make_driver(init=None), None)
    assert "nvidia-ml-py is not installed" in p.reason and "libcuda" in p.reason


def test_driver_not_loaded(env: Any) -> None:
    p = env(make_driver(), make_nvml(init_error=9))
    assert p.count == 0 and "kernel module is not loaded" in p.reason


def test_driver_too_old_via_nvml(env: Any) -> None:
    drv = make_driver(bindings=13000)
    p = env(drv, make_nvml(version=12040))
    assert p.count == 0
    assert "supports CUDA 12.4" in p.reason and "CUDA 13.x driver" in p.reason
    assert 'pip install "cuda-bindings==12.*"' in p.reason
    assert drv.calls == []   # NVML answered: the driver library was never touched


def test_driver_too_old_via_driver(env: Any) -> None:
    p = env(make_driver(init=803, version=11080, bindings=12000), None)
    assert p.source == "driver" and "supports CUDA 11.8" in p.reason


def test_driver_new_enough_is_usable(env: Any) -> None:
    p = env(make_driver(bindings=12090), make_nvml(version=12020, count=1))
    assert p.reason is None and p.count == 1   # minor versions are compatible


def test_no_gpu_via_nvml(env: Any) -> None:
    p = env(make_driver(), make_nvml(count=0))
    assert p.count == 0 and "no NVIDIA GPU is visible" in p.reason
    assert "CUDA_VISIBLE_DEVICES" in p.reason


def test_no_gpu_via_driver(env: Any) -> None:
    p = env(make_driver(init=100), None)
    assert p.source == "driver" and "no NVIDIA GPU is visible" in p.reason


def test_other_driver_failure_names_the_error(env: Any) -> None:
    p = env(make_driver(init=3), None)
    assert "CUDA_ERROR_NOT_INITIALIZED" in p.reason and "fake description" in p.reason


# ---------------------------------------------------------------------- counting

def test_nvml_first_and_no_context(env: Any) -> None:
    drv, nvml = make_driver(), make_nvml(count=3)
    p = env(drv, nvml)
    assert (p.count, p.source, p.reason, p.nvml_indices) == (3, "nvml", None, (0, 1, 2))
    assert drv.calls == []
    assert nvml.state["inits"] == nvml.state["shutdowns"] == 1


def test_driver_fallback_counts_without_context(env: Any) -> None:
    drv = make_driver(count=2)
    p = env(drv, make_nvml(init_error=12))
    assert (p.count, p.source, p.reason) == (2, "driver", None)
    assert drv.calls == ["cuInit", "cuDriverGetVersion", "cuDeviceGetCount"]


@pytest.mark.parametrize(("value", "expected"), [
    ("2,0", (2, 0)),
    ("1, 3", (1, 3)),
    ("0,7,1", (0,)),          # ordinal past the last GPU stops the list
    ("", ()),
    ("-1", ()),
    ("0,0", ()),              # repeated: CUDA exposes nothing
    ("GPU-00000002", (2,)),   # UUID prefix
    ("GPU-0000000,1", ()),    # ambiguous prefix stops the list
])
def test_visible_devices_mapped_through_nvml(env: Any, monkeypatch: pytest.MonkeyPatch,
                                              value: str, expected: tuple[int, ...]) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    p = env(make_driver(), make_nvml(count=4))
    assert p.nvml_indices == expected and p.count == len(expected)
    if not expected:
        assert "CUDA_VISIBLE_DEVICES" in p.reason


def test_mig_uuids_use_the_driver_count(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-1234")
    drv = make_driver(count=1)
    p = env(drv, make_nvml(count=1))
    assert (p.count, p.source) == (1, "driver")


def test_probe_is_cached_until_reset(env: Any) -> None:
    nvml = make_nvml(count=2)
    env(make_driver(), nvml)
    _discovery.probe()
    assert nvml.state["inits"] == 1
    _discovery.reset()
    _discovery.probe()
    assert nvml.state["inits"] == 2


@pytest.mark.parametrize(("value", "expected"), [
    ("0,1,2", [0, 1, 2]),
    ("3 , 1", [3, 1]),
    ("1,abc,2", [1]),
    ("1x,2", [1, 2]),          # leading digits count, as strtoul does
    ("GPU-a,GPU-b,0", ["GPU-a", "GPU-b"]),
    ("MIG-a", ["MIG-a"]),
    ("1,1", []),
    ("", []),
])
def test_parse_visible_devices(value: str, expected: list[Any]) -> None:
    assert parse_visible_devices(value) == expected


# ---------------------------------------------------------------------- this machine

def test_import_accelrt_imports_no_nvidia_package() -> None:
    code = ("import sys\n"
            "before = set(sys.modules)\n"   # a .pth of cuda-bindings may preload 'cuda'
            "import accelrt, accelrt.cuda, accelrt.backends.cuda\n"
            "new = set(sys.modules) - before\n"
            "bad = [m for m in new if m.split('.')[0] in ('cuda', 'pynvml', 'nvtx')]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_reason_or_devices_on_this_machine() -> None:
    reason = CudaBackend.unavailable_reason()
    p = _discovery.probe()
    assert (reason is None) == (p.count > 0)
    if reason is not None:
        cause, _, todo = reason.partition("; ")
        assert cause and todo   # "<what is wrong>; <what to do>"
