"""get_device_properties: attribute access as PyTorch's ``_CudaDeviceProperties``, item
access as before, a PyTorch-like repr, and a stable uuid on every backend;
get_device_capability()["supported_dtypes"] is a set."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import uuid
from typing import Any

import pytest

import accelrt as acc
from accelrt._properties import DeviceProperties, DeviceUUID, derived_uuid, make_properties
from helpers.typecheck import run_mypy

COMMON = {"name": str, "total_memory": int, "multi_processor_count": int, "major": int,
          "minor": int, "uuid": str, "L2_cache_size": int, "is_integrated": bool,
          "is_multi_gpu_board": bool, "warp_size": int, "max_threads_per_multi_processor": int,
          "regs_per_multiprocessor": int, "gcnArchName": str, "type": str, "index": int}


def test_attributes_and_items_agree(backend: str) -> None:
    p = acc.get_device_properties(f"{backend}:0")
    assert isinstance(p, DeviceProperties) and isinstance(p, dict)
    for key, typ in COMMON.items():
        assert isinstance(getattr(p, key), typ), key
        assert getattr(p, key) == p[key]
    assert p.type == backend and p.index == 0
    assert p.total_memory > 0 and p.multi_processor_count >= 1 and p.warp_size >= 1
    for key in p:                         # the backend's extras are attributes too
        assert getattr(p, key) == p[key]
    assert p.get("no such key") is None
    with pytest.raises(AttributeError, match="no attribute 'no_such_key'"):
        p.no_such_key  # type: ignore[attr-defined]  # noqa: B018


def test_backend_extras(backend: str) -> None:
    p = acc.get_device_properties(f"{backend}:0")
    if backend == "cpu":
        assert p.is_integrated is True and p["async_streams"] in (True, False)
        assert p.async_streams == p["async_streams"]  # type: ignore[attr-defined]
    elif backend == "opencl":
        assert p["vendor"] and p["memory_mode"] in ("svm", "buffer")
        assert p.max_threads_per_multi_processor >= 1


def test_attributes_are_read_only_and_results_independent(backend: str) -> None:
    p = acc.get_device_properties(f"{backend}:0")
    with pytest.raises(AttributeError, match="read-only"):
        p.name = "x"  # type: ignore[misc]
    with pytest.raises(AttributeError, match="read-only"):
        p.anything = 1  # type: ignore[attr-defined]
    p["name"] = "changed"                 # a fresh dict each call, as before
    assert acc.get_device_properties(f"{backend}:0").name != "changed"


def test_repr_like_pytorch() -> None:
    p = acc.get_device_properties("cpu:0")
    r = repr(p)
    assert r.startswith(f"DeviceProperties(name={p.name!r}, major=0, minor=0, "
                        f"total_memory={p.total_memory >> 20}MB, multi_processor_count="
                        f"{p.multi_processor_count}, uuid={p.uuid}, L2_cache_size=")
    assert r.endswith("type='cpu', index=0)")


def test_stays_a_dict_for_existing_code(backend: str) -> None:
    p = acc.get_device_properties(f"{backend}:0")
    assert p == acc.get_device_properties(f"{backend}:0") == dict(p)
    assert json.loads(json.dumps(p))["uuid"] == p.uuid
    q = pickle.loads(pickle.dumps(p))
    assert type(q) is DeviceProperties and q == p and q.uuid.bytes == p.uuid.bytes
    assert "total_memory" in dir(p) and "name" in p


def test_uuid_is_stable_and_distinct(backend: str) -> None:
    n = min(2, acc.backends.get_backend(backend).device_count())
    ids = [acc.get_device_properties(f"{backend}:{i}").uuid for i in range(n)]
    assert ids == [acc.get_device_properties(f"{backend}:{i}").uuid for i in range(n)]
    assert len(set(ids)) == len(ids)
    u = ids[0]
    assert isinstance(u, DeviceUUID) and str(uuid.UUID(u)) == u and len(u.bytes) == 16
    code = (f"import accelrt as acc; print(acc.get_device_properties({backend + ':0'!r}).uuid)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout.strip()
    assert out == u


def test_simulated_cpu_devices_have_distinct_uuids() -> None:
    from accelrt.backends.cpu import CpuBackend
    b = CpuBackend(num_devices=3)
    ids = {b.get_device_properties(i)["uuid"] for i in range(3)}
    assert len(ids) == 3
    assert ids == {CpuBackend(num_devices=3).get_device_properties(i)["uuid"] for i in range(3)}


def test_backends_without_a_uuid_get_a_derived_one() -> None:
    raw: dict[str, Any] = {"name": "Toy", "total_memory": 1 << 20, "multi_processor_count": 4}
    p = make_properties("toy", 2, raw)
    assert p.uuid == make_properties("toy", 2, raw).uuid != make_properties("toy", 3, raw).uuid
    assert p.uuid == derived_uuid("toy", 2, "Toy")
    assert (p.major, p.minor, p.warp_size, p.gcnArchName, p.is_integrated) == (0, 0, 1, "Toy",
                                                                               False)
    bad = make_properties("toy", 2, raw | {"uuid": "not a uuid"})
    assert str(uuid.UUID(bad.uuid)) == bad.uuid
    given = make_properties("toy", 2, raw | {"uuid": "00010203-0405-0607-0809-0A0B0C0D0E0F"})
    assert given.uuid == "00010203-0405-0607-0809-0a0b0c0d0e0f"
    assert list(given.uuid.bytes) == list(range(16))


def test_opencl_uuid_from_the_driver_when_offered() -> None:
    from accelrt.backends.opencl._backend import device_uuid

    class Platform:
        name = "P"

        def get_devices(self) -> list[Any]:
            return [a, b]

    class Dev:
        def __init__(self, ext: str, raw: bytes | None) -> None:
            self.name, self.vendor_id, self.extensions = "D", 7, ext
            self.platform = Platform()
            self._raw = raw

        def get_info(self, param: int) -> Any:
            if self._raw is None:
                raise RuntimeError("unknown param")
            return self._raw

    a = Dev("cl_khr_device_uuid", bytes(range(16)))
    b = Dev("", None)
    assert device_uuid(a) == "00010203-0405-0607-0809-0a0b0c0d0e0f"
    c = Dev("cl_khr_device_uuid", None)     # extension listed but unreadable: derived
    derived = device_uuid(b)
    assert derived == device_uuid(b) and uuid.UUID(derived)
    assert device_uuid(c) != derived        # c is not in the platform's list: position -1


def test_two_devices_of_one_platform_differ() -> None:
    from accelrt.backends.opencl._backend import device_uuid

    class Platform:
        name = "P"

        def get_devices(self) -> list[Any]:
            return devs

    class Dev:
        name, vendor_id, extensions = "Same", 1, ""
        platform = Platform()

    devs = [Dev(), Dev()]
    assert device_uuid(devs[0]) != device_uuid(devs[1])


def test_supported_dtypes_is_a_set(backend: str) -> None:
    cap = acc.get_device_capability(f"{backend}:0")
    assert isinstance(cap["supported_dtypes"], set)
    assert {"float32", "int32", "uint8"} <= cap["supported_dtypes"]
    cap["supported_dtypes"].add("x")      # a fresh set each call
    assert "x" not in acc.get_device_capability(f"{backend}:0")["supported_dtypes"]


def test_device_module_functions_return_the_same(backend: str) -> None:
    mod = getattr(acc, backend, None)
    if mod is None or not hasattr(mod, "get_device_properties"):
        pytest.skip(f"no accelrt.{backend} module here")
    p = mod.get_device_properties(f"{backend}:0")
    assert p.uuid == acc.get_device_properties(f"{backend}:0").uuid
    cap = mod.get_device_capability(f"{backend}:0")
    if backend == "cuda":                   # torch.cuda.get_device_capability: (major, minor)
        assert cap == (p.major, p.minor)
    else:
        assert isinstance(cap["supported_dtypes"], set)


def test_type_checkers_see_the_attributes(tmp_path: Any) -> None:
    pytest.importorskip("mypy")
    proc = run_mypy(tmp_path, "from accelrt._device import get_device_capability, "
                    "get_device_properties\n"
                    "p = get_device_properties('cpu:0')\n"
                    "reveal_type(p.name)\n"
                    "reveal_type(p.total_memory)\n"
                    "reveal_type(p.is_integrated)\n"
                    "reveal_type(p.uuid)\n"
                    "reveal_type(p['name'])\n"
                    "p.nmae\n"
                    "p.major = 3\n", name="user.py", timeout=110)
    lines = proc.stdout.splitlines()
    reveals = [ln.split("Revealed type is ")[1].replace("builtins.", "")
               for ln in lines if "Revealed type" in ln]
    assert reveals == ['"str"', '"int"', '"bool"', '"accelrt._properties.DeviceUUID"',
                       '"Any"'], proc.stdout
    assert any(":8:" in ln and "nmae" in ln for ln in lines), proc.stdout
    assert any(":9:" in ln and "error" in ln for ln in lines), proc.stdout
