"""PyTorch's ``test/test_cuda_nvml_based_avail.py`` (``TestVisibleDeviceParses``,
``TestExtendedCUDAIsAvail``) and ``test_cuda.py``'s ``test_device_count_not_cached_pre_init``,
checked on accelrt's CUDA discovery against torch 2.15's ``torch/cuda/__init__.py``
(``_parse_visible_devices``, ``_transform_uuid_to_ordinals``, ``_device_count_nvml``,
``device_count``, ``is_available``).

These are host-side checks: NVML and the driver are small stand-ins (as in
``test_cuda_discovery.py``) that answer the way a machine with N GPUs, or without a driver,
answers. What is tested is how accelrt reads ``CUDA_VISIBLE_DEVICES`` and when it counts again,
not a GPU. Each test names the PyTorch test it mirrors.
"""

from __future__ import annotations

import enum
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from helpers.registry import module_backends

import accelrt as acc
from accelrt import _backend as registry
from accelrt.backends.cpu import CpuBackend
from accelrt.backends.cuda import _cu, _discovery
from accelrt.backends.cuda._discovery import _map_visible, parse_visible_devices
from accelrt.testing import SimulatedBackend

CPU, SIM = "s35vdcpu", "s35vdsim"

_backends = module_backends({
    CPU: lambda: CpuBackend(num_devices=2, async_streams=False, name=CPU),
    SIM: lambda: SimulatedBackend(device_count=2, name=SIM),
})


# ---------------------------------------------------------------------- stand-ins

