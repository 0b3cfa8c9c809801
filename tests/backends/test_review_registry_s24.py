"""Review by tests (s24): the backend registry against hostile names, factories, backends and
entry points, device strings, ``accelrt info`` and the testing tools. What could hang or end
the process runs in a subprocess with a timeout."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import accelrt as acc
from accelrt.backends.cpu import CpuBackend
from accelrt.testing import SimulatedBackend, backend_conformance, leak_check


def _name(prefix: str) -> str:
    return prefix + "_" + uuid.uuid4().hex[:8] + "x"


@pytest.fixture
def reg() -> Iterator[Callable[..., str]]:
    """register(prefix, factory_of_name) under a fresh name; unregistered at the end."""
    names: list[str] = []

    def add(prefix: str, make: Callable[[str], Any]) -> str:
        name = _name(prefix)
        acc.backends.register(name, lambda: make(name))
        names.append(name)
        return name

    yield add
    for n in names:
        acc.backends.unregister(n)


def _sim(**methods: Any) -> Callable[[str], SimulatedBackend]:
    cls = type("Hostile", (SimulatedBackend,), methods)
    return lambda name: cls(name=name, device_count=2)


# ---------------------------------------------------------------------- names

@pytest.mark.parametrize("bad", ["", "Cpu", "MYDEV", "my:dev", "my dev", "my-dev", "1dev", "é",
                                 "dev\n", "cpu:0"])
def test_register_refuses_malformed_names(bad: str) -> None:
    with pytest.raises(ValueError, match="lower-case identifier"):
        acc.backends.register(bad, CpuBackend)
    assert bad not in acc.backends.registered()


@pytest.mark.parametrize("bad", [3, None, b"dev", ("dev",)])
def test_register_refuses_non_str_names(bad: object) -> None:
    with pytest.raises(TypeError, match="must be a str"):
        acc.backends.register(bad, CpuBackend)  # type: ignore[arg-type]


@pytest.mark.parametrize("builtin", ["cpu", "cuda", "opencl"])
def test_builtin_names_need_replace(builtin: str) -> None:
    with pytest.raises(ValueError, match="already registered.*replace=True"):
        acc.backends.register(builtin, CpuBackend)


def test_names_with_digits_at_the_end_are_device_types() -> None:
    # accelrt's device strings accept digits in the type (tests register "cpu4"), unlike
    # c10's letters-only grammar; such a name round-trips
    name = _name("dev") + "7"
    acc.backends.register(name, lambda: CpuBackend(name=name))
    try:
        d = acc.device(f"{name}:1")
        assert (d.type, d.index, str(d)) == (name, 1, f"{name}:1")
    finally:
        acc.backends.unregister(name)


# ---------------------------------------------------------------------- factories

@pytest.mark.parametrize(("make", "words"), [
    (lambda name: 1 / 0, "ZeroDivisionError"),
    (lambda name: None, "returned NoneType, not an accelrt.backends.Backend"),
    (lambda name: object(), "returned object, not an accelrt.backends.Backend"),
    (lambda name: CpuBackend(), "named 'cpu'"),
])
def test_broken_factories_are_reported_not_fatal(reg: Any, make: Any, words: str) -> None:
    name = reg("fac", make)
    with pytest.raises(acc.BackendUnavailableError, match=words) as info:
        acc.backends.get_backend(name)
    assert repr(name) in str(info.value)
    assert name not in acc.backends.available() and "cpu" in acc.backends.available()
    assert words.split()[0] in (acc.backends.unavailable_reason(name) or "")
    with pytest.raises(acc.BackendUnavailableError):
        acc.set_current_accelerator(name)


def test_slow_factory_holds_up_only_its_own_name(reg: Any) -> None:
    calls: list[int] = []

    def slow(name: str) -> SimulatedBackend:
        calls.append(1)
        time.sleep(0.5)
        return SimulatedBackend(name=name)

    name = reg("slow", slow)
    other = reg("fast", lambda n: SimulatedBackend(name=n))
    got: list[Any] = []
    threads = [threading.Thread(target=lambda: got.append(acc.backends.get_backend(name)))
               for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.1)
    t0 = time.perf_counter()
    assert name in acc.backends.registered()
    assert acc.backends.get_backend(other).name == other
    assert time.perf_counter() - t0 < 0.3           # was ~0.4 s: the factory held the lock
    for t in threads:
        t.join(10)
    assert len(calls) == 1 and len(got) == 3 and all(b is got[0] for b in got)


def test_factory_asking_for_itself_is_an_error_not_a_hang(reg: Any) -> None:
    def selfish(name: str) -> Backend_:
        return acc.backends.get_backend(name)

    name = reg("selfish", selfish)
    with pytest.raises(acc.BackendUnavailableError, match="while creating it"):
        acc.backends.get_backend(name)


Backend_ = acc.backends.Backend


# ---------------------------------------------------------------------- device_count

@pytest.mark.parametrize(("value", "words"), [
    (-1, "reports no devices"), (0, "reports no devices"), (10**12, "more than the 1024"),
    (2.5, "returned 2.5 (float), not an int"), ("2", "returned '2' (str)"),
    (True, "(bool), not an int"), (None, "(NoneType)")])
def test_device_count_must_be_a_sane_int(reg: Any, value: object, words: str) -> None:
    name = reg("count", _sim(device_count=lambda self: value))
    with pytest.raises(acc.BackendUnavailableError, match=words.replace("(", r"\(")
                       .replace(")", r"\)")):
        acc.backends.get_backend(name)
    assert name not in acc.backends.available()


def test_device_count_that_raises(reg: Any) -> None:
    def boom(self: Any) -> int:
        raise OSError("driver gone")

    name = reg("countraise", _sim(device_count=boom))
    assert "OSError: driver gone" in (acc.backends.unavailable_reason(name) or "")


# ---------------------------------------------------------------------- raw operations

def _bad_malloc(value: Any) -> Callable[..., Any]:
    def malloc(self: Any, index: int, size: int) -> Any:
        if callable(value):
            return value(self, index, size)
        return value
    return malloc


def _raises(self: Any, index: int, size: int) -> int:
    raise KeyError("no memory manager")


@pytest.mark.parametrize(("value", "words"), [
    ("0x10", "returned '0x10', not an address"), (-4096, "returned -4096"),
    (4096.0, "returned 4096.0"), (None, "returned None"),
    (_raises, "raised KeyError")])
def test_bad_malloc_is_a_device_error_and_records_nothing(reg: Any, value: Any,
                                                          words: str) -> None:
    name = reg("malloc", _sim(malloc=_bad_malloc(value)))
    dev = f"{name}:0"
    with pytest.raises(acc.DeviceError, match=words) as info:
        acc.empty(1024, device=dev)
    assert name in str(info.value)
    assert acc.memory_allocated(dev) == 0 and acc.memory_reserved(dev) == 0
    assert acc.memory_stats(dev).get("num_alloc_retries", 0) == 0


def test_malloc_returning_an_address_in_use_is_refused(reg: Any) -> None:
    first: list[int] = []

    def same(self: Any, index: int, size: int) -> int:
        first.append(SimulatedBackend.malloc(self, index, size))
        return first[0]     # the second call hands out the first address again

    name = reg("dup", _sim(malloc=same))
    dev = f"{name}:0"
    a = acc.empty(12 << 20, device=dev, dtype="uint8")     # its own segment
    reserved = acc.memory_reserved(dev)
    with pytest.raises(acc.DeviceError, match=f"{name} backend's malloc.*{first[0]:#x}.*not freed"):
        acc.empty(12 << 20, device=dev, dtype="uint8")
    assert acc.memory_reserved(dev) == reserved and acc.memory_allocated(dev) == 12 << 20
    del a
    acc.backends.device_module(name).empty_cache()
    assert acc.memory_reserved(dev) == 0


@pytest.mark.parametrize(("ret", "words"), [
    (lambda self, i, p: 0, "returned 0x0, the handle of the default stream"),
    (lambda self, i, p: "s", "returned 's', not a stream handle"),
    (lambda self, i, p: 77, "returned 0x4d"),
])
def test_bad_stream_handles_are_refused(reg: Any, ret: Any, words: str) -> None:
    def create(self: Any, index: int, priority: int) -> Any:
        SimulatedBackend.stream_create(self, index, priority)
        return ret(self, index, priority)

    name = reg("stream", _sim(stream_create=create))
    keep = []
    with pytest.raises(acc.DeviceError, match=words):
        for _ in range(2):     # 77 is refused the second time: the first is live
            keep.append(acc.Stream(f"{name}:0"))
    assert all(s != acc.current_stream(f"{name}:0") for s in keep)


def test_stream_create_raising_names_the_backend(reg: Any) -> None:
    def create(self: Any, index: int, priority: int) -> int:
        raise LookupError("queue table full")

    name = reg("streamraise", _sim(stream_create=create))
    with pytest.raises(acc.DeviceError, match=f"{name} backend's stream_create.*queue table"):
        acc.Stream(f"{name}:0")
    assert acc.current_stream(f"{name}:0").query()   # the default stream still works


def test_a_destroyed_handle_may_come_back(reg: Any) -> None:
    name = reg("reuse", lambda n: SimulatedBackend(name=n))
    s = acc.Stream(f"{name}:0")
    s.close()
    assert acc.Stream(f"{name}:0") is not None


# ---------------------------------------------------------------------- device strings

@pytest.mark.parametrize(("text", "exc"), [
    ("cpu:-1", ValueError), ("cpu:01", ValueError), ("cpu: 1", ValueError),
    ("cpu:1.0", ValueError), ("cpu:", ValueError), (":0", ValueError), ("", ValueError),
    ("cpu:0:0", ValueError), (" cpu", ValueError), ("cpu\n", ValueError),
    ("cpu:\uff11", ValueError), ("CPU:0", acc.BackendUnavailableError),
    ("mybackend:0", acc.BackendUnavailableError), ("cuda0", acc.BackendUnavailableError)])
def test_device_strings(text: str, exc: type[Exception]) -> None:
    with pytest.raises(exc) as info:
        acc.device(text)
    assert isinstance(info.value, (ValueError, RuntimeError))   # PyTorch: RuntimeError


def test_unknown_device_type_suggests_the_lower_case_one() -> None:
    with pytest.raises(acc.BackendUnavailableError, match="did you mean 'cpu:0'"):
        acc.device("CPU:0")


# ---------------------------------------------------------------------- current accelerator

@pytest.mark.parametrize("bad", ["nosuch", "", "Bad:Name", "CPU"])
def test_set_current_accelerator_refuses_unknown_names(bad: str) -> None:
    before = acc.current_accelerator()
    with pytest.raises(acc.BackendUnavailableError, match="nknown backend"):
        acc.set_current_accelerator(bad)
    assert acc.current_accelerator() == before


def test_set_current_accelerator_refuses_non_str() -> None:
    with pytest.raises(TypeError, match="backend name"):
        acc.set_current_accelerator(3)  # type: ignore[arg-type]


def _run(code: str, env: dict[str, str] | None = None, timeout: float = 60) -> Any:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout, check=False)


def test_garbage_accelrt_accelerator_is_a_clear_error_not_a_crash_at_import() -> None:
    code = ("import accelrt as acc\n"
            "print(acc.is_available(), acc.device_count())\n"
            "try:\n    acc.current_accelerator()\nexcept acc.BackendUnavailableError as e:\n"
            "    print('ERR', e)\n"
            "print(acc.empty(2, device='cpu:0').device)\n")
    out = _run(code, {"ACCELRT_ACCELERATOR": "no:such thing"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "False 0"
    assert lines[1].startswith("ERR ACCELRT_ACCELERATOR='no:such thing' names a backend")
    assert lines[2] == "cpu:0"


# ---------------------------------------------------------------------- accelrt info

_INFO_KEYS = {"version", "python", "numpy", "platform", "build", "build_reason",
              "compiled_modules", "allocator_build", "random_host", "random_host_isa",
              "current_accelerator", "ok",
              "entry_point_problems", "backends"}


def _dist(tmp_path: Path, lines: str) -> Path:
    d = tmp_path / "brokenep-1.0.dist-info"
    d.mkdir()
    (d / "METADATA").write_text("Metadata-Version: 2.1\nName: brokenep\nVersion: 1.0\n")
    (d / "entry_points.txt").write_text("[accelrt.backends]\n" + lines)
    return tmp_path


def test_info_json_with_broken_entry_points(tmp_path: Path) -> None:
    path = _dist(tmp_path, "brokenep = no_such_module_s24:Backend\n"
                           "exits = s24_exits:Backend\n"
                           "Bad:Name = os:getcwd\ncpu = no_such_module_s24:Cpu\n")
    (tmp_path / "s24_exits.py").write_text("raise SystemExit(3)\n")
    env = {"PYTHONPATH": str(path), "ACCELRT_ACCELERATOR": "cpu"}
    out = _run("from accelrt.cli import main; raise SystemExit(main(['info', '--json', "
               "'--no-check']))", env)
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert set(info) == _INFO_KEYS and info["current_accelerator"] == "cpu"
    by_name = {b["name"]: b for b in info["backends"]}
    assert by_name["cpu"]["available"]        # the entry point named cpu did not shadow it
    assert "ModuleNotFoundError" in by_name["brokenep"]["reason"]
    assert "SystemExit(3)" in by_name["exits"]["reason"]
    assert set(by_name["brokenep"]) == {"name", "available", "reason", "devices"}
    problems = " ".join(info["entry_point_problems"])
    assert "'Bad:Name'" in problems and "'cpu' is a built-in backend" in problems
    text = _run("from accelrt.cli import main; raise SystemExit(main(['info', '--no-check']))",
                env)
    assert text.returncode == 0 and "brokenep  unavailable  ModuleNotFoundError" in text.stdout
    assert "note: entry point 'cpu'" in text.stdout


def test_info_json_stays_valid_with_a_hostile_backend() -> None:
    code = ("import json, math\nfrom accelrt import backends\n"
            "from accelrt.testing import SimulatedBackend\nfrom accelrt.cli import collect_info\n"
            "class Odd(SimulatedBackend):\n"
            "    def get_device_properties(self, i):\n"
            "        return {**super().get_device_properties(i), 'clock': math.nan, "
            "'peak': math.inf}\n"
            "n = [0]\n"
            "class Flaky(SimulatedBackend):\n"
            "    def device_count(self):\n        n[0] += 1\n"
            "        return 1 if n[0] == 1 else 10**15\n"
            "backends.register('oddsim', lambda: Odd(name='oddsim'))\n"
            "backends.register('flakysim', lambda: Flaky(name='flakysim'))\n"
            "info = collect_info(self_check=False, backends=['cpu', 'oddsim', 'flakysim'])\n"
            "print(json.dumps(info, allow_nan=False))\n")
    out = _run(code, timeout=60)
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    odd, flaky = info["backends"][1], info["backends"][2]
    assert odd["devices"][0]["properties"]["clock"] == "nan"
    assert not flaky["available"] and "more than the 1024" in flaky["reason"]


def test_jsonable_maps_non_finite_numbers() -> None:
    import numpy as np

    from accelrt.cli import _jsonable
    assert _jsonable({"a": [math.inf, -math.inf, np.float32("nan"), 1.5]}) == \
        {"a": ["inf", "-inf", "nan", 1.5]}


# ---------------------------------------------------------------------- testing tools

def test_leak_check_catches_each_kind(reg: Any) -> None:
    name = reg("leaky", lambda n: SimulatedBackend(name=n))
    dev = f"{name}:0"
    kept: list[Any] = []
    with pytest.raises(AssertionError, match=f"{dev}"), leak_check():
        kept.append(acc.empty(256, device=dev))
    b = acc.backends.get_backend(name)
    with pytest.raises(AssertionError, match="stream"), leak_check():
        kept.append(b.stream_create(0, 0))
    with pytest.raises(AssertionError, match="event"), leak_check():
        kept.append(b.event_create(0, False, False, False))
    b.stream_destroy(0, kept[1])
    b.event_destroy(0, kept[2])
    kept.clear()
    with leak_check():
        acc.empty(256, device=dev)


def test_conformance_names_the_broken_check() -> None:
    class NoCopy(CpuBackend):
        def memcpy(self, index: int, dst: int, src: int, nbytes: int, kind: str,
                   stream: Any) -> None:
            if self._closed:
                raise self._closed_error("memcpy")

    with pytest.raises(AssertionError) as info:
        backend_conformance.run(lambda: NoCopy(name="nocopy"))
    assert str(info.value).startswith("conformance check 'memcpy' failed on the nocopy "
                                      "backend: h2d + d2d + d2h lost bytes")