class _Res(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_NO_DEVICE = 100


class _LibMissing(Exception):
    """What cuda.bindings raises when libcuda.so cannot be loaded."""


def _driver(*, count: int = 2, loads: bool = True) -> Any:
    """A ``cuda.bindings.driver`` with ``count`` GPUs (``loads=False``: no libcuda)."""
    calls: list[str] = []

    def cuInit(flags: int) -> tuple[Any]:
        calls.append("cuInit")
        if not loads:
            raise _LibMissing("libcuda.so.1: cannot open shared object file")
        return (_Res.CUDA_SUCCESS if count else _Res.CUDA_ERROR_NO_DEVICE,)

    return types.SimpleNamespace(
        CUDA_VERSION=12000, CUresult=_Res, cuInit=cuInit, calls=calls,
        cuDriverGetVersion=lambda: (_Res.CUDA_SUCCESS, 12040),
        cuDeviceGetCount=lambda: (_Res.CUDA_SUCCESS, count),
        cuGetErrorString=lambda e: (_Res.CUDA_SUCCESS, b"stand-in"))


class _NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


def _nvml(uuids: list[str] | None = None, *, count: int = 2, loads: bool = True) -> Any:
    """A ``pynvml`` seeing ``uuids`` (or ``count`` made-up ones); ``loads=False``: no
    libnvidia-ml (``NVML_ERROR_LIBRARY_NOT_FOUND``)."""
    if uuids is None:
        uuids = [f"GPU-{i:04d}c0de-1111-2222-3333-444455556666" for i in range(count)]
    state = {"inits": 0}

    def nvmlInit() -> None:
        if not loads:
            raise _NVMLError(12)
        state["inits"] += 1

    return types.SimpleNamespace(
        NVMLError=_NVMLError, NVML_ERROR_DRIVER_NOT_LOADED=9, state=state,
        nvmlInit=nvmlInit, nvmlShutdown=lambda: None,
        nvmlSystemGetCudaDriverVersion=lambda: 12040,
        nvmlDeviceGetCount=lambda: len(uuids),
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetUUID=lambda h: uuids[h].encode())


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Any, Any], None]]:
    """``machine(driver, nvml)``: make the process see these stand-ins (``nvml=None``:
    nvidia-ml-py not installed), with a fresh discovery and ``cuda`` backend; both are
    forgotten afterwards."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("PYTORCH_NVML_BASED_CUDA_CHECK", raising=False)

    def install(driver: Any, nvml: Any) -> None:
        monkeypatch.setattr(_cu, "load_driver", lambda: driver)
        monkeypatch.setattr(_cu, "load_nvml", lambda: nvml)
        monkeypatch.setattr(_cu, "driver", lambda: driver)
        _discovery.reset()
        registry._reset_for_tests("cuda")

    yield install
    monkeypatch.undo()
    _discovery.reset()
    registry._reset_for_tests("cuda")


# ---------------------------------------------------------------------- TestVisibleDeviceParses

@pytest.mark.parametrize(("value", "expected"), [
    ("1gpu2,2ampere", [1, 2]),          # what follows the digits is ignored
    ("0, 1, 2, -1, 3", [0, 1, 2]),      # a negative ordinal ends the list
    ("0, 1, 2, 1", []),                 # a repeated ordinal: no device
    ("2, +3, -0, 5", [2, 3, 0, 5]),     # unary plus and minus, as strtol
    ("+0", [0]),
    ("-0,0", []),                       # -0 is 0, so 0 is repeated
    ("one,two,3,4", []),                # no number first: no device
    ("4,3,two,one", [4, 3]),            # no number later: the end of the list
    ("1,,2", [1]),
    ("\t2,\n3 ", [2, 3]),               # ordinals are stripped
    ("", []),
    ("GPU-9e8d35e3", ["GPU-9e8d35e3"]),
    ("GPU-123, 2", ["GPU-123"]),        # ordinals are no UUIDs
    ("MIG-89c850dc", ["MIG-89c850dc"]),
    ("GPU-a,MIG-b", ["GPU-a"]),         # the first entry's prefix decides
    ("GPU-a,GPU-b,GPU-a", []),
    ("GPU-a, GPU-b", ["GPU-a"]),        # UUIDs are not stripped: " GPU-b" is none
    ("MIG-a, MIG-b", ["MIG-a"]),
    (" GPU-a", []),                     # nor is the whole value: read as an ordinal
    ("gpu-a", []),                      # the prefix is case-sensitive
])
def test_visible_devices_parse_as_torch(value: str, expected: list[Any]) -> None:
    """Mirrors test_cuda_nvml_based_avail.py TestVisibleDeviceParses.test_env_var_parsing
    (every value it uses, and torch 2.15's ``_parse_visible_devices`` on the others)."""
    assert parse_visible_devices(value) == expected


@pytest.mark.parametrize("value", ["+", "-", "1,-", "0,+x", "2,--1"])
def test_an_entry_that_is_only_a_sign_ends_the_list(value: str) -> None:
    """torch 2.15's ``_parse_visible_devices`` raises ValueError from ``int('-')`` here (so
    ``torch.cuda.device_count()`` raises); accelrt ends the list, as strtol reads no number
    (docs/differences.md)."""
    expected = [int(t) for t in value.split(",")[:-1]]
    assert parse_visible_devices(value) == expected


_UUIDS = [
    "GPU-71f0a2c4-0000-4000-8000-000000000001",
    "GPU-5ab3e9d0-0000-4000-8000-000000000002",
    "GPU-c8e14b77-0000-4000-8000-000000000003",
    "GPU-ccd09f15-0000-4000-8000-000000000004",
    "GPU-2d6b1e83-0000-4000-8000-000000000005",
    "GPU-90aa37c2-0000-4000-8000-000000000006",
    "GPU-c3f5d261-0000-4000-8000-000000000007",
    "GPU-4e07bb19-0000-4000-8000-000000000008",
]


@pytest.mark.parametrize(("prefixes", "expected"), [
    (["GPU-5ab3e9d0"], [1]),
    (["GPU-c8", "GPU-5ab3e9d0"], [2, 1]),
    (["GPU-5ab3e9d0", "GPU-4", "GPU-90"], [1, 7, 5]),
    (["GPU-777", "GPU-5ab3e9d0"], []),              # no match first: nothing
    (["GPU-5ab3e9d0", "GPU-777", "GPU-90"], [1]),   # no match later: the end
    (["GPU-5ab3e9d0", "GPU-c", "GPU-90"], [1]),     # an ambiguous prefix: the end
    (["GPU-5ab3e9d0", "GPU-90", "GPU-5ab"], []),    # the same GPU twice: nothing
])
def test_uuid_prefixes_map_to_nvml_indices(prefixes: list[str], expected: list[int]) -> None:
    """Mirrors test_cuda_nvml_based_avail.py TestVisibleDeviceParses.test_partial_uuid_resolver
    (torch's ``_transform_uuid_to_ordinals``), on accelrt's mapping."""
    assert _map_visible(list(prefixes), _UUIDS) == expected


@pytest.mark.parametrize(("value", "expected"), [
    ("GPU-5ab3e9d0,GPU-c8", 2),
    ("GPU-5ab3e9d0, GPU-c8", 1),     # the second entry is no UUID (not stripped)
    ("GPU-5ab3e9d0,GPU-c,GPU-90", 1),
    ("GPU-5ab3e9d0,GPU-90,GPU-5ab", 0),
])
def test_uuid_prefixes_count_through_nvml(machine: Any, monkeypatch: pytest.MonkeyPatch,
                                          value: str, expected: int) -> None:
    """Mirrors test_partial_uuid_resolver end to end: ``acc.cuda.device_count()`` with
    ``CUDA_VISIBLE_DEVICES`` holding UUID prefixes, as torch's ``_device_count_nvml``."""
    drv = _driver(count=8)
    machine(drv, _nvml(_UUIDS))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    assert acc.cuda.device_count() == expected
    assert acc.cuda.is_available() is (expected > 0)
    assert drv.calls == []   # NVML answered: the driver was never initialised


@pytest.mark.parametrize(("value", "expected"), [
    (None, 2), ("1, 0", 2), ("1, 5, 0", 1), ("5", 0), ("0,0", 0), ("2, +1, -0", 0),
    ("+1, -0", 2),
])
def test_ordinals_count_through_nvml(machine: Any, monkeypatch: pytest.MonkeyPatch,
                                     value: str | None, expected: int) -> None:
    """Mirrors test_cuda_nvml_based_avail.py TestVisibleDeviceParses.
    test_ordinal_parse_visible_devices: two GPUs, an ordinal past the last one ends the list
    (torch's ``_device_count_nvml`` with ``_raw_device_count_nvml`` answering 2)."""
    machine(_driver(count=2), _nvml(count=2))
    if value is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    assert acc.cuda.device_count() == expected
    assert acc.cuda.is_available() is (expected > 0)


def test_mig_uuids_are_counted_by_the_driver(machine: Any,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's ``_device_count_nvml`` returns -1 for ``MIG-`` entries, so ``device_count``
    asks the CUDA runtime; accelrt asks the driver likewise."""
    drv = _driver(count=1)
    machine(drv, _nvml(count=2))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-89c850dc")
    assert acc.cuda.device_count() == 1
    assert "cuInit" in drv.calls


# ---------------------------------------------------------------------- caching rules

def test_device_count_not_cached_pre_init(machine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Mirrors test_cuda.py test_device_count_not_cached_pre_init: a change of
    ``CUDA_VISIBLE_DEVICES`` before CUDA is initialised is seen by the next ``device_count()``;
    once it is initialised the count stays (torch caches it after its lazy init, the driver
    read the variable at ``cuInit``)."""
    drv = _driver(count=2)
    machine(drv, _nvml(count=2))
    assert acc.cuda.device_count() == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert acc.cuda.device_count() == 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    assert acc.cuda.device_count() == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    registry.get_backend("cuda")._init_driver()   # the first device use: cuInit
    assert drv.calls == ["cuInit"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert acc.cuda.device_count() == 1
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert acc.cuda.device_count() == 1


def test_hiding_every_gpu_before_init_makes_cuda_unavailable(
        machine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's NVML-based ``is_available()`` is ``device_count() > 0``: with every GPU hidden
    before CUDA is initialised it is False, even after an earlier True."""
    machine(_driver(count=2), _nvml(count=2))
    assert acc.cuda.is_available() and acc.cuda.device_count() == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert acc.cuda.device_count() == 0
    assert acc.cuda.is_available() is False
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert acc.cuda.is_available() and acc.cuda.device_count() == 1


def test_unchanged_variable_is_not_probed_again(machine: Any) -> None:
    """Repeated ``device_count()``/``is_available()`` calls with the same environment ask NVML
    once (torch asks it on every call before init; the answer is the same)."""
    nvml = _nvml(count=2)
    machine(_driver(count=2), nvml)
    for _ in range(3):
        assert acc.cuda.device_count() == 2 and acc.cuda.is_available()
    assert nvml.state["inits"] == 1


# ---------------------------------------------------------------------- TestExtendedCUDAIsAvail

@pytest.mark.parametrize("nvml_check", ["1", "0", None])
@pytest.mark.parametrize("nvml_avail", [True, False])
def test_is_available_and_fork(machine: Any, monkeypatch: pytest.MonkeyPatch,
                               nvml_check: str | None, nvml_avail: bool) -> None:
    """Mirrors test_cuda_nvml_based_avail.py TestExtendedCUDAIsAvail.test_cuda_is_available:
    after ``is_available()``, may a forked child use CUDA? In torch only when
    ``PYTORCH_NVML_BASED_CUDA_CHECK=1`` and NVML answered; accelrt always asks NVML first
    (the variable is not read, docs/differences.md), so the child is refused only when NVML
    could not answer and the driver was initialised."""
    if nvml_check is not None:
        monkeypatch.setenv("PYTORCH_NVML_BASED_CUDA_CHECK", nvml_check)
    drv = _driver(count=2)
    machine(drv, _nvml(count=2, loads=nvml_avail))
    assert acc.cuda.is_available()
    assert acc.cuda.device_count() == 2
    assert (drv.calls == []) is nvml_avail
    b = registry.get_backend("cuda")
    b._after_fork()   # what the child runs (os.register_at_fork)
    assert b._forked is (not nvml_avail)
    if not nvml_avail:
        with pytest.raises(acc.BackendUnavailableError,
                           match="Cannot re-initialize CUDA in forked subprocess"):
            b.init_device(0)


@pytest.mark.parametrize("value", [None, "", "0", "1, 0", "GPU-5ab3e9d0", "MIG-1", "-1"])
@pytest.mark.parametrize("libs", ["no-driver", "no-bindings"])
def test_no_driver_gives_zero_and_false(machine: Any, monkeypatch: pytest.MonkeyPatch,
                                        value: str | None, libs: str) -> None:
    """On a machine without the NVIDIA driver (or without cuda-bindings) torch's
    ``device_count()`` is 0 and ``is_available()`` False, without an exception, whatever
    ``CUDA_VISIBLE_DEVICES`` holds; so are accelrt's."""
    if libs == "no-driver":
        machine(_driver(loads=False), _nvml(loads=False))
    else:
        machine(None, None)
    for v in (value, "0"):   # a later change of the variable changes nothing
        if v is None:
            monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        else:
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", v)
        assert acc.cuda.device_count() == 0
        assert acc.cuda.is_available() is False
        assert acc.cuda.unavailable_reason() is not None


@pytest.mark.parametrize("name", [CPU, SIM])
def test_is_available_agrees_with_device_count(name: str) -> None:
    """``is_available()`` is ``device_count() > 0`` (torch's NVML-based rule), and neither
    raises, on the cpu and simulated backends."""
    mod: Any = acc.backends.device_module(name)
    assert mod.device_count() == 2
    assert mod.is_available() is True


def test_every_gpu_hidden_at_the_first_query_is_not_remembered(
        machine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch 2.15's NVML-based ``device_count()`` with ``CUDA_VISIBLE_DEVICES=""`` at the first
    call is 0, and 1 after the variable becomes ``"1"`` (nothing is cached before CUDA is
    initialised). accelrt kept the registry's first failure ("no NVIDIA GPU is visible") for
    the process, so the count stayed 0 and ``is_available()`` False (s35 review)."""
    drv = _driver(count=2)
    machine(drv, _nvml(count=2))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert acc.cuda.device_count() == 0 and acc.cuda.is_available() is False
    assert "no NVIDIA GPU is visible" in (acc.cuda.unavailable_reason() or "")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert acc.cuda.unavailable_reason() is None
    assert acc.cuda.device_count() == 1 and acc.cuda.is_available()
    assert drv.calls == []   # NVML answered: the driver was not initialised
